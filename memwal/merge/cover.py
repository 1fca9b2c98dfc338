"""The spec's reader rule as a proof: what the merge mark covers, the base is the truth for.

Readers that honour the MemWAL index skip every generation at or below ``compacted_sstables``
(lance PR #7655, "Reader Expectations"): from the first version whose mark covers a generation,
the base table *is* that generation's rows, and whatever the table's owner writes on the base
afterwards (pylance's ``ds.delete``/``ds.update``, LanceDB's ``table.delete``/``table.update``)
is the truth for every reader. So a merged generation may leave the listing (and later storage)
when the base holds its effect *at its proof point*, and what later commits did is not asked:

* the **covering version** of generation ``g`` of a shard is the first version, in the run of
  retained versions that ends at the latest, whose mark is ``>= g`` (a ``restore`` that took the
  mark back starts a new run; an expired version before it leaves it the oldest we can see);
* the **proof point** is that version when a receipt of memwal's own names ``g`` there (its
  merge applied ``g``'s rows in that commit, :mod:`memwal.history.receipts`), or when the base at
  that version, read back, holds each of its keys' newest version through the generations the
  version covers; or a later version where memwal's repair applied ``g``, or where an operator
  accepted the base (``memwal repair``). A commit that only *marks* ``g`` proves nothing: a marker
  with one rewritten row covers a range, a receipt names generations (issue 61).

One thing after the proof point is still asked, because it is not the owner's doing: another
compactor that reads the listing, not the mark (lance-context's ``cleanup_wal()``), merging an
older listed generation again over the newer rows memwal merged (issue 54). When a commit after
the proof point that is not memwal's wrote rows (anything but a ``Delete`` or a commit that
changes no row), the base at the latest version is read back too, and a key whose value there is
an *older* generation's version of it has been reverted: the generation stays listed, with the
older folders as its evidence. A value no generation wrote is the owner's.

Only a key such a commit wrote can have been reverted: every other key holds what memwal's own
merges put there, in order. So the generations read back are those holding a key in the
fragments the foreign commits added or gave new data files (:meth:`Cover.written_keys`), and the
newer generations on storage are read only for them. An owner who writes the base now and then
no longer makes each whole GC read every generation the retention keeps (issue 82).
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import DecodeError

from memwal.errors import MemWalError, first_line
from memwal.history.receipts import EVIDENCE, PROVEN, Receipt, ReceiptListing, read_receipt
from memwal.merge.changes import key_mask
from memwal.merge.cover_walks import BackWalk, PrefixMin, Walks
from memwal.merge.model import GenerationRef
from memwal.merge.newest import SLOT, OpenGenerations, bounded_scanner
from memwal.merge.proof import prove
from memwal.merge.reverts import reverted_keys
from memwal.pb import transaction_pb2
from memwal.table import Table
from memwal.table.retained import RetainedVersion

log = logging.getLogger(__name__)

READ_ERRORS = (MemWalError, OSError, ValueError, RuntimeError, pa.ArrowException)

#: Lance operations that cannot put back a value a merge replaced: they change no row, or only
#: remove rows (a key a generation deleted stays deleted; one it wrote, deleted, is the owner's).
_HARMLESS = frozenset({"delete", "create_index", "rewrite", "reserve_fragments", "project", "update_config",
                       "update_mem_wal_state", "clone", "update_bases"})

#: Transactions read at most per proof to tell the owner's commits from memwal's (more: unknown).
MAX_TRANSACTIONS = 256
#: A transaction file larger than this is not read (storage is untrusted input): unknown.
TRANSACTION_MAX_BYTES = 64 << 20
#: Decoded bytes of keys read at most from what the foreign commits after a proof point wrote
#: (more: any key may have been written, and every generation at risk is read back, as before).
WRITTEN_MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class Judgement:
    """Whether one entry's rows are proven, and how: the proof point, or why not."""

    proven: bool
    how: str = ""
    version: int | None = None
    detail: str = ""
    #: Older generations kept as the evidence of a revert (their folders must stay).
    evidence: tuple[int, ...] = ()
    #: The keys the base does not hold as the entry wrote them (key columns, ``__gen``,
    #: ``_tombstone``, ``__how``), when its rows were read back: what ``memwal repair`` shows.
    failing: pa.Table | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Entry:
    """A merged generation (or a rollup standing for ``low``..``generation``) to judge."""

    generation: int
    path: str
    low: int | None = None

    @property
    def first(self) -> int:
        return self.generation if self.low is None else self.low


