"""GC's proof that rows about to leave every reader's view, or storage, are in the base table.

GC asks it before a drain takes merged generations out of the shard manifest, and before it
deletes the folder of a merged generation no manifest lists (whoever drained it). The rule is
:mod:`memwal.merge.cover`'s, the one `memwal verify` checks: the base is the truth for what the
merge mark covers, from the proof point on; a receipt of memwal's own names the generations its
commit applied (no read), anything else is read back against the base at its covering version.
A generation that fails stays listed and on storage, named ``progress-unproven``, for an
operator's ``memwal repair`` (dry run first); GC never writes rows into the base (issue 61: its
automatic repair brought back rows the owner had deleted).

A folder above the recorded progress, merged only by someone else's drain (lance-context's
``cleanup_wal()`` records progress no other way), has no covering version: it goes once the base
at the latest version holds its rows (a drain is a claim, issue 56), and is kept otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import lance

from memwal.errors import first_line
from memwal.history.receipts import Receipt, ReceiptListing, read_receipt
from memwal.merge.cover import READ_ERRORS, Cover, Entry, Judgement
from memwal.merge.model import GenerationRef
from memwal.merge.ops import table_ops
from memwal.merge.proof import prove
from memwal.merge.refs import generation_refs
from memwal.rollup.marker import stands_from
from memwal.table import Table
from memwal.table.retained import RetainedVersion
from memwal.table.schema import primary_key


class Prover(Protocol):
    """What the generations collector asks (see the module docstring)."""

    def judge(self, shard_id: str, entries: Sequence[Entry], present: Mapping[int, str],
              superseding: Sequence[tuple[int, str]] = ()) -> dict[Entry, Judgement]: ...

    def latest(self, shard_id: str, entries: Sequence[tuple[int, str]],
               superseding: Sequence[tuple[int, str]]) -> str | None: ...

    def stands_from(self, shard_id: str, path: str, generation: int) -> int: ...


class GcProof:
    """:class:`Prover` over the table version a GC plan read and its retained versions."""

    def __init__(self, table: Table, version: int, versions: Sequence[RetainedVersion],
                 receipts: ReceiptListing) -> None:
        self.table, self.version, self.versions, self.receipts = table, version, versions, receipts
        self._cover: Cover | None = None
        self._read: dict[str, Receipt | None] = {}

    def cover(self) -> Cover:
        """Opened only when some shard has something to prove."""
        if self._cover is None:
            ds = self.table.dataset(self.version)
            self._ds = ds
            self._cover = Cover(self.table, [v for v in self.versions if v.version <= self.version], self.receipts,
                                self._refs, pk=primary_key(ds.lance_schema),
                                folding=list(table_ops(ds).folding_columns()))
        return self._cover

    def _refs(self, shard_id: str, entries: Sequence[tuple[int, str]]) -> list[GenerationRef]:
        return generation_refs(self.table, self._ds, shard_id, entries)

    def judge(self, shard_id: str, entries: Sequence[Entry], present: Mapping[int, str],
              superseding: Sequence[tuple[int, str]] = ()) -> dict[Entry, Judgement]:
        return self.cover().judge(shard_id, entries, present, superseding) if entries else {}

    def latest(self, shard_id: str, entries: Sequence[tuple[int, str]],
               superseding: Sequence[tuple[int, str]]) -> str | None:
        """None when the base at the plan's version holds ``entries``' rows (``superseding``
        newer, still read), else why not."""
        cover = self.cover()
        try:
            unproven = prove(self._ds, shard_id, self._refs(shard_id, entries), pk=cover.pk, folding=cover.folding,
                             superseding=self._refs(shard_id, superseding),
                             storage_options=self.table.storage_options)
        except READ_ERRORS as exc:
            return f"its rows cannot be read: {first_line(exc, self.table.uri)}"
        return None if unproven is None else unproven.detail

    def receipt(self, key: str) -> Receipt | None:
        """A receipt, read once per plan (the proof's own reads are shared)."""
        if self._cover is not None:
            return self._cover.receipt(key)
        if key not in self._read:
            self._read[key] = read_receipt(self.table.store, key)
        return self._read[key]

    def stands_from(self, shard_id: str, path: str, generation: int) -> int:
        """The lowest generation whose rows a rollup folder holds (:mod:`memwal.rollup.marker`)."""
        return stands_from(self.table.store, shard_id, path, generation)

    @property
    def proven(self) -> list[Receipt]:
        """Receipts of what was read back and proven (the run writes them)."""
        return [] if self._cover is None else list(self._cover.proven)

    @property
    def dataset(self) -> lance.LanceDataset | None:
        return getattr(self, "_ds", None)


__all__ = ["GcProof", "Prover"]
