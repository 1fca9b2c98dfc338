"""memwal-jobs: background maintenance of Lance tables with a MemWAL.

The public face is small::

    import memwal
    table = memwal.open("s3://lake/events", storage_options={...})
    table.merge(max_generations=8)          # a typed result; .to_dict() is `memwal merge --json`
    table.gc(dry_run=True)

Everything is imported lazily (``memwal --help`` must not pay for pyarrow or Lance), and
this package imports neither Spark nor Airflow: the Spark engine lives in ``jobs/``
(installed as ``memwal.spark``) and the Airflow integration in ``airflow_plugins/``
(installed as ``memwal.airflow``).
"""

import os
from typing import TYPE_CHECKING

from memwal.core.version import __version__

if TYPE_CHECKING:  # what the checker sees; at run time __getattr__ imports the API on first use
    from memwal.api import MemWalTable, open

# Lance logs "Index __lance_mem_wal has no fields" on every merge_insert, a warning
# whenever a staging dataset is created, and pylance 14's LsmVectorSearchPlanner makes each
# of its per-source searches warn that "_distance" was not projected (once per generation
# per query, whatever the caller projects): harmless noise that would bury real messages.
# Lance reads LANCE_LOG once, when it loads, and every memwal module loads this package
# first; a user's own LANCE_LOG still wins.
LANCE_LOG_FILTER = "warn,lance::index=off,lance::dataset::write::insert=error,lance::dataset::scanner=error"
os.environ.setdefault("LANCE_LOG", LANCE_LOG_FILTER)
# We read index statistics for counts only; the centroids are not needed (and Lance warns).
os.environ.setdefault("LANCE_INCLUDE_VECTOR_CENTROIDS", "false")

__all__ = ["MemWalTable", "open", "__version__"]


def __getattr__(name: str) -> object:
    if name in ("open", "MemWalTable"):
        from memwal import api

        return getattr(api, name)
    raise AttributeError(f"module 'memwal' has no attribute {name!r}")
