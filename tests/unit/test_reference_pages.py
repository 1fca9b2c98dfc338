"""The reference pages cover what users get back and what they configure (issue 64).

- Every type a ``MemWalTable`` method returns, and every type inside one (a dataclass's fields,
  followed down; a plan's insides are the dry run's, not a result's), is rendered on a reference
  page (``::: module.Class`` in docs/reference/).
- Every public class of the Airflow provider's modules (as ``provider.py`` declares them) is
  rendered on docs/reference/airflow.md, and each parameter its own ``__init__`` takes is
  documented by a ``:param name:`` of its docstring (provider docs go class by class,
  parameter by parameter).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import sys
import typing
from typing import Any

from memwal import api
from tests.helpers import ROOT

REFERENCE = ROOT / "docs" / "reference"
#: Inside a result, but not the user's to read: storage's own records.
NOT_RESULTS = ("memwal.store.", "memwal.pb.")


def rendered() -> set[str]:
    return {m for page in REFERENCE.glob("*.md") for m in re.findall(r"^::: ([\w.]+)$", page.read_text(), re.M)}


def _names() -> dict[str, Any]:
    """The API module's names, with those it imports only for type checking."""
    ns = dict(vars(api))
    for node in ast.parse(inspect.getsource(api)).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            exec(compile(ast.Module(node.body, []), "memwal.api", "exec"), ns)  # noqa: S102 - our own imports
    return ns


def result_types() -> set[type]:
    ns, seen = _names(), set()

    def walk(t: Any) -> None:
        if typing.get_origin(t) is not None:
            for a in typing.get_args(t):
                walk(a)
        elif isinstance(t, type) and t.__module__.startswith("memwal") and t not in seen \
                and not t.__module__.startswith(NOT_RESULTS):
            seen.add(t)
            if dataclasses.is_dataclass(t) and not t.__name__.endswith("Plan"):
                hints = typing.get_type_hints(t, {**ns, **vars(sys.modules[t.__module__])})
                for f in dataclasses.fields(t):
                    walk(hints.get(f.name))

    for name, fn in vars(api.MemWalTable).items():
        if not name.startswith("_") and inspect.isfunction(fn):
            walk(typing.get_type_hints(fn, ns).get("return"))
    return seen


def test_every_result_type_and_every_type_inside_one_has_a_reference() -> None:
    shown = rendered()
    types = result_types()
    assert {"TableStatus", "VerifyResult", "History", "Checkpoint", "ManagedCheckpoint", "LeaseInfo",
            "MergeOpsChange", "ShardMergeResult", "Blocked"} <= {t.__name__ for t in types}
    missing = sorted(f"{t.__module__}.{t.__qualname__}" for t in types)
    missing = [m for m in missing if m not in shown]
    assert not missing, missing


PROVIDER = ["hooks", "operators", "maintenance_operators", "checkpoint_operators", "fleet_operators", "fleet_control",
            "sensors", "triggers"]


def test_every_airflow_class_and_each_of_its_parameters_is_documented() -> None:
    page = (REFERENCE / "airflow.md").read_text()
    shown = set(re.findall(r"^::: airflow_plugins\.(\w+)\.(\w+)$", page, re.M))
    for module in PROVIDER:
        mod = importlib.import_module(f"memwal.airflow.{module}")
        for name, cls in vars(mod).items():
            if not inspect.isclass(cls) or cls.__module__ != mod.__name__ or issubclass(cls, Exception):
                continue
            if not name.startswith("_") and not dataclasses.is_dataclass(cls):
                assert (module, name) in shown, f"{module}.{name} is not on docs/reference/airflow.md"
            if (module, name) not in shown:
                continue
            init = cls.__dict__.get("__init__")
            params = [] if init is None else [p.name for p in inspect.signature(init).parameters.values()
                                              if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
            missing = [p for p in params if not re.search(rf":param {p}:", cls.__doc__ or "")]
            assert not missing, f"{module}.{name}: no :param for {missing}"
