"""Setting up a process that runs memwal: what must happen before Lance or Arrow load.

Nothing here runs on ``import memwal``: the entry points call :func:`configure_process`
(the CLI, and so ``spark-submit jobs/*.py``) or :func:`quiet_lance` (``memwal.open``), before
they import pyarrow or Lance. A user's own settings always win (``setdefault``), and a host
that imported pyarrow or Lance first keeps what it chose.

- Lance logs ``Index __lance_mem_wal has no fields`` on every ``merge_insert``, warns whenever
  a staging dataset is created, and pylance 14's ``LsmVectorSearchPlanner`` warns once per
  generation per query that ``_distance`` was not projected: harmless noise that would bury
  real messages. Lance reads ``LANCE_LOG`` once, when it loads.
- Index statistics are read for counts only: their vector centroids are not needed.
- Arrow's buffers come from the C library's allocator (the choice is recorded, with its
  figures, in ``docs/decisions/0010-system-allocator.md``); Arrow reads it when pyarrow is
  first imported.
"""

from __future__ import annotations

import os
import sys

LANCE_LOG_FILTER = "warn,lance::index=off,lance::dataset::write::insert=error,lance::dataset::scanner=error"
#: The environment variable Arrow reads, once, when pyarrow is imported.
ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def quiet_lance() -> None:
    """Lance's harmless noise off and no centroids in index statistics, unless set already."""
    os.environ.setdefault("LANCE_LOG", LANCE_LOG_FILTER)
    os.environ.setdefault("LANCE_INCLUDE_VECTOR_CENTROIDS", "false")


def configure_process() -> None:
    """:func:`quiet_lance`, and Arrow on the system allocator unless the user chose one (or a
    host embedding us imported pyarrow first)."""
    quiet_lance()
    if "pyarrow" not in sys.modules:
        os.environ.setdefault(ARROW_POOL_VARIABLE, "system")


__all__ = ["ARROW_POOL_VARIABLE", "LANCE_LOG_FILTER", "configure_process", "quiet_lance"]
