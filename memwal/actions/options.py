"""Each action's options, declared once.

An options dataclass is the single declaration of an action's knobs. Everything else is
derived from it: the CLI flags (`memwal.cli.options.add_arguments`), the Python API's keyword
arguments and their validation (`JobOptions.from_kwargs`), the arguments handed to
``spark-submit`` (`JobOptions.to_argv`), the Airflow operators' and DAG config's
keys (`option_names`) and backfill's options. A knob added here shows up
everywhere; none can drift.

Validation uses `memwal.core.validate` (one rule per kind of value), so ``nan`` is refused
the same way from the command line, from Python and from a DAG config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import Field, asdict, dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Literal, Self, get_args

from memwal.core import validate
from memwal.core.defaults import (
    DEFAULT_EXPIRE_VERSIONS_SECONDS,
    DEFAULT_GRACE_SECONDS,
    DEFAULT_ORPHAN_AGE_SECONDS,
    DEFAULT_WRITER_IDLE_SECONDS,
)
from memwal.errors import BadInputError

DEFAULT_LEASE_TTL = 300.0
#: A merge and a snapshot refresh wait this long for the merge lease: long enough to sit out
#: the other's short hold, short enough that a stuck holder is reported, not waited on.
DEFAULT_LEASE_WAIT = 30.0
#: Where a job's heavy work runs: in-process, on Spark (the active context, or a local one), or
#: on Ray (``RAY_ADDRESS``'s cluster, or a local Ray). The one list of engines: the CLI's choices,
#: the API's keyword type, Airflow's and the DAG config's.
Engine = Literal["local", "spark", "ray"]
ENGINES: tuple[Engine, ...] = get_args(Engine)


@dataclass(frozen=True)
class Spec:
    """How one option is checked and shown on the command line."""

    kind: str  # count | duration | interval | fraction | lease_ttl | flag | names | choice
    help: str
    flag: str | None = None  # default: --<name with dashes>
    metavar: str | None = None
    choices: tuple[str, ...] = ()


def opt(default: Any, kind: str, help: str, **spec: Any) -> Any:
    """A dataclass field carrying its `Spec` (name lists default to an empty tuple)."""
    return field(default=default, metadata={"spec": Spec(kind, help, **spec)})


def _names(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        raise BadInputError(f"{name}: expected a list of names, got {value!r}")
    out = tuple(v.strip() if isinstance(v, str) else v for v in value)
    if any(not isinstance(v, str) or not v for v in out):
        raise BadInputError(f"{name}: expected non-empty names, got {list(value)!r}")
    return out


def _flag(name: str, value: Any) -> bool:
    """A switch; ``"true"``/``"false"`` too, because Airflow renders templated values as text."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise BadInputError(f"{name}: expected true or false, got {value!r}")
    return value


#: The check of a kind of value: ``(option name, value) -> the value to keep``.
Check = Callable[[str, Any], object]

#: The check of each kind of value (memwal.core.validate), shared by every entry point.
CHECKS: dict[str, Check] = {
    "count": validate.positive_int,
    "duration": validate.duration,
    "interval": validate.interval,
    "fraction": validate.fraction,
    "lease_ttl": validate.lease_ttl,
    "expiry": validate.expiry,
    "names": _names,
    "flag": _flag,
}


def spec_of(f: Field[Any]) -> Spec:
    spec: Spec = f.metadata["spec"]
    return spec


def flag_of(name: str, spec: Spec) -> str:
    return spec.flag or "--" + name.replace("_", "-")


