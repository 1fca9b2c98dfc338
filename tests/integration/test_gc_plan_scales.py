"""GC's plan is bounded by what it judges, never by generations x versions (issue 82).

Gate (c) asks, for every generation g of a shard, which retained versions had not merged it.
With one merge a version, g has about g holders: a list of them per generation made a plan of
8,000 versions hold some 32 million positions (1.9 GiB at 13,415 versions). The plan now counts
and ranks holders from each shard's progress sorted once (:mod:`memwal.gc.versions`).

Two things are proven here: the answers are exactly the ones the lists gave (a reference that
keeps the old code's lists, on a real table with a restore, a tag and version expiry, and on
random version histories with restores, branches, tags and writer-held versions), and the
plan's retained-version work grows with versions plus generations (bytes allocated at two
ages, never time).
"""

from __future__ import annotations

import math
import random
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import numpy as np
import pytest

import memwal
from memwal.checkpoint import TAG_PREFIX
from memwal.demo import shard_ids_for
from memwal.gc import plan_gc, retention
from memwal.gc.gates import GRACE_PERIOD, NOT_MERGED, Gates
from memwal.gc.recheck import ALL, LISTING, ORPHAN, STORAGE, SincePlan
from memwal.gc.retention import HeldGeneration, retention_report
from memwal.gc.shard_base import ShardBase
from memwal.gc.versions import ShardProgress, VersionProgress
from memwal.table import open_table
from memwal.table.manifest import TableManifest, read_table_manifest
from memwal.table.retained import RetainedVersion
from tests.conftest import SMALL

# --------------------------------------------------------------------------- the old code, as reference


class _ListedHolders:
    """The holders as the plan kept them before issue 82: their positions, listed."""

    def __init__(self, versions: list[RetainedVersion], positions: np.ndarray) -> None:
        self.versions, self.positions = versions, positions

    def __bool__(self) -> bool:
        return len(self.positions) > 0

    def __len__(self) -> int:
        return len(self.positions)

    def __iter__(self) -> Iterator[RetainedVersion]:
        return (self.versions[i] for i in self.positions)

    @property
    def first(self) -> RetainedVersion:
        return self.versions[int(self.positions[0])]

    def without(self, left_out: np.ndarray) -> _ListedHolders:
        return _ListedHolders(self.versions, self.positions[~left_out[self.positions]])


def _listed_holders(self: ShardProgress, g: int) -> _ListedHolders:
    """The old ``ShardProgress.holders``: a pass over every version per generation."""
    if g <= self.low:
        return _ListedHolders(self.versions, np.empty(0, dtype=np.intp))
    return _ListedHolders(self.versions, np.flatnonzero(self.values < g))


def _listed_folder_gates(self: ShardBase, gs: list[int]) -> list[tuple[tuple[str, ...], _ListedHolders]]:
    """The old ``ShardBase._folder_gates``: each generation's verdict, its holders listed."""
    out = []
    for g in gs:
        verdict = self.gates.verdict(self.sid, g)
        reasons = [r for r in verdict.reasons if r not in (GRACE_PERIOD, NOT_MERGED)
                   and not r.startswith("retained-version:")]
        versions = verdict.holders.versions  # the writers' mask as the old pass over the versions made it
        writers = np.array([v.branch is None and v.version in self.writer_held and not v.tags for v in versions],
                           dtype=bool)
        holders = verdict.holders.without(writers)
        if holders:
            reasons.append(f"retained-version:{holders.first.describe()}")
        out.append((tuple(reasons), holders))
    return out


def _listed_then_gates(self: ShardBase, g: int) -> tuple[tuple[str, ...], float | None]:
    [(reasons, holders)] = _listed_folder_gates(self, [g])
    aged = [v for v in holders if not v.tags and not v.child_branches and v.branch is None]
    since = max((v.timestamp for v in aged), default=None) if len(aged) == len(holders) else None
    return reasons, since


def _listed_held_counts(held: list[HeldGeneration]) -> retention._Holding:
    lists: dict[int, tuple[list[RetainedVersion], list[np.ndarray]]] = {}
    for h in held:
        lists.setdefault(id(h.holders.versions), (h.holders.versions, []))[1].append(h.holders.positions)
    out = []
    for versions, positions in lists.values():
        counts = np.bincount(np.concatenate(positions), minlength=len(versions))
        out += [(versions[i], int(counts[i])) for i in np.flatnonzero(counts)]
    aged = [(v, n) for v, n in out if retention._held_by(v) is None]
    return retention._Holding([(v, n) for v, n in out if retention._held_by(v) is not None], [v for v, _ in aged],
                              [n for _, n in aged], np.array([v.timestamp for v, _ in aged], dtype=float))


