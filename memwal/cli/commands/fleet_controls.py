"""``memwal fleet pause|resume|cancel|failures``: the operator's controls over a fleet.

- ``pause TARGET --state URI --by WHO --reason WHY``: withhold the jobs of a table, a source,
  or every table a glob matches, until resumed (recorded in the state with who, why, when); a
  target that matches no table the fleet knows, and is no Lance table, is refused (exit 2), and
  so is a fleet-wide pause while pauses are unauthenticated (no ``MEMWAL_FLEET_KEY``) unless
  ``--yes`` confirms it;
- ``resume TARGET --state URI --by WHO --reason WHY``: lift a pause set by ``pause``; a target
  not paused in the state is refused (exit 2: a pause written in the policy file is lifted by
  editing the file);
- ``cancel TABLE --by WHO --reason WHY [--wait [S]]``: ask the table's running jobs to stop
  where nothing is half-done, releasing their leases (:mod:`memwal.lease.cancel`); logged in
  ``--state``. It says, for each job asked, whether it has stopped; ``--wait`` waits until each
  has (or S seconds passed) and says how each ended (``cancelled``, or finished first); a
  TABLE that is no Lance table is refused (exit 2);
- ``failures [TABLE] --state URI``: the failure history the fleet's runs left, with reasons.

Targets are recorded as discovery names tables (a relative path made absolute).

Exit codes: 0 done; 1 ``cancel --wait``: a job asked had not stopped when the wait ended (it
still may, at its next safe point); 2 bad input (who or why missing, no state, a pause,
resume or cancel that names nothing), nothing written.
"""

from __future__ import annotations

import argparse
from typing import Any

from memwal.cli.commands.common import EXIT_FAILED, EXIT_OK, Subparsers, common_options, emit

#: How long ``fleet cancel --wait`` waits when given no number of seconds.
DEFAULT_WAIT = 600.0


def add_verbs(verbs: Subparsers) -> None:
    for name, help_text, target in (
            ("pause", "withhold the jobs of a table, a source or a glob of tables until resumed", "TARGET"),
            ("resume", "lift a pause made with memwal fleet pause", "TARGET"),
            ("cancel", "stop a table's running jobs where nothing is half-done (their leases released)", "TABLE")):
        p = verbs.add_parser(name, parents=[common_options()], help=help_text, description=help_text)
        p.add_argument("target", metavar=target, help="a table URI" + (", a source, or a glob over table URIs"
                                                                       if target == "TARGET" else ""))
        p.add_argument("--state", metavar="URI", required=name != "cancel",
                       help="the fleet's shared state (where the change is recorded)")
        p.add_argument("--by", required=True, metavar="WHO", help="who you are (recorded)")
        p.add_argument("--reason", required=True, metavar="WHY", help="why (recorded)")
        if name == "pause":
            p.add_argument("--yes", action="store_true",
                           help="confirm a fleet-wide pause (every table) while pauses are unauthenticated "
                                "(no MEMWAL_FLEET_KEY)")
        if name == "cancel":
            p.add_argument("--wait", type=float, nargs="?", const=DEFAULT_WAIT, metavar="S",
                           help=f"wait up to S seconds (default {DEFAULT_WAIT:g}) until every job asked has stopped, "
                                "and say how each ended")
        p.set_defaults(run=run_control, verb=name)
    p = verbs.add_parser("failures", parents=[common_options()], help="the failure history of the fleet's tables",
                         description="the failure history of the fleet's tables, newest first, with reasons")
    p.add_argument("target", metavar="TABLE", nargs="?", help="one table (default: every table)")
    p.add_argument("--state", metavar="URI", required=True, help="the fleet's shared state")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="at most N failures (default 50)")
    p.set_defaults(run=run_failures)


def state_of(args: argparse.Namespace) -> Any:
    """The ``--state`` folder (None without one)."""
    from memwal.fleet.state import FleetState

    return FleetState(args.state, args.storage_options) if getattr(args, "state", None) else None


