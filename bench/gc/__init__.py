"""GC: collecting merged generations, on a disk and on object stores.

- ``many``: GC of 10,000 merged generations against ``rm -rf`` and threaded unlinks (``gc_many.json``);
- ``stores``: requests per deleted object and per shard on moto and Azurite, GC against the raw
  floor of one listing and batched deletes (``object_stores.json``).
"""

from bench.cases import Case

CASES = (
    Case("many", "bench.gc.many", "GC of 10,000 generations against rm -rf and threaded unlinks",
         bench=("--work", "{out}/gc-work", "--generations", "10000", "--runs", "3", "--floor", "--timers",
                "--out", "{out}"),
         smoke=("--work", "{work}", "--generations", "40", "--shards", "2", "--floor", "--out", "{out}"),
         json="gc_many", chart=False),
    Case("stores", "bench.gc.stores", "requests on moto and Azurite: GC per deleted object, status per shard",
         bench=("--work", "{out}/os-work", "--generations", "1000", "--out", "{out}"),
         smoke=("--work", "{work}", "--generations", "8", "--azure-generations", "4", "--shards", "2",
                "--out", "{out}"),
         json="object_stores", chart=False),
)
