"""The JSON schemas of the DAG configs, and the validation against them.

Two configs, each checked by a JSON schema that ships with the package (next to this module),
so editors and CI can check a config without Airflow, and every error names the schema:

- ``memwal_tables.schema.json``: the ``memwal_tables`` DAGs' config (``MEMWAL_CONFIG``, see
  ``dags/memwal_tables.example.yaml``);
- ``memwal_fleet.schema.json``: the ``memwal_fleet`` DAG's config (``MEMWAL_FLEET_CONFIG``, see
  ``dags/memwal_fleet.example.yaml``).

Both are generated from the models they describe: each job's options and their types from that
job's options class (:mod:`memwal.actions.options`), the fleet policy from its dataclasses
(:mod:`memwal.fleet.policy`), the fleet DAG's own settings from :mod:`memwal.airflow.fleet`'s
dataclasses. ``make schema`` (``python -m memwal.airflow.config_schema``) writes the files and a
test fails when one is stale. The values themselves (a NaN grace period, a negative count) are
then checked by the same classes as on the command line.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).with_name("memwal_tables.schema.json")
SCHEMA_NAME = SCHEMA_FILE.name
FLEET_SCHEMA_FILE = Path(__file__).with_name("memwal_fleet.schema.json")
FLEET_SCHEMA_NAME = FLEET_SCHEMA_FILE.name

#: JSON types of each kind of option value (memwal.actions.options.Spec.kind).
_KIND_TYPES: dict[str, dict[str, Any]] = {
    "count": {"type": ["integer", "string", "null"]},
    "fraction": {"type": ["number", "string", "null"]},
    "duration": {"type": ["number", "string", "null"]},
    "lease_ttl": {"type": ["number", "string", "null"]},
    "expiry": {"type": ["number", "string", "null"]},
    "flag": {"type": ["boolean", "null"]},
    "names": {"type": ["array", "null"], "items": {"type": "string"}},
}


def _job_options(job: str) -> dict[str, Any]:
    from memwal.actions import ACTIONS
    from memwal.actions.options import JobOptions, spec_of

    common = {f.name for f in fields(JobOptions)} - {"lease_ttl"}  # engine, dry_run: the DAG's to decide
    props = {}
    for f in fields(ACTIONS[job].options):
        if f.name in common:
            continue
        spec = spec_of(f)
        kind = {"enum": list(spec.choices)} if spec.kind == "choice" else dict(_KIND_TYPES[spec.kind])
        props[f.name] = {**kind, "description": spec.help}
    return {"type": ["object", "null"], "additionalProperties": False, "properties": props}


def build_schema() -> dict[str, Any]:
    """The schema, from the DAG file's settings and each job's options class."""
    from memwal.actions import ACTIONS

    jobs = list(ACTIONS)
    number = {"type": ["number", "null"], "minimum": 0}
    settings: dict[str, Any] = {
        "schedule": {"type": ["string", "null"],
                     "description": "cron, preset, or null (lag-triggered and manual runs)"},
        "jitter": {"type": "boolean", "description": "spread @hourly and @daily over the period by a stable hash "
                                                     "of the table's name (default true); a cron is kept as written"},
        "pool": {"type": "string", "minLength": 1, "description": "the Airflow pool of the table's tasks"},
        "pool_slots": {"type": "integer", "minimum": 1},
        "priority_weight": {"type": "integer"},
        "queue": {"type": ["string", "null"], "description": "the executor queue of the table's tasks"},
        "engine": {"enum": ["local", "spark", "ray"]},
        "jobs": {"type": "array", "items": {"enum": jobs}, "minItems": 1, "uniqueItems": True},
        "one_application": {"type": "boolean", "description": "engine spark: the whole cycle as one spark-submit"},
        "retries": {"type": "integer", "minimum": 0},
        "retry_delay_seconds": number,
        "retry_backoff": number,
        "max_retry_delay_seconds": number,
        "execution_timeout_seconds": number,
        "spark": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "conn_id": {"type": ["string", "null"]},
                "conf": {"type": ["object", "null"], "additionalProperties": {"type": ["string", "number", "boolean"]}},
                "env": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
                "submit": {"type": ["object", "null"], "description": "any other SparkSubmitHook argument"},
            },
        },
        "ray": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "conn_id": {"type": ["string", "null"],
                            "description": "engine ray: the connection naming the Ray cluster (null: a local Ray)"},
            },
        },
        **{job: _job_options(job) for job in jobs},
        "lag": {
            "description": "opt-in: a DAG memwal_<name>_lag whose deferrable sensor triggers early runs (the fleet DAG "
                           "checks lag in its planning pass instead)",
            "oneOf": [
                {"const": False},
                {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "schedule": {"type": "string"},
                        "max_unmerged_generations": {"type": ["integer", "null"], "minimum": 1},
                        "max_unmerged_bytes": {"type": ["integer", "null"], "minimum": 1},
                        "max_oldest_age_seconds": number,
                        "poke_interval": {"type": "number", "exclusiveMinimum": 0},
                        "timeout_seconds": {"type": "number", "exclusiveMinimum": 0},
                        "deferrable": {"type": "boolean"},
                    },
                },
            ]
        },
        "tags": {"type": "array", "items": {"type": "string"}},
    }
    table = {
        "type": "object",
        "additionalProperties": False,
        "required": ["table"],
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$"},
            "table": {"type": "string", "minLength": 1, "description": "the table URI"},
            "conn_id": {"type": ["string", "null"], "description": "a memwal (or aws, wasb, gcp) connection"},
            "storage_options": {"type": ["object", "null"], "additionalProperties": {"type": ["string", "number",
                                                                                            "boolean"]}},
            **settings,
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://memwal-jobs/memwal_tables.schema.json",
        "title": "memwal_tables DAG config",
        "description": "One maintenance DAG per MemWAL table (dags/memwal_tables.py; MEMWAL_CONFIG names the file).",
        "type": "object",
        "additionalProperties": False,
        "required": ["tables"],
        "properties": {
            "defaults": {"type": "object", "additionalProperties": False, "properties": settings},
            # A table is its URI, or a mapping: checked as such, so each error names its key.
            "tables": {"type": "array", "items": {"type": ["string", "object"], "minLength": 1,
                                                  "if": {"type": "object"}, "then": table}},
        },
    }


def _type_schema(tp: Any, meta: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON schema of a dataclass field's type (the types the configs use)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        schema = _type_schema(inner[0], meta)
        if type(None) in args and "type" in schema:
            schema["type"] = [*([schema["type"]] if isinstance(schema["type"], str) else schema["type"]), "null"]
        return schema
    if meta.get("enum"):
        return {"enum": list(meta["enum"])}
    if isinstance(tp, type) and is_dataclass(tp):
        return dataclass_schema(tp)
    if tp is bool:
        return {"type": "boolean"}
    if tp is int or tp is float:
        return {"type": "integer" if tp is int else "number", "minimum": meta.get("minimum", 0)}
    if tp is str:
        return {"type": "string", "minLength": 1}
    if origin is tuple:
        return {"type": "array", "items": _type_schema(args[0], {}), "uniqueItems": True}
    if origin in (dict, Mapping, typing.Mapping) or tp is dict:
        # values: text, or what YAML reads a bare word as (allow_http: true), taken as its text
        return {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}
    return {}


def dataclass_schema(cls: type, *, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object schema from a dataclass: each field's type and its ``help`` (fields whose
    metadata says ``schema: False`` are not part of a config)."""
    hints = typing.get_type_hints(cls)
    props = {}
    for f in fields(cls):
        if f.metadata.get("schema") is False:
            continue
        props[f.name] = {**_type_schema(hints[f.name], f.metadata)}
        if f.metadata.get("help"):
            props[f.name]["description"] = f.metadata["help"]
    needed = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
              and f.metadata.get("schema") is not False]
    out = {"type": "object", "additionalProperties": False, "properties": props}
    if needed or required:
        out["required"] = sorted({*needed, *required})
    return out


