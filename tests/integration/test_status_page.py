"""The status page (``memwal status --html``) as a person sees it: rendered by headless Chromium
from real tables (and from a 1,000-shard status), checked on the DOM Chromium built."""

from __future__ import annotations

import json
import re

import pytest

import memwal
from memwal.checkpoint import create_checkpoint
from memwal.demo import shard_ids_for
from memwal.inspect.page import PageData, render
from memwal.inspect.status import ShardStatus, TableStatus
from tests.browser import dump_dom
from tests.conftest import SMALL
from tests.helpers import run_cli, tree_digest


def shown(path) -> object:
    return dump_dom(f"file://{path}")


def bars(dom, chart: str) -> list:
    return dom.select(f"svg#{chart} rect.bar")


def test_status_html_shows_every_shard_its_lag_the_catchup_the_runs_and_checkpoints(make_table, tmp_path):
    table, _ = make_table()
    ids = shard_ids_for(SMALL)
    t = memwal.open(table.uri)
    merged = t.merge(shards=[ids[0]]).to_dict()                  # one shard fully merged, two not at all
    t.catchup()
    t.merge(shards=[ids[1]], max_generations=1)                  # one more, after the catch-up: indexes behind
    ckpt = create_checkpoint(t.table, lifetime_seconds=3600, name="reader-a")
    page = tmp_path / "status.html"
    run = run_cli("status", table.uri, "--html", str(page))
    assert run.rc == 0, run.stderr
    assert f"status page: {page}" in run.stdout
    status = json.loads(run_cli("status", table.uri, "--json").stdout)
    unmerged = {s["shard_id"]: len(s["unmerged_generations"]) for s in status["shards"]}
    assert unmerged == {ids[0]: 0, ids[1]: 3, ids[2]: 4}

    html = page.read_text()
    # self-contained: no script, nothing fetched (no external src/href, no CSS url() or @import)
    assert "<script" not in html and "@import" not in html and "url(" not in html
    assert not re.search(r'(src|href)="(https?:)?//', html)

    dom = shown(page)
    assert dom.one("#table-uri").text == table.uri
    # the shards are listed, worst first, with their figures
    rows = dom.select("table#shards tr.shard")
    assert [r.attrs["data-shard"] for r in rows] == [ids[2], ids[1], ids[0]]
    by_id = {r.attrs["data-shard"]: [td.text for td in r.select("td")] for r in rows}
    assert by_id[ids[2]][:5] == [ids[2], "active", "0", "4", "1–4"]
    assert by_id[ids[1]][:5] == [ids[1], "active", "1", "3", "2–4"]
    assert by_id[ids[0]][:5] == [ids[0], "active", "4", "0", "-"]
    rows_of = {s["shard_id"]: s["unmerged_rows"] for s in status["shards"]}
    assert by_id[ids[2]][5] == f"{rows_of[ids[2]]:,}"
    # the lag chart has one bar per shard, each as tall as its unmerged generations
    lag = bars(dom, "lag")
    assert len(lag) == 3
    assert {b.attrs["data-shard"]: int(b.attrs["data-value"]) for b in lag} == unmerged
    assert "zero" in next(b for b in lag if b.attrs["data-shard"] == ids[0]).classes
    heights = {b.attrs["data-shard"]: float(b.attrs["height"]) for b in lag}
    assert heights[ids[2]] > heights[ids[1]] > heights[ids[0]]
    assert [t.text for t in dom.select("svg#lag text.bar-label")] == [i[:8] for i in (ids[2], ids[1], ids[0])]
    # index catch-up: one chart per maintained index, one bar per shard; ids[1] merged after the catch-up
    for index in ("id_idx", "vec_idx"):
        behind = {b.attrs["data-shard"]: int(b.attrs["data-value"]) for b in bars(dom, f"catchup-{index}")}
        assert behind == {ids[0]: 0, ids[1]: 1, ids[2]: 0}
    # recent runs, newest first, with their outcome and figures
    runs = dom.select("table#runs tr.run")
    assert [(r.attrs["data-job"], r.attrs["data-outcome"]) for r in runs if r.attrs["data-job"] != "external"] == [
        ("merge", "ok"), ("catchup", "ok"), ("merge", "ok")]
    first_merge = [r for r in runs if r.attrs["data-job"] == "merge"][-1]
    gens = merged["shards"][0]["to_generation"] - merged["shards"][0]["from_generation"] + 1
    assert f"{gens} generations of 1 shard" in first_merge.text
    assert merged["run_id"] in first_merge.text
    # the lag over time: a point per recorded run (the lag each left), then now
    points = dom.select("svg#lag-over-time circle.point")
    assert [int(p.attrs["data-value"]) for p in points] == [8, 8, 7, 7]  # merge, catchup, merge, now
    # the live checkpoint
    cps = dom.select("table#checkpoints tr.checkpoint")
    assert [c.attrs["data-checkpoint"] for c in cps] == [ckpt.id] and "reader-a" in cps[0].text
    kpis = {k.one("div.label").text: k.one("div.value").text for k in dom.select("div.kpi")}
    assert kpis["unmerged generations"] == "7" and kpis["shards"] == "3" and kpis["last run"] == "merge"


