"""The values a MemWAL index rewrite can erase (hazard H1), as slots compared round by round.

A slot is one monotone value of the MemWAL index details: a shard's merge progress or an
(index, shard) catch-up. :func:`analyse_round` says what a replacement commit erased, given
the values before and after it and what interleaved commits wrote; :func:`apply_slots` writes
the repair.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from memwal.pb import mem_wal_index_pb2, shard_manifest_pb2
from memwal.table.naming import shard_uuid_bytes, shard_uuid_str

Slot = tuple[str, ...]
#: A slot's value: a generation (merge progress, catch-up) or a configuration field's bytes.
SlotValue = int | bytes
#: Slots a commit got wrong: ``slot -> (correct value, value the commit holds)`` (None: absent).
Fixes = dict[Slot, tuple[SlotValue | None, SlotValue | None]]


@dataclass(frozen=True)
class RepairedSlot:
    """One value a snapshot refresh restored after a commit erased it (hazard H1)."""

    #: ``compacted`` (a shard's merge progress), ``index_catchup`` or ``config``.
    kind: str
    #: The value restored (the correct one) and the value the erasing commit held (None: absent).
    restored: SlotValue | None
    erased: SlotValue | None
    shard_id: str | None = None
    index: str | None = None
    #: The configuration field (``config`` slots).
    config_field: str | None = None

    @classmethod
    def of(cls, slot: Slot, restored: SlotValue | None, erased: SlotValue | None) -> RepairedSlot:
        d = describe_slot(slot)
        return cls(d["kind"], restored, erased, d.get("shard_id"), d.get("index"), d.get("field"))

    def to_dict(self) -> dict[str, Any]:
        """The document's shape: the slot's names, then ``to`` (restored) and ``from`` (erased)."""
        names = {"shard_id": self.shard_id, "index": self.index, "field": self.config_field}
        return {"kind": self.kind, **{k: v for k, v in names.items() if v is not None},
                "to": self.restored, "from": self.erased}


#: Details fields other than the snapshot and progress fields, compared as opaque values.
CONFIG_FIELDS = ("sharding_specs", "maintained_indexes", "writer_config_defaults", "maintain_all_indexes")


def _config_bytes(d: mem_wal_index_pb2.MemWalIndexDetails, name: str) -> bytes:
    """One field of the details as canonical bytes (a message holding only that field)."""
    part = mem_wal_index_pb2.MemWalIndexDetails()
    part.CopyFrom(d)
    for other in part.DESCRIPTOR.fields_by_name:
        if other != name:
            part.ClearField(other)
    return part.SerializeToString(deterministic=True)


def slots_of(d: mem_wal_index_pb2.MemWalIndexDetails) -> dict[Slot, SlotValue]:
    """Every value a replacement must not lose: progress per shard and index, and configuration."""
    out: dict[Slot, SlotValue] = {}
    for c in d.compacted_sstables:
        out[("compacted", shard_uuid_str(c.shard_id.uuid))] = c.generation
    for p in d.index_catchup:
        for c in p.caught_up_generations:
            out[("catchup", p.index_name, shard_uuid_str(c.shard_id.uuid))] = c.generation
    for name in CONFIG_FIELDS:
        out[("config", name)] = _config_bytes(d, name)
    return out


def _monotone(slot: Slot) -> bool:
    return slot[0] in ("compacted", "catchup")


def _generation(v: SlotValue | None) -> int:
    """A monotone slot's generation (-1: absent)."""
    return v if isinstance(v, int) else -1


def _gt(a: SlotValue | None, b: SlotValue | None) -> bool:
    return _generation(a) > _generation(b)


def _max(a: SlotValue | None, b: SlotValue | None) -> SlotValue | None:
    return a if _gt(a, b) else b


def describe_slot(slot: Slot) -> dict[str, str]:
    if slot[0] == "compacted":
        return {"kind": "compacted", "shard_id": slot[1]}
    if slot[0] == "catchup":
        return {"kind": "index_catchup", "index": slot[1], "shard_id": slot[2]}
    return {"kind": "config", "field": slot[1]}


