"""Spark: where the Spark engine's time goes, and what its driver writes.

- ``breakdown``: the Spark merge split by phase in a warm session, against local (``spark_breakdown.json``);
- ``timeline``: a whole ``memwal merge --engine spark`` process, function by function (``spark_timeline.json``);
- ``driver-share``: the driver's share of a Spark merge's writes, both commit paths (``driver_share.json``);
- ``connect``: a merge over Spark Connect against a classic session and the local engine, interleaved,
  and what the driver (or the Connect client) writes (by hand: it starts a Spark Connect server).
"""

from bench.cases import Case

CASES = (
    Case("breakdown", "bench.spark.breakdown", "the Spark merge by phase, against local, 400k and 2M rows",
         bench=("--out", "{out}"), json="spark_breakdown", chart=False),
    Case("timeline", "bench.spark.timeline", "a whole Spark merge process against local, function by function",
         bench=("--out", "{out}"), json="spark_timeline"),
    Case("driver-share", "bench.spark.driver_share", "the driver's share of a Spark merge's writes",
         bench=("--cluster", "--out", "{out}"), smoke=("--smoke", "--out", "{out}", "--work", "{work}"),
         json="driver_share"),
    Case("connect", "bench.spark.connect", "a merge over Spark Connect against classic and local, and what "
         "the client writes", bench=None, json="spark_connect"),
)
