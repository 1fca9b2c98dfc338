"""The ``memwal_tables`` DAGs' config (``MEMWAL_CONFIG``): one entry per table, each checked alone.

The file (YAML or JSON; ``dags/memwal_tables.example.yaml``) has ``defaults`` and ``tables``. Its
shape is checked against the shipped JSON schema (``memwal_tables.schema.json``), each job's
values by its options class. What the whole file shares (its syntax, ``defaults``) fails the
whole file; a bad table entry fails only that table (:class:`TableSpecs.broken`, by name), so
one typo never takes the other tables' DAGs away.

Selecting entries (``only=``) reads every entry's name but checks and builds only the chosen
ones: a task that parses the DAG file for its own DAG (Airflow's parsing context) pays for one
table, not the fleet.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CONFIG_ENV = "MEMWAL_CONFIG"
JOBS = ("merge", "catchup", "compact", "gc", "snapshot")  # the cycle's order
NAME = re.compile(r"[A-Za-z0-9_.-]+")
MAX_CONFIG_BYTES = 4 << 20

LAG_DEFAULTS: dict[str, Any] = {
    "schedule": "*/5 * * * *",
    "max_unmerged_generations": 64,
    "max_unmerged_bytes": None,
    "max_oldest_age_seconds": None,
    "poke_interval": 30,
    "timeout_seconds": 240,
    "deferrable": True,
}

DEFAULTS: dict[str, Any] = {
    "schedule": "@hourly",
    "jitter": True,  # @hourly and @daily spread over the period by the table's name
    "engine": "local",
    "jobs": list(JOBS),
    "retries": 3,
    "retry_delay_seconds": 60,
    "retry_backoff": 2.0,
    "max_retry_delay_seconds": 1800,
    "execution_timeout_seconds": None,
    "pool": None,
    "pool_slots": 1,
    "priority_weight": None,
    "queue": None,
    "spark": {"conn_id": "spark_default", "conf": {}, "env": {}, "submit": {}},
    "ray": {"conn_id": None},  # engine ray: the connection naming the cluster (None: a local Ray)
    "one_application": True,  # engine spark: the whole cycle as one spark-submit (one JVM)
    "merge": {},
    "catchup": {},
    "compact": {},
    "snapshot": {},
    # GC expires base-table versions older than 7 days (memwal's one default, as the CLI's);
    # `expire_versions: null` (or never) in a table's gc keeps every version.
    "gc": {},
    # Opt-in (a mapping: LAG_DEFAULTS under it): a DAG per table whose deferrable sensor
    # triggers early runs. The fleet DAG checks lag in its planning pass instead.
    "lag": False,
    "tags": [],
}


class ConfigError(ValueError):
    pass


@dataclass
class TableSpecs:
    """The chosen tables: each good entry's settings, and each bad one's problem by name."""

    specs: list[dict[str, Any]] = field(default_factory=list)
    broken: dict[str, str] = field(default_factory=dict)


def load_config(path: str) -> dict[str, Any]:
    """The config file, parsed, with what every table shares checked (syntax, ``defaults``)."""
    import yaml
    from memwal.airflow.config_schema import SCHEMA_NAME, place, schema_errors

    from memwal.core.files import read_small_file
    from memwal.core.yaml_doc import load_yaml
    from memwal.errors import BadInputError

    try:
        text = read_small_file(path, MAX_CONFIG_BYTES, flag=CONFIG_ENV, what="YAML config")
        doc = json.loads(text) if path.endswith(".json") else load_yaml(text)
    except (BadInputError, ValueError, RecursionError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not a readable YAML/JSON config: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tables"), list):
        shared = schema_errors(doc, SCHEMA_NAME)
    else:  # the tables are checked one by one (table_specs)
        shared = schema_errors({**doc, "tables": []}, SCHEMA_NAME)
    if shared:
        problems = "; ".join(f"{place(p)}: {m}" for p, m in shared)
        raise ConfigError(f"{path}: {problems} (schema {SCHEMA_NAME})")
    config: dict[str, Any] = doc
    return config


def _merge(base: Mapping[str, Any], override: Mapping[str, Any] | None) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def table_name(uri: str) -> str:
    base = uri.rstrip("/").rsplit("/", 1)[-1] or "table"
    return re.sub(r"\.lance$", "", base)


def entry_name(entry: Any, i: int) -> str:
    """The name of entry ``i`` (its DAG is ``memwal_<name>``), even for a bad entry."""
    given = entry.get("name") if isinstance(entry, dict) else None
    uri = entry.get("table") if isinstance(entry, dict) else entry
    name = given if isinstance(given, str) else table_name(uri) if isinstance(uri, str) and uri else ""
    return name if NAME.fullmatch(name) else f"tables_{i}"


def jittered(schedule: str | None, name: str) -> str | None:
    """``@hourly`` and ``@daily`` at a minute (and hour) of their period fixed by ``name``'s hash:
    a thousand tables do not all start at minute 0. A cron expression is kept as written."""
    spread = int(hashlib.sha1(name.encode()).hexdigest(), 16)
    if schedule == "@hourly":
        return f"{spread % 60} * * * *"
    if schedule in ("@daily", "@midnight"):
        return f"{spread % 60} {spread // 60 % 24} * * *"
    return schedule


def _problems(spec: Mapping[str, Any], where: str) -> list[str]:
    """The values of one merged entry, by the options classes (a NaN grace period ...)."""
    from memwal.actions import ACTIONS
    from memwal.errors import BadInputError

    out = []
    if not NAME.fullmatch(str(spec["name"])):
        out.append(f"{where}: name {spec['name']!r} (from the table URI) may only have letters, digits, _ . -: set "
                   "`name`")
    for job in JOBS:
        try:
            ACTIONS[job].options.from_kwargs(**(spec.get(job) or {}))
        except BadInputError as exc:
            out.append(f"{where}: {job}: {exc}")
    lag = spec.get("lag")
    if lag and all(lag.get(k) is None for k in ("max_unmerged_generations", "max_unmerged_bytes",
                                                 "max_oldest_age_seconds")):
        out.append(f"{where}: lag needs at least one threshold (or `lag: false`)")
    return out


def table_specs(config: Mapping[str, Any], *, only: str | None = None) -> TableSpecs:
    """Each table's settings: built-in defaults, then the config's ``defaults``, then the
    table's own; each entry checked alone. ``only``: the entries whose name it is (or whose
    DAG's id it is: ``memwal_<name>``, ``memwal_<name>_lag``)."""
    from memwal.airflow.config_schema import SCHEMA_NAME, place, schema_errors

    defaults = _merge(DEFAULTS, config.get("defaults"))
    entries = list(enumerate(config["tables"]))
    names = {i: entry_name(e, i) for i, e in entries}
    if only is not None:
        entries = [(i, e) for i, e in entries if only in (names[i], f"memwal_{names[i]}", f"memwal_{names[i]}_lag")]
    errors: dict[int, list[str]] = {}
    for path, message in schema_errors({**config, "tables": [e for _, e in entries]}, SCHEMA_NAME):
        at = entries[int(path[1])][0]
        errors.setdefault(at, []).append(f"{place(('tables', at, *path[2:]))}: {message}")
    out, seen = TableSpecs(), set(names[i] for i, _ in entries if errors.get(i))

    def broken(name: str, problem: str) -> None:
        out.broken[name] = f"{out.broken[name]}; {problem}" if name in out.broken else problem

    for i, entry in entries:
        name, where = names[i], f"tables[{i}]"
        if errors.get(i):
            broken(name, "; ".join(errors[i]) + f" (schema {SCHEMA_NAME})")
            continue
        spec = _merge(defaults, {"table": entry} if isinstance(entry, str) else entry)
        spec["name"] = str(spec.get("name") or table_name(spec["table"]))
        if isinstance(spec.get("lag"), dict):
            spec["lag"] = _merge(LAG_DEFAULTS, spec["lag"])
        problems = _problems(spec, where)
        if spec["name"] in seen:
            problems.append(f"{where}: two tables named {spec['name']!r} (set `name`)")
        seen.add(spec["name"])
        if problems:
            broken(name, "; ".join(problems))
            continue
        if spec.get("jitter", True):
            spec["schedule"] = jittered(spec.get("schedule"), spec["name"])
        out.specs.append(spec)
    out.specs = [s for s in out.specs if s["name"] not in out.broken]  # a name two entries claim: neither
    return out


def job_options(spec: Mapping[str, Any], job: str) -> dict[str, Any]:
    """A job's options from the table's config (``expire_versions: null`` keeps every version)."""
    options = dict(spec.get(job) or {})
    if job == "gc" and "expire_versions" in options and options["expire_versions"] is None:
        options["expire_versions"] = "never"
    return options
