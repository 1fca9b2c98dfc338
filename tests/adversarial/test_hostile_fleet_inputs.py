"""Every fleet input bounded (issue 47): folders no key may hold, hostile table names on a
terminal, stray files in ``_versions/``, alias bombs and malformed values in policies and in
the Airflow fleet config, result files and caches at hostile paths, tables files that drop a
table or name one four ways, and a history record no JSON reader can follow.

Tables come from pylance's ShardWriter (``memwal.demo``), their expected rows from the demo's
own model; a canary folder outside every table must not change; exit 2 leaves the tables
byte for byte as they were."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from memwal.demo import Workload, create_base_table, write_generations
from memwal.table import open_table
from tests.conftest import table_rows
from tests.helpers import assert_one_line_error, memwal_program, run_cli, run_watched, tree_digest

TINY = Workload(base_rows=40, shards=1, generations=2, rows_per_generation=10, seed=9, indexes=False)
#: Under 1 KB of YAML whose one value stands for 10**9 strings (nine levels of ten aliases),
#: where a policy number belongs: shown in an error, or walked by a schema, it expands.
BOMB = "[&a [" + ", ".join(["lol"] * 10) + "], " + ", ".join(
    f"&{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]" for i in range(8)) + "]"
LAUGHS = f"defaults:\n  thresholds:\n    merge_generations: {BOMB}\n"


def make(path: Path):
    _, model = create_base_table(str(path), TINY)
    write_generations(str(path), TINY, model)
    return model


def plan(*argv: str) -> tuple[int, dict, str]:
    run = run_cli("fleet", "plan", *argv, "--json")
    return run.rc, (json.loads(run.stdout) if run.stdout.strip() else {}), run.stderr


def test_a_folder_with_a_backslash_is_skipped_with_its_reason(canary, tmp_path):
    root = tmp_path / "lake"
    make(root / "t")
    (root / "odd\\name" / "inner").mkdir(parents=True)
    rc, doc, err = plan(str(root))
    assert rc == 0, err
    assert [t["table"] for t in doc["tables"]] == [str(root / "t")]
    assert any(s["path"] == str(root / "odd\\name") and "backslash" in s["reason"] for s in doc["skipped"])


def test_fleet_run_escapes_a_failed_tables_path_on_stderr(canary, tmp_path):
    root = tmp_path / "lake"
    make(root / "t")
    name = "t\x1b[31mred\nsecond"
    (root / "t").rename(root / name)  # a name Lance cannot open: this table fails
    run = run_cli("fleet", "run", str(root))
    assert run.rc == 1, run.stderr
    assert "\x1b" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if "red" in line]
    assert lines and all(line.startswith("memwal: error:") and "second" in line for line in lines), run.stderr


@pytest.mark.parametrize("stray", ["-1.manifest", '"x.manifest'])
def test_a_stray_file_in_versions_changes_nothing_the_fleet_sees(canary, tmp_path, stray):
    table = tmp_path / "t"
    make(table)
    rc, before, err = plan(str(table))
    assert rc == 0, err
    (table / "_versions" / stray).write_bytes(b"")
    rc, after, err = plan(str(table))
    assert rc == 0, err
    assert after["problems"] == [] and after["skipped"] == []
    assert [(t["table"], t["jobs"]) for t in after["tables"]] == [(t["table"], t["jobs"]) for t in before["tables"]]


def test_an_alias_bomb_in_a_policy_is_refused_at_once(canary, tmp_path):
    table = tmp_path / "t"
    make(table)
    policy = tmp_path / "policy.yaml"
    policy.write_text(LAUGHS)
    assert len(LAUGHS) < 1200
    before = tree_digest(str(table))
    run = run_watched([memwal_program(), "fleet", "plan", str(table), "--policy", str(policy)], kill_after=60)
    print(f"policy alias bomb: exit {run.rc}, {run.peak_mb:.0f} MB, {run.seconds:.1f} s", file=sys.stderr)
    assert_one_line_error(run, 2, str(policy), "aliases (*name) are not allowed")
    assert run.peak_mb < 600 and run.seconds < 30
    assert tree_digest(str(table)) == before


def test_an_alias_bomb_in_the_airflow_fleet_config_is_refused_at_once(canary, tmp_path):
    config = tmp_path / "fleet.yaml"
    config.write_text(f"sources: [{{source: /data}}]\npolicy:\n  defaults:\n    thresholds:\n"
                      f"      merge_generations: {BOMB}\n")
    code = ("import sys\nfrom memwal.airflow.fleet import FleetConfigError, load_fleet_config\n"
            "try:\n    load_fleet_config(sys.argv[1])\nexcept FleetConfigError as exc:\n"
            "    print(f'memwal: error: {exc}', file=sys.stderr)\n    sys.exit(2)\n")
    run = run_watched([sys.executable, "-c", code, str(config)], kill_after=60)
    print(f"airflow alias bomb: exit {run.rc}, {run.peak_mb:.0f} MB, {run.seconds:.1f} s", file=sys.stderr)
    assert_one_line_error(run, 2, str(config), "aliases (*name) are not allowed")
    assert run.peak_mb < 600 and run.seconds < 30


MALFORMED = {
    "huge-integer": ("defaults: {thresholds: {merge_generations: " + "9" * 400 + "}}", "merge_generations"),
    "date-as-pattern": ("tables: {2024-01-01: {weights: {merge: 2}}}", "2024-01-01"),
    "list-as-options": ("defaults: {options: {gc: [1, 2]}}", "options.gc"),
    "string-as-options": ("defaults: {options: {gc: fast}}", "options.gc"),
    "nested-option": ("defaults: {options: {gc: {grace_seconds: {a: {b: [1]}}}}}", "options.gc"),
    "zero-batch": ("defaults: {batch: {max_generations: 0}}", "batch.max_generations"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_policy_value_is_bad_input_naming_the_key_and_the_file(canary, tmp_path, case):
    text, key = MALFORMED[case]
    table = tmp_path / "t"
    make(table)
    policy = tmp_path / "policy.yaml"
    policy.write_text(text + "\n")
    before = tree_digest(str(table))
    for verb in ("plan", "run"):
        assert_one_line_error(run_cli("fleet", verb, str(table), "--policy", str(policy)), 2, str(policy), key)
    assert tree_digest(str(table)) == before


def test_a_result_file_path_that_is_a_link_is_refused_and_its_target_untouched(canary, tmp_path):
    table = tmp_path / "t"
    make(table)
    target = canary / "keep.txt"
    link = tmp_path / "result.json"
    os.symlink(target, link)
    assert_one_line_error(run_cli("status", str(table), "--json", "--result-file", str(link)), 2, str(link),
                          "symbolic link")
    assert os.path.islink(link)


def test_a_dropped_table_in_a_tables_file_is_a_problem_for_that_table_alone(canary, tmp_path):
    kept, dropped = tmp_path / "kept", tmp_path / "dropped"
    model = make(kept)
    make(dropped)
    listing = tmp_path / "tables.txt"
    listing.write_text(f"{kept}\n{dropped}\n")
    shutil.rmtree(dropped)
    rc, doc, err = plan("--tables-file", str(listing))
    assert rc == 1, err
    assert [t["table"] for t in doc["tables"]] == [str(kept)]
    assert [p["table"] for p in doc["problems"]] == [str(dropped)]
    run = run_cli("fleet", "run", "--tables-file", str(listing))
    assert run.rc == 1 and len(run.error_lines) == 1 and str(dropped) in run.error_lines[0], run.stderr
    assert table_rows(open_table(str(kept))) == model.sorted_rows()


def test_one_table_written_four_ways_is_one_table(canary, tmp_path, monkeypatch):
    make(tmp_path / "t")
    monkeypatch.chdir(tmp_path)
    listing = tmp_path / "tables.txt"
    listing.write_text(f"t\n./t\nt/../t\nfile://{tmp_path}/t\n")
    rc, doc, err = plan("--tables-file", str(listing))
    assert rc == 0, err
    assert doc["discovered"] == 1 and [t["table"] for t in doc["tables"]] == [str(tmp_path / "t")]


def test_a_cache_over_its_cap_is_refused_before_it_is_read(canary, tmp_path):
    table = tmp_path / "t"
    make(table)
    cache = tmp_path / "cache.json"
    with open(cache, "wb") as f:
        f.truncate(300 << 20)  # 300 MB (sparse): over the 256 MiB cap
    run = run_watched([memwal_program(), "fleet", "plan", str(table), "--cache", str(cache)])
    print(f"300 MB cache: exit {run.rc}, {run.peak_mb:.0f} MB, {run.seconds:.1f} s", file=sys.stderr)
    assert run.rc == 0, run.stderr
    assert "ignoring the fleet cache" in run.stderr
    assert run.peak_mb < 400, run.peak_mb


def test_a_cache_in_a_missing_folder_is_refused_before_planning(canary, tmp_path):
    table = tmp_path / "t"
    make(table)
    given = str(tmp_path / "no-such-folder" / "cache.json")
    before = tree_digest(str(table))
    run = run_cli("fleet", "plan", str(table), "--cache", given)
    assert_one_line_error(run, 2, given)
    assert ".tmp" not in run.stderr and run.stdout == ""
    assert tree_digest(str(table)) == before


def test_a_history_record_of_nested_brackets_is_skipped_with_a_warning(canary, tmp_path):
    from memwal.history.log import record_key

    table = tmp_path / "t"
    make(table)
    assert run_cli("merge", str(table)).rc == 0
    key = record_key(time.time() - 60, "merge", "b" * 16)
    path = table / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"[" * 200_000)
    run = run_cli("history", str(table), "--json")
    assert run.rc == 0, run.stderr
    assert f"skipping history record {path}" in run.stderr
    runs = json.loads(run.stdout)["runs"]
    assert [r["job"] for r in runs if r["job"] != "external"] == ["merge"]
