"""GC's text summary names every gate that holds something back (issue 38 L7).

It used to drop any reason with a space in it, so a version held by a tag or a branch
printed ``blocked: 12 x`` with nothing after it. Details (a broken shard's message, a link's
path) are not gates and stay out of the counted line.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import memwal
from memwal.demo import shard_ids_for
from tests.conftest import SMALL
from tests.helpers import run_cli


def test_a_reason_with_spaces_is_printed_whole(make_table):
    table, _ = make_table()
    before_merge = table.dataset().version
    table.dataset().tags.create("audit-2026", before_merge)
    t = memwal.open(table.uri)
    assert t.merge().ok and t.catchup().ok
    table.dataset().cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)

    run = run_cli("gc", table.uri, "--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "never")

    assert run.rc == 0, run.stderr
    blocked = [line.strip() for line in run.stdout.splitlines() if line.strip().startswith("blocked:")]
    n = SMALL.shards * SMALL.generations
    # the gate whole, then what frees it: a tag, which no time does
    assert [b.split(": no time passes it alone; ")[0] for b in blocked] == [
        f"blocked: {n} x retained-version:{before_merge} (tag audit-2026)"], run.stdout


def test_details_are_not_counted_as_gates(make_table):
    """A broken shard's detail (its manifest's URI, the problem) is in the JSON, not in the
    counted line, which shows the shard's gate alone."""
    table, _ = make_table()
    victim = shard_ids_for(SMALL)[0]
    folder = Path(table.uri, "_mem_wal", victim, "manifest")
    versions = sorted((p for p in folder.iterdir() if p.name.endswith(".binpb")), key=lambda p: p.name[::-1])
    assert len(versions) > 2
    versions[1].unlink()  # a gap between the first and the last: the latest manifest is unknown

    run = run_cli("gc", table.uri, "--grace-seconds", "0", "--writer-idle-seconds", "0")

    assert run.rc == 1, run.stderr
    blocked = [line.strip() for line in run.stdout.splitlines() if line.strip().startswith("blocked:")]
    assert f"blocked: {SMALL.generations} x shard-manifest-gap: no time passes it alone; shard-manifest-gap: needs " \
           "an operator (memwal gc --dry-run shows it)" in blocked, run.stdout
    assert all(" x " in line and line.split(" x ", 1)[1] for line in blocked), run.stdout
