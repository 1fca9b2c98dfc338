"""`memwal verify`'s check that each listed generation's primary-key index names each row once.

lance-context 0.6.7 (Lance 9) sometimes replays a WAL entry a flush already sealed into the next
process's first generation, and that generation's ``_pk_index`` then lists each replayed row
twice; Lance 9's block list refuses it ("RowAddrTreeMap::from_sorted_iter called with non-sorted
input"), so every reader that lists the generation fails, while the rows themselves read fine
(docs/clients.md). The index is a Lance file of (``values``, ``ids``): its row ids must be
unique. Read through Lance's own file reader, one small file a listed generation.
"""

from __future__ import annotations

from lance.file import LanceFileReader

from memwal.core.words import counted
from memwal.errors import MemWalError, first_line
from memwal.table import Table
from memwal.table.shards import ShardState, generation_readable

CHECK = "listed-key-indexes-unique"
#: The key index's rows: what Lance's MemWAL writers put under a flushed generation.
INDEX_FILE = "_pk_index/page_data.lance"


def doubly_indexed(table: Table, state: ShardState) -> list[tuple[int, str]]:
    """(generation, why) of the shard's listed generations whose key index names a row twice
    (one without a readable index is the other checks' to report)."""
    out = []
    for fg in state.flushed:
        uri = table.store.uri_for(f"{state.generation_key(fg)}/{INDEX_FILE}")
        try:
            ids = LanceFileReader(uri, storage_options=table.storage_options or None).read_all().to_table()["ids"]
        except (MemWalError, OSError, ValueError, RuntimeError, KeyError) as exc:
            if "not found" in str(exc).lower():
                continue  # a generation written without one (or gone): not this check's
            out.append((fg.generation, f"its key index cannot be read: {first_line(exc, table.uri)}"))
            continue
        unique = len(set(ids.to_pylist()))
        if unique != len(ids):
            out.append((fg.generation, f"its key index names {counted(len(ids) - unique, 'row')} twice ({uri})"))
    return out


def without_key_index(table: Table, state: ShardState) -> list[int]:
    """The shard's listed generations present and readable but with no key index at all (a flush
    that did not wait for it, lance#9035): one listing of each listed generation's ``_pk_index/``."""
    out = []
    for fg in state.flushed:
        key = state.generation_key(fg)
        if not generation_readable(table.store, key):
            continue  # gone or damaged: the other checks report it
        if not any(True for _ in table.store.list(f"{key}/_pk_index/")):
            out.append(fg.generation)
    return out


__all__ = ["CHECK", "doubly_indexed", "without_key_index"]
