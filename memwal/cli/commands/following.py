"""``--follow`` for ``memwal cycle`` and ``memwal fleet run``: the flags, the options, the ending.

The flags come from :class:`memwal.follow.options.FollowOptions` (one declaration: flags, keywords
and checks); a follower flag without ``--follow`` is bad input (exit 2), as ``--follow`` with
``--dry-run`` is. A follower's output is its :class:`memwal.follow.result.FollowTally`; its exit
code says why it stopped: 0 when asked (SIGTERM, SIGINT, its time up), 3 when an operator
cancelled its work or its lease was taken over.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import fields
from typing import TYPE_CHECKING

from memwal.cli.options import add_arguments
from memwal.core.text import one_line
from memwal.errors import BadInputError
from memwal.follow.options import FollowOptions

if TYPE_CHECKING:
    from memwal.follow.result import FollowTally


def _own() -> list[str]:
    """The follower's own options (not the common ones every job takes)."""
    from memwal.actions.options import option_names

    return option_names(FollowOptions, common=False)


def add_follow_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--follow", action="store_true",
                   help="keep running: merge as soon as a shard has work, the other jobs on cadences of their own, "
                        "until SIGTERM or SIGINT (then stop at the next safe point and exit 0)")
    add_arguments(p, FollowOptions, common=False)
    p.set_defaults(follow_flags=tuple(_own()))


def add_fleet_follow_arguments(p: argparse.ArgumentParser) -> None:
    """``--follow`` for a fleet run: how often it plans; the jobs' cadences are the policy's, but a
    table's whole GC and catch-up, spaced as a table follower's defaults space them
    (:class:`memwal.fleet.run.Spacing`); the time bound ``--max-seconds``."""
    p.add_argument("--follow", action="store_true",
                   help="keep running: plan again after each round, every --poll-seconds while tables have work, "
                        "backing off to --max-poll-seconds while the fleet is idle, until SIGTERM or SIGINT (then "
                        "stop at the next safe point and exit 0)")
    mine = ("poll_seconds", "max_poll_seconds")
    add_arguments(p, FollowOptions, common=False, skip=tuple(n for n in _own() if n not in mine))
    p.set_defaults(follow_flags=mine)


def follow_options_from(args: argparse.Namespace) -> FollowOptions | None:
    """The follower's options when ``--follow`` was given (None otherwise); a follower flag
    without it is bad input."""
    given = {name: getattr(args, name) for name in args.follow_flags if getattr(args, name, None) is not None}
    if not args.follow:
        if given:
            flags = ", ".join(sorted("--" + n.replace("_", "-") for n in given))
            raise BadInputError(f"{flags} only go{'es' * (len(given) == 1)} with --follow")
        return None
    common = {f.name: getattr(args, f.name, None) for f in fields(FollowOptions) if f.name not in _own()}
    return FollowOptions.from_kwargs(**{**common, **given})


def quiet_jobs(debug: bool) -> None:
    """A follower's own lines at info, the jobs' lease and commit lines only with ``--debug``:
    a follower runs thousands of jobs."""
    if not debug:
        logging.getLogger("memwal").setLevel(logging.WARNING)
        logging.getLogger("memwal.follow").setLevel(logging.INFO)


def ended(tally: FollowTally) -> int:
    """The exit code of a follower, its reason on stderr when it was not asked to stop."""
    if tally.exit_code:
        print(f"memwal: error: {one_line(tally.detail or str(tally.stopped))}", file=sys.stderr)
    from memwal.cycle import JobStatus
    from memwal.follow.result import GONE

    if tally.stopped == GONE:  # its jobs failed for want of the table: that line says it all
        return tally.exit_code
    for last in tally.last.values():  # a job whose last run failed: the table needs a look
        if last.status is JobStatus.FAILED:
            print(f"memwal: warning: {one_line(f'{last.table} {last.job}')}: its last run failed: "
                  f"{one_line(last.error or '')}", file=sys.stderr)
    return tally.exit_code


__all__ = ["add_fleet_follow_arguments", "add_follow_arguments", "ended", "follow_options_from", "quiet_jobs"]
