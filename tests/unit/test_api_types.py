"""The API's overloads type each action's value (mypy over tests/typing/), and durations take
a ``timedelta`` as well as seconds."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import memwal
from memwal.gc.gates import GRACE_PERIOD

TYPING = Path(__file__).parents[1] / "typing"


def _mypy(*paths: Path) -> subprocess.CompletedProcess[str]:
    # only these files' errors: memwal's own are `make typecheck`'s
    argv = ["--strict", "--follow-imports=silent", "--no-error-summary", *map(str, paths)]
    return subprocess.run([sys.executable, "-m", "mypy", *argv], capture_output=True, text=True,
                          cwd=Path(__file__).parents[2])


def test_the_overloads_type_a_dry_run_as_its_plan_and_a_run_as_its_result(tmp_path):
    ok = _mypy(TYPING / "api_types.py")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # ... and the check can fail: a run's value is not a plan, a plan_<job> takes no running option
    wrong = tmp_path / "wrong_types.py"
    wrong.write_text("import memwal\nfrom memwal.merge import MergePlan\n\n\n"
                     "def f(t: memwal.MemWalTable) -> None:\n"
                     "    p: MergePlan = t.merge().value\n"
                     "    t.plan_merge(engine='local')\n"
                     "    print(p)\n")
    bad = _mypy(wrong)
    assert bad.returncode == 1
    assert 'expression has type "MergeResult", variable has type "MergePlan"' in bad.stdout
    assert 'Unexpected keyword argument "engine" for "plan_merge"' in bad.stdout


def test_durations_take_a_timedelta_as_well_as_seconds(make_table):
    table, _ = make_table()
    t = memwal.open(table.uri)
    assert t.merge(lease_ttl=timedelta(minutes=2), lease_wait=timedelta(seconds=3)).ok
    assert t.catchup().ok
    # grace_seconds as a timedelta gates exactly as the same seconds do
    held = t.gc(dry_run=True, grace_seconds=timedelta(hours=1), expire_versions="never").value
    assert held.deleted == () and held.blocked
    assert all(GRACE_PERIOD in b.reasons for b in held.blocked)
    free = t.gc(dry_run=True, grace_seconds=timedelta(0), writer_idle_seconds=timedelta(0),
                expire_versions=timedelta(0)).to_dict()
    assert free["deleted"] and not free["blocked"]
    same = t.gc(dry_run=True, grace_seconds=0, writer_idle_seconds=0, expire_versions=0).to_dict()
    for doc in (free, same):
        doc["expired_versions"].pop("expire_before")  # now, less 0 seconds: a moment apart
    assert free == same and free["expired_versions"]["planned"]
    assert t.plan_gc(grace_seconds=timedelta(minutes=1)).grace_seconds == 60.0
