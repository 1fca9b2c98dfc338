"""memwal.lease on a local directory and on a real (moto) S3 server."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from memwal.errors import BadInputError, LeaseHeldError, LeaseLostError
from memwal.lease import LEASE_PREFIX, Lease, LeaseRecord, lease_key
from memwal.store import Store, open_store


class FakeClock:
    """An injectable clock: tests move time instead of sleeping."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _stored(store: Store, kind: str) -> LeaseRecord:
    return LeaseRecord.from_json(store.get(lease_key(kind)))


def test_acquire_fresh_and_release(store: Store, clock: FakeClock) -> None:
    lease = Lease(store, "merge", holder="A", ttl_seconds=60, clock=clock)
    assert lease.token == 0 and not lease.held
    with lease as held:
        assert held is lease and lease.held and lease.token == 1
        rec = _stored(store, "merge")
        assert rec == LeaseRecord("merge", "A", 1, clock.now, clock.now + 60)
        assert lease.key == "_mem_wal/_jobs/leases/merge.json"
        assert lease.key.startswith(LEASE_PREFIX)
        lease.check()
    assert not lease.held
    rec = _stored(store, "merge")
    assert (rec.token, rec.holder, rec.expires_at) == (1, "A", 0.0)
    with pytest.raises(LeaseLostError):
        lease.check()  # released: any further side effect is refused


def test_live_lease_blocks_other_holder(store: Store, clock: FakeClock) -> None:
    a = Lease(store, "gc", holder="host-a:1:aa", ttl_seconds=100, clock=clock).acquire()
    clock.advance(99)
    b = Lease(store, "gc", holder="host-b:2:bb", ttl_seconds=100, clock=clock)
    with pytest.raises(LeaseHeldError, match="host-a:1:aa") as ei:
        b.acquire()
    assert ei.value.exit_code == 3
    assert "until" in str(ei.value)
    assert not b.held and b.token == 0
    a.check()  # untouched
    # Other job kinds are independent.
    c = Lease(store, "merge", holder="host-b:2:bb", ttl_seconds=100, clock=clock).acquire()
    assert c.token == 1


def test_concurrent_acquirers_exactly_one_wins(store: Store, clock: FakeClock) -> None:
    for round_ in range(3):
        n = 8
        barrier = threading.Barrier(n)
        results: list[Any] = [None] * n
        leases = [Lease(store, "catchup", holder=f"h{round_}-{i}", ttl_seconds=30, clock=clock) for i in range(n)]

        def run(
            i: int, leases: list[Lease] = leases, results: list[Any] = results, barrier: threading.Barrier = barrier
        ) -> None:
            barrier.wait()
            try:
                results[i] = leases[i].acquire()
            except LeaseHeldError as exc:
                results[i] = exc

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [r for r in results if isinstance(r, Lease)]
        assert len(winners) == 1, results
        assert sum(isinstance(r, LeaseHeldError) for r in results) == n - 1, results
        winner = winners[0]
        assert winner.token == round_ + 1
        rec = _stored(store, "catchup")
        assert (rec.holder, rec.token) == (winner.holder, winner.token)
        winner.check()
        winner.release()  # next round races for a released lease (CAS path)


def test_expired_lease_taken_over_and_old_holder_fenced(store: Store, clock: FakeClock) -> None:
    a = Lease(store, "merge", holder="A", ttl_seconds=10, clock=clock).acquire()
    assert a.token == 1
    clock.advance(10.5)
    with pytest.raises(LeaseLostError, match="expired"):
        a.check()  # expired: no side effect allowed even before anyone takes over
    b = Lease(store, "merge", holder="B", ttl_seconds=10, clock=clock).acquire()
    assert b.token == 2
    with pytest.raises(LeaseLostError):
        a.check()
    with pytest.raises(LeaseLostError):
        a.renew()
    a.release()  # lost: does not raise, and does not touch B's lease
    rec = _stored(store, "merge")
    assert (rec.holder, rec.token) == ("B", 2) and rec.expires_at > clock.now
    b.check()


def test_takeover_fences_holder_that_did_not_notice(store: Store, clock: FakeClock) -> None:
    """A holder whose lease expired while it was busy is fenced at its next check."""
    a = Lease(store, "snapshot", holder="A", ttl_seconds=10, clock=clock).acquire()
    a.check()
    clock.advance(11)
    b = Lease(store, "snapshot", holder="B", ttl_seconds=10, clock=clock).acquire()
    clock.advance(-5)  # even if A's clock lags behind, the token tells it the truth
    with pytest.raises(LeaseLostError, match="taken over by B with token 2"):
        a.check()
    assert not a.held
    assert b.token == 2