#: Builds read references for ``(generation, path)`` entries of a shard (paths validated).
Refs = Callable[[str, Sequence[tuple[int, str]]], list[GenerationRef]]


class Cover:
    """The proof of one table at one moment (see the module docstring)."""

    def __init__(self, table: Table, versions: Sequence[RetainedVersion], receipts: ReceiptListing,
                 refs: Refs, *, pk: list[str], folding: Sequence[str] = ()) -> None:
        self.table, self.receipts, self.refs, self.pk, self.folding = table, receipts, refs, pk, list(folding)
        self.main = sorted((v for v in versions if v.branch is None), key=lambda v: v.version)
        self.by_version = {v.version: v for v in self.main}
        self._numbers = [v.version for v in self.main]  # ascending, for bisect
        self._receipts: dict[str, Receipt | None] = {}
        self._txn: dict[int, str | None] = {}
        self._kinds: dict[int, str | None] = {}
        self._datasets: dict[int, lance.LanceDataset] = {}
        self._suffix: dict[str, tuple[int, np.ndarray]] = {}
        # Indexes built once, on first use, so that each generation judged costs O(log n) (issue 82):
        self._walks: Walks | None = None
        self._floors: dict[str, PrefixMin] = {}
        self._back: dict[int, BackWalk] = {}
        #: Versions after ``_foreign_low`` whose commit may have written rows (see foreign_writes).
        self._foreign_low: int | None = None
        self._foreign_neg: list[int] = []  # their numbers negated, ascending (newest first)
        self._written: dict[int, pa.Table | None] = {}  # per foreign write: the keys it wrote
        #: Receipts to write for what was read back and proven (GC's run writes them).
        self.proven: list[Receipt] = []

    # -- where a generation's proof applies ------------------------------------------------

    def covering(self, shard_id: str, g: int) -> tuple[RetainedVersion | None, bool]:
        """The covering version of ``g`` (see the module docstring) and whether it is exact (the
        version before it is retained and does not cover ``g``)."""
        if shard_id not in self._suffix:
            self._suffix[shard_id] = self._suffix_marks(shard_id)
        start, lows = self._suffix[shard_id]
        i = int(np.searchsorted(lows, g, side="left"))  # lows ascend: the first version from which all cover g
        if i >= len(lows):
            return None, False
        at = start + i
        return self.main[at], at > 0 and self.main[at - 1].version == self.main[at].version - 1

    def _suffix_marks(self, shard_id: str) -> tuple[int, np.ndarray]:
        """The contiguous run of versions ending at the latest (its first index), and for each
        version of it the lowest mark from it to the latest (ascending along the run)."""
        start = len(self.main) - 1
        while start > 0 and self.main[start - 1].version == self.main[start].version - 1:
            start -= 1
        marks = np.array([v.compacted.get(shard_id, 0) for v in self.main[start:]], dtype=np.int64)
        return start, np.minimum.accumulate(marks[::-1])[::-1] if len(marks) else marks

    @property
    def oldest(self) -> int | None:
        return self.main[0].version if self.main else None

    def receipt(self, key: str) -> Receipt | None:
        """A receipt of the listing, read at most once."""
        return self._receipt(key)

    def _receipt(self, key: str) -> Receipt | None:
        if key not in self._receipts:
            self._receipts[key] = read_receipt(self.table.store, key)
        return self._receipts[key]

    def transaction_file(self, version: int, *, evidence: bool = True) -> str | None:
        """The transaction file of ``version``'s commit, from its manifest. ``evidence=False`` takes
        the retained-progress digest's name where it stands for the manifest (only to learn what a
        commit did, never to bind a receipt: the digest is a cache anyone who writes storage can
        rewrite)."""
        v = self.by_version.get(version)
        if v is not None and not evidence and v.transaction_file:
            return v.transaction_file
        if version not in self._txn:
            name = v.transaction_file if v is not None and not v.remembered else None
            if name is None and v is not None:
                try:
                    manifest = self.table.manifest(version)
                    name = manifest.transaction_file if manifest.compacted == v.compacted else None
                except READ_ERRORS:
                    name = None
            self._txn[version] = name or None
        return self._txn[version]

    def _valid(self, r: Receipt, cover: RetainedVersion) -> bool:
        """Whether receipt ``r`` stands for a proof point of the generations it names, covered
        from ``cover`` on: at or after the covering version, memwal's commit (or proof) there as its
        transaction file says; or, when the covering version is not exact, at a version expired
        since, which no retained version that does not cover them follows (a receipt from before
        such a version belongs to a history a restore left)."""
        if r.version in self.by_version:
            txn = self.transaction_file(r.version)
            return r.version >= cover.version and txn is not None and txn == r.transaction_file
        return r.version < cover.version

    def receipt_for(self, shard_id: str, g: int) -> int | None:
        """The version of a valid receipt that names ``g`` (None: none does)."""
        cover, exact = self.covering(shard_id, g)
        return None if cover is None else self.receipt_point(shard_id, g, cover, exact)

    def receipt_point(self, shard_id: str, g: int, cover: RetainedVersion, exact: bool) -> int | None:
        """The version of a valid receipt that names ``g``, covered from ``cover`` (None: none does).

        The receipts asked, in order, and the first that names ``g`` and is valid wins: those at
        ``cover``; those after it, oldest first, but never a merge's (a merge applies what is above
        the mark it read: never again later); when ``cover`` is not exact, those at versions expired
        since, newest first, down to the newest retained version before ``cover`` whose mark is
        below ``g`` (a receipt before it belongs to a history that version left). Each step is a
        lookup in an index built once for the proof (:class:`Walks`, :class:`PrefixMin`,
        :class:`BackWalk`), never a pass over every receipt or version: verify asks this for
        every generation on storage, and a pass each cost generations x receipts (issue 82)."""
        for key in self.receipts.evidence_keys(cover.version):
            r = self._receipt(key)
            if r is not None and r.kind in EVIDENCE and r.covers(shard_id, g) and self._valid(r, cover):
                return r.version
        walks = self._walks_index()
        # After ``cover``: a receipt at a version not retained on the main line is never valid
        # there (_valid), so only retained versions with a receipt other than a merge's are walked.
        # The loop returns at the first receipt that names ``g``, which is usually the first.
        for i in range(bisect_right(walks.later, cover.version), len(walks.later)):
            for key in walks.later_keys[walks.later[i]]:
                r = self._receipt(key)
                if r is not None and r.kind in EVIDENCE and r.covers(shard_id, g) and self._valid(r, cover):
                    return r.version
        if exact:
            return None
        # Coverage may have begun at a version expired since (every receipt there is valid: an
        # expired version before ``cover``).
        start = bisect_left(walks.expired, cover.version)
        if start == 0:
            return None  # no receipt at a version expired before ``cover``: the floor is not needed
        floor = self._floor(shard_id, g, cover.version)
        back = self._back.get(start)
        if back is None:
            back = self._back[start] = BackWalk(walks, start, self._receipt)
        return back.point(shard_id, g, floor)

    def _walks_index(self) -> Walks:
        if self._walks is None:
            self._walks = Walks.build(self.receipts, self.by_version)
        return self._walks

    def _floor(self, shard_id: str, g: int, before: int) -> int:
        """The newest main-line version before ``before`` whose mark for the shard is below ``g``
        (0: none). Marks are not monotone in the version (a ``restore`` commits an older manifest
        again), so it is a search in a range-minimum tree over the marks, built once per shard."""
        tree = self._floors.get(shard_id)
        if tree is None:
            tree = self._floors[shard_id] = PrefixMin([v.compacted.get(shard_id, 0) for v in self.main])
        i = tree.last_below(bisect_left(self._numbers, before), g)
        return 0 if i < 0 else self.main[i].version

    # -- commits after the proof point ------------------------------------------------------

    def commit_kind(self, version: int) -> str | None:
        """The Lance operation of ``version``'s commit (from its transaction file), None unknown."""
        if version not in self._kinds:
            self._kinds[version] = self._read_kind(version) if len(self._kinds) < MAX_TRANSACTIONS else None
        return self._kinds[version]

    def _read_kind(self, version: int) -> str | None:
        name = self.transaction_file(version, evidence=False)
        if not name or "/" in name or name.startswith("."):
            return None
        try:
            txn = transaction_pb2.Transaction.FromString(
                self.table.store.get(f"_transactions/{name}", max_bytes=TRANSACTION_MAX_BYTES))
        except (MemWalError, OSError, DecodeError):
            return None
        op: str | None = txn.WhichOneof("operation")
        return op

    def foreign_writes(self, after: int) -> list[int]:
        """Versions after ``after`` whose commit is not memwal's and may have written rows."""
        n = self._foreign_count(after)
        return [-v for v in reversed(self._foreign_neg[:n])]

    def _foreign_count(self, after: int) -> int:
        """How many versions after ``after`` are foreign writes (see :meth:`foreign_writes`).

        Each version's commit is asked once per proof, not once per entry judged (a pass over every
        version per entry cost entries x versions, issue 82), and in the order a pass from each
        ``after`` in turn would ask: only :data:`MAX_TRANSACTIONS` commits are read, so that order
        decides which versions are read and which are unknown."""
        low = self._foreign_low
        if low is None or after < low:
            lo = bisect_right(self._numbers, after)
            hi = len(self._numbers) if low is None else bisect_right(self._numbers, low)
            found = [v.version for v in self.main[lo:hi]
                     if not self.receipts.ours(v.version) and self.commit_kind(v.version) not in _HARMLESS]
            self._foreign_neg.extend(-v for v in reversed(found))
            self._foreign_low = after
        return bisect_left(self._foreign_neg, -after)

    def written_keys(self, after: int) -> pa.Table | None:
        """The key columns of the rows the foreign writes after ``after`` put in the base: the rows
        of each one's fragments that the version before it did not hold with the same data files (a
        row elsewhere holds what it held before that commit: a deletion file only hides rows).
        None: any key may have been written (more than :data:`MAX_TRANSACTIONS` such commits, the
        version before one is not retained, a version cannot be read, or keys of more than
        :data:`WRITTEN_MAX_BYTES`)."""
        versions = self.foreign_writes(after)
        if len(versions) > MAX_TRANSACTIONS:
            return None
        parts, size = [], 0
        for version in versions:
            if version not in self._written:
                self._written[version] = self._written_by(version)
            t = self._written[version]
            if t is None or (size := size + t.nbytes) > WRITTEN_MAX_BYTES:
                return None
            parts.append(t)
        try:
            return pa.concat_tables(parts, promote_options="permissive") if parts else None
        except pa.ArrowException:
            return None

    def _written_by(self, version: int) -> pa.Table | None:
        """The keys of the rows ``version``'s commit wrote (see :meth:`written_keys`)."""
        if version - 1 not in self.by_version:
            return None
        try:
            before = {_identity(f) for f in self.table.dataset(version - 1).get_fragments()}
            ds = self.table.dataset(version)
            added = [f for f in ds.get_fragments() if _identity(f) not in before]
            batches, size = [], 0
            for batch in bounded_scanner(ds, self.pk, fragments=added).to_batches() if added else ():
                if (size := size + batch.nbytes) > WRITTEN_MAX_BYTES:
                    return None  # counted as read: the fragments' own row counts are storage's word
                batches.append(batch)
            schema = pa.schema([ds.schema.field(k) for k in self.pk])
            return pa.Table.from_batches(batches, schema) if batches else schema.empty_table()
        except READ_ERRORS:
            return None

    def _holding_written(self, shard_id: str, at_risk: list[Entry], judged: Mapping[Entry, Judgement]
                         ) -> tuple[list[Entry], dict[str, pa.Table]]:
        """The entries of ``at_risk`` holding a key a foreign write after their proof points wrote
        (:meth:`written_keys`): only those can have been reverted. All of them when the keys
        written are not known, or cannot be matched against the entries' own. And the key
        columns read, by folder (the check reads none of them again)."""
        written = self.written_keys(min(judged[e].version or 0 for e in at_risk))
        if written is None:
            return at_risk, {}
        if not written.num_rows:
            return [], {}
        try:
            refs = self.refs(shard_id, [(e.generation, e.path) for e in at_risk])
            gens = OpenGenerations(refs, self.pk, self.table.storage_options)
            keys = gens.keys(range(len(refs)))
            hit = key_mask(keys.select(self.pk), written.select(self.pk), self.pk)
        except READ_ERRORS:
            return at_risk, {}
        slots = set(keys.column(SLOT).to_numpy()[hit].tolist())
        return [e for slot, e in enumerate(at_risk) if slot in slots], gens.split(keys)

    # -- judging ---------------------------------------------------------------------------

    def judge(self, shard_id: str, entries: Sequence[Entry], present: Mapping[int, str],
              superseding: Sequence[tuple[int, str]] = ()) -> dict[Entry, Judgement]:
        """Each entry's judgement. ``present``: every generation of the shard on storage (number ->
        folder), for the reads back; ``superseding``: entries still listed above these (their keys
        are theirs whatever the base says, for the revert check)."""
        out: dict[Entry, Judgement] = {}
        points: dict[Entry, tuple[RetainedVersion, bool]] = {}
        for e in entries:
            cover, exact = self.covering(shard_id, e.generation)
            if cover is None:
                out[e] = Judgement(False, detail=f"generation {e.generation}: no retained version records it merged")
                continue
            points[e] = (cover, exact)
            receipted: list[int] = []
            for g in range(e.first, e.generation + 1):
                p = self.receipt_for(shard_id, g)
                if p is None:
                    break  # one generation unnamed: the entry is read back, the others need not be asked
                receipted.append(p)
            else:
                out[e] = Judgement(True, "receipt", max(receipted))
        groups: dict[int, list[Entry]] = {}
        for e in entries:
            if e not in out and e in points:
                groups.setdefault(points[e][0].version, []).append(e)
        on_storage = sorted(present) if groups else []  # once, not a pass over ``present`` per group
        for version, group in sorted(groups.items()):
            out.update(self._read_back(shard_id, version, group, present, on_storage))
        return self._reverts(shard_id, out, present, superseding)

    def _dataset(self, version: int) -> lance.LanceDataset:
        if version not in self._datasets:
            self._datasets[version] = self.table.dataset(version)
        return self._datasets[version]

    def _read_back(self, shard_id: str, version: int, group: list[Entry], present: Mapping[int, str],
                   on_storage: Sequence[int]) -> dict[Entry, Judgement]:
        """Prove ``group`` (entries covered from ``version``) by reading them back against the base
        at ``version``, with every other generation on storage that ``version`` covers as theirs
        (``on_storage``: ``present``'s generations ascending, to find those in a range by bisection)."""
        v = self.by_version[version]
        mark = v.compacted.get(shard_id, 0)
        asked = {e.generation: e.path for e in group}
        low = min(e.first for e in group)
        others = {g: present[g] for g in on_storage[bisect_left(on_storage, low):bisect_right(on_storage, mark)]
                  if g not in asked}
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

    def _reverts(self, shard_id: str, judged: dict[Entry, Judgement], present: Mapping[int, str],
                 superseding: Sequence[tuple[int, str]]) -> dict[Entry, Judgement]:
        """Proven entries another compactor may have reverted since (see the module docstring)."""
        at_risk = [e for e, j in judged.items() if j.proven and j.version is not None
                   and self._foreign_count(j.version)]
        if not at_risk or not self.main:
            return judged
        at_risk, known = self._holding_written(shard_id, at_risk, judged)
        if not at_risk:
            return judged
        latest = self.main[-1].version
        try:
            refs = self.refs(shard_id, [(e.generation, e.path) for e in sorted(at_risk, key=lambda e: e.generation)])
            # every newer generation on storage or listed: a key one of them holds is its (readers
            # read it, or the base holds its merge)
            mine = {e.generation for e in at_risk}
            low = min(mine)
            later = {g: p for g, p in present.items() if g > low and g not in mine}
            later.update({g: p for g, p in superseding if g > low and g not in mine})
            newer = self.refs(shard_id, sorted(later.items()))
            ds = self._dataset(latest)
            unproven = prove(ds, shard_id, refs, pk=self.pk, folding=self.folding, superseding=newer,
                             storage_options=self.table.storage_options, known=known)
            if unproven is None:
                return judged
            older = {g: p for g, p in present.items() if g < max(unproven.generations)}
            compared = [c for c in ds.schema.names if c not in self.pk and c not in self.folding]
            reverted, evidence = reverted_keys(self.table, shard_id, ds, unproven,
                                               self.refs(shard_id, sorted(older.items())), compared,
                                               gens_by_number={r.generation: r for r in refs})
        except READ_ERRORS as exc:
            log.warning("%s: shard %s: a commit since its merge not memwal's, and the latest rows cannot be read "
                        "back (%s): judged at the proof point", self.table.uri, shard_id, first_line(exc))
            return judged
        if not reverted:
            return judged
        out = dict(judged)
        writers = ", ".join(map(str, self.foreign_writes(min(j.version or 0 for j in judged.values()))))
        for e in at_risk:
            if any(e.first <= g <= e.generation for g in reverted):
                keys = [k for g, ks in reverted.items() if e.first <= g <= e.generation for k in ks]
                out[e] = Judgement(False, detail=(
                    f"generation {e.generation}: a commit since its merge that is not memwal's (version {writers}) "
                    f"put back an older generation's values of {len(keys)} of its keys (another compactor merged "
                    "older rows again); the base at the latest version no longer holds it"),
                    evidence=tuple(sorted(evidence)), failing=_within(unproven.failing, e, keys))
        return out


def _identity(fragment: lance.LanceFragment) -> tuple[int, tuple[str, ...]]:
    """A fragment as far as its rows' values go: its id and its data files."""
    return fragment.fragment_id, tuple(f.path for f in fragment.metadata.files)


def _within(failing: pa.Table, e: Entry, keys: Sequence[object] | None = None) -> pa.Table:
    """The failing keys whose newest version is within ``e`` (and among ``keys``, when given)."""
    gens = failing.column("__gen").to_numpy()
    mine = failing.filter(pa.array((gens >= e.first) & (gens <= e.generation)))
    if keys is not None:
        mine = mine.filter(pc.is_in(mine.column(0), value_set=pa.array(list(keys), mine.schema.field(0).type)))
    return mine


__all__ = ["MAX_TRANSACTIONS", "READ_ERRORS", "WRITTEN_MAX_BYTES", "Cover", "Entry", "Judgement"]

