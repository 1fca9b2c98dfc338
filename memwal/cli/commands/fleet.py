"""``memwal fleet plan|run|status SOURCE...``: many tables, found from sources, ranked by debt.

A SOURCE is a table URI, a root URI (every MemWAL table below it, at any depth, never through
a link), or ``namespace:dir`` / ``namespace:rest`` (a Lance Namespace; its properties with
``--namespace-property KEY=VALUE``); ``--tables-file`` adds a file of table URIs.

- ``plan``: read only; every discovered table with its debt, jobs and reasons, highest first.
- ``run``: the plan's work in debt order, ``--workers`` tables at a time, plan again between
  rounds, nothing started after ``--max-seconds``.
- ``status``: the fleet ranked by debt with each table's last run, bounded (``--top``); with
  ``--state`` and no source, the last plan any machine made (it plans nothing).
- ``pause``, ``resume``, ``cancel``, ``failures``: the operator's controls
  (:mod:`memwal.cli.commands.fleet_controls`).

``--state URI`` (``s3://``, ``az://``, ``gs://`` or a folder) is the fleet's shared state
(:mod:`memwal.fleet.state`): the probe cache, the last plan and its history, the run log and
the pauses, read and written with the same ``--storage-option`` as the sources.

Exit codes: 0 done (held leases and waiting GCs are reasons, not failures); 1 when a table
failed or could not be read (each named on stderr), and for ``status --check`` when a table is
past a service level; 2 for bad input (a source with no MemWAL table included), with nothing
written; 3 for ``run`` when an operator cancelled a table's work and none failed (each named on
stderr). A policy key or a pause that matches no table is a ``memwal: warning:`` line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from memwal.actions.options import ENGINES
from memwal.cli.commands.common import (
    EXIT_FAILED,
    EXIT_LEASE,
    EXIT_OK,
    Subparsers,
    check_output_file,
    common_options,
    emit,
    parse_storage_options,
    positive_int,
)
from memwal.cli.commands.fleet_controls import add_verbs, state_of
from memwal.cli.commands.following import add_fleet_follow_arguments, ended, follow_options_from, quiet_jobs
from memwal.cli.options import add_engine_addresses
from memwal.core.text import one_line

DEFAULT_TOP = 50


def add_parsers(sub: Subparsers) -> None:
    help_text = "many tables: discover them from sources, rank them by debt, maintain them under a budget"
    fleet = sub.add_parser("fleet", help=help_text, description=help_text)
    verbs = fleet.add_subparsers(dest="verb", required=True, metavar="VERB")
    plan = _verb(verbs, "plan", "every discovered table with its debt, its jobs and why (reads only)")
    plan.set_defaults(run=run_plan)
    run = _verb(verbs, "run", "run the planned work in debt order under a budget, planning again between rounds")
    run.add_argument("--workers", type=positive_int, default=2, metavar="N", help="tables run at once (default 2)")
    run.add_argument("--max-seconds", type=float, metavar="S", help="start no table after S seconds")
    run.add_argument("--max-rounds", type=positive_int, metavar="N", help="plan and run at most N rounds")
    run.add_argument("--jobs", metavar="LIST", help="only these jobs (comma-separated; default: all)")
    run.add_argument("--engine", choices=ENGINES, default=None,
                     help="local: tables on threads here; spark or ray: small tables as tasks of one job, "
                          "large ones through the engine's per-table engines (default local)")
    add_engine_addresses(run)
    run.add_argument("--dry-run", action="store_true", help="one round of every planned job's dry run")
    add_fleet_follow_arguments(run)
    run.set_defaults(run=run_run)
    status = _verb(verbs, "status", "the fleet ranked by debt, with each table's last run and problems")
    status.add_argument("--top", type=positive_int, default=DEFAULT_TOP, metavar="N",
                        help=f"list the N tables with the most debt (default {DEFAULT_TOP}); all are counted")
    status.add_argument("--html", metavar="PATH", help="also write the fleet page to PATH")
    status.add_argument("--check", action="store_true",
                        help="exit 1 when a table is past a service level (each named on stderr): for scripts and "
                             "monitors")
    status.set_defaults(run=run_status)
    add_verbs(verbs)


def _verb(verbs: Subparsers, name: str, help_text: str) -> argparse.ArgumentParser:
    p = verbs.add_parser(name, parents=[common_options()], help=help_text, description=help_text)
    p.add_argument("sources", metavar="SOURCE", nargs="*", help="table URI, root URI, namespace:dir or namespace:rest")
    p.add_argument("--tables-file", metavar="F", help="file with one table URI per line (# comments; - for stdin)")
    p.add_argument("--policy", metavar="FILE", help="policy file (YAML or JSON): thresholds, weights, batch, options")
    p.add_argument("--namespace-property", action="append", default=[], metavar="KEY=VALUE",
                   help="a Lance Namespace property (root=..., uri=...; repeatable)")
    p.add_argument("--plan-workers", type=positive_int, default=8, metavar="N",
                   help="tables probed at once while planning (default 8)")
    p.add_argument("--cache", metavar="PATH|URI", help="remember what each table's manifest and listings showed, "
                   "in this file or object (s3://, az://, gs://: shared by every machine): an unchanged table is then "
                   "not read again (a bad one is ignored)")
    p.add_argument("--state", metavar="URI", help="the fleet's shared state (a folder or s3://, az://, gs:// URI): "
                   "cache, last plan and history, run log, pauses")
    return p


def _inputs(args: argparse.Namespace, *, optional: bool = False) -> tuple[list[str], list[str], Any, dict[str, str]]:
    """The sources (each URI normalised once), the tables file's among them, the policy and
    the namespace properties, all checked before anything is read (the cache's folder too;
    ``optional``: no source is fine)."""
    from memwal.backfill import read_tables_file, table_uri_problem
    from memwal.errors import BadInputError
    from memwal.fleet.policy import load_policy
    from memwal.fleet.sources import NAMESPACE_PREFIX
    from memwal.store.uri import normalise_table_uri

    sources = [s.strip() for s in args.sources]
    for s in sources:
        problem = None if s.startswith(NAMESPACE_PREFIX) else (table_uri_problem(s) if s else "empty source")
        if problem:
            raise BadInputError(problem)
    listed = [normalise_table_uri(t) for t in read_tables_file(args.tables_file)] if args.tables_file else []
    sources = [s if s.startswith(NAMESPACE_PREFIX) else normalise_table_uri(s) for s in sources]
    sources += [t for t in listed if t not in sources]
    if not sources and not optional:
        raise BadInputError("no source given: pass table or root URIs, namespace:dir|rest, or --tables-file")
    if args.cache and "://" not in args.cache:
        check_output_file("--cache", args.cache)
    policy = load_policy(args.policy)
    properties = parse_storage_options(args.namespace_property)
    return list(dict.fromkeys(sources)), listed, policy, properties


def _planned(args: argparse.Namespace, sources: list[str], listed: list[str], policy: Any,
             properties: dict[str, str], *, top: int = DEFAULT_TOP) -> Any:
    """One plan with the shared state (cache, pauses, waits; the report saved)."""
    from memwal.fleet.plan import check_sources_yield_tables
    from memwal.fleet.shared import plan_shared
    from memwal.fleet.sources import discover

    def found(known: frozenset[str], exclude: frozenset[str]) -> Any:
        return discover(sources, storage_options=args.storage_options, namespace_properties=properties, known=known,
                        exclude=exclude, listed=listed)

    planned = plan_shared(found, policy, state=state_of(args), cache_location=args.cache,
                          storage_options=args.storage_options, top=top, workers=args.plan_workers, partial=None)
    check_sources_yield_tables(planned.plan, sources)
    _warn(planned.unmatched)
    return planned


def _warn(lines: list[str]) -> None:
    """Input that matched nothing (a policy key, a pause): one ``memwal: warning:`` line each."""
    for line in lines:
        print(f"memwal: warning: {one_line(line)}", file=sys.stderr)


def run_plan(args: argparse.Namespace) -> int:
    sources, listed, policy, properties = _inputs(args)
    planned = _planned(args, sources, listed, policy, properties)
    doc = {**planned.plan.to_dict(), "unmatched": planned.unmatched}
    emit(args, doc, lambda: render_plan(doc))
    return _problems(doc["problems"])


def run_run(args: argparse.Namespace) -> int:
    import logging

    from memwal.fleet.cache import ProbeCache
    from memwal.fleet.run import run_fleet

    sources, listed, policy, properties = _inputs(args)
    state = state_of(args)
    cache = ProbeCache.load(args.cache, args.storage_options) if args.cache else (
        ProbeCache.of_state(state) if state is not None else ProbeCache())
    if args.max_seconds is not None and not args.max_seconds > 0:
        from memwal.errors import BadInputError

        raise BadInputError(f"--max-seconds {args.max_seconds}: expected a positive number of seconds")
    follow = follow_options_from(args)
    if not args.debug:  # per-job lease and commit logs would drown the fleet's own lines
        logging.getLogger("memwal").setLevel(logging.WARNING)
    fleet: dict[str, Any] = dict(policy=policy, storage_options=args.storage_options, namespace_properties=properties,
                                 workers=args.workers, max_seconds=args.max_seconds, jobs=_jobs(args.jobs),
                                 engine=args.engine or "local", dry_run=args.dry_run, max_rounds=args.max_rounds,
                                 cache=cache, state=state, listed=listed)
    if follow is not None:
        return _follow(args, sources, follow, fleet)
    result = run_fleet(sources, notify=_progress, **fleet)
    if args.cache and not args.dry_run:
        cache.save(args.cache, args.storage_options)
    doc = result.to_dict()
    emit(args, doc, lambda: render_run(doc))
    for failed in result.failed:
        line = f"{failed.table}: {failed.error or ''}"
        print(f"memwal: error: {one_line(line)}", file=sys.stderr)  # the path escaped too, as plan and status do
    cancelled = [c for r in result.results if (c := r.cancelled) is not None]
    for c in cancelled:
        print(f"memwal: error: {one_line(c.summary)}", file=sys.stderr)
    return _problems(doc["problems"]) or (EXIT_FAILED if result.failed else EXIT_LEASE if cancelled else EXIT_OK)


def _follow(args: argparse.Namespace, sources: list[str], follow: Any, fleet: dict[str, Any]) -> int:
    """``fleet run --follow``: the fleet's rounds until SIGTERM or SIGINT (memwal.follow.fleet)."""
    from memwal.follow import StopSignals, follow_fleet

    quiet_jobs(args.debug)
    with StopSignals() as stop:
        tally = follow_fleet(sources, follow, stop=stop, notify=_progress, **fleet)
    if args.cache:
        fleet["cache"].save(args.cache, args.storage_options)
    emit(args, tally.to_dict(), tally.line)
    return ended(tally)


