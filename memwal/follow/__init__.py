"""Keeping up: one long-lived process that follows writers that never stop (issue 62).

- :mod:`memwal.follow.options`: :class:`FollowOptions` (how often it looks, each job's cadence);
- :mod:`memwal.follow.watch`: :class:`ShardWatch`, what moved in a table's shards, found cheaply;
- :mod:`memwal.follow.schedule`: :class:`Schedule`, which jobs are due;
- :mod:`memwal.follow.signals`: :class:`StopSignals`, SIGTERM and SIGINT as a stop at the next
  safe point;
- :mod:`memwal.follow.table`: :func:`follow_table` (``memwal cycle TABLE --follow``);
- :mod:`memwal.follow.fleet`: :func:`follow_fleet` (``memwal fleet run --follow``);
- :mod:`memwal.follow.result`: :class:`FollowTally`, what a follower did, bounded.

The CLI's parser reads the options alone (``memwal --help`` must not load the jobs): the rest is
imported on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the checker sees; at run time __getattr__ imports on first use
    from memwal.follow.fleet import follow_fleet
    from memwal.follow.options import FollowOptions
    from memwal.follow.result import FollowTally
    from memwal.follow.signals import StopSignals
    from memwal.follow.table import FOLLOW_KIND, follow_table

_WHERE = {"follow_fleet": "fleet", "FollowOptions": "options", "FollowTally": "result", "StopSignals": "signals",
          "FOLLOW_KIND": "table", "follow_table": "table"}

__all__ = ["FOLLOW_KIND", "FollowOptions", "FollowTally", "StopSignals", "follow_fleet", "follow_table"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"memwal.follow.{_WHERE[name]}"), name)
