"""The ``memwal_fleet`` DAG's config, and what its tasks do with it (discovery, the plan, chunks).

The config is the YAML (or JSON) file ``MEMWAL_FLEET_CONFIG`` names; ``dags/memwal_fleet.example.yaml``
has every key. It names sources, never tables (:mod:`memwal.fleet.sources`: a table URI, a root
searched at any depth, ``namespace:dir`` / ``namespace:rest`` with ``properties``), each with the
connection its credentials come from (``conn_id``: a ``memwal``, ``aws``, ``wasb``, ``adls`` or
``google_cloud_platform`` connection) and non-secret ``storage_options``; a credential written in
the file is refused. Then the schedule, the jobs, the engine, the fleet policy
(:mod:`memwal.fleet.policy`: ``defaults``, ``sources``, ``tables``, pauses, quiet hours, quotas),
the budget (:class:`Budget`), the fleet's shared state (:class:`StateConfig`: the probe cache,
the last plan and its history, the run log, the pauses, in object storage every worker and the
API server read: no machine's disk), the events that wake the fleet (:class:`Events`) and the
Spark settings. Relative paths are relative to the config file.

The file is checked against the JSON schema generated from these dataclasses and the policy's
(``memwal_fleet.schema.json``, :mod:`memwal.airflow.config_schema`), then the policy's values
by :func:`memwal.fleet.policy.policy_from`: a bad config is one :class:`FleetConfigError` naming
the file and every bad key, before any task runs.

Nothing here lists a source at parse time: :func:`plan` (the plan task) discovers the tables
when it runs, so a table created tomorrow is maintained with no edit, and the DAG file's parse
time does not depend on how many tables the sources hold. The work travels to the mapped tasks
as plain dicts without credentials; each task resolves its tables' storage options again from
their source's connection, and a namespace table's from the namespace (its vended credentials).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memwal.airflow.spark_jobs import SparkSettings

from memwal.core.secrets import is_secret_key
from memwal.fleet.policy import Policy

if TYPE_CHECKING:
    from memwal.fleet.shared import Planned
    from memwal.fleet.sources import Discovery
    from memwal.fleet.state import FleetState

log = logging.getLogger(__name__)

CONFIG_ENV = "MEMWAL_FLEET_CONFIG"
MAX_CONFIG_BYTES = 1 << 20
#: Airflow's own bound on a mapped task's instances (``[core] max_map_length``) when it cannot be read.


class FleetConfigError(ValueError):
    """A bad fleet config: one line naming the file and the keys."""


@dataclass(frozen=True)
class FleetSource:
    """One source of tables and where its credentials come from."""

    source: str = field(metadata={"help": "a table URI, a root URI (every table below it), namespace:dir or "
                                          "namespace:rest"})
    conn_id: str | None = field(default=None, metadata={
        "help": "the connection holding the storage options (memwal, aws, wasb, adls, google_cloud_platform)"})
    storage_options: Mapping[str, str] = field(default_factory=dict, metadata={
        "help": "non-secret storage options (aws_region, aws_endpoint, allow_http, ...); credentials go in conn_id"})
    properties: Mapping[str, str] = field(default_factory=dict, metadata={
        "help": "a Lance Namespace's properties (root=..., uri=...)"})


@dataclass(frozen=True)
class Budget:
    """How much of Airflow the fleet takes at once, and for how long."""

    workers: int = field(default=4, metadata={"help": "mapped tasks running at once (max_active_tis_per_dagrun)",
                                              "minimum": 1})
    tables_per_task: int = field(default=25, metadata={
        "help": "tables per mapped task (raised when the chunks would pass [core] max_map_length)", "minimum": 1})
    threads: int = field(default=2, metadata={"help": "tables run at once inside one task", "minimum": 1})
    max_seconds: float | None = field(default=None, metadata={
        "help": "no table starts later than this after the DAG run started (the rest waits for the next run)"})
    pool: str = field(default="default_pool", metadata={"help": "the Airflow pool of the table tasks"})
    pool_slots: int = field(default=1, metadata={"help": "pool slots one table task takes", "minimum": 1})
    priority_weight: int = field(default=1, metadata={"help": "the tasks' priority weight"})
    queue: str | None = field(default=None, metadata={"help": "the executor queue of the tasks (null: Airflow's "
                                                              "default)"})


@dataclass(frozen=True)
class StateConfig:
    """Where the fleet's shared state lives (:mod:`memwal.fleet.state`)."""

    uri: str = field(metadata={"help": "a folder URI every worker and the API server reach (s3://, az://, gs://; a "
                                       "local folder only for a fleet on one machine)"})
    conn_id: str | None = field(default=None, metadata={"help": "the connection holding its storage options"})
    storage_options: Mapping[str, str] = field(default_factory=dict, metadata={
        "help": "non-secret storage options (aws_region, aws_endpoint, ...)"})


