"""memwal.lease on a local directory and on a real (moto) S3 server."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memwal.errors import BadInputError, LeaseHeldError, LeaseLostError
from memwal.lease import LEASE_PREFIX, Lease, LeaseRecord, lease_key
from memwal.lease.heartbeat import THREAD_PREFIX
from memwal.store import Store, open_store
from tests.interleave import ManualClock, Stalled


@pytest.fixture
def clock() -> Iterator[ManualClock]:
    """Time moves only when a test advances it; heartbeats renew as it moves."""
    c = ManualClock()
    yield c
    c.close()


def _stored(store: Store, kind: str) -> LeaseRecord:
    return LeaseRecord.from_json(store.get(lease_key(kind)))


def test_acquire_fresh_and_release(store: Store, clock: ManualClock) -> None:
    lease = Lease(store, "merge", holder="A", ttl_seconds=60, clock=clock)
    assert lease.token == 0 and not lease.held
    with lease as held:
        assert held is lease and lease.held and lease.token == 1
        rec = _stored(store, "merge")
        assert (rec.kind, rec.holder, rec.token, rec.acquired_at, rec.expires_at, rec.renewed_at) == (
            "merge", "A", 1, clock.now, clock.now + 60, clock.now)
        assert (rec.host, rec.pid) == (socket.gethostname(), os.getpid())
        assert lease.key == "_mem_wal/_jobs/leases/merge.json"
        assert lease.key.startswith(LEASE_PREFIX)
        lease.check()
    assert not lease.held
    rec = _stored(store, "merge")
    assert (rec.token, rec.holder, rec.expires_at) == (1, "A", 0.0)
    with pytest.raises(LeaseLostError):
        lease.check()  # released: any further side effect is refused


def test_live_lease_blocks_other_holder(store: Store, clock: ManualClock) -> None:
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


@pytest.mark.parametrize("existing", ["absent", "released"])
def test_racing_acquirers_exactly_one_wins(store: Store, clock: ManualClock, existing: str) -> None:
    """A reads the lease object and is held right before its conditional write; B takes the
    lease meanwhile. A's write loses (create-if-absent, or compare-and-swap on a released
    record), A reads again and finds B's live lease: exactly one holder, B's."""
    if existing == "released":
        Lease(store, "catchup", holder="old", ttl_seconds=30, clock=clock).acquire().release()
    token = 1 if existing == "absent" else 2
    a = Lease(store, "catchup", holder="A", ttl_seconds=30, clock=clock)
    held = Stalled(a.acquire, "lease.before-write")
    b = Lease(store, "catchup", holder="B", ttl_seconds=30, clock=clock).acquire()
    held.resume()
    assert isinstance(held.error, LeaseHeldError) and "held by B" in str(held.error), held.error
    assert not a.held and a.token == 0
    assert (b.token, _stored(store, "catchup").holder, _stored(store, "catchup").token) == (token, "B", token)
    b.check()
    b.release()


def test_expired_lease_taken_over_and_old_holder_fenced(store: Store, clock: ManualClock) -> None:
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


def test_takeover_fences_holder_that_did_not_notice(store: Store, clock: ManualClock) -> None:
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


def test_renew_extends_the_lease_without_a_heartbeat(store: Store, clock: ManualClock) -> None:
    """A lease held without a heartbeat (a tool holding it for a moment) renews in check()."""
    a = Lease(store, "gc", holder="A", ttl_seconds=10, clock=clock, heartbeat=False).acquire()
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


def test_failed_renew_cas_is_lease_lost(store: Store, clock: ManualClock) -> None:
    a = Lease(store, "merge", holder="A", ttl_seconds=10, clock=clock).acquire()
    # Someone rewrites the object after A last saw it (same holder and token, so only
    # the CAS can notice).
    rec = _stored(store, "merge")
    rec.expires_at += 1
    store.put(lease_key("merge"), rec.encode())
    with pytest.raises(LeaseLostError, match="changed"):
        a.renew()
    assert not a.held


def test_release_lets_another_acquire_immediately(store: Store, clock: ManualClock) -> None:
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


def test_release_on_error_path_and_when_lost(
    store: Store, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
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


def test_same_holder_reacquire_gets_new_token(store: Store, clock: ManualClock) -> None:
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


def test_lease_object_gone_is_lost(store: Store, clock: ManualClock) -> None:
    a = Lease(store, "merge", holder="A", ttl_seconds=10, clock=clock).acquire()
    store.delete_many([lease_key("merge")])
    with pytest.raises(LeaseLostError, match="gone"):
        a.check()


def test_corrupt_lease_object_refused(store: Store, clock: ManualClock) -> None:
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


def test_acquire_waiting_sits_out_a_short_hold_and_gives_up_on_a_long_one(store: Store, clock: ManualClock) -> None:
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


def test_a_process_asked_to_stop_waits_no_more_for_a_held_lease(store: Store, clock: ManualClock) -> None:
    """A follower's SIGTERM (this process's own stop) ends a wait for another holder's lease at the
    next try: the job is held, and the follower exits within its grace period."""
    from memwal.lease.stop import clear_process_stop, stop_process

    Lease(store, "merge", holder="other", ttl_seconds=600, clock=clock).acquire()
    waits: list[float] = []

    def sleep_then_stop(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)
        stop_process("memwal follow (test)", "SIGTERM", clock())

    try:
        with pytest.raises(LeaseHeldError, match="this process is stopping"):
            Lease(store, "merge", holder="merger", clock=clock).acquire_waiting(30, poll_seconds=1,
                                                                               sleep=sleep_then_stop)
    finally:
        clear_process_stop()
    assert waits == [1]  # one wait, not thirty


# --------------------------------------------------------------------------- dead holders, TTL


def _exited_pid() -> int:
    """The pid of a process that has exited and been reaped (no such process any more)."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_lease_of_dead_local_process_is_taken_over_at_once(
    store: Store, clock: ManualClock, caplog: pytest.LogCaptureFixture
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


