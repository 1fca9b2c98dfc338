"""The Spark Connect client's retry budget (:mod:`memwal.spark.engine.connect_retries`), on a
clock moved by the waits PySpark's own ``Retrying`` would sleep: bounded in time, and the
client's, not each call's (issue 83: four calls of one job each retried for the whole budget).
"""

from __future__ import annotations

import pytest
from memwal.spark.engine import connect_retries
from memwal.spark.engine.connect_retries import BoundedRetries


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def retried(policy: BoundedRetries, clock: Clock) -> list[int]:
    """The waits of one call that never succeeds, each slept on ``clock``."""
    state = policy.to_state()
    waits = []
    while (wait := state.next_attempt(None)) is not None:
        waits.append(wait)
        clock.now += wait / 1000
    return waits


@pytest.mark.parametrize("seconds", [0.0, 2.0, 12.0, 120.0])
def test_a_call_retries_within_the_budget_and_the_next_call_not_at_all(monkeypatch: pytest.MonkeyPatch,
                                                                        seconds: float) -> None:
    clock = Clock()
    monkeypatch.setattr(connect_retries.time, "monotonic", clock)
    policy = BoundedRetries(seconds)
    waits = retried(policy, clock)
    assert sum(waits) / 1000 <= seconds
    assert seconds == 0 or sum(waits) / 1000 >= seconds / 2  # PySpark's backoff used, not one attempt
    assert retried(policy, clock) == []  # the server counts as lost: one attempt only
    clock.now += seconds + 0.001
    again = retried(policy, clock)  # after that time a call retries again (a follower's next job)
    assert bool(again) == (seconds > 0) and sum(again) / 1000 <= seconds
