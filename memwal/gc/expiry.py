"""The version-expiry collector: Lance's own cleanup of exactly the versions the plan names.

Planned (:func:`plan_version_expiry`): the main-line versions committed before ``now -
older_than``, except the latest, tagged ones, ones a branch starts from, every version a live
checkpoint's record names (all of them while a record of a newer format is live: it may pin
any), and those a live shard writer may have opened (``writer_pins``). The record pins by
itself: its Lance tag is a convenience that a kill between record and tag, or a deleted tag,
leaves missing (invariant 10). The rest of the
plan's gates are computed as if they were gone already, so the dry run lists what the run
deletes. Run (:meth:`VersionExpiry.collect`): those numbers go to
``cleanup_old_versions(versions=...)``, less every version a checkpoint read again after the
GC marker names, never a clock difference; the published file snapshot is kept around it
(hazard H3, :func:`memwal.snapshot.locate.snapshot_file_kept`). Lance's cleanup lists the
table's files itself (``python -m bench gc stores`` counts its requests).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from lance import LanceDataset

from memwal.checkpoint import Checkpoint
from memwal.core import steps
from memwal.gc.model import ExpiredVersions
from memwal.table import Table
from memwal.table.retained import RetainedVersion


@dataclass(frozen=True)
class VersionExpiry:
    """The planned expiry: the cut-off it counted from, and exactly the versions that go."""

    expire_before: float
    planned: tuple[int, ...]
    #: Versions kept because a live shard writer may hold one of them open.
    held_for_writers: tuple[int, ...] = ()

    def preview(self) -> ExpiredVersions:
        return ExpiredVersions(self.expire_before, self.planned, held_for_writers=self.held_for_writers)

    def collect(self, table: Table, keep: Iterable[Checkpoint] = ()) -> tuple[ExpiredVersions, LanceDataset | None]:
        """Expire the planned versions, less those ``keep`` (the live checkpoints) name; the
        figures, and the dataset handle the cleanup ran on (None: nothing to expire)."""
        from memwal.snapshot.locate import snapshot_file_kept

        pins = tuple(keep)
        doomed = [v for v in self.planned if not any(c.pins_version(v) for c in pins)]
        removed, freed, ds = 0, 0, None
        with snapshot_file_kept(table) as kept:
            if doomed:
                steps.step("gc.before-expiry")
                # A fresh handle: Lance's cleanup keeps the version its handle was opened at as the latest.
                ds = table.dataset()
                stats = ds.cleanup_old_versions(versions=doomed, error_if_tagged_old_versions=False)
                steps.step("gc.after-expiry")
                removed, freed = stats.old_versions, stats.bytes_removed
        return ExpiredVersions(self.expire_before, self.planned, freed, removed, tuple(kept),
                               self.held_for_writers), ds


def plan_version_expiry(versions: Iterable[RetainedVersion], latest: int, older_than_seconds: float,
                        checkpoints: Iterable[Checkpoint], now: float, *,
                        writer_pins: Iterable[tuple[float, float] | None] = ()
                        ) -> tuple[VersionExpiry, list[RetainedVersion]]:
    """The planned expiry, and the versions it removes (see the module docstring and
    :class:`ExpiryPlanner`, which this builds for one plan)."""
    return ExpiryPlanner(versions, latest, checkpoints, writer_pins=writer_pins).plan(older_than_seconds, now)


class ExpiryPlanner:
    """:func:`plan_version_expiry` for one set of versions, asked of several ``--expire-versions``
    values: what keeps a version apart from its age is judged once (the retention report's hint
    tries up to 16 values over a week's 70,000 versions: issue 82), and each value then only
    compares commit times.

    ``writer_pins``: per live shard writer, the span its view may date from, ``(earliest,
    claimed)``: from the grace period before its claim to its claim (None: unknown). Such a
    writer keeps the base version it opened for as long as it lives (Lance's cleanup would delete
    files it still reads: docs/decisions/0025-drain-protocol.md), and reads no later one: the
    version current at ``earliest`` and every version committed up to ``claimed`` stay, and no
    version after (issue 62: a writer that never stops held every version since it opened, so
    the retention bounded nothing); an unknown span keeps all.
    """

    def __init__(self, versions: Iterable[RetainedVersion], latest: int, checkpoints: Iterable[Checkpoint], *,
                 writer_pins: Iterable[tuple[float, float] | None] = ()) -> None:
        pins = tuple(checkpoints)
        main = sorted((v for v in versions if v.branch is None), key=lambda v: v.version)
        held: set[int] = set()
        for pin in writer_pins:
            if pin is None:
                held |= {v.version for v in main}
                continue
            earliest, claimed = pin
            opened = [v.version for v in main if v.timestamp <= earliest]
            floor = opened[-1] if opened else (main[0].version if main else 0)
            held |= {v.version for v in main if v.version >= floor and (v.version == floor or v.timestamp <= claimed)}
        #: the main-line versions only their age keeps, in version order, and their commit times
        self.candidates = [v for v in main if v.version != latest and not v.tags and not v.child_branches
                           and not any(c.pins_version(v.version) for c in pins)]
        self.stamps = np.fromiter((v.timestamp for v in self.candidates), dtype=float, count=len(self.candidates))
        self.held = held

    def plan(self, older_than_seconds: float, now: float) -> tuple[VersionExpiry, list[RetainedVersion]]:
        """The planned expiry of the versions older than ``older_than_seconds`` at ``now``, and the
        versions it removes."""
        cutoff = now - older_than_seconds
        due = [self.candidates[i] for i in np.flatnonzero(self.stamps < cutoff).tolist()]
        gone = [v for v in due if v.version not in self.held]
        kept = tuple(v.version for v in due if v.version in self.held)
        return VersionExpiry(cutoff, tuple(v.version for v in gone), kept), gone
