"""Which generations' data an unfinished driverless merge already put in the base table.

A driverless merge commits its rows (a data commit) and then its progress marker (a second
commit). When it stops between the two, the next merge must not write those rows again: with
merge operators turned on since, folding them twice would be wrong. :func:`applied_data` finds
such data commits again from their transaction properties (memwal.merge.intents), walking the
versions since the oldest unfinished driverless intent's read version with
``ds.read_transaction(v)``.

Contract: per shard, the highest generation g such that the base table at the plan's version
holds the merged data of every generation from the recorded progress + 1 to g. Why it holds:

* a data commit names its intent and its data ranges, ``{shard: [from, to]}``; ranges chain
  from the recorded progress (each later data commit was planned on top of the earlier);
* it counts for a shard only while that shard's recorded progress has not moved since it: a
  marker committed after it may come from a merger that rewrote those rows, so the generations
  are merged again (last write wins makes that idempotent);
* a ``Restore`` or ``Overwrite`` since, an unreadable version (expired) or unreadable
  properties make the shards of the intents not found *unknown*: a last-write-wins plan merges
  their data again, a folding plan stops them (memwal.merge.plan).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from memwal.errors import MemWalError
from memwal.merge.intents import DATA_PROPERTY, DRIVERLESS, INTENT_PROPERTY, Intent
from memwal.table import Table
from memwal.table.manifest import TableManifest

#: Operations after which rows committed earlier may be gone.
_RESETS = ("Restore", "Overwrite")


@dataclass(frozen=True)
class DataCommit:
    """A driverless merge's data commit: the version, its intent, the generations it holds."""

    intent: str
    version: int
    data: dict[str, tuple[int, int]]


@dataclass(frozen=True)
class Applied:
    generation: dict[str, int] = field(default_factory=dict)
    commits: list[DataCommit] = field(default_factory=list)
    unknown: frozenset[str] = frozenset()


def _ranges(raw: str | None) -> dict[str, tuple[int, int]]:
    doc = json.loads(raw or "")
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    out = {}
    for shard, span in doc.items():
        a, b = (int(x) for x in span)
        if not 0 < a <= b:
            raise ValueError(f"bad range {span!r}")
        out[str(shard)] = (a, b)
    return out


def applied_data(table: Table, manifest: TableManifest, intents: list[Intent], shard_ids: set[str]) -> Applied:
    """See the module docstring. Reads nothing when no driverless intent is unfinished."""
    pending = {i.id: i for i in intents if i.commit_path == DRIVERLESS and i.pending_on(manifest, shard_ids)}
    if not pending:
        return Applied()
    ds = table.dataset(manifest.version)
    found: dict[str, DataCommit] = {}
    unknown: set[str] = set()
    blind_after: list[int] = []  # versions past which an intent not found may have landed unseen
    for v in range(min(i.read_version for i in pending.values()) + 1, manifest.version + 1):
        try:
            txn = ds.read_transaction(v)
        except (OSError, ValueError, RuntimeError):  # expired by a cleanup
            blind_after.append(v)
            continue
        if txn is None:
            continue
        if type(txn.operation).__name__ in _RESETS:
            found = {k: c for k, c in found.items() if c.version > v}
            blind_after.append(v)
            continue
        props = txn.transaction_properties or {}
        iid = props.get(INTENT_PROPERTY)
        if iid not in pending:
            continue
        try:
            found[iid] = DataCommit(iid, v, _ranges(props.get(DATA_PROPERTY)))
        except (ValueError, TypeError):
            unknown |= set(pending[iid].shards)
    for iid, intent in pending.items():
        if iid not in found and any(v > intent.read_version for v in blind_after):
            unknown |= set(intent.shards)
    generation: dict[str, int] = {}
    for sid in shard_ids:
        cur = start = manifest.compacted_generation(sid)
        for c in sorted(found.values(), key=lambda c: c.version):
            if sid not in c.data:
                continue
            try:
                moved = table.manifest(c.version).compacted_generation(sid) != start
            except MemWalError:
                unknown.add(sid)
                break
            a, b = c.data[sid]
            if not moved and a <= cur + 1 and b > cur:
                cur = b
        if cur > start:
            generation[sid] = cur
    return Applied(generation, sorted(found.values(), key=lambda c: c.version), frozenset(unknown & shard_ids))
