"""Merge intents: what an unfinished merge may already have committed, so no merger undercuts it.

Before its first commit a merger writes ``{shard: to_generation}`` under
``_mem_wal/_jobs/merge-intents/<id>.json``, with its read version and how it commits (its
``commit_path``), and only then checks its lease. Guarantees, and why:

* **No undercut** (every path). Lance fences a marker only by "the recorded generation must
  grow". Every plan takes, for each shard it merges, at least the generations up to the
  highest intent above the recorded progress (:func:`floors`; a shard that cannot reach it
  is not merged). A merger that lost its lease before its check stops there; one that passed
  its check wrote its intent first, so any later plan covers its generations, its marker is
  stale once the later merge commits, and its bound delete pass only removes rows the wider
  batch also removed or rewrote.
* **Driverless data commits are found again.** A driverless merge commits its data and its
  marker apart; its data commit carries the intent's id and data ranges in Lance's
  ``transaction_properties`` (:func:`data_properties`), so the next plan can tell, from the
  versions since the intent's read version, whether the data landed
  (:mod:`memwal.merge.applied`).
* **What a newer merger must fence** is told by :func:`others_pending`: the unfinished
  intents of other merges on its shards, with their commit path.

A finished merge deletes its intent; intents at or below the recorded progress are pruned by
the next merge that commits (:func:`finish`).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass

from memwal.errors import MemWalError, NotFoundError
from memwal.store import Store
from memwal.table.manifest import TableManifest
from memwal.table.naming import JOBS_DIR

log = logging.getLogger(__name__)

INTENTS_DIR = f"{JOBS_DIR}/merge-intents"
#: An intent larger than this is not read (storage is untrusted input): the merge stops on it.
INTENT_MAX_BYTES = 1 << 20
#: How a merge commits: its data in a commit of its own, then the marker (``DRIVERLESS``),
#: or data and marker in the driver's marked ``merge_insert`` (``DRIVER``; also every intent
#: written before intents said how).
DRIVERLESS, DRIVER = "driverless", "driver"
#: Transaction properties of a driverless data commit: the intent's id, and the generations
#: whose data it holds, ``{shard: [from, to]}`` as JSON.
INTENT_PROPERTY, DATA_PROPERTY = "memwal.merge.intent", "memwal.merge.data"


@dataclass(frozen=True)
class Intent:
    key: str
    shards: dict[str, int]
    read_version: int
    commit_path: str

    @property
    def id(self) -> str:
        return intent_id(self.key)

    def pending_on(self, manifest: TableManifest, shard_ids: set[str]) -> bool:
        """Whether it may still commit something above the recorded progress of ``shard_ids``."""
        return any(s in shard_ids and g > manifest.compacted_generation(s) for s, g in self.shards.items())


def intent_id(key: str) -> str:
    return key.rsplit("/", 1)[-1].removesuffix(".json")


def write_intent(store: Store, targets: dict[str, int], read_version: int, holder: str, *,
                 commit_path: str = DRIVER) -> str:
    """Record the generations a merge is about to commit; returns the intent's key."""
    key = f"{INTENTS_DIR}/{uuid.uuid4().hex}.json"
    doc = {"shards": targets, "read_version": read_version, "holder": holder, "written_at": time.time(),
           "commit_path": commit_path}
    store.put_if_absent(key, json.dumps(doc, sort_keys=True).encode())
    return key


def data_properties(key: str, data: dict[str, tuple[int, int]]) -> dict[str, str]:
    """The transaction properties of a driverless data commit of intent ``key``."""
    return {INTENT_PROPERTY: intent_id(key),
            DATA_PROPERTY: json.dumps({s: [a, b] for s, (a, b) in sorted(data.items())})}


def read_intents(store: Store) -> list[Intent]:
    """Every intent under the intents folder; an unreadable one stops the caller (an unknown
    floor could let a merge undercut an unfinished one)."""
    out = []
    for obj in store.list(f"{INTENTS_DIR}/", recursive=False):
        if not obj.key.endswith(".json"):
            continue
        try:
            doc = json.loads(store.get(obj.key, max_bytes=INTENT_MAX_BYTES))
            shards = {str(s): int(g) for s, g in doc["shards"].items()}
            read_version = int(doc.get("read_version") or 0)
            if read_version < 0 or any(g < 0 for g in shards.values()):
                raise ValueError("a negative version or generation")
            path = doc.get("commit_path", DRIVER)
            if path not in (DRIVER, DRIVERLESS):
                raise ValueError(f"unknown commit_path {str(path)[:40]!r}")
        except NotFoundError:
            continue  # finished and removed meanwhile
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MemWalError(f"{store.uri_for(obj.key)}: unreadable merge intent ({exc}); "
                              "remove it only if no merge is running") from exc
        out.append(Intent(obj.key, shards, read_version, path))
    return out


def floors(intents: list[Intent], manifest: TableManifest) -> dict[str, int]:
    """Per shard, the highest generation an unfinished merge may have committed above the
    recorded progress: a plan that merges the shard must reach it."""
    out: dict[str, int] = {}
    for intent in intents:
        for sid, g in intent.shards.items():
            if g > manifest.compacted_generation(sid):
                out[sid] = max(out.get(sid, 0), g)
    return out


def others_pending(store: Store, own: str, manifest: TableManifest, shard_ids: set[str]) -> list[Intent]:
    """The unfinished intents, other than ``own``, that may still commit on ``shard_ids``."""
    return [i for i in read_intents(store) if i.key != own and i.pending_on(manifest, shard_ids)]


def withdraw(store: Store, key: str) -> None:
    """Drop our intent when nothing of our batch landed (its commits were refused, or it
    stopped before them): no later plan has anything of ours to cover."""
    try:
        store.delete_many([key])
    except MemWalError as exc:  # a leftover intent only widens later plans
        log.warning("could not withdraw merge intent %s: %s", key, exc)


def finish(store: Store, key: str, manifest: TableManifest) -> None:
    """After a successful marked commit: drop our intent and every intent it made obsolete."""
    done = [i.key for i in read_intents(store)
            if i.key == key or all(g <= manifest.compacted_generation(s) for s, g in i.shards.items())]
    try:
        store.delete_many(done)
    except MemWalError as exc:  # a leftover intent only widens later plans
        log.warning("could not remove merge intents %s: %s", done, exc)
