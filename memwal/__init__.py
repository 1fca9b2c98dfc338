"""memwal-jobs core: formats, storage, planning and the four maintenance actions.

This package imports neither Spark nor Airflow (DESIGN.md section 2): the Spark engine
lives in ``jobs/`` and the Airflow integration in ``airflow_plugins/``.
"""

import os

__version__ = "0.1.0"

# Lance logs "Index __lance_mem_wal has no fields" on every merge_insert and a warning
# whenever a staging dataset is created: harmless noise (DESIGN.md section 4) that would
# bury real messages. Lance reads LANCE_LOG once, when it loads, and every memwal module
# loads this package first; a user's own LANCE_LOG still wins.
LANCE_LOG_FILTER = "warn,lance::index=off,lance::dataset::write::insert=error"
os.environ.setdefault("LANCE_LOG", LANCE_LOG_FILTER)
# We read index statistics for counts only; the centroids are not needed (and Lance warns).
os.environ.setdefault("LANCE_INCLUDE_VECTOR_CENTROIDS", "false")
