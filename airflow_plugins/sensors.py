"""Sensors on a MemWAL table's status, in poke/reschedule mode or deferrable.

- ``MergeLagSensor``: succeeds when the merger is behind by at least one threshold
  (unmerged generations, unmerged bytes, age of the oldest unmerged generation): the
  backpressure signal that triggers an early merge.
- ``MergedGenerationSensor``: succeeds when shard S has merged generation N (and,
  optionally, named indexes have caught up to it): "wait until durable" for an ingest
  job that flushed generation N and must not report success before readers of the base
  table can see it.

With ``deferrable=True`` the sensor checks once and, unless the condition already holds,
hands the wait to ``MemWalStatusTrigger`` in the triggerer (no worker slot is held).
Both modes push the evidence (a dict) to XCom.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from memwal.airflow.hooks import MemWalHook
from memwal.airflow.triggers import ConditionError, MemWalStatusTrigger, describe, evaluate

if TYPE_CHECKING:
    from airflow.sdk import Context


class _MemWalStatusSensor(BaseSensorOperator):
    """What the MemWAL sensors share: the table they watch, and how they wait.

    :param table: table URI (templated); overrides the connection's.
    :param memwal_conn_id: ``memwal`` connection holding the table URI and storage options (templated).
    :param storage_options: storage options; override the connection's. Never templated or logged.
    :param deferrable: wait in the triggerer (``MemWalStatusTrigger``) instead of a worker slot.
    """

    template_fields: Sequence[str] = ("table", "memwal_conn_id")
    ui_color = "#d8f0e8"

    def __init__(
        self,
        *,
        table: str | None = None,
        memwal_conn_id: str | None = None,
        storage_options: dict[str, str] | None = None,
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not table and not memwal_conn_id:
            raise ValueError(f"{type(self).__name__}: give `table` or `memwal_conn_id`")
        self.table = table
        self.memwal_conn_id = memwal_conn_id
        self.storage_options = dict(storage_options or {})  # never a template field: credentials
        self.deferrable = deferrable

    def condition(self) -> dict[str, Any]:
        raise NotImplementedError

    def check(self) -> dict[str, Any] | None:
        """One status read: the payload when the condition holds, else None."""
        from memwal.errors import BadInputError

        hook = MemWalHook(self.memwal_conn_id, table=self.table or None, storage_options=self.storage_options)
        try:
            return evaluate(self.condition(), hook.status())
        except (BadInputError, ConditionError, ValueError) as exc:
            raise AirflowFailException(f"{type(self).__name__}: {exc}") from exc

    def poke(self, context: Context) -> bool | PokeReturnValue:
        payload = self.check()
        if payload is None:
            self.log.info("not yet: %s", describe(self.condition()))
            return False
        self.log.info("condition met: %s", describe(self.condition()))
        return PokeReturnValue(is_done=True, xcom_value=payload)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        payload = self.check()
        if payload is not None:
            self.log.info("condition already met: %s", describe(self.condition()))
            return payload
        self.defer(
            trigger=MemWalStatusTrigger(
                condition=self.condition(),
                table=self.table or None,
                storage_options=self.storage_options,
                memwal_conn_id=self.memwal_conn_id,
                poke_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        if not event or event.get("status") != "success":
            message = (event or {}).get("message", "no event")
            raise AirflowException(f"{type(self).__name__}: {message}")
        self.log.info("condition met: %s", describe(self.condition()))
        return event["result"]


class MergeLagSensor(_MemWalStatusSensor):
    """Succeed when the table's merge lag reaches any threshold (at least one is required).

    :param max_unmerged_generations: unmerged generations, summed over shards.
    :param max_unmerged_bytes: bytes of unmerged generations, summed over shards.
    :param max_oldest_age_seconds: age of the oldest unmerged generation.
    """

    def __init__(
        self,
        *,
        max_unmerged_generations: int | None = None,
        max_unmerged_bytes: int | None = None,
        max_oldest_age_seconds: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if max_unmerged_generations is None and max_unmerged_bytes is None and max_oldest_age_seconds is None:
            raise ValueError("MergeLagSensor: set at least one threshold")
        self.max_unmerged_generations = max_unmerged_generations
        self.max_unmerged_bytes = max_unmerged_bytes
        self.max_oldest_age_seconds = max_oldest_age_seconds

    def condition(self) -> dict[str, Any]:
        return {
            "kind": "lag",
            "max_unmerged_generations": self.max_unmerged_generations,
            "max_unmerged_bytes": self.max_unmerged_bytes,
            "max_oldest_age_seconds": self.max_oldest_age_seconds,
        }


class MergedGenerationSensor(_MemWalStatusSensor):
    """Succeed when shard ``shard_id`` has merged generation ``generation`` into the base table.

    :param shard_id: the shard (templated: e.g. pulled from the ingest task's XCom).
    :param generation: the generation to wait for (templated; rendered strings are cast).
    :param indexes: also wait until these indexes have caught up to ``generation``.
    """

    template_fields = (*_MemWalStatusSensor.template_fields, "shard_id", "generation")

    def __init__(
        self, *, shard_id: str, generation: int | str, indexes: list[str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.shard_id = shard_id
        self.generation = generation
        self.indexes = list(indexes or [])

    def condition(self) -> dict[str, Any]:
        try:
            generation = int(self.generation)
        except (TypeError, ValueError):
            message = f"MergedGenerationSensor: generation {self.generation!r} is not an integer"
            raise AirflowFailException(message) from None
        return {"kind": "merged", "shard_id": str(self.shard_id), "generation": generation, "indexes": self.indexes}
