"""A fleet's policy: when a table needs a job, how much each job's debt weighs, how big a batch
one run may take, with which job options, the service levels owed, and the operator's controls.

A policy file (YAML or JSON) has ``defaults`` and optional overrides, each a partial policy
laid over what it overrides::

    defaults:
      thresholds: {merge_generations: 1, compact_fragments: 64}
      weights: {merge: 2}
      batch: {max_generations: 32}
      options: {gc: {grace_seconds: 600}}
      slo: {oldest_unmerged_seconds: 1800, generations_per_shard: 8}
    sources:                 # by the source string, or a glob over table URIs
      "s3://lake/hot/*": {thresholds: {merge_age_seconds: 60}}
    tables:                  # by table URI (or glob): the last word
      "s3://lake/hot/events": {weights: {merge: 5}, slo: {oldest_unmerged_seconds: 300}}
    paused:                  # withheld until resumed (memwal.fleet.controls)
      "s3://lake/legacy/*": {by: alice, reason: "migrating until December"}
    quiet_hours:             # no job (or none of these kinds) starts inside a window
      - {from: "08:00", to: "18:00", days: [mon, tue, wed, thu, fri], jobs: [compact, gc]}
    quotas:                  # shares of the budget, borrowed when idle (memwal.fleet.quota)
      hot: {share: 0.6, match: ["s3://lake/hot/*"]}

Every key is checked when the file is read: an unknown key or a bad value is bad input
naming its place (``tables."s3://x".thresholds.merge_generations``), before anything runs.
"""

from __future__ import annotations

import fnmatch
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from memwal.errors import BadInputError
from memwal.fleet.controls import Controls, Pause, QuietHours, pauses_from, quiet_from
from memwal.fleet.quota import Quota, quotas_from

JOBS = ("merge", "catchup", "compact", "snapshot", "gc")
POLICY_KEYS = ("defaults", "sources", "tables", "paused", "quiet_hours", "quotas")
#: Largest policy file read.
MAX_POLICY_BYTES = 1 << 20
#: Largest number a policy value may be (exact in a float; some 285 years of seconds).
MAX_NUMBER = 2**53


@dataclass(frozen=True)
class Thresholds:
    """When a table needs each job (each reason names the threshold it passed)."""

    merge_generations: int = 1  # unmerged generations in one shard
    merge_age_seconds: float = 0.0  # or its oldest unmerged generation this old (0: off)
    catchup_generations: int = 1  # merged generations an index has not caught up with
    catchup_unindexed_fraction: float = 0.05  # or this share of live rows outside an index
    compact_fragments: int = 64  # fragments in the base table
    compact_deleted_fraction: float = 0.1  # or this share of its rows deleted
    gc_generations: int = 1  # merged, caught-up generations still on storage
    snapshot_age_seconds: float = 300.0  # republish when a writer flushed after the snapshot and it is this old
    gc_retry_seconds: float = 600.0  # after a GC that waits for time, plan it again only this much later
    # When a shard's writer counts as gone (its tables are drained first) is GC's own setting,
    # ``options.gc.writer_idle_seconds``: one answer for the fleet and for GC (issue 57).


#: Keys a policy once had, and where their setting lives now (bad input naming it).
MOVED = {"writer_gone_seconds": "options.gc.writer_idle_seconds (one setting for the fleet and GC, "
                                "default 86400 s)"}


@dataclass(frozen=True)
class Weights:
    """How much one unit of each job's debt counts in the table's debt."""

    merge: float = 1.0
    catchup: float = 1.0
    compact: float = 1.0
    snapshot: float = 1.0
    gc: float = 1.0


@dataclass(frozen=True)
class Batch:
    """The most one run of a job takes on, so that no table waits behind one huge one."""

    max_generations: int | None = 32  # merge: generations per shard
    max_rows: int | None = None  # merge: change rows
    max_fragments: int | None = 256  # compact: fragments rewritten


@dataclass(frozen=True)
class Slo:
    """The service level a table is owed (null: no target): breaches are counted, alerted and
    shown (:mod:`memwal.fleet.slo`). Paimon stops writers at 8 sorted runs; lance-context's own
    merges start at 8 generations."""

    oldest_unmerged_seconds: float | None = 1800.0  # the oldest unmerged generation, at most this old
    generations_per_shard: int | None = 8  # generations any one shard lists (what readers open), at most


@dataclass(frozen=True)
class TablePolicy:
    thresholds: Thresholds = field(default_factory=Thresholds)
    weights: Weights = field(default_factory=Weights)
    batch: Batch = field(default_factory=Batch)
    #: Job options by job (as the job's command takes them): ``{"gc": {"grace_seconds": 600}}``.
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    slo: Slo = field(default_factory=Slo)
    #: On the Spark engine, a table with more unmerged bytes than this runs through the per-table
    #: Spark engines; smaller ones run as tasks of one Spark application, the local engine inside.
    spark_min_bytes: int = 1 << 30


