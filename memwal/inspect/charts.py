"""Inline SVG charts for the status page: bars (one per shard) and a line over time.

The page must open anywhere, offline and inside an Airflow iframe, so its charts are plain SVG
written here: no script, no font or stylesheet fetched, colours from the page's CSS classes.
Every mark carries a ``<title>`` (the browser shows it on hover) and ``data-*`` attributes
naming what it stands for, so a test can check what a person sees. Titles, labels and
attributes may carry values from storage: every one is escaped where it is written, and
class names are plain tokens (:func:`_classes`). Charts scale with their
container (``viewBox`` + ``width: 100%``); with many shards the bars get thin, never fewer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from markupsafe import Markup

from memwal.core.text import html_text as escape

#: Drawing area of a bar chart, in viewBox units (the SVG scales to its container).
WIDTH, HEIGHT = 960, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 12, 40
#: Up to this many bars get a label under them; more get a count instead.
MAX_LABELS = 48
#: A bar is never wider than this (a few shards should not look like a wall).
MAX_BAR = 64


@dataclass
class Bar:
    label: str
    value: float
    title: str
    css: str = ""  # extra class: "warn", "bad", ...
    data: dict[str, str] = field(default_factory=dict)


@dataclass
class Point:
    at: float  # seconds since the epoch
    value: float
    title: str
    css: str = ""


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """Round tick values from 0 to at least ``top`` (1, 2, 2.5, 5 x 10^k steps)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return [i * step for i in range(n + 1)]


_CLASS_TOKEN = re.compile(r"^[a-z][a-z0-9-]{0,40}$")


def _classes(*names: str) -> str:
    """A ``class`` attribute's value from plain tokens only: a name from storage (a run's job)
    that is not a plain token is dropped, and what is kept is escaped too."""
    return escape(" ".join(n for n in names if n and _CLASS_TOKEN.match(n)))


def _num(v: float) -> str:
    return f"{v:.0f}" if float(v).is_integer() else f"{v:g}"


def _attrs(data: dict[str, str]) -> str:
    return "".join(f' data-{escape(k)}="{escape(str(v))}"' for k, v in data.items())


def _y_axis(ticks: list[float], scale: Callable[[float], float], label: str, height: float,
            width: int = WIDTH) -> list[str]:
    out = []
    for t in ticks:
        y = scale(t)
        out.append(f'<line class="grid" x1="{LEFT}" x2="{width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_num(t)}</text>')
    mid = TOP + (height - TOP - BOTTOM) / 2
    out.append(f'<text class="axis-label" x="12" y="{mid:.0f}" transform="rotate(-90 12 {mid:.0f})" '
               f'text-anchor="middle">{escape(label)}</text>')
    return out


