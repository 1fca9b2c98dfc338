"""What would free the merged generations that retained versions hold (a GC plan's ``retention``).

Each retained version that holds merged generations back is named with what keeps it: a
checkpoint, a tag or a branch is the user's to delete (GC never deletes them); an untagged
main-line version goes with Lance's cleanup (``--expire-versions SECONDS``).

The hint proposes a value only if it really frees generations, and says exactly how many. Each
candidate is tried the way the run would plan it: :class:`memwal.gc.expiry.ExpiryPlanner`
picks the versions that go, then every gate is asked again without them (the answer
:meth:`memwal.gc.gates.Gates.without` would give, worked out once per trial: :class:`_Trials`).
The candidates are, per held generation, the largest whole number of seconds that still expires
its youngest holder. Between two candidates a larger value expires the same holders and keeps
more versions, so it never frees less. Each is rounded down to a value a person would schedule
(:func:`round_seconds`) and tried as rounded. The hint names the value that frees the most (the
largest among equals: it keeps the most history, and ages only grow, so it stays valid, and the
same until the versions pass the next step). When none frees any, the hint proposes no value and
names the gates that would still hold the generations.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import NamedTuple

import numpy as np

from memwal.checkpoint import TAG_PREFIX
from memwal.core.kept import BY_AGE
from memwal.core.words import counted
from memwal.gc.expiry import ExpiryPlanner
from memwal.gc.gates import Gates
from memwal.gc.model import BlockingVersion, Retention
from memwal.gc.versions import Holders, Ranked, ShardProgress, by_age_only
from memwal.table.retained import RetainedVersion

#: At most this many ``--expire-versions`` values are tried for the hint (the largest ones, and
#: the smallest, which expires every untagged holder): each is one more pass of the gates.
MAX_TRIALS = 16
#: The ``--expire-versions`` values a hint proposes (one minute to a month), rather than the age of
#: a holder to the second, which changed with every run (issue 84).
ROUND_SECONDS = (60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 3 * 86400,
                 7 * 86400, 14 * 86400, 30 * 86400)

RETAINED_VERSION = "retained-version"


class HeldGeneration(NamedTuple):
    """A merged generation the retained-version gate blocks."""

    shard_id: str
    generation: int
    holders: Holders  # retained versions that had not merged it
    #: its verdict's other gates (not the grace period, not retained versions): what version
    #: expiry leaves holding it, from the verdict its run already asked
    others: tuple[str, ...]


class ExpiryTrial(NamedTuple):
    """What expiring the versions older than ``seconds`` would do to the held generations."""

    seconds: int
    gone: frozenset[int]  # the versions it expires
    freed: int
    still: Counter[str]  # gate -> how many of the held generations it would still hold


def retention_report(held: list[HeldGeneration], gates: Gates) -> Retention | None:
    """Which retained versions hold merged generations back, and what would free each (see
    the module docstring). ``held`` lists the merged generations the retained-version gate
    blocks; ``gates`` are the gates they were judged by.

    Every holder is counted, at most :data:`SHOWN_VERSIONS` are named: the ones a tag, a branch or
    a checkpoint keeps first (the user's to delete, each with its own hint), then the youngest of
    those only their age keeps (the first version expiry frees last). A week of versions beside a
    busy writer is some 70,000 holders: a row for each made every whole GC's document 9 MB and
    its plan grow with the table's age (issue 82)."""
    if not held:
        return None
    now = gates.now
    holding = _held_counts(held)
    pinned = [_blocking_version(v, n, now) for v, n in holding.pinned]
    aged = holding.youngest(SHOWN_VERSIONS - min(len(pinned), SHOWN_VERSIONS // 2))
    shown = sorted(pinned[:SHOWN_VERSIONS - len(aged)] + [_blocking_version(v, n, now) for v, n in aged],
                   key=lambda r: (r.branch or "", r.version))
    hints = []
    if holding.aged:
        hints.append(_expiry_hint(held, gates, [v.version for v in holding.aged]))
    named = [r for r in shown if r.held_by is not None]
    for r in named:
        if r.held_by == "checkpoint":
            ids = ", ".join(t.removeprefix(TAG_PREFIX) for t in (r.tag or "").split(", "))
            hints.append(f"Version {r.version} is pinned by checkpoint {ids}: it is freed when the checkpoint "
                         "expires or is deleted (memwal checkpoint delete).")
        elif r.tag:
            hints.append(f"Version {r.version} is tagged {r.tag}: delete the tag to free it "
                         "(GC never deletes tags).")
        elif r.held_by == "branch":
            where = r.branch or r.starts_branch
            hints.append(f"Version {r.version} is kept by branch {where}: delete the branch to free it "
                         "(GC never deletes branches).")
    if len(pinned) > len(named):
        hints.append(f"{counted(len(pinned) - len(named), 'more version')} kept by a tag, a branch or a checkpoint "
                     "also hold some.")
    by_holder = Counter(r.held_by or BY_AGE for r in pinned)
    if holding.aged:
        by_holder[BY_AGE] = len(holding.aged)
    youngest = None if not aged else round(max(0.0, now - max(v.timestamp for v, _ in aged)), 1)
    return Retention(tuple(shown), " ".join(hints), dict(sorted(by_holder.items())), youngest)


#: Blocking versions a GC document names (:func:`retention_report`); every one is counted.
SHOWN_VERSIONS = 100


class _Holding(NamedTuple):
    """The retained versions that hold a generation of ``held``, with how many each holds."""

    pinned: list[tuple[RetainedVersion, int]]  # kept by a tag, a branch or a checkpoint
    aged: list[RetainedVersion]  # kept by their age only
    aged_counts: list[int]
    aged_stamps: np.ndarray  # their commit times

    def youngest(self, n: int) -> list[tuple[RetainedVersion, int]]:
        """The ``n`` most recently committed holders only their age keeps."""
        stamps = self.aged_stamps
        top = range(len(stamps)) if len(stamps) <= n else np.argpartition(stamps, len(stamps) - n)[-n:].tolist()
        return [(self.aged[j], self.aged_counts[j]) for j in top] if n > 0 else []


def _views(held: list[HeldGeneration]) -> list[tuple[ShardProgress, Ranked, np.ndarray]]:
    """The held generations by the order their holders are counted in (a shard's versions, less one
    mask), each order built once: every question of the report is then one binary search per
    order, not a Python call per generation (a week keeps some 70,000 of them: issue 82)."""
    groups: dict[tuple[int, int], tuple[ShardProgress, np.ndarray | None, list[int]]] = {}
    for h in held:
        hs = h.holders
        groups.setdefault((id(hs.progress), id(hs.left_out)), (hs.progress, hs.left_out, []))[2].append(h.generation)
    return [(progress, progress.ranked(mask), np.asarray(gs, dtype=np.int64)) for progress, mask, gs in groups.values()]


def _held_counts(held: list[HeldGeneration]) -> _Holding:
    """Each retained version that holds a generation of ``held``, with how many it holds.

    Counted, never listed (issue 82: a week of versions times a week of generations is too many
    positions to hold): per shard, the held generations sorted once, and each version holds
    those above its progress, one binary search a version (:class:`memwal.gc.versions.Ranked`
    has the versions in progress order, less the ones its mask leaves out)."""
    counts: dict[int, tuple[ShardProgress, np.ndarray]] = {}
    for progress, ranked, generations in _views(held):
        total = counts.setdefault(id(progress.versions),
                                  (progress, np.zeros(len(progress.versions), dtype=np.int64)))[1]
        above = np.sort(generations)
        # held generations above each kept version's progress: the ones it had not merged
        total[ranked.at] += len(above) - np.searchsorted(above, ranked.values, side="right")
    pinned: list[tuple[RetainedVersion, int]] = []
    aged: list[RetainedVersion] = []
    aged_counts: list[int] = []
    stamps = []
    for progress, total in counts.values():
        at = np.flatnonzero(total)
        by_age = progress.by_age[at]
        pin, age = at[~by_age], at[by_age]
        pinned += zip([progress.versions[i] for i in pin.tolist()], total[pin].tolist(), strict=True)
        aged += [progress.versions[i] for i in age.tolist()]
        aged_counts += total[age].tolist()
        stamps.append(progress.stamps[age])
    return _Holding(pinned, aged, aged_counts, np.concatenate(stamps) if stamps else np.zeros(0))


def _expiry_hint(held: list[HeldGeneration], gates: Gates, expirable: list[int]) -> str:
    """Two sentences: what holds the generations (the retained versions, the untagged ones named:
    ``expirable``, the numbers of those only their age keeps), then what would free them: the
    ``--expire-versions`` value that frees the most, or why none does."""
    trial = _Trials(held, gates)
    tried = sorted({round_seconds(s) for s in expiry_candidates(held, gates.now)}, reverse=True)
    trials = [t for t in map(trial, tried) if t is not None]
    best = max(trials, key=lambda t: (t.freed, t.seconds), default=None)
    n = len(held)
    if best is not None and best.freed:
        named = [v for v in expirable if v in best.gone] or expirable
        return (f"Retained versions hold {counted(n, 'merged generation')}, {_versions_text(named)} among them. "
                f"Run gc with --expire-versions {best.seconds} to expire those: that frees {best.freed:,} of the "
                f"{counted(n, 'generation')}" + _still_text(best.still, "; the others would still be held by ") + ".")
    most = min(trials, key=lambda t: t.seconds, default=None)
    return (f"Retained versions hold {counted(n, 'merged generation')}, {_versions_text(expirable)} among them. "
            f"Expiring those (gc --expire-versions) frees none of the {counted(n, 'generation')} now"
            + ("" if most is None else _still_text(most.still, ": they would still be held by ")) + ".")


def round_seconds(seconds: int) -> int:
    """``seconds`` rounded down to the nearest of :data:`ROUND_SECONDS` (as it is below a minute):
    an ``--expire-versions`` value a person can keep in a schedule. Down, so that it expires at
    least the versions ``seconds`` would (it is tried as it is, never assumed to free the same);
    and the value proposed stays the same as the versions age until they pass the next step."""
    return max((r for r in ROUND_SECONDS if r <= seconds), default=seconds)


def expiry_candidates(held: list[HeldGeneration], now: float) -> list[int]:
    """The ``--expire-versions`` values worth trying (see the module docstring), largest first:
    per held generation whose holders only their age keeps, the age of the newest holder (one
    binary search per shard: :meth:`memwal.gc.versions.Ranked.aged_since`)."""
    youngest: set[float] = set()
    for _, ranked, generations in _views(held):
        since = ranked.aged_since(generations)
        youngest.update((now - since[~np.isnan(since)]).tolist())
    values = sorted({math.ceil(age) - 1 for age in youngest if age > 0}, reverse=True)
    values = [v for v in values if v >= 0]
    return values if len(values) <= MAX_TRIALS else [*values[:MAX_TRIALS - 1], values[-1]]


class _Trials:
    """What ``--expire-versions seconds`` would free of ``held``, every gate asked again without
    the versions the run would expire (None: it expires nothing).

    Expiry changes one gate only, the retained versions (the merge progress, index catch-up and
    checkpoints do not move; the grace period does not apply to a folder past its listing), so
    the other gates of each held generation are the ones its run's verdict named
    (:attr:`HeldGeneration.others`), and per trial "a version left had not merged g" is a
    comparison with the least progress of the versions left, per shard:
    exactly what :meth:`memwal.gc.gates.Gates.without` would answer, at the cost of one pass
    over the versions a trial and one comparison of each shard's held generations at once."""

    def __init__(self, held: list[HeldGeneration], gates: Gates) -> None:
        self.gates = gates
        self.progress = {h.shard_id: gates.shard(h.shard_id).values for h in held}
        per_shard: dict[str, tuple[list[int], list[bool]]] = {}
        #: the other gates of every held generation: the same whatever versions expire
        self.others: Counter[str] = Counter()
        for h in held:
            generations, bare = per_shard.setdefault(h.shard_id, ([], []))
            generations.append(h.generation)
            bare.append(not h.others)
            if h.others:
                self.others.update(h.others)
        #: per shard, its held generations and which of them no other gate holds
        self.shards = {sid: (np.asarray(gs, dtype=np.int64), np.asarray(bare, dtype=bool))
                       for sid, (gs, bare) in per_shard.items()}
        #: what keeps each version apart from its age, judged once for every trial
        self.planner = ExpiryPlanner(gates.versions, gates.latest.version, gates.checkpoints)
        #: each version's position among the retained versions (the progress arrays' order)
        self.at = {id(v): i for i, v in enumerate(gates.versions)}

    def __call__(self, seconds: int) -> ExpiryTrial | None:
        gates = self.gates
        _, gone = self.planner.plan(seconds, gates.now)
        if not gone:
            return None
        left = np.ones(len(gates.versions), dtype=bool)
        left[[self.at[id(v)] for v in gone]] = False
        # a generation is held by a version left when its progress is below the generation
        least = {sid: int(values[left].min()) if left.any() else None for sid, values in self.progress.items()}
        still = Counter(self.others)
        freed = 0
        for sid, (generations, bare) in self.shards.items():
            low = least[sid]
            retained = generations > low if low is not None else np.zeros(len(generations), dtype=bool)
            freed += int(np.count_nonzero(bare & ~retained))
            still[RETAINED_VERSION] += int(np.count_nonzero(retained))
        return ExpiryTrial(seconds, frozenset(v.version for v in gone), freed, +still)


def _still_text(still: Counter[str], lead: str) -> str:
    return "" if not still else lead + ", ".join(f"{r} ({n})" for r, n in sorted(still.items()))


def _blocking_version(v: RetainedVersion, generations_held: int, now: float) -> BlockingVersion:
    """One ``retention.blocking_versions`` entry: the version, what keeps it, how much it holds."""
    tag = ", ".join(sorted(v.tags)) or None
    starts = ", ".join(sorted(v.child_branches)) or None
    return BlockingVersion(v.version, v.branch, tag, starts, _held_by(v), round(max(0.0, now - v.timestamp), 1),
                           generations_held)


def _held_by(v: RetainedVersion) -> str | None:
    """What keeps a version from Lance's cleanup: ``"checkpoint"`` (only checkpoint tags), ``"tag"``,
    ``"branch"``, or None (only its age: :func:`memwal.gc.versions.by_age_only`)."""
    if v.tags and all(t.startswith(TAG_PREFIX) for t in v.tags):
        return "checkpoint"
    if v.tags:
        return "tag"
    return None if by_age_only(v) else "branch"


def _versions_text(versions: list[int]) -> str:
    """``untagged versions 3, 4, 5`` (or ``3..40`` for a long run) for a hint."""
    vs = sorted(versions)
    listed = f"{vs[0]}..{vs[-1]}" if len(vs) > 5 else ", ".join(map(str, vs))
    return f"untagged version{'s' * (len(vs) != 1)} {listed}"
