"""``memwal backfill --tables-file F`` with hostile lists: exit 2, one line naming F (and the line), nothing written.

The list is read and checked whole before any job runs: a good table listed before the
bad line is not touched, and no state file (nor its directory) appears.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import table_rows
from tests.helpers import assert_one_line_error, run_cli, tree_digest

GOOD = "{table}\n"


def write(content: bytes) -> Callable[[Path, str], str]:
    """A case that writes ``content`` (``{table}`` replaced by the good table) to the tables file."""

    def make(tmp: Path, table: str) -> str:
        path = tmp / "tables.txt"
        path.write_bytes(content.replace(b"{table}", table.encode()))
        return str(path)

    return make


def fifo(tmp: Path, table: str) -> str:
    """A named pipe with no writer: opening it for reading would block forever."""
    path = tmp / "tables.fifo"
    os.mkfifo(path)
    return str(path)


# (case id, how the tables file is made, substrings the one error line must hold)
CASES = [
    ("missing", lambda tmp, t: str(tmp / "no-such-list.txt"), ["No such file"]),
    ("directory", lambda tmp, t: str(tmp), ["is a directory"]),
    ("char-device", lambda tmp, t: "/dev/null", ["not a regular file"]),
    ("fifo", fifo, ["not a regular file"]),
    ("empty", write(b""), ["empty"]),
    ("whitespace-only", write(b"  \n\t\n\r\n"), ["empty"]),
    ("comments-only", write(b"# nothing here\n\n   # still nothing\n"), ["no table URI"]),
    ("binary-nul", write(b"{table}\n\x00\x01\x02\xff\xfe garbage"), ["line 2", "binary content"]),
    ("utf16", write("{table}\n".encode("utf-16")), ["line 1", "binary content"]),
    ("png-header", write(b"\x89PNG\r\n\x1a\n"), ["line 1", "not UTF-8"]),
    ("latin1-line-3", write(b"{table}\n# ok\ncaf\xe9/table\n"), ["line 3", "not UTF-8", "0xe9"]),
    ("ftp-scheme", write(b"{table}\nftp://host/t\n"), ["line 2", "unsupported table URI scheme 'ftp'"]),
    ("s3a-scheme", write(b"s3a://bucket/t\n{table}\n"), ["line 1", "'s3a'"]),
    ("s3-no-bucket", write(b"{table}\n\ns3:///t\n"), ["line 3", "no bucket"]),
    ("s3-double-slash", write(b"{table}\ns3://bucket//t\n"), ["line 2", "'.' or '..' component"]),
    ("file-no-path", write(b"file://\n"), ["line 1", "expected file:///absolute/path"]),
    ("control-char", write(b"{table}\n/data/a\x1bb\n"), ["line 2", "control character"]),
    ("tab-inside", write(b"{table}\n/data/a\tb\n"), ["line 2", "control character"]),
    ("s3-query", write(b"{table}\ns3://bucket/t?versionId=3\n"), ["line 2", "query strings"]),
    ("too-long", write(b"{table}\n/" + b"a" * 5000 + b"\n"), ["line 2", "longer than 4096"]),
]


@pytest.mark.parametrize(("make", "needles"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_tables_file_is_bad_input_and_writes_nothing(make_table, tmp_path, make, needles):
    table, _ = make_table(name="good")
    lists = tmp_path / "lists"
    lists.mkdir()
    path = make(lists, table.uri)
    state = tmp_path / "state" / "state.json"
    before = tree_digest(table.uri)

    run = run_cli("backfill", "--tables-file", path, "--state-file", str(state), "--jobs", "merge")

    assert_one_line_error(run, 2, f"--tables-file {path}", *needles)
    assert tree_digest(table.uri) == before  # the good table listed before the bad line was not merged
    assert not state.parent.exists()


def test_credentials_in_an_s3_uri_are_not_echoed(tmp_path):
    path = tmp_path / "tables.txt"
    path.write_text("s3://AKIAX:hunter2-secret@bucket/t\n")
    run = run_cli("backfill", "--tables-file", str(path), "--state-file", str(tmp_path / "s.json"))
    assert_one_line_error(run, 2, f"--tables-file {path} line 1", "s3://***@bucket/t", "credentials in a URI")
    assert "hunter2-secret" not in run.stderr + run.stdout
    assert not (tmp_path / "s.json").exists()


def test_a_bad_positional_table_is_refused_before_the_good_ones_run(make_table, tmp_path):
    table, _ = make_table(name="good")
    before = tree_digest(table.uri)
    state = tmp_path / "state" / "state.json"
    run = run_cli("backfill", table.uri, "s3://bucket//t", "--state-file", str(state), "--jobs", "merge")
    assert_one_line_error(run, 2, "'s3://bucket//t'", "'.' or '..' component")
    assert tree_digest(table.uri) == before and not state.parent.exists()


def test_bom_crlf_comments_and_duplicates_are_a_good_list(make_table, tmp_path):
    """What the checks must not refuse: a Windows-edited list (BOM, CRLF), comments, a duplicate."""
    table, model = make_table(name="good")
    path = tmp_path / "tables.txt"
    path.write_bytes(f"\ufeff# the list\r\n{table.uri}  # main\r\n\r\n{table.uri}/\r\n".encode())
    state = tmp_path / "state.json"
    run = run_cli("backfill", "--tables-file", str(path), "--state-file", str(state), "--jobs", "merge", "--json")
    assert run.rc == 0, run.stderr
    assert state.exists()
    merged = table.manifest().compacted
    assert len(merged) == 3 and all(g == 4 for g in merged.values())  # every generation of every shard
    assert table_rows(table) == model.sorted_rows()
