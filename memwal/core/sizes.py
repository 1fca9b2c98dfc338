"""Byte counts as people read them, the one way every text output shows a size."""

from __future__ import annotations


def human_bytes(n: int) -> str:
    """``2411963`` as ``2.3MiB``: bytes whole, larger units to one decimal (binary units, up to GiB)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{n}B"


def human_duration(seconds: float | None) -> str:
    """``45s``, ``12m``, ``3h 05m``, ``7d 0h``: a duration as the pages and reasons show it."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 90:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"
