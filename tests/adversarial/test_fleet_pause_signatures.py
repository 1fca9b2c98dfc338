"""Signed pauses bind what they say and where (issue 61, 5): whoever can write the fleet's state
cannot turn a signed resume or cancel into a pause, replay a resumed pause, or bring a pause
from another fleet's state; and without a key the fleet says its pauses are unauthenticated
and a fleet-wide pause needs the operator's explicit ``--yes``.

The tables are written by pylance's ShardWriter (:mod:`memwal.demo`); the pauses by the CLI;
the forger edits ``controls.json`` as a file, then the fleet plans for real (``fleet plan``)."""

from __future__ import annotations

import json
from pathlib import Path

from memwal.demo import Workload, create_base_table, write_generations
from tests.helpers import run_cli, tree_digest

TINY = Workload(base_rows=20, shards=1, generations=1, rows_per_generation=5, seed=3, indexes=False)
KEY = "k" * 32


def lake(tmp_path: Path) -> tuple[Path, str, str]:
    root = tmp_path / "lake"
    for name in ("t1", "t2"):
        _, model = create_base_table(str(root / name), TINY)
        write_generations(str(root / name), TINY, model)
    return root, str(root / "t1"), str(root / "t2")


def statuses(root: Path, state: Path) -> dict[str, tuple[str, str | None]]:
    """Each table's status in a real plan, and who paused it (None: not paused)."""
    run = run_cli("fleet", "plan", str(root), "--state", str(state), "--json")
    assert run.rc == 0, run.stderr
    return {t["table"]: (t["status"], (t["paused"] or {}).get("by")) for t in json.loads(run.stdout)["tables"]}


def control(verb: str, target: str, state: Path, by: str = "alice", *extra: str) -> None:
    run = run_cli("fleet", verb, target, "--state", str(state), "--by", by, "--reason", f"{verb} it", *extra)
    assert run.rc == 0, run.stderr


def edit(state: Path, change) -> None:  # type: ignore[no-untyped-def]
    path = state / "controls.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_a_signed_resume_cancel_or_old_pause_pasted_into_the_pauses_holds_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMWAL_FLEET_KEY", KEY)
    root, t1, t2 = lake(tmp_path)
    state = tmp_path / "state"
    control("pause", t1, state, "bob")
    assert statuses(root, state) == {t1: ("paused", "bob"), t2: ("behind", None)}
    control("pause", f"{root}/*", state, "carol", "--yes")
    control("resume", f"{root}/*", state, "carol")  # its signed pause is now an old one
    assert run_cli("fleet", "cancel", t2, "--state", str(state), "--by", "dave", "--reason", "stop").rc == 0
    doc = json.loads((state / "controls.json").read_text())
    resume = next(e for e in doc["log"] if e["action"] == "resume")
    cancel = next(e for e in doc["log"] if e["action"] == "cancel")
    assert resume["target"] == f"{root}/*" and cancel["target"] == t2 and resume["sig"] and cancel["sig"]
    kept = json.loads((state / "controls.json").read_text())

    # the forger re-types signed log entries as pauses: each keeps its action and signature
    for entry, why in ((resume, "a resume log entry, not a pause"), (cancel, "a cancel log entry, not a pause")):
        edit(state, lambda d, e=entry: d["pauses"].append(dict(e)))
        assert statuses(root, state) == {t1: ("paused", "bob"), t2: ("behind", None)}
        run = run_cli("fleet", "plan", str(root), "--state", str(state), "--json")
        assert why in run.stderr, run.stderr
        (state / "controls.json").write_text(json.dumps(kept))
    # ... or without its action: the signature is a log entry's, not a pause's
    edit(state, lambda d: d["pauses"].append({k: v for k, v in cancel.items() if k != "action"}))
    assert statuses(root, state)[t2] == ("behind", None)
    (state / "controls.json").write_text(json.dumps(kept))
    assert statuses(root, state) == {t1: ("paused", "bob"), t2: ("behind", None)}


def test_a_resumed_pause_replayed_whole_and_a_pause_from_another_state_hold_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMWAL_FLEET_KEY", KEY)
    root, t1, t2 = lake(tmp_path)
    state, other = tmp_path / "state", tmp_path / "other"
    control("pause", t2, state, "erin")
    before = json.loads((state / "controls.json").read_text())
    (pause,) = before["pauses"]
    assert statuses(root, state)[t2] == ("paused", "erin")
    control("resume", t2, state, "erin")
    # the replay: the pause exactly as it was signed (and its log entry is still in the log)
    edit(state, lambda d: d["pauses"].append(pause))
    run = run_cli("fleet", "plan", str(root), "--state", str(state), "--json")
    assert "no longer in force: resumed, and replayed since" in run.stderr, run.stderr
    assert statuses(root, state)[t2] == ("behind", None)
    # another fleet's state, copied whole (its pause, log and signed set in force): bound to where it was signed
    other.mkdir()
    (other / "controls.json").write_text(json.dumps(before))
    run = run_cli("fleet", "plan", str(root), "--state", str(other), "--json")
    assert "not signed with the fleet's key (MEMWAL_FLEET_KEY) for this state" in run.stderr, run.stderr
    assert statuses(root, other)[t2] == ("behind", None)
    # a pause made where it is read is honoured, and the one before it too
    control("pause", t1, state, "frank")
    control("pause", t2, state, "gina")
    assert statuses(root, state) == {t1: ("paused", "frank"), t2: ("paused", "gina")}
    assert "t1" not in json.dumps(json.loads((state / "controls.json").read_text())["in_force"]) and KEY not in \
        (state / "controls.json").read_text()


