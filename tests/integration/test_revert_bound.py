"""The revert check reads what the owner's commits wrote, not every generation kept (issue 82).

A commit on the base that is not memwal's and writes rows (the owner's ``update``, another
compactor's ``merge_insert``) puts every merged generation proven before it at risk of a revert
(:mod:`memwal.merge.cover`). The check used to read each at-risk generation back against the
latest base, with every newer generation on storage beside it: under the default week of
retention, one owner's update made each whole GC read all the generations the week kept. Now
only generations holding a key the foreign commits wrote are read back. Here, on real tables
written by pylance's ``ShardWriter`` and merged one generation at a time:

* the judgements are those of the unbounded check (the owner's update of keys no judged
  generation holds, of a key one holds, a revert of a newer generation's key by an older one's
  row, a foreign commit whose version before has expired, keys written past the bound);
* the generations opened to judge the two oldest are the same at two ages (8 and 24 merged
  generations), where the unbounded check opened every newer one. Work is counted, never timed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import memwal
from memwal.demo import Workload
from memwal.history.receipts import list_receipts
from memwal.merge import cover, newest, reverts
from memwal.merge.cover import Cover, Entry, Judgement
from memwal.merge.model import GenerationRef
from memwal.merge.refs import generation_refs
from memwal.table import Table
from memwal.table.generations import open_generation
from memwal.table.retained import retained_versions
from memwal.table.schema import primary_key_of
from memwal.table.shards import list_generation_dirs


def shape(generations: int) -> Workload:
    return Workload(base_rows=300, shards=1, generations=generations, rows_per_generation=8, update_fraction=0.5,
                    delete_fraction=0.1, duplicate_fraction=0.0, indexes=False, maintain_vector_index=False, seed=82)


class Unbounded(Cover):
    """The check before the bound: every proven entry with a foreign write after it is read back."""

    def _holding_written(self, shard_id: str, at_risk: list[Entry], judged: Mapping[Entry, Judgement]
                         ) -> tuple[list[Entry], dict[str, pa.Table]]:
        return at_risk, {}


def merged_one_by_one(make_table: Callable[..., tuple[Table, Any]], generations: int) -> Table:
    table, _ = make_table(shape(generations))
    for _ in range(generations):
        assert memwal.open(table.uri).merge(max_generations=1).ok
    return table


def folders(table: Table) -> tuple[str, dict[int, str]]:
    (sid,) = table.manifest().compacted
    return sid, {g: name for name, g in list_generation_dirs(table.store, sid).items()}


def keys_of(table: Table, sid: str, present: Mapping[int, str]) -> dict[int, set[int]]:
    ds = table.dataset()
    out = {}
    for ref in generation_refs(table, ds, sid, sorted(present.items())):
        out[ref.generation] = set(open_generation(ref.uri, None).to_table(columns=["id"]).column("id").to_pylist())
    return out


def puts_of(table: Table, sid: str, present: Mapping[int, str], g: int) -> pa.Table:
    """Generation ``g``'s rows that are not deletes."""
    ref = generation_refs(table, table.dataset(), sid, [(g, present[g])])[0]
    rows = open_generation(ref.uri, None).to_table()
    if "_tombstone" in rows.column_names:
        rows = rows.filter(pc.invert(rows.column("_tombstone").fill_null(False)))
    return rows


