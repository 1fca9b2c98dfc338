"""Fixtures of the adversarial suite (hostile inputs and states). Its tools (``tree_digest``,
``run_cli``, ``assert_one_line_error``) live in :mod:`tests.helpers`, shared with the other kinds."""

from __future__ import annotations

import pytest

from tests.helpers import tree_digest


@pytest.fixture
def unchanged():
    """``with unchanged(path, ...):`` asserts the trees are byte-for-byte the same afterwards."""
    from contextlib import contextmanager

    @contextmanager
    def check(*roots: str):
        before = {r: tree_digest(r) for r in roots}
        yield
        for r in roots:
            assert tree_digest(r) == before[r], f"{r} changed"

    return check


@pytest.fixture
def canary(tmp_path):
    """A folder outside every table, with a file in it: asserted byte for byte unchanged afterwards."""
    folder = tmp_path / "canary"
    folder.mkdir()
    (folder / "keep.txt").write_text("outside every table")
    before = tree_digest(str(folder))
    yield folder
    assert tree_digest(str(folder)) == before
