"""Receipts: what memwal's own commits did, the evidence GC's proof reads before any copy goes.

Merge progress (``compacted_sstables``) is a claim anyone can commit: pylance's public
``merge_insert(...).mark_sstables_as_compacted(...)`` with one unchanged row, a drain of the shard
manifest, a forged driverless claim (issues 47, 56, 61). A claim says nothing about rows. A
*receipt* is memwal's own record, written right after a commit of ours, of what that commit did:

* ``merge``: the version of a merge's marked commit, its Lance transaction file (a name Lance makes
  with a fresh UUID when it commits, so the receipt stands for that one commit and no other), and
  per shard the generations whose rows the commit applied (with the earlier commits of the same
  batch that carried part of them: a delete pass, a driverless data commit). A generation a merge
  skipped because someone else's drain said it was merged is *not* on it.
* ``repair``: an operator's repair commit (``memwal repair``): the generations whose rows it wrote.
* ``commit``: any other commit of ours (an index, a compaction, a snapshot, a delete pass, a fence):
  GC tells memwal's commits from the owner's by the listing alone, without reading transactions.
* ``proven`` (no commit): GC read the generations back and found the base at ``version`` holds
  them; kept so that a later run need not read them again, nor need that version retained.
* ``accept`` (no commit): an operator took the base at ``version`` as the truth for generations
  whose rows it does not hold (``memwal repair --accept``).

What a receipt may *not* be taken for: a range. It names its own generations, and GC counts a
generation proven only by a receipt that names it at the version where its proof applies
(:mod:`memwal.gc.cover`). Receipts live under ``_mem_wal/_jobs/receipts/`` as
``<version:020d>-<kind>[-<id>].json``: one listing tells which versions are memwal's. Whoever can
write the table's storage can plant one, as they can delete the generations themselves;
what receipts keep out is every *other* writer's claim (docs/security.md).
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from memwal.core.json_doc import JsonDocError, finite, list_of, load_json, mapping_of
from memwal.errors import MemWalError, NotFoundError, PreconditionFailedError
from memwal.table.naming import JOBS_DIR

if TYPE_CHECKING:
    from memwal.store import Store

log = logging.getLogger(__name__)

RECEIPTS_DIR = f"{JOBS_DIR}/receipts"

#: Kinds of receipt (see the module docstring).
MERGE, REPAIR, COMMIT, PROVEN, ACCEPT = "merge", "repair", "commit", "proven", "accept"
KINDS = (MERGE, REPAIR, COMMIT, PROVEN, ACCEPT)
#: Receipts that say rows are in the base at their version (the others only say whose a commit is).
EVIDENCE = frozenset({MERGE, REPAIR, PROVEN, ACCEPT})

#: A receipt larger than this is not read (storage is untrusted input): it proves nothing.
MAX_BYTES = 1 << 20
_MAX_VALUES = 100_000
_NAME = re.compile(r"^([0-9]{20})-(" + "|".join(KINDS) + r")(?:-([0-9a-f]{8}))?\.json$")
#: Largest version or generation a receipt may name (a 63-bit integer, as Lance's).
_MAX_NUMBER = (1 << 63) - 1


@dataclass(frozen=True)
class Receipt:
    """One receipt (see the module docstring)."""

    version: int
    kind: str
    #: Per shard, the generations ``(from, to)`` whose rows are in the base at ``version``.
    applied: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    #: Earlier commits of the same batch that carried part of the rows (a merge's).
    data: tuple[int, ...] = ()
    #: The commit's transaction file under ``_transactions/`` (a merge's and a repair's).
    transaction_file: str | None = None
    run_id: str | None = None
    #: Who asked (an operator's repair or acceptance).
    by: str | None = None
    written_at: float = 0.0

    def covers(self, shard_id: str, generation: int) -> bool:
        span = self.applied.get(shard_id)
        return span is not None and span[0] <= generation <= span[1]

    def to_dict(self) -> dict[str, object]:
        return {"version": self.version, "kind": self.kind,
                "applied": {s: list(span) for s, span in sorted(self.applied.items())},
                "data": list(self.data), "transaction_file": self.transaction_file, "run_id": self.run_id,
                "by": self.by, "written_at": self.written_at}


def receipt_key(version: int, kind: str) -> str:
    """A fresh key for a receipt: commits have one each, and a proof may be recorded again."""
    suffix = "" if kind in (MERGE, REPAIR, COMMIT) else f"-{secrets.token_hex(4)}"
    return f"{RECEIPTS_DIR}/{version:020d}-{kind}{suffix}.json"


def write_receipt(store: Store, receipt: Receipt) -> str | None:
    """Write ``receipt`` (created only if absent); its key, or None when it could not be written.
    Never raises: a missing receipt only makes GC read the generations back."""
    key = receipt_key(receipt.version, receipt.kind)
    doc = {**receipt.to_dict(), "written_at": receipt.written_at or time.time()}
    try:
        store.put_if_absent(key, json.dumps(doc, sort_keys=True).encode())
    except PreconditionFailedError:
        log.warning("a receipt for version %d (%s) is already written: %s kept", receipt.version, receipt.kind, key)
        return None
    except (MemWalError, OSError) as exc:
        log.warning("receipt of version %d not written (GC will read its generations back): %s",
                    receipt.version, exc)
        return None
    return key


@dataclass(frozen=True)
class ReceiptListing:
    """The receipts of a table as one listing shows them: per version, its receipts' kinds and keys."""

    by_version: Mapping[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    def ours(self, version: int) -> bool:
        """Whether memwal wrote a receipt for a commit at ``version`` (the commit is memwal's)."""
        return any(kind in (MERGE, REPAIR, COMMIT) for kind, _ in self.by_version.get(version, ()))

    def evidence_keys(self, version: int) -> list[str]:
        return list(self.evidence.get(version, ()))

    def evidence_versions(self) -> list[int]:
        return list(self.evidence)

    @cached_property
    def evidence(self) -> Mapping[int, tuple[str, ...]]:
        """Per version with a receipt that says rows are in the base, those receipts' keys (in the
        listing's order), versions ascending. Built once per listing, on first use: a proof asks
        for every generation it judges, and sorting the listing at each ask made ``memwal verify``
        cost generations x receipts (issue 82). The listing is frozen, so the cache cannot go
        stale; a listing nobody asks (a GC plan with nothing to prove) never builds it."""
        out: dict[int, tuple[str, ...]] = {}
        for version in sorted(self.by_version):
            keys = tuple(key for kind, key in self.by_version[version] if kind in EVIDENCE)
            if keys:
                out[version] = keys
        return out

    @property
    def keys(self) -> list[str]:
        return [key for items in self.by_version.values() for _, key in items]


def list_receipts(store: Store) -> ReceiptListing:
    """Every receipt's version, kind and key, from one listing (a name that is not a receipt's is skipped)."""
    found: dict[int, list[tuple[str, str]]] = {}
    try:
        listed = list(store.list_keys(RECEIPTS_DIR + "/"))  # names only: no file stat-ed
    except (MemWalError, OSError) as exc:
        log.warning("receipts not listed (GC reads the generations back instead): %s", exc)
        return ReceiptListing()
    for key in listed:
        m = _NAME.match(key.rsplit("/", 1)[-1])
        if m is None:
            continue
        found.setdefault(int(m.group(1)), []).append((m.group(2), key))
    return ReceiptListing({v: tuple(sorted(items)) for v, items in found.items()})


def read_receipt(store: Store, key: str) -> Receipt | None:
    """The receipt at ``key``, checked field by field against its name; None (with a warning)
    for one that is missing, too large, or malformed: it proves nothing."""
    m = _NAME.match(key.rsplit("/", 1)[-1])
    if m is None:
        return None
    try:
        doc = mapping_of(load_json(store.get(key, max_bytes=MAX_BYTES), max_values=_MAX_VALUES))
        return _parsed(doc, int(m.group(1)), m.group(2))
    except NotFoundError:
        return None
    except (MemWalError, OSError, JsonDocError, ValueError, TypeError) as exc:
        log.warning("receipt %s not read (it proves nothing): %s", store.uri_for(key), exc)
        return None


def _number(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_NUMBER:
        raise ValueError(f"not a version or generation number: {value!r}")
    return value


def _text(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 1024:
        raise ValueError("not a short string")
    return value


def _parsed(doc: Mapping[str, object], version: int, kind: str) -> Receipt:
    if doc.get("version") != version or doc.get("kind") != kind:
        raise ValueError("its version or kind is not the one its name says")
    applied: dict[str, tuple[int, int]] = {}
    for shard, span in mapping_of(doc.get("applied")).items():
        low, high = (_number(x) for x in list_of(span)) if len(list_of(span)) == 2 else (1, 0)
        if not 1 <= low <= high or not isinstance(shard, str) or len(shard) > 128:
            raise ValueError(f"shard {shard!r}: not a range of generations: {span!r}")
        applied[shard] = (low, high)
    data = tuple(_number(v) for v in list_of(doc.get("data")))
    if any(v >= version for v in data):
        raise ValueError("a batch's earlier commit is not before its receipt's version")
    return Receipt(version, kind, applied, data, _text(doc.get("transaction_file")), _text(doc.get("run_id")),
                   _text(doc.get("by")), finite(doc.get("written_at")) or 0.0)


def prune_receipts(store: Store, keys: Iterable[str]) -> int:
    """Delete receipts no proof needs any more; how many (never raises: a leftover costs a listing entry)."""
    keys = [k for k in keys if k.startswith(RECEIPTS_DIR + "/")]
    if not keys:
        return 0
    try:
        return store.delete_many(keys)
    except (MemWalError, OSError) as exc:
        log.warning("receipts not pruned: %s", exc)
        return 0


__all__ = ["ACCEPT", "COMMIT", "EVIDENCE", "KINDS", "MERGE", "PROVEN", "RECEIPTS_DIR", "REPAIR", "Receipt",
           "ReceiptListing", "list_receipts", "prune_receipts", "read_receipt", "receipt_key", "write_receipt"]
