"""What a GC document says it kept, whether it names every generation or travels as a summary.

``memwal gc --json`` names every generation a run kept (``blocked``); the document that travels
(a cycle's outcome, the run history's figures, an XCom: :meth:`memwal.gc.result.GcResult.summary_dict`)
names at most a hundred and counts them all (``blocked_total``, ``blocked_by_reason``,
``blocked_gates``). Readers of either ask here, so none counts a summary's hundred as the whole.
Here, not in :mod:`memwal.gc`: the cycle, the history and the metrics read documents without
loading GC (and Lance with it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any


def blocked_total(doc: Mapping[str, Any]) -> int:
    """How many generations the run kept."""
    total = doc.get("blocked_total")
    return total if isinstance(total, int) else len(doc.get("blocked") or [])


def blocked_by_reason(doc: Mapping[str, Any]) -> dict[str, int]:
    """How many it kept by the code of the first gate that keeps each."""
    counted = doc.get("blocked_by_reason")
    if isinstance(counted, Mapping):
        return dict(counted)
    return dict(Counter(str(b["reason"]).split(":", 1)[0] for b in doc.get("blocked") or []))


def kept_by_gate(doc: Mapping[str, Any], gate: str) -> bool:
    """Whether ``gate`` (a code: ``writer-live``) keeps any generation the run kept."""
    gates = doc.get("blocked_gates")
    if isinstance(gates, Mapping):
        return gate in gates
    return any(gate in (b.get("reasons") or [b.get("reason")]) for b in doc.get("blocked") or [])


__all__ = ["blocked_by_reason", "blocked_total", "kept_by_gate"]
