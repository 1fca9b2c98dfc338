"""The run-history collector: GC prunes run records older than ``--history-retention``.

The plan names the records (:func:`memwal.history.log.expired_history`: the month folders that
began before the cut-off, never the run that plans); the run deletes exactly those, with their
detail objects (a summary's per-shard parts), in the store's batches.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from memwal.errors import LinkedPathError
from memwal.history.log import expired_history, with_details
from memwal.store import Store
from memwal.table.paths import check_deletable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HistoryPruning:
    """The run records a GC run deletes."""

    keys: tuple[str, ...] = ()

    def prune(self, store: Store) -> int:
        """Delete the records and their detail objects; how many records went."""
        keys = with_details(list(self.keys))
        for key in keys:
            check_deletable(key)
        if keys:
            try:
                store.delete_many(keys)
            except LinkedPathError as exc:
                log.warning("kept %d run record(s) reached through a symbolic link, first: %s", len(exc.refused), exc)
        return len(self.keys)


def plan_history_pruning(store: Store, older_than: float, *, keep_run: str | None = None) -> HistoryPruning:
    """The records of runs started before ``older_than``, never run ``keep_run``'s."""
    return HistoryPruning(tuple(expired_history(store, older_than, keep_run=keep_run)))


__all__ = ["HistoryPruning", "plan_history_pruning"]
