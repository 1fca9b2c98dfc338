"""Medians, spreads, quantiles and ratios: the figures a bench reports from its runs.

A figure is a median of interleaved runs, reported with its spread (the fastest and the slowest
run), and compared with its baseline as a ratio: never a lone time, which on a shared machine
says more about the machine than about the code.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any


def spread(values: Iterable[float], digits: int = 3) -> dict[str, float]:
    """Median, fastest and slowest of ``values``."""
    v = list(values)
    return {"median": round(statistics.median(v), digits), "min": round(min(v), digits),
            "max": round(max(v), digits)}


def ratio(a: float | None, b: float | None, digits: int = 2) -> float | None:
    """``a / b`` rounded, or None when either is missing or ``b`` is not positive."""
    if a is None or b is None or b <= 0:
        return None
    return round(a / b, digits)


def quantiles(values: Iterable[float]) -> dict[str, Any]:
    """p50, p99, max and mean (and how many values): the shape of a latency distribution."""
    import numpy as np

    v = np.asarray(list(values), dtype=float)
    if not len(v):
        return {"n": 0}
    return {"n": int(len(v)), "p50": round(float(np.percentile(v, 50)), 3),
            "p99": round(float(np.percentile(v, 99)), 3), "max": round(float(v.max()), 3),
            "mean": round(float(v.mean()), 3)}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A contender's runs (each with ``whole_seconds`` and ``inner_seconds``) as medians, the
    fastest run's figures, the median peak RSS and the counts the runs agree on."""
    whole = [r["whole_seconds"] for r in runs]
    inner = [r["inner_seconds"] for r in runs]
    out = {
        "whole_seconds": statistics.median(whole),
        "inner_seconds": statistics.median(inner),
        "whole_seconds_min": min(whole),
        "inner_seconds_min": min(inner),
        "runs": runs,
        "identical": all(r.get("identical", False) for r in runs),
    }
    rss = [r["peak_rss_mb"] for r in runs if "peak_rss_mb" in r]
    if rss:
        out["peak_rss_mb"] = statistics.median(rss)
    for k in ("commits", "generations", "rows_upserted", "rows_deleted", "spark_startup_seconds"):
        vals = [r[k] for r in runs if k in r]
        if vals:
            out[k] = statistics.median(vals) if k.endswith("seconds") else vals[0]
    return out


__all__ = ["quantiles", "ratio", "spread", "summarize"]
