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
#: A vector index Lance could not train yet: it built the index empty (too few rows for its
#: codebook) and, until the table has rows enough, neither an optimisation nor a retrain indexes
#: or records anything. Planned as a no-op with its reason, not run and failed each cycle.
WAIT = "wait"
#: The rows Lance needs to train a vector index: IVF_PQ's 8-bit codebook has 256 centroids
#: (pylance 14: 255 rows leave ``vec_idx`` empty after ``optimize_indices(retrain=True)``, 256 train it).
MIN_TRAINING_ROWS = 256


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
    #: From the manifest's index entry (its details' type), not from the statistics: Lance's
    #: statistics say ``index_type: N/A`` for a vector index it built empty.
    is_vector: bool = False


@dataclass(frozen=True)
class CatchupPlan(Document):
    """What an index catch-up would do (``memwal catchup --dry-run``).

    Attributes:
        table: The table's URI.
        read_version: The table version the plan read.
        compacted: Each shard's merged generation at that version: what the indexes catch up to.
        indexes: Per maintained index: its action (optimize, retrain, wait or none) and why.
        requested: The index names asked for (None: the maintained ones).
        thresholds: The retrain thresholds the plan used.
    """

    table: str
    read_version: int
    compacted: dict[str, int]
    indexes: tuple[IndexPlan, ...] = ()
    #: What the plan was asked for, so that a run that lost a race plans again the same way.
    requested: tuple[str, ...] | None = field(default=None, repr=False)
    thresholds: CatchupThresholds | None = field(default=None, repr=False)

    def work(self) -> list[IndexPlan]:
        return [i for i in self.indexes if i.action not in (NONE, WAIT)]

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
    entries = {i.name: i for i in manifest.user_indices()}
    names = maintained if not indexes else indexes
    unknown = sorted(set(names) - entries.keys())
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
        vector = entries[name].is_vector
        if not any(lag.values()) and unindexed == 0:
            action, reason = NONE, "caught up"
        elif vector and indexed == 0 and total < MIN_TRAINING_ROWS:
            action = WAIT
            reason = (f"{total} rows, too few to train a vector index: Lance needs {MIN_TRAINING_ROWS} "
                      "and searches these rows unindexed until then")
        elif deltas >= thresholds.max_deltas:
            action, reason = RETRAIN, f"{deltas} deltas >= {thresholds.max_deltas}"
        elif fraction > thresholds.max_unindexed_fraction:
            action, reason = RETRAIN, f"{fraction:.0%} of rows unindexed > {thresholds.max_unindexed_fraction:.0%}"
        else:
            action = OPTIMIZE
            reason = f"{unindexed} unindexed rows, lag {max(lag.values(), default=0)} generations"
        planned.append(IndexPlan(name, action, reason, lag, caught, deltas, indexed, unindexed,
                                 int(stats.get("num_unindexed_fragments", 0)), str(stats.get("index_type", "")),
                                 vector))
    return CatchupPlan(table=table.uri, read_version=manifest.version, compacted=dict(manifest.compacted),
                       indexes=tuple(planned), requested=None if indexes is None else tuple(indexes),
                       thresholds=thresholds)
