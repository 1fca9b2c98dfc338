"""The status page: one self-contained HTML file an operator reads at a glance.

``memwal status TABLE --html PATH``, ``MemWalTable.status(html=PATH)`` and the Airflow UI's
"MemWAL" view all render this page. It answers the everyday questions from what the table's
own store holds, reading manifests and history records only (never generation data):

- how far behind is each shard (unmerged generations, rows, bytes, age: one bar per shard)?
- is every maintained index caught up with the merges (one chart per index)?
- how did the lag move over time (the lag each recorded run left behind, then now)?
- what ran recently, how did it end and what did it do (the history, with external commits)?
- which reader checkpoints are live and what do they hold back from GC?

The page has no script and fetches nothing: CSS and SVG are inline (:mod:`memwal.inspect.charts`),
so it opens offline, from a CI artifact, or inside an iframe with a strict sandbox.

Everything it shows from storage (run records, checkpoint names, shard ids) is untrusted
(DESIGN 3.9): records are size-capped and checked against their model when read (a bad one
is skipped and counted), every value is escaped where it lands (Jinja's autoescape for text
and attributes, :mod:`memwal.inspect.charts` for SVG), long texts are clipped, and the page
carries a Content-Security-Policy that allows no script at all (:mod:`memwal.inspect.policy`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from memwal.core import clock as clocks
from memwal.core.files import write_chunks
from memwal.core.sizes import human_duration as fmt_age
from memwal.core.text import clip, page_value
from memwal.core.text import span as text_span
from memwal.core.waits import brief
from memwal.core.words import counted
from memwal.history.record import RunEntry, lag_total
from memwal.inspect.charts import Bar, Point, bar_chart, line_chart
from memwal.inspect.policy import meta_policy

if TYPE_CHECKING:
    import jinja2

    from memwal.inspect.status import ShardStatus, TableStatus
    from memwal.table import Table

#: History records read for the runs table and the lag-over-time chart.
DEFAULT_RUNS = 200
#: Runs listed in the table of recent runs.
RECENT_RUNS = 25
WEEK = 7 * 86400


#: Live checkpoints listed (the others are counted).
CHECKPOINTS_SHOWN = 100


@dataclass
class PageData:
    """What the page shows: the status now and the history read for it."""

    status: TableStatus
    runs: list[RunEntry] = field(default_factory=list)  # ``memwal history --json`` runs, newest first
    now: float = 0.0
    history_error: str | None = None
    #: History records skipped as unreadable (too large, not matching the model, far future).
    history_skipped: int = 0


class CollectOptions(TypedDict, total=False):
    """What :func:`collect` reads, as :func:`status_page` passes it on."""

    status: TableStatus | None
    runs: int
    now: float | None


def collect(table: Table, *, status: TableStatus | None = None, runs: int = DEFAULT_RUNS,
            now: float | None = None) -> PageData:
    """Read what the page shows (``status`` when the caller already has it)."""
    from memwal.history.timeline import history
    from memwal.inspect.status import table_status

    now = clocks.current()() if now is None else now
    st = status if status is not None else table_status(table, now=now)
    skipped: list[str] = []
    try:
        h = history(table, limit=runs, detail=False)  # totals and counts are all it draws
        docs, skipped, error = h.runs, h.skipped, None
    except Exception as exc:  # noqa: BLE001 - the page still shows the status without its history
        docs, error = [], str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return PageData(st, docs, now, error, len(skipped))


def status_page(table: Table, *, links: list[tuple[str | None, str, str]] | None = None,
                **options: Unpack[CollectOptions]) -> Iterator[str]:
    """The page of ``table``, piece by piece (see :func:`collect` for the options; ``links``:
    ``(href, label, target)`` shown above the title, e.g. back to a list of tables). The
    table is read before the first piece is given: a failure to read it raises here."""
    return render_chunks(collect(table, **options), links=links)


def write_page(path: str, data: PageData) -> None:
    """Write the page to ``path`` (:func:`write_chunks`)."""
    write_chunks(path, render_chunks(data))


# -- formatting -------------------------------------------------------------------------------------
def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def fmt_time(at: float | None) -> str:
    return "-" if at is None else datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def fmt_int(n: float | None) -> str:
    return "-" if n is None else f"{int(n):,}"


def span(values: list[int]) -> str:
    return text_span(values, dash="–", sep=", ", most=6)


def _run_view(r: RunEntry) -> dict[str, str | None]:
    """One row of the recent runs table, formatted."""
    finished, error = r.get("finished_at"), r.get("error")
    took = finished - r["started_at"] if finished else None
    return {
        "job": r.get("job"), "outcome": r.get("outcome"), "started": fmt_time(r.get("started_at")),
        "took": "-" if took is None else fmt_age(took) if took >= 1 else f"{took:.1f}s",
        "versions": span(list(r.get("versions") or [])), "summary": clip(run_summary(r)),
        "run_id": clip(r.get("run_id") or "", 80), "engine": clip(r.get("engine") or "", 80),
        "error": clip(error) if error else None,
    }


def run_summary(r: RunEntry) -> str:
    """One line of what a run did, from its figures."""
    f = r.get("figures") or {}
    job = r.get("job")
    if job == "merge" and f:
        shards = f.get("shard_count", len(f.get("shards") or []))
        return (f"{counted(f.get('generations', 0), 'generation')} of {counted(shards, 'shard')}, "
                f"{fmt_int(f.get('rows_upserted', 0))} rows upserted, {fmt_int(f.get('rows_deleted', 0))} deleted")
    if job == "catchup" and f.get("indexes"):
        return ", ".join(f"{i['index_name']}: {i['action']}{'' if i.get('recorded') else ' (not recorded)'}"
                         for i in f["indexes"])
    if job == "compact" and f:
        return f"fragments {f.get('fragments_before')} → {f.get('fragments_after')}"
    if job == "snapshot" and f:
        return "snapshot published" if f.get("committed") else f"idle: {f.get('reason') or 'nothing new'}"
    if job == "gc" and f:
        blocked = brief(f.get("wait")) or ", ".join(f"{k} {v}" for k, v in (f.get("blocked_by_reason") or {}).items())
        return (f"{counted(f.get('generations', 0), 'generation')}, "
                f"{counted(f.get('wal_entries', 0), 'WAL entry', 'WAL entries')}, "
                f"{fmt_bytes(f.get('bytes', 0))} freed" + (f"; kept: {blocked}" if blocked else ""))
    if job == "external":
        ops = f.get("operations") or {}
        return ", ".join(f"{n} × {op}" for op, n in ops.items()) or "versions committed by others"
    return ""


# -- the view ---------------------------------------------------------------------------------------
def _lag_order(st: TableStatus) -> list[ShardStatus]:
    """Worst first: most unmerged generations, then oldest, then by id (a stable layout)."""
    return sorted(st.shards, key=lambda s: (-len(s.unmerged_generations), -(s.oldest_unmerged_age_seconds or 0),
                                            s.shard_id))


def _short(shard_id: str) -> str:
    return shard_id[:8]


def lag_bars(shards: list[ShardStatus]) -> list[Bar]:
    out = []
    for s in shards:
        n = len(s.unmerged_generations)
        if s.problem:
            title = f"shard {s.shard_id}: BROKEN ({s.problem}); {n} generation directories above the merged one"
        else:
            title = (f"shard {s.shard_id}: {n} unmerged generation{'s' * (n != 1)} ({span(s.unmerged_generations)}), "
                     f"{fmt_int(s.unmerged_rows)} rows, {fmt_bytes(s.unmerged_bytes)}, "
                     f"oldest {fmt_age(s.oldest_unmerged_age_seconds)}; merged up to generation "
                     f"{s.compacted_generation}")
        out.append(Bar(_short(s.shard_id), n, title, "bad" if s.problem else "", {"shard": s.shard_id}))
    return out


def catchup_view(st: TableStatus, shards: list[ShardStatus]) -> list[dict[str, Any]]:
    """Per maintained index: generations behind the merges, per shard, and a chart."""
    out = []
    for name in st.maintained_indexes:
        bars, behind_total, caught = [], 0, 0
        for s in shards:
            done = s.index_catchup.get(name, 0)
            behind = max(0, s.compacted_generation - done)
            behind_total += behind
            caught += behind == 0
            bars.append(Bar(_short(s.shard_id), behind,
                            f"{name} on shard {s.shard_id}: caught up to generation {done}, merged up to "
                            f"{s.compacted_generation} ({behind} behind)", "warn" if behind else "",
                            {"shard": s.shard_id, "index": name}))
        out.append({"name": name, "caught": caught, "shards": len(shards), "behind": behind_total,
                    "chart": bar_chart(bars, y_label="behind", chart_id=f"catchup-{name}", height=130,
                                       caption=f"index {name}: merged generations not indexed yet, per shard")})
    return out


def lag_points(data: PageData) -> list[Point]:
    """Total unmerged generations each recorded run left, oldest first, then now."""
    points = []
    for r in reversed(data.runs):
        total = lag_total(r)
        if not total or r.get("finished_at") is None:
            continue
        gens = int(total["generations"])
        points.append(Point(r["finished_at"], gens, f"after {r['job']} ({r['outcome']}) at "
                            f"{fmt_time(r['finished_at'])} UTC: {counted(gens, 'unmerged generation')}, "
                            f"{fmt_int(int(total['rows']))} rows over {total['shards']} shards", css=f"job-{r['job']}"))
    st = data.status
    points.append(Point(data.now, st.unmerged_generations, f"now ({fmt_time(data.now)} UTC): "
                        f"{counted(st.unmerged_generations, 'unmerged generation')}, "
                        f"{fmt_int(st.unmerged_rows)} rows", css="now"))
    return points


def view(data: PageData) -> dict[str, Any]:
    """Everything the template shows, formatted."""
    from memwal.core.version import __version__

    st = data.status
    shards = _lag_order(st)
    runs = data.runs
    week = [r for r in runs if r.get("job") == "gc" and (r.get("started_at") or 0) >= data.now - WEEK]
    ours = [r for r in runs if r.get("job") != "external"]
    points = lag_points(data)
    return {
        "version": __version__,
        "st": st,
        "now": fmt_time(data.now),
        "kpis": [
            ("table version", fmt_int(st.version), ""),
            ("shards", fmt_int(len(st.shards)), f"{len(st.broken)} broken" if st.broken else ""),
            ("unmerged generations", fmt_int(st.unmerged_generations), ""),
            ("unmerged rows", fmt_int(st.unmerged_rows), "" if st.unmerged_rows is not None else "unknown"),
            ("unmerged bytes", fmt_bytes(st.unmerged_bytes), ""),
            ("oldest unmerged", fmt_age(st.oldest_unmerged_age_seconds), ""),
            ("GC freed, 7 days", fmt_bytes(sum((r.get("figures") or {}).get("bytes", 0) for r in week)),
             f"{len(week)} gc run{'s' * (len(week) != 1)}"),
            ("last run", ours[0]["job"] if ours else "none",
             f"{ours[0]['outcome']}, {fmt_age(data.now - ours[0]['started_at'])} ago" if ours else "no run recorded"),
        ],
        "shards": [{
            "id": s.shard_id, "status": s.status, "merged": s.compacted_generation,
            "unmerged": len(s.unmerged_generations), "span": span(s.unmerged_generations),
            "rows": fmt_int(s.unmerged_rows) if not s.problem and s.unmerged_rows is not None else "?",
            "bytes": fmt_bytes(s.unmerged_bytes) if not s.problem else "?",
            "age": fmt_age(s.oldest_unmerged_age_seconds),
            "catchup": [(name, max(0, s.compacted_generation - s.index_catchup.get(name, 0)))
                        for name in st.maintained_indexes],
            "problem": s.problem,
        } for s in shards],
        "lag_chart": bar_chart(lag_bars(shards), y_label="unmerged generations", chart_id="lag",
                               caption="unmerged generations per shard, worst first"),
        "catchup": catchup_view(st, shards),
        "lag_points": len(points),
        "lag_over_time": line_chart(points, y_label="unmerged generations", chart_id="lag-over-time",
                                    caption="unmerged generations over time: after each recorded run, then now"),
        "runs": [_run_view(r) for r in runs[:RECENT_RUNS]],
        "runs_read": len(runs),
        "history_error": data.history_error,
        "history_skipped": data.history_skipped,
        "checkpoints": [{
            "id": c.id, "name": clip(c.name or "", 200), "version": c.version,
            "expires": fmt_age(c.expires_at - data.now),
            "pinned": c.generations_pinned, "held": c.generations_held, "bytes": fmt_bytes(c.bytes_held),
            "problem": ("its version is gone: readers of it fail; delete it" if c.version_gone else "")
            + ("; " if c.version_gone and c.long_pin else "")
            + (f"pinned for {fmt_age(c.expires_at - data.now)}" if c.long_pin else "")
            + (" (its record claimed longer: capped)" if c.claimed_expiry is not None else ""),
        } for c in st.checkpoints[:CHECKPOINTS_SHOWN]],
        "unreadable_checkpoints": [clip(why, 500) for why in st.unreadable_checkpoints[:CHECKPOINTS_SHOWN]],
        "checkpoints_more": max(0, len(st.checkpoints) - CHECKPOINTS_SHOWN),
        # the table's own policy (memwal policy): values read from storage, clipped and escaped as any
        "table_policy": [(clip(k, 100), clip(v, 100)) for k, v in (st.policy or {}).items()],
        "table_policy_invalid": [(clip(k, 100), clip(why, 300)) for k, why in (st.policy_invalid or {}).items()],
    }


@cache
def _template() -> jinja2.Template:
    import jinja2

    text = resources.files("memwal.inspect").joinpath("status_page.html.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
                             finalize=page_value)  # no raw control or bidi character (issue 61)
    return env.from_string(text)


@cache
def stylesheet() -> str:
    """The page's one inline stylesheet (its hash is the only style the page's policy allows)."""
    return resources.files("memwal.inspect").joinpath("status_page.css").read_text(encoding="utf-8")


def render_chunks(data: PageData, *, links: list[tuple[str | None, str, str]] | None = None) -> Iterator[str]:
    """The page as it is written out, piece by piece (a server streams it, a file takes it)."""
    from markupsafe import Markup

    css = stylesheet()
    return _template().generate(**view(data), links=list(links or []), css=Markup(css), policy=meta_policy(css))


def render(data: PageData, *, links: list[tuple[str | None, str, str]] | None = None) -> str:
    """The page as one HTML document."""
    return "".join(render_chunks(data, links=links))


__all__ = ["PageData", "collect", "fmt_age", "fmt_time", "render", "render_chunks", "status_page", "stylesheet",
           "write_chunks", "write_page"]
