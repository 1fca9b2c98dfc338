"""A table's own maintenance policy (``memwal policy``, issue 84): stored with the table, used by
every job and the cycle unless the run is given the option, which wins and says so; a stored
value that does not pass its check is not used and is named; bad input writes nothing."""

from __future__ import annotations

import json

import lance

import memwal
from memwal.table.shards import all_shard_manifests
from tests.conftest import SMALL
from tests.helpers import run_cli
from tests.integration.test_gc import gen_dirs, ready_table

ZERO_POLICY = ("--set", "grace_seconds=0", "--set", "writer_idle_seconds=0", "--set", "expire_versions=0")


def test_gc_and_the_cycle_follow_the_tables_policy_unless_given_the_option(make_table, tmp_path):
    table, _ = ready_table(make_table)
    before = gen_dirs(table)
    assert all(before.values())
    assert memwal.open(table.uri).gc(dry_run=True).value.deleted == ()  # the defaults: a grace period, a day's idle

    set_ = run_cli("policy", table.uri, *ZERO_POLICY, "--json")
    assert set_.rc == 0, set_.stderr
    assert json.loads(set_.stdout)["policy"]["values"] == {"expire_versions": "0", "grace_seconds": "0",
                                                          "writer_idle_seconds": "0"}
    assert lance.dataset(table.uri).config()["memwal.policy.grace_seconds"] == "0"  # with the table, in Lance's config
    assert "policy: expire_versions=0, grace_seconds=0, writer_idle_seconds=0" in run_cli("status", table.uri).stdout
    page = tmp_path / "status.html"
    assert run_cli("status", table.uri, "--html", str(page)).rc == 0
    assert "policy: expire_versions=0, grace_seconds=0, writer_idle_seconds=0" in page.read_text()

    held = run_cli("gc", table.uri, "--grace-seconds", "600", "--json")  # the run's own option wins, and says so
    assert held.rc == 0 and json.loads(held.stdout)["deleted"] == [] and gen_dirs(table) == before
    assert "--grace-seconds 600 overrides the table's policy (0) for this run" in held.stderr

    freed = run_cli("cycle", table.uri, "--json")  # no option given: the table's policy
    assert freed.rc == 0, freed.stderr
    assert gen_dirs(table) == {s: set() for s in before}


def test_merge_bounds_come_from_the_policy(make_table):
    table, _ = make_table()
    t = memwal.open(table.uri)
    t.set_policy(set={"max_generations": "1"})
    assert t.merge().ok
    manifest = table.manifest()
    assert {s: manifest.compacted_generation(s) for s in all_shard_manifests(table.store)} == {
        s: 1 for s in all_shard_manifests(table.store)}
    assert t.merge(max_generations=2).ok  # given: two more
    manifest = table.manifest()
    assert {manifest.compacted_generation(s) for s in all_shard_manifests(table.store)} == {min(3, SMALL.generations)}
    t.set_policy(unset=["max_generations"])
    assert t.policy().values == {} and t.merge().ok
    manifest = table.manifest()
    assert {manifest.compacted_generation(s) for s in all_shard_manifests(table.store)} == {SMALL.generations}


def test_a_bad_policy_is_refused_and_a_forged_one_is_not_used(make_table, tmp_path):
    table, _ = ready_table(make_table)
    version = lance.dataset(table.uri).version
    for bad in (("--set", "grace_seconds=-1"), ("--set", "bogus=1"), ("--set", "grace_seconds"),
                ("--set", "expire_versions=soon"), ("--set", "max_rows=0")):
        r = run_cli("policy", table.uri, *bad)
        assert r.rc == 2 and len(r.error_lines) == 1, (bad, r.stderr)
    assert lance.dataset(table.uri).version == version  # nothing written

    lance.dataset(table.uri).update_config({"memwal.policy.grace_seconds": "-5", "memwal.policy.nope": "1"})
    shown = run_cli("policy", table.uri, "--json")
    assert json.loads(shown.stdout)["policy"] == {
        "values": {}, "invalid": {"grace_seconds": "'-5' must be non-negative",
                                  "nope": json.loads(shown.stdout)["policy"]["invalid"]["nope"]}}
    status = run_cli("status", table.uri).stdout
    assert "policy grace_seconds: NOT USED: '-5' must be non-negative" in status
    page = tmp_path / "status.html"
    assert run_cli("status", table.uri, "--html", str(page)).rc == 0
    assert "policy grace_seconds not used: &#39;-5&#39; must be non-negative" in page.read_text()
    before = gen_dirs(table)
    gc = run_cli("gc", table.uri, "--writer-idle-seconds", "0", "--json")  # the default grace period: nothing goes
    assert gc.rc == 0 and json.loads(gc.stdout)["deleted"] == [] and gen_dirs(table) == before
    assert "the table's policy is not used for grace_seconds, nope" in gc.stderr
    assert run_cli("policy", table.uri, "--unset", "nope", "--unset", "grace_seconds").rc == 0  # stored keys go
    assert memwal.open(table.uri).policy().invalid == {}


def test_a_hostile_policy_is_shown_clipped_counted_and_inert(make_table, tmp_path):
    """Whoever writes the table's config writes any keys and values: what memwal shows of them is
    one line each, clipped, escaped, at most ten named; a job logs one line; nothing is used."""
    table, _ = ready_table(make_table)
    evil = "\x1b[31m" + "A" * 5000 + "\x1b]0;pwned\x07"
    config = {"memwal.policy." + evil: "1", "memwal.policy.grace_seconds": "\x1b[2J" + "9" * 3000,
              **{f"memwal.policy.junk{i:03d}": "1" for i in range(200)}}
    lance.dataset(table.uri).update_config(config)
    policy = memwal.open(table.uri).policy()
    assert policy.values == {} and len(policy.invalid) == 11 and policy.invalid["(192 more keys)"]
    for cmd in (("policy", table.uri), ("status", table.uri)):
        r = run_cli(*cmd)
        out = r.stdout + r.stderr
        assert r.rc == 0 and "\x1b" not in out and max(map(len, out.splitlines())) < 400, cmd
        assert "(192 more keys): NOT USED" in out and "(4,935 more characters)" in out
    page = tmp_path / "status.html"
    assert run_cli("status", table.uri, "--html", str(page)).rc == 0
    assert "\x1b" not in page.read_text() and "pwned" not in page.read_text()
    before = gen_dirs(table)
    gc = run_cli("gc", table.uri, "--writer-idle-seconds", "0")  # the default grace period: nothing goes
    assert gc.rc == 0 and gen_dirs(table) == before
    assert len([line for line in gc.stderr.splitlines() if "policy is not used" in line]) == 1
