"""The tables and jobs a backfill is given: ``--tables-file`` read and checked whole before any job runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from memwal.core.files import decode_text, read_small_bytes
from memwal.errors import BadInputError

# A tables file lists table URIs; 16 MiB is some 200,000 of them. A bigger "list" is a mistake
# (a data file, /dev/zero) and must not be read into memory whole.
MAX_TABLES_FILE_BYTES = 16 << 20


MAX_URI_CHARS = 4096


def read_tables_file(path: str) -> list[str]:
    """One table URI per line; blank lines and ``#`` comments are ignored; ``-`` is stdin.

    The whole file is read and checked before any job runs, so a bad list is bad input
    with nothing written: a missing file, a directory or device, a binary or non-UTF-8
    file, an empty list and a line that is not a table URI are each one error naming the
    file (and the line).
    """
    where = f"--tables-file {path}"
    data, _ = read_small_bytes(path, MAX_TABLES_FILE_BYTES, flag="--tables-file", what="file of table URIs")
    if not data.strip():
        raise BadInputError(f"{where}: the file is empty (or only whitespace)")
    text = decode_text(data, where, "file of table URIs")
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        uri = line.split("#", 1)[0].strip()
        if not uri:
            continue
        problem = table_uri_problem(uri)
        if problem:
            raise BadInputError(f"{where} line {number}: {problem}")
        out.append(uri)
    if not out:
        raise BadInputError(f"{where}: no table URI in it (only blank lines and # comments)")
    return out


def table_uri_problem(uri: str) -> str | None:
    """Why ``uri`` cannot name a table (checked without any I/O), or None.

    The rule every command applies (``memwal.store.check_table_uri``), after what a
    line of a file can add: control characters, absurd lengths, and credentials in a
    ``scheme://user:secret@host`` part, which are refused without being echoed.
    """
    if len(uri) > MAX_URI_CHARS:
        return f"table URI longer than {MAX_URI_CHARS} characters"
    if any(ord(c) < 32 or ord(c) == 127 for c in uri):
        return f"control character in table URI {_shown_uri(uri)}"
    head, sep, rest = uri.partition("://")
    userinfo = rest.split("/", 1)[0].rpartition("@")[0]
    if sep and userinfo and (":" in userinfo or head.lower() != "abfss"):  # abfss://container@account is no secret
        return f"invalid table URI {_shown_uri(uri)}: credentials in a URI (pass them with --storage-options-file)"
    from memwal.store import check_table_uri

    try:
        check_table_uri(uri)
    except BadInputError as exc:
        return str(exc)
    return None


def _shown_uri(uri: str) -> str:
    """A URI as quoted in an error: at most 120 characters, credentials in ``user:pass@`` hidden."""
    head, sep, rest = uri.partition("://")
    if sep and "@" in rest.split("/", 1)[0] and (":" in rest.split("@", 1)[0] or head.lower() != "abfss"):
        uri = f"{head}://***@{rest.split('@', 1)[1]}"
    return repr(uri if len(uri) <= 120 else uri[:117] + "...")


def table_key(uri: str) -> str:
    """The identity of a table in the state file: URIs as given, local paths made absolute."""
    uri = uri.strip()
    if "://" in uri:
        return uri.rstrip("/")
    return os.path.abspath(uri)


def unique_tables(tables: Sequence[str]) -> list[str]:
    seen, out = set(), []
    for t in tables:
        key = table_key(t)
        if key not in seen:
            seen.add(key)
            out.append(t.strip())
    return out

