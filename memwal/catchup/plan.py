"""Planning a catch-up: per maintained index, how far behind it is and what to run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from memwal.core.document import Document
from memwal.errors import BadInputError
from memwal.table import Table
from memwal.table.manifest import TableManifest, maintained_indexes

if TYPE_CHECKING:
    import lance



NONE, OPTIMIZE, RETRAIN = "none", "optimize", "retrain"


@dataclass
class CatchupThresholds:
    """When an incremental optimisation is no longer good enough and a rebuild is due."""

    max_deltas: int = 8
    max_unindexed_fraction: float = 0.5


@dataclass(frozen=True)
class IndexPlan:
    index_name: str
    action: str
    reason: str
    lag: dict[str, int]  # shard -> compacted - caught up (0 when caught up)
    caught_up: dict[str, int]
    num_deltas: int
    indexed_rows: int
    unindexed_rows: int
    unindexed_fragments: int
    index_type: str = ""

    @property
    def is_vector(self) -> bool:
        return self.index_type.upper().startswith(("IVF", "HNSW", "FLAT"))


@dataclass(frozen=True)
class CatchupPlan(Document):
    table: str
    read_version: int
    compacted: dict[str, int]
    indexes: tuple[IndexPlan, ...] = ()
    #: What the plan was asked for, so that a run that lost a race plans again the same way.
    requested: tuple[str, ...] | None = field(default=None, repr=False)
    thresholds: CatchupThresholds | None = field(default=None, repr=False)

    def work(self) -> list[IndexPlan]:
        return [i for i in self.indexes if i.action != NONE]

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "read_version": self.read_version, "compacted": self.compacted,
                "indexes": [asdict(i) for i in self.indexes]}


def _index_stats(ds: lance.LanceDataset, name: str) -> dict[str, Any]:
    try:
        return ds.stats.index_stats(name)
    except (ValueError, OSError, RuntimeError) as exc:
        raise BadInputError(f"index {name!r}: cannot read its statistics: {exc}") from exc


def plan_catchup(table: Table, *, indexes: list[str] | None = None,
                 thresholds: CatchupThresholds | None = None, manifest: TableManifest | None = None) -> CatchupPlan:
    """Pure: which maintained indexes lag, by how much, and what would bring them up."""
    thresholds = thresholds or CatchupThresholds()
    manifest = manifest or table.require_mem_wal()
    maintained = maintained_indexes(manifest)
    existing = {i.name for i in manifest.user_indices()}
    names = maintained if not indexes else indexes
    unknown = sorted(set(names) - existing)
    if unknown:
        raise BadInputError(f"{table.uri}: no such index on the base table: {', '.join(unknown)}")
    ds = table.dataset(manifest.version)
    planned: list[IndexPlan] = []
    for name in names:
        stats = _index_stats(ds, name)
        recorded = manifest.index_catchup.get(name, {})
        caught = {s: recorded.get(s, 0) for s in manifest.compacted}
        lag = {s: max(0, g - caught[s]) for s, g in manifest.compacted.items()}
        indexed = int(stats.get("num_indexed_rows", 0))
        unindexed = int(stats.get("num_unindexed_rows", 0))
        deltas = len(stats.get("num_indexed_rows_per_delta", []) or []) or int(stats.get("num_indices", 1))
        total = indexed + unindexed
        fraction = unindexed / total if total else 0.0
        if not any(lag.values()) and unindexed == 0:
            action, reason = NONE, "caught up"
        elif deltas >= thresholds.max_deltas:
            action, reason = RETRAIN, f"{deltas} deltas >= {thresholds.max_deltas}"
        elif fraction > thresholds.max_unindexed_fraction:
            action, reason = RETRAIN, f"{fraction:.0%} of rows unindexed > {thresholds.max_unindexed_fraction:.0%}"
        else:
            action = OPTIMIZE
            reason = f"{unindexed} unindexed rows, lag {max(lag.values(), default=0)} generations"
        planned.append(IndexPlan(name, action, reason, lag, caught, deltas, indexed, unindexed,
                                 int(stats.get("num_unindexed_fragments", 0)), str(stats.get("index_type", ""))))
    return CatchupPlan(table=table.uri, read_version=manifest.version, compacted=dict(manifest.compacted),
                       indexes=tuple(planned), requested=None if indexes is None else tuple(indexes),
                       thresholds=thresholds)