@dataclass(frozen=True)
class Events:
    """Wake the fleet when a table is written: S3 event notifications of new shard manifests to
    an SQS queue, watched by an AssetWatcher (:mod:`memwal.airflow.fleet_events`)."""

    queue: str = field(metadata={"help": "the SQS queue URL the bucket's notifications go to (filter them to the "
                                         "suffix .binpb: a shard manifest, one per flush)"})
    conn_id: str | None = field(default="aws_default", metadata={"help": "the aws connection reading the queue"})
    region: str | None = field(default=None, metadata={"help": "the queue's region (null: the connection's)"})
    poll_seconds: int = field(default=100, metadata={"help": "seconds between two long polls of the queue",
                                                     "minimum": 1})
    wait_seconds: int = field(default=20, metadata={"help": "SQS long-poll wait (0-20 s)", "minimum": 0})


@dataclass(frozen=True)
class Notifier:
    """An Airflow notifier (a ``BaseNotifier`` subclass, e.g. the Slack or SMTP provider's) the
    ``slo`` task calls when tables are past their service levels after a run."""

    notifier: str = field(metadata={"help": "the notifier class's dotted path, e.g. "
                                            "airflow.providers.slack.notifications.slack.SlackNotifier"})
    args: Mapping[str, str] = field(default_factory=dict, metadata={
        "help": "its keyword arguments; templated with the task's context, where memwal_slo holds the breaches "
                "(memwal_slo.message, memwal_slo.tables, memwal_slo.count)"})


@dataclass(frozen=True)
class Alerts:
    """How the fleet alerts: through Airflow's notifiers, never by failing a run that succeeded."""

    notifiers: tuple[Notifier, ...] = field(default=(), metadata={
        "help": "called, with the breaches, when tables are past their service levels after a run"})


@dataclass(frozen=True)
class FleetConfig:
    """The ``memwal_fleet`` DAG's settings (see the module docstring)."""

    sources: tuple[FleetSource, ...] = field(metadata={"help": "where the tables come from"})
    schedule: str | None = field(default="*/10 * * * *", metadata={
        "help": "cron, preset, or null (manual runs only): each run plans every table once"})
    engine: str = field(default="local", metadata={"help": "local: tables on the task's threads; spark: one "
                                                           "spark-submit per task, a Spark task per small table; "
                                                           "ray: a Ray task per small table, from the task's process",
                                                   "enum": ("local", "spark", "ray")})
    jobs: tuple[str, ...] = field(default=("merge", "catchup", "compact", "gc", "snapshot"), metadata={
        "help": "the jobs the fleet may run (each table gets those its debt calls for)"})
    policy: Policy = field(default_factory=Policy, metadata={
        "help": "the fleet policy (memwal.fleet.policy): defaults, then overrides by source and by table"})
    budget: Budget = field(default_factory=Budget, metadata={"help": "the budget"})
    state: StateConfig | None = field(default=None, metadata={
        "help": "the fleet's shared state (cache, last plan and history, run log, pauses): a URI, or {uri, conn_id, "
                "storage_options}"})
    cache: str | None = field(default=None, metadata={
        "help": "the probe cache's file or object URI (default: the state's cache.json)"})
    events: Events | None = field(default=None, metadata={
        "help": "wake the fleet for the tables written to (S3 notifications on SQS); the schedule is the safety net"})
    top: int = field(default=50, metadata={"help": "tables listed by the fleet page", "minimum": 1})
    plan_workers: int = field(default=8, metadata={"help": "tables probed at once while planning", "minimum": 1})
    spark: SparkSettings = field(default_factory=SparkSettings, metadata={"help": "engine spark: how to submit"})
    ray_conn_id: str | None = field(default=None, metadata={
        "help": "engine ray: the connection naming the Ray cluster (its password: the token); null: a local Ray"})
    retries: int = field(default=0, metadata={"help": "retries of a table task (its tables' jobs are idempotent)",
                                              "minimum": 0})
    asset_alias: str | None = field(default="memwal-merged", metadata={
        "help": "the AssetAlias a table's merge commit emits its Asset event through (null: none)"})
    tags: tuple[str, ...] = field(default=(), metadata={"help": "more DAG tags"})
    alerts: Alerts = field(default_factory=Alerts, metadata={
        "help": "alerts on service-level breaches after a run (Airflow notifiers); the DAG run stays green"})
    #: The parsed policy document (for the record); :attr:`policy` is the checked policy.
    policy_doc: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False,
                                          metadata={"schema": False})
    path: str = field(default="", compare=False, metadata={"schema": False})

    def source_of(self, uri: str, prefer: str | None = None) -> FleetSource | None:
        """The source whose tables include the table ``uri`` (``prefer`` first; None: none),
        checked against each source's roots (:func:`memwal.fleet.sources.source_of`)."""
        from memwal.fleet.sources import source_of

        name = source_of([(s.source, s.properties) for s in self.sources], uri, prefer=prefer)
        return None if name is None else self.source(name)

    def source(self, name: str) -> FleetSource:
        found = next((s for s in self.sources if s.source == name), None)
        if found is None:
            raise FleetConfigError(f"{self.path}: no source {name!r} (the config changed since the plan?)")
        return found


