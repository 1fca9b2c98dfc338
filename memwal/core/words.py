"""Counts in the words a person reads: "1 generation", "2 generations", "1 entry"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is one (``plural`` when adding an "s" is not it),
    with thousands separated: a line that says "1 generations" reads as a mistake, and one that
    is a mistake once is doubted everywhere."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


__all__ = ["counted"]
