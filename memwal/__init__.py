"""memwal-jobs: background maintenance of Lance tables with a MemWAL.

The public face is small::

    import memwal
    table = memwal.open("s3://lake/events", storage_options={...})
    table.merge(max_generations=8)          # a typed result; .to_dict() is `memwal merge --json`
    table.gc(dry_run=True)

Everything is imported lazily (``memwal --help`` must not pay for pyarrow or Lance), nothing
happens on import (``memwal.open`` quiets Lance's harmless log noise when it first runs:
`memwal.core.process`), and this package imports neither Spark nor Airflow: the Spark engine lives in ``jobs/``
(installed as ``memwal.spark``) and the Airflow integration in ``airflow_plugins/``
(installed as ``memwal.airflow``).
"""

from typing import TYPE_CHECKING

from memwal.core.version import __version__

if TYPE_CHECKING:  # what the checker sees; at run time __getattr__ imports the API on first use
    from memwal.api import MemWalTable, open

__all__ = ["MemWalTable", "open", "__version__"]


def __getattr__(name: str) -> object:
    if name in ("open", "MemWalTable"):
        from memwal import api

        return getattr(api, name)
    raise AttributeError(f"module 'memwal' has no attribute {name!r}")
