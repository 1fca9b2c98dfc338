"""Forged driverless data commits (issue 47): someone who can write the table plants a pending
driverless merge intent, then commits an ``Update`` whose transaction properties claim that
intent's data wrongly. The next merge must ignore every claim that does not match its intent
and merge the shard again (row for row the writers' model), and ``memwal verify`` must prove
that merged generations still on storage are in the base table, naming the first missing key.

Tables come from pylance's ShardWriter (``memwal.demo``); the expected rows are the demo's own
model of what the writers put; a canary folder outside the table must not change."""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import lance
import pytest
from lance.mem_wal import CompactedSsTable

from memwal.demo import Workload
from memwal.merge.changes import empty_keys
from memwal.table.shards import all_shard_manifests
from tests.conftest import table_rows
from tests.helpers import run_cli

#: Five generations a shard, so that a claim past the intent's three has something to skip.
FIVE = Workload(base_rows=200, shards=2, generations=5, rows_per_generation=30, seed=47)


def plant_intent(table, shards: dict[str, int]) -> tuple[str, int]:
    """A pending driverless intent, as a merge writes it; returns its id and read version."""
    iid = uuid.uuid4().hex
    version = int(table.dataset().version)
    doc = {"shards": shards, "read_version": version, "holder": "mallory", "written_at": time.time(),
           "commit_path": "driverless"}
    table.store.put_if_absent(f"_mem_wal/_jobs/merge-intents/{iid}.json", json.dumps(doc).encode())
    return iid, version


def forge_data_commit(table, props: dict[str, str]) -> None:
    """An ``Update`` that changes nothing (it names the lowest fragment unchanged), carrying ``props``."""
    ds = table.dataset()
    fence = min(ds.get_fragments(), key=lambda f: f.fragment_id).metadata
    txn = lance.Transaction(ds.version, lance.LanceOperation.Update(updated_fragments=[fence]),
                            transaction_properties=props)
    lance.LanceDataset.commit(table.uri, txn, read_version=ds.version)


def claim(iid: str, data: dict[str, list[int]], pad: int = 0) -> dict[str, str]:
    return {"memwal.merge.intent": iid, "memwal.merge.data": json.dumps(data) + " " * pad}


CASES = {
    # the intent covers shard A's generations 1-3; the claim is for shard B
    "another-shard": lambda a, b: ({a: 3}, {b: [1, 5]}, 0),
    # the intent covers generations 1-3; the claim says 1-99
    "past-the-intent": lambda a, b: ({a: 3}, {a: [1, 99]}, 0),
    # the claim matches, but its property is 4 MB (padded)
    "four-megabytes": lambda a, b: ({a: 5}, {a: [1, 5]}, 4 << 20),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_forged_claim_is_ignored_and_the_shard_merged_again(make_table, canary, case):
    table, model = make_table(FIVE)
    a, b = sorted(all_shard_manifests(table.store))
    intent, data, pad = CASES[case](a, b)
    iid, _ = plant_intent(table, intent)
    forge_data_commit(table, claim(iid, data, pad))
    run = run_cli("merge", table.uri, "--json")
    assert run.rc == 0, run.stderr
    assert table_rows(table) == model.sorted_rows()  # no key lost, no stale value, no deleted key back
    assert run_cli("verify", table.uri).rc == 0


def named_key(stdout: str) -> int:
    found = re.search(r"holds key (-?\d+),", stdout)
    assert found, stdout
    return int(found.group(1))


def test_verify_names_the_first_key_a_merged_generation_holds_and_the_base_lacks(make_table, canary):
    """What a trusted forged claim leaves: progress recorded for a shard, no row of its data
    written (the marker alone). verify must fail, naming a key the base holds wrongly."""
    table, model = make_table(FIVE)
    a = sorted(all_shard_manifests(table.store))[0]
    ds = table.dataset()
    ds.merge_insert("id").when_matched_delete().mark_sstables_as_compacted(
        [CompactedSsTable(a, FIVE.generations)]).execute(empty_keys(ds.schema, ["id"]))
    run = run_cli("verify", table.uri)
    assert run.rc == 1, run.stdout
    assert "merged-data-in-base" in run.stdout and a in run.stdout
    key = named_key(run.stdout)
    want = {r["id"]: r for r in model.sorted_rows()}
    have = {r["id"]: r for r in table_rows(table)}
    assert want.get(key) != have.get(key)  # the model and the base disagree on the named key


def test_verify_takes_the_owners_writes_and_names_a_merged_key_put_back_to_an_older_value(make_table, canary):
    """After a real merge every key verifies (a key written in several generations: the newest
    counts). The owner's update on the base is the truth (issue 61): verify stays OK. A key set
    back to an *older* generation's value (what a second compactor merging older rows again
    leaves, issue 54) is named."""
    table, model = make_table(FIVE)
    assert run_cli("merge", table.uri).rc == 0
    assert run_cli("verify", table.uri).rc == 0
    table.dataset().update({"name": "'the owner'"}, where="id = 0")
    assert run_cli("verify", table.uri).rc == 0
    older = _rewritten_key(table)  # the older row, merged again over the newer (as a second compactor does)
    ds = table.dataset()
    ds.merge_insert("id").when_matched_update_all().execute(older.cast(ds.schema))
    run = run_cli("verify", table.uri)
    assert run.rc == 1, run.stdout
    assert "older generation" in run.stdout
    key = older.column("id")[0].as_py()
    assert {r["id"]: r for r in model.sorted_rows()}[key]["name"] != older.column("name")[0].as_py()


def _rewritten_key(table):  # type: ignore[no-untyped-def]
    """The older row of a key two generations of one shard wrote with different names."""
    import lance as _lance

    for shard in sorted(all_shard_manifests(table.store)):
        seen: dict[int, dict] = {}
        folders = Path(table.uri, "_mem_wal", shard).glob("*_gen_*")
        for d in sorted(folders, key=lambda p: int(p.name.rsplit("_", 1)[1])):
            t = _lance.dataset(str(d)).to_table()
            for i, row in enumerate(t.select(["id", "name", "_tombstone"]).to_pylist()):
                if row["_tombstone"]:
                    continue
                if row["id"] in seen and seen[row["id"]]["name"] != row["name"]:
                    return seen[row["id"]]["row"]
                seen[row["id"]] = {"name": row["name"], "row": t.slice(i, 1).drop_columns(["_tombstone"])}
    raise AssertionError("no key written twice")


def test_a_claim_of_nested_brackets_is_ignored_and_every_row_merged(make_table, canary):
    """A data-ranges property of 200,000 nested ``[`` (no JSON reader can take it)."""
    table, model = make_table(FIVE)
    a = sorted(all_shard_manifests(table.store))[0]
    iid, _ = plant_intent(table, {a: 5})
    forge_data_commit(table, {"memwal.merge.intent": iid, "memwal.merge.data": "[" * 200_000})
    run = run_cli("merge", table.uri)
    assert run.rc == 0, run.stderr
    assert table_rows(table) == model.sorted_rows()
