"""The job commands' progress display listens to the jobs' progress events only: a merge tells
its phases (beside its named steps), GC its batches and its end; no test hook is installed."""

from __future__ import annotations

import memwal
from memwal.cli.commands.progress import MERGE_PHASES, JobDisplay
from memwal.core import steps
from memwal.observe import progress
from tests.conftest import SMALL, lsm_rows
from tests.integration.test_gc import expire_all


class Heard:
    """A second listener: what the jobs told, in order."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, str]] = []

    def planned(self, job: str, plan: object) -> None:
        pass

    def shard_done(self, job: str, shard_id: str, *, generations: int = 0, wal_entries: int = 0) -> None:
        pass

    def phase(self, job: str, name: str) -> None:
        self.phases.append((job, name))


def test_the_merge_bar_follows_the_merge_phases_and_the_gc_bar_its_batches(make_table):
    table, model = make_table()
    t = memwal.open(table.uri)
    heard = Heard()
    assert steps._hooks == []
    merge = JobDisplay("merge")
    with merge, progress.listening(merge), progress.listening(heard):
        assert steps._hooks == []  # the display hooks no step
        assert t.merge().ok
        task = merge.progress.tasks[merge.main]
        assert task.completed == 3 and task.description.endswith(": committed")
    names = [n for j, n in heard.phases if j == "merge"]
    shown = [n for n in names if n in MERGE_PHASES]
    assert shown[0] == "before-read" and shown[-1] == "after-upsert-commit"
    assert shown.index("after-read") < shown.index("before-marked-commit")
    assert merge.base.startswith(f"merge {SMALL.shards * SMALL.generations} generations of {SMALL.shards} shards")

    assert t.catchup().ok
    expire_all(table)
    gc = JobDisplay("gc")
    with gc, progress.listening(gc), progress.listening(heard):
        result = t.gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
        task = gc.progress.tasks[gc.main]
        assert gc.deleted == [len(result["deleted"]), result["wal_entries_deleted"]]
        assert task.completed == task.total == len(result["deleted"]) + result["wal_entries_deleted"] > 0
    assert heard.phases[-1] == ("gc", "after-delete")
    assert lsm_rows(table) == model.sorted_rows()