def status_of(n: int) -> TableStatus:
    shards = []
    for i in range(n):
        lag = i % 7
        shards.append(ShardStatus(
            shard_id=f"{i:08x}-0000-4000-8000-{i:012x}", status="active", writer_epoch=1, manifest_version=3,
            current_generation=10 + lag, flushed_generations=list(range(1, 10 + lag)), collected_generations=[],
            compacted_generation=9, unmerged_generations=list(range(10, 10 + lag)), unmerged=[],
            unmerged_rows=100 * lag, unmerged_bytes=4096 * lag, oldest_unmerged_age_seconds=30.0 * lag or None,
            index_catchup={"id_idx": 9 - i % 2}))
    return TableStatus(table="s3://lake/big", version=42, maintained_indexes=["id_idx"], shards=shards)


@pytest.mark.parametrize("n", [1, 1000])
def test_page_draws_one_bar_per_shard_for_one_and_a_thousand_shards(n, tmp_path):
    page = tmp_path / "page.html"
    page.write_text(render(PageData(status_of(n), runs=[], now=1_800_000_000.0)))
    dom = shown(page)
    lag = bars(dom, "lag")
    assert len(lag) == n and len(dom.select("table#shards tr.shard")) == n
    assert len({b.attrs["data-shard"] for b in lag}) == n
    assert len(bars(dom, "catchup-id_idx")) == n
    # worst first: the bars never grow from left to right
    values = [int(b.attrs["data-value"]) for b in lag]
    assert values == sorted(values, reverse=True)
    if n == 1:
        assert [t.text for t in dom.select("svg#lag text.bar-label")] == ["00000000"]
    else:  # too many to label: the chart says how many, every bar stays inside the chart
        assert not dom.select("svg#lag text.bar-label")
        assert "1,000 shards" in dom.one("svg#lag").text
        assert all(48 <= float(b.attrs["x"]) and float(b.attrs["x"]) + float(b.attrs["width"]) <= 948.01 for b in lag)
    assert dom.one("#runs-section p.empty").text == "No run recorded yet."


def test_status_html_to_an_unwritable_place_is_bad_input_and_writes_nothing(make_table, tmp_path):
    table, _ = make_table()
    before = tree_digest(table.uri)
    run = run_cli("status", table.uri, "--html", str(tmp_path / "missing" / "page.html"))
    assert run.rc == 2
    assert run.error_lines == [f"memwal: error: --html {tmp_path / 'missing' / 'page.html'}: folder "
                               f"{tmp_path / 'missing'} does not exist"]
    assert tree_digest(table.uri) == before and not (tmp_path / "missing").exists()


def test_python_api_writes_the_same_page(make_table, tmp_path):
    table, _ = make_table()
    page = tmp_path / "api.html"
    st = memwal.open(table.uri).status(html=str(page))
    dom = shown(page)
    assert {r.attrs["data-shard"] for r in dom.select("table#shards tr.shard")} == {s.shard_id for s in st.shards}
    assert len(bars(dom, "lag")) == len(st.shards) == 3


def test_a_broken_shard_is_red_and_names_in_the_page_are_text_never_markup(tmp_path):
    st = status_of(3)
    st.table = "/lake/<script>alert(1)</script>"
    broken = st.shards[1]
    broken.status, broken.problem = "broken", "manifest-gap: <img src=x onerror=alert(2)> version 3 is missing"
    page = tmp_path / "page.html"
    page.write_text(render(PageData(st, runs=[], now=1_800_000_000.0)))
    html = page.read_text()
    assert "<script" not in html and "<img" not in html
    dom = shown(page)
    assert dom.one("#table-uri").text == "/lake/<script>alert(1)</script>"
    (bar,) = [b for b in bars(dom, "lag") if b.attrs["data-shard"] == broken.shard_id]
    assert "bad" in bar.classes and "BROKEN" in bar.one("title").text
    (row,) = dom.select("table#shards tr.broken")
    assert row.attrs["data-shard"] == broken.shard_id and "<img src=x onerror=alert(2)>" in row.text
