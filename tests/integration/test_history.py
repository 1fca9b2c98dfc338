"""The run history (memwal history) and the OpenTelemetry metrics, against real tables and
real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import memwal
from memwal.core import steps
from memwal.core.words import counted
from memwal.history.run import JOB_PROPERTY, RUN_ID_PROPERTY
from memwal.table.manifest import list_versions
from tests.conftest import table_rows
from tests.helpers import run_cli
from tests.interleave import Barrier

VENV_BIN = Path(sys.executable).parent


def cli_json(*argv: str) -> dict:
    run = run_cli(*argv, "--json")
    assert run.rc == 0, run.stderr
    return json.loads(run.stdout)


def test_every_job_is_recorded_with_its_figures_and_real_versions(make_table):
    table, model = make_table()
    uri = table.uri
    t = memwal.open(uri)
    merge = t.merge(max_generations=2).to_dict()                 # Python API
    cli_json("merge", uri)                                        # CLI
    catchup = cli_json("catchup", uri)
    compact = cli_json("compact", uri, "--target-rows-per-fragment", "100000")
    snapshot = cli_json("snapshot", uri)
    gc = cli_json("gc", uri, "--grace-seconds", "0", "--writer-idle-seconds", "0")
    runs = cli_json("history", uri, "--limit", "50")["runs"]
    ours = [r for r in runs if r["job"] != "external"]
    # every version since the first run is one of these runs' (compaction's two included); before
    # them, the table's creation (every run is shown, so the timeline goes back to version 1)
    assert runs[:len(ours)] == ours and [r["job"] for r in runs[len(ours):]] == ["external"]
    assert runs[-1]["versions"][0] == 1
    assert [r["job"] for r in ours] == ["gc", "snapshot", "compact", "catchup", "merge", "merge"]
    # gc without --expire-versions keeps every version, which holds every merged generation on
    # storage; it drained them from the listings, which is work done: ok, and its line says so
    assert [r["outcome"] for r in ours] == ["ok", "ok", "ok", "ok", "ok", "ok"]
    assert all(r["engine"] == "local" and r["finished_at"] >= r["started_at"] for r in ours)
    by_job = {r["job"]: r for r in ours}
    assert set(by_job["gc"]["figures"]["blocked_by_reason"]) == {"retained-version"}
    first_merge = ours[-1]
    assert first_merge["figures"]["shards"] == [
        {k: s[k] for k in ("shard_id", "from_generation", "to_generation", "rows_upserted", "rows_deleted")}
        for s in merge["shards"]]
    assert first_merge["figures"]["generations"] == 6 and first_merge["versions"][-1] == merge["version"]
    assert by_job["catchup"]["figures"]["indexes"] == [
        {"index_name": i["index_name"], "action": i["action"], "recorded": i["recorded"]} for i in catchup["indexes"]]
    assert (by_job["compact"]["figures"]["fragments_before"], by_job["compact"]["figures"]["fragments_after"]) == (
        compact["fragments_before"], compact["fragments_after"])
    assert by_job["snapshot"]["figures"]["committed"] is True
    assert by_job["snapshot"]["versions"] == [snapshot["version"]]
    assert by_job["gc"]["figures"]["generations"] == len(gc["deleted"]) == 0 and by_job["gc"]["versions"] == []
    gc_figures = by_job["gc"]["figures"]
    assert gc_figures["drained"] == len(gc["drained"]) > 0 and gc_figures["blocked"] == len(gc["blocked"]) > 0
    line = next(x for x in run_cli("history", uri, "--limit", "1").stdout.splitlines() if " gc " in x)
    assert f"{counted(len(gc['drained']), 'shard drain')}" in line and f"{len(gc['blocked'])} kept (" in line, line
    existing = set(list_versions(table.store))
    named = [v for r in ours for v in r["versions"]]
    assert named and set(named) <= existing and len(named) == len(set(named))  # real versions, each once
    # the commits Lance lets carry properties name their run: the delete pass, the snapshot
    ds = table.dataset()
    for r in (first_merge, by_job["snapshot"]):
        props = ds.read_transaction(r["versions"][0]).transaction_properties
        assert props[RUN_ID_PROPERTY] == r["run_id"] and props[JOB_PROPERTY] == r["job"]
    # every run left the lag it saw: all merged at the end
    assert set(by_job["gc"]["lag"]) == set(merge_shards(merge)) and all(v[0] == 0 for v in by_job["gc"]["lag"].values())
    assert [r["job"] for r in cli_json("history", uri, "--job", "merge")["runs"]] == ["merge", "merge"]
    limited = cli_json("history", uri, "--limit", "2")
    assert [r["job"] for r in limited["runs"]] == ["gc", "snapshot"] and limited["more"] == 2
    assert cli_json("history", uri, "--limit", "50")["more"] is None  # every run shown
    head = run_cli("history", uri, "--limit", "2").stdout.splitlines()[0]
    assert "the newest 2 runs" in head and "older runs are recorded: raise --limit" in head, head
    assert table_rows(table) == model.sorted_rows()


def test_counts_read_as_words() -> None:
    from memwal.core.words import counted

    assert [counted(n, "generation") for n in (0, 1, 2, 1500)] == [
        "0 generations", "1 generation", "2 generations", "1,500 generations"]
    assert counted(1, "entry", "entries") == "1 entry" and counted(3, "entry", "entries") == "3 entries"


def merge_shards(doc: dict) -> set[str]:
    return {s["shard_id"] for s in doc["shards"]}


def test_versions_committed_by_others_fill_the_timeline(make_table):
    table, _ = make_table()
    cli_json("merge", table.uri, "--max-generations", "1")
    ds = table.dataset()
    ds.update_config({"owner": "another-tool"})        # a commit by someone else
    ds = table.dataset()
    ds.update_config({"owner": "yet-another"})
    cli_json("merge", table.uri)
    runs = cli_json("history", table.uri)["runs"]
    assert [r["job"] for r in runs[:3]] == ["merge", "external", "merge"]
    external = runs[1]
    assert external["versions"] == [runs[2]["versions"][-1] + 1, runs[2]["versions"][-1] + 2]
    assert external["figures"]["operations"] == {"UpdateConfig": 2}


def test_the_versions_before_the_first_run_stay_in_the_timeline_after_it(make_table):
    """The table's creation (versions written before any run) was listed before a merge and
    vanished after it; with every run shown, the timeline goes back to version 1."""
    table, _ = make_table()
    created = table.manifest().version
    before = cli_json("history", table.uri)["runs"]
    assert [(r["job"], r["versions"]) for r in before] == [("external", list(range(1, created + 1)))]
    cli_json("merge", table.uri)
    after = cli_json("history", table.uri)["runs"]
    assert [r["job"] for r in after] == ["merge", "external"]
    assert after[1]["versions"] == list(range(1, created + 1))
    limited = cli_json("history", table.uri, "--limit", "1")["runs"]  # older runs not shown: nor their versions
    assert [r["job"] for r in limited] == ["merge"]


def test_a_run_that_failed_or_was_fenced_is_recorded(make_table):
    table, _ = make_table()

    def explode(name: str) -> None:
        if name == "merge.after-read":
            raise OSError("disk on fire")

    with steps.hooked(explode):
        failed = run_cli("merge", table.uri)
    assert failed.rc == 1
    [run] = cli_json("history", table.uri, "--job", "merge")["runs"]
    assert (run["outcome"], run["versions"]) == ("failed", [])
    assert "disk on fire" in run["error"]


def test_a_run_whose_process_died_shows_as_abandoned(make_table, tmp_path):
    table, _ = make_table()
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
    with Barrier(str(tmp_path / "barrier"), "merge.after-read") as barrier:
        env[steps.BARRIER_ENV] = barrier.directory
        proc = subprocess.Popen([str(VENV_BIN / "memwal"), "merge", table.uri], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        barrier.wait_reached()
        [running] = cli_json("history", table.uri, "--job", "merge")["runs"]
        assert running["outcome"] == "running"  # its lease is live
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    [dead] = cli_json("history", table.uri, "--job", "merge")["runs"]
    assert (dead["run_id"], dead["outcome"], dead["finished_at"]) == (running["run_id"], "abandoned", None)


def test_gc_prunes_history_past_its_retention_and_the_dry_run_says_so(make_table):
    table, _ = make_table()
    for _ in range(3):
        cli_json("snapshot", table.uri)
    dry = cli_json("gc", table.uri, "--history-retention", "0", "--dry-run")
    assert dry["history_pruned"] == 3
    assert len([r for r in cli_json("history", table.uri)["runs"] if r["job"] != "external"]) == 3
    done = cli_json("gc", table.uri, "--history-retention", "0")
    assert done["history_pruned"] == 3
    assert [r["job"] for r in cli_json("history", table.uri)["runs"] if r["job"] != "external"] == ["gc"]
    kept = cli_json("gc", table.uri)  # the default retention (90 days) keeps today's runs
    assert kept["history_pruned"] == 0


@pytest.mark.parametrize("since, n", [("1d", 1), ("2000-01-01", 1), ("4102444800", 0)])
def test_since_filters_and_bad_since_is_bad_input(make_table, since, n):
    table, _ = make_table()
    cli_json("snapshot", table.uri)
    runs = [r for r in cli_json("history", table.uri, "--since", since)["runs"] if r["job"] != "external"]
    assert len(runs) == n
    bad = run_cli("history", table.uri, "--since", "yesterday-ish")
    assert bad.rc == 2 and "--since" in bad.stderr


def _console_metrics(text: str) -> dict[str, list[dict]]:
    """Instrument name -> data points, from the console exporter's JSON documents on stderr."""
    out: dict[str, list[dict]] = {}
    decoder = json.JSONDecoder()
    i = text.find("{")
    while i != -1:
        try:
            doc, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        for rm in doc.get("resource_metrics", []):
            for sm in rm["scope_metrics"]:
                for m in sm["metrics"]:
                    out.setdefault(m["name"], []).extend(m["data"]["data_points"])
        i = text.find("{", end)
    return out