def run_control(args: argparse.Namespace) -> int:
    from memwal.core import clock as clocks
    from memwal.errors import BadInputError
    from memwal.fleet import control_log as controls
    from memwal.fleet import targets
    from memwal.history import cancel_effect

    now = clocks.current()()
    by, reason, target = args.by.strip(), args.reason.strip(), args.target.strip()
    if not by or not reason or not target:
        raise BadInputError("say what (TARGET), who you are (--by) and why (--reason): all are recorded")
    target = controls.canonical_target(target) if args.verb != "resume" else target
    state = state_of(args)
    doc: dict[str, Any]
    code = EXIT_OK
    if args.verb == "pause":
        targets.check_target(state, target, is_table=lambda uri: targets.is_table(uri, args.storage_options),
                             confirmed=args.yes)
        controls.pause(state, target, by=by, reason=reason, now=now)
        doc = {"paused": target, "by": by, "reason": reason, "at": now}
        text = f"paused {target} (by {by}: {reason}); memwal fleet resume {target} --state {args.state} lifts it"
    elif args.verb == "resume":
        controls.resume(state, target, by=by, reason=reason, now=now)
        doc = {"resumed": target, "by": by, "reason": reason, "at": now}
        text = f"resumed {target}"
    else:
        if not targets.is_table(target, args.storage_options):
            raise BadInputError(f"{target}: no Lance table there: nothing to cancel")
        doc, text = _cancel(args, target, by, reason, now)
        if state is not None:
            controls.log_action(state, "cancel", target, by=by, reason=reason, now=now)
        if args.wait is not None and any(s["state"] == cancel_effect.RUNNING for s in doc["jobs"]):
            code = EXIT_FAILED  # asked, recorded, but not stopped in time
    emit(args, doc, lambda: text)
    return code


def _cancel(args: argparse.Namespace, table: str, by: str, reason: str, now: float) -> tuple[dict[str, Any], str]:
    from memwal.errors import BadInputError
    from memwal.history import cancel_effect
    from memwal.lease import cancel
    from memwal.store import check_table_uri, open_store

    wait = getattr(args, "wait", None)
    if wait is not None and not wait > 0:
        raise BadInputError(f"--wait {wait:g}: expected a positive number of seconds")
    store = open_store(check_table_uri(table), args.storage_options)
    asked = cancel.ask(store, by, reason, now=now)
    states = (cancel_effect.wait_stopped(store, asked, wait) if wait is not None and asked
              else cancel_effect.progress(store, asked))
    doc = {"table": table, "cancelled": [a.kind for a in asked], "jobs": states, "by": by, "reason": reason,
           "at": now}
    if not asked:
        return doc, f"{table}: no running job holds a lease: nothing to cancel"
    lines = [f"{table}: asked {', '.join(a.kind for a in asked)} to stop at its next safe point"]
    for s in states:
        job = f"{s['kind']}" + (f" (run {s['run_id']})" if s.get("run_id") else "")
        if s["state"] == cancel_effect.RUNNING:
            lines.append(f"  {job}: not stopped yet" + (f" after {wait:g} s" if wait is not None else
                                                         " (--wait waits for it)"))
        elif s.get("outcome") == "cancelled":
            lines.append(f"  {job}: stopped: {s.get('error') or 'cancelled'}")
        else:
            lines.append(f"  {job}: ended {s.get('outcome') or 'without a record'} before it could stop"
                         + (f": {s['error']}" if s.get("error") else ""))
    return doc, "\n".join(lines)


def run_failures(args: argparse.Namespace) -> int:
    from memwal.core.text import one_line
    from memwal.fleet.runs import failures_of
    from memwal.fleet.state import RUNS

    doc, _ = state_of(args).read(RUNS)
    failures = failures_of(doc, args.target)[:max(0, args.limit)]

    def render() -> str:
        from datetime import UTC, datetime

        if not failures:
            return "no failure recorded" + (f" for {args.target}" if args.target else "")
        return "\n".join(f"{datetime.fromtimestamp(float(f.get('at') or 0), UTC):%Y-%m-%d %H:%M}  "
                         f"{one_line(str(f['table']))}  {one_line(str(f.get('job')))}: {one_line(str(f.get('error')))}"
                         for f in failures)

    emit(args, {"failures": failures}, render)
    return EXIT_OK


__all__ = ["add_verbs", "state_of"]
