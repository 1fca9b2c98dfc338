"""The gates a generation must pass to be deleted, and what would free the ones retained versions hold.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from memwal.checkpoint import TAG_PREFIX, Checkpoint
from memwal.gc.versions import ShardProgress
from memwal.table.retained import RetainedVersion
from memwal.table.shards import GAP, MISSING, UNREADABLE

if TYPE_CHECKING:
    pass



DEFAULT_GRACE_SECONDS = 600.0


#: Reason of whatever a symbolic link in the table (or a manifest path leaving its shard) holds.
UNSAFE_PATH = "unsafe-path"


#: Why a WAL entry is kept although its generation goes (see the module docstring, gate e).
WAL_NEEDED_FOR_REPLAY = "wal-needed-for-replay"


FENCE_SENTINEL = "fence-sentinel"


GRACE_PERIOD = "grace-period"


#: Gates named by a code alone, and gates named by a code and what they name (``checkpoint:<id>``,
#: ``retained-version:<version (tag ...)>``): what a blocked item's ``reasons`` hold before
#: its details (a broken shard's message, a link's path, an orphan's name).
GATE_CODES = frozenset({"not-merged", GRACE_PERIOD, UNSAFE_PATH, GAP, UNREADABLE, MISSING})
GATE_PREFIXES = ("index-not-caught-up:", "checkpoint:", "retained-version:", "orphan-", "changed-since-plan:")


def is_gate(reason: str) -> bool:
    """Whether a ``reasons`` entry names a gate (else it is a detail of one)."""
    return reason in GATE_CODES or reason.startswith(GATE_PREFIXES)


@dataclass
class Blocked:
    shard_id: str
    generation: int
    reason: str
    reasons: list[str] = field(default_factory=list)
    wal_position: int | None = None


class Verdict(NamedTuple):
    """What the gates say about one generation."""

    reasons: list[str]  # every gate that blocks it (empty when deletable)
    evidence: dict  # the values the gates compared
    holders: list[RetainedVersion]  # retained versions that still need it (gate c)


def verdict_of(
    shard_id: str,
    g: int,
    *,
    compacted: int,
    catchup: dict[str, dict[str, int]],
    indexes: list[str],
    progress: ShardProgress,
    now: float,
    grace_seconds: float,
    checkpoints: tuple[Checkpoint, ...] = (),
) -> Verdict:
    """Every gate that blocks generation g, and the evidence.

    ``progress`` is every retained version's merge progress for the shard, read once per
    shard rather than once per generation (:mod:`memwal.gc.versions`).
    """
    reasons: list[str] = []
    if g > compacted:
        reasons.append("not-merged")
    caught = {}
    for name in indexes:
        caught[name] = catchup.get(name, {}).get(shard_id, 0)
        if g > caught[name]:
            reasons.append(f"index-not-caught-up:{name}")
    reasons += [f"checkpoint:{c.id}" for c in checkpoints if c.pins(shard_id, g)]
    holders = progress.holders(g)
    if holders:
        reasons.append(f"retained-version:{holders[0].describe()}")
    # the first retained main-line version that merged g: when readers stopped needing it
    first = progress.first_merged(g)
    merged_at = None if first is None else first.timestamp
    if (merged_at is None or now - merged_at < grace_seconds) and "not-merged" not in reasons:
        reasons.append(GRACE_PERIOD)
    evidence = {
        "merged_generation": compacted,
        "index_catchup": caught,
        "oldest_retained_progress": progress.low,
        "merged_at": merged_at,
        "grace_seconds": grace_seconds,
    }
    return Verdict(reasons, evidence, holders)


class HeldGeneration(NamedTuple):
    """A merged generation the retained-version gate blocks, with what decides its fate."""

    generation: int
    holders: list[RetainedVersion]  # retained versions that had not merged it
    progress: ShardProgress  # every retained version's progress for its shard
    reasons: list[str]  # every gate that blocks it now


def _freed_by_expiry(h: HeldGeneration, seconds: float, now: float, grace_seconds: float) -> tuple[bool, list[str]]:
    """Whether expiring the untagged versions older than ``seconds`` would let the generation
    go, and if not which gates would still hold it: every gate, not just the first. Expiry
    can also remove the version that first merged it, which moves its grace period later."""
    def expired(v: RetainedVersion) -> bool:
        return _held_by(v) is None and now - v.timestamp >= seconds

    others = [r for r in h.reasons if not r.startswith("retained-version") and r != GRACE_PERIOD]
    if any(not expired(v) for v in h.holders):
        others.append("retained-version")
    first = h.progress.first_merged(h.generation, keep=lambda v: not expired(v))
    merged_at = None if first is None else first.timestamp
    if merged_at is None or now - merged_at < grace_seconds:
        others.append(GRACE_PERIOD)
    return not others, others


def retention_report(held: list[HeldGeneration], now: float, grace_seconds: float = 0.0) -> dict | None:
    """Which retained versions hold merged generations back, and what would free each.

    ``held`` lists the merged generations the retained-version gate blocks. Untagged
    main-line versions go with Lance's cleanup (``--expire-versions SECONDS``): the hint gives
    the largest value that still expires every blocking one (it keeps the most history; ages
    only grow, so it stays valid), and how many generations that frees once every gate is
    counted (indexes, checkpoints, and the grace period, which expiry can move later), naming
    the gates that would still hold the rest. A tag, a branch, or a version a branch starts
    from is the user's to delete: no GC option removes it.
    """
    if not held:
        return None
    counts: Counter[int] = Counter(id(v) for h in held for v in h.holders)
    versions = {id(v): v for h in held for v in h.holders}
    rows = sorted((_blocking_version(v, counts[i], now) for i, v in versions.items()),
                  key=lambda r: (r["branch"] or "", r["version"]))
    expirable = [r for r in rows if r["held_by"] is None]
    hints = []
    if expirable:
        seconds = max(0, math.floor(min(r["age_seconds"] for r in expirable)))
        outcomes = [_freed_by_expiry(h, seconds, now, grace_seconds) for h in held]
        freed = sum(ok for ok, _ in outcomes)
        still = Counter(r for ok, rs in outcomes if not ok for r in rs)
        rest = ("" if not still else "; the others would still be held by "
                + ", ".join(f"{r} ({n})" for r, n in sorted(still.items())))
        hints.append(f"untagged version(s) {_versions_text(expirable)}: run gc with --expire-versions {seconds} "
                     f"to expire them, which frees {freed} of the {len(held)} generation(s) retained versions hold"
                     + rest)
    for r in rows:
        if r["held_by"] == "checkpoint":
            ids = ", ".join(t.removeprefix(TAG_PREFIX) for t in r["tag"].split(", "))
            hints.append(f"version {r['version']} is pinned by checkpoint {ids}: it is freed when the checkpoint "
                         "expires or is deleted (memwal checkpoint delete)")
        elif r["tag"]:
            hints.append(f"version {r['version']} is tagged {r['tag']}: delete the tag to free it "
                         "(GC never deletes tags)")
        elif r["held_by"] == "branch":
            where = r["branch"] or r["starts_branch"]
            hints.append(f"version {r['version']} is kept by branch {where}: delete the branch to free it "
                         "(GC never deletes branches)")
    return {"blocking_versions": rows, "hint": "; ".join(hints)}


def _blocking_version(v: RetainedVersion, generations_held: int, now: float) -> dict:
    """One ``retention.blocking_versions`` entry: the version, what keeps it, how much it holds."""
    tag = ", ".join(sorted(v.tags)) or None
    starts = ", ".join(sorted(v.child_branches)) or None
    return {"version": v.version, "branch": v.branch, "tag": tag, "starts_branch": starts, "held_by": _held_by(v),
            "age_seconds": round(max(0.0, now - v.timestamp), 1), "generations_held": generations_held}


def _held_by(v: RetainedVersion) -> str | None:
    """What keeps a version from Lance's cleanup: ``"checkpoint"`` (only checkpoint tags), ``"tag"``,
    ``"branch"``, or None (only its age)."""
    if v.tags and all(t.startswith(TAG_PREFIX) for t in v.tags):
        return "checkpoint"
    if v.tags:
        return "tag"
    return "branch" if v.branch is not None or v.child_branches else None


def _versions_text(rows: list[dict]) -> str:
    """``3, 4, 5`` (or ``3..40`` for a long run) for a hint."""
    vs = sorted(r["version"] for r in rows)
    return f"{vs[0]}..{vs[-1]}" if len(vs) > 5 else ", ".join(map(str, vs))
