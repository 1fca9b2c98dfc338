"""Triggers behind the deferrable sensors, and the conditions both share.

``MemWalStatusTrigger`` runs in the triggerer: every ``poke_interval`` seconds it reads
``memwal.inspect.status.table_status`` (manifests only) in a worker thread and yields one
``TriggerEvent`` when its condition holds (or when the table cannot be read). The same
condition functions decide a poke of the sensors, so poke mode and deferrable mode agree.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from memwal.core import steps

if TYPE_CHECKING:
    from memwal.inspect.status import TableStatus

log = logging.getLogger(__name__)

TRIGGER_PATH = "memwal.airflow.triggers.MemWalStatusTrigger"
MAX_CONSECUTIVE_ERRORS = 3


# -- conditions (pure: a TableStatus in, a decision out) ---------------------------------
def lag_summary(status: TableStatus) -> dict[str, Any]:
    """How far the merger is behind, table-wide (what the lag sensor pushes to XCom)."""
    return {
        "table": status.table,
        "version": status.version,
        "unmerged_generations": status.unmerged_generations,
        "unmerged_bytes": status.unmerged_bytes,
        "oldest_unmerged_age_seconds": status.oldest_unmerged_age_seconds,
        "shards": {s.shard_id: len(s.unmerged_generations) for s in status.shards},
    }


def lag_reasons(
    status: TableStatus,
    *,
    max_unmerged_generations: int | None = None,
    max_unmerged_bytes: int | None = None,
    max_oldest_age_seconds: float | None = None,
) -> list[str]:
    """The thresholds the table has reached (empty: no backpressure yet)."""
    reasons = []
    if max_unmerged_generations is not None and status.unmerged_generations >= max_unmerged_generations:
        reasons.append(f"{status.unmerged_generations} unmerged generations >= {max_unmerged_generations}")
    if max_unmerged_bytes is not None and status.unmerged_bytes >= max_unmerged_bytes:
        reasons.append(f"{status.unmerged_bytes} unmerged bytes >= {max_unmerged_bytes}")
    age = status.oldest_unmerged_age_seconds
    if max_oldest_age_seconds is not None and age is not None and age >= max_oldest_age_seconds:
        reasons.append(f"oldest unmerged generation {age:.0f}s old >= {max_oldest_age_seconds:g}s")
    return reasons


class ConditionError(Exception):
    """The condition can never hold as asked (e.g. an unknown shard): fail, do not wait."""


def merged_reached(status: TableStatus, *, shard_id: str, generation: int,
                   indexes: list[str] | None = None) -> dict[str, Any] | None:
    """None while shard ``shard_id`` has not merged (and, if asked, indexed) ``generation``; else the evidence."""
    shard = next((s for s in status.shards if s.shard_id == shard_id), None)
    if shard is None:
        known = ", ".join(s.shard_id for s in status.shards) or "none"
        raise ConditionError(f"{status.table}: no shard {shard_id!r} (shards: {known})")
    if shard.compacted_generation < generation:
        return None
    caught = {}
    for name in indexes or []:
        if name not in shard.index_catchup:
            raise ConditionError(f"{status.table}: index {name!r} is not maintained by the MemWAL index")
        caught[name] = shard.index_catchup[name]
        if caught[name] < generation:
            return None
    return {
        "table": status.table,
        "version": status.version,
        "shard_id": shard_id,
        "generation": generation,
        "merged_generation": shard.compacted_generation,
        "index_catchup": caught,
    }


def evaluate(condition: dict[str, Any], status: TableStatus) -> dict[str, Any] | None:
    """Evaluate a serialised condition: the event payload when it holds, else None."""
    kind = condition.get("kind")
    if kind == "lag":
        thresholds = {
            k: condition.get(k) for k in ("max_unmerged_generations", "max_unmerged_bytes", "max_oldest_age_seconds")
        }
        reasons = lag_reasons(status, **thresholds)
        return {**lag_summary(status), "reasons": reasons} if reasons else None
    if kind == "merged":
        return merged_reached(
            status,
            shard_id=condition["shard_id"],
            generation=int(condition["generation"]),
            indexes=condition.get("indexes"),
        )
    raise ConditionError(f"unknown condition kind {kind!r}")


def describe(condition: dict[str, Any]) -> str:
    if condition.get("kind") == "merged":
        extra = f" and indexed by {', '.join(condition['indexes'])}" if condition.get("indexes") else ""
        return f"shard {condition['shard_id']} merged up to generation {condition['generation']}{extra}"
    parts = [
        f"{k}={condition[k]}"
        for k in ("max_unmerged_generations", "max_unmerged_bytes", "max_oldest_age_seconds")
        if condition.get(k) is not None
    ]
    return "merge lag reaching " + " or ".join(parts)


# -- trigger ------------------------------------------------------------------------------
class MemWalStatusTrigger(BaseTrigger):
    """Poll a table's status until ``condition`` holds.

    :param condition: ``{"kind": "lag", "max_unmerged_generations": ..., ...}`` or
        ``{"kind": "merged", "shard_id": ..., "generation": N, "indexes": [...]}``.
    :param table: table URI (overrides the connection's).
    :param storage_options: explicit storage options (the connection's are resolved in the
        triggerer, so they are never written into the trigger row).
    :param memwal_conn_id: ``memwal`` connection to resolve the table from.
    :param poke_interval: seconds between status reads.
    """

    def __init__(
        self,
        *,
        condition: dict[str, Any],
        table: str | None = None,
        storage_options: dict[str, str] | None = None,
        memwal_conn_id: str | None = None,
        poke_interval: float = 30.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # BaseTrigger.__init__(**kwargs) is unannotated
        self.condition = dict(condition)
        self.table = table
        self.storage_options = dict(storage_options or {})
        self.memwal_conn_id = memwal_conn_id
        self.poke_interval = float(poke_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            TRIGGER_PATH,
            {
                "condition": self.condition,
                "table": self.table,
                "storage_options": self.storage_options,
                "memwal_conn_id": self.memwal_conn_id,
                "poke_interval": self.poke_interval,
            },
        )

    async def _resolve(self) -> tuple[str, dict[str, str]]:
        from memwal.airflow.hooks import MemWalHook, mask_storage_options

        uri = self.table
        options: dict[str, str] = {}
        if self.memwal_conn_id:
            from airflow.sdk import BaseHook

            conn = await BaseHook.aget_connection(self.memwal_conn_id)
            conn_uri, options = MemWalHook.from_connection(conn)
            uri = uri or conn_uri
        options.update(self.storage_options)
        if not uri:
            raise ConditionError("no MemWAL table: give `table` or a memwal connection with the table URI")
        mask_storage_options(options)
        return uri, options

    @staticmethod
    def _status(uri: str, options: dict[str, str]) -> TableStatus:
        import memwal

        return memwal.open(uri, storage_options=options).status()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from memwal.errors import BadInputError

        try:
            uri, options = await self._resolve()
        except Exception as exc:  # noqa: BLE001 - reported to the sensor as an event
            yield TriggerEvent({"status": "error", "message": _one_line(exc)})
            return
        errors = 0
        log.info("waiting for %s on %s (every %ss)", describe(self.condition), uri, self.poke_interval)
        while True:
            try:
                status = await asyncio.to_thread(self._status, uri, options)
                payload = evaluate(self.condition, status)
                errors = 0
            except (BadInputError, ConditionError) as exc:
                yield TriggerEvent({"status": "error", "message": _one_line(exc)})
                return
            except Exception as exc:  # noqa: BLE001 - transient storage errors: retry a few times
                errors += 1
                log.warning("status of %s failed (%d/%d): %s", uri, errors, MAX_CONSECUTIVE_ERRORS, _one_line(exc))
                if errors >= MAX_CONSECUTIVE_ERRORS:
                    yield TriggerEvent({"status": "error", "message": _one_line(exc)})
                    return
                payload = None
            if payload is not None:
                yield TriggerEvent({"status": "success", "result": payload})
                return
            steps.step("trigger.not-yet")
            await asyncio.sleep(self.poke_interval)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
