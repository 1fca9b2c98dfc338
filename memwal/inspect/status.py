"""`memwal status`: the state of every shard against the base table's progress.

This is what an operator looks at first (how far behind is the merger? are indexes caught
up?) and what the lag sensor polls, so it reads only what it shows: the latest table
manifest, one listing of ``_mem_wal/`` without the WAL and the run history
(:func:`memwal.table.listing.list_mem_wal`: which generation folders exist, their bytes on
storage, when each was flushed) and each shard's latest manifest; never generation data.
``memwal status`` also checks every unmerged generation's files (``check_files``: Lance opens
it and validates each fragment's data file footers and deletion files), so a damaged
generation that stops a shard's merges is named as that shard's ``problem``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from memwal.core import clock as clocks
from memwal.core.cycles import collector_paused
from memwal.core.defaults import DEFAULT_WRITER_IDLE_SECONDS
from memwal.core.document import Document
from memwal.core.sizes import human_bytes
from memwal.core.text import span
from memwal.core.waits import writer_live_frees
from memwal.core.words import counted
from memwal.errors import UnsafePathError
from memwal.table import Table
from memwal.table.compactions import load_compactions
from memwal.table.drain import merged_through
from memwal.table.generations import generation_check
from memwal.table.listing import MemWalListing, ShardListing, list_mem_wal
from memwal.table.manifest import TableManifest, maintained_indexes
from memwal.table.naming import MEM_WAL_INDEX_NAME
from memwal.table.shards import (
    FlushedGeneration,
    ShardManifestError,
    ShardManifests,
    ShardState,
    read_hinted_manifests,
    read_listed_manifests,
    read_shard_manifests,
)
from memwal.table.writer import ManifestHistory, WriterView, writer_view
from memwal.table.writers_closed import ClosedRecords

if TYPE_CHECKING:
    from memwal.checkpoint.ops import CheckpointRecords


@dataclass
class UnmergedGeneration:
    generation: int
    path: str
    rows: int | None  # None: the shard manifest lacks it and the generation was not opened
    bytes: int


@dataclass
class ShardStatus:
    shard_id: str
    status: str
    writer_epoch: int
    manifest_version: int
    current_generation: int
    flushed_generations: list[int]
    collected_generations: list[int]
    compacted_generation: int
    unmerged_generations: list[int]
    unmerged: list[UnmergedGeneration]
    #: None when a generation's rows are unknown (its manifest entry lacks them: Lance 9
    #: writers; ``check_files`` reads them from the generation), never counted as 0.
    unmerged_rows: int | None
    unmerged_bytes: int
    oldest_unmerged_age_seconds: float | None
    index_catchup: dict[str, int] = field(default_factory=dict)
    #: Set for a broken shard: why its manifest state is unknown, or (``check_files``) which
    #: unmerged generation cannot be read.
    problem: str | None = None
    #: The merge progress readers go by: the index's, or what a drain shows when higher
    #: (memwal.table.drain: another compactor recorded its progress only so).
    merged_generation: int = 0
    #: Merged generations the manifest still lists: every client still reads them. GC drains
    #: them when its gates allow (``memwal gc --dry-run`` names each gate), not while the
    #: shard's writer is live and opened the table before they were merged.
    merged_listed: list[int] = field(default_factory=list)
    #: The shard's writer as its manifests show it (no WAL is listed here): live or quiet.
    writer_live: bool = False
    writer_last_activity: float | None = None
    #: When the live writer claimed its epoch (its view of the base is no older): None when quiet.
    writer_claimed_at: float | None = None
    #: Who said the writer, as it is, was closed, and when (``memwal writers --closed``): not live then.
    writer_closed: dict[str, Any] | None = None
    #: What a read of this shard opens, per kind of reader: ``list`` readers (pylance 14's
    #: ``lsm_scanner()``, lance-context) open every listed generation; ``mark`` readers (LanceDB,
    #: upstream's "Reader Expectations") skip those at or below the lower of the merge and
    #: catch-up marks. The read cost operators watch (issue 54).
    readers_open: dict[str, int] = field(default_factory=dict)
    #: Listed rollups (memwal.rollup): runs of merged generations listed as one.
    rollups: list[int] = field(default_factory=list)
    #: Listed generations with no primary-key index (lance#9035): every list reader fails on
    #: them while they are listed; GC rewrites each with one.
    unindexed: list[int] = field(default_factory=list)


@dataclass
class CheckpointStatus:
    """A live checkpoint and what it holds back from GC: the generations merged since its
    version that are still on storage (the ones it lists, and those its tagged version keeps)."""

    id: str
    name: str | None
    version: int
    expires_at: float
    generations_pinned: int
    generations_held: int
    bytes_held: int
    #: Its base version is gone (expired by a cleanup that did not honour it): readers fail.
    version_gone: bool = False
    #: It pins storage for more than a week from now.
    long_pin: bool = False
    #: The expiry its record stated, when beyond any checkpoint's longest lifetime (capped).
    claimed_expiry: float | None = None


@dataclass
class TableStatus(Document):
    table: str
    version: int
    maintained_indexes: list[str]
    shards: list[ShardStatus]
    checkpoints: list[CheckpointStatus] = field(default_factory=list)
    #: Checkpoint records that are no checkpoint (corrupt, too large, misnamed): why, each.
    unreadable_checkpoints: list[str] = field(default_factory=list)
    #: The table's own maintenance policy (``memwal policy``): option to stored value; None: not read.
    policy: dict[str, str] | None = None
    #: Stored policy values that are not used (they fail their option's check): why, each.
    policy_invalid: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The table's fields, its shards, and the totals over its shards."""
        return {**asdict(self), "unmerged_generations": self.unmerged_generations,
                "unmerged_rows": self.unmerged_rows, "unmerged_bytes": self.unmerged_bytes,
                "oldest_unmerged_age_seconds": self.oldest_unmerged_age_seconds,
                "broken_shards": [s.shard_id for s in self.broken]}

    @property
    def broken(self) -> list[ShardStatus]:
        """Shards whose latest manifest could not be established, or (``check_files``) whose
        merges stop at an unreadable generation (see ``problem``)."""
        return [s for s in self.shards if s.problem is not None]

    @property
    def unmerged_generations(self) -> int:
        return sum(len(s.unmerged_generations) for s in self.shards)

    @property
    def unmerged_rows(self) -> int | None:
        """Rows not merged; None when some generation's count is unknown (never read as 0)."""
        rows = [s.unmerged_rows for s in self.shards]
        return None if any(r is None for r in rows) else sum(r for r in rows if r is not None)

    @property
    def unmerged_bytes(self) -> int:
        return sum(s.unmerged_bytes for s in self.shards)

    @property
    def oldest_unmerged_age_seconds(self) -> float | None:
        ages = [s.oldest_unmerged_age_seconds for s in self.shards if s.oldest_unmerged_age_seconds is not None]
        return max(ages) if ages else None

    def lag(self) -> dict[str, tuple[int, int | None, float | None]]:
        """Per shard (unmerged generations, unmerged rows, age of the oldest in seconds)."""
        return {s.shard_id: (len(s.unmerged_generations), s.unmerged_rows,
                             None if s.oldest_unmerged_age_seconds is None else round(s.oldest_unmerged_age_seconds, 1))
                for s in self.shards}

    def catchup_behind(self) -> dict[str, int]:
        """Per maintained index, the merged generations it has not caught up with."""
        return {name: sum(max(0, s.compacted_generation - s.index_catchup.get(name, 0)) for s in self.shards)
                for name in self.maintained_indexes}

    def record_metrics(self) -> None:
        """Publish the lag, catch-up and read-cost gauges (a no-op without an OpenTelemetry SDK)."""
        from memwal.observe.metrics import record_lag

        record_lag(self.table, self.lag(), self.catchup_behind(),
                   {s.shard_id: s.readers_open for s in self.shards if s.readers_open})