def load_fleet_config(path: str | None = None) -> FleetConfig:
    """The config at ``path`` (default: ``$MEMWAL_FLEET_CONFIG``), every key checked."""
    import yaml
    from memwal.airflow.config_schema import FLEET_SCHEMA_NAME, config_problems

    from memwal.core.files import read_small_file
    from memwal.core.yaml_doc import load_yaml
    from memwal.errors import BadInputError
    from memwal.fleet.policy import policy_from

    path = path or os.environ.get(CONFIG_ENV)
    if not path:
        raise FleetConfigError(f"no fleet config: set {CONFIG_ENV} to the memwal_fleet DAG config's file, on the DAG "
                               "processor, the scheduler, every worker and the API server")
    path = os.path.abspath(path)  # the tasks read it again, from another folder maybe
    try:
        doc = load_yaml(read_small_file(path, MAX_CONFIG_BYTES, flag=CONFIG_ENV, what="YAML config"))
    except BadInputError as exc:
        raise FleetConfigError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise FleetConfigError(f"{path}: not valid YAML/JSON: {str(exc).splitlines()[0]}") from None
    # every bad key at once (issue 64: a credential was named only once the schema's errors were fixed)
    problems = config_problems(doc, FLEET_SCHEMA_NAME) + _credentials(doc)
    policy = None
    if not any(p.startswith("policy") for p in problems):
        try:
            policy = policy_from(doc.get("policy"), "policy")
        except BadInputError as exc:
            problems.append(str(exc))
    if problems or policy is None:
        raise FleetConfigError(f"{path}: {'; '.join(problems)} (schema {FLEET_SCHEMA_NAME})")
    base = os.path.dirname(os.path.abspath(path))
    sources = tuple(_source(s, i, base, path) for i, s in enumerate(doc["sources"]))
    budget = Budget(**(doc.get("budget") or {}))
    spark = doc.get("spark") or {}
    given = {k: v for k, v in doc.items() if k not in ("sources", "policy", "budget", "spark", "state", "events",
                                                       "alerts")}
    for key in ("jobs", "tags"):
        if key in given:
            given[key] = tuple(given[key])
    if given.get("cache") and "://" not in given["cache"]:
        given["cache"] = os.path.normpath(os.path.join(base, given["cache"]))
    given["state"] = _state(doc.get("state"), base, path)
    given["events"] = Events(**doc["events"]) if doc.get("events") else None
    given["alerts"] = Alerts(tuple(Notifier(str(n["notifier"]), _texts(n.get("args")))
                                   for n in (doc.get("alerts") or {}).get("notifiers") or []))
    return FleetConfig(sources=sources, policy=policy, policy_doc=doc.get("policy") or {}, budget=budget,
                       spark=SparkSettings(spark.get("conn_id") or "spark_default", spark.get("conf") or {},
                                           spark.get("env") or {}, spark.get("submit") or {}),
                       path=path, **given)


def _credentials(doc: Any) -> list[str]:
    """Every credential written into the config's storage options or properties: a secret
    belongs in the connection ``conn_id`` names, never in a file."""
    if not isinstance(doc, Mapping):
        return []
    sources, state = doc.get("sources"), doc.get("state")
    places = [(f"sources[{i}].{part}", s.get(part)) for i, s in enumerate(sources if isinstance(sources, list) else [])
              if isinstance(s, Mapping) for part in ("storage_options", "properties")]
    places += [("state.storage_options", state.get("storage_options"))] if isinstance(state, Mapping) else []
    return [f"{where}.{key}: a credential in the config file: put it in the connection conn_id names"
            for where, given in places if isinstance(given, Mapping) for key in given if is_secret_key(str(key))]


