"""`memwal verify`: check the invariants every job relies on, without changing anything.

Checks: no duplicate primary keys in the base table; per shard, no generation gap above
the merge progress (the index's, or a drain's: memwal.table.drain) and progress never above
what was flushed; every generation path in every manifest resolves inside its shard
directory; every listed unmerged generation is present and readable (Lance validates each
fragment's data file footers and deletion file: memwal.table.generations); every merged
generation still on storage is in the base table (memwal.inspect.merged). What clients
check: pylance's ``ShardWriter.lsm_scanner()`` and lance-context read *every* generation the
shard manifest lists, merged or not, and fail on one that is missing or damaged
(``listed-generations-readable``, naming the shard and generation), lance-context fails on one
whose key index names a row twice (``listed-key-indexes-unique``), and then the view they read,
base table and every listed generation, is read as they read it, every column
(``client-view-readable``); LanceDB reads fewer generations, chosen by the marks of the
MemWAL index, and its reads are read as it reads them (``lancedb-view-readable``,
memwal.inspect.lancedb_view). The LSM view comparison is the reader's-eye check used around
operations.

A checker must never crash on what it checks: a missing, broken or unsafe generation, an
unreadable base table or an LSM view Lance cannot read is a finding (exit code 1), each
naming the object by its full path.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance.mem_wal import LsmScanner

from memwal.core import clock as clocks
from memwal.core import steps
from memwal.core.cycles import collector_paused
from memwal.core.document import Document
from memwal.core.retry import after_conflict
from memwal.errors import MemWalError, StateMovedError, UnsafePathError, first_line
from memwal.read import lsm_scan
from memwal.read.plan import plan_read
from memwal.snapshot.format import SnapshotUnavailableError
from memwal.snapshot.locate import read_snapshot
from memwal.table import Table
from memwal.table.drain import merged_through
from memwal.table.generations import generation_damage
from memwal.table.manifest import TableManifest
from memwal.table.schema import primary_key_of
from memwal.table.shards import ShardState, generation_readable, read_shard_manifests

#: What reading a Lance dataset can raise on broken files (Lance's IO errors are OSError).
_READ_ERRORS = (MemWalError, OSError, ValueError, RuntimeError, pa.ArrowException)


@dataclass
class Problem:
    check: str
    detail: str
    shard_id: str | None = None


@dataclass
class VerifyResult(Document):
    table: str
    version: int
    checks: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    base_rows: int = 0
    lsm_rows: int = 0
    #: What deserves a look but breaks no invariant (a checkpoint pinning storage for weeks).
    warnings: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d


@collector_paused()
def verify_table(table: Table, *, attempts: int = 6) -> VerifyResult:
    """Check the table; a finding is reported only when the table stood still while it was made.

    A merge followed by a GC (no grace period) collects a generation between our reading
    the shard manifests and our looking at it, and a version cleanup can expire the version
    the LSM view reads: checks made across such a commit can see a state that never
    existed. So when a check finds a problem and the table's latest version is no longer the
    one checked, the whole check starts over (memwal.core.retry); after ``attempts`` such rounds,
    exit code 3 (the table kept moving), never a false alarm.
    """

    def attempt(n: int) -> VerifyResult:
        res = _verify_once(table)
        if not res.ok and table.manifest().version != res.version:
            raise StateMovedError(f"{table.uri}: version {res.version} moved while verified "
                                  f"({res.problems[0].check}: {res.problems[0].detail})")
        return res

    return after_conflict(attempt, what=f"{table.uri}: verify", attempts=attempts)


def _verify_once(table: Table) -> VerifyResult:
    manifest = table.require_mem_wal()
    res = VerifyResult(table=table.uri, version=manifest.version)
    pk = primary_key_of(table)

    res.checks.append("unique-primary-key")
    try:
        keys = table.dataset(manifest.version).to_table(columns=pk)
    except _READ_ERRORS as exc:
        res.problems.append(Problem("unique-primary-key", f"base table unreadable: {first_line(exc, table.uri)}"))
        keys = pa.table({k: pa.array([], pa.int64()) for k in pk})
    res.base_rows = keys.num_rows
    dup = keys.group_by(pk).aggregate([([], "count_all")])
    dup = dup.filter(pc.greater(dup.column("count_all"), 1))
    if dup.num_rows:
        example = {k: dup.column(k)[0].as_py() for k in pk}
        res.problems.append(Problem("unique-primary-key", f"{dup.num_rows} keys appear more than once, e.g. {example}"))

    res.checks += ["shard-manifest-readable", "no-generation-gap", "progress-not-above-flushed",
                   "paths-inside-shard", "generations-present", "generations-readable", "listed-generations-readable"]
    found = read_shard_manifests(table.store)
    steps.step("verify.after-shard-manifests")
    unmerged: list[tuple[str, int, str]] = []  # (shard, generation, key) of present unmerged generations
    states = found.states
    for shard_id, err in found.broken.items():
        res.problems.append(Problem("shard-manifest-readable", f"{err.reason}: {err.detail}", shard_id))
    for shard_id in manifest.compacted:
        if shard_id not in states and shard_id not in found.broken:
            res.problems.append(
                Problem("progress-not-above-flushed", "progress recorded for a shard with no manifest", shard_id)
            )
    for shard_id, state in states.items():
        recorded = manifest.compacted_generation(shard_id)
        compacted = merged_through(recorded, state)
        if recorded >= state.current_generation and recorded > 0:
            res.problems.append(
                Problem(
                    "progress-not-above-flushed",
                    f"merged generation {recorded} >= current generation {state.current_generation}",
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
            if g.generation <= compacted:
                _check_listed_merged(table, res, shard_id, g.generation, g.path, key)
                continue
            if not generation_readable(table.store, key):
                res.problems.append(
                    Problem(
                        "generations-present",
                        f"unmerged generation {g.generation} ({table.store.uri_for(key)}) is missing",
                        shard_id,
                    )
                )
                continue
            why = generation_damage(table.store, key, table.store.uri_for(key), table.storage_options)
            if why is not None:
                detail = f"unmerged generation {g.generation} ({g.path}) {why}"
                res.problems.append(Problem("generations-readable", detail, shard_id))
            else:
                unmerged.append((shard_id, g.generation, key))
    _check_key_indexes(table, states, res)
    _check_checkpoints(table, res)
    _check_merged_data(table, manifest, states, res)
    res.checks.append("shard-snapshot-readable")
    try:  # what readers start from (hazard H3: a file snapshot can lose its file)
        read_snapshot(table, manifest)
    except SnapshotUnavailableError as exc:
        res.problems.append(Problem("shard-snapshot-readable",
                                    f"the published shard snapshot cannot be read: {exc}; run memwal snapshot"))
    # The reader would fail on what is already reported: that is not a second finding.
    blocking = ("paths-inside-shard", "shard-manifest-readable", "generations-present", "generations-readable")
    if not any(p.check in blocking for p in res.problems):
        res.checks.append("lsm-view-readable")
        try:
            res.lsm_rows = lsm_scan(table, columns=pk, manifest=manifest).num_rows
        except _READ_ERRORS as exc:
            detail = f"the LSM view cannot be read: {first_line(exc, table.uri)}"
            res.problems.append(Problem("lsm-view-readable", detail))
            res.problems += _broken_generations(table, pk, unmerged)
    if not any(p.check in (*blocking, "listed-generations-readable") for p in res.problems):
        _check_client_view(table, res, pk, manifest)
    if not any(p.check in blocking for p in res.problems):
        _check_lancedb_view(table, res, pk, manifest, states)
    return res


def _check_listed_merged(table: Table, res: VerifyResult, shard_id: str, generation: int, path: str,
                         key: str) -> None:
    """A merged generation the manifest still lists: every client opens and reads it."""
    uri = table.store.uri_for(key)
    why = ("is missing" if not generation_readable(table.store, key)
           else generation_damage(table.store, key, uri, table.storage_options))
    if why is not None:
        res.problems.append(Problem(
            "listed-generations-readable",
            f"merged generation {generation} ({uri}) is listed by the shard manifest but {why.split(': ', 1)[-1]}: "
            "pylance's lsm_scanner() and lance-context fail on it (memwal gc drains it from the manifest)", shard_id))


def _check_client_view(table: Table, res: VerifyResult, pk: list[str], manifest: TableManifest) -> None:
    """Read the table as the clients do: the base table and every listed generation, every
    column (a generation whose column a client cannot read fails the client, issue 56), and the
    rows must have the base table's schema. The read is filtered to one key of each listed
    generation (:func:`memwal.inspect.client_keys.probe_filter`): each generation's rows are
    decoded as a client decodes them, and memory stays bounded (the whole view of 10 KB rows that
    compress 600x took verify past 1 GB, issue 61)."""
    res.checks.append("client-view-readable")
    base = table.dataset(manifest.version)
    try:
        plan = plan_read(table, source="manifests", manifest=manifest, include_merged=True)
        # pylance's own reader, last write wins, as the clients read (no fold of merge operators)
        from memwal.inspect.client_keys import PROBE_ROWS, probe_filter

        scanner = LsmScanner.from_snapshots(base, plan.snapshots)
        where = probe_filter(table, pk, plan.generations)
        view = (scanner.filter(where) if where is not None else scanner.limit(PROBE_ROWS)).to_table()
    except _READ_ERRORS as exc:
        res.problems.append(Problem("client-view-readable", "the view pylance's lsm_scanner() and lance-context "
                                    f"read (every listed generation) fails: {first_line(exc, table.uri)}"))
        return
    want = {f.name: f.type for f in base.schema}
    wrong = [f"{f.name}: {f.type} (base table: {want[f.name]})" for f in view.schema
             if f.name in want and not f.type.equals(want[f.name])]
    if wrong or not set(want) <= set(view.schema.names):
        missing = sorted(set(want) - set(view.schema.names))
        res.problems.append(Problem("client-view-readable", "the view the clients read does not have the base "
                                    f"table's columns: {'; '.join(wrong + [f'{m}: missing' for m in missing])}"))


def _check_lancedb_view(table: Table, res: VerifyResult, pk: list[str], manifest: TableManifest,
                        states: dict[str, ShardState]) -> None:
    """Read the table as LanceDB does (memwal.inspect.lancedb_view): each of its reads opens,
    and its index searches count the rows its scans count."""
    from memwal.inspect.lancedb_view import CHECK, lancedb_reads, read_as_lancedb

    res.checks.append(CHECK)
    scanned: int | None = None
    for i, read in enumerate(lancedb_reads(manifest, states)):  # its scans first
        try:
            rows = read_as_lancedb(table, manifest, states, read, pk)
        except _READ_ERRORS as exc:
            res.problems.append(Problem(CHECK, f"LanceDB's {read.what} fail: {first_line(exc, table.uri)}"))
            continue
        if i == 0:
            scanned = rows
        elif scanned is not None and rows != scanned:
            res.problems.append(Problem(CHECK, f"LanceDB's {read.what} see {rows} rows, its scans {scanned}"))


def _check_key_indexes(table: Table, states: dict[str, ShardState], res: VerifyResult) -> None:
    """Each listed generation has a key index, and it names each row once
    (memwal.inspect.key_index): every list reader fails on one that has none, lance-context's
    on one that names a row twice."""
    from memwal.inspect.key_index import CHECK, doubly_indexed, without_key_index

    res.checks.append(CHECK)
    res.checks.append("listed-key-indexes-present")
    for shard_id, state in states.items():
        try:
            found = doubly_indexed(table, state)
            missing = without_key_index(table, state)
        except UnsafePathError:
            continue  # paths-inside-shard reports it
        for g in missing:
            res.problems.append(Problem("listed-key-indexes-present", f"listed generation {g} has no primary-key "
                                        "index (_pk_index/): pylance's lsm_scanner() and lance-context fail on every "
                                        "read while it is listed (lance#9035); memwal gc rewrites it with one",
                                        shard_id))
        for g, why in found:
            res.problems.append(Problem(CHECK, f"listed generation {g}: {why}: lance-context's list() fails on it "
                                        "(its own replay bug: docs/clients.md); a merge, then GC's drain once "
                                        "the writing process is gone, takes it out", shard_id))


def _check_merged_data(table: Table, manifest: TableManifest, states: dict[str, ShardState], res: VerifyResult) -> None:
    """Merged generations still on storage are in the base table (memwal.inspect.merged)."""
    from memwal.inspect.merged import CHECK, unproven_merges

    res.checks.append(CHECK)
    res.problems += [Problem(CHECK, u.detail, u.shard_id) for u in unproven_merges(table, manifest, states)]


def _check_checkpoints(table: Table, res: VerifyResult) -> None:
    """Every live checkpoint's view is still there (its base version and every generation it
    lists); every checkpoint record is readable. A long pin is a warning."""
    from memwal.checkpoint import missing_from_view, read_checkpoints

    res.checks.append("checkpoints-readable")
    now = clocks.current()()
    records = read_checkpoints(table, now)
    for bad in records.unreadable:
        res.problems.append(Problem("checkpoints-readable", f"{bad.reason} (memwal checkpoint delete removes it)"))
    for c in records.checkpoints:
        if not c.live(now):
            continue
        gone = missing_from_view(table, c)
        if gone is not None:
            res.problems.append(Problem("checkpoints-readable", f"checkpoint {c.id}: {gone} of its view is gone"))
        if c.long_pin(now):
            claimed = " (its record claimed longer: capped)" if c.claimed_expiry is not None else ""
            res.warnings.append(Problem("checkpoints-readable", f"checkpoint {c.id} pins version {c.version} for "
                                        f"{(c.expires_at - now) / 86400:.0f} more days{claimed}"))


def _broken_generations(table: Table, pk: list[str], unmerged: list[tuple[str, int, str]]) -> list[Problem]:
    """Which present unmerged generations Lance cannot read (only looked for once the LSM
    view failed: reading every generation whole on every verify would be slow)."""
    found = []
    for shard_id, generation, key in unmerged:
        uri = table.store.uri_for(key)
        try:
            lance.dataset(uri, storage_options=table.storage_options or None).to_table(columns=pk)
        except _READ_ERRORS as exc:
            detail = f"unmerged generation {generation} ({uri}) is unreadable: {first_line(exc, table.uri)}"
            found.append(Problem("generations-readable", detail, shard_id))
    return found


def lsm_view(table: Table) -> pa.Table:
    """The reader's view sorted by primary key, for before/after comparisons."""
    pk = primary_key_of(table)
    t = lsm_scan(table)
    return t.sort_by([(k, "ascending") for k in pk])
