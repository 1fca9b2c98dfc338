"""Hostile input to ``memwal scan`` and the reader helper: bad filters, columns, limits and keys
are exit 2 (one line, nothing written, no path from Lance's build machine); a read that
fails inside Lance is exit 1 naming the table, on plain and on folding tables."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from memwal.demo import Workload, make_demo_table
from tests.adversarial.test_cli_input import assert_error
from tests.helpers import run_cli, tree_digest

TINY = Workload(base_rows=60, shards=2, generations=2, rows_per_generation=10, seed=5)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A plain table and one with a merge operator (read through the fold)."""
    root = tmp_path_factory.mktemp("reads")
    plain = str(root / "plain")
    make_demo_table(plain, TINY)
    folding = str(root / "folding")
    shutil.copytree(plain, folding)
    assert run_cli("merge-ops", folding, "--set", "value=sum", "--force").rc == 0
    return {"plain": plain, "folding": folding}


BAD_SCANS = [
    (["--filter", "value >"], "--filter 'value >'"),
    (["--filter", "id <<< 3"], "--filter 'id <<< 3'"),
    (["--filter", "nope = 1"], "No field named nope"),
    (["--filter", "id = 'abc'"], "could not convert"),
    (["--filter", "name > 3"], "--filter 'name > 3'"),
    (["--filter", "vec = 1"], "--filter 'vec = 1'"),
    (["--filter", "_tombstone = true"], "No field named _tombstone"),
    (["--filter", "_rowid > 0"], "No field named _rowid"),
    (["--filter", "id = 1; DROP TABLE t"], "--filter"),
    (["--filter", " "], "--filter ' '"),
    (["--filter", "(" * 200], "--filter"),
    (["--columns", "id,nope"], "--columns: no such column nope"),
    (["--columns", ","], "--columns: no column named"),
    (["--columns", "_tombstone"], "no such column _tombstone"),
    (["--limit", "0"], "--limit"),
    (["--limit", "-3"], "--limit"),
    (["--source", "cache"], "--source"),
]


@pytest.mark.parametrize("kind", ["plain", "folding"])
@pytest.mark.parametrize("argv, needle", BAD_SCANS, ids=[" ".join(a) for a, _ in BAD_SCANS])
def test_bad_scan_input_is_exit_2_with_nothing_written(tables, kind, argv, needle):
    uri = tables[kind]
    before = tree_digest(uri)
    run = run_cli("scan", uri, *argv)
    assert_error(run, 2, needle)
    line = run.error_lines[0]
    assert ".rs:" not in line and "/home/runner" not in line, line
    assert tree_digest(uri) == before


@pytest.mark.parametrize("kind", ["plain", "folding"])
def test_a_read_failing_inside_lance_is_exit_1_naming_the_table(tables, tmp_path, kind):
    uri = str(tmp_path / "t")
    shutil.copytree(tables[kind], uri)
    victim = sorted(Path(uri, "data").iterdir())[0]
    victim.write_bytes(victim.read_bytes()[: os.path.getsize(victim) // 3])  # a torn data file
    run = run_cli("scan", uri)
    assert_error(run, 1, uri, "cannot read")
    verify = run_cli("verify", uri)
    assert verify.rc == 1 and "lsm-view-readable" in verify.stdout + verify.stderr


def test_a_runtime_filter_error_is_a_failed_read_not_bad_input(tables):
    """A filter Lance accepts but fails on the data (a cast of a name to int) fails the read."""
    run = run_cli("scan", tables["plain"], "--filter", "cast(name as int) > 1")
    assert_error(run, 1, tables["plain"], "cannot read")
