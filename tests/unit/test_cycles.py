"""Python's cycle collector is paused while a job, a status or a verify runs, and resumes after
(memwal.core.cycles): one pause per process, however many threads pause it, and a host that
turned the collector off keeps it off."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import memwal
from memwal.core.cycles import collector_paused


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


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
