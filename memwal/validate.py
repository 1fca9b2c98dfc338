"""Validation of user-supplied values, one function per kind of value.

The CLI's argparse converters and the Python API (``memwal.actions.run_action``) both
call these, so a value refused on the command line is refused the same way from Python,
and before anything is read or written. Every refusal is a :class:`BadInputError`
naming the option and saying what is wrong.

Why so strict: ``float("nan")`` compares false with everything, so ``nan < 0`` passes a
naive "not negative" check and a NaN grace period silently disables the reader grace
gate; ``inf`` or ``1e300`` seconds overflow datetime arithmetic deep inside a job.
"""

from __future__ import annotations

import math
from typing import Any

from memwal.errors import BadInputError

#: Longest duration accepted anywhere (100 years): anything longer is a typo, and
#: larger values overflow timestamp arithmetic.
MAX_DURATION_SECONDS = 100 * 365.25 * 24 * 3600

#: Largest integer option (counts, rows, bytes): what a signed 64-bit field can hold.
MAX_INT = 2**63 - 1


def _number(name: str, value: Any) -> float:
    """A finite float from ``value`` (text or number); bools and NaN/inf are refused."""
    if isinstance(value, bool):
        raise BadInputError(f"{name}: expected a number, got {value!r}")
    try:
        n = float(value)
    except (TypeError, ValueError):
        raise BadInputError(f"{name}: {value!r} is not a number") from None
    if not math.isfinite(n):
        raise BadInputError(f"{name}: {value!r} is not a finite number")
    return n


def duration(name: str, value: Any, *, allow_zero: bool = True) -> float:
    """Seconds: finite, not negative (positive unless ``allow_zero``), at most 100 years."""
    n = _number(name, value)
    if n < 0 or (n == 0 and not allow_zero):
        raise BadInputError(f"{name}: {value!r} must be {'non-negative' if allow_zero else 'positive'}")
    if n > MAX_DURATION_SECONDS:
        raise BadInputError(f"{name}: {value!r} seconds is absurd (at most {MAX_DURATION_SECONDS:.0f}, 100 years)")
    return n


def fraction(name: str, value: Any) -> float:
    """A fraction of rows: finite and in [0, 1]."""
    n = _number(name, value)
    if not 0.0 <= n <= 1.0:
        raise BadInputError(f"{name}: {value!r} must be between 0 and 1")
    return n


def positive_int(name: str, value: Any) -> int:
    """A count: an integer from 1 to 2**63-1 (text like ``1e3`` or ``2.5`` is refused)."""
    if isinstance(value, bool) or isinstance(value, float):
        raise BadInputError(f"{name}: expected an integer, got {value!r}")
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise BadInputError(f"{name}: {value!r} is not an integer") from None
    if n <= 0:
        raise BadInputError(f"{name}: {value!r} must be positive")
    if n > MAX_INT:
        raise BadInputError(f"{name}: {value!r} is too large (at most {MAX_INT})")
    return n


#: What ``--expire-versions`` takes to keep every base-table version.
NEVER = "never"


def expiry(name: str, value: Any) -> float | str:
    """A version-expiry age in seconds, or ``never`` (keep every version)."""
    if isinstance(value, str) and value.strip().lower() in (NEVER, "none"):
        return NEVER
    return duration(name, value)


def lease_ttl(name: str, value: Any) -> float:
    """A lease TTL: a positive duration (a zero TTL would expire at once)."""
    return duration(name, value, allow_zero=False)


# -- storage options -----------------------------------------------------------------
# The keys Lance hands to object_store, by family. object_store matches keys
# case-insensitively and accepts each family's key with or without its prefix
# (``aws_``, ``google_``, ``azure_``); HTTP client keys are shared by every family.
_CLIENT_KEYS = (
    "allow_http allow_invalid_certificates connect_timeout default_content_type default_headers http1_only "
    "http2_only http2_keep_alive_interval http2_keep_alive_timeout http2_keep_alive_while_idle "
    "http2_max_frame_size pool_idle_timeout pool_max_idle_per_host proxy_url proxy_ca_certificate proxy_excludes "
    "randomize_addresses read_timeout root_certificate timeout user_agent"
)
_AWS_KEYS = (
    "access_key_id secret_access_key region default_region bucket bucket_name endpoint endpoint_url token "
    "session_token imdsv1_fallback virtual_hosted_style_request unsigned_payload checksum_algorithm "
    "metadata_endpoint container_credentials_relative_uri container_credentials_full_uri "
    "container_authorization_token_file copy_if_not_exists conditional_put skip_signature disable_tagging "
    "disable_bulk_delete s3_express request_payer server_side_encryption sse_kms_key_id sse_bucket_key_enabled "
    "sse_customer_key_base64 role_arn role_session_name sts_endpoint web_identity_token_file profile"
)
_GCS_KEYS = (
    "service_account service_account_path service_account_key bucket bucket_name application_credentials "
    "base_url bearer_token skip_signature"
)
_AZURE_KEYS = (
    "account_name storage_account_name access_key account_key storage_account_key storage_access_key master_key "
    "client_id storage_client_id client_secret storage_client_secret tenant_id storage_tenant_id authority_id "
    "authority_host storage_authority_host sas_key sas_token storage_sas_key storage_sas_token token bearer_token "
    "storage_token use_emulator storage_use_emulator endpoint storage_endpoint use_fabric_endpoint msi_endpoint "
    "identity_endpoint object_id msi_resource_id federated_token_file use_azure_cli skip_signature container_name "
    "disable_tagging encryption_key credential_type fabric_token_service_url fabric_workload_host "
    "fabric_session_token fabric_cluster_identifier"
)
#: Lance's own keys (read by Lance itself, not passed to object_store).
_LANCE_KEYS = "client_max_retries client_retry_timeout download_retry_count expires_at_millis use_opendal"


def _known_storage_keys() -> frozenset[str]:
    """Every accepted key, lower case, with and without its family prefix."""
    keys: set[str] = set(_LANCE_KEYS.split())
    for prefix, names in (("aws_", _AWS_KEYS), ("google_", _GCS_KEYS), ("azure_", _AZURE_KEYS)):
        for name in (names + " " + _CLIENT_KEYS).split():
            keys.add(name)
            keys.add(prefix + name)
    return frozenset(keys)


KNOWN_STORAGE_KEYS = _known_storage_keys()


def storage_option_key(key: object) -> str:
    """Check one storage option key; an unknown key names the nearest known one (typos in
    credential keys would otherwise go unnoticed and the job run unauthenticated)."""
    import difflib

    if not isinstance(key, str) or not key.strip():
        raise BadInputError(f"storage option key {key!r}: expected a non-empty name")
    k = key.strip().lower()
    if k in KNOWN_STORAGE_KEYS:
        return k
    near = difflib.get_close_matches(k, sorted(KNOWN_STORAGE_KEYS), n=1, cutoff=0.75)
    hint = f": did you mean {near[0]!r}?" if near else " (not a Lance or object_store option)"
    raise BadInputError(f"unknown storage option {key.strip()!r}{hint}")


def storage_options(options: dict[str, Any] | None) -> dict[str, str]:
    """Check every key of a storage option mapping (values are checked by the store)."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise BadInputError(f"storage options: expected a mapping, got {type(options).__name__}")
    for key, value in options.items():
        storage_option_key(key)
        if value is not None and not isinstance(value, str | int | float | bool):
            raise BadInputError(f"storage option {key}: expected a string, got {type(value).__name__}")
    return dict(options)