def shard_status(manifest: TableManifest, state: ShardState, listed: ShardListing, indexes: list[str],
                 now: float, writer: WriterView, rows: Mapping[int, int] | None = None) -> ShardStatus:
    """One shard from its latest manifest and its listing (no other request); ``rows``: rows
    of generations read from the generations themselves (``check_files``)."""
    compacted = manifest.compacted_generation(state.shard_id)
    merged = merged_through(compacted, state)
    flushed = state.flushed
    # A listed generation with no folder: an old GC collected it while still listed (H6).
    on_disk = set(listed.generations)
    unmerged = [g for g in flushed if g.generation > merged]
    flushed_at = listed.flushed_at(unmerged[0].path) if unmerged else None
    counts = [g.physical_rows or (rows or {}).get(g.generation) for g in unmerged]
    return ShardStatus(
        shard_id=state.shard_id,
        status=state.status,
        writer_epoch=state.writer_epoch,
        manifest_version=state.version,
        current_generation=state.current_generation,
        flushed_generations=[g.generation for g in flushed],
        collected_generations=[g.generation for g in flushed if g.path not in on_disk],
        compacted_generation=compacted,
        unmerged_generations=[g.generation for g in unmerged],
        unmerged=[UnmergedGeneration(g.generation, g.path, n, listed.bytes_under(g.path))
                  for g, n in zip(unmerged, counts, strict=True)],
        unmerged_rows=None if any(n is None for n in counts) else sum(n for n in counts if n is not None),
        unmerged_bytes=sum(listed.bytes_under(g.path) for g in unmerged),
        oldest_unmerged_age_seconds=None if flushed_at is None else now - flushed_at,
        index_catchup={name: manifest.index_catchup.get(name, {}).get(state.shard_id, 0) for name in indexes},
        merged_generation=merged,
        merged_listed=[g.generation for g in flushed if g.generation <= merged],
        writer_live=writer.live,
        writer_last_activity=writer.last_activity,
        writer_claimed_at=writer.claimed_at,
        writer_closed=None if writer.closed is None else writer.closed.to_dict(),
        readers_open=readers_open(flushed, compacted, [manifest.index_catchup.get(name, {}).get(state.shard_id, 0)
                                                        for name in indexes]),
        rollups=[g.generation for g in flushed if listed.is_rollup(g.path)],
        unindexed=[g.generation for g in flushed if g.path in on_disk and listed.readable(g.path)
                   and not listed.key_indexed(g.path)],
    )


