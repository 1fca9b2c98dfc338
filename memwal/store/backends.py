"""The obstore backend of a location, built from the options translated once (memwal.store.options).

AWS credentials come from boto3's own chain (profiles, SSO, instance metadata) only when no
key is given: the one place boto3 still serves.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import obstore
from obstore.store import from_url

from memwal.errors import BadInputError
from memwal.store.failures import summary
from memwal.store.options import ObstoreOptions
from memwal.store.uri import Location


def backend_for(location: Location, options: ObstoreOptions) -> Any:
    """The obstore store for a bucket, with object_store's own retries off (ours retry)."""
    kwargs: dict[str, Any] = {
        "config": dict(options.config),
        "client_options": dict(options.client_options),
        "retry_config": {"max_retries": 0, "retry_timeout": timedelta(minutes=3)},
    }
    if location.scheme == "s3":
        provider = _aws_credentials(options, location)
        if provider is not None:
            kwargs["credential_provider"] = provider
    try:
        return from_url(location.bucket_url, **kwargs)
    except obstore.exceptions.BaseError as exc:
        raise BadInputError(f"storage options for {location.bucket_url}: {summary(exc, options.secrets)}") from None
    except (ValueError, TypeError) as exc:
        raise BadInputError(f"storage options for {location.bucket_url}: {summary(exc, options.secrets)}") from None


def _aws_credentials(options: ObstoreOptions, location: Location) -> Any:
    """boto3's credential chain, where object_store's own does not reach (docs/operations/object-stores.md).

    Explicit keys in the options, or ``aws_skip_signature``, need nothing here. Otherwise
    boto3 resolves credentials the way the AWS CLI does (environment, shared files and
    profiles, SSO, web identity, container and instance metadata), and no credentials at
    all is bad input before any request.
    """
    if options.config.get("access_key_id") or options.config.get("skip_signature") == "true":
        return None
    import boto3
    from obstore.auth.boto3 import Boto3CredentialProvider

    session = boto3.Session(profile_name=options.profile) if options.profile else boto3.Session()
    try:
        if session.get_credentials() is None:
            raise BadInputError(f"{location.root}: no credentials found (set aws_access_key_id and "
                                "aws_secret_access_key, a profile with aws_profile, or the AWS environment)")
        return Boto3CredentialProvider(session)
    except BadInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - botocore's profile and config errors
        raise BadInputError(f"{location.root}: AWS credentials: {summary(exc, options.secrets)}") from None
