"""``memwal fleet plan|run|status`` on real tables written by pylance's ShardWriter.

Discovery (nested roots, links, plain Lance tables and stray folders, an empty source, a
Lance Namespace through a real REST server), ranking by debt, failure isolation, a run that
drains every table to its writers' rows, an idle rerun that changes nothing, a held lease
skipped with its reason, the request budget of an idle table on S3 (counted at the server),
policies, the Spark engine, and the fleet page in Chromium.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import memwal
from memwal.demo import Workload, create_base_table, shard_ids_for, write_generations
from memwal.lease import Lease
from memwal.table import open_table
from memwal.table.shards import all_shard_manifests
from tests.browser import canary, dump_dom
from tests.conftest import table_rows
from tests.helpers import assert_one_line_error, run_cli, tree_digest

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)

WL = Workload(base_rows=300, shards=2, generations=3, rows_per_generation=20, seed=5)
BIG = Workload(base_rows=300, shards=2, generations=6, rows_per_generation=40, seed=6)


def make(path: Path, wl: Workload = WL):
    _, model = create_base_table(str(path), wl)
    if wl.generations:
        write_generations(str(path), wl, model)
    return model


@pytest.fixture
def lake(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    """A root: two tables nested at different depths, one at the top, a plain Lance table, a
    stray folder, and a link to a table outside the root."""
    root = tmp_path / "lake"
    models = {str(root / "a" / "t1"): make(root / "a" / "t1"), str(root / "b" / "deep" / "t2"): make(
        root / "b" / "deep" / "t2", BIG), str(root / "t3"): make(root / "t3")}
    lance.write_dataset(pa.table({"x": [1, 2]}), str(root / "plain"))
    (root / "stray" / "empty").mkdir(parents=True)
    outside = tmp_path / "outside"
    make(outside)
    os.symlink(outside, root / "link")
    return root, models


def options_file_flags(opts: dict[str, str], folder: Path) -> list[str]:
    """The credentials in a 0600 file, its path alone on the command line (other tests watch
    command lines for keys)."""
    path = folder / "storage-options.json"
    path.touch(mode=0o600)
    path.write_text(json.dumps(opts))
    return ["--storage-options-file", str(path)]


def plan_json(*argv: str) -> dict:
    run = run_cli("fleet", "plan", *argv, "--json")
    assert run.rc == 0, run.stderr
    return json.loads(run.stdout)


def test_plan_discovers_nested_tables_skips_the_rest_with_reasons_and_ranks_by_debt(lake):
    root, models = lake
    outside = str(root.parent / "outside")
    before = tree_digest(outside)
    doc = plan_json(str(root))
    assert doc["discovered"] == 3
    assert sorted(t["table"] for t in doc["tables"]) == sorted(models)
    skipped = {s["path"]: s["reason"] for s in doc["skipped"]}
    assert skipped == {str(root / "link"): "a symbolic link: never followed",
                       str(root / "stray" / "empty"): "no Lance table in it",
                       str(root / "plain"): "a Lance table without a MemWAL index"}
    assert tree_digest(outside) == before  # nothing reached through the link
    debts = [t["debt"] for t in doc["tables"]]
    assert debts == sorted(debts, reverse=True)
    top = doc["tables"][0]
    assert top["table"] == str(root / "b" / "deep" / "t2")  # 12 unmerged generations against 6
    assert top["jobs"][:2] == ["merge", "catchup"]
    assert top["state"]["unmerged_generations"] == 12 and top["state"]["unmerged_rows"] > 0
    assert any(r.startswith("merge: 12 unmerged generations in 2 shards") for r in top["reasons"])


def test_a_source_with_no_memwal_table_is_bad_input_and_a_table_uri_is_a_source(lake, tmp_path):
    root, _ = lake
    empty = tmp_path / "nothing"
    empty.mkdir()
    assert_one_line_error(run_cli("fleet", "plan", str(empty)), 2, "holds no Lance table")
    assert_one_line_error(run_cli("fleet", "plan", str(root / "plain")), 2, "holds no MemWAL table")
    assert_one_line_error(run_cli("fleet", "plan"), 2, "no source given")
    doc = plan_json(str(root / "t3"))
    assert [t["table"] for t in doc["tables"]] == [str(root / "t3")]


def test_a_run_drains_every_table_to_its_writers_rows_and_an_idle_rerun_changes_nothing(lake):
    root, models = lake
    dry = run_cli("fleet", "run", str(root), "--dry-run", "--json")
    assert dry.rc == 0, dry.stderr
    statuses = {j["status"] for r in json.loads(dry.stdout)["runs"] for j in r["jobs"]}
    assert statuses == {"planned"}  # a dry run did nothing: never "done"
    run = run_cli("fleet", "run", str(root), "--workers", "2", "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["failed_tables"] == [] and doc["summary"]["failed"] == 0
    for uri, model in models.items():
        table = open_table(uri)
        assert table_rows(table) == model.sorted_rows()
        assert table.manifest().compacted == {s: g for s, g in table.manifest().compacted.items() if g}
        assert memwal.open(uri).status().unmerged_generations == 0
        assert memwal.open(uri).verify().ok
    after = {uri: tree_digest(uri) for uri in models}
    again = json.loads(run_cli("fleet", "run", str(root), "--json").stdout)
    assert again["runs"] == [] and again["plan"]["debt"] == 0
    assert all(t["jobs"] == [] and t["debt"] == 0 for t in again["plan"]["tables"])
    assert {uri: tree_digest(uri) for uri in models} == after  # not even a history record
    idle = run_cli("fleet", "run", str(root))
    assert idle.rc == 0 and idle.stdout.splitlines()[0].endswith(": nothing to run (3 tables: 3 waiting)"), idle.stdout


def test_after_a_run_every_figure_of_status_and_the_page_sums_the_same_tables(lake, tmp_path):
    """A run re-plans the tables it ran and patches the last report (issue 64: the totals
    stayed the full plan's: a source said 160 unmerged where its rows held 32, the histogram put
    each shard in its old bucket). Every figure is then the sum of what each table holds now."""
    root, _ = lake
    state, t2 = str(tmp_path / "state"), str(root / "b" / "deep" / "t2")
    assert run_cli("fleet", "plan", str(root), "--state", state).rc == 0
    assert run_cli("fleet", "pause", t2, "--state", state, "--by", "ops", "--reason", "not this one").rc == 0
    run = run_cli("fleet", "run", str(root), "--state", state, "--max-rounds", "1", "--json")
    assert run.rc == 0, run.stderr
    page = tmp_path / "fleet.html"
    run = run_cli("fleet", "status", "--state", state, "--json", "--html", str(page))
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    rows = {t["table"]: t for t in doc["tables"]}
    assert len(rows) == doc["discovered"] == 3 and rows[t2]["state"] == "paused"
    pending = {uri: [s["unmerged_generations"] for s in json.loads(run_cli("status", uri, "--json").stdout)["shards"]]
               for uri in rows}
    assert {uri: r["lag_generations"] for uri, r in rows.items()} == {u: sum(map(len, p)) for u, p in pending.items()}
    assert sum(s["unmerged_generations"] for s in doc["sources"]) == sum(r["lag_generations"] for r in rows.values())
    assert sum(s["tables"] for s in doc["sources"]) == 3
    from memwal.fleet.slo import histogram

    assert doc["histogram"] == histogram(len(g) for p in pending.values() for g in p)
    assert doc["by_state"] == {**dict.fromkeys(doc["by_state"], 0), **{
        s: sum(1 for r in rows.values() if r["state"] == s) for s in {r["state"] for r in rows.values()}}}
    debt = round(sum(r["debt"] for r in rows.values()), 2)
    assert doc["debt"] == debt == round(sum(g["debt"] for g in doc["groups"]), 2)
    assert doc["breaches"]["tables"] == sum(1 for r in rows.values() if r["breaches"])
    html = page.read_text()
    assert 'data-state="paused"' in html and f">{debt:g}<" in html


def test_one_broken_table_fails_alone_and_is_named(lake):
    root, models = lake
    broken = str(root / "t3")
    st = all_shard_manifests(open_table(broken).store)[shard_ids_for(WL)[0]]
    gen2 = Path(broken, st.generation_key(st.generation(2)))
    gen2.rename(gen2.with_name("moved-away"))
    run = run_cli("fleet", "run", str(root), "--json")
    assert run.rc == 1
    doc = json.loads(run.stdout)
    assert doc["failed_tables"] == [broken]
    assert f"memwal: error: {broken}: merge:" in run.stderr
    for uri, model in models.items():
        if uri != broken:
            assert table_rows(open_table(uri)) == model.sorted_rows()


def test_a_held_lease_skips_that_job_with_its_reason_and_is_no_failure(lake, tmp_path):
    root, models = lake
    uri = str(root / "t3")
    policy = tmp_path / "policy.yaml"
    # no waiting for the holder: neither the merge nor the snapshot, which takes the merge lease too
    # (each waited the default 30 s for a holder that never lets go: all of this test's time)
    policy.write_text("defaults:\n  options: {merge: {lease_wait: 0}, snapshot: {lease_wait: 0}}\n")
    other = Lease(open_table(uri).store, "merge", holder="elsewhere:1:x", ttl_seconds=600).acquire()
    run = run_cli("fleet", "run", uri, "--json", "--max-rounds", "1", "--policy", str(policy))
    assert run.rc == 0, run.stderr
    (cycle,) = json.loads(run.stdout)["runs"]
    merge = cycle["jobs"][0]
    assert merge["job"] == "merge" and merge["status"] == "held" and "elsewhere:1:x" in merge["summary"]
    statuses = {j["job"]: j["status"] for j in cycle["jobs"]}
    assert statuses.get("snapshot") == "held", statuses  # it needs the merge lease too
    other.release()
    plan = plan_json(uri)
    assert plan["tables"][0]["jobs"][0] == "merge"  # still owed: a later run does it


def test_max_seconds_starts_nothing_past_it(lake):
    root, models = lake
    before = {uri: tree_digest(uri) for uri in models}
    doc = json.loads(run_cli("fleet", "run", str(root), "--max-seconds", "1e-9", "--json").stdout)
    assert sorted(doc["not_started"]) == sorted(models) and doc["summary"]["done"] == 0
    assert {uri: tree_digest(uri) for uri in models} == before


def test_policies_override_by_source_and_table_and_bad_ones_are_bad_input(lake, tmp_path):
    root, _ = lake
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"defaults:\n  thresholds: {{merge_generations: 100}}\ntables:\n  '{root}/t3':\n"
                      "    thresholds: {merge_generations: 1}\n    weights: {merge: 10}\n")
    doc = plan_json(str(root), "--policy", str(policy))
    merging = [t["table"] for t in doc["tables"] if "merge" in t["jobs"]]
    assert merging == [str(root / "t3")] and doc["tables"][0]["table"] == str(root / "t3")
    policy.write_text("defaults:\n  thresholds: {merge_generation: 1}\n")
    assert_one_line_error(run_cli("fleet", "plan", str(root), "--policy", str(policy)), 2,
                          "defaults.thresholds.merge_generation: unknown key")
    policy.write_text("defaults:\n  options: {gc: {grace_seconds: nan}}\n")
    assert_one_line_error(run_cli("fleet", "plan", str(root), "--policy", str(policy)), 2, "defaults.options.gc")


def test_a_lance_namespace_is_a_source_directly_and_through_its_rest_server(tmp_path):
    import lance.namespace as lns

    root = tmp_path / "ns"
    models = {str(root / "events.lance"): make(root / "events.lance"), str(root / "users.lance"): make(
        root / "users.lance")}
    doc = plan_json("namespace:dir", "--namespace-property", f"root={root}")
    assert sorted(t["table"] for t in doc["tables"]) == sorted(models)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = lns.RestAdapter("dir", {"root": str(root)}, host="127.0.0.1", port=port)
    server.start()
    try:
        doc = plan_json("namespace:rest", "--namespace-property", f"uri=http://127.0.0.1:{port}",
                        "--namespace-property", f"root={root}")
        assert sorted(t["table"] for t in doc["tables"]) == sorted(models)
        run = run_cli("fleet", "run", "namespace:rest", "--namespace-property", f"uri=http://127.0.0.1:{port}",
                      "--namespace-property", f"root={root}")
        assert run.rc == 0, run.stderr
    finally:
        server.stop()
    for uri, model in models.items():
        assert table_rows(open_table(uri)) == model.sorted_rows()
    assert_one_line_error(run_cli("fleet", "plan", "namespace:dir"), 2, "needs the namespace property root")


def test_an_idle_table_on_s3_costs_at_most_four_requests(s3_server, tmp_path):
    first_uri, opts = s3_server.new_table("fleet/t1")
    root = first_uri.rsplit("/", 1)[0]
    uris = [first_uri, f"{root}/t2"]
    for uri in uris:
        model = create_base_table(uri, WL, opts)[1]
        write_generations(uri, WL, model, storage_options=opts)
    flags = options_file_flags(opts, tmp_path)
    cache = str(tmp_path / "cache.json")
    run = run_cli("fleet", "run", root, "--cache", cache, *flags)
    assert run.rc == 0, run.stderr
    first = plan_json(root, "--cache", cache, *flags)
    assert all(t["jobs"] == [] for t in first["tables"]), first
    mark = len(s3_server.requests)
    again = plan_json(root, "--cache", cache, *flags)
    requests = s3_server.requests[mark:]
    assert all(t["jobs"] == [] for t in again["tables"])
    per_table = len(requests) / len(uris)
    # per table: _versions/ and _mem_wal/ twice; the root's listing is shared by all
    assert per_table <= 4, "\n".join(f"{m} {p}" for m, p in requests)


def test_a_maintained_table_with_new_data_reads_only_its_planned_jobs_leases(s3_server, tmp_path):
    """A table whose jobs all ran has a lease record per job; with new data, the plan reads the
    lease folder once and the records of the jobs it plans, and shows a held one as held."""
    from urllib.parse import unquote

    uri, opts = s3_server.new_table("fleet/t1")
    model = create_base_table(uri, WL, opts)[1]
    write_generations(uri, WL, model, storage_options=opts)
    flags = options_file_flags(opts, tmp_path)
    policy = tmp_path / "policy.yaml"  # every job runs once, so every job's lease record exists
    policy.write_text("defaults: {thresholds: {compact_fragments: 1}, options: {gc: {grace_seconds: 0, "
                      "writer_idle_seconds: 0, "
                      "expire_versions: 0}}}\n")
    run = run_cli("fleet", "run", uri, *flags, "--policy", str(policy), "--json")
    assert run.rc == 0, run.stderr
    store = open_table(uri, opts).store
    records = sorted(k.rsplit("/", 1)[-1] for k in store.list_keys("_mem_wal/_jobs/leases/"))
    assert records == ["catchup.json", "compact.json", "gc.json", "merge.json", "snapshot.json"]
    write_generations(uri, WL, model, storage_options=opts, generations=1, seed_offset=9)
    other = Lease(store, "merge", holder="elsewhere:1:x", ttl_seconds=600).acquire()
    try:
        mark = len(s3_server.requests)
        doc = plan_json(uri, *flags)
        requests = [unquote(p) for _, p in s3_server.requests[mark:]]
        (table,) = doc["tables"]
        # GC follows the merge (it rolls up or drains what readers still list)
        assert table["jobs"] == ["merge", "catchup", "gc"] and table["state"]["leases_held"] == ["merge"]
        leases = [p for p in requests if "/leases/" in p]
        assert len(leases) == 1 + 3, leases  # the listing, merge.json, catchup.json, gc.json
        assert not any(p.endswith(("snapshot.json", "compact.json")) for p in leases)
        assert doc["requests"] == len(requests) - 1  # all but discovery's listing of the table's folder
        status = json.loads(run_cli("fleet", "status", uri, *flags, "--json").stdout)
        assert status["by_state"]["held"] == 1
    finally:
        other.release()


def test_the_spark_engine_runs_small_tables_as_tasks_of_one_application(lake, spark_session):
    root, models = lake
    run = run_cli("fleet", "run", str(root), "--engine", "spark", "--json")
    assert run.rc == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["engine"] == "spark" and doc["failed_tables"] == []
    for uri, model in models.items():
        assert table_rows(open_table(uri)) == model.sorted_rows()


def test_the_fleet_page_ranks_the_tables_and_runs_no_script(lake, tmp_path):
    root, models = lake
    page = tmp_path / "fleet.html"
    with canary():
        run = run_cli("fleet", "status", str(root), "--html", str(page))
        assert run.rc == 0, run.stderr
        dom = dump_dom(page.as_uri(), budget_ms=2000)
    rows = dom.select("tr.table-row")
    assert [r.attrs["data-table"] for r in rows][0] == str(root / "b" / "deep" / "t2")
    assert sorted(r.attrs["data-table"] for r in rows) == sorted(models)
    assert {r.attrs["data-state"] for r in rows} == {"behind"}
    kpis = {k.attrs["data-state"]: k.one("div.value").text for k in dom.select("div.kpi[data-state]")}
    assert kpis == {"behind": "3", "waiting": "0", "held": "0", "paused": "0", "problem": "0", "idle": "0"}
    assert not dom.select("script")
    doc = json.loads(run_cli("fleet", "status", str(root), "--json", "--top", "1").stdout)
    assert len(doc["tables"]) == 1 and doc["discovered"] == 3 and doc["by_state"]["behind"] == 3
