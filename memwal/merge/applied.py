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
* a claim is only data, from whoever can commit to the table: it counts only when it matches
  the intent it names (:func:`claim_of`): an ``Update`` read at the intent's own read version
  (or rebased past it: Lance then records the version it rebased onto), only the intent's
  shards, each range within what the intent may have merged (above the progress recorded at
  its read version, up to its target), its properties under :data:`CLAIM_MAX_BYTES`.
  Anything else is ignored, as if never committed: the shard is merged again (a forged claim
  can no longer make a merge skip data);
* it counts for a shard only while that shard's recorded progress has not moved since it: a
  marker committed after it may come from a merger that rewrote those rows, so the generations
  are merged again (last write wins makes that idempotent);
* a ``Restore`` or ``Overwrite`` since, or an unreadable version (expired), makes the shards
  of the intents not found *unknown*: a last-write-wins plan merges
  their data again, a folding plan stops them (memwal.merge.plan).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from memwal.errors import MemWalError
from memwal.merge.intents import DATA_PROPERTY, DRIVERLESS, INTENT_PROPERTY, Intent
from memwal.table import Table
from memwal.table.manifest import TableManifest

log = logging.getLogger(__name__)

#: Operations after which rows committed earlier may be gone.
_RESETS = ("Restore", "Overwrite")
#: Largest data-ranges property read: a real one is some 60 bytes per shard of its intent.
CLAIM_MAX_BYTES = 64 + 128 * 1024


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


def _ranges(raw: object) -> dict[str, tuple[int, int]]:
    if not isinstance(raw, str) or len(raw) > CLAIM_MAX_BYTES:
        raise ValueError(f"not a string of at most {CLAIM_MAX_BYTES:,} characters")
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    out = {}
    for shard, span in doc.items():
        if not isinstance(span, list) or len(span) != 2 or not all(type(x) is int for x in span):
            raise ValueError(f"bad range {str(span)[:40]!r}")
        a, b = span
        if not 0 < a <= b:
            raise ValueError(f"bad range {span!r}")
        out[str(shard)] = (a, b)
    return out


def claim_of(txn: Any, intent: Intent, progress: TableManifest) -> dict[str, tuple[int, int]] | None:
    """The data ranges a commit claims for ``intent``, or None when the claim does not match
    the intent (see the module docstring): then it is no data commit of that intent.
    ``progress``: the table manifest at the intent's read version."""
    if type(txn.operation).__name__ != "Update" or not isinstance(txn.read_version, int) \
            or txn.read_version < intent.read_version:  # Lance stores the version it rebased onto
        return None
    try:
        data = _ranges((txn.transaction_properties or {}).get(DATA_PROPERTY))
    except (ValueError, TypeError, RecursionError):
        return None
    for sid, (a, b) in data.items():
        if sid not in intent.shards or a <= progress.compacted_generation(sid) or b > intent.shards[sid]:
            return None
    return data


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
        if not isinstance(iid, str) or iid not in pending:
            continue
        try:
            claim = claim_of(txn, pending[iid], table.manifest(pending[iid].read_version))
        except MemWalError:  # its read version expired: whether it is the data commit is unknown
            unknown |= set(pending[iid].shards)
            continue
        if claim is None:
            log.warning("merge %s: version %d claims the data of merge intent %s, which does not match it: "
                        "ignored (its shards are merged again)", table.uri, v, iid)
            continue
        found[iid] = DataCommit(iid, v, claim)
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