def run_status(args: argparse.Namespace) -> int:
    from memwal.errors import BadInputError
    from memwal.fleet.page import write_fleet_page
    from memwal.fleet.report import last_report
    from memwal.fleet.state import CONTROLS, RUNS
    from memwal.fleet.status import FleetStatus, live, publish

    if args.html:
        check_output_file("--html", args.html)
    sources, listed, policy, properties = _inputs(args, optional=bool(args.state))
    state = state_of(args)
    if sources:
        planned = _planned(args, sources, listed, policy, properties, top=args.top)
        publish(planned.plan, planned.report)
        history = last_report(state)[1] if state is not None else []
        report, runs, controls = planned.report, planned.runs, planned.controls if state is not None else None
    else:
        last, history = last_report(state)
        if last is None:
            raise BadInputError(f"--state {args.state}: no plan there yet (run memwal fleet plan SOURCE... --state "
                                f"{args.state})")
        report, runs, controls = last, state.read(RUNS)[0], state.read(CONTROLS)[0]
    st = FleetStatus(live(report, runs, controls, state.uri if state is not None else ""), tuple(history))
    if args.html:
        write_fleet_page(args.html, st, controls=controls or {}, state_uri=state.uri if state is not None else None)
    doc = st.to_dict()
    emit(args, doc, lambda: st.render() + (f"\nfleet page: {args.html}" if args.html else ""))
    failed = _problems(doc["problems"])
    return (_breached(st.report) or failed) if args.check else failed


