"""Storage options: Lance's own keys, accepted once, validated once, translated once for obstore.

A user passes one set of options (``--storage-option``, ``--storage-options-file``, the
Python API, an Airflow connection) and it configures both Lance and our store, so the keys
are Lance's: the ``aws_*``, ``azure_*`` and ``google_*`` keys of the Rust ``object_store``
crate (with or without their family prefix, any case), its HTTP client keys shared by every
family (``allow_http``, timeouts, proxies), and Lance's own few (``client_max_retries``...).

- :func:`check_storage_options` refuses an unknown key naming it, with the nearest known key
  for a typo (a misspelt credential key would otherwise go unnoticed and the job run
  unauthenticated). Values are never quoted back: they may be credentials.
- :func:`for_obstore` turns the options into an obstore store configuration for one
  scheme: the family's keys as ``config``, client keys as ``client_options``, Lance's
  ``client_max_retries`` as our attempt count. Keys of another family are ignored, as Lance
  ignores them. Booleans and endpoints are checked here, so a bad value is exit 2 before
  any request.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from memwal.core.secrets import is_secret_key
from memwal.errors import BadInputError

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

#: The family prefix and key names of each scheme.
_FAMILIES: dict[str, tuple[str, frozenset[str]]] = {
    "s3": ("aws_", frozenset(_AWS_KEYS.split())),
    "az": ("azure_", frozenset(_AZURE_KEYS.split())),
    "abfss": ("azure_", frozenset(_AZURE_KEYS.split())),
    "gs": ("google_", frozenset(_GCS_KEYS.split())),
}
_CLIENT = frozenset(_CLIENT_KEYS.split())
_CLIENT_BOOLS = frozenset({"allow_http", "allow_invalid_certificates", "http1_only", "http2_only",
                           "http2_keep_alive_while_idle", "randomize_addresses"})
#: Family keys whose value is a boolean (checked here: object_store's own message would quote it).
_BOOLS = frozenset({"virtual_hosted_style_request", "skip_signature", "imdsv1_fallback", "unsigned_payload",
                    "disable_tagging", "s3_express", "request_payer", "sse_bucket_key_enabled", "use_emulator",
                    "storage_use_emulator", "use_fabric_endpoint", "use_azure_cli", "disable_bulk_delete"})
#: Family keys that are endpoints (an http:// one needs allow_http=true).
_ENDPOINTS = frozenset({"endpoint", "endpoint_url", "storage_endpoint", "base_url"})
#: Keys object_store does not take: read here (profile: boto3's credential chain) or by Lance only.
_NOT_FOR_OBSTORE = frozenset({"profile", "sts_endpoint"})
#: Attempts of one request when ``client_max_retries`` is not given (our retry, memwal.core.retry).
DEFAULT_ATTEMPTS = 5

_TRUE = frozenset({"1", "true", "on", "yes", "y"})
_FALSE = frozenset({"0", "false", "off", "no", "n"})


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
    """Check one storage option key (lower-cased); an unknown key names the nearest known one."""
    if not isinstance(key, str) or not key.strip():
        raise BadInputError(f"storage option key {key!r}: expected a non-empty name")
    k = key.strip().lower()
    if k in KNOWN_STORAGE_KEYS:
        return k
    near = difflib.get_close_matches(k, sorted(KNOWN_STORAGE_KEYS), n=1, cutoff=0.75)
    hint = f": did you mean {near[0]!r}?" if near else " (not a Lance or object_store option)"
    raise BadInputError(f"unknown storage option {key.strip()!r}{hint}")


def check_storage_options(options: dict[str, Any] | None) -> dict[str, str]:
    """Check every key of a storage option mapping; values become strings (never echoed)."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise BadInputError(f"storage options: expected a mapping, got {type(options).__name__}")
    out: dict[str, str] = {}
    for key, value in options.items():
        storage_option_key(key)
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif not isinstance(value, str | int | float):
            raise BadInputError(f"storage option {key}: expected a string, got {type(value).__name__}")
        out[str(key).strip()] = str(value)
    return out


def parse_bool(name: str, value: Any) -> bool:
    """A boolean storage option the way object_store reads it; BadInputError otherwise (the value is
    not quoted back: whatever was typed there may be a credential pasted under the wrong key)."""
    v = str(value).strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise BadInputError(f"storage option {name}: expected true or false")


