"""What a GC document says it kept, whether it names every generation or travels as a summary.

``memwal gc --json`` names every generation a run kept (``blocked``); the document that travels
(a cycle's outcome, the run history's figures, an XCom: :meth:`memwal.gc.result.GcResult.summary_dict`)
names at most a hundred and counts them all (``blocked_total``, ``blocked_by_reason``,
``blocked_gates``). Readers of either ask here, so none counts a summary's hundred as the whole.
The same holds for the retained versions that block (``retention.blocking_versions`` names at most
a hundred; :func:`blocking_by_holder` counts them all).
Here, not in :mod:`memwal.gc`: the cycle, the history and the metrics read documents without
loading GC (and Lance with it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

#: The counts of a GC document that say it freed storage the retention kept, or drained toward it
#: (generations, WAL entries, their objects, orphans, run history, expired checkpoints; expired base
#: versions are ``expired_versions.old_versions``). Whether a run did anything
#: (:func:`memwal.history.record.outcome_of`) and whether a follower's whole GC backs off
#: (:func:`memwal.cycle.outcome.gc_freed`) both start from these: one list, so neither drifts.
GC_FREED = ("deleted", "drained", "checkpoints_removed", "wal_entries_deleted", "objects_deleted",
            "orphans_deleted", "history_pruned")


def gc_freed_any(doc: Mapping[str, Any], *more: str) -> bool:
    """Whether a GC document counts anything of :data:`GC_FREED` or of ``more``, or expired base versions."""
    return any(doc.get(k) for k in (*GC_FREED, *more)) or bool((doc.get("expired_versions") or {}).get("old_versions"))


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


#: :func:`blocking_by_holder`'s key for the versions only their age keeps (version expiry takes them).
BY_AGE = "age"


def blocking_by_holder(doc: Mapping[str, Any]) -> dict[str, int]:
    """How many retained versions keep the run's merged generations, by what keeps each version:
    :data:`BY_AGE`, ``tag``, ``branch`` or ``checkpoint`` (none: no version blocks)."""
    retention = doc.get("retention")
    counted = retention.get("blocking_by_holder") if isinstance(retention, Mapping) else None
    if not isinstance(counted, Mapping):
        return {}
    return {str(k): v for k, v in counted.items() if isinstance(v, int) and v > 0}


__all__ = ["BY_AGE", "blocked_by_reason", "blocked_total", "blocking_by_holder", "kept_by_gate"]
