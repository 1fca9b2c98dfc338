"""Every base-table version a reader may still open: main history, branches, tags.

GC gate (c) (invariant 4, docs/architecture.md): time travel to a retained version reads the data
that version had merged, and nothing more, so a generation merged *after* that version
must stay until the version is cleaned up. We read progress straight from each version's
manifest, on the main line and on every branch under ``tree/<branch>/``.

Every version counts, whatever its neighbours say: a ``restore`` commits an older manifest
again, so progress is not monotone across versions. What keeps that cheap with thousands of
versions (issue 23): a manifest a GC run has read before is not read again
(:mod:`memwal.table.progress_digest`: same key, same ETag), nor one the same table object read
for an earlier plan (a follower's listing passes, which leave the digest to whole runs: the
versions committed since the last whole run are read once, not at every pass); the others are read in batches
(:meth:`Store.get_many`: concurrently on an object store, each folder reached once on a disk),
and the index section, where the MemWAL progress of every shard lives, is decoded once per
distinct section (consecutive versions usually carry the same bytes), see
:func:`memwal.table.manifest.decode_table_manifest`.

The digest is a record anyone who writes the table's storage can rewrite (issue 83), so what it
says is a claim until the version's manifest confirms it (:attr:`RetainedVersion.vouched`):
:func:`vouch` reads the manifests of the claims a verdict rests on, and when one disagrees, every
other claim of that digest too (it is not used again: a warning names it). GC checks only the
claims that decide what it frees, alarms on or names as a holder (:func:`memwal.gc.plan.plan_gc`);
callers that pass no digest of their own (verify, repair: alarms, each) get manifests only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import lance

from memwal.errors import BadInputError, first_line
from memwal.store import ObjectInfo, Store
from memwal.table import Table
from memwal.table.manifest import IndexState, decode_table_manifest, list_version_infos
from memwal.table.progress_digest import DIGEST_KEY, ProgressDigest, Remembered, load_digest, save_digest

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Manifests read at once: a batch is in memory together (a manifest carries the progress of
#: every shard), and on an object store it is what is in flight, :attr:`Store.READ_THREADS` at a time.
READ_BATCH = 256


@dataclass(slots=True)  # a week of versions is some 70,000 of these, built by every whole GC
class RetainedVersion:
    version: int
    branch: str | None
    timestamp: float  # commit time (the manifest's)
    compacted: dict[str, int]  # merge progress per shard; shared between versions: read-only
    key: str  # the manifest's key from the table root
    etag: str  # the manifest's ETag in the listing it was found in
    tags: list[str] = field(default_factory=list)
    child_branches: list[str] = field(default_factory=list)
    remembered: bool = False  # taken from the digest, its manifest not read
    #: The manifest's transaction file (when remembered, the digest's: a cache, not evidence).
    transaction_file: str | None = None
    #: What this says is its manifest's (read by this process, or a digest this process wrote from
    #: them); False: a digest's claim, which :func:`vouch` checks before it decides a verdict.
    vouched: bool = True

    def describe(self) -> str:
        """Which version holds the data back, and what holds that version (tag, branch)."""
        where = f"{self.version}" if self.branch is None else f"{self.version} (branch {self.branch})"
        if self.tags:
            where += f" (tag {', '.join(sorted(self.tags))})"
        if self.child_branches:
            where += f" (branch {', '.join(sorted(self.child_branches))} starts here)"
        return where


Holders = dict[tuple[str | None, int], list[str]]


def _holders(table: Table, ds: lance.LanceDataset | None = None) -> tuple[Holders, Holders]:
    """Tags and child branches by the (branch, version) they hold, from Lance's own ref API.

    ``ds.tags.list()`` and ``ds.branches.list()`` read ``_refs/`` as Lance defines it, so a
    format change in Lance cannot leave GC reading stale references by hand. They read
    ``_refs/`` afresh whatever version ``ds`` (a handle the caller has, else the latest) is at.
    """
    ds = table.dataset() if ds is None else ds
    try:
        tag_docs, branch_docs = ds.tags.list(), ds.branches.list()
    except (RuntimeError, OSError, ValueError) as exc:
        raise BadInputError(f"{table.uri}: unreadable tag or branch reference: {first_line(exc, table.uri)}") from exc
    tags: Holders = {}
    branches: Holders = {}
    for name, tag in tag_docs.items():
        tags.setdefault((tag["branch"], int(tag["version"])), []).append(name)
    for name, branch in branch_docs.items():
        branches.setdefault((branch["parent_branch"], int(branch["parent_version"])), []).append(name)
    return tags, branches


def retained_versions(table: Table, *, known: ProgressDigest | None = None,
                      dataset: lance.LanceDataset | None = None) -> list[RetainedVersion]:
    """All versions whose manifests still exist, oldest first per line of history (``known``:
    the retained-progress digest when the caller has it already, and then checks the claims it
    takes from it with :func:`vouch`, before they decide anything; without one, the digest is
    read and every claim from it confirmed here: the caller gets manifests' values only;
    ``dataset``: an open handle to list tags and branches through, else the latest is opened).

    The main line is built once per table object and then grown by the versions committed on
    top since (:class:`MainLine`): a follower asks at every listing pass, and a week of versions
    built again each time grew with the table's age (issue 82)."""
    tags, branches = _holders(table, dataset)
    checked = known is not None
    known = load_digest(table.store) if known is None else known
    learned = table.progress_read if table.progress_read is not None else ProgressDigest()
    shared: dict[bytes, IndexState] = {}
    listing = table.version_infos()
    with table.main_line_lock:
        line = table.main_line
        if line is not None and line.holds(table, listing, tags, branches):
            grown, truth = _build(table, None, table.store, "", table.cursor.since(line.top), tags, branches, known,
                                  learned, shared)
            line.grow(grown, table.cursor.top)
            learned.add(truth)
            table.progress_read = learned
        else:
            main, truth = _build(table, None, table.store, "", sorted(listing.items()), tags, branches, known,
                                 learned, shared)
            line = MainLine(table.cursor.epoch, max(listing, default=0), tags, branches, main,
                            [v for v in main if not v.remembered])
            table.main_line = line if listing is table.cursor.infos else None
            table.progress_read = ProgressDigest(truth)
        out = list(line.versions)
    for b in table.store.list_dirs("tree/"):
        store = table.store.child(f"tree/{b}")
        on_branch, truth = _build(table, b, store, f"tree/{b}/", sorted(list_version_infos(store).items()), tags,
                                  branches, known, learned, shared)
        out += on_branch
        table.progress_read.add(truth)
    if not checked:
        vouch(table, out, out)
    return out