def readers_open(flushed: list[FlushedGeneration], compacted: int, caught_up: list[int]) -> dict[str, int]:
    """Generations each kind of reader opens (see :attr:`ShardStatus.readers_open`)."""
    mark = min([compacted, *caught_up])
    return {"list": len(flushed), "mark": sum(g.generation > mark for g in flushed)}


def broken_shard_status(
    manifest: TableManifest, err: ShardManifestError, listed: ShardListing, indexes: list[str]
) -> ShardStatus:
    """A shard whose manifest is unknown: what storage and the table still tell about it.

    Its unmerged generations are the directories on storage above the merge progress, so a
    lag check still sees them; rows and sizes are unknown without the manifest.
    """
    compacted = manifest.compacted_generation(err.shard_id)
    on_disk = sorted(set(listed.generation_dirs().values()))
    return ShardStatus(
        shard_id=err.shard_id,
        status="broken",
        writer_epoch=0,
        manifest_version=0,
        current_generation=0,
        flushed_generations=[],
        collected_generations=[],
        compacted_generation=compacted,
        unmerged_generations=[g for g in on_disk if g > compacted],
        unmerged=[],
        unmerged_rows=None,
        unmerged_bytes=0,
        oldest_unmerged_age_seconds=None,
        index_catchup={name: manifest.index_catchup.get(name, {}).get(err.shard_id, 0) for name in indexes},
        problem=f"{err.reason}: {err}",
    )


def first_damaged_generation(table: Table, state: ShardState, compacted: int,
                             rows: dict[int, int] | None = None) -> str | None:
    """Why the shard's first unreadable unmerged generation stops its merges (None: all read);
    ``rows`` gets the rows of each generation read on the way.

    A generation merged and collected while we looked is not damage: the merge progress is
    read again before a finding is reported.
    """
    for g in state.flushed:
        if g.generation <= compacted:
            continue
        key = state.generation_key(g)
        check = generation_check(table.store, key, table.store.uri_for(key), table.storage_options)
        if check.damage is not None:
            if table.manifest().compacted_generation(state.shard_id) >= g.generation:
                return None
            return f"generation {g.generation} ({g.path}) {check.damage}; merges of this shard stop there"
        if rows is not None and check.rows is not None:
            rows[g.generation] = check.rows
    return None


