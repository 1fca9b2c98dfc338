"""A forged retained-progress digest decides no verdict (issue 83, item 5).

``_mem_wal/_jobs/retained-progress.json`` is a cache anyone who writes the table's storage can
rewrite: it may save GC reading the retained versions' manifests, never make GC alarm
(``progress-unproven``), make ``memwal verify`` fail or ``memwal repair`` offer rows, nor free a
folder a retained version still needs. A digest whose claims its manifests contradict is not
used again: the next whole run rewrites it from the manifests.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import pytest

import memwal
from memwal.demo import shard_ids_for
from memwal.gc import plan_gc
from memwal.table import Table, open_table
from memwal.table.manifest import read_table_manifest
from memwal.table.progress_digest import DIGEST_KEY
from tests.conftest import SMALL
from tests.helpers import run_cli

TAGGED = 2  # a version from before any merge: progress 0 on every shard
GENERATIONS = {(s, g) for s in shard_ids_for(SMALL) for g in range(1, SMALL.generations + 1)}


def _gc(table: Table, **kw: Any) -> dict[str, Any]:
    """A whole run in a fresh table object, as a CLI run is."""
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0, **kw)
    assert result.ok, result.to_dict()
    doc: dict[str, Any] = result.to_dict()
    return doc


def _held(doc: dict[str, Any]) -> dict[tuple[str, int], str]:
    return {(b["shard_id"], b["generation"]): b["reason"] for b in doc["blocked"]}


def _on_storage(table: Table) -> set[tuple[str, int]]:
    """The generation folders left, by (shard, generation)."""
    out = set()
    for sid in shard_ids_for(SMALL):
        for name in os.listdir(os.path.join(table.uri, "_mem_wal", sid)):
            if "_gen_" in name:
                out.add((sid, int(name.rsplit("_gen_", 1)[1])))
    return out


def _merged_with_tag(make_table: Any, expire: int | str = 0) -> Table:
    """Version 2 tagged ``pin`` at progress 0, every generation merged, then a whole GC run that
    leaves the digest (and expires the untagged versions before the merge, unless ``expire`` is
    ``"never"``)."""
    table, _ = make_table()
    assert read_table_manifest(table.store, TAGGED).compacted == {}
    table.dataset().tags.create("pin", TAGGED)
    api = memwal.open(table.uri)
    assert api.merge().ok and api.catchup().ok
    doc = _gc(table, expire_versions=expire)
    oldest = 1 if expire == "never" else TAGGED
    assert {r.split(" ")[0] for r in _held(doc).values()} == {f"retained-version:{oldest}"}
    assert table.store.head(DIGEST_KEY) is not None
    return table


def _forge(table: Table, claim: Any) -> dict[str, Any]:
    """Rewrite every entry of the digest that ``claim(version)`` says to: the latest progress."""
    doc: dict[str, Any] = json.loads(table.store.get(DIGEST_KEY))
    full = doc["section_of"][doc["versions"].index(max(doc["versions"]))]
    assert doc["sections"][full]  # the latest version merged every shard
    doc["section_of"] = [full if claim(v) else j for v, j in zip(doc["versions"], doc["section_of"], strict=True)]
    table.store.put(DIGEST_KEY, json.dumps(doc).encode())
    return doc


def _digest_claims(table: Table) -> dict[int, dict[str, int]]:
    doc = json.loads(table.store.get(DIGEST_KEY))
    sections = [{doc["shards"][i]: g for i, g in zip(s[0::2], s[1::2], strict=True)} for s in doc["sections"]]
    return {v: sections[j] for v, j in zip(doc["versions"], doc["section_of"], strict=True)}


def test_a_digest_claiming_the_latest_progress_everywhere_raises_no_alarm_and_is_rewritten(
        make_table: Any, caplog: pytest.LogCaptureFixture) -> None:
    table = _merged_with_tag(make_table)
    _forge(table, lambda v: True)
    assert _digest_claims(table)[TAGGED] != {}

    with caplog.at_level(logging.WARNING, logger="memwal.table.retained"):
        doc = _gc(table)
    held = _held(doc)
    assert set(held) == GENERATIONS and set(held.values()) == {f"retained-version:{TAGGED} (tag pin)"}, held
    assert not doc.get("deleted") and _on_storage(table) == GENERATIONS
    assert any(DIGEST_KEY in r.getMessage() and "not using" in r.getMessage() for r in caplog.records)
    # the run rewrote it from the manifests: the tagged version's progress is its own again
    assert _digest_claims(table)[TAGGED] == {}

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memwal.table.retained"):
        for _ in range(2):  # nothing persists: the same verdict, no warning, from few reads
            assert set(_held(_gc(table)).values()) == {f"retained-version:{TAGGED} (tag pin)"}
        plan = plan_gc(open_table(table.uri), grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert not caplog.records
    assert plan["retained_manifests_read"] <= 2 < plan["retained_versions"] + 1  # the named holder, the latest

    verify = run_cli("verify", table.uri)
    assert verify.rc == 0 and "OK" in verify.stdout, verify.stdout + verify.stderr
    repair = run_cli("repair", table.uri, "--dry-run")
    assert repair.rc == 0 and "nothing to repair" in repair.stdout, repair.stdout + repair.stderr

    table.dataset().tags.delete("pin")
    doc = _gc(table, expire_versions=0)
    assert {(d["shard_id"], d["generation"]) for d in doc["deleted"]} == GENERATIONS
    assert _on_storage(table) == set()


def test_verify_and_repair_take_no_progress_from_a_forged_digest(make_table: Any) -> None:
    """Before any GC run rewrites it: verify and repair judge from the manifests. Every version
    retained, as in the issue: the claims would make version 1 the first to cover every generation."""
    table = _merged_with_tag(make_table, "never")
    _forge(table, lambda v: True)
    verify = run_cli("verify", table.uri)
    assert verify.rc == 0 and "OK" in verify.stdout, verify.stdout + verify.stderr
    repair = run_cli("repair", table.uri, "--dry-run")
    assert repair.rc == 0 and "nothing to repair" in repair.stdout, repair.stdout + repair.stderr
    assert _digest_claims(table)[TAGGED] != {}  # neither writes the digest


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_digest_claiming_the_tagged_version_merged_everything_frees_nothing(make_table: Any, dry_run: bool) -> None:
    """The other way: version 2 (progress 0) claimed fully merged, so no retained version would
    hold a generation. Time travel to the tag still needs them: GC keeps every one."""
    table = _merged_with_tag(make_table)
    rows = table.dataset(TAGGED).to_table().num_rows
    _forge(table, lambda v: v == TAGGED)
    doc = _gc(table, expire_versions=0, dry_run=dry_run)
    held = _held(doc)
    assert set(held) == GENERATIONS and set(held.values()) == {f"retained-version:{TAGGED} (tag pin)"}, held
    assert not doc.get("deleted") and _on_storage(table) == GENERATIONS
    assert table.dataset(TAGGED).to_table().num_rows == rows
    assert (_digest_claims(table)[TAGGED] == {}) is not dry_run  # a dry run writes nothing