@dataclass
class MainLine:
    """The main line's retained versions as a table object built them last, to be grown by the
    versions committed on top since rather than built again: valid while the versions' listing
    found nothing but new versions on top (:attr:`memwal.table.versions_cursor.VersionsCursor.epoch`)
    and the tags and branches are the same."""

    epoch: int
    top: int  # the newest version built
    tags: Holders
    branches: Holders
    versions: list[RetainedVersion]
    #: The versions the last build read from their manifests: for the next plan they are what this
    #: table object read before (remembered), as they were when each plan built every version.
    fresh: list[RetainedVersion] = field(default_factory=list)

    def holds(self, table: Table, listing: dict[int, ObjectInfo], tags: Holders, branches: Holders) -> bool:
        return (listing is table.cursor.infos and self.epoch == table.cursor.epoch and tags == self.tags
                and branches == self.branches)

    def grow(self, versions: list[RetainedVersion], top: int | None) -> None:
        for v in self.fresh:
            v.remembered = True
        self.fresh = [v for v in versions if not v.remembered]
        self.versions += versions
        self.top = self.top if top is None else max(self.top, top)


def _build(table: Table, branch: str | None, store: Store, root: str, listed: list[tuple[int, ObjectInfo]],
           tags: Holders, branches: Holders, known: ProgressDigest, learned: ProgressDigest,
           shared: dict[bytes, IndexState]) -> tuple[list[RetainedVersion], list[Remembered]]:
    """The retained versions of ``listed`` (one line of history, ascending) and what was read of
    them from their manifests (for :attr:`Table.progress_read`)."""
    # what this table object read from the manifests first: a digest's claim only where it did not
    # (one pass: a week of versions is some 70,000, built by every whole GC of a new process)
    seen: dict[int, tuple[Remembered | None, bool]] = {}  # version -> (remembered, vouched)
    for v, info in listed:
        key = root + info.key
        if (m := learned.get(key, info.etag, v) if learned else None) is not None:
            seen[v] = (m, True)
        else:
            m = known.get(key, info.etag, v)
            seen[v] = (m, m is None or known.trusted)
    # the manifests this table object read lately (the latest, as a rule) are not read again
    decoded = {v: d for v, _ in listed if branch is None and seen[v][0] is None
               and (d := table.remembered(v)) is not None}
    unread = [(v, info.key) for v, info in listed if seen[v][0] is None and v not in decoded]
    read = {v: (m.timestamp, m.compacted, m.transaction_file) for v, m in decoded.items()}
    read.update(_read(store, unread, shared))
    out: list[RetainedVersion] = []
    truth: list[Remembered] = []
    for version, info in listed:
        remembered, vouched = seen[version]
        timestamp, compacted, txn = ((remembered.timestamp, remembered.compacted, remembered.transaction_file)
                                     if remembered else read[version])
        out.append(RetainedVersion(version, branch, timestamp, compacted, root + info.key, info.etag,
                                   tags.get((branch, version), []), branches.get((branch, version), []),
                                   remembered=remembered is not None, transaction_file=txn, vouched=vouched))
        if vouched:
            truth.append(Remembered(root + info.key, info.etag, version, timestamp, compacted, txn))
    return out, truth


