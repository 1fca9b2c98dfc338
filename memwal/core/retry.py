"""The one retry primitive: redo a piece of work after it lost a race, with backoff.

Merges, compactions and lease acquisitions all follow the same shape (SlateDB's
compare-and-swap loop): do the work against what was read, and when a concurrent writer
won, read again and redo it. :func:`after_conflict` is that loop, on tenacity, so the
backoff, the attempt limit and the give-up error are decided once.

A conflict is recognised by exception type: our :class:`~memwal.errors.ConflictError`
and :class:`~memwal.errors.PreconditionFailedError` (a conditional write lost), and
Lance's ``CommitConflictError``. pylance 14 has no type for three conflicts it reports as a
plain ``OSError``: a stale progress marker ("Stale SSTable compaction"), a preempted
rewrite ("Retryable commit conflict") and a bound ``merge_insert`` that may not retry ("Too
many concurrent writers"); :func:`is_conflict` matches those messages, in this one place.

The same module holds the other policy, for a request that failed on the way rather than
lost a race: :func:`after_transient` sends it again after a 503, a throttle, a timeout or a
dropped connection (what is transient is the caller's to say: the object-store layer
classifies obstore's errors), with jittered backoff and a bounded number of attempts.
object_store's own retries are switched off for our stores, so this is the one retry.

The third, :func:`while_busy`, is a wait rather than a redo: try again every few seconds
while someone else holds what we need (a lease, a running GC), until a deadline on the
process's clock (:mod:`memwal.core.clock`), so a test moves time by hand.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_fixed,
    wait_random_exponential,
)

from memwal.core import clock as clocks
from memwal.errors import ConflictError, NotFoundError, PreconditionFailedError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Messages of the conflicts pylance 14 raises as a plain OSError (no type of its own); the
#: last one is a ``merge_insert`` bound to its read version with no retries of its own
#: (``conflict_retries(0)``) that a commit since then touched.
_UNTYPED_CONFLICTS = ("stale sstable compaction", "retryable commit conflict", "too many concurrent writers")


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` means a concurrent writer won, so redoing the work may succeed."""
    from lance.commit import CommitConflictError  # pylance loads only when a commit failed

    if isinstance(exc, ConflictError | PreconditionFailedError | CommitConflictError):
        return True
    return isinstance(exc, OSError | RuntimeError) and any(m in str(exc).lower() for m in _UNTYPED_CONFLICTS)


def vanished(exc: BaseException) -> bool:
    """Whether ``exc`` says an object was not found: a Lance read or commit that met a file
    or version a concurrent GC removed. Callers decide whether the table moved meanwhile
    (then it is a lost race: :class:`~memwal.errors.StateMovedError`) or not (a failure)."""
    return isinstance(exc, NotFoundError) or "not found" in str(exc).lower()


def after_conflict(
    work: Callable[[int], T],
    *,
    what: str,
    attempts: int = 6,
    base_seconds: float = 0.2,
    max_seconds: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``work(attempt)`` until it succeeds, redoing it after each conflict (attempt 1, 2, ...).

    ``work`` re-reads what it needs on every attempt after the first (it knows which one it
    is). Any other exception propagates at once. After ``attempts`` conflicts a
    :class:`ConflictError` names ``what`` and the last conflict (exit code 3: a lost race).
    """

    def log_retry(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        first = str(exc).strip().splitlines()[0] if exc and str(exc).strip() else type(exc).__name__
        log.warning("%s: attempt %d lost a race (%s); redoing it in %.1fs", what, state.attempt_number, first,
                    state.next_action.sleep if state.next_action else 0.0)

    retrying = Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_random_exponential(multiplier=base_seconds, max=max_seconds),
        retry=retry_if_exception(is_conflict),
        before_sleep=log_retry,
        sleep=sleep,
        reraise=True,
    )
    try:
        return retrying(lambda: work(retrying.statistics.get("attempt_number", 1)))
    except Exception as exc:
        if is_conflict(exc) and not isinstance(exc, ConflictError):
            raise ConflictError(f"{what}: concurrent writers won {attempts} times in a row; rerun it") from exc
        raise


def after_transient(
    work: Callable[[], T],
    *,
    what: str,
    is_transient: Callable[[BaseException], bool],
    attempts: int = 5,
    base_seconds: float = 0.1,
    max_seconds: float = 5.0,
    describe: Callable[[BaseException], str] = lambda exc: type(exc).__name__,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``work()`` until it succeeds, sending it again after each transient failure.

    ``work`` must be safe to repeat (a read, a plain put, a delete, or a conditional put
    whose caller tells a lost race from its own earlier attempt having landed). A failure
    that is not transient propagates at once; after ``attempts`` transient ones the last
    propagates (the caller names the attempts in its message). ``describe`` turns a failure
    into the words logged before each new attempt (never a secret, never a response body).
    """

    def log_retry(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning("%s failed (attempt %d/%d): %s; trying again in %.1fs", what, state.attempt_number, attempts,
                    describe(exc) if exc else "?", state.next_action.sleep if state.next_action else 0.0)

    retrying = Retrying(
        stop=stop_after_attempt(max(1, attempts)),
        wait=wait_random_exponential(multiplier=base_seconds, max=max_seconds),
        retry=retry_if_exception(is_transient),
        before_sleep=log_retry,
        sleep=sleep,
        reraise=True,
    )
    return retrying(work)


def while_busy(
    work: Callable[[], T],
    *,
    busy: Callable[[BaseException], bool],
    timeout_seconds: float,
    poll_seconds: float = 1.0,
    on_first_wait: Callable[[BaseException], None] | None = None,
    clock: clocks.Clock | None = None,
    sleep: Callable[[float], None] | None = None,
) -> T:
    """``work()`` until it succeeds, trying again every ``poll_seconds`` while it fails with
    an error ``busy`` accepts, for up to ``timeout_seconds`` of ``clock`` (the process's).

    Past the deadline the last busy error propagates (its caller names the wait). Any
    other error propagates at once. ``on_first_wait`` says once why the job is waiting;
    ``sleep`` (default: wait on the clock) is how a test lets time pass.
    """
    clock = clock or clocks.current()
    deadline = clock() + timeout_seconds
    never = threading.Event()

    def wait_on_clock(seconds: float) -> None:
        clock.wait_until(clock() + seconds, never)

    def past_deadline(state: RetryCallState) -> bool:
        return clock() + poll_seconds > deadline

    def before_sleep(state: RetryCallState) -> None:
        failed = state.outcome.exception() if state.outcome is not None else None
        if state.attempt_number == 1 and on_first_wait is not None and failed is not None:
            on_first_wait(failed)

    retrying = Retrying(
        stop=past_deadline,
        wait=wait_fixed(poll_seconds),
        retry=retry_if_exception(busy),
        before_sleep=before_sleep,
        sleep=sleep or wait_on_clock,
        reraise=True,
    )
    return retrying(work)
