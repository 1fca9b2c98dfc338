"""Nearest-neighbour search over the LSM view, through pylance's ``LsmVectorSearchPlanner``.

What the planner does (observed with pylance 14.0.2): it searches the base table and each
listed generation *through their vector indexes* (a generation carries the maintained
indexes Lance built when it flushed), drops candidates a newer generation supersedes,
and merges the top ``k`` by ``_distance`` (a float32: squared L2 for ``l2``, ``1 - cos``
for ``cosine``, ``1 - dot`` for ``dot``). It silently leaves out what no index covers:

* a base table without an index on the column gives no row at all;
* base fragments the index does not cover yet (rows merged since the last catch-up) and
  generations flushed without the index are skipped;
* a metric other than the index's gives no row (Lance warns, then returns nothing).

A reader must not lose rows to a lagging index, so this module uses the planner only
when the index covers the whole view, and otherwise answers with an exact search over the
view (an :class:`~memwal.read.lsm_scan` of the key, vector and wanted columns), logging
why; the result's schema metadata ``memwal:search`` says which (``index`` or
``exact: <why>``). ``memwal catchup`` brings the index back over the merged rows.

Merge operators: a vector column whose operator is ``replace`` has the same value in the
folded view as in the newest version, so the planner's candidates are right; their other
columns are then read folded (:func:`memwal.read.points.lookup`). A folding vector
column, or a filter on a folding column, searches the folded view exactly.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, TypedDict

import lance
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from memwal.errors import BadInputError
from memwal.table.manifest import is_vector_index

if TYPE_CHECKING:
    from memwal.merge.ops import MergeOps
    from memwal.read.plan import ReadPlan
    from memwal.table import Table

log = logging.getLogger(__name__)

DISTANCE = "_distance"
#: Schema metadata key of a result: ``index`` (the planner answered) or ``exact: <why>``.
SEARCH_METADATA = "memwal:search"
METRICS = ("l2", "cosine", "dot")


@dataclass(frozen=True)
class VectorIndex:
    name: str
    metric: str
    unindexed_rows: int


def vector_index(ds: lance.LanceDataset, column: str) -> VectorIndex | None:
    """The vector index on ``column`` at ``ds``'s version, with its metric and how many
    rows of ``ds`` it does not cover."""
    for desc in ds.describe_indices():
        if list(desc.field_names) == [column] and is_vector_index(desc.type_url):
            stats = ds.stats.index_stats(desc.name)
            segments = stats.get("segments") or stats.get("indices") or [{}]
            metric = str(segments[0].get("metric_type", "l2")).lower()
            return VectorIndex(desc.name, metric, int(stats.get("num_unindexed_rows", 0)))
    return None


def _generation_has_index(table: Table, uri: str, column: str) -> bool:
    ds = lance.dataset(uri, storage_options=table.storage_options or None)
    return any(list(d.field_names) == [column] and is_vector_index(d.type_url)
               for d in ds.describe_indices())


#: A query vector: numbers (a list, a numpy array) or an Arrow array of them.
Vector: TypeAlias = npt.ArrayLike | pa.Array


class NearestOptions(TypedDict, total=False):
    """The search options of :func:`nearest` past ``k`` that a caller with its own plan passes on."""

    filter: str | None
    columns: Sequence[str] | None
    metric: str | None
    nprobes: int
    refine: bool
    overfetch: float


def query_vector(query: Vector, field: pa.Field) -> npt.NDArray[np.float32]:
    """The query as float32 of the column's dimension, or BadInputError."""
    t = field.type
    if not (pa.types.is_fixed_size_list(t) and pa.types.is_floating(t.value_type)):
        raise BadInputError(f"column {field.name}: a vector search needs a fixed-size list of floats, not {t}")
    try:
        q = np.asarray(query.to_numpy(zero_copy_only=False) if isinstance(query, pa.Array) else query,
                       dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise BadInputError(f"query: not a vector of numbers ({exc})") from exc
    if q.ndim != 1 or q.shape[0] != t.list_size:
        raise BadInputError(f"query: {q.shape[0] if q.ndim == 1 else q.shape} values, column {field.name} "
                            f"holds vectors of {t.list_size}")
    if not np.all(np.isfinite(q)):
        raise BadInputError("query: holds a NaN or an infinity")
    return q


def distances(vectors: npt.NDArray[np.float32], q: npt.NDArray[np.float32], metric: str) -> npt.NDArray[np.float32]:
    """Lance's distances (smaller is nearer), in float32 as Lance gives them."""
    d: npt.NDArray[np.float32]
    if metric == "l2":
        diff = vectors - q
        d = np.einsum("ij,ij->i", diff, diff)
        return d
    dot = vectors @ q
    if metric == "dot":
        d = (1.0 - dot).astype(np.float32)
        return d
    norms = np.linalg.norm(vectors, axis=1) * np.linalg.norm(q)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = (1.0 - dot / norms).astype(np.float32)
    return d


def _exact_reason(table: Table, ds: lance.LanceDataset, plan: ReadPlan, column: str, metric: str,
                  index: VectorIndex | None, ops: MergeOps, filter: str | None) -> str | None:
    """Why the planner would miss rows of this view (None: it will not)."""
    from memwal.read.filter_sql import filter_columns
    from memwal.table.paths import generation_key

    if ops.op(column) != "replace":
        return f"column {column} folds by merge operator {ops.op(column)}"
    if ops.active and filter:
        named = filter_columns(filter)
        if named is None or named & set(ops.folding_columns()):
            return "the filter may name a folding column"
    if index is None:
        return f"no vector index on {column}"
    if metric != index.metric:
        return f"metric {metric} is not the metric of index {index.name} ({index.metric})"
    if index.unindexed_rows:
        return f"index {index.name} does not cover {index.unindexed_rows} rows of the base table yet"
    for sid, g, path in plan.generations:
        if not _generation_has_index(table, table.store.uri_for(generation_key(sid, path)), column):
            return f"generation {g} of shard {sid} has no index on {column}"
    return None


def nearest(table: Table, column: str, query: Vector, *, k: int = 10, filter: str | None = None,
            columns: Sequence[str] | None = None, metric: str | None = None, nprobes: int = 20,
            refine: bool = True, overfetch: float = 2.0, plan: ReadPlan | None = None,
            source: str = "index") -> pa.Table:
    """The ``k`` live rows nearest to ``query`` in ``column`` (``columns``, default all, plus
    ``_distance``), nearest first, among rows matching ``filter``."""
    from memwal.merge.ops import table_ops
    from memwal.read.checks import check_columns, reading
    from memwal.read.keys import in_key_order
    from memwal.read.points import lookup
    from memwal.read.scan import lsm_scan, open_plan
    from memwal.table.schema import primary_key

    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise BadInputError(f"k: {k!r} is not a positive integer")
    if isinstance(nprobes, bool) or not isinstance(nprobes, int) or nprobes <= 0:
        raise BadInputError(f"nprobes: {nprobes!r} is not a positive integer")
    if not isinstance(overfetch, int | float) or not math.isfinite(overfetch) or overfetch < 1:
        raise BadInputError(f"overfetch: {overfetch!r} is not a number >= 1")
    if metric is not None and metric not in METRICS:
        raise BadInputError(f"metric: {metric!r} is not one of {', '.join(METRICS)}")
    with reading(table):
        plan, ds = open_plan(table, plan, source=source, filter=filter)
        if column not in ds.schema.names:
            raise BadInputError(f"column {column}: not in the table schema")
        q = query_vector(query, ds.schema.field(column))
        check_columns(ds.schema, columns)
        pk = primary_key(ds.lance_schema)
        wanted = list(dict.fromkeys([*pk, *(columns if columns is not None else ds.schema.names)]))
        index = vector_index(ds, column)
        metric = metric or (index.metric if index else "l2")
        ops = table_ops(ds)
        reason = _exact_reason(table, ds, plan, column, metric, index, ops, filter)
        if reason is None:
            rows = _planned(ds, plan, column, q, k, filter, pk, wanted, metric, nprobes, refine, overfetch,
                            folded=ops.active)
            if ops.active:  # candidates from the planner, values from the fold
                found = lookup(table, rows.select(pk), columns=wanted, plan=plan)
                rows = found.append_column(DISTANCE, in_key_order(rows, found.select(pk), pk).column(DISTANCE))
        else:
            log.info("%s: exact search on %s (%s)", table.uri, column, reason)
            view = lsm_scan(table, columns=list(dict.fromkeys([*wanted, column])), filter=filter, plan=plan)
            rows = _exact(view, column, q, k, metric)
        rows = rows.sort_by(DISTANCE).slice(0, k)
        out = [*(columns if columns is not None else wanted), DISTANCE]
        how = "index" if reason is None else f"exact: {reason}"
        return rows.select(out).replace_schema_metadata({SEARCH_METADATA: how})


def _planned(ds: lance.LanceDataset, plan: ReadPlan, column: str, q: npt.NDArray[np.float32], k: int,
             filter: str | None, pk: list[str], wanted: list[str], metric: str, nprobes: int, refine: bool,
             overfetch: float, *, folded: bool) -> pa.Table:
    from lance.mem_wal import LsmVectorSearchPlanner

    planner = LsmVectorSearchPlanner(ds, plan.snapshots, column, pk_columns=pk, distance_type=metric, filter=filter)
    projection = [*(pk if folded else wanted), DISTANCE]  # naming _distance keeps Lance from warning
    return planner.plan_search(pa.array(q, pa.float32()), k=k, nprobes=nprobes, columns=projection,
                               refine_base_table=refine, overfetch_factor=float(overfetch)).to_table()


def _exact(view: pa.Table, column: str, q: npt.NDArray[np.float32], k: int, metric: str) -> pa.Table:
    col = view.column(column)
    present = np.flatnonzero(col.is_valid().to_numpy(zero_copy_only=False))
    if present.size == 0:
        return view.append_column(DISTANCE, pa.array([], pa.float32())).slice(0, 0)
    vectors = col.take(pa.array(present)).combine_chunks()
    dim = view.schema.field(column).type.list_size
    matrix = vectors.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, dim)
    d = distances(matrix, q, metric)
    top = np.argsort(d, kind="stable")[:k] if d.size <= k else np.argpartition(d, k)[:k]
    top = top[np.argsort(d[top], kind="stable")]
    return view.take(pa.array(present[top])).append_column(DISTANCE, pa.array(d[top], pa.float32()))