def test_without_a_key_pauses_are_said_unauthenticated_and_a_fleet_wide_one_needs_yes(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMWAL_FLEET_KEY", raising=False)
    root, t1, t2 = lake(tmp_path)
    state = tmp_path / "state"
    assert statuses(root, state) == {t1: ("behind", None), t2: ("behind", None)}  # the fleet known
    before = tree_digest(str(state))
    for target in ("*", f"{root}/*", str(root)):
        run = run_cli("fleet", "pause", target, "--state", str(state), "--by", "ops", "--reason", "all of it")
        assert run.rc == 2 and "pauses here are unauthenticated (no MEMWAL_FLEET_KEY): confirm with --yes" in \
            run.stderr, (target, run.stderr)
        assert tree_digest(str(state)) == before  # nothing written
    control("pause", t1, state, "ops")  # one table: no confirmation asked
    control("pause", "*", state, "ops", "--yes")
    assert statuses(root, state) == {t1: ("paused", "ops"), t2: ("paused", "ops")}
    run = run_cli("fleet", "status", "--state", str(state))
    assert run.rc == 0 and "pauses are unauthenticated: no MEMWAL_FLEET_KEY here" in run.stdout, run.stdout
    run = run_cli("fleet", "status", "--state", str(state), "--json")
    assert json.loads(run.stdout)["pauses_authenticated"] is False
    page = tmp_path / "fleet.html"
    assert run_cli("fleet", "status", "--state", str(state), "--html", str(page)).rc == 0
    assert 'id="pauses-unauthenticated"' in page.read_text()
    monkeypatch.setenv("MEMWAL_FLEET_KEY", KEY)
    run = run_cli("fleet", "status", "--state", str(state), "--json")
    assert json.loads(run.stdout)["pauses_authenticated"] is True
    assert run_cli("fleet", "status", "--state", str(state), "--html", str(page)).rc == 0
    assert 'id="pauses-unauthenticated"' not in page.read_text()


def test_targets_are_recorded_absolute_and_a_cancel_of_no_table_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMWAL_FLEET_KEY", raising=False)
    root, t1, _ = lake(tmp_path)
    state = tmp_path / "state"
    monkeypatch.chdir(tmp_path)
    control("pause", "lake/t1", state, "ops")
    assert run_cli("fleet", "cancel", "./lake/t1", "--state", str(state), "--by", "ops", "--reason", "r").rc == 0
    log = json.loads((state / "controls.json").read_text())["log"]
    assert [(e["action"], e["target"]) for e in log] == [("pause", t1), ("cancel", t1)]
    control("resume", "lake/t1", state, "ops")  # the relative name lifts it
    before = tree_digest(str(tmp_path))
    run = run_cli("fleet", "cancel", str(tmp_path / "nonexistent" / "t"), "--state", str(state), "--by", "ops",
                  "--reason", "r")
    assert run.rc == 2 and "no Lance table there: nothing to cancel" in run.stderr, run.stderr
    assert tree_digest(str(tmp_path)) == before


def test_a_partial_replay_of_an_old_pause_and_its_set_in_force_holds_nothing(tmp_path, monkeypatch):
    """Issue 83: the old signed pause and the old signed set in force restored together, the log
    (with its signed resume) kept: the pause is not honoured, and says why; a pause made after the
    resume is."""
    monkeypatch.setenv("MEMWAL_FLEET_KEY", KEY)
    root, t1, t2 = lake(tmp_path)
    state = tmp_path / "state"
    control("pause", t2, state, "hank")
    before = json.loads((state / "controls.json").read_text())
    control("resume", t2, state, "hank")
    edit(state, lambda d: d.update(pauses=before["pauses"], in_force=before["in_force"]))
    run = run_cli("fleet", "plan", str(root), "--state", str(state), "--json")
    assert run.rc == 0 and "the log holds its signed resume" in run.stderr, run.stderr
    assert statuses(root, state) == {t1: ("behind", None), t2: ("behind", None)}
    control("pause", t2, state, "ivy")  # a pause after the resume: in force
    assert statuses(root, state)[t2] == ("paused", "ivy")
