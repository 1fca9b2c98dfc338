"""Reads: what readers and operators pay, now and as a table ages.

- ``status``: ``status``, its page and the gc plan against 5,000 versions and a year of runs (``status_scale.json``);
- ``snapshot``: the snapshot refresh, and what readers gain from it (``snapshot_refresh.json``);
- ``compaction``: a scan before and after ``memwal compact``, local against Spark (``compaction.json``);
- ``steady``: a writer that never stops, every client's reads minute by minute (``steady.json``);
  ``steady-reopen``: the pylance arm with its writer replaced every 10 minutes;
- ``floor``: what pylance's list reader pays for one listed generation (``list_reader_floor.json``);
- ``follow``: a writer that never stops beside ``memwal cycle --follow`` on its defaults, every client
  (by hand: 30 minutes an arm, alone on the machine);
- ``overlay``: memwal's own reader over a few small generations against ``LsmScanner`` and a plain read;
- ``versions``: what each retained version costs (Lance's open, memwal's manifest read, a scan, GC's plan);
- ``store-age``: the requests the lag, GC's listing pass, ``status`` and a fleet's probe send on S3 as a
  table keeps more merged folders (``store_age.json``);
- ``age``: each recurring job's cost (a follower's per-flush work, ``gc --dry-run``, ``status``, a scan) as a
  followed table ages on the default retention, beside Lance's own open and ``versions()`` (``age.json``).
"""

from bench.cases import Case

CASES = (
    Case("status", "bench.read.status", "status and the gc plan against versions and a year of run history",
         bench=("--out", "{out}"), smoke=("--out", "{out}", "--smoke", "--no-timers", "--work", "{work}"),
         json="status_scale"),
    Case("snapshot", "bench.read.snapshot", "the snapshot refresh (1 and 16 threads, Spark) and readers' gain",
         bench=("--out", "{out}"), smoke=("--out", "{out}", "--shards", "4", "--no-spark"),
         json="snapshot_refresh", chart=False),
    Case("compaction", "bench.read.compaction", "a scan before and after compaction, local against Spark",
         bench=("--out", "{out}"), json="compaction", chart=False),
    Case("steady", "bench.read.steady", "a writer that never stops: every client's reads, minute by minute",
         bench=("--work", "{out}/steady-work", "--out", "{out}"),
         smoke=("--smoke", "--out", "{out}", "--work", "{work}", "--cycle-args", "--grace-seconds 0"),
         json="steady"),
    Case("steady-reopen", "bench.read.steady", "the pylance arm, its writer replaced every 10 minutes",
         bench=("--arms", "pylance", "--reopen-every", "10", "--work", "{out}/steady-work",
                "--out", "{out}/steady-reopen"), json="steady"),
    Case("floor", "bench.read.floor", "what pylance's list reader pays for one listed generation",
         bench=("--out", "{out}"), smoke=("--rows", "2000", "--runs", "1", "--out", "{out}"),
         json="list_reader_floor", chart=False),
    Case("follow", "bench.read.follow", "a writer that never stops beside the follower: listing at 1 Hz, CPU, reads",
         bench=None, json="follow"),
    Case("overlay", "bench.read.overlay", "memwal's reader over a few small generations, against LsmScanner",
         bench=None, json="overlay_read"),
    Case("versions", "bench.read.versions", "what each retained version costs, read off a day of versions",
         bench=None, json="versions_day"),
    Case("store-age", "bench.read.store_age", "requests on S3 as a table keeps more merged folders",
         bench=("--work", "{out}/store-age-work", "--out", "{out}"),
         smoke=("--kept", "120,240", "--whole-pages", "1", "--work", "{work}", "--out", "{out}"),
         json="store_age", chart=False),
    Case("age", "bench.read.age", "each recurring job's cost as a followed table ages (300 to 3,000 flushes)",
         bench=("--out", "{out}"), smoke=("--smoke", "--out", "{out}", "--work", "{work}"), json="age"),
)
