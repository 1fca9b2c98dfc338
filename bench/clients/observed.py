"""What the clients users run do when someone else writes their shard manifest: observed, not read.

``python -m bench clients observed [--out DIR]`` replays each observation that decides memwal's drain
protocol (docs/decisions/0025-drain-protocol.md) against the real clients, pylance 14's
``ShardWriter`` in this process and lance-context 0.6.7 in its own (``make lance-context``),
and prints one line per observation with what was seen (``--out``: also ``clients_observed.json``).
Nothing here is asserted: the tests
(tests/integration/test_clients_*.py) hold memwal to what these lines show.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from pathlib import Path

import lance

import memwal
from bench.harness.results import Run, parser
from memwal.demo import Workload, create_base_table, shard_ids_for
from memwal.table import open_table
from memwal.table.drain import compacted_manifest, write_next_version
from memwal.table.shards import ShardState, all_shard_manifests, read_shard_manifest
from tests.clients.context_store import LanceContextStore, row
from tests.clients.pylance_client import LiveWriter

ONE = Workload(base_rows=200, shards=1, generations=0, seed=3, maintain_vector_index=False)


def _state(uri: str) -> ShardState:
    (state,) = all_shard_manifests(open_table(uri).store).values()
    return state


def _drain_all(uri: str) -> ShardState:
    state, store = _state(uri), open_table(uri).store
    drained = compacted_manifest(state, drained={g.generation for g in state.flushed})
    return read_shard_manifest(store, state.shard_id, write_next_version(store, state, drained))


def _try(fn) -> str:  # type: ignore[no-untyped-def]
    try:
        return str(fn())
    except Exception as exc:  # noqa: BLE001 - the failure is the observation
        return f"fails: {str(exc).splitlines()[0][:110]}"


def pylance(root: Path) -> list[str]:
    out = []
    uri = str(root / "pylance")
    _, model = create_base_table(uri, ONE)
    sid = shard_ids_for(ONE)[0]
    w = LiveWriter(uri, sid, model)
    for k in range(3):
        w.generation(list(range(1000 + 30 * k, 1030 + 30 * k)))
    rows = len(model.rows)
    assert memwal.open(uri).merge().ok
    drained = _drain_all(uri)
    out.append(f"pylance live writer, after a same-epoch drain (v{drained.version}), before its flush: "
               f"lsm_scanner() rows {_try(lambda: len(w.view()))} of {rows} (its memory still lists the drained "
               "generations and opens them)")
    w.generation(list(range(2000, 2030)))
    after = _state(uri)
    out.append(f"pylance live writer's next flush: version {after.version} lists "
               f"{[g.generation for g in after.flushed]} (rebased onto the drain: drained ones not listed again)")
    out.append(f"pylance live writer after the drain and its flush: lsm_scanner() rows {len(w.view())} of "
               f"{len(model.rows)} (its base is the version it opened: the merged rows are gone from its view)")
    w.close()
    fresh = LiveWriter(uri, sid, model, seed=2)
    out.append(f"pylance new writer (claimed after the merge): lsm_scanner() rows {len(fresh.view())} of "
               f"{len(model.rows)}")
    fresh.close()

    uri2 = str(root / "pylance-expiry")
    _, model2 = create_base_table(uri2, Workload(base_rows=200, shards=1, generations=0, seed=3, indexes=False))
    w2 = LiveWriter(uri2, sid, model2)
    w2.generation(list(range(1000, 1030)))
    t = memwal.open(uri2)
    assert t.merge().ok and t.compact(target_rows_per_fragment=100_000).ok
    lance.dataset(uri2).cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    out.append(f"pylance live writer after compaction and expiry of every old version: lsm_scanner() "
               f"{_try(lambda: len(w2.view()))}")
    uri3 = str(root / "pylance-fenced")
    _, model3 = create_base_table(uri3, ONE)
    w3 = LiveWriter(uri3, sid, model3)
    w3.generation(list(range(1000, 1030)))
    other = lance.dataset(uri3).mem_wal_writer(sid)
    out.append("pylance writer fenced by a newer epoch, before it writes: lsm_scanner() "
               f"{_try(lambda: len(w3.view()))}")
    _try(lambda: w3.writer.put(w3.writer.lsm_scanner().to_table().slice(0, w3.rows + 1)))  # a full MemTable
    deadline = time.monotonic() + 30
    while w3.writer.stats()["memtable_flush_failures"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)  # its background flush finds the newer epoch
    out.append(f"pylance fenced writer after its flush failed: lsm_scanner() {_try(lambda: len(w3.view()))}")
    other.close()
    return out


def lance_context(root: Path) -> list[str]:
    out = []
    uri = str(root / "lance-context")
    model: dict[str, object] = {}
    with LanceContextStore(uri, create=True) as live:
        for g in range(3):
            rows = [row(f"g{g}-{i}", i) for i in range(10)]
            live.write(rows)
            model.update({r["id"]: r for r in rows})
        assert memwal.open(uri).merge().ok
        before = _state(uri)
        drained = _drain_all(uri)
        out.append(f"lance-context live store, after a same-epoch drain (v{drained.version}): list() rows "
                   f"{len(live.rows())} of {len(model)} (its base is the version it opened, "
                   f"version() {live.call('version')} while the table is at {open_table(uri).manifest().version})")
        live.write([row("after", 1)])
        after = _state(uri)
        out.append(f"lance-context live store's next flush: version {after.version} lists "
                   f"{[g.generation for g in after.flushed]} (rebased onto the drain), epoch {after.writer_epoch} "
                   f"(was {before.writer_epoch})")
    with LanceContextStore(uri) as reopened:
        out.append(f"lance-context new process: list() rows {len(reopened.rows())} of {len(model) + 1}")
    state = _state(uri)
    with LanceContextStore(uri) as reader:
        reader.rows()
        same = _state(uri).version == state.version
    out.append(f"lance-context opening a store and reading writes no manifest version: {same} "
               "(its epoch is claimed at its first write)")
    uri3 = str(root / "lance-context-cleanup")
    with LanceContextStore(uri3, create=True) as owner:
        for g in range(10):
            owner.write([row(f"c{g}-{i}", i) for i in range(5)])
        before3 = _state(uri3)
        merged = owner.cleanup_wal()
        after3 = _state(uri3)
    manifest = open_table(uri3).manifest()
    out.append(f"lance-context cleanup_wal(): merged {merged} generations; manifest v{before3.version} -> "
               f"v{after3.version}, epoch {before3.writer_epoch} -> {after3.writer_epoch}, lists "
               f"{[g.generation for g in after3.flushed]}; MemWAL index progress {manifest.compacted or 'none'}; "
               f"folders left {sorted(p.name for p in Path(uri3, '_mem_wal', after3.shard_id).iterdir())}")
    counted = any(g.physical_rows for g in _state(uri3).flushed)
    out.append(f"lance-context manifests carry row counts: {counted}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = parser("clients observed", __doc__)
    args = p.parse_args(argv)
    with Run("clients_observed", "what the clients do when someone else writes their shard manifest",
             out=args.out, work=args.work) as bench:
        bench.doc["observations"] = pylance(bench.work) + lance_context(bench.work)
        for line in bench.doc["observations"]:
            print("-", line)
        if args.out:
            bench.publish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
