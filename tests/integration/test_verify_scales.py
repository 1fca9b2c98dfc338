"""`memwal verify` at most linear in what it checks, with the same answers (issue 82, item 2).

The proof verify runs (:mod:`memwal.merge.cover`) asks, for every merged generation on storage,
which receipt names it at its proof point. It used to sort every receipt, and pass over every
receipt and every version, once per generation asked: 71 s of CPU at 8,000 versions. Now each
ask is a lookup in indexes built once per proof. Here:

* the answers are those of the plain passes (:class:`NaiveCover`, the code before issue 82, kept
  as the reference): on a table merged one generation at a time, with a ``restore`` that committed
  an older manifest (progress is not monotone), generations merged again after it, expired
  versions whose receipts stay, the owner's writes, lost receipts and planted ones (overlapping
  spans, a merge's receipt under an unusual name, one bound to no commit); and on random
  histories, every covering version asked, in random order (the indexes keep state across asks);
* the work (receipt-listing entries and version marks looked at, receipts examined) per
  generation judged does not grow with the table's age, on a real table's verify and on a
  synthetic history ten times longer. Work is counted, never timed.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest

import memwal
from memwal.demo import Workload
from memwal.errors import NotFoundError, first_line
from memwal.history.receipts import (
    ACCEPT,
    COMMIT,
    EVIDENCE,
    MERGE,
    PROVEN,
    RECEIPTS_DIR,
    REPAIR,
    Receipt,
    ReceiptListing,
    list_receipts,
    write_receipt,
)
from memwal.inspect import merged
from memwal.merge import cover as cover_module
from memwal.merge.cover import _HARMLESS, READ_ERRORS, Cover, Entry, Judgement, _within
from memwal.merge.proof import prove
from memwal.table import Table, open_table
from memwal.table.retained import RetainedVersion, retained_versions

# --------------------------------------------------------------------------- the reference


class NaiveCover(Cover):
    """:class:`Cover` as it was before issue 82: a pass over every receipt and version per ask."""

    def receipt_point(self, shard_id: str, g: int, cover: RetainedVersion, exact: bool) -> int | None:
        by_version = self.receipts.by_version
        evidence = sorted(v for v, items in by_version.items() if any(k in EVIDENCE for k, _ in items))
        later = [v for v in evidence if v > cover.version]
        before: list[int] = []
        if not exact:
            floor = max((v.version for v in self.main if v.version < cover.version
                         and v.compacted.get(shard_id, 0) < g), default=0)
            before = [v for v in evidence if floor < v < cover.version and v not in self.by_version]
        for version in [cover.version, *later, *reversed(before)]:
            for key in [key for kind, key in by_version.get(version, ()) if kind in EVIDENCE]:
                if version > cover.version and f"-{MERGE}." in key:
                    continue
                r = self._receipt(key)
                if r is not None and r.kind in EVIDENCE and r.covers(shard_id, g) and self._valid(r, cover):
                    return r.version
        return None

    def foreign_writes(self, after: int) -> list[int]:
        out = []
        for v in self.main:
            if v.version <= after or self.receipts.ours(v.version):
                continue
            if self.commit_kind(v.version) not in _HARMLESS:
                out.append(v.version)
        return out

    def _foreign_count(self, after: int) -> int:
        return len(self.foreign_writes(after))

    def judge(self, shard_id: str, entries: Sequence[Entry], present: Mapping[int, str],
              superseding: Sequence[tuple[int, str]] = ()) -> dict[Entry, Judgement]:
        out: dict[Entry, Judgement] = {}
        points: dict[Entry, tuple[RetainedVersion, bool]] = {}
        for e in entries:
            cover, exact = self.covering(shard_id, e.generation)
            if cover is None:
                out[e] = Judgement(False, detail=f"generation {e.generation}: no retained version records it merged")
                continue
            points[e] = (cover, exact)
            receipted = [self.receipt_for(shard_id, g) for g in range(e.first, e.generation + 1)]
            if all(p is not None for p in receipted):
                out[e] = Judgement(True, "receipt", max(p for p in receipted if p is not None))
        groups: dict[int, list[Entry]] = {}
        for e in entries:
            if e not in out and e in points:
                groups.setdefault(points[e][0].version, []).append(e)
        for version, group in sorted(groups.items()):
            out.update(self._read_back(shard_id, version, group, present, ()))
        return self._reverts(shard_id, out, present, superseding)

    def _read_back(self, shard_id: str, version: int, group: list[Entry], present: Mapping[int, str],
                   on_storage: Sequence[int]) -> dict[Entry, Judgement]:
        v = self.by_version[version]
        mark = v.compacted.get(shard_id, 0)
        asked = {e.generation: e.path for e in group}
        low = min(e.first for e in group)
        others = {g: p for g, p in present.items() if low <= g <= mark and g not in asked}
        try:
            entries = sorted({**others, **asked}.items())
            refs = self.refs(shard_id, entries)
            unproven = prove(self._dataset(version), shard_id, refs, pk=self.pk, folding=self.folding,
                             storage_options=self.table.storage_options)
        except READ_ERRORS as exc:
            why = f"its rows cannot be read back: {first_line(exc, self.table.uri)}"
            return {e: Judgement(False, detail=why) for e in group}
        failed = unproven.generations if unproven is not None else set()
        out = {}
        for e in group:
            if unproven is not None and any(e.first <= g <= e.generation for g in failed):
                out[e] = Judgement(False, detail="the base at the version whose mark first covers it does not hold "
                                                 f"it: {unproven.detail_for(e.first, e.generation)}",
                                   failing=_within(unproven.failing, e))
            else:
                out[e] = Judgement(True, "read back", version)
        proven = [e for e in group if out[e].proven]
        if proven:
            self.proven.append(Receipt(version, PROVEN, {shard_id: (min(e.first for e in proven),
                                                                  max(e.generation for e in proven))},
                                       transaction_file=self.transaction_file(version)))
        return out


def assert_same_points(new: Cover, naive: Cover, shards: Sequence[str], top: int, seed: int) -> list[tuple[int, int]]:
    """Every (shard, generation, covering version, exact) asked of both, in one random order;
    the (covering version, answer) pairs found, to show which walks the history exercised."""
    asks = [(s, g, v, exact) for s in shards for g in range(0, top + 2) for v in new.main for exact in (True, False)]
    random.Random(seed).shuffle(asks)
    found = []
    for s, g, v, exact in asks:
        got, want = new.receipt_point(s, g, v, exact), naive.receipt_point(s, g, v, exact)
        assert got == want, (s, g, v.version, exact)
        if got is not None:
            found.append((v.version, got))
    for s in shards:
        for g in range(0, top + 2):
            assert new.covering(s, g) == naive.covering(s, g)
            assert new.receipt_for(s, g) == naive.receipt_for(s, g), (s, g)
    return found


# --------------------------------------------------------------------------- a real history


HISTORY = Workload(base_rows=120, shards=2, generations=13, rows_per_generation=5, seed=82)


def merge_one(table: Table, times: int) -> None:
    for _ in range(times):
        assert memwal.open(table.uri).merge(max_generations=1).ok


def plant(table: Table, name: str, doc: dict[str, Any]) -> None:
    """A receipt as anyone who writes the table's storage can write one."""
    table.store.put(f"{RECEIPTS_DIR}/{name}", json.dumps(doc).encode())


