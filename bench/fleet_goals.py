"""The fleet benches' goals (issue 39), in one place: the plan bench, the simulation and their
charts all read them from here."""

#: ``memwal fleet plan`` over the largest fleet size, cold, in seconds.
GOAL_SECONDS = 10.0
#: Planning time per table at the largest size over the smallest: at most this (linear).
GOAL_LINEAR = 1.25
#: Requests an idle table costs a warm plan (and a fleet tick), at most.
GOAL_IDLE_REQUESTS = 4.0
#: The simulation's p99 merge lag, in ticks.
GOAL_P99_TICKS = 2.0
#: Within a class of tables, the most-lagged table's lag over the least-lagged's, at most.
GOAL_FAIRNESS = 2.0