@collector_paused()
def table_status(table: Table, *, now: float | None = None, check_files: bool = False,
                 manifest: TableManifest | None = None, checkpoints: bool = True,
                 writer_activity: bool = True) -> TableStatus:
    """The table's status: the latest table manifest (``manifest``, when the caller has just
    read it: ``memwal status`` hands down the one read to open the table), one listing of
    ``_mem_wal/`` (no WAL, no run history), each shard's latest manifest, and the live
    checkpoints (``checkpoints=False``: not read, none shown): a status reads each once."""
    with table.reading():
        return _table_status(table, clocks.current()() if now is None else now, check_files, manifest, checkpoints,
                             writer_activity)


def _table_status(table: Table, now: float, check_files: bool, manifest: TableManifest | None,
                  with_checkpoints: bool, writer_activity: bool = True, lag_only: bool = False) -> TableStatus:
    """``lag_only``: what :func:`lag_now` reads, no more. Only the unmerged generations' folders are
    walked (the merged ones kept on storage only fill fields the lag does not read), no writer is
    looked at (each shard's writer then shows as not live), and on a disk each shard's latest
    manifest comes from its hint, not a walk of its versions (a stat each there; an object store's
    listing gives a thousand of them with their times in one request, where the hint costs three
    or four requests a shard)."""
    manifest = table.require_mem_wal() if manifest is None else manifest
    indexes = [i for i in maintained_indexes(manifest) if i != MEM_WAL_INDEX_NAME]
    by_hint = lag_only and table.store.has_directories
    records = _read_checkpoints(table, now) if with_checkpoints else None
    # on a disk, the manifests first: only the folders they list are walked, not found among the
    # thousands of names a shard's folder holds (memwal.table.listing._walk_chosen). The lag reads
    # each latest from its hint; a status lists each shard's versions (it names a gap). A status
    # walks every folder only for the bytes a live checkpoint holds back (its merged generations).
    # An object store's one listing gives it all while it is short; past that, the manifests are
    # read then (a week of merged folders kept is thousands of pages: issue 82).
    live_views = records is not None and any(c.live(now) for c in records.checkpoints)
    by_manifests = not lag_only and table.store.has_directories and not live_views
    read: list[ShardManifests] = []

    def named(read_from: ShardManifests) -> dict[str, list[str]]:
        read.append(read_from)
        return {sid: [g.path for g in st.flushed] for sid, st in read_from.states.items()}

    known = named(read_hinted_manifests(table.store)) if by_hint else \
        named(read_shard_manifests(table.store)) if by_manifests else None
    # an object store's: read from the manifest versions, listed first, if the listing is long
    names = known if known is not None or live_views else \
        (lambda versions: named(read_listed_manifests(table.store, versions)))

    def chosen(sid: str, g: int) -> bool:
        # the lag's: the unmerged folders; a status's: those a manifest lists (walked by name) and,
        # of a broken shard, whose manifest names none, its folders above the mark
        return (by_manifests and known is not None and sid in known) or g > manifest.compacted_generation(sid)

    listing = list_mem_wal(table.store, wal=False, staging=False, manifests=not by_hint,
                           generations=chosen if lag_only or by_manifests else None, named=names)
    first = read[0] if read else None
    # GC's own manifest versions: never the writer's activity; the lag alone needs none
    compactions = load_compactions(table.store) if writer_activity else {}
    closed = ClosedRecords(table.store)
    found = first if first is not None else read_listed_manifests(table.store, listing)
    shards = []
    for sid, state in found.states.items():
        listed = listing.shards.get(sid) or ShardListing(sid)
        if lag_only:
            writer = WriterView(sid, state.writer_epoch, None, False)
        else:
            history = ManifestHistory(table.store, state, listed.manifests)
            held = any(g.generation <= merged_through(manifest.compacted_generation(sid), state)
                       for g in state.flushed)
            # when the live writer opened is read (a few manifest versions) only where it holds merged generations
            writer = writer_view(history, listed, now=now, idle_seconds=DEFAULT_WRITER_IDLE_SECONDS,
                                 walk=False, claim=held, ours=frozenset(compactions.get(sid, ())),
                                 closed=closed.of(sid) if held else None)  # read where it changes what is said
        rows: dict[int, int] = {}
        why = None
        if check_files:
            try:
                why = first_damaged_generation(table, state, merged_through(
                    manifest.compacted_generation(sid), state), rows)
            except UnsafePathError as exc:
                why = str(exc)
        st = shard_status(manifest, state, listed, indexes, now, writer, rows)
        st.problem = f"shard {sid}: {why}" if why else None
        shards.append(st)
    shards += [broken_shard_status(manifest, e, listing.shards.get(sid) or ShardListing(sid), indexes)
               for sid, e in found.broken.items()]
    shards.sort(key=lambda s: s.shard_id)
    checkpoints, unreadable = checkpoint_status(table, manifest, listing, now, records) if records else ([], [])
    from memwal.actions.policy import read_policy  # the options' checks, loaded with a status only

    policy = None if lag_only else read_policy(manifest.config)
    return TableStatus(table=table.uri, version=manifest.version, maintained_indexes=indexes, shards=shards,
                       checkpoints=checkpoints, unreadable_checkpoints=unreadable,
                       policy=None if policy is None else policy.values,
                       policy_invalid=None if policy is None else policy.invalid)


