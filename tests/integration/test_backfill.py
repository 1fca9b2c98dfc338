"""``memwal backfill``: many tables, one failing; JSON and human output; resumable reruns."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memwal import cli
from memwal.backfill import BackfillState, parse_jobs, run_backfill
from memwal.demo import shard_ids_for
from memwal.errors import BadInputError
from memwal.lease import Lease
from memwal.table.shards import all_shard_manifests
from tests.conftest import SMALL, table_rows
from tests.helpers import run_cli, tree_digest


def backfill(*args: str, cwd: Path, rc: int | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "memwal.cli", "backfill", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )
    if rc is not None:
        assert proc.returncode == rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def statuses(doc: dict) -> dict[str, dict[str, str]]:
    return {t["table"]: {j["job"]: j["status"] for j in t["jobs"]} for t in doc["tables"]}


ALL_DONE = {"merge": "done", "catchup": "done", "compact": "done", "snapshot": "done", "gc": "done"}
ALL_SKIPPED = {"merge": "skipped", "catchup": "skipped", "compact": "skipped", "snapshot": "skipped", "gc": "skipped"}
HELD_BY_TIME = {**ALL_DONE, "gc": "waiting"}
BAD_RUN = {"merge": "failed", "catchup": "not-run", "compact": "not-run", "snapshot": "not-run", "gc": "not-run"}


def test_backfill_three_tables_and_a_bad_one_then_resume(make_table, tmp_path):
    built = [make_table(name=f"t{i}") for i in range(3)]
    uris = [t.uri for t, _ in built]
    bad = str(tmp_path / "not-a-table")
    tables_file = tmp_path / "tables.txt"
    tables_file.write_text(f"# two from the file\n{uris[2]}\n\n{bad}  # broken\n{uris[0]}\n")

    first = backfill(
        uris[0], uris[1], "--tables-file", str(tables_file), "--concurrency", "2", "--json", cwd=tmp_path, rc=1
    )
    doc = json.loads(first.stdout)
    # GC is held by the young versions the 7-day expiry keeps (and the grace period): waiting, not done
    assert statuses(doc) == {uris[0]: HELD_BY_TIME, uris[1]: HELD_BY_TIME, uris[2]: HELD_BY_TIME, bad: BAD_RUN}
    assert doc["failed_tables"] == [bad]
    assert doc["summary"] == {"tables": 4, "tables_failed": 1, "done": 12, "waiting": 3, "held": 0, "skipped": 0,
                              "failed": 1, "not-run": 4, "cancelled": 0}
    (bad_doc,) = [t for t in doc["tables"] if t["table"] == bad]
    assert bad_doc["jobs"][0]["exit_code"] == 2 and "no Lance table" in bad_doc["error"]
    assert f"backfill of {bad} failed: merge:" in first.stderr
    assert f"1 of 4 tables failed: {bad}" in first.stderr
    assert "[20/20]" in first.stderr  # plain progress lines: stderr is not a terminal here
    state_file = tmp_path / ".memwal-backfill" / "state.json"
    assert doc["state_file"] == ".memwal-backfill/state.json" and state_file.exists()

    for table, model in built:  # merged, caught up, snapshot refreshed; GC kept them (grace period)
        m = table.manifest()
        assert m.compacted == {s: 4 for s in shard_ids_for(SMALL)}
        assert m.index_catchup == {"id_idx": m.compacted, "vec_idx": m.compacted}
        assert table_rows(table) == model.sorted_rows()

    # a rerun skips everything finished and retries the failure and the waiting GCs (never recorded)
    second = json.loads(backfill(*uris, bad, "--json", cwd=tmp_path, rc=1).stdout)
    again = {**ALL_SKIPPED, "gc": "waiting"}
    assert statuses(second) == {uris[0]: again, uris[1]: again, uris[2]: again, bad: BAD_RUN}
    assert second["summary"]["skipped"] == 12 and second["summary"]["failed"] == 1
    versions = [t.manifest().version for t, _ in built]
    assert versions == [t.manifest().version for t, _ in built]  # nothing ran again

    # --restart forgets the progress of the named tables (only those); --jobs picks jobs
    third = json.loads(
        backfill(
            uris[1], "--jobs", "gc,merge", "--restart", "--grace-seconds", "0", "--writer-idle-seconds", "0",
            "--expire-versions", "0", "--json",
            cwd=tmp_path, rc=0
        ).stdout
    )
    assert third["jobs"] == ["merge", "gc"]
    assert statuses(third) == {uris[1]: {"merge": "done", "gc": "done"}}
    assert third["tables"][0]["jobs"][0]["result"]["version"] is None  # nothing left to merge
    recorded = json.loads(state_file.read_text())["finished"]
    assert set(recorded[uris[1]]) == {"merge", "gc"} and set(recorded[uris[0]]) == set(ALL_DONE) - {"gc"}
    assert bad not in recorded


def test_human_summary_table(make_table, tmp_path):
    table, _ = make_table(name="only")
    bad = str(tmp_path / "missing")
    proc = backfill(
        table.uri, bad, "--jobs", "merge,catchup", "--state-file", str(tmp_path / "s.json"), cwd=tmp_path, rc=1
    )
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["table", "merge", "catchup", "time"]
    assert lines[1].startswith(table.uri) and "done (v" in lines[1]
    assert lines[2].startswith(bad) and "FAILED" in lines[2] and "not run" in lines[2]
    assert "1 of 2 tables ok; jobs: 2 done, 0 skipped (finished earlier), 1 failed, 1 not run" in proc.stdout
    assert f"FAILED {bad}: merge:" in proc.stdout
    assert f"memwal: error: 1 of 2 tables failed: {bad}" in proc.stderr


def test_a_held_lease_is_not_a_failure_nor_recorded_and_a_rerun_runs_that_job(make_table, tmp_path):
    table, model = make_table()
    other = Lease(table.store, "catchup", holder="someone-else:1:x", ttl_seconds=600).acquire()
    state = BackfillState(str(tmp_path / "state.json"))
    first = run_backfill([table.uri], ["merge", "catchup", "snapshot", "gc"], state=state,
                         job_options={"gc": {"expire_versions": "never", "grace_seconds": 0, "writer_idle_seconds": 0}})
    assert [(j.job, str(j.status)) for j in first.tables[0].jobs] == [
        ("merge", "done"), ("catchup", "held"), ("gc", "done"), ("snapshot", "done")]
    held = first.tables[0].jobs[1]
    assert held.exit_code == 3 and "someone-else:1:x" in held.summary and not first.failed_tables
    assert set(BackfillState(state.path).finished[table.uri]) == {"merge", "snapshot", "gc"}
    other.release()
    second = run_backfill([table.uri], ["gc", "snapshot", "catchup", "merge"], state=BackfillState(state.path),
                          job_options={"gc": {"expire_versions": "never", "grace_seconds": 0,
                                              "writer_idle_seconds": 0}})
    assert [str(j.status) for j in second.tables[0].jobs] == ["skipped", "done", "skipped", "skipped"]
    assert table.manifest().index_catchup["id_idx"] == table.manifest().compacted
    assert table_rows(table) == model.sorted_rows()


def test_a_failed_job_is_not_recorded_and_a_rerun_resumes_from_it(make_table, tmp_path):
    table, _ = make_table()
    victim = shard_ids_for(SMALL)[0]
    st = all_shard_manifests(table.store)[victim]
    gen2 = Path(table.uri, st.generation_key(st.generation(2)))
    gen2.rename(gen2.with_name("moved-away"))
    state = BackfillState(str(tmp_path / "state.json"))
    first = run_backfill([table.uri], ["merge", "catchup"], state=state)
    assert [str(j.status) for j in first.tables[0].jobs] == ["failed", "not-run"]
    assert BackfillState(state.path).finished.get(table.uri, {}) == {}
    gen2.with_name("moved-away").rename(gen2)
    second = run_backfill([table.uri], ["merge", "catchup"], state=BackfillState(state.path))
    assert [str(j.status) for j in second.tables[0].jobs] == ["done", "done"]
    assert set(BackfillState(state.path).finished[table.uri]) == {"merge", "catchup"}


def test_a_dry_run_writes_and_records_nothing(make_table, tmp_path):
    table, _ = make_table()
    before = tree_digest(table.uri)
    state = str(tmp_path / "state.json")
    run = run_cli("backfill", table.uri, "--dry-run", "--state-file", state, "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["dry_run"] is True
    jobs = doc["tables"][0]["jobs"]
    assert [j["job"] for j in jobs] == ["merge", "catchup", "compact", "gc", "snapshot"]
    assert all(j["result"]["dry_run"] for j in jobs)
    assert jobs[0]["summary"].startswith("would merge 12 generations")
    assert tree_digest(table.uri) == before and not Path(state).exists()


def test_a_merge_gap_fails_that_table_only(make_table, tmp_path):
    good, _ = make_table(name="good")
    gappy, _ = make_table(name="gappy")
    victim = shard_ids_for(SMALL)[0]
    st = all_shard_manifests(gappy.store)[victim]
    gen2 = Path(gappy.uri, st.generation_key(st.generation(2)))
    gen2.rename(gen2.with_name("moved-away"))
    report = run_backfill(
        [good.uri, gappy.uri], ["merge", "catchup"], concurrency=2, state=BackfillState(str(tmp_path / "s.json"))
    )
    assert [t.table for t in report.failed_tables] == [gappy.uri]
    (failed,) = report.failed_tables
    assert f"shard {victim} stopped at generation 2: missing" in failed.error
    assert failed.jobs[0].version is not None  # the other shards merged
    assert [str(j.status) for j in report.tables[0].jobs] == ["done", "done"]


def test_bad_usage_exits_2(tmp_path, capsys):
    assert cli.main(["backfill", "--state-file", str(tmp_path / "s.json")]) == 2
    assert "no table given" in capsys.readouterr().err
    assert cli.main(["backfill", "t", "--jobs", "merge,compress", "--state-file", str(tmp_path / "s.json")]) == 2
    assert "unknown job compress" in capsys.readouterr().err
    (tmp_path / "s.json").write_text("{not json")
    assert cli.main(["backfill", "t", "--state-file", str(tmp_path / "s.json")]) == 2
    assert "unreadable" in capsys.readouterr().err
    with pytest.raises(BadInputError):
        parse_jobs("")
    assert parse_jobs("gc, merge") == ["merge", "gc"]


def test_rich_progress_on_a_terminal(make_table, tmp_path, capsys, monkeypatch):
    table, _ = make_table()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    rc = cli.main(
        ["backfill", table.uri, str(tmp_path / "nope"), "--jobs", "merge", "--state-file", str(tmp_path / "s.json")]
    )
    out = capsys.readouterr()
    assert rc == 1
    assert "failed" in out.err and str(tmp_path / "nope") in out.err
    assert "memwal backfill: [" not in out.err  # the rich display, not the plain lines
    assert "done (v" in out.out


def test_gc_held_only_by_the_grace_period_is_not_recorded_as_done(make_table, tmp_path):
    """A gc whose generations wait only for the reader grace period did what it could, but
    a later rerun will free more: it is reported as waiting and run again, never skipped."""
    table, _ = make_table()
    state = BackfillState(str(tmp_path / "state.json"))
    # no retained version holds anything back, no writer is live: only time does
    options = {"gc": {"expire_versions": 0, "writer_idle_seconds": 0}}
    jobs = ["merge", "catchup", "gc"]
    first = run_backfill([table.uri], jobs, state=state, job_options=options)
    assert [str(j.status) for j in first.tables[0].jobs] == ["done", "done", "waiting"]
    assert first.tables[0].jobs[2].document["time_will_free"] is True
    assert "more becomes free with time" in first.tables[0].jobs[2].summary and not first.failed_tables
    assert set(BackfillState(state.path).finished[table.uri]) == {"merge", "catchup"}
    again = run_backfill([table.uri], jobs, state=BackfillState(state.path),
                         job_options={"gc": {"expire_versions": 0, "grace_seconds": 0, "writer_idle_seconds": 0}})
    assert [str(j.status) for j in again.tables[0].jobs] == ["skipped", "skipped", "done"]
    gc = again.tables[0].jobs[2].document
    assert gc["deleted"] and not gc["time_will_free"]


def test_a_rerun_with_other_options_is_new_work(make_table, tmp_path):
    """A rerun that changes a job's options runs that job again (it used to skip it as
    'finished earlier' and apply nothing); the jobs whose options did not change are skipped."""
    table, _ = make_table()
    state = BackfillState(str(tmp_path / "state.json"))
    jobs = ["merge", "catchup", "gc"]
    first = run_backfill([table.uri], jobs, state=state,
                         job_options={"gc": {"expire_versions": "never", "grace_seconds": 0, "writer_idle_seconds": 0}})
    assert [str(j.status) for j in first.tables[0].jobs] == ["done", "done", "done"]
    assert first.tables[0].jobs[2].document["deleted"] == []  # every version kept: no folder could go
    again = run_backfill([table.uri], jobs, state=BackfillState(state.path),
                         job_options={"gc": {"expire_versions": 0, "grace_seconds": 0, "writer_idle_seconds": 0}})
    assert [str(j.status) for j in again.tables[0].jobs] == ["skipped", "skipped", "done"]
    assert again.tables[0].jobs[2].document["deleted"]
    assert not any("_gen_" in p.name for p in Path(table.uri, "_mem_wal").glob("*/*"))  # every folder went
    same = run_backfill([table.uri], jobs, state=BackfillState(state.path),
                        job_options={"gc": {"expire_versions": 0, "grace_seconds": 0, "writer_idle_seconds": 0}})
    assert [str(j.status) for j in same.tables[0].jobs] == ["skipped", "skipped", "skipped"]
