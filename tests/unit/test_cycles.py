"""Python's cycle collector is paused while a job, a status or a verify runs, and resumes after
(memwal.core.cycles): one pause per process, however many threads pause it, and a host that
turned the collector off keeps it off."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

import memwal
from memwal.core.cycles import collector_paused


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_the_collector_runs_again_when_the_last_of_overlapping_pauses_ends(collector_on):
    first, second = collector_paused(), collector_paused()  # as two threads' jobs would overlap
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    first.__exit__(None, None, None)  # the first job ends while the second still plans
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_failing_block_resumes_the_collector(collector_on):
    with pytest.raises(ZeroDivisionError), collector_paused():
        assert not gc.isenabled()
        _ = 1 / 0
    assert gc.isenabled()


def test_a_host_that_turned_the_collector_off_keeps_it_off(collector_on):
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_pauses_collect_once_the_collector_was_paused_a_minute(collector_on, monkeypatch):
    """A fleet follower's jobs may overlap without end: the garbage a paused collector leaves
    is collected once it has been paused for a minute, at the end of a pause, others running."""
    import memwal.core.cycles as cycles

    now = [1000.0]
    monkeypatch.setattr(cycles, "time", SimpleNamespace(monotonic=lambda: now[0]))
    ran: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            ran.append(info["generation"])

    gc.callbacks.append(seen)
    long_job = collector_paused()
    try:
        long_job.__enter__()
        with collector_paused():  # a job that ends within the minute
            now[0] += 30
        assert ran == []
        with collector_paused():  # one that ends past it: a whole collection, the long job still paused
            now[0] += 31
        assert ran == [2] and not gc.isenabled()
        with collector_paused():  # the next minute counts from that collection
            now[0] += 59
        assert ran == [2] and not gc.isenabled()
    finally:
        long_job.__exit__(None, None, None)
        gc.callbacks.remove(seen)
    assert gc.isenabled()


def test_no_collection_runs_during_a_job_a_status_or_a_verify(collector_on, make_table, monkeypatch):
    """With the collector's first threshold at 10 objects, each of a dry run, a merge, a GC, a
    status and a verify makes it run when the pause does nothing; with the pause, none runs
    within any of them, and the collector is on again after each."""
    import memwal.core.cycles as cycles

    table, _ = make_table()
    t = memwal.open(table.uri)
    ran: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and cycles._pauses:  # within a pause (the one owed after it runs at once)
            ran.append(info["generation"])

    class Unpaused:  # the collector module with a pause that does nothing
        isenabled, enable = staticmethod(gc.isenabled), staticmethod(gc.enable)

        @staticmethod
        def disable() -> None:
            pass

    thresholds = gc.get_threshold()
    gc.callbacks.append(seen)
    gc.set_threshold(10, 10, 10)
    try:
        for name, job in (("dry run", lambda: t.gc(dry_run=True)), ("merge", t.merge), ("gc", t.gc),
                          ("status", t.status), ("verify", t.verify)):
            with monkeypatch.context() as m:
                m.setattr(cycles, "gc", Unpaused)
                ran.clear()
                assert job() is not None
                assert ran, f"{name}: the collector would run within it"
            ran.clear()
            assert job() is not None
            assert ran == [], f"{name}: {ran}"
            assert gc.isenabled()
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks.remove(seen)