def policy_schema() -> dict[str, Any]:
    """The fleet policy (:func:`memwal.fleet.policy.policy_from`) from its dataclasses."""
    from memwal.actions import ACTIONS
    from memwal.fleet.policy import Batch, Slo, Thresholds, Weights

    def partial(cls: type) -> dict[str, Any]:
        out = dataclass_schema(cls)
        out.pop("required", None)
        return out

    table = {"type": "object", "additionalProperties": False, "properties": {
        "thresholds": partial(Thresholds), "weights": partial(Weights), "batch": partial(Batch),
        "slo": {**partial(Slo), "description": "service-level targets (null: none)"},
        "options": {"type": "object", "additionalProperties": False,
                    "properties": {job: _job_options(job) for job in ACTIONS},
                    "description": "job options by job, as the job's command takes them"},
        "spark_min_bytes": {"type": "integer", "minimum": 0, "description": "engine spark: a table with more "
                            "unmerged bytes runs through the per-table Spark engines"}}}
    overrides = {"type": ["object", "null"], "additionalProperties": table}
    text = {"type": "string", "minLength": 1}
    texts = {"type": ["array", "string"], "items": text}
    return {"type": ["object", "null"], "additionalProperties": False, "properties": {
        "defaults": table,
        "sources": {**overrides, "description": "by the source string, or a glob over table URIs"},
        "tables": {**overrides, "description": "by table URI (or glob): the last word"},
        "paused": {"type": ["object", "null"], "description": "tables, sources or globs paused: {by, reason}",
                   "additionalProperties": {"type": "object", "additionalProperties": False,
                                            "required": ["by", "reason"],
                                            "properties": {"by": text, "reason": text}}},
        "quiet_hours": {"type": ["array", "null"], "description": "windows when no job (or none of jobs) starts",
                        "items": {"type": "object", "additionalProperties": False, "required": ["from", "to"],
                                  "properties": {"from": text, "to": text, "days": texts, "jobs": texts,
                                                 "match": texts, "tz": text}}},
        "quotas": {"type": ["object", "null"], "description": "groups' shares of the budget, borrowed when idle",
                   "additionalProperties": {"type": "object", "additionalProperties": False,
                                            "required": ["share", "match"],
                                            "properties": {"share": {"type": "number", "exclusiveMinimum": 0,
                                                                     "maximum": 1}, "match": texts}}}}}