def _breached(report: Any) -> int:
    """``--check``: each table past a service level on stderr; exit 1 when there is one."""
    breaches = report.get("breaches") or {}
    named = [b for b in breaches.get("named") or [] if isinstance(b, dict)]
    for b in named:
        print(f"memwal: error: {one_line(str(b.get('table')))}: past its service level "
              f"{one_line(str(b.get('slo')))}: {b.get('value')} (target {b.get('target')})", file=sys.stderr)
    tables = breaches.get("tables")
    more = tables - len({b.get("table") for b in named}) if isinstance(tables, int) else 0
    if more > 0:
        print(f"memwal: error: and {more} more tables past a service level", file=sys.stderr)
    return EXIT_FAILED if named or more > 0 else EXIT_OK


def _jobs(text: str | None) -> list[str] | None:
    from memwal.cycle import parse_jobs

    return parse_jobs(text) if text else None


def _problems(problems: list[dict[str, str]] | list[str]) -> int:
    for p in problems:
        line = f"{p['table']}: {p['error']}" if isinstance(p, dict) else p
        print(f"memwal: error: {one_line(line)}", file=sys.stderr)
    return EXIT_FAILED if problems else EXIT_OK


def _progress(event: str, value: Any) -> None:
    if event == "unmatched":
        _warn(value)
    if event == "table" and sys.stderr.isatty():
        print(one_line(f"memwal fleet: {value.table}: {'failed' if value.failed else 'ok'}"), file=sys.stderr)