def test_renew_extends_the_lease(store: Store, clock: FakeClock) -> None:
    a = Lease(store, "gc", holder="A", ttl_seconds=10, clock=clock).acquire()
    start = clock.now
    etag0 = store.head(lease_key("gc")).etag  # type: ignore[union-attr]
    clock.advance(4)
    a.check()  # under half the TTL: no write
    assert store.head(lease_key("gc")).etag == etag0  # type: ignore[union-attr]
    clock.advance(2)  # 6s in: more than half the TTL has passed
    a.check()
    rec = _stored(store, "gc")
    assert rec.expires_at == start + 16
    assert rec.acquired_at == start and rec.token == 1
    clock.advance(8)  # 14s: past the original expiry, within the renewed one
    a.check()
    assert _stored(store, "gc").expires_at == start + 24  # renewed again
    b = Lease(store, "gc", holder="B", ttl_seconds=10, clock=clock)
    with pytest.raises(LeaseHeldError):
        b.acquire()
    a.renew()  # explicit renewal
    assert _stored(store, "gc").expires_at == clock.now + 10


def test_failed_renew_cas_is_lease_lost(store: Store, clock: FakeClock) -> None:
    a = Lease(store, "merge", holder="A", ttl_seconds=10, clock=clock).acquire()
    # Someone rewrites the object after A last saw it (same holder and token, so only
    # the CAS can notice).
    rec = _stored(store, "merge")
    rec.expires_at += 1
    store.put(lease_key("merge"), rec.to_json())
    with pytest.raises(LeaseLostError, match="changed"):
        a.renew()
    assert not a.held


def test_release_lets_another_acquire_immediately(store: Store, clock: FakeClock) -> None:
    with Lease(store, "merge", holder="A", ttl_seconds=300, clock=clock) as a:
        assert a.token == 1
    b = Lease(store, "merge", holder="B", ttl_seconds=300, clock=clock).acquire()
    assert b.token == 2
    b.release()
    tokens = []
    for i in range(3):
        with Lease(store, "merge", holder=f"C{i}", ttl_seconds=300, clock=clock) as c:
            tokens.append(c.token)
    assert tokens == [3, 4, 5]  # monotonic across releases


def test_release_on_error_path_and_when_lost(store: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(RuntimeError), Lease(store, "gc", holder="A", ttl_seconds=10, clock=clock):
        raise RuntimeError("job failed")
    assert _stored(store, "gc").expires_at == 0.0

    a = Lease(store, "gc", holder="A", ttl_seconds=10, clock=clock).acquire()
    clock.advance(11)
    Lease(store, "gc", holder="B", ttl_seconds=10, clock=clock).acquire()
    with caplog.at_level(logging.WARNING, logger="memwal.lease"):
        a.release()  # never raises
    assert "not releasing" in caplog.text
    assert _stored(store, "gc").holder == "B"


def test_same_holder_reacquire_gets_new_token(store: Store, clock: FakeClock) -> None:
    first = Lease(store, "merge", holder="same", ttl_seconds=10, clock=clock).acquire()
    second = Lease(store, "merge", holder="same", ttl_seconds=10, clock=clock).acquire()
    assert second.token == first.token + 1
    with pytest.raises(LeaseLostError):
        first.check()  # an earlier incarnation is fenced by the token
    second.check()


def test_default_holder_is_unique() -> None:
    store = open_store("/nonexistent-not-touched")
    a, b = Lease(store, "merge"), Lease(store, "merge")
    assert a.holder != b.holder
    assert a.holder.count(":") == 2


def test_lease_object_gone_is_lost(store: Store, clock: FakeClock) -> None:
    a = Lease(store, "merge", holder="A", ttl_seconds=10, clock=clock).acquire()
    store.delete_many([lease_key("merge")])
    with pytest.raises(LeaseLostError, match="gone"):
        a.check()


def test_corrupt_lease_object_refused(store: Store, clock: FakeClock) -> None:
    store.put(lease_key("merge"), b"{not json")
    with pytest.raises(BadInputError, match="corrupt lease"):
        Lease(store, "merge", holder="A", clock=clock).acquire()
    store.put(lease_key("merge"), json.dumps({"kind": "merge", "holder": "x"}).encode())
    with pytest.raises(BadInputError, match="corrupt lease"):
        Lease(store, "merge", holder="A", clock=clock).acquire()


@pytest.mark.parametrize("kind", ["", "../x", "a/b", ".hidden"])
def test_bad_kind_refused(kind: str, tmp_path: Path) -> None:
    with pytest.raises(BadInputError):
        Lease(open_store(str(tmp_path)), kind)


def test_bad_ttl_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInputError):
        Lease(open_store(str(tmp_path)), "merge", ttl_seconds=0)


