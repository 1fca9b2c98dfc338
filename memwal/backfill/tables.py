"""The tables and jobs a backfill is given: ``--tables-file`` read and checked whole before any job runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from memwal.actions import ACTIONS as JOB_ORDER
from memwal.errors import BadInputError


def parse_jobs(text: str | Sequence[str] | None) -> list[str]:
    """``"merge,gc"`` -> ``["merge", "gc"]`` in canonical order; unknown names are bad input."""
    if text is None:
        return list(JOB_ORDER)
    items = text.split(",") if isinstance(text, str) else list(text)
    names = {s.strip() for s in items if s.strip()}
    unknown = sorted(names - set(JOB_ORDER))
    if unknown:
        raise BadInputError(f"unknown job {', '.join(unknown)}: expected some of {','.join(JOB_ORDER)}")
    if not names:
        raise BadInputError("no job given")
    return [j for j in JOB_ORDER if j in names]


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
    text = _decode_tables_file(_read_tables_bytes(path, where), where)
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


def _read_tables_bytes(path: str, where: str) -> bytes:
    """The file's bytes, refusing what is not a regular file before opening it (a FIFO would block)."""
    import stat
    import sys

    if path == "-":
        stream = getattr(sys.stdin, "buffer", None)
        data = stream.read(MAX_TABLES_FILE_BYTES + 1) if stream else sys.stdin.read().encode()
    else:
        try:
            st = os.stat(path)
            if stat.S_ISDIR(st.st_mode):
                raise BadInputError(f"{where}: is a directory, not a file of table URIs")
            if not stat.S_ISREG(st.st_mode):
                raise BadInputError(f"{where}: not a regular file")
            with open(path, "rb") as f:
                data = f.read(MAX_TABLES_FILE_BYTES + 1)
        except OSError as exc:
            raise BadInputError(f"{where}: {exc.strerror or 'cannot read'}") from None
    if len(data) > MAX_TABLES_FILE_BYTES:
        raise BadInputError(f"{where}: larger than {MAX_TABLES_FILE_BYTES >> 20} MiB, not a list of table URIs")
    if not data.strip():
        raise BadInputError(f"{where}: the file is empty (or only whitespace)")
    return data


def _decode_tables_file(data: bytes, where: str) -> str:
    """UTF-8 text (a BOM is fine, Windows line ends too); binary content names its first bad line."""
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise BadInputError(f"{where} line {line}: binary content (NUL byte), not a text file of table URIs")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise BadInputError(f"{where} line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None
    return text.replace("\r\n", "\n")


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

