"""Engines: where an action's heavy work runs. ``local`` is in-process; others plug in.

The core names no engine but its own. A package that brings an engine (memwal-jobs' Spark
engine, installed as ``memwal.spark.engine``) declares it under the entry point group
``memwal.engines``: the object there has ``engine(action)``, which builds the engine of one
action, and ``prepare()``, which starts what it needs (a Spark session boots in the
background while the job plans).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from memwal.errors import BadInputError

GROUP = "memwal.engines"
LOCAL = "local"


@cache
def _plugged() -> dict[str, Any]:
    from importlib.metadata import entry_points  # 30 ms: paid by a run, not by `memwal --help`

    return {ep.name: ep for ep in entry_points(group=GROUP)}


def names() -> list[str]:
    """Every engine a job can run on here."""
    return [LOCAL, *sorted(_plugged())]


def plugged(name: str) -> Any:
    """The plugged-in engine family ``name`` (BadInputError if none is installed)."""
    eps = _plugged()
    if name not in eps:
        raise BadInputError(f"unknown engine {name!r}: expected {' or '.join(names())}"
                            + (f" (memwal-jobs[{name}] brings the {name} engine)" if name in ("spark", "ray") else ""))
    with _installed(name):
        return eps[name].load()


@contextmanager
def _installed(name: str) -> Iterator[None]:
    """An engine's module is installed with memwal-jobs, what it runs on (pyspark) only with its
    extra: a missing module is bad input naming the extra, whenever the engine first needs it."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise BadInputError(f"the {name} engine needs {exc.name}, which is not installed: install the {name} extra "
                            f"(pip install 'memwal-jobs[{name}]'), or run with --engine local") from None


def require_module(module: str) -> None:
    """ModuleNotFoundError when ``module`` is not installed (found without importing it): what an
    engine's ``prepare`` raises first, so a missing extra is bad input before a job writes anything."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ValueError, ImportError):  # a module set to None in sys.modules: not importable
        found = False
    if not found:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)


def engine_for(action: str, name: str, local: Callable[[], Any]) -> Any:
    """The engine of ``action`` called ``name`` (``local`` builds the in-process one)."""
    if name == LOCAL:
        return local()
    with _installed(name):
        return plugged(name).engine(action)


def prepare(name: str) -> None:
    """Start what engine ``name`` needs before a job plans (nothing for ``local``)."""
    if name != LOCAL:
        with _installed(name):
            plugged(name).prepare()
