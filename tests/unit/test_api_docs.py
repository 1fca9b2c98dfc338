"""The API reference documents every public parameter and return value (docs/reference/python-api.md).

mkdocstrings renders the docstrings Google style: a method's ``Args:`` names each parameter of
its signature, ``Returns:`` says what comes back, and no docstring the reference renders holds a
raw Sphinx role (``:meth:`...```), which the page would show as text.
"""

from __future__ import annotations

import inspect
import re

import pytest

from memwal import api

ROLE = re.compile(r":(meth|func|mod|class|attr|exc|data|obj):`")
PUBLIC = [name for name, value in vars(api.MemWalTable).items()
          if not name.startswith("_") and inspect.isfunction(value)]


def sections(doc: str) -> dict[str, str]:
    """A Google-style docstring's sections by title (``Args``, ``Returns``, ...)."""
    out: dict[str, str] = {}
    title = None
    for line in inspect.cleandoc(doc).splitlines():
        m = re.fullmatch(r"(Args|Returns|Raises|Examples|Attributes):", line)
        if m:
            title = m.group(1)
            out[title] = ""
        elif title:
            out[title] += line + "\n"
    return out


@pytest.mark.parametrize("name", [*PUBLIC, "open"])
def test_every_parameter_and_the_return_value_are_documented(name: str) -> None:
    func = api.open if name == "open" else getattr(api.MemWalTable, name)
    doc = sections(func.__doc__ or "")
    params = [p for p in inspect.signature(func).parameters.values() if p.name != "self"]
    documented = set(re.findall(r"^    (\*{0,2}\w+):", doc.get("Args", ""), re.M))
    wanted = {("**" if p.kind is p.VAR_KEYWORD else "") + p.name for p in params}
    assert wanted == documented, (name, wanted ^ documented)
    assert doc.get("Returns", "").strip(), name


def test_the_properties_and_result_types_say_what_they_hold() -> None:
    from memwal.actions.run import JobResult
    from memwal.catchup import CatchupPlan, CatchupResult
    from memwal.compact import CompactPlan, CompactResult
    from memwal.gc import GcResult
    from memwal.merge import MergePlan, MergeResult
    from memwal.snapshot import SnapshotPlan, SnapshotResult

    assert api.MemWalTable.uri.__doc__ and api.MemWalTable.table.__doc__
    for cls in (JobResult, MergePlan, MergeResult, CatchupPlan, CatchupResult, CompactPlan, CompactResult,
                SnapshotPlan, SnapshotResult, GcResult):
        attributes = sections(cls.__doc__ or "").get("Attributes", "")
        documented = set(re.findall(r"^    (\w+):", attributes, re.M))
        fields = set(cls.__dataclass_fields__)
        assert fields == documented, (cls.__name__, fields ^ documented)


def test_no_raw_sphinx_role_in_what_the_reference_renders() -> None:
    import memwal.actions.options
    import memwal.errors
    from memwal.actions.run import JobResult

    rendered = [memwal.__doc__, api.open.__doc__, api.MemWalTable.__doc__, memwal.actions.options.__doc__,
                memwal.errors.__doc__, JobResult.__doc__]
    rendered += [getattr(api.MemWalTable, n).__doc__ for n in PUBLIC]
    rendered += [v.__doc__ for m in (memwal.actions.options, memwal.errors) for v in vars(m).values()
                 if inspect.isclass(v) and v.__module__ == m.__name__]
    found = [d for d in rendered if d and ROLE.search(d)]
    assert not found, [ROLE.search(d).group(0) for d in found]
