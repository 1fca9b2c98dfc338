"""Storage options hold credentials: they are never echoed and never put on a command line.

Any local user can read another process's command line (``ps``, ``/proc/<pid>/cmdline``),
so a launcher (the Airflow operators, scripts around ``spark-submit jobs/<action>.py``)
hands storage options to a job in a file only its user can read, written by
``storage_options_file`` and named with ``--storage-options-file PATH``; the file lives in
a private directory and is removed when the job ends. Everything that prints or logs
options or a malformed option goes through ``redact_storage_options`` / ``redact_pair``, which
mask the value of every key that looks like a credential.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from memwal.core.files import read_small_bytes
from memwal.errors import BadInputError

log = logging.getLogger(__name__)

# Substrings of storage-option keys whose values are credentials (Lance / object_store key
# names): aws_secret_access_key, aws_session_token, azure_storage_account_key, sas_key,
# google_service_account_key, client_secret, password ...
SENSITIVE_KEY_PARTS = ("secret", "password", "token", "key", "credential")
MASK = "***"
OPTIONS_FILE_NAME = "storage-options.json"
# A storage options file is a handful of keys; a bigger one is not what the user meant.
MAX_OPTIONS_FILE_BYTES = 1 << 20


def is_secret_key(key: str) -> bool:
    """Whether a storage option's value must never be shown (case-insensitive substring match)."""
    k = str(key).lower()
    return any(part in k for part in SENSITIVE_KEY_PARTS)


def redact_storage_options(options: Mapping[str, object] | None) -> dict[str, str]:
    """The options safe to print or log: every credential-like value replaced by ``***``."""
    return {str(k): (MASK if is_secret_key(k) else str(v)) for k, v in (options or {}).items()}


def redact_pair(pair: str) -> str:
    """A ``KEY=VALUE`` argument safe to echo in an error message.

    A well-formed pair keeps its key and loses a secret value; a malformed one (no ``=``,
    e.g. ``aws_secret_access_key:VALUE``) cannot be split reliably, so it is hidden whole
    when any part of it looks like a credential key; a value without a key is hidden too.
    """
    key, sep, value = pair.partition("=")
    if sep:
        return f"{key}={MASK if is_secret_key(key) or not key.strip() else value}"
    return MASK if is_secret_key(pair) else pair


def secret_keys_on_argv(argv: list[str]) -> list[str]:
    """Credential-like keys given as ``--storage-option KEY=VALUE`` in ``argv``: too late to
    hide them from ``ps``, but worth a warning that names ``--storage-options-file``."""
    keys = []
    for i, arg in enumerate(argv):
        if arg.startswith("--storage-option="):
            pair = arg.split("=", 1)[1]
        elif arg == "--storage-option" and i + 1 < len(argv):
            pair = argv[i + 1]
        else:
            continue
        key, sep, _ = pair.partition("=")
        if is_secret_key(key if sep else pair):
            keys.append(key.strip() if sep else MASK)
    return keys


# -- handing options to another process ---------------------------------------------------
def write_private_file(path: str, data: bytes) -> None:
    """Create ``path`` readable and writable by this user only; refuse an existing file or link.

    ``O_EXCL`` (with ``O_NOFOLLOW``) means no other user can have planted the file or a
    symlink there first, and mode 0600 is set at creation, so there is no moment at which
    the content is readable by anyone else.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask did
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


@contextmanager
def storage_options_file(options: Mapping[str, object], prefix: str = "memwal-") -> Iterator[str]:
    """A 0600 JSON file of ``options`` in a fresh 0700 directory, removed on exit (whatever happens).

    Pass its path to a job as ``--storage-options-file PATH``: only the path is on the
    command line, and the credentials are gone from disk once the job has ended.
    """
    directory = tempfile.mkdtemp(prefix=prefix)  # mode 0700, a name no one else can predict
    path = os.path.join(directory, OPTIONS_FILE_NAME)
    try:
        write_private_file(path, json.dumps({str(k): str(v) for k, v in options.items()}).encode())
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def read_storage_options_file(path: str) -> dict[str, str]:
    """The storage options in a JSON object file; every problem is one line naming the file.

    Values are never quoted back (they are credentials); keys are, so a typo can be found.
    """
    where = f"--storage-options-file {path}"
    data, mode = read_small_bytes(path, MAX_OPTIONS_FILE_BYTES, flag="--storage-options-file",
                                  what="JSON object of storage options")
    if mode & 0o077:
        log.warning("%s: readable by others (mode %04o): it holds credentials, keep it mode 0600", where, mode)
    try:
        doc = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise BadInputError(f"{where}: not UTF-8 text") from None
    except ValueError as exc:  # JSONDecodeError: its message has the position, never the text
        where_in = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise BadInputError(f"{where}: not valid JSON{where_in}") from None
    if not isinstance(doc, dict):
        raise BadInputError(f"{where}: expected a JSON object of KEY: VALUE, got {type(doc).__name__}")
    out: dict[str, str] = {}
    for key, value in doc.items():
        if not key.strip():
            raise BadInputError(f"{where}: empty key")
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (int, float)):
            value = str(value)
        elif not isinstance(value, str):
            raise BadInputError(f"{where}: key {key!r}: expected a string, got {type(value).__name__}")
        out[key.strip()] = value
    return out


def with_options_file(path: str | None, options: Mapping[str, str]) -> dict[str, str]:
    """The options of ``--storage-options-file`` (if given), overridden key by key by ``options``
    (the ``--storage-option`` pairs), as every entry point merges them."""
    return {**(read_storage_options_file(path) if path else {}), **options}