def test_acquire_waiting_sits_out_a_short_hold_and_gives_up_on_a_long_one(store: Store, clock: FakeClock) -> None:
    holder = Lease(store, "merge", holder="snapshot-refresh", ttl_seconds=60, clock=clock).acquire()
    waits: list[float] = []

    def sleep_then_release(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)
        if len(waits) == 3:
            holder.release()

    waiter = Lease(store, "merge", holder="merger", clock=clock)
    with waiter.acquire_waiting(30, poll_seconds=1, sleep=sleep_then_release) as lease:
        assert lease is waiter and lease.held and len(waits) == 3
        token = lease.token
    assert _stored(store, "merge").token == token  # entering the with block did not re-acquire

    Lease(store, "merge", holder="stuck", ttl_seconds=600, clock=clock).acquire()
    with pytest.raises(LeaseHeldError, match="stuck"):
        Lease(store, "merge", holder="merger", clock=clock).acquire_waiting(5, poll_seconds=1, sleep=clock.advance)


# --------------------------------------------------------------------------- dead holders, TTL


def _exited_pid() -> int:
    """The pid of a process that has exited and been reaped (no such process any more)."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_lease_of_dead_local_process_is_taken_over_at_once(
    store: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    import socket

    dead = f"{socket.gethostname()}:{_exited_pid()}:beef"
    a = Lease(store, "merge", holder=dead, ttl_seconds=300, clock=clock).acquire()
    with caplog.at_level(logging.WARNING, logger="memwal.lease"):
        b = Lease(store, "merge", holder="host-b:2:bb", ttl_seconds=300, clock=clock).acquire()
    assert b.token == a.token + 1 == 2
    assert any("dead holder" in r.getMessage() and dead in r.getMessage() for r in caplog.records)
    with pytest.raises(LeaseLostError):
        a.check()  # had it survived somehow, it is fenced


def test_live_local_and_remote_holders_are_not_presumed_dead(store: Store, clock: FakeClock) -> None:
    import os
    import socket

    here = socket.gethostname()
    Lease(store, "gc", holder=f"{here}:{os.getpid()}:self", ttl_seconds=300, clock=clock).acquire()
    with pytest.raises(LeaseHeldError, match=f"{os.getpid()}:self"):
        Lease(store, "gc", holder="B", clock=clock).acquire()
    # A dead pid on another host means nothing here: that host's pid table is not ours.
    Lease(store, "catchup", holder=f"not-{here}:{_exited_pid()}:x", ttl_seconds=300, clock=clock).acquire()
    with pytest.raises(LeaseHeldError):
        Lease(store, "catchup", holder="B", clock=clock).acquire()


@pytest.mark.parametrize("expires", [1e18, float("inf"), float("nan"), -1.0])
def test_absurd_expiry_is_a_corrupt_lease_not_an_os_error(store: Store, clock: FakeClock, expires: float) -> None:
    rec = {"kind": "merge", "holder": "x:1:y", "token": 4, "acquired_at": clock.now, "expires_at": expires}
    store.put(lease_key("merge"), json.dumps(rec).encode())
    lease = Lease(store, "merge", holder="A", clock=clock)
    with pytest.raises(BadInputError, match="expires_at") as ei:
        lease.acquire()
    assert lease.uri in str(ei.value) and ei.value.exit_code == 2
    assert json.loads(store.get(lease_key("merge"))) == json.loads(json.dumps(rec))  # nothing written


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), 1e300])
def test_bad_ttls_refused(tmp_path: Path, ttl: float) -> None:
    with pytest.raises(BadInputError, match="TTL"):
        Lease(open_store(str(tmp_path)), "merge", ttl_seconds=ttl)


def test_ttl_sets_the_expiry(store: Store, clock: FakeClock) -> None:
    with Lease(store, "merge", holder="A", ttl_seconds=1234.5, clock=clock):
        rec = _stored(store, "merge")
        assert rec.expires_at - rec.acquired_at == 1234.5


def test_action_lease_ttl_reaches_every_lease(make_table: Any, caplog: pytest.LogCaptureFixture) -> None:
    from memwal.actions import run_action

    table, _ = make_table()
    with caplog.at_level(logging.INFO, logger="memwal.lease"):
        run_action("snapshot", table, lease_ttl=4321)
        run_action("gc", table, lease_ttl=987)
    acquired = [r.getMessage() for r in caplog.records if r.getMessage().startswith("acquired")]
    assert len(acquired) == 3, acquired  # snapshot takes its own lease and the merge lease
    assert all("ttl 4321s" in m for m in acquired[:2]) and "ttl 987s" in acquired[2]


def test_break_keeps_the_token_and_fences_the_holder(store: Store, clock: FakeClock) -> None:
    from memwal.lease import break_lease, list_leases

    a = Lease(store, "merge", holder="stuck:1:a", ttl_seconds=300, clock=clock).acquire()
    assert [(i.kind, i.state, i.token) for i in list_leases(store, now=clock.now)] == [("merge", "live", 1)]
    rec = break_lease(store, "merge")
    assert (rec.token, rec.expires_at) == (1, 0.0)
    with pytest.raises(LeaseLostError):
        a.check()
    assert Lease(store, "merge", holder="B", clock=clock).acquire().token == 2
