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
