"""Where a merge's net change set is computed: the :class:`MergeEngine` protocol, and pyarrow
in-process (:class:`LocalMergeEngine`). A Spark engine (``memwal.spark.engine.merge``)
computes it on executors and satisfies the same protocol; one that can also write a
last-write-wins batch into the base table itself is a :class:`TableWritingEngine` (the
driverless path, :mod:`memwal.merge.driverless`). An engine never commits: the commits, and
their fences, are :mod:`memwal.merge.execute`'s.
"""

from __future__ import annotations

from typing import Protocol, TypeGuard

import pyarrow as pa

from memwal.merge.batches import DEFAULT_MAX_DECODED_BYTES
from memwal.merge.changes import NetChanges
from memwal.merge.driverless import TableChanges
from memwal.merge.local import DEFAULT_MEMORY_BUDGET, DEFAULT_PARTITION_ROWS, local_net_changes
from memwal.merge.model import MergePlan
from memwal.table import Table


class MergeEngine(Protocol):
    """Computes the net change set of a plan (local: pyarrow; spark: executors)."""

    name: str

    def net_changes(self, table: Table, plan: MergePlan, schema: pa.Schema) -> NetChanges: ...


class TableWritingEngine(MergeEngine, Protocol):
    """An engine whose workers can also write a last-write-wins batch into the base table."""

    #: Whether it does so (an engine may be asked not to, e.g. to measure the driver path).
    driverless: bool

    def table_changes(self, table: Table, plan: MergePlan, schema: pa.Schema) -> TableChanges: ...


def writes_table(engine: MergeEngine) -> TypeGuard[TableWritingEngine]:
    return bool(getattr(engine, "driverless", False)) and callable(getattr(engine, "table_changes", None))


def max_decoded_bytes(engine: MergeEngine) -> int | None:
    """The decoded bytes one commit of ``engine`` may read (:mod:`memwal.merge.batches`), or None:
    an engine that holds no batch in the driver's memory (Spark's executors) takes its plan whole."""
    bound = getattr(engine, "max_decoded_bytes", None)
    return bound if isinstance(bound, int) else None


class LocalMergeEngine:
    """Computes the net change set in-process with pyarrow, in partitions within a memory budget,
    a commit's batch bounded by ``max_decoded_bytes`` (:mod:`memwal.merge.batches`; None: unbounded)."""

    name = "local"

    def __init__(
        self, partition_rows: int = DEFAULT_PARTITION_ROWS, memory_budget: int = DEFAULT_MEMORY_BUDGET,
        max_decoded_bytes: int | None = DEFAULT_MAX_DECODED_BYTES,
    ) -> None:
        self.partition_rows = partition_rows
        self.memory_budget = memory_budget
        self.max_decoded_bytes = max_decoded_bytes

    def net_changes(self, table: Table, plan: MergePlan, schema: pa.Schema) -> NetChanges:
        return local_net_changes(plan, schema, table.storage_options, partition_rows=self.partition_rows,
                                 memory_budget=self.memory_budget)
