"""What a merge plan is: per shard, the generations to merge in order, and the shards it stops.

The plan is data (the dry run prints it, an engine executes exactly it); how it is made
is :mod:`memwal.merge.plan`, how its inputs are checked :mod:`memwal.merge.inputs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from memwal.core.document import Document, as_document
from memwal.merge.applied import DataCommit
from memwal.merge.columns import Renames


@dataclass(frozen=True)
class GenerationRef:
    shard_id: str
    generation: int
    path: str
    key: str
    uri: str
    rows: int
    bytes: int
    #: With merge operators: the table's URI and this generation's WAL entries, which
    #: hold every operand (the flushed generation keeps only each key's newest row).
    table_uri: str = ""
    wal_keys: tuple[str, ...] = ()
    #: Columns that do not keep their name in the base table, matched by Lance field id
    #: (renamed, or dropped from the base: None); see memwal.merge.columns.
    renamed: Renames = ()


@dataclass(frozen=True)
class ShardMergePlan:
    shard_id: str
    compacted_generation: int
    generations: tuple[GenerationRef, ...]
    #: Generations up to this one already have their data in the base table (an unfinished
    #: driverless merge's data commit, memwal.merge.applied): they need only the marker.
    applied_generation: int = 0

    @property
    def from_generation(self) -> int:
        return self.generations[0].generation

    @property
    def to_generation(self) -> int:
        return self.generations[-1].generation


@dataclass(frozen=True)
class BlockedShard:
    shard_id: str
    generation: int
    reason: str


def blocked_problems(blocked: Iterable[BlockedShard]) -> list[str]:
    """A merge's verdict (plan or result): each shard it stopped at a generation is a failure."""
    return [f"shard {b.shard_id} stopped at generation {b.generation}: {b.reason}" for b in blocked]


def problems_in(doc: Mapping[str, Any]) -> list[str]:
    """:func:`blocked_problems` of a merge plan's or result's document (a spark-submit result file)."""
    return blocked_problems(BlockedShard(b["shard_id"], b["generation"], b["reason"]) for b in doc["blocked"])


@dataclass(frozen=True)
class MergePlan(Document):
    """What a merge would do (``memwal merge --dry-run``), and what its run executes exactly.

    Attributes:
        table: The table's URI.
        read_version: The table version the plan read; the run commits against it.
        primary_key: The key columns, in declared order.
        shards: Per shard: its merged generation and the generations to merge, in order.
        blocked: Shards the merge cannot take, each with why (a gap, a missing generation, ...).
        merge_ops: Column to merge operator at the read version (empty: last write wins).
        applied: Unfinished driverless merges' data commits the plan found (finished by the run).
    """

    table: str
    read_version: int
    primary_key: tuple[str, ...]
    shards: tuple[ShardMergePlan, ...] = ()
    blocked: tuple[BlockedShard, ...] = ()
    #: Column -> merge operator at the read version (empty: last write wins).
    merge_ops: dict[str, str] = field(default_factory=dict)
    #: The unfinished driverless merges' data commits this plan found (memwal.merge.applied).
    applied: tuple[DataCommit, ...] = ()

    @property
    def generations(self) -> list[GenerationRef]:
        return [g for s in self.shards for g in s.generations]

    @property
    def shard_ids(self) -> list[str]:
        """The batch's shards in plan order; engines tag rows with positions in this list."""
        return [s.shard_id for s in self.shards]

    @property
    def total_rows(self) -> int:
        return sum(g.rows for g in self.generations)

    def is_empty(self) -> bool:
        return not self.shards

    def problems(self) -> list[str]:
        """What makes this dry run a failure: one line per shard it stops (`blocked_problems`)."""
        return blocked_problems(self.blocked)

    def data_plan(self) -> MergePlan:
        """The generations whose data is still to be merged: each shard's above its
        ``applied_generation`` (shards with none left out). The marker covers the whole plan."""
        shards = []
        for s in self.shards:
            todo = [g for g in s.generations if g.generation > s.applied_generation]
            if todo:
                shards.append(replace(s, generations=tuple(todo)))
        return replace(self, shards=tuple(shards), blocked=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "read_version": self.read_version,
            "primary_key": list(self.primary_key),
            "shards": [
                {
                    "shard_id": s.shard_id,
                    "compacted_generation": s.compacted_generation,
                    "from_generation": s.from_generation,
                    "to_generation": s.to_generation,
                    "applied_generation": s.applied_generation,
                    "generations": [as_document(g) for g in s.generations],
                }
                for s in self.shards
            ],
            "blocked": [asdict(b) for b in self.blocked],
            "merge_ops": self.merge_ops,
            "applied": [{"intent": c.intent, "version": c.version, "data": {k: list(v) for k, v in c.data.items()}}
                        for c in self.applied],
        }
