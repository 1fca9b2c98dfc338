"""The writer guides run as they are written (issue 64: "tested as code").

Each guide page marks the blocks a reader runs with an HTML comment right before the fence:
``<!-- guide: memwal -->`` (Python, in memwal-jobs' environment, pylance 14 with it),
``<!-- guide: file NAME -->`` (the block saved as the file NAME, which a later block runs),
``<!-- guide: lance-context -->`` (lance-context 0.6.7's own environment, ``make lance-context``),
``<!-- guide: lancedb -->`` (LanceDB 0.40's, ``make lancedb``) and ``<!-- guide: shell -->`` (each
line a command, with memwal-jobs' ``memwal`` on PATH). The blocks of a page run in order, each
in its own process, in one empty folder: what one writes the next reads, as a reader following
the page would. A block fails the test when its process exits non-zero (the Python blocks
assert what the page says they do); a page with no marked block fails too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.long  # the workers start this file first (tests/conftest.py)

PYTHONS = {"memwal": Path(sys.executable), "lance-context": ROOT / ".venv-lc" / "bin" / "python",
           "lancedb": ROOT / ".venv-ldb" / "bin" / "python"}
MAKE = {"lance-context": "lance-context", "lancedb": "lancedb"}
GUIDES = ["docs/guides/quickstart.md", "docs/guides/pylance.md", "docs/guides/lance-context.md", "docs/lancedb.md",
          "README.md", "docs/reference/python-api.md", "docs/guides/generations-not-freed.md"]
BLOCK = re.compile(r"<!-- guide: ([\w-]+(?: [\w.-]+)?) -->\n```[\w-]*\n(.*?)\n```", re.S)


#: Paths a page names outside its folder, run under the test's folder instead.
PLACES = ("/tmp/readme-demo",)


def blocks(page: str, where: Path | None = None) -> list[tuple[str, str]]:
    """(environment, code) of every marked block, in the page's order (``where``: the folder the
    page's absolute demo paths move to)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    for place in PLACES if where is not None else ():
        text = text.replace(place, str(where / place.strip("/")))
    return BLOCK.findall(text)


def run_block(env: str, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if env.startswith("file "):  # a file the page asks the reader to save
        (cwd / env.removeprefix("file ")).write_text(code + "\n", encoding="utf-8")
        return subprocess.CompletedProcess([], 0, "", "")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    clean["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{clean.get('PATH', '')}"
    if env == "shell":
        script = "set -e\n" + "\n".join(line.split("  #")[0] for line in code.splitlines())
        return subprocess.run(["bash", "-c", script], cwd=cwd, env=clean, capture_output=True, text=True,
                              timeout=600)
    python = PYTHONS[env]
    if not python.exists():
        raise AssertionError(f"{python} is missing: run `make {MAKE[env]}`")
    return subprocess.run([str(python), "-c", code], cwd=cwd, env=clean, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("page", GUIDES)
def test_every_block_of_the_guide_runs_in_order_as_written(page: str, tmp_path: Path) -> None:
    found = blocks(page, tmp_path)
    assert found, f"{page}: no block marked <!-- guide: ENV -->"
    for i, (env, code) in enumerate(found, 1):
        done = run_block(env, code, tmp_path)
        assert done.returncode == 0, f"{page} block {i} ({env}):\n{code}\n--- stdout\n{done.stdout}\n" \
                                     f"--- stderr\n{done.stderr[-4000:]}"