def test_console_exporter_prints_the_instruments_of_a_merge(make_table):
    table, _ = make_table()
    env = {**os.environ, "OTEL_METRICS_EXPORTER": "console", "OTEL_SERVICE_NAME": "memwal-test"}
    proc = subprocess.run([str(VENV_BIN / "memwal"), "merge", table.uri, "--json"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # stdout still carries the document alone
    found = _console_metrics(proc.stderr)
    for name in ("memwal.job.duration", "memwal.merge.rows", "memwal.merge.generations",
                 "memwal.shard.lag_generations", "memwal.shard.lag_rows", "memwal.shard.lag_seconds",
                 "memwal.catchup.behind_generations"):
        assert name in found, (name, sorted(found))
    [duration] = found["memwal.job.duration"]
    assert duration["attributes"] == {"job": "merge", "outcome": "ok", "engine": "local"} and duration["count"] == 1
    upserted = sum(p["value"] for p in found["memwal.merge.rows"] if p["attributes"]["op"] == "upsert")
    assert upserted == sum(s["rows_upserted"] for s in doc["shards"])
    gens = {p["attributes"]["shard"]: p["value"] for p in found["memwal.merge.generations"]}
    assert gens == {s["shard_id"]: s["to_generation"] - s["from_generation"] + 1 for s in doc["shards"]}
    assert all(p["value"] == 0 for p in found["memwal.shard.lag_generations"])
    assert any(n.startswith("lance_object_store") for n in found)  # Lance's own metrics, bridged


def test_a_record_of_many_shards_keeps_a_summary_and_its_detail_apart(make_table, monkeypatch):
    """A record past DETAIL_BYTES (190 KB at 1,000 shards) is a summary next to a detail
    object: ``history`` shows it whole, the status page reads the summaries only, and GC
    prunes both. Here every record is past the threshold."""
    from memwal.history import log as history_log
    from memwal.history.log import HISTORY_PREFIX, detail_key, read_runs
    from memwal.history.record import RunRecord
    from memwal.inspect.page import PageData, collect, lag_points

    monkeypatch.setattr(history_log, "DETAIL_BYTES", 0)
    table, _ = make_table()
    merge = memwal.open(table.uri).merge(max_generations=1).to_dict()
    [key] = [o.key for o in table.store.list(HISTORY_PREFIX) if o.key.endswith("-merge-" + merge["run_id"] + ".json")]
    stored = RunRecord.loads(table.store.get(key))
    detail = json.loads(table.store.get(detail_key(key)))
    shards = [{k: s[k] for k in ("shard_id", "from_generation", "to_generation", "rows_upserted", "rows_deleted")}
              for s in merge["shards"]]
    assert detail["figures"]["shards"] == shards and len(detail["lag"]) == len(shards) > 1
    assert stored.detail and stored.lag == {} and "shards" not in stored.figures
    assert stored.figures["shard_count"] == len(shards)
    assert stored.lag_total == {"shards": len(shards), "generations": sum(v[0] for v in detail["lag"].values()),
                                "rows": sum(v[1] for v in detail["lag"].values()),
                                "oldest_seconds": max(float(v[2] or 0) for v in detail["lag"].values())}
    assert stored.lag_total["generations"] > 0  # unmerged generations are left: a point worth drawing
    [whole] = read_runs(table.store, job="merge")
    assert whole.figures["shards"] == shards and whole.lag == detail["lag"]
    assert cli_json("history", table.uri)["runs"][0]["figures"]["shards"] == shards
    page = collect(table)
    assert "shards" not in page.runs[0]["figures"]  # the page read the summary
    [point, _now] = lag_points(PageData(page.status, page.runs, page.now))
    assert point.value == stored.lag_total["generations"] and f"over {len(shards)} shards" in point.title
    assert cli_json("gc", table.uri, "--history-retention", "0")["history_pruned"] == 1
    assert not table.store.exists(key) and not table.store.exists(detail_key(key))


def test_expired_history_is_every_record_older_than_the_cut_to_the_millisecond(tmp_path):
    """The records past the cut are found in the listing's tail (keys are newest first): the
    records a millisecond or two either side of the cut, their detail objects and a stray
    name go exactly where they belong, and the run planning is never its own victim."""
    from memwal.history.log import HISTORY_PREFIX, detail_key, expired_history, record_key
    from memwal.store import LocalStore

    store = LocalStore(str(tmp_path))
    cut = 1_700_000_000.5004  # between two milliseconds: a key holds 1_700_000_000_500
    started = {f"{i:016x}": cut + d / 1000 for i, d in enumerate([-86_400_000, -2, -1, 0, 1, 2, 86_400_000])}
    for run_id, at in started.items():
        store.put(record_key(at, "merge", run_id), b"{}")
        store.put(detail_key(record_key(at, "merge", run_id)), b"{}")
    store.put(f"{HISTORY_PREFIX}not-a-record.json", b"{}")
    want = sorted(record_key(at, "merge", r) for r, at in started.items() if int(at * 1000) / 1000 < cut)
    assert len(want) == 4  # the run started in the cut's own millisecond (.500) is before it
    assert sorted(expired_history(store, cut)) == want
    own = next(iter(started))
    assert sorted(expired_history(store, cut, keep_run=own)) == [k for k in want if own not in k]
    assert expired_history(store, 0.0) == []
    assert sorted(expired_history(store, 4e12)) == sorted(record_key(at, "merge", r) for r, at in started.items())


def test_records_live_in_month_folders_and_older_flat_records_are_still_read_and_pruned(tmp_path):
    """Keys ``history/<inverted month>/<inverted ms>-...``: runs newest first across months and
    across the records written before the folders (directly under ``history/``), a limit
    met in the newest month, and GC's expired records found in the months that began before
    the cut, the flat ones included. A folder name no record key gives (year 0) is read and
    judged record by record; other names under ``history/`` are not ours."""
    from memwal.history.log import _MAX_MS, HISTORY_PREFIX, expired_history, read_runs, record_key
    from memwal.history.record import RunRecord
    from memwal.store import LocalStore

    store = LocalStore(str(tmp_path))
    day = 86_400.0
    now = 1_700_000_000.0  # 2023-11-14
    at = {"a": now - 70 * day, "b": now - 40 * day, "c": now - 3 * day, "d": now - 2 * day, "e": now - 1}
    for run_id, started in at.items():
        store.put(record_key(started, "merge", run_id), RunRecord("merge", run_id, "local", None, "ok",
                                                                  started).dumps())
    flat = {"f": now - 50 * day, "9": now - 1.5 * day}  # written before the month folders
    for run_id, started in flat.items():
        store.put(f"{HISTORY_PREFIX}{_MAX_MS - int(started * 1000):014d}-gc-{run_id}.json",
                  RunRecord("gc", run_id, "local", None, "ok", started).dumps())
    store.put(f"{HISTORY_PREFIX}99999/{_MAX_MS - 5_000:014d}-merge-0e.json",  # misplaced under year 0
              RunRecord("merge", "0e", "local", None, "ok", 5.0).dumps())
    store.put(f"{HISTORY_PREFIX}notes/{_MAX_MS - 6_000:014d}-merge-n.json", b"{}")
    assert len({k.rsplit("/", 2)[-2] for k in (record_key(t, "merge", "x") for t in at.values())}) == 3

    assert [r.run_id for r in read_runs(store)] == ["e", "9", "d", "c", "b", "f", "a", "0e"]
    assert [r.run_id for r in read_runs(store, limit=2)] == ["e", "9"]
    assert [r.run_id for r in read_runs(store, since=now - 45 * day)] == ["e", "9", "d", "c", "b"]
    expired = expired_history(store, now - 30 * day)
    assert sorted(k.rsplit("-", 1)[-1] for k in expired) == ["0e.json", "a.json", "b.json", "f.json"]
    assert sorted(expired_history(store, now - 30 * day, keep_run="b")) == sorted(k for k in expired
                                                                                   if not k.endswith("-b.json"))
