"""Open tables kept across the rounds of one long-lived run (a fleet follower), each checked
to be the same table before it is used again (issue 82).

A :class:`memwal.table.Table` keeps what a table follower reuses from one pass to the next: the
versions it listed (grown by a stat each since), the main line's retained versions, the merge
progress it read, the last manifests. A fleet run opened every table anew for each round's work,
so a fleet follower's listing pass built a week of retained versions again each time a table
merged (docs/benchmarks/keeping-up.md: a fifth of that pass at six young tables). :class:`KeptTables`
lends a round the table object the last round left, bounded by count and by the versions they know
(a table object holds some 1.2 KB a version it listed: 200,000 are some 240 MB).

What the reuse must not do is judge another table by this one's memory: a table removed and
created again under the same URI starts its versions at 1, and the manifests this object keeps
by number would then be another table's. So a kept table is lent again only when the newest
version its listing found is still on storage as the same object (its ETag: Lance writes a
version's manifest once, by a put-if-absent of its name, and never rewrites it); anything else
(that version gone, another object there, no listing yet, a read that fails) opens the table
afresh, exactly as the first time. A version expired meanwhile (a table idle past its retention)
costs a fresh open, never a wrong answer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memwal.table.handle import Table

#: Tables kept at most (the least recently used goes first).
KEPT_TABLES = 64
#: Versions the kept tables may know together: what a table object keeps grows with the versions
#: its listing found (a week of a busy table's is 50,000), and a fleet keeps many.
KEPT_VERSIONS = 200_000


def _key(uri: str, storage_options: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return uri, tuple(sorted(storage_options.items()))


def same_table(table: Table) -> bool:
    """Whether the table at ``table.uri`` is still the one ``table`` read (see the module
    docstring): the newest version its listing found, the same object on storage."""
    top = table.cursor.top
    if top is None:
        return False
    info = table.cursor.infos[top]
    now = table.store.head(info.key)
    return now is not None and now.etag == info.etag


class KeptTables:
    """Table objects lent to one round's work and kept for the next (see the module docstring).

    A table lent is not kept meanwhile: two workers never share one object."""

    def __init__(self, *, tables: int = KEPT_TABLES, versions: int = KEPT_VERSIONS) -> None:
        self.tables, self.versions = tables, versions
        self._kept: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], Table] = OrderedDict()
        self._lock = threading.Lock()

    def lend(self, uri: str, storage_options: Mapping[str, str]) -> Table:
        """The table at ``uri``: the object kept for it when it is still that table, its latest
        manifest read again as :func:`open_table` reads it; else opened afresh (its errors)."""
        from memwal.table.handle import check_own_folders, open_table  # lance loads with the first table

        with self._lock:
            table = self._kept.pop(_key(uri, storage_options), None)
        if table is not None:
            try:
                if same_table(table):
                    table.opened = table.require_mem_wal()
                    check_own_folders(table.store)
                    return table
            except Exception:  # noqa: BLE001 - opening afresh says what is wrong, as the first open did
                pass
        return open_table(uri, dict(storage_options))

    def give_back(self, uri: str, storage_options: Mapping[str, str], table: Table) -> None:
        """Keep ``table`` for the next round, the least recently used dropped past the bounds."""
        with self._lock:
            self._kept[_key(uri, storage_options)] = table
            known = sum(len(t.cursor.infos) for t in self._kept.values())
            while self._kept and (len(self._kept) > self.tables or known > self.versions):
                _, dropped = self._kept.popitem(last=False)
                known -= len(dropped.cursor.infos)


__all__ = ["KEPT_TABLES", "KEPT_VERSIONS", "KeptTables", "same_table"]
