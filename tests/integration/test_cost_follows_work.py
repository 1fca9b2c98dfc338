"""Cost follows the work (issue 23): the cheaper paths give exactly the answers of the plain ones.

* The merge's join policy (:mod:`memwal.merge.join`): both joins Lance offers (the key index,
  a scan) merge the same rows with the same progress, through both passes.
* GC's retained-version gate over many versions (:mod:`memwal.gc.versions`): shared decoding
  and array answers block exactly what a plain pass over every version blocks, including
  after a ``restore`` that committed an older manifest (progress is not monotone).

Figures live in ``bench/`` (growth.py, status_scale.py); nothing here is timed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import memwal
from memwal.demo import shard_ids_for
from memwal.gc import plan_gc
from memwal.merge import join, run_merge
from memwal.merge.join import join_builder, use_key_index
from memwal.table import open_table
from memwal.table.manifest import read_table_manifest
from memwal.table.shards import list_generation_dirs
from tests.conftest import SMALL, table_rows

# --------------------------------------------------------------------------- the join policy


def test_the_policy_uses_the_index_for_few_keys_and_scans_for_many():
    assert use_key_index(1, 1_000_000) and use_key_index(join.INDEX_JOIN_MIN_KEYS, 0)
    assert not use_key_index(200_000, 1_000_000) and not use_key_index(200_000, 16_000_000)
    assert not use_key_index(2_000, 1_000_000) and use_key_index(2_000, 16_000_000)  # the threshold grows with the base
    assert use_key_index(300, 1_000_000) and not use_key_index(400, 1_000_000)
    assert not use_key_index(0, 1_000_000)  # the marker alone: the scan join returns at once


def _scan_plan_or_none(builder, schema) -> str | None:
    """Lance's plan of a scan join; None when it takes the scalar-index path (whose plan
    Lance cannot explain: it says so)."""
    try:
        return builder.explain_plan(schema)
    except OSError as exc:
        assert "scalar-index execution path" in str(exc)
        return None


def test_join_builder_hands_lance_the_choice(make_table):
    table, _ = make_table()
    ds = table.dataset()
    keys = ds.to_table(columns=["id"], limit=3).schema
    assert "id_idx" in {i.name for i in ds.describe_indices()}  # the BTREE on the key
    assert _scan_plan_or_none(join_builder(ds, ["id"], 3).when_matched_delete(), keys) is None
    plan = _scan_plan_or_none(join_builder(ds, ["id"], 10**9).when_matched_delete(), keys)
    assert plan is not None and "DeleteOnlyMergeInsert" in plan


@pytest.mark.parametrize("join_by", ["index", "scan"])
def test_both_joins_merge_the_same_rows_and_record_progress(make_table, monkeypatch, join_by):
    """Every generation merged through the chosen join on both passes (delete, then the
    marked upsert): the rows equal the model's and Lance recorded the progress marker."""
    if join_by == "scan":
        monkeypatch.setattr(join, "INDEX_JOIN_MIN_KEYS", -1)
        monkeypatch.setattr(join, "INDEX_JOIN_BASE_ROWS_PER_KEY", 10**12)
    else:
        monkeypatch.setattr(join, "INDEX_JOIN_MIN_KEYS", 10**12)
    chosen = []
    real = join.use_key_index
    monkeypatch.setattr(join, "use_key_index", lambda k, n: chosen.append(real(k, n)) or chosen[-1])
    table, model = make_table()
    result = memwal.open(table.uri).merge().value
    assert result.commits == 2 and set(chosen) == {join_by == "index"} and len(chosen) == 2
    assert table_rows(table) == model.sorted_rows()
    assert table.manifest().compacted == {s: SMALL.generations for s in shard_ids_for(SMALL)}


# --------------------------------------------------------------------------- gc over many versions


def _naive_verdicts(table, shard_id: str, generations: list[int]) -> dict[int, str | None]:
    """Gate (c) the plain way: every retained version's manifest decoded on its own, a pass
    over all of them per generation. The first holder's version, or None."""
    from memwal.table.retained import retained_versions

    versions = [(v, read_table_manifest(table.store, v.version).compacted_generation(shard_id))
                for v in retained_versions(table)]
    return {g: next((v.version for v, p in versions if p < g), None) for g in generations}


