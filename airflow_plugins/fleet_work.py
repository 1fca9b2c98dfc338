"""The fleet DAG's work between its tasks: the plan's tables with work, in chunks the mapped
tasks take (plain dicts, no credential), and each chunk's work rebuilt in its task with the
storage options resolved there (split from :mod:`memwal.airflow.fleet`, the config)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memwal.airflow.fleet import FleetConfig, storage_options_of

from memwal.core.secrets import is_secret_key

if TYPE_CHECKING:
    from memwal.fleet.plan import FleetPlan
    from memwal.fleet.run import TableWork

#: Airflow's ``[core] max_map_length`` when its config cannot be read.
DEFAULT_MAX_MAP_LENGTH = 1024


def planned_work(config: FleetConfig, fleet: FleetPlan) -> list[TableWork]:
    """Each table with work, highest debt first, with the jobs the config allows."""
    from memwal.fleet.run import work_for

    out = []
    for t in fleet.with_work():
        w = work_for(t, config.policy, [j for j in t.jobs if j in config.jobs], engine=config.engine, dry_run=False)
        if w is not None:
            out.append(w)
    return out


def max_map_length() -> int:
    try:
        from airflow.configuration import conf

        return conf.getint("core", "max_map_length", fallback=DEFAULT_MAX_MAP_LENGTH)
    except Exception:  # noqa: BLE001 - a worker without the config reads Airflow's default
        return DEFAULT_MAX_MAP_LENGTH


def chunks(work: Sequence[TableWork], per_task: int, limit: int) -> list[list[dict[str, Any]]]:
    """The work as plain dicts in chunks of ``per_task`` tables, in the order it starts (the
    first chunk first), fewer than ``limit`` chunks (larger ones if need be). No credential
    travels: secret storage options are dropped; the task asks the source's connection, or a
    namespace table's namespace, again (:func:`work_of`)."""
    size = max(per_task, math.ceil(len(work) / max(1, limit - 1)))
    docs = []
    for w in work:
        doc = w.to_dict()
        doc["storage_options"] = {k: v for k, v in w.storage_options.items() if not is_secret_key(k)}
        docs.append(doc)
    return [docs[i:i + size] for i in range(0, len(docs), size)]


def work_of(config: FleetConfig, docs: Sequence[Mapping[str, Any]]) -> list[TableWork]:
    """The work of one chunk, each table with its source's storage options resolved here: the
    connection's, and for a namespace table the credentials its namespace vends for it now."""
    from memwal.fleet.run import TableWork
    from memwal.fleet.sources import vended_options

    options: dict[str, dict[str, str]] = {}
    out = []
    for doc in docs:
        source = str(doc.get("source") or "")
        if source not in options:
            options[source] = storage_options_of(config.source(source))
        table_options = options[source]
        table_id = [str(x) for x in doc.get("namespace_id") or []]
        if table_id:
            vended = vended_options(source, config.source(source).properties, table_id)
            table_options = {**table_options, **vended}
        out.append(TableWork.from_dict(doc, table_options))
    return out
