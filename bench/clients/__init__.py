"""Clients: the MemWAL clients users run, beside memwal.

- ``peers``: memwal against lance-context's own merger, and what each client's readers gain (``peers.json``);
- ``observed``: what pylance's and lance-context's writers do when someone else writes their shard
  manifest: the observations behind the drain protocol, decision 0025 (``clients_observed.json``).

The steady state, where every client reads under a writer that never stops, is ``read steady``.
"""

from bench.cases import Case

CASES = (
    Case("peers", "bench.clients.peers", "memwal against lance-context's merger; the readers' time after each",
         bench=("--work", "{out}/peers-work", "--out", "{out}"), json="peers"),
    Case("observed", "bench.clients.observed", "the writers' behaviour behind the drain protocol (by hand)",
         json="clients_observed", chart=False),
)
