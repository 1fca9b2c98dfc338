"""A live checkpoint pins its base version by its record alone (issue 38 M1).

The checkpoint's Lance tag is a convenience: a checkpoint whose tag was deleted, or whose
creation was killed between its record and its tag, must still keep its version through
``gc --expire-versions 0``, and read back its rows afterwards. Version expiry is bounded by
the plan's explicit version numbers, never by a clock difference handed to Lance. And a
checkpoint whose version is gone anyway (expired by hand) must not stop GC: it goes on, and
says which checkpoint lost its view.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest

import memwal
from memwal.checkpoint import create_checkpoint, list_checkpoints
from memwal.table.manifest import list_versions
from memwal.table.shards import list_generation_dirs
from tests.helpers import ROOT, run_cli


def _kill_between_record_and_tag(uri: str) -> None:
    """``checkpoint create`` in a process killed right after its record is written, before its
    tag: what a SIGKILL at that moment leaves behind."""
    script = textwrap.dedent(f"""
        import os
        from lance.dataset import Tags
        Tags.create = lambda *a, **k: os._exit(9)
        from memwal.checkpoint import create_checkpoint
        from memwal.table import open_table
        create_checkpoint(open_table({uri!r}), lifetime_seconds=3600)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 9, proc.stderr[-2000:]


def _checkpoint_without_tag(table, how: str):
    if how == "tag-deleted":
        ckpt = create_checkpoint(table, lifetime_seconds=3600)
        table.dataset().tags.delete(ckpt.tag)
    else:
        _kill_between_record_and_tag(table.uri)
        (ckpt,) = list_checkpoints(table)
    assert ckpt.tag not in table.dataset().tags.list()
    return ckpt


@pytest.mark.parametrize("how", ["tag-deleted", "killed-before-tag"])
def test_a_checkpoint_without_its_tag_keeps_its_version_through_expiry(make_table, how):
    table, model = make_table()
    t = memwal.open(table.uri)
    assert t.merge(max_generations=2).ok
    ckpt = _checkpoint_without_tag(table, how)
    pinned = {sid: set(s.numbers) for sid, s in ckpt.shards.items()}
    assert all(g == {3, 4} for g in pinned.values())
    assert t.merge().ok and t.catchup().ok  # newer versions: the checkpoint's is now an old one

    run = run_cli("gc", table.uri, "--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "0",
                  "--json")

    assert run.rc == 0, run.stderr
    assert ckpt.version in list_versions(table.store)
    for sid, gens in pinned.items():
        assert gens <= set(list_generation_dirs(table.store, sid).values())
    rows = t.scan(checkpoint=ckpt.id).to_pylist()
    assert sorted(rows, key=lambda r: r["id"]) == model.sorted_rows()
    # and the run went on with everything else: generations 1 and 2, merged before the checkpoint
    again = run_cli("gc", table.uri, "--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "0")
    assert again.rc == 0, again.stderr
    for sid in pinned:
        assert not {1, 2} & set(list_generation_dirs(table.store, sid).values())


def test_gc_goes_on_when_a_checkpoints_version_is_gone_and_names_it(make_table):
    table, _ = make_table()
    t = memwal.open(table.uri)
    assert t.merge(max_generations=2).ok and t.catchup().ok
    ckpt = _checkpoint_without_tag(table, "tag-deleted")
    assert t.merge().ok and t.catchup().ok
    table.dataset().cleanup_old_versions(older_than=timedelta(seconds=0), error_if_tagged_old_versions=False)
    assert ckpt.version not in list_versions(table.store)  # expired by hand: the view is lost

    run = run_cli("gc", table.uri, "--grace-seconds", "0", "--writer-idle-seconds", "0", "--expire-versions", "0",
                  "--json")

    assert run.rc == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if "WARNING" in line and ckpt.id in line]
    assert warnings and f"version {ckpt.version}" in warnings[0], run.stderr
    assert "Traceback" not in run.stderr
    for sid in ckpt.shards:  # the generations merged before it went; what it listed is still kept
        assert set(list_generation_dirs(table.store, sid).values()) == {3, 4}
