"""The "MemWAL" view inside Airflow's UI, fed by hostile records (issue 38, the stored XSS).

Airflow's UI frames external views with ``sandbox="allow-scripts allow-same-origin"``: a script
in a table's page would run with the viewer's Airflow session, and an admin's session can create
Variables through ``/api/v2/variables``. Here the table's storage carries records whose every
field tries to run script, load from a canary server and create a Variable; an admin views the
page in real Chromium through a real ``airflow api-server``: no script runs, nothing loads, no
Variable appears, and every response carries the sandboxing policy.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest

import memwal
from tests.airflow_server import VENV_BIN, api_server
from tests.browser import browser, canary
from tests.helpers import migrated_airflow_home
from tests.hostile import plant_hostile_checkpoint, plant_hostile_history, plant_record

ATTACK = ("<script>fetch('/api/v2/variables',{method:'POST',headers:{'Content-Type':'application/json'},"
          "body:JSON.stringify({key:'memwal_pwned',value:'1'})})</script>"
          "<img src=x onerror=\"fetch('/api/v2/variables',{method:'POST',headers:{'Content-Type':"
          "'application/json'},body:JSON.stringify({key:'memwal_pwned',value:'2'})})\">")


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory):
    return migrated_airflow_home(tmp_path_factory.mktemp("airflow-hostile"))


def authorized(base: str, path: str) -> tuple[int, dict[str, str], str]:
    with urllib.request.urlopen(f"{base}/auth/token", timeout=30) as r:
        token = json.load(r)["access_token"]
    req = urllib.request.Request(f"{base}{path}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, dict(r.headers), r.read().decode()


def test_hostile_records_run_no_script_in_the_airflow_ui_and_create_no_variable(airflow_env, make_table, tmp_path):
    table, _ = make_table(name="events")
    assert memwal.open(table.uri).merge().ok
    with canary() as c, api_server(airflow_env, tmp_path) as (base, config, env):
        now = time.time()
        plant_hostile_history(table.uri, c, now)
        plant_hostile_checkpoint(table.uri, c, now, table.dataset().version)
        plant_record(table.uri, "compact", now - 30, {
            "job": "compact", "run_id": ATTACK, "engine": ATTACK, "holder": ATTACK, "outcome": "failed",
            "started_at": now - 30, "finished_at": now - 29, "versions": [], "error": ATTACK,
            "figures": {"fragments_before": 1, "fragments_after": 1}, "lag": {}, "detail": False})
        plant_record(table.uri, "merge", now - 20, {  # the field the exploit used: into an SVG class
            "job": f'merge"/>{ATTACK}', "run_id": "ab12", "engine": "local", "holder": "h", "outcome": "ok",
            "started_at": now - 20, "finished_at": now - 19, "versions": [], "error": None, "figures": {},
            "lag": {"s": [1, 1, 1.0]}, "detail": False})
        config.write_text(f"tables:\n  - name: events\n    table: {table.uri}\n")

        status, headers, page = authorized(base, "/memwal/tables/config/events")
        assert status == 200
        policy = headers["content-security-policy"]
        assert "script-src 'none'" in policy and "sandbox allow-same-origin" in policy
        # no script and no form, whatever the UI's frame allows; the origin is kept so that the
        # page's links carry the viewer's session (test_airflow_fleet: a real login)
        assert "allow-scripts" not in policy and "allow-forms" not in policy and "allow-popups" not in policy
        assert headers["x-content-type-options"] == "nosniff"
        assert "<script>fetch('/api/v2/variables'" not in page and "&lt;script&gt;fetch(" in page
        index_policy = authorized(base, "/memwal/")[1]["content-security-policy"]
        assert "sandbox" in index_policy and "script-src 'none'" in index_policy

        with browser() as b:
            b.navigate(f"{base}/plugin/memwal")
            b.wait_for_frame("/memwal/", "document.readyState === 'complete' && "
                                         "document.querySelectorAll('tr.table').length")
            listing = b.frame_evaluate("/memwal/", "getComputedStyle(document.body).backgroundColor")
            b.frame_evaluate("/memwal/", "document.querySelector('a.table-link').click()")
            seen = b.wait_for_frame("/tables/config/events", """(() => {
                const runs = document.querySelectorAll('tr.run');
                if (document.readyState !== 'complete' || !runs.length) return null;
                return {runs: runs.length, scripts: document.querySelectorAll('script').length,
                        handlers: [...document.querySelectorAll('*')].filter(
                            e => [...e.attributes].some(a => a.name.startsWith('on'))).length,
                        text: document.body.innerText,
                        background: getComputedStyle(document.body).backgroundColor}; })()""")
            time.sleep(3)  # what an injected script would have sent by now reaches its server
        hits = list(c.hits)
    assert hits == []
    assert seen["scripts"] == 0 and seen["handlers"] == 0
    # the policy admits the pages' own stylesheet (by its hash): they are styled, not bare
    assert seen["background"] == "rgb(246, 247, 249)" and listing == "rgb(246, 247, 249)"
    assert "fetch('/api/v2/variables'" in seen["text"]  # the attack is shown, as text
    listed = subprocess.run([str(VENV_BIN / "airflow"), "variables", "list", "-o", "json"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "memwal_pwned" not in listed.stdout