@dataclass(frozen=True)
class ObstoreOptions:
    """One scheme's storage options, translated for obstore (see the module docstring)."""

    config: dict[str, str] = field(default_factory=dict)
    client_options: dict[str, Any] = field(default_factory=dict)
    attempts: int = DEFAULT_ATTEMPTS
    profile: str | None = None  # an AWS profile: credentials come from boto3's chain
    secrets: tuple[str, ...] = ()  # values never to appear in a message


def _obstore_key(scheme: str, name: str) -> str:
    """The key obstore's parser takes for a family key name (without its family prefix).

    object_store accepts most names both ways, but Azure's ``storage_*`` names only with
    their ``azure_`` prefix, and a few prefixed Azure aliases only without it.
    """
    if scheme in ("az", "abfss") and name.startswith("storage_"):
        return "azure_" + name
    return name


def _check_endpoint(key: str, value: str, allow_http: bool) -> None:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise BadInputError(f"storage option {key}={value!r}: expected an http(s):// URL")
    try:
        _ = parsed.port  # raises ValueError on a bad port
    except ValueError:
        raise BadInputError(f"storage option {key}={value!r}: bad port") from None
    if parsed.scheme == "http" and not allow_http:
        raise BadInputError(f"storage option {key}={value!r} is plain http: set allow_http=true")


def for_obstore(scheme: str, options: dict[str, str] | None) -> ObstoreOptions:
    """Translate (checked) storage options for an obstore store of ``scheme``."""
    family_prefix, family = _FAMILIES[scheme]
    config: dict[str, str] = {}
    client: dict[str, Any] = {}
    attempts, profile = DEFAULT_ATTEMPTS, None
    endpoints: list[tuple[str, str]] = []
    secrets = tuple(sorted({str(v) for k, v in (options or {}).items() if is_secret_key(k) and len(str(v)) >= 4}))
    for raw_key, raw_value in (options or {}).items():
        key, value = storage_option_key(raw_key), str(raw_value).strip()
        if key == "client_max_retries":
            try:
                retries = int(value)
            except ValueError:
                raise BadInputError(f"storage option {raw_key}={raw_value!r}: expected an integer") from None
            if retries < 0:
                raise BadInputError(f"storage option {raw_key}={raw_value!r}: must be >= 0")
            attempts = retries + 1
            continue
        if key in _LANCE_KEYS.split():
            continue  # read by Lance only
        owner, bare = _split(key)
        if owner not in (None, family_prefix) and bare not in _CLIENT:
            continue  # another family's key: Lance ignores it for this store, so do we
        if bare in _CLIENT:
            client[bare] = parse_bool(raw_key, value) if bare in _CLIENT_BOOLS else value
        elif bare in family:
            if bare in _BOOLS:
                value = "true" if parse_bool(raw_key, value) else "false"
            if bare in _ENDPOINTS:
                endpoints.append((str(raw_key), value))
            if bare == "profile":
                profile = value or None
            elif bare not in _NOT_FOR_OBSTORE and value:
                config[_obstore_key(scheme, bare)] = value
        # else: a bare name of another family only (e.g. ``service_account`` for s3): ignored
    allow_http = bool(client.get("allow_http", False))
    for key, value in endpoints:
        _check_endpoint(key, value, allow_http)
    if scheme == "s3":
        _check_aws_pair(config)
    return ObstoreOptions(config=config, client_options=client, attempts=attempts, profile=profile, secrets=secrets)


def _split(key: str) -> tuple[str | None, str]:
    """(family prefix or None, name without it) of a checked key: ``aws_region`` ->
    ("aws_", "region"); ``allow_http`` and Lance's own keys have no family."""
    for prefix, names in (("aws_", _AWS_KEYS), ("azure_", _AZURE_KEYS), ("google_", _GCS_KEYS)):
        name = key[len(prefix):]
        if key.startswith(prefix) and (name in _CLIENT or name in names.split()):
            return prefix, name
    return None, key


def _check_aws_pair(config: dict[str, str]) -> None:
    if bool(config.get("access_key_id")) != bool(config.get("secret_access_key")):
        raise BadInputError("storage options aws_access_key_id and aws_secret_access_key must be given together")