@pytest.fixture
def history(make_table: Callable[..., tuple[Table, Any]]) -> Iterator[Table]:
    """Merged one generation at a time; a ``restore`` of an older version, then its generations
    merged again; the owner's writes; most versions expired (their receipts kept), two kept by
    tags; receipts lost and planted."""
    table, _model = make_table(HISTORY)
    merge_one(table, 3)
    older = table.dataset().version  # progress 3
    merge_one(table, 4)
    b = table.dataset().version  # progress 7
    table.dataset(older).restore()
    r = table.dataset().version  # progress 3 again: an older manifest committed anew
    merge_one(table, 6)  # 4..7 merged again, then 8, 9
    table.dataset().update({"name": "'owner'"}, where="id % 7 = 0")  # the owner's: a foreign write
    merge_one(table, 2)
    mid = table.dataset().version
    for tag, v in (("b", b), ("r", r), ("mid", mid)):
        table.dataset().tags.create(tag, v)
    table.dataset().cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)
    for tag in ("b", "r", "mid"):
        table.dataset().tags.delete(tag)
    merge_one(table, 2)
    ds = table.dataset()
    ds.update_config({"test.commit": "1"})  # not memwal's, changes no row
    table = open_table(table.uri)
    shards = sorted(table.manifest().compacted)
    latest = table.manifest().version
    receipts = Path(table.uri, RECEIPTS_DIR)
    merges = sorted(p for p in receipts.iterdir() if p.name.endswith(f"-{MERGE}.json"))
    for p in merges[4::5]:  # some merges' receipts lost: their generations are read back
        p.unlink()
    retained = {v.version for v in retained_versions(table)}
    expired = sorted(int(p.name[:20]) for p in receipts.iterdir() if int(p.name[:20]) not in retained)
    assert expired and max(expired) > min(retained)  # receipts of expired versions between retained ones
    a, z = shards

    def txn(version: int) -> str | None:
        return table.manifest(version).transaction_file

    # overlapping spans, at retained and expired versions, bound to their commit and not
    write_receipt(table.store, Receipt(mid, PROVEN, {a: (1, 6), z: (2, 3)}, transaction_file=txn(mid)))
    write_receipt(table.store, Receipt(mid, ACCEPT, {a: (1, 12)}, transaction_file=None))  # bound to nothing
    write_receipt(table.store, Receipt(expired[-1], ACCEPT, {a: (2, 3), z: (1, 2)}))
    write_receipt(table.store, Receipt(expired[len(expired) // 2], PROVEN, {a: (5, 5)}))
    write_receipt(table.store, Receipt(expired[1], REPAIR, {z: (4, 5)}, transaction_file="nothing.txn"))
    write_receipt(table.store, Receipt(latest, ACCEPT, {a: (11, 11), z: (13, 13)}, transaction_file=txn(latest)))
    # a merge's receipt under a name a merge never writes (the walk after the covering version
    # skips merges by their name: this one is asked), and one whose name lies about its version
    plant(table, f"{latest - 1:020d}-{MERGE}-0000abcd.json",
          {"version": latest - 1, "kind": MERGE, "applied": {z: [10, 11]}, "data": [],
           "transaction_file": txn(latest - 1)})
    plant(table, f"{latest - 2:020d}-{PROVEN}-0000abce.json",
          {"version": latest - 3, "kind": PROVEN, "applied": {a: [1, 13]}, "data": []})
    yield table


def test_every_receipt_point_is_the_plain_passes_answer(history: Table) -> None:
    """Every generation (and one past the last) of both shards, from every retained version as its
    covering version, exact or not: the answers of the plain passes, in two orders; the walks after
    and before a covering version, and the receipt at it, each give some of them."""
    table = history
    versions = retained_versions(table)
    listing = list_receipts(table.store)
    shards = sorted(table.manifest().compacted)
    new = Cover(table, versions, listing, lambda s, e: [], pk=["id"])
    naive = NaiveCover(table, versions, list_receipts(table.store), lambda s, e: [], pk=["id"])
    marks = [v.compacted.get(shards[0], 0) for v in new.main]
    assert marks != sorted(marks)  # the restore: progress is not monotone
    found = assert_same_points(new, naive, shards, HISTORY.generations, seed=1)
    assert any(p < v for v, p in found) and any(p > v for v, p in found) and any(p == v for v, p in found)
    # a second proof asked in another order gives the same answers again
    assert_same_points(Cover(table, versions, listing, lambda s, e: [], pk=["id"]), naive, shards,
                       HISTORY.generations, seed=2)


def test_foreign_writes_ask_the_same_commits_in_the_same_order(history: Table,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Only MAX_TRANSACTIONS commits are read per proof, the rest unknown (a foreign write): which
    are read depends on the order asked, and it is the plain passes' order."""
    table = history
    versions = retained_versions(table)
    numbers = [v.version for v in versions] + [0]
    for budget, seed in ((256, 0), (2, 1), (3, 2), (1, 3)):
        monkeypatch.setattr(cover_module, "MAX_TRANSACTIONS", budget)
        new = Cover(table, versions, list_receipts(table.store), lambda s, e: [], pk=["id"])
        naive = NaiveCover(table, versions, list_receipts(table.store), lambda s, e: [], pk=["id"])
        asks = numbers * 2
        random.Random(seed).shuffle(asks)
        for after in asks:
            assert new.foreign_writes(after) == naive.foreign_writes(after), (budget, after)
            assert bool(new._foreign_count(after)) == bool(naive.foreign_writes(after))
        assert new._kinds == naive._kinds
        assert new.foreign_writes(0)  # the owner's update, at least


class Recording(Cover):
    judged: list[tuple[str, list[Entry], dict[Entry, Judgement]]]

    def judge(self, shard_id: str, entries: Sequence[Entry], present: Mapping[int, str],
              superseding: Sequence[tuple[int, str]] = ()) -> dict[Entry, Judgement]:
        out = super().judge(shard_id, entries, present, superseding)
        type(self).judged.append((shard_id, list(entries), out))
        return out


def test_verify_judges_every_generation_as_the_plain_passes_did(history: Table,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """verify's proof of merged data (reads back included: lost receipts, the owner's update after
    the proof points) judges each generation as before, with the same receipts of what it read."""
    table = history
    results = []
    for base in (Cover, NaiveCover):
        recording: type[Recording] = type("Recording", (Recording, base), {"judged": []})
        made: list[Cover] = []

        def make(*args: Any, _kind: type[Recording] = recording, _made: list[Cover] = made, **kwargs: Any) -> Cover:
            _made.append(_kind(*args, **kwargs))
            return _made[-1]

        monkeypatch.setattr(merged, "Cover", make)
        unproven = merged.unproven_merges(table, table.manifest(), _states(table))
        results.append((unproven, recording.judged, [r for c in made for r in c.proven]))
    (new_unproven, new_judged, new_proven), (old_unproven, old_judged, old_proven) = results
    assert new_unproven == old_unproven and new_proven == old_proven
    assert [(s, e) for s, e, _ in new_judged] == [(s, e) for s, e, _ in old_judged]
    for (_, _, got), (_, _, want) in zip(new_judged, old_judged, strict=True):
        assert got == want
    hows = {j.how for _, _, out in new_judged for j in out.values()}
    assert {"receipt", "read back"} <= hows and new_proven  # both ways proven: the scenario asks both


def _states(table: Table) -> dict[str, Any]:
    from memwal.table.shards import read_shard_manifests

    return dict(read_shard_manifests(table.store).states)


# --------------------------------------------------------------------------- random histories


class _Store:
    """No storage: a synthetic proof's commits have no transaction files (each unknown: foreign)."""

    uri = "memory://synthetic"

    def get(self, key: str, max_bytes: int | None = None) -> bytes:
        raise NotFoundError(key)


@dataclass
class _Table:
    """What a proof asks of its table when every generation has a receipt or reads back nothing."""

    store: _Store = field(default_factory=_Store)
    uri: str = "memory://synthetic"
    storage_options: dict[str, str] | None = None

    def dataset(self, version: int | None = None) -> Any:
        raise OSError("a synthetic table has no rows")


class Synthetic(Cover):
    """A proof whose receipts are held in memory (``_receipt`` is where a proof reads them)."""

    held: Mapping[str, Receipt | None]
    examined: int = 0

    def _receipt(self, key: str) -> Receipt | None:
        self.examined += 1
        return self.held.get(key)


class SyntheticNaive(Synthetic, NaiveCover):
    pass


def random_history(rng: random.Random, shards: Sequence[str]) -> tuple[list[RetainedVersion], dict[str, Receipt]]:
    """Versions with marks that restores take back, merges' receipts (bound to their commit or
    not), proofs and acceptances over random ranges, and gaps of expired versions."""
    versions: list[RetainedVersion] = []
    held: dict[str, Receipt] = {}
    marks = {s: 0 for s in shards}
    history: list[dict[str, int]] = []
    for version in range(1, rng.randint(20, 70)):
        kind = rng.random()
        if kind < 0.1 and history:
            marks = dict(rng.choice(history))  # a restore
        elif kind < 0.7:
            s = rng.choice(list(shards))
            first = marks[s] + 1
            marks = {**marks, s: marks[s] + rng.randint(1, 3)}
            txn = f"{version}.txn" if rng.random() < 0.9 else "other.txn"
            key = f"{RECEIPTS_DIR}/{version:020d}-{MERGE}{'' if rng.random() < 0.9 else '-0000abcd'}.json"
            held[key] = Receipt(version, MERGE, {s: (first, marks[s])}, transaction_file=txn)
        if rng.random() < 0.2:
            kind_ = rng.choice([PROVEN, ACCEPT, REPAIR])
            low = rng.randint(1, 12)
            spans = {s: (low, low + rng.randint(0, 6)) for s in shards if rng.random() < 0.7}
            held[f"{RECEIPTS_DIR}/{version:020d}-{kind_}-{rng.getrandbits(32):08x}.json"] = Receipt(
                version, kind_, spans, transaction_file=rng.choice([f"{version}.txn", None]))
        if rng.random() < 0.15:
            held[f"{RECEIPTS_DIR}/{version:020d}-{COMMIT}.json"] = Receipt(version, COMMIT)
        history.append(marks)
        versions.append(RetainedVersion(version, None, 0.0, marks, f"_versions/{version}.manifest", "e",
                                        transaction_file=f"{version}.txn"))
    # expire some stretches, keep the latest
    kept = [v for v in versions[:-1] if rng.random() < 0.6] + versions[-1:]
    return kept, held


def listing_of(held: Mapping[str, Receipt]) -> ReceiptListing:
    found: dict[int, list[tuple[str, str]]] = {}
    for key, r in held.items():
        found.setdefault(r.version, []).append((r.kind, key))
    return ReceiptListing({v: tuple(sorted(items)) for v, items in found.items()})


@pytest.mark.parametrize("seed", range(12))
def test_random_histories_give_the_plain_passes_answers(seed: int) -> None:
    """Restores, stretches of expired versions, receipts over overlapping ranges (bound to their
    commit or not, a merge's under another name): the plain passes' answers, asked in random order."""
    rng = random.Random(seed)
    shards = ["a", "b"]
    versions, held = random_history(rng, shards)
    table = cast(Table, _Table())

    def cover(kind: type[Synthetic]) -> Synthetic:
        c = kind(table, versions, listing_of(held), lambda s, e: [], pk=["id"])
        c.held = held
        return c

    top = max(hi for r in held.values() for _, hi in r.applied.values()) if held else 1
    assert_same_points(cover(Synthetic), cover(SyntheticNaive), shards, top, seed)


# --------------------------------------------------------------------------- work at two ages


class CountingMapping(Mapping[int, tuple[tuple[str, str], ...]]):
    """The receipt listing's entries, each look counted."""

    def __init__(self, data: Mapping[int, tuple[tuple[str, str], ...]], counter: list[int]) -> None:
        self.data, self.counter = dict(data), counter

    def __getitem__(self, key: int) -> tuple[tuple[str, str], ...]:
        self.counter[0] += 1
        return self.data[key]

    def __iter__(self) -> Iterator[int]:
        for key in self.data:
            self.counter[0] += 1
            yield key

    def __len__(self) -> int:
        return len(self.data)


class CountingMarks(dict[str, int]):
    """A version's marks, each look counted."""

    counter: list[int]

    def get(self, key: str, default: Any = None) -> Any:
        self.counter[0] += 1
        return super().get(key, default)


def synthetic_age(merges: int, counter: list[int]) -> tuple[Synthetic, dict[str, list[Entry]]]:
    """A history of ``merges`` merges of one generation of each of two shards, a commit of ours
    before each (a delete pass); the owner's write every 50 versions; a restore a third of the way
    in, then its generations merged again; one receipt in ten lost; the oldest 40% of versions
    expired (receipts kept). Every merged generation is on storage, as verify finds it."""
    shards = ("a", "b")
    versions: list[RetainedVersion] = []
    held: dict[str, Receipt] = {}
    marks: dict[str, int] = {s: 0 for s in shards}
    history: list[dict[str, int]] = []
    version = 0

    def commit(new_marks: dict[str, int]) -> int:
        nonlocal version
        version += 1
        m = CountingMarks(new_marks)
        m.counter = counter
        history.append(dict(new_marks))
        versions.append(RetainedVersion(version, None, 0.0, m, f"_versions/{version}.manifest", "e",
                                        transaction_file=f"{version}.txn"))
        return version

    for i in range(merges):
        if i == merges // 3:
            commit(dict(history[len(history) // 2]))  # a restore: an older manifest committed anew
            marks = dict(history[-1])
        v = commit(marks)
        held[f"{RECEIPTS_DIR}/{v:020d}-{COMMIT}.json"] = Receipt(v, COMMIT)
        marks = {s: g + 1 for s, g in marks.items()}
        v = commit(marks)
        if i % 10 != 9:
            held[f"{RECEIPTS_DIR}/{v:020d}-{MERGE}.json"] = Receipt(
                v, MERGE, {s: (g, g) for s, g in marks.items()}, transaction_file=f"{v}.txn")
        if i % 25 == 24:
            commit(marks)  # the owner's: no receipt, a foreign write
    expired = int(len(versions) * 0.4)
    listing = listing_of(held)
    counted = ReceiptListing(CountingMapping(listing.by_version, counter))
    c = Synthetic(cast(Table, _Table()), versions[expired:], counted, lambda s, e: [], pk=["id"])
    c.held = held
    entries = {s: [Entry(g, f"g{g}") for g in range(1, marks[s] + 1)] for s in shards}
    return c, entries


def work_of_judging(merges: int) -> tuple[int, int]:
    """The work verify's proof does judging every generation of a synthetic history: entries of the
    receipt listing and version marks looked at, and receipts examined; and how many generations."""
    counter = [0]
    c, entries = synthetic_age(merges, counter)
    generations = 0
    for s, es in entries.items():
        out = c.judge(s, es, {e.generation: e.path for e in es})
        assert len(out) == len(es)
        assert sum(j.proven for j in out.values()) > 0.8 * len(es)
        generations += len(es)
    return counter[0] + c.examined, generations


def test_work_per_generation_judged_does_not_grow_with_age() -> None:
    """At 150 and 1,500 merges: the work is at most the ratio of the generations times the work
    at the younger age, plus a constant (the plain passes did about generations x versions: a
    hundred times more at ten times the age)."""
    small, g_small = work_of_judging(150)
    large, g_large = work_of_judging(1500)
    ratio = g_large / g_small
    assert ratio == pytest.approx(10, rel=0.05)
    assert large <= 1.2 * ratio * small + 1000, (small, large)


def test_a_real_verify_does_not_grow_with_age(make_table: Callable[..., tuple[Table, Any]], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A table copied at 6 and 24 merges, the owner's write once, most versions expired: the work of
    verify's proof of merged data per generation on storage does not grow."""
    counter = [0]
    examined = [0]
    real_receipt = Cover._receipt

    def counted_receipt(self: Cover, key: str) -> Receipt | None:
        examined[0] += 1
        return real_receipt(self, key)

    real_list = merged.list_receipts

    def counted_list(store: Any) -> ReceiptListing:
        return ReceiptListing(CountingMapping(real_list(store).by_version, counter))

    real_retained = merged.retained_versions

    def counted_retained(table: Table) -> list[RetainedVersion]:
        out = []
        for v in real_retained(table):
            m = CountingMarks(v.compacted)
            m.counter = counter
            out.append(replace(v, compacted=m))
        return out

    monkeypatch.setattr(Cover, "_receipt", counted_receipt)
    monkeypatch.setattr(merged, "list_receipts", counted_list)
    monkeypatch.setattr(merged, "retained_versions", counted_retained)

    table, _ = make_table(Workload(base_rows=60, shards=1, generations=24, rows_per_generation=3, seed=7))
    merge_one(table, 2)
    table.dataset().update({"name": "'owner'"}, where="id % 5 = 0")
    works = []
    for merges in (4, 18):
        merge_one(table, merges)
        copy = tmp_path / f"at-{merges}"
        shutil.copytree(table.uri, copy)
        aged = open_table(str(copy))
        ds = aged.dataset()
        ds.tags.create("keep", ds.version - 2 * (merges // 3))
        ds.cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)
        counter[0] = examined[0] = 0
        unproven = merged.unproven_merges(aged, aged.manifest(), _states(aged))
        assert unproven == []
        generations = aged.manifest().compacted_generation(next(iter(aged.manifest().compacted)))
        works.append((counter[0] + examined[0], generations))
    (small, g_small), (large, g_large) = works
    assert (g_small, g_large) == (6, 24)
    assert large <= 1.2 * (g_large / g_small) * small + 50, works