def _source(entry: Any, i: int, base: str, path: str) -> FleetSource:
    from memwal.fleet.sources import NAMESPACE_PREFIX

    doc: dict[str, Any] = {"source": entry} if isinstance(entry, str) else dict(entry)
    name = str(doc["source"])
    if "://" not in name and not name.startswith(NAMESPACE_PREFIX):
        name = os.path.normpath(os.path.join(base, name))
    return FleetSource(name, doc.get("conn_id"), _texts(doc.get("storage_options")), _texts(doc.get("properties")))


def _state(entry: Any, base: str, path: str) -> StateConfig | None:
    if not entry:
        return None
    doc: dict[str, Any] = {"uri": entry} if isinstance(entry, str) else dict(entry)
    uri = str(doc["uri"])
    if "://" not in uri:
        uri = os.path.normpath(os.path.join(base, uri))
    return StateConfig(uri, doc.get("conn_id"), _texts(doc.get("storage_options")))


def state_of(config: FleetConfig) -> FleetState | None:
    """The fleet's state folder, with its connection's storage options (None: no state)."""
    from memwal.fleet.state import FleetState

    if config.state is None:
        return None
    from memwal.airflow.hooks import MemWalHook

    options = MemWalHook.connection_options(config.state.conn_id) if config.state.conn_id else {}
    return FleetState(config.state.uri, {**options, **config.state.storage_options})


def _texts(values: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in (values or {}).items()}


def notifiers_of(config: FleetConfig) -> list[Any]:
    """The config's alert notifiers, built (each a ``BaseNotifier``: anything else is refused)."""
    import importlib

    from airflow.sdk import BaseNotifier

    out = []
    for n in config.alerts.notifiers:
        module, _, name = n.notifier.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name) if module else None
        except (ImportError, AttributeError) as exc:
            raise FleetConfigError(f"{config.path}: alerts.notifiers: {n.notifier}: cannot be imported ({exc})") \
                from None
        if not (isinstance(cls, type) and issubclass(cls, BaseNotifier)):
            raise FleetConfigError(f"{config.path}: alerts.notifiers: {n.notifier} is not an Airflow notifier "
                                   "(a BaseNotifier subclass)")
        make: Any = cls  # a subclass: its own keyword arguments
        out.append(make(**dict(n.args)))
    return out


def storage_options_of(source: FleetSource) -> dict[str, str]:
    """A source's storage options: its connection's (registered for masking), then the file's."""
    from memwal.airflow.hooks import MemWalHook

    options = MemWalHook.connection_options(source.conn_id) if source.conn_id else {}
    return {**options, **source.storage_options}


def discover_fleet(config: FleetConfig, known: frozenset[str] = frozenset(),
                   exclude: frozenset[str] = frozenset()) -> Discovery:
    """Every table the sources hold, each source with its own storage options; a source that
    holds no table, or cannot be searched, is a problem of the fleet (named), not a stop."""
    from memwal.errors import BadInputError
    from memwal.fleet.sources import Discovery, SourceProblem, discover
    from memwal.fleet.sources_model import Skipped, TableRef

    tables: dict[str, TableRef] = {}
    skipped: list[Skipped] = []
    problems: list[SourceProblem] = []
    for src in config.sources:
        try:
            found = discover([src.source], storage_options=storage_options_of(src),
                             namespace_properties=src.properties, known=known, exclude=exclude)
        except BadInputError as exc:
            problems.append(SourceProblem(src.source, str(exc)))
            continue
        for ref in found.tables:
            tables.setdefault(ref.uri, ref)
        skipped += found.skipped
        problems += found.problems
    return Discovery(tuple(tables.values()), tuple(skipped), tuple(problems))


def plan(config: FleetConfig, *, only: frozenset[str] | None = None) -> Planned:
    """The fleet's plan with its shared state (:func:`memwal.fleet.shared.plan_shared`: the
    cache, the pauses and the waits read; the cache and the report written back). ``only``:
    plan these tables alone (those an event named), the others left out of this plan."""
    from memwal.airflow.fleet_events import event_discovery

    from memwal.fleet.shared import plan_shared

    def named(known: frozenset[str], _exclude: frozenset[str]) -> Discovery:
        """The tables the events named, under the config's sources (no listing at all), bounded."""
        return event_discovery(config, only or frozenset(), known)

    state = state_of(config)
    options = storage_options_of(config.sources[0]) if config.cache and "://" in config.cache else None
    found = named if only is not None else (lambda known, exclude: discover_fleet(config, known, exclude))
    return plan_shared(found, config.policy, state=state, cache_location=config.cache, storage_options=options,
                       top=config.top, workers=config.plan_workers, partial=only is not None)
