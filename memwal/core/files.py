"""Reading the small files an operator hands a command (storage options, tables, policies),
and writing the files a command leaves (pages, result files, caches) atomically.

One way for all of them: opened without blocking (a FIFO planted at the path cannot hang the
command), the type checked on the open descriptor (no race with a swap), a size cap (a data
file or ``/dev/zero`` given by mistake is refused, not read into memory), and every problem
one line naming the flag and the path.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterable

from memwal.errors import BadInputError


def read_small_bytes(path: str, max_bytes: int, *, flag: str, what: str = "file") -> tuple[bytes, int]:
    """The bytes of ``path`` (``-``: stdin) and its permission bits (0 for stdin)."""
    where = f"{flag} {path}"
    if path == "-":
        stream = getattr(sys.stdin, "buffer", None)
        data = stream.read(max_bytes + 1) if stream else sys.stdin.read().encode()
        mode = 0
    else:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except IsADirectoryError:
            raise BadInputError(f"{where}: is a directory, not a {what}") from None
        except OSError as exc:
            raise BadInputError(f"{where}: {exc.strerror or 'cannot read'}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            if stat.S_ISDIR(st.st_mode):
                raise BadInputError(f"{where}: is a directory, not a {what}")
            raise BadInputError(f"{where}: not a regular file")
        with os.fdopen(fd, "rb") as f:
            try:
                data = f.read(max_bytes + 1)
            except OSError as exc:
                raise BadInputError(f"{where}: {exc.strerror or 'cannot read'}") from None
            mode = stat.S_IMODE(st.st_mode)
    if len(data) > max_bytes:
        raise BadInputError(f"{where}: larger than {max_bytes:,} bytes, not a {what}")
    return data, mode


def read_small_file(path: str, max_bytes: int, *, flag: str, what: str = "file") -> str:
    """:func:`read_small_bytes` as UTF-8 text (a BOM is fine, Windows line ends too); binary
    content names its first bad line."""
    data, _ = read_small_bytes(path, max_bytes, flag=flag, what=what)
    return decode_text(data, f"{flag} {path}", what)


def decode_text(data: bytes, where: str, what: str = "file") -> str:
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise BadInputError(f"{where} line {line}: binary content (NUL byte), not a text {what}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise BadInputError(f"{where} line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None
    return text.replace("\r\n", "\n")





def write_chunks(path: str, chunks: Iterable[str]) -> None:
    """Write a page atomically (a browser refreshing it never sees half a file), streamed.

    The temporary file is created, never opened: a random name made with ``O_EXCL`` beside
    ``path`` (:func:`tempfile.mkstemp`), so a link planted at a predictable name cannot
    redirect the write to a file elsewhere."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # a page to share, as an ordinary file written here would be
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


__all__ = ["decode_text", "read_small_bytes", "read_small_file", "write_chunks"]
