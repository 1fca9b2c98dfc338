"""GC's gates and when each passes, the same everywhere they are shown (issue 64).

The fleet once said ``3 x grace-period; frees by 13:23`` while, a minute after, ``memwal gc
--dry-run`` named ``retained-version`` (7 days): the grace period kept the generations listed,
and once drained, their folders waited for the versions from before the merge to expire. Here a
table written by pylance's ShardWriter is merged and collected by the fleet on GC's defaults
(grace period 10 minutes, versions kept 7 days, the writers wrote a minute ago: live), the clock
held at one reading: GC names every gate of the rollups kept listed (``grace-period + writer-live
then retained-version:<v>``), gives them no time (the writers' quiet is no time that holds: they
may write again) and names the version's expiry as what frees their folders; ``memwal gc
--dry-run``, ``memwal history``, the cycle's summary, ``memwal fleet status`` (text and JSON),
``memwal fleet plan``, the fleet page and the status page all say the same, and none shows the
grace period's end as when the generations go (issue 84: it once said they waited for the grace
period only, and writer-live held them once it passed).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import lance

from memwal.core import clock as clocks
from memwal.core.waits import when
from tests.helpers import run_cli
from tests.integration.test_fleet_controls import WL, make
from tests.interleave import ScriptedClock

DAY = 86400.0
EXPIRE = 7 * DAY  # GC's default version retention


def test_every_view_shows_the_gates_gc_named_and_the_time_gc_computed(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    t1 = make(lake / "t1")
    before_merge = lance.dataset(t1).versions()[0]["version"]  # GC names the first version that had merged nothing
    state = str(tmp_path / "state")
    # the clock is held a minute after the commits the run makes (Lance stamps them by the wall clock): a
    # version committed after the reading would have its age clamped to 0 by the dry run, and its
    # expiry shown that much earlier than the run's, by as long as the run took to commit it
    now = time.time() + 60
    with clocks.use(ScriptedClock(lambda: now)):
        run = run_cli("fleet", "run", str(lake), "--state", state, "--json")
        assert run.rc == 0, run.stderr
        gcs = [j for r in json.loads(run.stdout)["runs"] for j in r["jobs"] if j["job"] == "gc"]
        assert [j["status"] for j in gcs] == ["waiting"], gcs

        # GC's own account, as its run history keeps it: both gates, and when the later one passes
        history = json.loads(run_cli("history", t1, "--job", "gc", "--json").stdout)["runs"]
        wait = history[0]["figures"]["wait"]
        kept = WL.shards * WL.generations
        combo = f"grace-period + writer-live then retained-version:{before_merge}"
        assert wait["gates"] == {combo: kept}, wait
        (passes,) = wait["passes"]
        # no time: the writers' quiet holds only if they write nothing more
        assert passes["gates"] == combo and passes["count"] == kept and passes["passes_at"] is None
        assert wait["frees_at"] is None and wait["time_will_free"] is False
        # what frees the folders once out of the listing: the version's expiry, from its commit time
        at = lance.dataset(t1).versions()[0]["timestamp"].timestamp() + EXPIRE
        assert wait["options"] == {"grace_seconds": 600.0, "expire_versions": EXPIRE, "writer_idle_seconds": DAY}
        shown = when(at)
        grace_end = when(now + 600)
        assert f"passes by {grace_end}" in passes["frees"] and f"by {shown}" in passes["frees"]
        assert "writer-live: when the writer reopens or is quiet for 1d 0h" in passes["frees"]
        quiet = "(when its writer reopens or goes quiet)"

        # the cycle's summary and the history's line
        assert f"{kept} blocked: {kept} x {combo} {quiet}" in gcs[0]["summary"], gcs[0]["summary"]
        line = run_cli("history", t1, "--job", "gc").stdout
        assert f"{kept} kept ({kept} x {combo} {quiet})" in line, line

        # memwal gc --dry-run, a moment later: the grace period drained them from the listing in
        # the run, so their folders now name the version itself; the time is the same
        dry = run_cli("gc", t1, "--dry-run", "--json")
        assert dry.rc == 0, dry.stderr
        again = json.loads(dry.stdout)["wait"]
        assert f"retained-version:{before_merge}" in again["gates"]
        # (the same instant: GC reports a blocking version's age to a tenth of a second)
        assert all(abs(p["passes_at"] - at) < 1 for p in again["passes"] if p["gates"].startswith("retained")), again

        text = run_cli("gc", t1, "--dry-run").stdout
        again_at = when(again["passes"][0]["passes_at"])
        assert f"blocked: {kept} x retained-version:{before_merge}: passes at {again_at};" in text, text

        # the fleet: its status (JSON and text), its plan's reasons, its page
        rc_doc = run_cli("fleet", "status", "--state", state, "--json")
        assert rc_doc.rc == 0, rc_doc.stderr
        row = {t["table"]: t for t in json.loads(rc_doc.stdout)["tables"]}[t1]
        assert row["gc"]["gates"] == {combo: kept} and row["gc"]["frees_at"] is None
        assert [(p["gates"], p["count"], p["passes_at"]) for p in row["gc"]["passes"]] == [(combo, kept, None)]
        said = " ".join(row["reasons"])
        assert f"kept {kept}: {kept} x {combo}" in said and f"by {shown}" in said, said
        planned = run_cli("fleet", "plan", str(lake), "--state", state, "--json")
        assert planned.rc == 0, planned.stderr
        reasons = " ".join({t["table"]: t for t in json.loads(planned.stdout)["tables"]}[t1]["reasons"])
        assert f"by {shown}" in reasons and "the plan expects" not in reasons, reasons  # GC's, not an estimate
        page = tmp_path / "fleet.html"
        assert run_cli("fleet", "status", "--state", state, "--html", str(page)).rc == 0
        assert f"by {shown}" in page.read_text()

        # the table's status page: its runs
        status_page = tmp_path / "status.html"
        assert run_cli("status", t1, "--html", str(status_page)).rc == 0
        assert f"{kept} x {combo} {quiet}" in status_page.read_text()