def test_live_local_and_remote_holders_are_not_presumed_dead(store: Store, clock: ManualClock) -> None:
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
def test_absurd_expiry_is_a_corrupt_lease_not_an_os_error(store: Store, clock: ManualClock, expires: float) -> None:
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


def test_ttl_sets_the_expiry(store: Store, clock: ManualClock) -> None:
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


def test_break_keeps_the_token_and_fences_the_holder(store: Store, clock: ManualClock) -> None:
    from memwal.lease import break_lease, list_leases

    a = Lease(store, "merge", holder="stuck:1:a", ttl_seconds=300, clock=clock).acquire()
    assert [(i.kind, i.state, i.token) for i in list_leases(store, now=clock.now)] == [("merge", "live", 1)]
    rec = break_lease(store, "merge")
    assert (rec.token, rec.expires_at) == (1, 0.0)
    with pytest.raises(LeaseLostError):
        a.check()
    assert Lease(store, "merge", holder="B", clock=clock).acquire().token == 2


# --------------------------------------------------------------------------- heartbeat


def test_heartbeat_keeps_the_lease_through_many_ttls(store: Store, clock: ManualClock) -> None:
    """A holder busy for 3x its TTL (no check in between) keeps its lease: the heartbeat
    renews it at least every TTL/3, and a second job meanwhile is refused."""
    a = Lease(store, "merge", holder="A", ttl_seconds=30, clock=clock, run_id="run-1").acquire()
    start = clock.now
    for _ in range(9):  # 9 x 10 s = 3 TTLs, each step one renewal interval at most
        clock.advance(10)
        rec = _stored(store, "merge")
        assert (rec.token, rec.renewed_at, rec.expires_at) == (1, clock.now, clock.now + 30)
        with pytest.raises(LeaseHeldError, match="run run-1"):
            Lease(store, "merge", holder="B", ttl_seconds=30, clock=clock).acquire()
    a.check()
    assert a.renewals == 9 and clock.now == start + 90
    beats = [t for t in threading.enumerate() if getattr(t, "clock", None) is clock and t.is_alive()]
    assert [t.name for t in beats] == [f"{THREAD_PREFIX}-merge-1"]  # this lease's heartbeat, on this clock
    a.release()
    assert not beats[0].is_alive()  # the heartbeat ends with the lease
    assert _stored(store, "merge").expires_at == 0.0


