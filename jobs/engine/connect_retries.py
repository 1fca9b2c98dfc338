"""How long a Spark Connect client retries a server it cannot reach: PySpark's own retry policy
(:mod:`pyspark.sql.connect.client.retries`), bounded in time for the whole client.

Kept apart from :mod:`memwal.spark.engine.session` so that only a Connect client imports
PySpark's Connect client (and gRPC): a classic or local job never does.
"""

from __future__ import annotations

import time

from pyspark.sql.connect.client.retries import DefaultPolicy, RetryPolicyState


class BoundedRetries(DefaultPolicy):
    """PySpark's default retry policy (exponential backoff from 50 ms, times 4, on the errors it
    retries) bounded in time rather than in count: a call retries until its next wait would take
    it past ``seconds`` since its first attempt.

    The bound is the client's, not each call's: a call that gave up marks the server lost for
    the next ``seconds``, and every call in that time makes its one attempt only. A job that
    found the server gone then fails at once on what follows (PySpark's release of the plan in
    its thread pool, its clean-up at exit, our own ``stop``), instead of spending the budget again
    on each (issue 83: four budgets, one after the other). After that time a call retries again
    (a follower's next job, once the server may be back).
    """

    def __init__(self, seconds: float) -> None:
        cap = int(1000 * min(60.0, max(0.2, seconds / 4)))
        super().__init__(max_retries=None, max_backoff=cap, max_server_retry_delay=cap)
        self.seconds = seconds
        #: Until when (monotonic) the server counts as lost: calls make one attempt.
        self.lost_until = 0.0

    def to_state(self) -> RetryPolicyState:
        return _BoundedState(self)


class _BoundedState(RetryPolicyState):
    """One call's retries under :class:`BoundedRetries` (PySpark makes one at each call)."""

    def __init__(self, policy: BoundedRetries) -> None:
        super().__init__(policy)
        self._bounded = policy
        self._began = time.monotonic()  # made just before the call's first attempt

    def next_attempt(self, exception: BaseException | None = None) -> int | None:
        now = time.monotonic()
        if now < self._bounded.lost_until:
            return None
        wait = super().next_attempt(exception)
        if wait is None or now - self._began + wait / 1000 > self._bounded.seconds:
            self._bounded.lost_until = now + self._bounded.seconds
            return None
        return wait


__all__ = ["BoundedRetries"]