def _read_checkpoints(table: Table, now: float) -> CheckpointRecords:
    from memwal.checkpoint import read_checkpoints

    return read_checkpoints(table, now)


def checkpoint_status(table: Table, latest: TableManifest, listing: MemWalListing, now: float,
                      records: CheckpointRecords) -> tuple[list[CheckpointStatus], list[str]]:
    """Live checkpoints and the bytes each holds back (from the listing: no request per
    generation), and why each unreadable checkpoint record is one."""
    out = []
    versions = set(table.version_infos()) if records.checkpoints else set()
    for c in records.checkpoints:
        if not c.live(now):
            continue
        at = table.manifest(c.version) if c.version in versions else None
        held, size = 0, 0
        for shard_id in sorted(latest.compacted):
            since = at.compacted_generation(shard_id) if at is not None else 0
            listed = listing.shards.get(shard_id)
            for name, g in (listed.generation_dirs() if listed else {}).items():
                if since < g <= latest.compacted_generation(shard_id):
                    held += 1
                    size += listed.bytes_under(name) if listed else 0
        out.append(CheckpointStatus(c.id, c.name, c.version, c.expires_at,
                                    sum(len(p.generations) for p in c.shards.values()), held, size,
                                    version_gone=at is None, long_pin=c.long_pin(now),
                                    claimed_expiry=c.claimed_expiry))
    return out, [u.reason for u in records.unreadable]


def lag_now(table: Table) -> dict[str, list[float | int | None]]:
    """Per shard [unmerged generations, rows, oldest age] now, with the gauges published:
    what a run's history record keeps of the table when it ends. A follower runs a job every few
    seconds, each ending here, so it reads what the lag depends on and nothing else: the latest
    table version and each shard's latest manifest (on a disk from its hint, not a walk of the
    versions, which grow for as long as the writer lives), and the unmerged generations' folders
    (``lag_only``: not the checkpoints, the merged generations, the writer, nor GC's record of its
    own versions). Measured: a quarter of a follower's busy time at minute 19 of a writer that
    never stops, when it walked them all."""
    st = _table_status(table, clocks.current()(), False, None, False, writer_activity=False, lag_only=True)
    st.record_metrics()
    return {shard: list(figures) for shard, figures in st.lag().items()}