def render_plan(doc: dict[str, Any], top: int = DEFAULT_TOP) -> str:
    tables = doc["tables"]
    busy = [t for t in tables if t["jobs"]]
    lines = [f"{doc['discovered']} tables, {len(busy)} with work, debt {doc['debt']:g}; {len(doc['skipped'])} skipped, "
             f"{len(doc['problems'])} problems; {doc['requests']} requests in {doc['seconds']:.2f}s"]
    for t in busy[:top]:
        lines.append(f"  {t['debt']:>8g}  {t['table']}  {','.join(t['jobs'])}")
        lines += [f"            {r}" for r in t["reasons"]]
    if len(busy) > top:
        lines.append(f"  ... and {len(busy) - top} more tables with work")
    lines += [f"  skipped {s['path']}: {s['reason']}" for s in doc["skipped"][:top]]
    return "\n".join(lines)


def render_run(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    ran = ", ".join(f"{n} {k}" for k, n in s.items() if n)
    if not ran:  # an idle fleet: say so, and what the plan found
        plan = doc.get("plan") or {}
        found = ", ".join(f"{n} {k}" for k, n in (plan.get("by_status") or {}).items() if n)
        ran = f"nothing to run ({plan.get('discovered', 0)} tables" + (f": {found}" if found else "") + ")"
    lines = [f"{doc['rounds']} round{'s' * (doc['rounds'] != 1)} in {doc['seconds']:.1f}s on {doc['engine']}"
             + (" (dry run)" if doc["dry_run"] else "") + ": " + ran]
    for r in doc["runs"]:
        jobs = ", ".join(f"{j['job']} {j['status']}" + (f" ({j['summary'] or j['error']})" if
                                                       j["status"] != "done" and (j['summary'] or j['error']) else "")
                         for j in r["jobs"])
        lines.append(f"  round {r['round']}  {r['table']}: {jobs}")
    if doc["not_started"]:
        lines.append(f"  not started before --max-seconds: {', '.join(doc['not_started'])}")
    return "\n".join(lines)