def _listed_expiry_candidates(held: list[HeldGeneration], now: float) -> list[int]:
    youngest: set[float] = set()
    facts: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for h in held:
        versions = h.holders.versions
        if id(versions) not in facts:
            n = len(versions)
            facts[id(versions)] = (np.fromiter((retention._held_by(v) is None for v in versions), dtype=bool, count=n),
                                   np.fromiter((v.timestamp for v in versions), dtype=float, count=n))
        by_age_only, stamps = facts[id(versions)]
        p = h.holders.positions
        if by_age_only[p].all():
            youngest.add(now - float(stamps[p].max()))
    values = sorted({math.ceil(age) - 1 for age in youngest if age > 0}, reverse=True)
    values = [v for v in values if v >= 0]
    return values if len(values) <= retention.MAX_TRIALS else [*values[:retention.MAX_TRIALS - 1], values[-1]]


def _listed_lost(self: SincePlan, shard_id: str, g: int, gates) -> str | None:
    """The old ``SincePlan._lost``: the holders listed, a pass over every version per generation."""
    if g > self.latest.compacted_generation(shard_id):
        return NOT_MERGED
    for name in self.indexes if gates.catchup else []:
        if g > self.latest.index_catchup.get(name, {}).get(shard_id, 0):
            return f"index-not-caught-up:{name}"
    for c in self.pins if gates.pins else ():
        if c.pins(shard_id, g):
            return c.gate
    if self.progress is None:
        return None
    shard = self.progress.shard(shard_id)
    holders = [h for h in _listed_holders(shard, g)
               if not (h.branch is None and h.version in self.writer_held and not h.tags)] if gates.retained else []
    if holders:
        return f"retained-version:{holders[0].describe()}"
    first = shard.first_merged(g)
    if gates.grace and (first is None or self.now - first.timestamp < self.grace_seconds):
        return GRACE_PERIOD
    return None


