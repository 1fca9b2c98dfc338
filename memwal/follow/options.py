"""A follower's options, declared once (flags, keywords and checks derive from them, as for the jobs).

A follower is a job too: it holds a lease of its own (``follow``, one follower per table) for as
long as it runs, so it takes the common options (``--lease-ttl``, ``--engine``: the engine its
jobs run on). Its own knobs say how often it looks and how often each job runs:

* the merge runs as soon as a shard has work: the follower reads each shard's version hint every
  ``poll_seconds`` while writers write, backing off to ``max_poll_seconds`` while nothing moves,
  and lists the shards every ``rescan_seconds`` (new shards, and a hint that lags: the hint is
  written after the manifest and may be missing);
* catch-up, compaction, GC and the snapshot refresh run on cadences of their own, and only when
  something happened since they last ran (an idle table costs reads, never writes);
* compaction runs in two scopes too: its tail pass (:data:`TAIL`) as soon as ``compact_fragments``
  merges have each appended a fragment to the base since the last compaction, rewriting only the
  small fragments (under :data:`TAIL_ROWS` rows; deletions wait), so the base a new reader opens
  holds a few fragments, not a minute of merges (every fragment is a file that reader opens: a
  plain read of 38,000 rows took 13 ms at 36 fragments, 4 ms at one); and the whole compaction
  (``compact_every``), which also rewrites the larger fragments and materialises deletions;
* GC runs in two scopes: its listing pass after merges, at most every ``rollup_every`` seconds (3:
  every other flush of a writer flushing 35 generations a minute): what merged is rolled up into
  what stays listed, walking only the listed folders, so a reader lists a few entries, not every
  flush since the last GC. A pass after every merge (0) left 4 or 5 entries listed in 16% of the
  1 Hz samples rather than 26%, and cost the follower 17-26% more CPU: the pass is half its work,
  paid per flush (docs/decisions/0062-keeping-up.md, sections 17 and 18). And the whole GC
  (``gc_every``), which names every folder the version retention keeps (thousands on a table that
  keeps a week; on a disk it walks the files of those it judges), drains and deletes. While its
  runs free nothing (beside a writer that never reopens, under a week's retention, none does),
  each waits twice as long as the last, up to
  ``gc_max_every``: the walk grows with what the retention keeps, and walking it every minute to
  free nothing was a quarter of a follower's time by minute 17 of a writer that never stops. Running
  GC less often deletes nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass

from memwal.actions.options import JobOptions, opt
from memwal.errors import BadInputError

#: GC's listing pass (``memwal gc --listed-only``) as the schedule names it: the GC job, run with
#: ``listed_only``, on a cadence of its own (``rollup_every``), beside the whole GC (``gc_every``).
LISTING = "gc:listing"
#: Compaction's tail pass as the schedule names it: the compact job, run on the small fragments only
#: (Lance's planner with a target of :data:`TAIL_ROWS` rows and deletions left for the whole pass),
#: due after ``compact_fragments`` merges that each appended a fragment.
TAIL = "compact:tail"
#: The tail pass rewrites fragments under this many rows (a sixteenth of Lance's default target):
#: what merges appended, never a large fragment, so its cost is bounded by what was merged since
#: the last compaction plus this many rows, however large the base is.
TAIL_ROWS = 65_536

#: The defaults the follower is measured with (docs/benchmarks/keeping-up.md, "Keeping up").
DEFAULT_POLL_SECONDS = 1.0
DEFAULT_MAX_POLL_SECONDS = 10.0
#: GC's listing pass at most this often (seconds) after merges: measured beside pylance's,
#: lance-context's and LanceDB's writers that never stop (docs/benchmarks/keeping-up.md, "Keeping up").
DEFAULT_ROLLUP_EVERY = 3.0


@dataclass(frozen=True, kw_only=True)
class FollowOptions(JobOptions):
    """How a follower keeps up (``memwal cycle TABLE --follow``, ``memwal fleet run --follow``)."""

    poll_seconds: float = opt(DEFAULT_POLL_SECONDS, "interval",
                              "while writers write, look for work every S seconds (a table: its shards' version "
                              f"hints; a fleet: a plan) (default {DEFAULT_POLL_SECONDS:g})", metavar="S")
    max_poll_seconds: float = opt(DEFAULT_MAX_POLL_SECONDS, "interval",
                                  "while nothing moves, back off to looking every S seconds "
                                  f"(default {DEFAULT_MAX_POLL_SECONDS:g})", metavar="S")
    rescan_seconds: float = opt(30.0, "interval", "list the shards every S seconds: new shards, and a version hint "
                                "that lags (default 30)", metavar="S")
    catchup_every: float = opt(60.0, "interval", "catch indexes up at most every S seconds, after merges "
                               "(default 60)", metavar="S")
    compact_every: float = opt(60.0, "interval", "compact at most every S seconds, after merges (default 60)",
                               metavar="S")
    compact_fragments: int = opt(8, "count", "between compactions, run compaction's tail pass (the small fragments "
                                 f"only, under {TAIL_ROWS:,} rows) once N merges have each appended a fragment to the "
                                 "base (default 8)", metavar="N")
    gc_every: float = opt(60.0, "interval", "run the whole GC (drain, delete: it names every folder the version "
                          "retention keeps) at most every S seconds, after merges, and never sooner after the last "
                          "than 50 times what it took (default 60)", metavar="S")
    gc_max_every: float = opt(600.0, "interval", "while whole GCs free nothing, wait twice as long after each, up to "
                              "S seconds (default 600): one that frees or drains something goes back to --gc-every "
                              "(a rollup or a pruning of old shard-manifest versions is not counted), and one that "
                              "names when its gates pass runs again then", metavar="S")
    rollup_every: float = opt(DEFAULT_ROLLUP_EVERY, "duration", "after merges, run GC's listing pass (roll up and "
                              "heal what readers list, walking only the listed folders) at most every S seconds "
                              f"(default {DEFAULT_ROLLUP_EVERY:g}; 0: after every merge): what merged since it ran "
                              "stays listed as it was flushed", metavar="S")
    gc_retry: float = opt(60.0, "interval", "a GC that waits for time (grace period, retained versions) runs "
                          "again after S seconds even when nothing was merged (default 60)", metavar="S")
    snapshot_every: float = opt(60.0, "interval", "refresh the shard snapshot at most every S seconds, after a "
                                "shard moved (default 60)", metavar="S")
    max_seconds: float | None = opt(None, "interval", "stop after S seconds (default: run until SIGTERM or SIGINT)",
                                    flag="--follow-seconds", metavar="S")

    def __post_init__(self) -> None:
        if self.dry_run:
            raise BadInputError("--follow runs jobs: a dry run of a follower plans nothing (use memwal cycle "
                                "--dry-run)")
        if self.gc_max_every < self.gc_every:
            raise BadInputError(f"--gc-max-every {self.gc_max_every:g} is below --gc-every {self.gc_every:g}")
        if self.max_poll_seconds < self.poll_seconds:
            raise BadInputError(f"--max-poll-seconds {self.max_poll_seconds:g} is below --poll-seconds "
                                f"{self.poll_seconds:g}")

    def every(self, job: str) -> float:
        """How often ``job`` may run (the merge: whenever a shard has work)."""
        return {"catchup": self.catchup_every, "compact": self.compact_every, "gc": self.gc_every,
                LISTING: self.rollup_every, "snapshot": self.snapshot_every}.get(job, 0.0)


__all__ = ["DEFAULT_MAX_POLL_SECONDS", "DEFAULT_POLL_SECONDS", "DEFAULT_ROLLUP_EVERY", "LISTING", "TAIL", "TAIL_ROWS",
           "FollowOptions"]