def test_many_versions_and_a_restore_block_exactly_the_generations_they_need(make_table):
    """B merged 3 generations, then R (a restore of an older version) has only 1, then M
    merged all 4, then many commits. R, newer than B but behind it, holds 2..4 and names
    itself for 2 and 3; B holds 4 only and is named first for it; 1 goes."""
    table, model = make_table()
    assert memwal.open(table.uri).merge(max_generations=1).ok and memwal.open(table.uri).catchup().ok
    older = table.dataset().version  # progress 1 everywhere
    assert memwal.open(table.uri).merge(max_generations=2).ok and memwal.open(table.uri).catchup().ok
    b = table.dataset().version  # progress 3
    table.dataset(older).restore()
    r = table.dataset().version  # progress 1 again: an older manifest, committed anew
    assert table.manifest().compacted == {s: 1 for s in shard_ids_for(SMALL)}
    assert memwal.open(table.uri).merge().ok and memwal.open(table.uri).catchup().ok
    m = table.dataset().version  # progress 4
    for tag, v in (("b", b), ("r", r)):  # keep B and R through the expiry of everything older
        table.dataset().tags.create(tag, v)
    table.dataset().cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)
    for tag in ("b", "r"):
        table.dataset().tags.delete(tag)
    ds = table.dataset()
    for i in range(40):
        ds.update_config({"test.commit": str(i)})
    table = open_table(table.uri)
    plan = plan_gc(table, grace_seconds=0,
                   writer_idle_seconds=0)  # internal entry: the plan's own fields (retention, reasons)
    assert plan.retained_versions == 2 + 1 + 40 and m > r > b
    shards = shard_ids_for(SMALL)
    blocked = {(x.shard_id, x.generation): list(x.reasons) for x in plan.blocked}
    assert blocked == {(s, g): [f"retained-version:{r if g < 4 else b}"] for s in shards for g in (2, 3, 4)}
    assert {(d.shard_id, d.generation) for d in plan.generations} == {(s, 1) for s in shards}
    assert all(d.gates.oldest_retained_progress == 1 for d in plan.generations)
    for s in shards:  # the same answers as a pass over every version, decoded one by one
        naive = _naive_verdicts(table, s, [1, 2, 3, 4])
        assert naive == {1: None, 2: r, 3: r, 4: b}
    held = {row.version: row.generations_held for row in plan.retention.blocking_versions}
    assert held == {b: len(shards), r: 3 * len(shards)}
    # the run deletes exactly generation 1 of each shard, and time travel to R still reads its rows
    rows_r = table_rows(table, r)
    result = memwal.open(table.uri).gc(grace_seconds=0, writer_idle_seconds=0).to_dict()
    assert {(d["shard_id"], d["generation"]) for d in result["deleted"]} == {(s, 1) for s in shards}
    assert all(set(list_generation_dirs(table.store, s).values()) == {2, 3, 4} for s in shards)
    assert table_rows(table, r) == rows_r
    assert table_rows(table) == model.sorted_rows()


def test_a_branch_forked_before_the_merge_holds_every_generation_among_many_versions(make_table):
    """Versions on a branch are read from their own line (``tree/<branch>/``), decoded with
    the same sharing: the branch's first version, never merged, holds every generation."""
    table, _ = make_table()
    table.dataset().create_branch("before-merge", table.dataset().version)
    assert memwal.open(table.uri).merge().ok and memwal.open(table.uri).catchup().ok
    table.dataset().cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)
    ds = table.dataset()
    for i in range(20):
        ds.update_config({"test.commit": str(i)})
    plan = plan_gc(open_table(table.uri), grace_seconds=0,
                   writer_idle_seconds=0)  # internal entry: the plan's own fields
    assert plan.generations == () and len(plan.blocked) == SMALL.shards * SMALL.generations
    assert all(b.reasons[0].startswith("retained-version:") and "(branch before-merge" in b.reasons[0]
               for b in plan.blocked)


# --------------------------------------------------------------------------- listings by name


def test_list_keys_names_what_a_shallow_listing_lists(store, tmp_path):
    """``Store.list_keys`` (history, table versions: names only) gives the keys of a
    non-recursive ``list``, in the same order, on every store; a local one skips links and
    temporary files as ``list`` does, without a stat per file."""
    import os

    for key in ("h/00002-gc-b.json", "h/00001-merge-a.json", "h/sub/x.json", "h/00003-merge-c.json", "hx/y.json"):
        store.put(key, b"{}")
    if store.__class__.__name__ == "LocalStore":
        os.symlink(tmp_path, os.path.join(store.root, "h", "00000-merge-link.json"))
        store.put("h/00004-x.json.memwal-tmp-1", b"{}")
        assert store.list_links("h/", recursive=False) == ["h/00000-merge-link.json"]
    expected = [o.key for o in store.list("h/", recursive=False)]
    assert expected == ["h/00001-merge-a.json", "h/00002-gc-b.json", "h/00003-merge-c.json"]
    assert list(store.list_keys("h/")) == expected
    assert list(store.list_keys("h/00002")) == ["h/00002-gc-b.json"]
    assert list(store.list_keys("nothing/")) == []


# --------------------------------------------------------------------------- spark only for work


def test_a_spark_merge_with_nothing_to_merge_never_asks_for_a_context(make_table):
    """The Spark merge engine takes its context when a batch first needs it: a merge with
    nothing to merge reports the spark engine and never waited for a JVM."""
    from memwal.spark.engine.merge import SparkMergeEngine

    table, model = make_table()
    assert memwal.open(table.uri).merge().ok
    engine = SparkMergeEngine.from_active_or_local()
    result = run_merge(table, engine=engine)  # internal entry: the engine object is inspected afterwards
    assert result.engine == "spark" and result.shards == () and result.version is None
    assert engine._spark is None
    assert table_rows(table) == model.sorted_rows()
