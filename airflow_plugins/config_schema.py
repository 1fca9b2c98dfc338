"""The JSON schema of the ``memwal_tables`` DAG config, and the validation against it.

The config (``MEMWAL_CONFIG``, see ``dags/memwal_tables.example.yaml``) is checked by a
JSON schema that ships with the package (``memwal_tables.schema.json`` next to this
module), so editors and CI can check a config without Airflow, and every error names the
schema. Each job's options and their types come from that job's options class
(:mod:`memwal.actions.options`): the schema file is generated from them (``make schema``,
``python -m memwal.airflow.config_schema``) and a test fails when it is stale. The values
themselves (a NaN grace period, a negative count) are then checked by the same options
classes as on the command line.
"""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).with_name("memwal_tables.schema.json")
SCHEMA_NAME = SCHEMA_FILE.name

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
        "engine": {"enum": ["local", "spark"]},
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
        **{job: _job_options(job) for job in jobs},
        "lag": {
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


def config_problems(doc: Any) -> list[str]:
    """Every place where ``doc`` breaks the shipped schema, as ``<path>: <message>``, in order."""
    import jsonschema

    schema = json.loads(SCHEMA_FILE.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    out = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        best = jsonschema.exceptions.best_match([err])
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in best.absolute_path).lstrip(".")
        out.append(f"{where or 'the config'}: {best.message}")
    return out


if __name__ == "__main__":  # make schema
    json.dump(build_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