def vouch(table: Table, versions: list[RetainedVersion], which: Iterable[RetainedVersion]) -> bool:
    """Confirm the digest's claims among ``which`` (every one of ``versions``, the plan's retained
    versions) against their manifests, in place; True when one disagreed, and then every claim of
    ``versions`` is replaced by its manifest's values (a digest that lied once is not used again:
    a warning names it, and a whole GC run rewrites it from the manifests). What is read is kept
    by the table object (:attr:`Table.progress_read`): a follower confirms a version once."""
    pending = [v for v in which if not v.vouched]
    if not pending:
        return False
    wrong = _confirm(table, pending)
    if wrong:
        log.warning("not using %s: it says other merge progress than the manifests of version(s) %s; "
                    "reading every retained version's manifest instead", table.store.uri_for(DIGEST_KEY),
                    ", ".join(v.describe() for v in wrong[:5]) + (" ..." if len(wrong) > 5 else ""))
        _confirm(table, [v for v in versions if not v.vouched])
    return bool(wrong)


#: How many times retained versions were changed in place (:func:`_confirm`): what was built on
#: them before (:class:`memwal.gc.versions.VersionProgress`) is not grown from after a change.
_changes = [0]


def changes() -> int:
    """How many times :func:`_confirm` changed retained versions in place, in this process."""
    return _changes[0]


def _confirm(table: Table, versions: list[RetainedVersion]) -> list[RetainedVersion]:
    """Read ``versions``' manifests, put their values in place of the claims, and remember them in
    the table object; the versions whose claims were wrong."""
    _changes[0] += 1
    wrong: list[RetainedVersion] = []
    shared: dict[bytes, IndexState] = {}
    by_key = {v.key: v for v in versions}
    read: list[Remembered] = []
    for key, (timestamp, compacted, txn) in _read(table.store, [(k, k) for k in by_key], shared):
        v = by_key[key]
        if compacted != v.compacted or timestamp != v.timestamp or (txn or None) != (v.transaction_file or None):
            wrong.append(v)
        v.timestamp, v.compacted, v.transaction_file = timestamp, compacted, txn
        v.remembered, v.vouched = False, True
        read.append(Remembered(v.key, v.etag, v.version, timestamp, compacted, txn))
    before = table.progress_read if table.progress_read is not None else ProgressDigest()
    table.progress_read = ProgressDigest([*before.entries(), *read])
    return wrong


def _read(store: Store, listed: list[tuple[T, str]],
          shared: dict[bytes, IndexState]) -> Iterator[tuple[T, tuple[float, dict[str, int], str]]]:
    """(tag, (commit time, progress, transaction file)) of each listed (tag, key) manifest, read
    :data:`READ_BATCH` at a time."""
    for start in range(0, len(listed), READ_BATCH):
        batch = listed[start:start + READ_BATCH]
        for (tag, key), data in zip(batch, store.get_many([k for _, k in batch]), strict=True):
            if data is None:  # cleaned up since the listing: as a get of it would have said
                raise store.not_found(key)
            manifest = decode_table_manifest(data, key=key, where=store.uri_for(key), shared=shared)
            yield tag, (manifest.timestamp, manifest.compacted, manifest.transaction_file)


def remember_retained(table: Table, versions: list[RetainedVersion], *, before: ProgressDigest | None = None) -> bool:
    """Leave what ``versions`` (every version retained now) had merged for the next plan to
    read instead of their manifests (``before``: the digest as read, else it is read again to
    compare); True when the digest was written (it is a cache: never raises)."""
    return save_digest(table.store, [Remembered(v.key, v.etag, v.version, v.timestamp, v.compacted,
                                                v.transaction_file) for v in versions], before=before,
                       trusted=all(v.vouched for v in versions))