def render_status(st: TableStatus) -> str:
    """A readable table for a person at a terminal."""
    lines = [f"table {st.table}  version {st.version}  maintained indexes: {', '.join(st.maintained_indexes) or '-'}"]
    header = [
        "shard",
        "status",
        "epoch",
        "cur gen",
        "flushed",
        "collected",
        "merged",
        "unmerged",
        "listed",
        "rows",
        "bytes",
        "oldest",
        "catch-up",
    ]
    rows = [header]
    for s in st.shards:
        flushed = span(s.flushed_generations)
        catchup = " ".join(f"{k}={v}" for k, v in s.index_catchup.items()) or "-"
        age = "-" if s.oldest_unmerged_age_seconds is None else f"{s.oldest_unmerged_age_seconds:.0f}s"
        rows.append(
            [
                s.shard_id[:8],
                s.status,
                str(s.writer_epoch),
                str(s.current_generation),
                flushed,
                span(s.collected_generations),
                str(s.compacted_generation),
                str(len(s.unmerged_generations)),
                str(s.readers_open.get("list", 0)),
                "?" if s.unmerged_rows is None else str(s.unmerged_rows),
                human_bytes(s.unmerged_bytes),
                age,
                catchup,
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    lines.append(
        f"{counted(len(st.shards), 'shard')}, {counted(st.unmerged_generations, 'unmerged generation')}, "
        f"{human_bytes(st.unmerged_bytes)} unmerged"
    )
    if st.policy:
        lines.append("policy: " + ", ".join(f"{k}={v}" for k, v in st.policy.items())
                     + " (memwal policy: every job uses it unless given the option)")
    lines += [f"policy {k}: NOT USED: {why}" for k, why in (st.policy_invalid or {}).items()]
    for c in st.checkpoints:
        name = f" {c.name!r}" if c.name else ""
        notes = "; ITS VERSION IS GONE: readers of it fail, delete it" if c.version_gone else ""
        notes += f"; pinned for {(c.expires_at - clocks.current()()) / 86400:.0f} more days" if c.long_pin else ""
        notes += " (its record claimed longer: capped)" if c.claimed_expiry is not None else ""
        lines.append(f"checkpoint {c.id}{name}: version {c.version}, "
                     f"{counted(c.generations_pinned, 'generation')} pinned, holds back "
                     f"{counted(c.generations_held, 'merged generation')} ({human_bytes(c.bytes_held)}){notes}")
    live = waiting = 0
    for s in st.shards:
        if not s.merged_listed:
            continue
        what = (f"shard {s.shard_id[:8]}: readers open {counted(s.readers_open.get('list', 0), 'generation')} "
                f"({len(s.merged_listed)} merged, {counted(len(s.rollups), 'rollup')})")
        if s.writer_live:
            live += 1
            since = "" if s.writer_claimed_at is None else f", opened {_ago(s.writer_claimed_at)}"
            frees = writer_live_frees(s.writer_last_activity, DEFAULT_WRITER_IDLE_SECONDS, clocks.current()())
            lines.append(f"{what}: kept listed for its live writer (epoch {s.writer_epoch}{since}); gc drains "
                         f"them {frees.removeprefix('writer-live: ')}")
        else:
            waiting += 1
            said = "" if s.writer_closed is None else (f" (its writer said closed by {s.writer_closed['by']} "
                                                        f"{_ago(s.writer_closed['recorded_at'])})")
            lines.append(f"{what}: drained once gc's gates pass{said}")
    if live:  # said once for every shard it applies to, not on each shard's line
        lines.append("  a live writer's view of the base is older than the merges it lists: gc rolls them up and "
                     "drains them once it reopens or has been quiet for GC's writer idle period (a closed writer "
                     "leaves no trace a quiet one does not: say so with memwal writers TABLE --closed SHARD)")
    if live or waiting:
        lines.append("  gc --dry-run names every gate of each kept generation and when it passes, with its options "
                     "(the reader grace period after a merge first)")
    for s in st.shards:
        if s.unindexed:
            listed = f"generation{'s' * (len(s.unindexed) != 1)} {', '.join(map(str, s.unindexed))}"
            lines.append(f"shard {s.shard_id[:8]}: {listed} listed with no "
                         "primary-key index: every list reader (pylance's lsm_scanner(), lance-context) fails while "
                         "they are listed (lance#9035); gc rewrites each with its key index")
    lines += [f"UNREADABLE checkpoint record: {why}" for why in st.unreadable_checkpoints]
    lines += [f"BROKEN {s.problem}" for s in st.broken]
    return "\n".join(lines)


def _ago(when: float | None) -> str:
    return "-" if when is None else f"{max(0.0, clocks.current()() - when):.0f}s ago"
