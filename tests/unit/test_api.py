"""The public Python API mirrors the CLI: same options, same documents, same errors."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest

import memwal
from memwal.actions import ACTIONS
from memwal.errors import BadInputError
from memwal.merge import MergePlan, MergeResult
from tests.conftest import table_rows
from tests.helpers import run_cli, tree_digest


def test_api_results_are_the_cli_documents(make_table):
    table, model = make_table(name="api")
    twin, _ = make_table(name="cli")  # the same workload: the same table, row for row
    t = memwal.open(table.uri)

    plan = t.merge(dry_run=True, max_generations=2)
    assert isinstance(plan.value, MergePlan) and plan.ok
    cli_plan = json.loads(run_cli("merge", twin.uri, "--dry-run", "--max-generations", "2", "--json").stdout)
    doc = plan.to_dict()
    assert doc.keys() == cli_plan.keys() and doc["dry_run"] is True
    spans = lambda d: [(s["from_generation"], s["to_generation"]) for s in d["shards"]]  # noqa: E731
    assert spans(doc) == spans(cli_plan) == [(1, 2)] * 3

    merged = t.merge()
    cli_merged = json.loads(run_cli("merge", twin.uri, "--json").stdout)
    assert isinstance(merged.value, MergeResult) and merged.ok and merged.problems == ()
    assert merged.to_dict()["version"] == cli_merged["version"]
    assert merged.to_dict()["shards"] == cli_merged["shards"]
    assert sorted(table_rows(table), key=lambda r: r["id"]) == model.sorted_rows()

    status = t.status().to_dict()
    assert status == json.loads(run_cli("status", table.uri, "--json").stdout)
    assert all(s["unmerged_generations"] == [] for s in status["shards"])
    assert t.verify().ok
    assert sorted(t.scan().to_pylist(), key=lambda r: r["id"]) == model.sorted_rows()
    assert {i.kind for i in t.leases()} == {"merge"}


@pytest.mark.parametrize("action, options, needle", [
    ("gc", {"grace_seconds": float("nan")}, "grace_seconds: nan is not a finite number"),
    ("gc", {"expire_versions": 1e300}, "expire_versions"),
    ("merge", {"max_generations": 0}, "max_generations: 0 must be positive"),
    ("catchup", {"max_unindexed_fraction": -1}, "between 0 and 1"),
    ("compact", {"engine": "flink"}, "engine: 'flink' is not one of local, spark, ray"),
    ("snapshot", {"lease_ttl": 0}, "lease_ttl"),
])
def test_bad_options_raise_bad_input_and_write_nothing(make_table, action, options, needle):
    table, _ = make_table()
    before = tree_digest(table.uri)
    with pytest.raises(BadInputError, match=needle) as err:
        getattr(memwal.open(table.uri), action)(**options)
    assert err.value.exit_code == 2
    assert tree_digest(table.uri) == before


def test_a_misspelt_option_is_refused_and_writes_nothing(make_table):
    table, _ = make_table()
    before = tree_digest(table.uri)
    with pytest.raises(TypeError, match="max_generation"):
        memwal.open(table.uri).merge(max_generation=3)
    assert tree_digest(table.uri) == before


@pytest.mark.parametrize("name", list(ACTIONS))
def test_each_action_method_takes_exactly_its_options_by_keyword(name):
    """The API declares each option by name (typed, no ``**options``); the options class
    declares its default and check once: the two must name the same options."""
    params = inspect.signature(getattr(memwal.MemWalTable, name)).parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for n, p in params.items() if n != "self")
    assert set(params) - {"self"} == {f.name for f in dataclasses.fields(ACTIONS[name].options)}


@pytest.mark.parametrize("name", list(ACTIONS))
def test_each_plan_method_and_keyword_type_name_the_same_options(name):
    """``plan_<job>()`` takes the planning options, the overloads of ``<job>()`` every one but
    ``dry_run`` (typed dicts in memwal.api): both name exactly the options class's fields."""
    from memwal import api

    declared = {f.name for f in dataclasses.fields(ACTIONS[name].options)}
    running = {"engine", "dry_run", "lease_ttl", "lease_wait"}
    title = name.capitalize()
    assert set(getattr(api, f"{title}PlanOptions").__optional_keys__) == declared - running
    assert set(getattr(api, f"{title}RunOptions").__optional_keys__) == declared - {"dry_run"}
    assert callable(getattr(memwal.MemWalTable, f"plan_{name}"))


def test_plan_methods_return_the_dry_runs_plan_and_write_nothing(make_table):
    table, _ = make_table()
    t = memwal.open(table.uri)
    before = tree_digest(table.uri)
    plan = t.plan_merge(max_generations=2)
    assert isinstance(plan, MergePlan)
    assert plan.to_dict() == t.merge(dry_run=True, max_generations=2).value.to_dict()
    assert [(s.from_generation, s.to_generation) for s in plan.shards] == [(1, 2)] * 3
    gc_plan = t.plan_gc(expire_versions="never")  # (an expiry names its moment: now less the age)
    previewed, dry = gc_plan.preview().to_dict(), t.gc(dry_run=True, expire_versions="never").value.to_dict()
    # the wait is judged at each plan's own moment: the same gates, its times from that moment
    assert previewed.pop("wait")["gates"] == dry.pop("wait")["gates"]
    assert previewed == dry
    assert len(gc_plan.blocked) == 12 and not gc_plan.generations  # nothing merged yet
    assert t.plan_snapshot().to_dict()["num_shards"] == 3
    with pytest.raises(BadInputError, match="unknown option 'max_generation'") as err:
        t.plan_merge(max_generation=2)  # type: ignore[call-arg]
    assert err.value.exit_code == 2
    assert tree_digest(table.uri) == before


def test_open_refuses_bad_input(tmp_path):
    with pytest.raises(BadInputError, match="no Lance table"):
        memwal.open(str(tmp_path / "nothing-here"))
    with pytest.raises(BadInputError, match="unknown storage option 'aws_secret_acess_key'"):
        memwal.open(str(tmp_path), storage_options={"aws_secret_acess_key": "x"})
    assert memwal.__version__ and run_cli("--version").stdout.strip() == f"memwal {memwal.__version__}"