def bar_chart(bars: Sequence[Bar], *, y_label: str, chart_id: str, caption: str, height: int = HEIGHT,
              width: int = WIDTH) -> Markup:
    """One ``rect.bar`` per item, in the given order; a zero draws a thin stub on the axis
    so every shard stays visible. Labels under the bars when there are few of them;
    ``width``: as :func:`line_chart` takes it."""
    plot_w, plot_h = width - LEFT - RIGHT, height - TOP - BOTTOM
    ticks = nice_ticks(max((b.value for b in bars), default=0), 4 if plot_h > 100 else 2)
    top = ticks[-1] or 1

    def y_of(v: float) -> float:
        return TOP + plot_h - plot_h * v / top

    parts = [f'<svg class="chart bars" id="{escape(chart_id)}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{escape(caption)}" data-bars="{len(bars)}">',
             f"<title>{escape(caption)}</title>"]
    parts += _y_axis(ticks, y_of, y_label, height, width)
    n = max(1, len(bars))
    slot = plot_w / n
    gap = min(slot * 0.2, 6.0) if n <= 200 else 0.0
    w = min(max(slot - gap, 0.5), MAX_BAR)
    for i, b in enumerate(bars):
        x = LEFT + i * slot + (slot - w) / 2
        if b.value > 0:
            y = y_of(b.value)
            h = max(TOP + plot_h - y, 1.0)
        else:
            y, h = TOP + plot_h - 2, 2.0
        css = _classes("bar", "zero" if b.value <= 0 else "", *b.css.split())
        parts.append(f'<rect class="{css}" x="{x:.2f}" y="{y:.2f}" width="{w:.2f}" height="{h:.2f}"'
                     f'{_attrs({"label": b.label, "value": _num(b.value), **b.data})}>'
                     f"<title>{escape(b.title)}</title></rect>")
    base = TOP + plot_h
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{width - RIGHT}" y1="{base}" y2="{base}"/>')
    if len(bars) <= MAX_LABELS:
        for i, b in enumerate(bars):
            cx = LEFT + (i + 0.5) * slot
            parts.append(f'<text class="tick bar-label" x="{cx:.1f}" y="{base + 14}" text-anchor="middle">'
                         f"{escape(b.label)}</text>")
    else:
        parts.append(f'<text class="tick" x="{LEFT + plot_w / 2:.0f}" y="{base + 16}" text-anchor="middle">'
                     f"{len(bars):,} shards (hover a bar for its id)</text>")
    parts.append("</svg>")
    return Markup("".join(parts))


def _time_label(at: float, span: float) -> str:
    dt = datetime.fromtimestamp(at, tz=UTC)
    return dt.strftime("%H:%M:%S" if span < 3600 else "%H:%M" if span < 2 * 86400 else "%b %d %H:%M")


def line_chart(points: Sequence[Point], *, y_label: str, chart_id: str, caption: str, width: int = WIDTH) -> Markup:
    """A line through ``points`` (oldest first) over time, with a dot per point; ``width``: the
    drawing's width in viewBox units (a chart shown narrow draws narrower, so that its text
    scales down less)."""
    plot_w, plot_h = width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    ticks = nice_ticks(max((p.value for p in points), default=0))
    top = ticks[-1] or 1
    t0 = min((p.at for p in points), default=0.0)
    t1 = max((p.at for p in points), default=1.0)
    span = max(t1 - t0, 1.0)

    def x_of(at: float) -> float:
        return LEFT + plot_w * (at - t0) / span

    def y_of(v: float) -> float:
        return TOP + plot_h - plot_h * v / top

    parts = [f'<svg class="chart line" id="{escape(chart_id)}" viewBox="0 0 {width} {HEIGHT}" role="img" '
             f'aria-label="{escape(caption)}" data-points="{len(points)}">', f"<title>{escape(caption)}</title>"]
    parts += _y_axis(ticks, y_of, y_label, HEIGHT, width)
    base = TOP + plot_h
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{width - RIGHT}" y1="{base}" y2="{base}"/>')
    xy = [(x_of(p.at), y_of(p.value)) for p in points]
    if len(xy) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
        area = f"{xy[0][0]:.1f},{base} {path} {xy[-1][0]:.1f},{base}"
        parts.append(f'<polygon class="area" points="{area}"/>')
        parts.append(f'<polyline class="series" points="{path}"/>')
    for (x, y), p in zip(xy, points, strict=True):
        css = _classes("point", *p.css.split())
        parts.append(f'<circle class="{css}" cx="{x:.1f}" cy="{y:.1f}" r="3.5" data-value="{_num(p.value)}">'
                     f"<title>{escape(p.title)}</title></circle>")
    for at in (t0, t0 + span / 2, t1) if len(points) > 1 else (t0,):
        anchor = "start" if at == t0 else "end" if at == t1 else "middle"
        parts.append(f'<text class="tick" x="{x_of(at):.1f}" y="{base + 16}" text-anchor="{anchor}">'
                     f"{escape(_time_label(at, span))} UTC</text>")
    parts.append("</svg>")
    return Markup("".join(parts))