def analyse_round(
    read: Mapping[Slot, SlotValue], wrote: Mapping[Slot, SlotValue], before: Mapping[Slot, SlotValue]
) -> Fixes:
    """Slots our commit got wrong: ``slot -> (correct value, value our commit holds)``.

    ``read``: the details at our read version; ``wrote``: what our commit holds;
    ``before``: the version just before ours (every interleaved commit's cumulative effect).
    """
    fixes: Fixes = {}
    for slot in set(read) | set(wrote) | set(before):
        r, c, b = read.get(slot), wrote.get(slot), before.get(slot)
        if c == r:  # we did not mean to change it: the interleaved value stands
            correct = b
        elif b == r:  # we meant to change it and nobody else did
            correct = c
        elif _monotone(slot) and _gt(b, r):  # both raised it
            correct = _max(b, c)
        else:  # an interleaved decrease (restore, withdrawn catch-up) or reconfiguration wins
            correct = b
        if correct != c:
            fixes[slot] = (correct, c)
    return fixes


def desired_after(fixes: Fixes, latest: Mapping[Slot, SlotValue]) -> dict[Slot, SlotValue | None]:
    """Values the repair commit must carry, given what commits after ours did to each slot."""
    out: dict[Slot, SlotValue | None] = dict(latest)
    for slot, (correct, ours) in fixes.items():
        now = latest.get(slot)
        if now == ours:  # untouched since our commit
            out[slot] = correct
        elif _monotone(slot) and _gt(now, ours):  # raised since (built on our wrong value)
            out[slot] = _max(correct, now)
        # else: lowered or reconfigured since: that later decision stands
    return out


def _uuid_msg(shard_id: str) -> shard_manifest_pb2.UUID:
    return shard_manifest_pb2.UUID(uuid=shard_uuid_bytes(shard_id))


def _entries(existing: Iterable[mem_wal_index_pb2.CompactedSsTable],
             want: dict[str, int]) -> list[mem_wal_index_pb2.CompactedSsTable]:
    """Per-shard generation entries: the existing shards that stay, in their order, with
    their wanted values, then the new shards, sorted (entries of dropped shards go)."""
    want = dict(want)
    out: list[mem_wal_index_pb2.CompactedSsTable] = []
    for c in existing:
        sid = shard_uuid_str(c.shard_id.uuid)
        if sid in want:
            out.append(mem_wal_index_pb2.CompactedSsTable(shard_id=c.shard_id, generation=want.pop(sid)))
    new = sorted(want.items())
    return out + [mem_wal_index_pb2.CompactedSsTable(shard_id=_uuid_msg(s), generation=g) for s, g in new]


def apply_slots(d: mem_wal_index_pb2.MemWalIndexDetails, values: Mapping[Slot, SlotValue | None]) -> None:
    """Make ``d`` carry ``values`` for every slot, keeping entry order where it can."""
    current = slots_of(d)
    if all(current.get(s) == v for s, v in values.items()) and all(s in values for s in current):
        return
    # Merge progress.
    kept = _entries(d.compacted_sstables,
                    {s[1]: v for s, v in values.items() if s[0] == "compacted" and isinstance(v, int)})
    del d.compacted_sstables[:]
    d.compacted_sstables.extend(kept)
    # Index catch-up.
    by_index: dict[str, dict[str, int]] = {}
    for s, v in values.items():
        if s[0] == "catchup" and isinstance(v, int):
            by_index.setdefault(s[1], {})[s[2]] = v
    progress: list[mem_wal_index_pb2.IndexCatchupProgress] = []
    for p in d.index_catchup:
        if p.index_name not in by_index:
            continue
        gens = _entries(p.caught_up_generations, by_index.pop(p.index_name))
        progress.append(mem_wal_index_pb2.IndexCatchupProgress(index_name=p.index_name, caught_up_generations=gens))
    for name, w in sorted(by_index.items()):
        gens = [mem_wal_index_pb2.CompactedSsTable(shard_id=_uuid_msg(s), generation=g) for s, g in sorted(w.items())]
        progress.append(mem_wal_index_pb2.IndexCatchupProgress(index_name=name, caught_up_generations=gens))
    del d.index_catchup[:]
    d.index_catchup.extend(progress)
    # Configuration.
    for name in CONFIG_FIELDS:
        config = values.get(("config", name), b"")
        config = config if isinstance(config, bytes) else b""
        if _config_bytes(d, name) != config:
            d.ClearField(name)
            d.MergeFromString(config)
