"""Defaults that the core and the options of every entry point (CLI, API, DAGs) share.

Declared here once, below both: the collectors use them as keyword defaults and
:mod:`memwal.actions.options` as the options' defaults, so the two cannot drift.
"""

from __future__ import annotations

#: How long after a merge commit a reader may still read what it listed before (GC gate d).
DEFAULT_GRACE_SECONDS = 600.0

#: How old an unlisted generation folder or a merge staging must be before ``--orphans`` removes it.
DEFAULT_ORPHAN_AGE_SECONDS = 3600.0

#: How long a shard's writer may be quiet and still be presumed live (a day): GC keeps what
#: such a writer's view needs until then (memwal.table.writer).
DEFAULT_WRITER_IDLE_SECONDS = 86400.0

#: How long base-table versions are kept before GC's version expiry takes them (7 days, as Delta's VACUUM).
DEFAULT_EXPIRE_VERSIONS_SECONDS = 7 * 24 * 3600.0

#: The largest share of a follower's time its whole GC takes (a table's, or each table's in a fleet):
#: the next starts no sooner than the last took divided by this (a run of 1 s at most every 50 s;
#: 10 s, every 500 s). A whole GC names every folder the version retention keeps.
GC_SHARE = 0.02
