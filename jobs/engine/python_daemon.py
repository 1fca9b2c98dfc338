"""The Python worker daemon of our sessions: pyspark's own, importing pyspark from the
installed package instead of Spark's ``pyspark.zip`` when both are the same version.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on every Python
worker's path. A zip holds sources only and Python caches no bytecode for it, so every
daemon and every worker it forks compiles pyspark again before a job's first task can run
(its cost: docs/decisions/0012-spark-start-up.md). A pip-installed pyspark beside it has its
bytecode cached. Spark names the daemon module in ``spark.python.daemon.module``;
:func:`memwal.spark.engine.session.spark_conf` sets this one, which moves those zips behind
the installed packages of the *same* version (read from each one's ``version.py``; a
different or missing installed version keeps the zip first, so the workers always run the
pyspark of the JVM) and then runs :func:`pyspark.daemon.manager` unchanged.

It imports nothing of memwal but its own package ``__init__`` files, which import nothing
heavy: the daemon must stay small, and its children fork from it.
"""

from __future__ import annotations

import ast
import os
import sys
import zipfile
from importlib.machinery import PathFinder

#: The zipped packages Spark puts on the workers' path, by the package each holds.
ZIPPED = {"pyspark.zip": "pyspark", "py4j": "py4j"}


def _version_in(source: str) -> str | None:
    """``__version__`` assigned in a ``version.py`` (literal only), or None."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):  # ``__version__: str = "4.3.0"``, as pyspark writes it
            targets = [node.target]
        else:
            continue
        if any(getattr(t, "id", None) == "__version__" for t in targets):
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return value.value
    return None


def _zipped_version(zip_path: str, package: str) -> str | None:
    try:
        with zipfile.ZipFile(zip_path) as z:
            return _version_in(z.read(f"{package}/version.py").decode())
    except (OSError, KeyError, zipfile.BadZipFile, SyntaxError, UnicodeDecodeError):
        return None


def _installed_version(package: str, path: list[str]) -> str | None:
    spec = PathFinder.find_spec(package, path)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        try:
            with open(os.path.join(location, "version.py"), encoding="utf-8") as f:
                return _version_in(f.read())
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
    return None


def _package_of(entry: str) -> str | None:
    name = os.path.basename(entry)
    if not name.endswith(".zip"):
        return None
    return next((package for prefix, package in ZIPPED.items() if name.startswith(prefix)), None)


def prefer_installed(path: list[str]) -> list[str]:
    """``path`` with each of Spark's zips moved to the end when the same version of its package
    is installed on a directory of the path (nothing else moves)."""
    unzipped = [p for p in path if not p.endswith(".zip")]
    behind = []
    for entry in path:
        package = _package_of(entry)
        if package is None:
            continue
        zipped = _zipped_version(entry, package)
        if zipped is not None and zipped == _installed_version(package, unzipped):
            behind.append(entry)
    return [p for p in path if p not in behind] + behind


def main() -> None:
    sys.path[:] = prefer_installed(sys.path)
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