@dataclass(frozen=True, kw_only=True)
class JobOptions:
    """Options every job action takes."""

    engine: str = opt("local", "choice", "local: in-process; spark: the active Spark session or a local one; "
                      "ray: the Ray cluster RAY_ADDRESS names, or a local Ray",
                      choices=ENGINES)
    dry_run: bool = opt(False, "flag", "print the plan, change nothing")
    lease_ttl: float = opt(DEFAULT_LEASE_TTL, "lease_ttl",
                           "lease time-to-live; a heartbeat renews it every third of it while the job runs "
                           f"(default {DEFAULT_LEASE_TTL:.0f})", metavar="SECONDS")

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> Self:
        """Build from keyword arguments, validating each; ``None`` means the default.

        An unknown keyword is bad input naming it (a typo must not be ignored).
        """
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(kwargs) - set(known))
        if unknown:
            raise BadInputError(f"unknown option {unknown[0]!r}: expected one of {', '.join(sorted(known))}")
        values: dict[str, Any] = {}
        for name, value in kwargs.items():
            if value is None:
                continue
            spec = spec_of(known[name])
            if spec.kind == "choice":
                if value not in spec.choices:
                    raise BadInputError(f"{name}: {value!r} is not one of {', '.join(spec.choices)}")
            else:
                value = CHECKS[spec.kind](name, value)
            values[name] = None if value == validate.NEVER else value
        options = cls(**values)
        # what the run was given, apart from the defaults: those a table's own policy does not override
        object.__setattr__(options, "_given", frozenset(values))  # (memwal.actions.policy)
        return options

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def given(self) -> frozenset[str]:
        """The options the run was given, apart from memwal's defaults: what a table's own policy
        leaves as they are (:mod:`memwal.actions.policy`). Recorded by :meth:`from_kwargs` and kept
        by :meth:`but`; for options built otherwise, those that differ from the defaults."""
        recorded: frozenset[str] | None = self.__dict__.get("_given")
        if recorded is not None:
            return recorded
        return frozenset(f.name for f in fields(self) if getattr(self, f.name) != f.default)

    def but(self, **changes: Any) -> Self:
        """These options with ``changes`` (a follower's scope for one pass), keeping what the run
        was given, and given those changed here."""
        return self._with(changes, self.given | frozenset(changes))

    def defaulted(self, **changes: Any) -> Self:
        """These options with ``changes`` that the run was not given (a table's own policy's values):
        what it was given stays what it was given."""
        return self._with(changes, self.given)

    def _with(self, changes: dict[str, Any], given: frozenset[str]) -> Self:
        out = replace(self, **changes)
        object.__setattr__(out, "_given", given)
        return out

    def to_argv(self, *, skip: tuple[str, ...] = ("engine",)) -> list[str]:
        """Command-line arguments that rebuild these options (defaults left out): what a
        launcher hands to ``spark-submit jobs/<action>.py``, whose engine is Spark anyway."""
        argv: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value == f.default or f.name in skip:
                continue
            spec, flag = spec_of(f), flag_of(f.name, spec_of(f))
            if spec.kind == "flag":
                argv.append(flag)
            elif spec.kind == "names":
                for v in value:
                    argv += [flag, v]
            else:
                argv += [flag, validate.NEVER if value is None else str(value)]
        return argv


@dataclass(frozen=True, kw_only=True)
class WaitingOptions(JobOptions):
    """Jobs that wait for the merge lease: a merge and a snapshot refresh serialise through it."""

    lease_wait: float = opt(DEFAULT_LEASE_WAIT, "duration",
                            "how long to wait for the merge lease another job holds before giving up with exit 3 "
                            f"(default {DEFAULT_LEASE_WAIT:.0f})", metavar="SECONDS")


@dataclass(frozen=True, kw_only=True)
class MergeOptions(WaitingOptions):
    shards: tuple[str, ...] = opt((), "names", "only these shards (repeatable)", flag="--shard", metavar="ID")
    max_generations: int | None = opt(None, "count", "at most N generations per shard", metavar="N")
    max_rows: int | None = opt(None, "count", "stop adding generations past N change rows", metavar="N")
    max_bytes: int | None = opt(None, "count", "stop adding generations past N bytes", metavar="N")

    @property
    def bounded(self) -> bool:
        """Whether a run may leave work its plan saw (a batch of it): a follower plans again after
        a bounded merge; an unbounded one took every generation its plan saw."""
        return any(v is not None for v in (self.max_generations, self.max_rows, self.max_bytes))