def build_fleet_schema() -> dict[str, Any]:
    """The ``memwal_fleet`` config's schema, from :class:`memwal.airflow.fleet.FleetConfig`."""
    from memwal.airflow.fleet import FleetConfig, FleetSource

    out = dataclass_schema(FleetConfig)
    source = dataclass_schema(FleetSource)
    out["properties"]["sources"] = {"type": "array", "minItems": 1, "description": "where the tables come from",
                                    "items": {"type": ["string", "object"], "minLength": 1,
                                              "if": {"type": "object"}, "then": source}}
    jobs = FleetConfig.__dataclass_fields__["jobs"].default
    assert isinstance(jobs, tuple), "FleetConfig.jobs defaults to every job"
    out["properties"]["jobs"]["items"] = {"enum": list(jobs)}
    out["properties"]["jobs"]["minItems"] = 1
    out["properties"]["policy"] = {**policy_schema(), "description": out["properties"]["policy"]["description"]}
    state = out["properties"]["state"]
    out["properties"]["state"] = {"description": state.pop("description"),
                                  "anyOf": [{"type": ["string", "null"], "minLength": 1}, state]}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://memwal-jobs/{FLEET_SCHEMA_NAME}",
            "title": "memwal_fleet DAG config",
            "description": "One DAG for a fleet of MemWAL tables (dags/memwal_fleet.py; MEMWAL_FLEET_CONFIG names "
                           "the file).", **out}


SCHEMAS = {SCHEMA_NAME: (SCHEMA_FILE, build_schema), FLEET_SCHEMA_NAME: (FLEET_SCHEMA_FILE, build_fleet_schema)}


def schema_errors(doc: Any, name: str = SCHEMA_NAME) -> list[tuple[tuple[str | int, ...], str]]:
    """Every place where ``doc`` breaks the shipped schema ``name``: (path, message), in order."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(json.loads(SCHEMAS[name][0].read_text()))
    out = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: [(0, p) if isinstance(p, int) else (1, str(p))
                                                                 for p in e.absolute_path]):
        best = jsonschema.exceptions.best_match([err])
        out.append((tuple(best.absolute_path), best.message))
    return out


def place(path: tuple[str | int, ...]) -> str:
    """``("tables", 0, "gc")`` -> ``tables[0].gc``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "the config"


def config_problems(doc: Any, name: str = SCHEMA_NAME) -> list[str]:
    """Every place where ``doc`` breaks the shipped schema ``name``, as ``<path>: <message>``, in order."""
    return [f"{place(path)}: {message}" for path, message in schema_errors(doc, name)]


if __name__ == "__main__":  # make schema
    for _name, (_file, _build) in SCHEMAS.items():
        _file.write_text(json.dumps(_build(), indent=2) + "\n")
        print(f"wrote {_file}")
