"""Merge intents: what an unfinished merge may already have committed, so no merger undercuts it.

Lance fences the marked pass only by "the recorded generation must grow". That leaves one
way for a merger that lost its lease to do harm: merger A plans generations 1..4 of a
shard, commits its bound delete pass (or nothing yet) and stalls; merger B takes the lease
over and, with a smaller budget, merges only 1..2, re-inserting a key that A's batch
deletes in generation 3; A wakes and its marker 4 is above B's 2, so Lance accepts it, and
generation 3's delete is recorded as merged but never applied to B's re-inserted row.

The intent closes it. Before its first commit a merger writes ``{shard: to_generation}``
under ``_mem_wal/_jobs/merge-intents/`` and only then checks its lease. Every plan reads
all intents and takes, for each shard it merges, at least the generations up to the
highest intent above the recorded progress (ignoring its budget; a shard that cannot reach
that far is not merged at all). So either B took the lease before A's check (A stops at
that check, before any commit), or B planned after A's intent was written and merges at
least A's generations: B's marker is then at least A's, Lance rejects A's marked pass as
stale, and A's bound delete pass only ever removes rows B's wider batch also removed or
rewrote. A finished merge deletes its intent; intents at or below the recorded progress are
pruned by the next merge that commits.
"""

from __future__ import annotations

import json
import logging
import time
import uuid

from memwal.errors import MemWalError, NotFoundError
from memwal.store import Store
from memwal.table.manifest import TableManifest
from memwal.table.naming import JOBS_DIR

log = logging.getLogger(__name__)

INTENTS_DIR = f"{JOBS_DIR}/merge-intents"


def write_intent(store: Store, targets: dict[str, int], read_version: int, holder: str) -> str:
    """Record the generations a merge is about to commit; returns the intent's key."""
    key = f"{INTENTS_DIR}/{uuid.uuid4().hex}.json"
    doc = {"shards": targets, "read_version": read_version, "holder": holder, "written_at": time.time()}
    store.put_if_absent(key, json.dumps(doc, sort_keys=True).encode())
    return key


def _intents(store: Store) -> list[tuple[str, dict[str, int]]]:
    out = []
    for obj in store.list(f"{INTENTS_DIR}/", recursive=False):
        if not obj.key.endswith(".json"):
            continue
        try:
            doc = json.loads(store.get(obj.key))
            shards = {str(s): int(g) for s, g in doc["shards"].items()}
        except NotFoundError:
            continue  # finished and removed meanwhile
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # An unknown floor could let this merge undercut an unfinished one: stop.
            raise MemWalError(f"{store.uri_for(obj.key)}: unreadable merge intent ({exc}); "
                              "remove it only if no merge is running") from exc
        out.append((obj.key, shards))
    return out


def floors(store: Store, manifest: TableManifest) -> dict[str, int]:
    """Per shard, the highest generation an unfinished merge may have committed above the
    recorded progress: a plan that merges the shard must reach it."""
    out: dict[str, int] = {}
    for _, shards in _intents(store):
        for sid, g in shards.items():
            if g > manifest.compacted_generation(sid):
                out[sid] = max(out.get(sid, 0), g)
    return out


def finish(store: Store, key: str, manifest: TableManifest) -> None:
    """After a successful marked commit: drop our intent and every intent it made obsolete."""
    done = [k for k, shards in _intents(store)
            if k == key or all(g <= manifest.compacted_generation(s) for s, g in shards.items())]
    try:
        store.delete_many(done)
    except MemWalError as exc:  # a leftover intent only widens later plans
        log.warning("could not remove merge intents %s: %s", done, exc)
