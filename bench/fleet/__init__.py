"""Fleets: many tables under one runner, a budget and a shared state.

- ``plan``: ``memwal fleet plan`` on 100-1,000 tables (time), its requests on moto and Azurite (``fleet_plan.json``);
- ``sim``: 40 tables under live writers, the fleet runner against a fixed schedule (``fleet.json``);
  ``overload``: the same at 2-s ticks, by service level and by debt alone;
- ``events``: an idle fleet's requests a day, woken by events against polling (``fleet_events.json``);
- ``aged``: a round over aged tables, local against a Ray cluster on loopback (``fleet_aged.json``);
- ``follow``: ``memwal fleet run --follow`` beside live pylance writers, its CPU a flush against one
  ``merge_insert`` (``fleet_follow.json``).
"""

from bench.cases import Case

CASES = (
    Case("plan", "bench.fleet.plan", "memwal fleet plan on 100-1,000 tables; its requests on moto and Azurite",
         bench=("--work", "{out}/fleet-work", "--out", "{out}"),
         smoke=("--work", "{work}", "--sizes", "4,8", "--runs", "1", "--store-tables", "2", "--out", "{out}"),
         json="fleet_plan"),
    Case("sim", "bench.fleet.sim", "a fleet under live writers: the fleet runner against a fixed schedule",
         bench=("--work", "{out}/fleet-sim", "--out", "{out}"),
         smoke=("--work", "{work}", "--tables", "5", "--hot", "1", "--idle", "2", "--tick", "2", "--load-ticks",
                "3", "--cooldown-ticks", "2", "--every", "2", "--hot-rate", "2", "--cold-rate", "1",
                "--writer-start-seconds", "4", "--out", "{out}"),
         json="fleet"),
    Case("overload", "bench.fleet.sim", "the simulation over capacity (2-s ticks), by service level and by debt",
         bench=("--work", "{out}/fleet-sim", "--tick", "2", "--phases", "fleet,fleet-debt",
                "--out", "{out}/overload"), json="fleet"),
    Case("events", "bench.fleet.events", "an idle fleet's requests a day: events against polling",
         bench=("--out", "{out}"), smoke=("--tables", "4", "--cycles", "2", "--out", "{out}"), json="fleet_events"),
    Case("aged", "bench.fleet.aged", "a fleet's round over aged tables, local against a Ray cluster",
         bench=("--work", "{out}/fleet-aged-work", "--out", "{out}"),
         smoke=("--flushes", "30", "--tables", "2", "--runs", "1", "--work", "{work}", "--out", "{out}"),
         json="fleet_aged", chart=False),
    Case("follow", "bench.fleet.follow", "a fleet follower beside live pylance writers: its CPU a flush against one "
         "merge_insert", bench=("--work", "{out}/fleet-follow", "--out", "{out}"),
         smoke=("--work", "{work}", "--tables", "2", "--every", "2", "--minutes", "1.2", "--out", "{out}"),
         json="fleet_follow"),
)
