"""`memwal verify`: check the invariants every job relies on, without changing anything.

Checks: no duplicate primary keys in the base table; per shard, no generation gap above
the merge progress and progress never above what was flushed; every generation path in
every manifest resolves inside its shard directory; every listed unmerged generation is
present. The LSM view comparison is the reader's-eye check used around operations.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from memwal.merge.plan import primary_key_of
from memwal.paths import UnsafePathError
from memwal.read import lsm_scan
from memwal.shard_manifests import all_shard_manifests, generation_readable
from memwal.table import Table


@dataclass
class Problem:
    check: str
    detail: str
    shard_id: str | None = None


@dataclass
class VerifyResult:
    table: str
    version: int
    checks: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    base_rows: int = 0
    lsm_rows: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def verify_table(table: Table) -> VerifyResult:
    manifest = table.require_mem_wal()
    res = VerifyResult(table=table.uri, version=manifest.version)
    pk = primary_key_of(table)

    res.checks.append("unique-primary-key")
    keys = table.dataset(manifest.version).to_table(columns=pk)
    res.base_rows = keys.num_rows
    dup = keys.group_by(pk).aggregate([([], "count_all")])
    dup = dup.filter(pc.greater(dup.column("count_all"), 1))
    if dup.num_rows:
        example = {k: dup.column(k)[0].as_py() for k in pk}
        res.problems.append(Problem("unique-primary-key", f"{dup.num_rows} keys appear more than once, e.g. {example}"))

    res.checks += ["no-generation-gap", "progress-not-above-flushed", "paths-inside-shard", "generations-present"]
    states = all_shard_manifests(table.store)
    for shard_id in manifest.compacted:
        if shard_id not in states:
            res.problems.append(
                Problem("progress-not-above-flushed", "progress recorded for a shard with no manifest", shard_id)
            )
    for shard_id, state in states.items():
        compacted = manifest.compacted_generation(shard_id)
        if compacted >= state.current_generation and compacted > 0:
            res.problems.append(
                Problem(
                    "progress-not-above-flushed",
                    f"merged generation {compacted} >= current generation {state.current_generation}",
                    shard_id,
                )
            )
        gens = [g.generation for g in state.flushed if g.generation > compacted]
        expected = list(range(compacted + 1, compacted + 1 + len(gens)))
        if gens != expected:
            res.problems.append(
                Problem("no-generation-gap", f"unmerged generations {gens} do not follow merged {compacted}", shard_id)
            )
        for g in state.flushed:
            try:
                key = state.generation_key(g)
            except UnsafePathError as exc:
                res.problems.append(Problem("paths-inside-shard", str(exc), shard_id))
                continue
            if g.generation > compacted and not generation_readable(table.store, key):
                res.problems.append(
                    Problem(
                        "generations-present", f"unmerged generation {g.generation} ({g.path}) is missing", shard_id
                    )
                )
    if not any(p.check == "paths-inside-shard" for p in res.problems):
        res.checks.append("lsm-view-readable")
        res.lsm_rows = lsm_scan(table, columns=pk).num_rows
    return res


def lsm_view(table: Table) -> pa.Table:
    """The reader's view sorted by primary key, for before/after comparisons."""
    pk = primary_key_of(table)
    t = lsm_scan(table)
    return t.sort_by([(k, "ascending") for k in pk])