def test_frozen_holder_is_taken_over_and_fenced_when_it_wakes(store: Store, clock: ManualClock) -> None:
    """A process stopped by SIGSTOP cannot renew: its lease expires, another job takes it
    over, and when the process wakes its heartbeat finds the lease lost: its next check is
    exit 3, and its release does not touch the new holder's lease."""
    a = Lease(store, "gc", holder="A", ttl_seconds=30, clock=clock).acquire()
    with clock.frozen():
        clock.advance(31)
        b = Lease(store, "gc", holder="B", ttl_seconds=30, clock=clock).acquire()
        assert b.token == 2
    assert a.fenced is not None and not a.held  # noticed by the heartbeat, before any check
    with pytest.raises(LeaseLostError, match="taken over by B with token 2") as ei:
        a.check()
    assert ei.value.exit_code == 3
    a.release()
    clock.advance(20)  # B's heartbeat renews; A's ended when it found the lease lost
    rec = _stored(store, "gc")
    assert (rec.holder, rec.token, rec.expires_at) == ("B", 2, clock.now + 30)
    b.check()
    b.release()


class FlakyStore:
    """A real store whose writes fail while ``down`` (a partition between the holder and the
    store): only the fault is injected, everything else is the real store."""

    def __init__(self, store: Store) -> None:
        self._store, self.down = store, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        if self.down:
            raise OSError(110, "Connection timed out")
        return self._store.put_if_match(key, data, etag)


def test_unreachable_store_fences_only_once_the_lease_ran_out(store: Store, clock: ManualClock) -> None:
    flaky = FlakyStore(store)
    a = Lease(flaky, "compact", holder="A", ttl_seconds=30, clock=clock).acquire()  # type: ignore[arg-type]
    flaky.down = True
    clock.advance(10)  # a renewal fails: retried sooner, the lease still runs (20 s left)
    assert a.fenced is None
    clock.advance(10)
    assert a.fenced is None
    flaky.down = False
    clock.advance(5)  # back in time: renewed, good for another TTL
    assert a.fenced is None and _stored(store, "compact").expires_at == clock.now + 30
    flaky.down = True
    for _ in range(4):
        clock.advance(10)  # past the last renewal's expiry: another job may hold it now
    assert a.fenced is not None and "expired" in a.fenced
    with pytest.raises(LeaseLostError, match="expired"):
        a.check()


def test_lease_list_shows_holder_host_pid_run_and_last_renewal(store: Store, clock: ManualClock) -> None:
    from memwal.lease import list_leases

    a = Lease(store, "catchup", holder="A", ttl_seconds=60, clock=clock, run_id="run-42").acquire()
    clock.advance(20)
    [info] = list_leases(store, now=clock.now)
    assert (info.kind, info.state, info.holder, info.host, info.pid, info.run_id, info.token) == (
        "catchup", "live", "A", socket.gethostname(), os.getpid(), "run-42", 1)
    assert (info.renewed_at, info.expires_at) == (clock.now, clock.now + 60)
    a.release()


def test_records_written_before_heartbeats_still_read(store: Store, clock: ManualClock) -> None:
    old = {"kind": "merge", "holder": "h:12:ab", "token": 3, "acquired_at": clock.now, "expires_at": clock.now - 1}
    store.put(lease_key("merge"), json.dumps(old).encode())
    rec = _stored(store, "merge")
    assert (rec.host, rec.pid, rec.renewed_at, rec.run_id) == ("h", 12, clock.now, None)
    assert Lease(store, "merge", holder="B", clock=clock).acquire().token == 4
