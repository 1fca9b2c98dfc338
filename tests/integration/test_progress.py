"""Progress bars of the long CLI commands (merge, gc) on a terminal: the real ``memwal`` program
with its stderr on a pseudo-terminal, as a person runs it; none with ``--json`` or off a terminal."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

from memwal.demo import shard_ids_for
from memwal.history.log import read_runs
from memwal.table.shards import all_shard_manifests, list_generation_dirs
from tests.conftest import SMALL, table_rows

MEMWAL = str(Path(sys.executable).parent / "memwal")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_terminal(*argv: str) -> tuple[int, str, str]:
    """``memwal ARGV`` with stderr on a terminal (160 columns): exit code, stdout, what the
    terminal showed (escape codes removed, one line per carriage return)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    proc = subprocess.Popen([MEMWAL, *argv], stdout=subprocess.PIPE, stderr=slave,
                            env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "160"})
    os.close(slave)
    shown = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the program closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        elif proc.poll() is not None:
            break
    out = proc.stdout.read().decode()
    rc = proc.wait()
    os.close(master)
    text = _ANSI.sub("", shown.decode(errors="replace"))
    return rc, out, "\n".join(line.strip() for line in re.split(r"\r\n|\r|\n", text) if line.strip())


def test_merge_and_gc_show_progress_on_a_terminal(make_table):
    table, model = make_table()
    ids = shard_ids_for(SMALL)
    rc, out, shown = on_terminal("merge", table.uri)
    assert rc == 0, shown
    for shard in ids:  # the batch, one line per shard
        assert f"shard {shard}: generations 1..4 (4 generations, " in shown
    rows = sum(int(m.replace(",", "")) for m in re.findall(r"\(4 generations, ([\d,]+) rows\)", shown))
    assert rows == sum(g.physical_rows for s in all_shard_manifests(table.store).values() for g in s.flushed)
    assert shown.splitlines()[-1].startswith(f"merge 12 generations of 3 shards ({rows:,} rows): done")
    assert "3/3" in shown.splitlines()[-1]
    assert "reading generations" in shown or "changes computed" in shown  # the phases went by
    assert out.startswith(f"{table.uri}: merged into version")  # stdout: the result, as without a terminal

    assert subprocess.run([MEMWAL, "catchup", table.uri], capture_output=True).returncode == 0
    rc, out, shown = on_terminal("gc", table.uri, "--grace-seconds", "0", "--writer-idle-seconds", "0",
                                 "--expire-versions", "0")
    assert rc == 0, shown
    gc = next(read_runs(table.store, job="gc"))
    assert gc.figures["generations"] == 12
    assert all(not list_generation_dirs(table.store, s) for s in ids)  # shard by shard, all of it deleted
    for shard in ids:
        assert f"shard {shard[:8]} generations" in shown and f"shard {shard[:8]} WAL entries" in shown
    total = 12 + gc.figures["wal_entries"]
    last = shown.splitlines()[-1]
    assert last.startswith(f"gc deleted 12 generation folders and {gc.figures['wal_entries']} WAL entries "
                           "in 3 shards: done")
    assert f"{total}/{total}" in last
    assert table_rows(table) == model.sorted_rows()


def test_no_progress_with_json_or_off_a_terminal(make_table):
    table, _ = make_table()
    rc, out, shown = on_terminal("merge", table.uri, "--max-generations", "1", "--json")
    assert rc == 0 and json.loads(out)["version"] is not None
    assert "generations of 3 shards" not in shown and "━" not in shown
    plain = subprocess.run([MEMWAL, "merge", table.uri], capture_output=True, text=True)
    assert plain.returncode == 0
    assert "generations of 3 shards" not in plain.stderr and "━" not in plain.stderr