@dataclass(frozen=True)
class Policy:
    defaults: TablePolicy = field(default_factory=TablePolicy)
    #: ``(pattern, overrides)``, applied in order: a source string, or a glob over table URIs.
    sources: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    tables: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    paused: tuple[Pause, ...] = ()
    quiet_hours: tuple[QuietHours, ...] = ()
    quotas: tuple[Quota, ...] = ()

    def controls(self) -> Controls:
        """The policy's pauses and quiet hours (the state's pauses are laid on by the caller)."""
        return Controls(self.paused, self.quiet_hours)

    def unmatched(self, tables: Iterable[tuple[str, str]]) -> list[str]:
        """Every key of the policy that names tables (``sources``, ``tables``, ``paused``, a quiet
        window's or a quota's ``match``) and matches none of ``tables`` (``(uri, source)`` pairs):
        each as its place in the file, with a hint when tables lie under it (a folder is no
        glob: ``.../hot`` matches neither ``.../hot/a`` nor its tables; ``.../hot/*`` does)."""
        from memwal.fleet.controls import matches

        refs = list(tables)
        keys = [(f"sources.{json.dumps(p)}", p, _source_key) for p, _ in self.sources]
        keys += [(f"tables.{json.dumps(p)}", p, _table_key) for p, _ in self.tables]
        keys += [(f"paused.{json.dumps(p.target)}", p.target, matches) for p in self.paused]
        keys += [(f"quiet_hours[{i}].match", m, matches) for i, q in enumerate(self.quiet_hours) for m in q.match]
        keys += [(f"quotas.{q.name}.match", m, matches) for q in self.quotas for m in q.match]
        out = []
        for where, pattern, hit in keys:
            if any(hit(pattern, uri, source) for uri, source in refs):
                continue
            under = pattern.rstrip("/") + "/"
            hint = (f" (tables lie under it: {json.dumps(under + '*')} matches them)"
                    if any(uri.startswith(under) for uri, _ in refs) else "")
            out.append(f"policy {where}: matches no table of the fleet{hint}")
        return out

    def for_table(self, uri: str, source: str) -> TablePolicy:
        """The defaults, then every matching source override, then every matching table override."""
        out = self.defaults
        for pattern, over in self.sources:
            if _source_key(pattern, uri, source):
                out = _overlay(out, over, f"sources.{json.dumps(pattern)}")
        for pattern, over in self.tables:
            if _table_key(pattern, uri, source):
                out = _overlay(out, over, f"tables.{json.dumps(pattern)}")
        return out


def _source_key(pattern: str, uri: str, source: str) -> bool:
    """Whether a ``sources`` key names the table: its source as given, or a glob over its URI."""
    return pattern == source or fnmatch.fnmatchcase(uri, pattern)


def _table_key(pattern: str, uri: str, source: str) -> bool:
    """Whether a ``tables`` key names the table: its URI, or a glob over it."""
    return pattern == uri or fnmatch.fnmatchcase(uri, pattern)


def _number(where: str, value: Any, kind: type, *, optional: bool = False, least: int = 0) -> Any:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not least <= value <= MAX_NUMBER \
            or (isinstance(value, float) and not math.isfinite(value)):
        raise BadInputError(f"policy {where}: expected a number from {least} to {MAX_NUMBER}, got {_shown(value)}")
    if kind is int and value != int(value):
        raise BadInputError(f"policy {where}: expected a whole number, got {_shown(value)}")
    return kind(value)


def _shown(value: Any) -> str:
    """A value for an error message: its type and a clipped text (a huge integer, a nested list)."""
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        text = repr(value)
    else:
        text = f"{type(value).__name__} {str(value)[:40]!r}"
    return text if len(text) <= 60 else f"{text[:57]}..."


def _name(key: Any) -> str:
    """A key as its place shows it: a string as it is (clipped), anything else by :func:`_shown`."""
    return key[:60] if isinstance(key, str) else _shown(key)


def _key(key: Any) -> str:
    """A policy key as shown in a place: a string as it is, anything else (a date, a number) refused."""
    if not isinstance(key, str):
        raise BadInputError(f"policy key {_shown(key)}: expected a string")
    return key


def _section(cls: type, base: Any, over: Any, where: str) -> Any:
    if not isinstance(over, Mapping):
        raise BadInputError(f"policy {where}: expected a mapping, got {type(over).__name__}")
    known = {f.name: f for f in fields(cls)}
    changes = {}
    for key, value in over.items():
        if key in MOVED and key not in known:
            raise BadInputError(f"policy {where}.{key}: no longer a key; set {MOVED[key]}")
        if key not in known:
            raise BadInputError(f"policy {where}.{_name(key)}: unknown key (expected one of {', '.join(known)})")
        default = getattr(cls(), key)
        kind = int if isinstance(default, int) or (default is None and key.startswith("max_")) else float
        # a batch of nothing would pass the plan and fail every run
        changes[key] = _number(f"{where}.{key}", value, kind, optional=default is None or cls is Slo,
                               least=int(cls is Batch))
    return replace(base, **changes)


