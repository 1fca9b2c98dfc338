"""memwal-jobs: background maintenance of Lance tables with a MemWAL.

The public face is small::

    import memwal
    table = memwal.open("s3://lake/events", storage_options={...})
    table.merge(max_generations=8)          # a typed result; .to_dict() is `memwal merge --json`
    table.gc(dry_run=True)

Everything is imported lazily (``memwal --help`` must not pay for pyarrow or Lance), nothing
happens on import (``memwal.open`` quiets Lance's harmless log noise when it first runs:
:mod:`memwal.core.process`), and this package imports neither Spark nor Airflow: the Spark engine lives in ``jobs/``
(installed as ``memwal.spark``) and the Airflow integration in ``airflow_plugins/``
(installed as ``memwal.airflow``).
"""

from memwal.core.version import __version__

__all__ = ["MemWalTable", "open", "__version__"]


def __getattr__(name: str):
    if name in ("open", "MemWalTable"):
        from memwal import api

        return getattr(api, name)
    raise AttributeError(f"module 'memwal' has no attribute {name!r}")