@dataclass(frozen=True, kw_only=True)
class CatchupOptions(JobOptions):
    indexes: tuple[str, ...] = opt((), "names", "only these indexes (default: the MemWAL index's maintained ones)",
                                   flag="--index", metavar="NAME")
    max_deltas: int | None = opt(None, "count", "retrain an index that has N or more deltas (default 8)",
                                 metavar="N")
    max_unindexed_fraction: float | None = opt(None, "fraction",
                                               "retrain when more than F of the rows are unindexed (default 0.5)",
                                               metavar="F")


@dataclass(frozen=True, kw_only=True)
class CompactOptions(JobOptions):
    target_rows_per_fragment: int | None = opt(None, "count", "rows per fragment after compaction "
                                               "(default: Lance's, 1048576)", metavar="N")
    max_rows_per_group: int | None = opt(None, "count", "rows per row group in the rewritten files "
                                         "(default: Lance's, 1024)", metavar="N")
    materialize_deletions_threshold: float | None = opt(None, "fraction", "rewrite a fragment once more than F of "
                                                        "its rows are deleted (default: Lance's, 0.1)", metavar="F")
    max_fragments: int | None = opt(None, "count", "rewrite at most N fragments in this run (oldest first)",
                                    metavar="N")


@dataclass(frozen=True, kw_only=True)
class SnapshotOptions(WaitingOptions):
    pass


DEFAULT_HISTORY_RETENTION_SECONDS = 90 * 24 * 3600.0


@dataclass(frozen=True, kw_only=True)
class GcOptions(JobOptions):
    grace_seconds: float = opt(DEFAULT_GRACE_SECONDS, "duration",
                               "reader grace period after the merge commit (default 600)", metavar="S")
    expire_versions: float | None = opt(DEFAULT_EXPIRE_VERSIONS_SECONDS, "expiry",
                                        "first expire base-table versions older than S seconds with Lance's cleanup "
                                        "(tags, branches and checkpoints are kept); never: keep every version "
                                        "(default 604800: 7 days, as Delta's VACUUM)", metavar="S|never")
    orphans: bool = opt(False, "flag", "also remove unlisted generation directories and crashed-merge staging")
    orphan_age_seconds: float = opt(DEFAULT_ORPHAN_AGE_SECONDS, "duration",
                                    "orphans must be at least this old (default 3600)", metavar="S")
    audit: bool = opt(False, "flag", "also write the audit record under _mem_wal/_jobs/audit/ in the table's store",
                      flag="--audit-log")
    history_retention: float = opt(DEFAULT_HISTORY_RETENTION_SECONDS, "duration",
                                   "prune the run history (memwal history) of runs older than S seconds "
                                   "(default 7776000: 90 days)", metavar="S")
    writer_idle_seconds: float = opt(DEFAULT_WRITER_IDLE_SECONDS, "duration",
                                     "a shard writer quiet this long is presumed gone: until then merged "
                                     "generations its view needs stay listed and on storage (default 86400: "
                                     "a day; 0: no writer is live)", metavar="S")
    listed_only: bool = opt(False, "flag", "a listing pass: roll up and heal what the shard manifests list, walking "
                            "only their folders; drains and deletes nothing but a listed merged generation whose "
                            "folder is gone (a follower's pass after each merge)")

    def __post_init__(self) -> None:
        if self.listed_only and self.orphans:
            raise BadInputError("--listed-only walks the listed folders only: it cannot find orphans (drop --orphans)")


#: GC's listing pass (``--listed-only``), as a follower runs it after merges in place of the whole
#: run: table followers on :class:`GcOptions`, fleets on the options as they travel. Orphans need
#: the whole walk.
LISTING_PASS: Mapping[str, bool] = MappingProxyType({"listed_only": True, "orphans": False})


def option_names(cls: type[JobOptions], *, common: bool = True) -> list[str]:
    """The keyword names of an options class (without the common ones if ``common=False``)."""
    base = {f.name for f in fields(JobOptions)}
    return [f.name for f in fields(cls) if common or f.name not in base]