def _overlay(base: TablePolicy, over: Any, where: str) -> TablePolicy:
    """``base`` with the partial policy ``over`` laid on it, every key checked."""
    if not isinstance(over, Mapping):
        raise BadInputError(f"policy {where}: expected a mapping, got {type(over).__name__}")
    out = base
    for key, value in over.items():
        if key == "thresholds":
            out = replace(out, thresholds=_section(Thresholds, out.thresholds, value, f"{where}.thresholds"))
        elif key == "weights":
            out = replace(out, weights=_section(Weights, out.weights, value, f"{where}.weights"))
        elif key == "batch":
            out = replace(out, batch=_section(Batch, out.batch, value, f"{where}.batch"))
        elif key == "options":
            out = replace(out, options=_job_options(out.options, value, f"{where}.options"))
        elif key == "slo":
            out = replace(out, slo=_section(Slo, out.slo, value, f"{where}.slo"))
        elif key == "spark_min_bytes":
            out = replace(out, spark_min_bytes=_number(f"{where}.spark_min_bytes", value, int))
        else:
            raise BadInputError(f"policy {where}.{_name(key)}: unknown key (expected thresholds, weights, batch, "
                                "options, slo, spark_min_bytes)")
    return out


def _job_options(base: Mapping[str, Mapping[str, Any]], over: Any, where: str) -> dict[str, Mapping[str, Any]]:
    from memwal.actions import ACTIONS

    if not isinstance(over, Mapping):
        raise BadInputError(f"policy {where}: expected a mapping of job: options")
    out = dict(base)
    for job, options in over.items():
        if job not in ACTIONS:
            raise BadInputError(f"policy {where}.{_name(job)}: not a job (expected one of {', '.join(JOBS)})")
        if options is not None and not isinstance(options, Mapping):
            raise BadInputError(f"policy {where}.{job}: expected a mapping of option: value, got "
                                f"{type(options).__name__}")
        merged = {**out.get(job, {}), **{_key(k): v for k, v in (options or {}).items()}}
        try:
            ACTIONS[job].options.from_kwargs(**merged)
        except BadInputError as exc:
            raise BadInputError(f"policy {where}.{job}: {exc}") from None
        except (TypeError, ValueError, OverflowError, AttributeError) as exc:  # a list, a date, a nested mapping
            raise BadInputError(f"policy {where}.{job}: {type(exc).__name__}: {str(exc)[:200]}") from None
        out[job] = merged
    return out


def policy_from(doc: Any, where: str = "policy") -> Policy:
    """A policy from its parsed document (see the module docstring)."""
    if doc is None:
        return Policy()
    if not isinstance(doc, Mapping):
        raise BadInputError(f"{where}: expected a mapping with {', '.join(POLICY_KEYS)}")
    unknown = sorted(repr(k) if isinstance(k, str) else _shown(k) for k in set(doc) - set(POLICY_KEYS))
    if unknown:
        raise BadInputError(f"{where}: unknown key {unknown[0]} (expected {', '.join(POLICY_KEYS)})")
    defaults = _overlay(TablePolicy(), doc.get("defaults") or {}, "defaults")
    pairs: dict[str, tuple[tuple[str, Mapping[str, Any]], ...]] = {}
    for part in ("sources", "tables"):
        given = doc.get(part) or {}
        if not isinstance(given, Mapping):
            raise BadInputError(f"{where}: {part} must map a pattern to overrides")
        for pattern, over in given.items():
            _overlay(defaults, over, f"{part}.{json.dumps(_key(pattern))}")  # checked now, not when a table matches
        pairs[part] = tuple((str(p), o) for p, o in given.items())
    return Policy(defaults, pairs["sources"], pairs["tables"], pauses_from(doc.get("paused"), "paused"),
                  quiet_from(doc.get("quiet_hours"), "quiet_hours"), quotas_from(doc.get("quotas"), "quotas"))


def load_policy(path: str | None) -> Policy:
    """The policy in a YAML or JSON file (None: the defaults); every problem names the file."""
    if path is None:
        return Policy()
    import yaml

    from memwal.core.files import read_small_file
    from memwal.core.yaml_doc import load_yaml

    text = read_small_file(path, MAX_POLICY_BYTES, flag="--policy")
    try:
        doc = load_yaml(text)
    except yaml.YAMLError as exc:
        raise BadInputError(f"--policy {path}: not YAML or JSON: {str(exc).splitlines()[0]}") from None
    try:
        return policy_from(doc, "policy")
    except BadInputError as exc:  # every problem names the file and the key
        raise BadInputError(f"--policy {path}: {exc}") from None


__all__ = ["JOBS", "Batch", "Policy", "Slo", "TablePolicy", "Thresholds", "Weights", "load_policy", "policy_from"]