def judge(table: Table, kind: type[Cover], oldest: int, opened: list[str]) -> dict[int, Judgement]:
    """GC's question about the ``oldest`` generations on storage (the ones a week's retention lets
    go first), with every generation on storage present; the generation folders opened, in
    ``opened``."""
    ds = table.dataset()
    sid, present = folders(table)

    def refs(shard_id: str, entries: Sequence[tuple[int, str]]) -> list[GenerationRef]:
        return generation_refs(table, ds, shard_id, entries)

    versions = retained_versions(table)
    cover = kind(table, versions, list_receipts(table.store), refs, pk=primary_key_of(table, ds))
    entries = [Entry(g, p) for g, p in sorted(present.items())[:oldest]]
    opened.clear()
    return {e.generation: j for e, j in cover.judge(sid, entries, present).items()}


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The generation folders the proof opens (the real opens, counted)."""
    seen: list[str] = []

    def counting(uri: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(uri)
        return open_generation(uri, *args, **kwargs)

    for module in (newest, reverts):
        monkeypatch.setattr(module, "open_generation", counting)
    return seen


def same_judgements(table: Table, opened: list[str], oldest: int = 2) -> tuple[dict[int, Judgement], int, int]:
    """The bounded and the unbounded check judge alike; the folders each opened."""
    got = judge(table, Cover, oldest, opened)
    bounded = len(opened)
    want = judge(table, Unbounded, oldest, opened)
    assert got == want
    return got, bounded, len(opened)


def test_an_owners_update_elsewhere_reads_no_newer_generation(make_table: Callable[..., tuple[Table, Any]],
                                                              opened: list[str]) -> None:
    """The owner updates keys no generation holds: at both ages the two oldest are proven by their
    receipts, their keys read once, and no other folder is opened (the unbounded check opened
    every newer one)."""
    counts = []
    for generations in (8, 24):
        table = merged_one_by_one(make_table, generations)
        sid, present = folders(table)
        held = set().union(*keys_of(table, sid, present).values())
        free = sorted(set(range(300)) - held)[:3]
        table.dataset().update({"name": "'owner'"}, where=f"id IN ({', '.join(map(str, free))})")
        judged, bounded, unbounded = same_judgements(table, opened)
        assert sorted(judged) == sorted(present)[:2] and all(j.proven and j.how == "receipt" for j in judged.values())
        counts.append((bounded, unbounded, len(present)))
    (young, young_all, young_present), (old, old_all, old_present) = counts
    assert young == old == 2  # the two judged, their keys read once
    # the unbounded check read every generation on storage: it grew with age
    assert (young_all, old_all) == (young_present, old_present) == (8, 24)


def test_an_owners_update_of_a_key_a_judged_generation_holds_is_the_owners(
        make_table: Callable[..., tuple[Table, Any]], opened: list[str]) -> None:
    """The owner updates a key the oldest generation wrote: it is read back as before, with the
    newer generations beside it (the owner's value stands: proven). The bound's price: the judged
    generations' folders, opened once more (their keys are read once)."""
    table = merged_one_by_one(make_table, 8)
    sid, present = folders(table)
    keys = keys_of(table, sid, present)
    first, second = sorted(present)[:2]
    mine = sorted(set(puts_of(table, sid, present, first).column("id").to_pylist())
                  - set().union(*(k for g, k in keys.items() if g != first)))
    assert mine, "the workload gives the oldest generation a key of its own"
    table.dataset().update({"name": "'owner'"}, where=f"id = {mine[0]}")
    assert table.dataset().to_table(filter=f"id = {mine[0]}").column("name").to_pylist() == ["owner"]
    judged, bounded, unbounded = same_judgements(table, opened)
    assert judged[first].proven and judged[second].proven
    # read back as before: the judged ones' keys read once, their folders opened again for rows
    assert unbounded >= len(present) and unbounded < bounded <= unbounded + 2


def test_an_older_row_merged_again_is_still_a_revert(make_table: Callable[..., tuple[Table, Any]],
                                                     opened: list[str]) -> None:
    """Another compactor merges the oldest generation's row of a key again, over the newer value a
    later generation wrote and memwal merged: that generation is not proven, with the oldest as its
    evidence, bounded or not."""
    table = merged_one_by_one(make_table, 8)
    sid, present = folders(table)
    first = min(present)
    puts = puts_of(table, sid, present, first)
    keys = keys_of(table, sid, present)
    key = min(k for k in puts.column("id").to_pylist() if any(k in keys[g] for g in present if g > first))
    later = max(g for g in present if key in keys[g])
    schema = table.dataset().schema
    row = puts.filter(pc.equal(puts.column("id"), key)).select(schema.names).cast(schema)
    table.dataset().merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(row)
    got = judge(table, Cover, len(present), opened)
    want = judge(table, Unbounded, len(present), opened)
    assert got == want
    assert not got[later].proven and first in got[later].evidence


def test_a_foreign_write_whose_version_before_expired_reads_back_as_before(
        make_table: Callable[..., tuple[Table, Any]], opened: list[str]) -> None:
    """What a commit wrote is found against the version before it: when that version has expired
    (kept by nothing), any key may have been written, and every at-risk generation is read back."""
    table = merged_one_by_one(make_table, 8)
    table.dataset().update({"name": "'owner'"}, where="id = 299")
    foreign = table.dataset().version
    table.dataset().cleanup_old_versions(older_than=timedelta(seconds=0))  # the latest alone stays
    assert [v.version for v in retained_versions(table)] == [foreign]
    judged, bounded, unbounded = same_judgements(table, opened)
    assert all(j.proven for j in judged.values())
    assert bounded == unbounded


def test_more_written_than_the_bound_reads_back_as_before(make_table: Callable[..., tuple[Table, Any]],
                                                          opened: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys written past :data:`WRITTEN_MAX_BYTES` (storage sizes nothing): any key may have been
    written, and every at-risk generation is read back, newer ones beside it."""
    table = merged_one_by_one(make_table, 8)
    table.dataset().update({"name": "'owner'"}, where="id = 299")
    monkeypatch.setattr(cover, "WRITTEN_MAX_BYTES", 1)
    judged, bounded, unbounded = same_judgements(table, opened)
    assert all(j.proven for j in judged.values())
    assert bounded == unbounded >= 8
