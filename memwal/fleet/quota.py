"""Quotas: each group of tables gets a share of the fleet's budget, and borrows what others leave.

A policy's ``quotas`` name groups, each a share of the budget (the workers a run has) and the
tables it holds, by source or glob over table URIs::

    quotas:
      hot:     {share: 0.6, match: ["s3://lake/hot/*"]}
      tenants: {share: 0.3, match: ["s3://lake/tenants"]}

Tables no group matches form the default group, with what the shares leave (here 0.1; none
left: it runs only on what the groups do not use). The work is ordered least quota used first
(Amoro's scheduling): the next table to start is the next of the group whose tables started
so far, over its share, is lowest; within a group, the plan's order (tables no live writer
can drain first, then by debt). A group with nothing left to run drops out and the others
share its part: borrowing needs no rule of its own. The order is all there is to it, so the
same order drives the fleet runner's workers and the Airflow DAG's chunks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from memwal.errors import BadInputError

T = TypeVar("T")
DEFAULT_GROUP = "default"


@dataclass(frozen=True)
class Quota:
    name: str
    share: float
    match: tuple[str, ...]


def quotas_from(doc: Any, where: str) -> tuple[Quota, ...]:
    """The quotas of a policy (see the module docstring); shares sum to at most 1."""
    if doc is None:
        return ()
    if not isinstance(doc, Mapping):
        raise BadInputError(f"policy {where}: expected a mapping of group: {{share, match}}")
    out = []
    for name, entry in doc.items():
        at = f"{where}.{name}"
        if name == DEFAULT_GROUP:
            raise BadInputError(f"policy {at}: {DEFAULT_GROUP} is the group of the tables no quota matches")
        if not isinstance(entry, Mapping) or set(entry) - {"share", "match"}:
            raise BadInputError(f"policy {at}: expected {{share: 0..1, match: [source or glob, ...]}}")
        share = entry.get("share")
        if isinstance(share, bool) or not isinstance(share, int | float) or not math.isfinite(share) \
                or not 0 < share <= 1:
            raise BadInputError(f"policy {at}.share: expected a share above 0 and at most 1, got {share!r}")
        match = entry.get("match") or []
        match = [match] if isinstance(match, str) else list(match)
        if not match:
            raise BadInputError(f"policy {at}.match: name the sources or table globs of the group")
        out.append(Quota(str(name), float(share), tuple(str(m) for m in match)))
    if sum(q.share for q in out) > 1 + 1e-9:
        raise BadInputError(f"policy {where}: the shares sum to {sum(q.share for q in out):g}, more than 1")
    return tuple(out)


def group_of(quotas: Sequence[Quota], uri: str, source: str) -> str:
    """The group of a table: the first quota that matches it, else the default group."""
    from memwal.fleet.controls import matches

    return next((q.name for q in quotas if any(matches(m, uri, source) for m in q.match)), DEFAULT_GROUP)


def shares(quotas: Sequence[Quota]) -> dict[str, float]:
    """Each group's share, the default group's included (what the others leave)."""
    out = {q.name: q.share for q in quotas}
    out[DEFAULT_GROUP] = max(0.0, 1.0 - sum(out.values()))
    return out


def fair_order(items: Sequence[T], group: Callable[[T], str], share: Mapping[str, float]) -> list[T]:
    """``items`` (each group's in their given order), least quota used first (see the module
    docstring). A group with no share goes after every group that has one."""
    queues: dict[str, list[T]] = {}
    for item in items:
        queues.setdefault(group(item), []).append(item)
    started = dict.fromkeys(queues, 0)
    heads = dict.fromkeys(queues, 0)
    first_seen = {g: i for i, g in enumerate(queues)}
    out: list[T] = []
    while len(out) < len(items):
        live = [g for g in queues if heads[g] < len(queues[g])]

        def used(g: str) -> tuple[float, float, int]:
            s = share.get(g, 0.0)
            return (0.0, started[g] / s, first_seen[g]) if s > 0 else (1.0, float(started[g]), first_seen[g])

        g = min(live, key=used)
        out.append(queues[g][heads[g]])
        heads[g] += 1
        started[g] += 1
    return out


__all__ = ["DEFAULT_GROUP", "Quota", "fair_order", "group_of", "quotas_from", "shares"]