@contextmanager
def _the_old_lists(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every question about holders answered as before issue 82: from lists of positions."""
    with monkeypatch.context() as m:
        m.setattr(ShardProgress, "holders", _listed_holders)
        m.setattr(ShardBase, "_folder_gates", _listed_folder_gates)
        m.setattr(ShardBase, "then_gates", _listed_then_gates)
        m.setattr(retention, "_held_counts", _listed_held_counts)
        m.setattr(retention, "expiry_candidates", _listed_expiry_candidates)
        m.setattr(SincePlan, "_lost", _listed_lost)
        yield


# --------------------------------------------------------------------------- a real table


def _plan_doc(uri: str, now: float, **options) -> dict:
    plan = plan_gc(open_table(uri), writer_idle_seconds=0, now=now, **options)
    doc = plan.to_dict()
    doc.pop("retained_manifests_read")  # what the table object had read before: not an answer
    return {"plan": doc, "preview": plan.preview().to_dict()}


def test_a_plan_over_many_versions_a_restore_and_a_tag_answers_as_the_lists_did(make_table, monkeypatch):
    """B merged 3 generations (tagged: kept by its tag), R (a restore of an older version) has
    only 1, then M merged all 4, then 40 commits: progress is not monotone in version. The plan
    with and without a grace period (then the folders' gates past the listing are named), and
    with version expiry (R goes, B's tag keeps it), gives the same document as the lists gave,
    and each blocked generation names the first version a pass over every manifest finds."""
    table, _ = make_table()
    assert memwal.open(table.uri).merge(max_generations=1).ok and memwal.open(table.uri).catchup().ok
    older = table.dataset().version
    assert memwal.open(table.uri).merge(max_generations=2).ok and memwal.open(table.uri).catchup().ok
    b = table.dataset().version
    table.dataset(older).restore()
    r = table.dataset().version
    assert memwal.open(table.uri).merge().ok and memwal.open(table.uri).catchup().ok
    for tag, v in (("b", b), ("r", r)):
        table.dataset().tags.create(tag, v)
    table.dataset().cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)
    table.dataset().tags.delete("r")  # B stays tagged; R is kept by its age alone
    ds = table.dataset()
    for i in range(40):
        ds.update_config({"test.commit": str(i)})
    shards = shard_ids_for(SMALL)
    now = table.manifest().timestamp + 30.0
    cases = [{"grace_seconds": 0}, {"grace_seconds": 3600}, {"grace_seconds": 0, "expire_versions_seconds": 0}]
    for options in cases:
        new = _plan_doc(table.uri, now, **options)
        with _the_old_lists(monkeypatch):
            old = _plan_doc(table.uri, now, **options)
        assert new == old, options
    # and the plain way: every retained manifest decoded on its own, a pass over them per generation
    plan = plan_gc(open_table(table.uri), grace_seconds=0, writer_idle_seconds=0, now=now)
    progress = [(v, read_table_manifest(table.store, v.version).compacted) for v in plan.versions]
    blocked = {(x.shard_id, x.generation): list(x.reasons) for x in plan.blocked}
    held: dict[int, int] = {}
    for s in shards:
        for g in (1, 2, 3, 4):
            holders = [v for v, p in progress if p.get(s, 0) < g]
            assert blocked.get((s, g)) == ([f"retained-version:{holders[0].describe()}"] if holders else None)
            for v in holders:
                held[v.version] = held.get(v.version, 0) + 1
    assert held == {row.version: row.generations_held for row in plan.retention.blocking_versions}
    assert blocked[(shards[0], 4)] == [f"retained-version:{b} (tag b)"] and blocked[(shards[0], 2)] == [
        f"retained-version:{r}"]
    then = plan_gc(open_table(table.uri), grace_seconds=3600, writer_idle_seconds=0, now=now)
    waiting = [x for x in then.blocked if x.reason == GRACE_PERIOD]
    assert len(waiting) == len(shards) * 4 and any(x.then_versions_at is not None for x in waiting)
    for x in waiting:
        holders = [v for v, p in progress if p.get(x.shard_id, 0) < x.generation]
        aged = all(not v.tags and v.branch is None and not v.child_branches for v in holders)
        assert x.then_versions_at == (max(v.timestamp for v in holders) if holders and aged else None)


# --------------------------------------------------------------------------- random histories


def _history(rng: random.Random, n: int, shards: list[str]) -> list[RetainedVersion]:
    """``n`` main-line commits (merges, restores of an older manifest, other commits sharing the
    last one's progress), then a branch of its own; some tagged, some checkpoint-tagged, some
    starting a branch. In the retained versions' order: the main line, then the branch."""
    line: list[dict[str, int]] = [{s: 0 for s in shards}]
    out: list[RetainedVersion] = []
    t = 1_000.0
    for v in range(1, n + 1):
        roll = rng.random()
        if roll < 0.5:
            m = dict(line[-1])
            s = rng.choice(shards)
            m[s] += rng.randint(1, 3)
        elif roll < 0.6:
            m = rng.choice(line)  # a restore: an older manifest committed again
        else:
            m = line[-1]
        line.append(m)
        t += rng.uniform(1.0, 100.0)
        tags = ["keep"] if rng.random() < 0.05 else [f"{TAG_PREFIX}c{v}"] if rng.random() < 0.03 else []
        starts = ["b2"] if rng.random() < 0.03 else []
        out.append(RetainedVersion(v, None, t, m, f"_versions/{v}.manifest", "e", tags, starts))
    for v in range(1, n // 5 + 1):  # a branch forked from an early manifest, merging on its own
        m = {s: g + v // 3 for s, g in line[rng.randint(0, n // 3)].items()}
        out.append(RetainedVersion(v, "b1", 2_000.0 + v, m, f"tree/b1/_versions/{v}.manifest", "e"))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_random_histories_give_the_verdicts_and_report_the_lists_gave(seed, monkeypatch):
    """Every generation of every shard through the plan's own steps (the gates, the storage
    gates less the writer-held versions, the gates past the listing, the retention report with
    its expiry hint, the run's re-check), against the lists."""
    rng = random.Random(seed)
    shards = ["a", "b", "c"]
    versions = _history(rng, rng.randint(1, 150), shards)
    main = [v for v in versions if v.branch is None]
    latest = TableManifest(main[-1].version, main[-1].timestamp, main[-1].key, (), None, dict(main[-1].compacted))
    writer_held = frozenset(v.version for v in main if rng.random() < 0.1)
    now = max(v.timestamp for v in versions) + rng.choice([0.5, 50.0, 5_000.0])
    top = max(max(v.compacted.values()) for v in versions) + 2

    grace = rng.choice([0.0, 30.0])

    def judge() -> tuple[list, object, list]:
        gates = Gates(latest, [], versions, (), now, grace)
        answers, held = [], []
        for s in shards:
            base = ShardBase(s, None, None, gates, None, writer_held, None)
            for g in range(top):
                verdict = gates.verdict(s, g)
                answers.append((s, g, verdict.reasons, base._storage_gates([g])[0], base.then_gates(g)))
            held += base.held
        assert held, "the history holds some generation back"
        since = SincePlan(latest, (), versions, now, grace, writer_held)
        lost = [since.lost(s, g, gates=k) for s in shards for g in range(top) for k in (ALL, LISTING, STORAGE, ORPHAN)]
        return answers, retention_report(held, gates), lost

    new = judge()
    with _the_old_lists(monkeypatch):
        old = judge()
    assert new == old


def test_holders_answer_every_question_a_list_answered():
    """Count, first, the newest holder's time when only age keeps them all, and ``without``:
    on one shard whose progress goes up and back down (restores)."""
    rng = random.Random(7)
    versions = _history(rng, 300, ["a"])
    progress = VersionProgress(versions).shard("a")
    left_out = np.array([rng.random() < 0.2 for _ in versions])
    for g in range(int(progress.values.max()) + 2):
        for mask in (None, left_out):
            holders = progress.holders(g) if mask is None else progress.holders(g).without(mask)
            listed = [v for i, v in enumerate(versions)
                      if v.compacted.get("a", 0) < g and (mask is None or not mask[i])]
            assert len(holders) == len(listed) and bool(holders) == bool(listed)
            assert (holders.first if holders else None) is (listed[0] if listed else None)
            aged = all(not v.tags and not v.child_branches and v.branch is None for v in listed)
            assert holders.aged_since() == (max(v.timestamp for v in listed) if listed and aged else None)


def test_a_progress_grown_from_an_earlier_build_answers_as_one_built_whole():
    """A follower's listing pass grows the last build by the versions committed since (issue
    82): a build grown through three earlier ones (one over other objects of equal versions,
    one over a list changed after it was built) answers every shard, and which versions only a
    live writer keeps, as a build from nothing does."""
    rng = random.Random(11)
    versions = _history(rng, 400, ["a", "b"])
    VersionProgress(versions[:100])
    copies = [RetainedVersion(v.version, v.branch, v.timestamp, dict(v.compacted), v.key, v.etag, list(v.tags),
                              list(v.child_branches)) for v in versions[:250]]
    VersionProgress(copies)
    changed = list(versions[:300])
    VersionProgress(changed)
    changed[150] = copies[10]  # a caller's list changed after its build: the build saw it as it was
    grown = VersionProgress(versions)
    from memwal.gc import versions as built
    built._BUILT.clear()
    whole = VersionProgress(versions)
    held = {v.version for v in versions[::7]}
    expected = np.array([v.branch is None and v.version in held and not v.tags for v in versions], dtype=bool)
    assert grown.kept_for_writers(held).tolist() == whole.kept_for_writers(held).tolist() == expected.tolist()
    for shard in ("a", "b", "c"):
        a, b = grown.shard(shard), whole.shard(shard)
        assert a.values.tolist() == b.values.tolist() == [v.compacted.get(shard, 0) for v in versions]
        assert a.main_high.tolist() == b.main_high.tolist() and a.low == b.low
        assert a.by_age.tolist() == b.by_age.tolist() and a.stamps.tolist() == b.stamps.tolist()


# --------------------------------------------------------------------------- the work, at two ages


def _aged(n: int) -> list[RetainedVersion]:
    """``n`` versions of a table merged one generation a version, on two shards, every version
    retained (the default retention), a restore near the end and a tag in the middle."""
    out = []
    for v in range(1, n + 1):
        g = v if v != n - 2 else n // 2  # version n - 2 restores an older manifest
        out.append(RetainedVersion(v, None, 1_000.0 + v, {"a": g, "b": g}, f"_versions/{v}.manifest", "e",
                                   ["keep"] if v == n // 3 else []))
    return out


def _plan_peak(n: int) -> int:
    """Bytes the plan's retained-version steps hold at most for ``n`` versions and as many
    generations: the gates of every generation, the storage gates and the gates past the
    listing (a live writer's versions left out), the retention report with its hint, and the
    run's re-check of each generation."""
    versions = _aged(n)
    latest = TableManifest(n, 1_000.0 + n, f"_versions/{n}.manifest", (), None, {"a": n, "b": n})
    writer_held = frozenset({n - 1, n})
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        gates = Gates(latest, [], versions, (), 1_000.0 + n + 60.0, 30.0)
        held = []
        for s in ("a", "b"):
            base = ShardBase(s, None, None, gates, None, writer_held, None)
            for g in range(1, n + 1):
                gates.verdict(s, g)
                base.then_gates(g)
            base._storage_gates(list(range(1, n + 1)))  # as a plan asks of the folders it judges
            held += base.held
        report = retention_report(held, gates)
        since = SincePlan(latest, (), versions, gates.now, 30.0, writer_held)
        for s in ("a", "b"):
            for g in range(1, n + 1):
                since.lost(s, g)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report is not None and len(held) == 2 * (n - 1)  # every generation but the last is held
    return peak


def test_the_plans_retained_version_work_grows_with_versions_not_their_product():
    """At 100 and 1,000 versions (and as many generations), the plan's peak allocation grows
    at most about linearly: less than twice the ratio of the sizes. Lists of holders made it
    grow with their product (about 70x here)."""
    small, large = _plan_peak(100), _plan_peak(1_000)
    assert large < 2 * 10 * small, (small, large)
