"""Merge: ``memwal merge`` against the loop users write and the single-pass floors.

- ``main``: loop, ours, floor and Spark on one table, growth in change and base rows, merge
  operators, tiny generations, a job's fixed costs, a cProfile of ours and the floor (``bench.json``);
- ``growth``: the same change set into bases of 1M-16M rows against three floors (``growth.json``);
- ``ops``: merge operators against none, 1M and 4M base rows (``ops_profile.json``);
- ``fixed-costs``: what a run pays before any work, beside its floors (``fixed_costs.json``).
"""

from bench.cases import Case

CASES = (
    Case("main", "bench.merge.main", "loop / ours / floor / spark on one table, growth, operators, tiny",
         bench=("--out", "{out}"), smoke=("--out", "{out}", "--smoke", "--work", "{work}"), json="bench"),
    Case("growth", "bench.merge.growth", "the merge as the base grows, against three single-pass floors",
         bench=("--out", "{out}"), smoke=("--out", "{out}", "--smoke", "--work", "{work}"), json="growth"),
    Case("ops", "bench.merge.ops", "merge operators against the same merge without",
         bench=("--out", "{out}"), smoke=("--out", "{out}", "--smoke", "--work", "{work}"), json="ops_profile",
         chart=False),
    Case("fixed-costs", "bench.merge.fixed_costs", "a run's fixed costs beside their floors (also in main)",
         json="fixed_costs", chart=False),
)
