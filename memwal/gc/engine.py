"""Where GC's deletions run: the :class:`GcEngine` protocol, and deletion in-process
(:class:`LocalGcEngine`). The task engine (``memwal.tasks.gc``) spreads the same
:func:`~memwal.gc.delete.delete_prefixes` / :func:`~memwal.gc.delete.delete_keys` over
Spark or Ray tasks and satisfies the same protocol. Every engine deletes through
:func:`~memwal.gc.delete.delete_objects` (invariant 5: nothing outside a planned prefix) and
checks the lease before every batch (a point where an operator's cancel stops the run).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from memwal.gc.delete import Done, PrefixOutcome, Target, delete_keys, delete_prefixes
from memwal.table import Table

if TYPE_CHECKING:
    from memwal.lease import Lease


class GcEngine(Protocol):
    """Where GC's deletions run: in-process (:class:`LocalGcEngine`) or spread over Spark executors."""

    name: str

    def delete_prefixes(self, table: Table, targets: Sequence[Target], lease: Lease | None,
                        done: Done | None = None) -> list[PrefixOutcome]: ...

    def delete_keys(self, table: Table, keys: Sequence[str], lease: Lease | None,
                    done: Done | None = None) -> list[str]: ...


class LocalGcEngine:
    """Deletes in-process, through the same :func:`delete_prefixes` / :func:`delete_keys` as Spark,
    checking the lease before every batch."""

    name = "local"

    def delete_prefixes(self, table: Table, targets: Sequence[Target], lease: Lease | None,
                        done: Done | None = None) -> list[PrefixOutcome]:
        return delete_prefixes(table.store, targets, before_batch=lease.safe_point if lease else None, done=done)

    def delete_keys(self, table: Table, keys: Sequence[str], lease: Lease | None,
                    done: Done | None = None) -> list[str]:
        """Delete single objects (WAL entries); returns the keys refused as unsafe."""
        return delete_keys(table.store, keys, before_batch=lease.safe_point if lease else None, done=done)
