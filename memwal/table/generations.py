"""Is a generation readable? Lance opens it, and every fragment's files check out.

Opening a generation reads only its Lance manifest. A truncated, emptied, garbled or
deleted data file or deletion file (``_deletions/``) shows only when the rows are read,
as a raw Lance error naming neither the shard nor the generation ("Invalid range 0..2912
for object of size 1456 bytes"), and in a merge it used to stop every shard. Lance's own
``LanceFragment.validate()`` reads what a reader needs before the rows: each data file's
footer (its size and magic bytes against the manifest) and the deletion vector. It is
cheap (docs/decisions/0020-generations-validated-in-one-session.md), so the merge plan (and its dry run),
``memwal status`` and ``memwal verify`` run it on every unmerged generation and name the
generation and the broken file. What it cannot see (a page garbled in the middle of a
data file) fails the merge's read of that generation, which is then attributed the same
way (:class:`GenerationUnreadableError`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache

import lance
from lance.lance import _Session as Session  # what lance.Session is; pylance's stubs leave it out of __all__

from memwal.errors import MemWalError, first_line
from memwal.store import Store

#: Errors Lance raises for unreadable files; pyo3 panics (``PanicException``) derive from
#: BaseException, so they are matched by name.
_PANIC = "PanicException"


class GenerationUnreadableError(MemWalError):
    """A generation Lance cannot read (exit code 1): names the shard, the generation and the file.

    Also built from its own message alone (``GenerationUnreadableError(str(err))``): the
    Spark engine rebuilds an executor's error on the driver that way.
    """

    def __init__(self, shard_id: str, generation: int | None = None, detail: str = "") -> None:
        if generation is None and (m := _MESSAGE.match(shard_id)):
            shard_id, generation, detail = m.group(1), int(m.group(2)), m.group(3)
        self.shard_id = shard_id
        self.generation = generation if generation is not None else 0
        self.detail = detail
        super().__init__(f"shard {shard_id} generation {self.generation}: {detail}" if detail else shard_id)


_MESSAGE = re.compile(r"^shard (\S+) generation (\d+): (.*)$", re.DOTALL)


#: The generation session's caches, bounded: a long-lived process (a follower) opens every generation
#: a writer flushes, some 10 KB of metadata each (50,000 a day at 35 a minute); 256 MiB holds a plan of
#: 25,000 generations, and the oldest go first.
GENERATION_METADATA_CACHE_BYTES = 256 << 20
GENERATION_INDEX_CACHE_BYTES = 64 << 20


@lru_cache(maxsize=1)
def generation_session() -> Session:
    """One Lance session for every generation dataset a process opens: its object-store
    registry and metadata cache make the second open of a generation (plan, then read)
    nearly free, and the first one cheaper (docs/decisions/0020); its caches are bounded."""
    return Session(index_cache_size_bytes=GENERATION_INDEX_CACHE_BYTES,
                   metadata_cache_size_bytes=GENERATION_METADATA_CACHE_BYTES)


def open_generation(uri: str, storage_options: dict[str, str] | None) -> lance.LanceDataset:
    """A generation dataset, opened through the shared session."""
    return lance.dataset(uri, storage_options=storage_options or None, session=generation_session())


def _lance_failure(exc: BaseException) -> bool:
    return isinstance(exc, Exception) or type(exc).__name__ == _PANIC


@dataclass(frozen=True)
class GenerationCheck:
    """What opening a generation told: what is wrong with it (None: it reads), and its rows
    and data bytes as its own Lance manifest records them (None when it cannot be opened)."""

    damage: str | None
    rows: int | None = None
    bytes: int | None = None


def generation_check(store: Store, key: str, uri: str, storage_options: dict[str, str] | None) -> GenerationCheck:
    """Open the generation at ``key`` and validate every fragment (see the module docstring).

    ``"unopenable"``-style reasons (no readable Lance manifest) start with ``missing:``,
    damaged files with ``unreadable:``. The figures are what a shard manifest may lack
    (optional fields, never read as 0): rows and bytes of a generation come from here then.
    """
    try:
        ds = open_generation(uri, storage_options)
    except BaseException as exc:  # noqa: BLE001 - any failure to open is the verdict (panics included)
        if not _lance_failure(exc):
            raise
        return GenerationCheck(f"missing: generation directory {key.rsplit('/', 1)[-1]} is missing or unreadable")
    rows = size = 0
    for fragment in ds.get_fragments():
        try:
            fragment.validate()
        except BaseException as exc:  # noqa: BLE001 - see above
            if not _lance_failure(exc):
                raise
            return GenerationCheck(f"unreadable: {_broken_file(store, key, fragment, exc)}")
        md = fragment.metadata
        rows += md.physical_rows or 0
        size += sum(f.file_size_bytes or 0 for f in md.files)
    return GenerationCheck(None, rows, size)


def generation_damage(store: Store, key: str, uri: str, storage_options: dict[str, str] | None) -> str | None:
    """None when the generation at ``key`` reads; else what is wrong (:func:`generation_check`)."""
    return generation_check(store, key, uri, storage_options).damage


def _fragment_files(key: str, fragment: lance.LanceFragment) -> list[tuple[str, str, int | None]]:
    """(kind, store key, recorded size or None) of a fragment's data files and deletion file."""
    md = fragment.metadata
    files = [("data file", f"{key}/data/{f.path}", f.file_size_bytes or None) for f in md.files]
    if md.deletion_file is not None:
        files.append(("deletion file", f"{key}/{md.deletion_file.path(md.id)}", None))
    return files


def _broken_file(store: Store, key: str, fragment: lance.LanceFragment, exc: BaseException) -> str:
    """Which of the fragment's files Lance could not read, and why, in one line."""
    detail = first_line(exc)
    files = _fragment_files(key, fragment)
    for kind, file_key, size in files:
        info = store.head(file_key)
        if info is None:
            return f"{kind} {store.uri_for(file_key)} is missing"
        if size is not None and info.size != size:
            where = store.uri_for(file_key)
            return f"{kind} {where} is {info.size} bytes, Lance recorded {size} (truncated or replaced)"
        if info.size == 0:
            return f"{kind} {store.uri_for(file_key)} is empty"
    for kind, file_key, _ in files:
        if os.path.basename(file_key) in detail:
            return f"{kind} {store.uri_for(file_key)}: {detail}"
    names = ", ".join(store.uri_for(k) for _, k, _ in files)
    return f"fragment {fragment.fragment_id} ({names}): {detail}"
