"""The ``memwal_fleet_control`` DAG's task: an operator pauses, resumes or cancels from Airflow's UI.

The fleet page cannot act (no script, no form: its policy forbids both), so acting goes through
Airflow itself: the control DAG's trigger form (its Params: ``action``, ``target``, ``reason``)
is authenticated and audited by Airflow, and the user who triggered the run is who is recorded
(``dag_run.triggering_user_name``), with the reason, in the fleet's state
(:mod:`memwal.fleet.control_log`), as ``memwal fleet pause|resume|cancel`` records them: a
fleet-wide pause without the fleet's key needs ``confirm_fleet_wide``, a cancel of something
that is no table of the fleet fails (never retried).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

if TYPE_CHECKING:
    from airflow.sdk import Context

ACTIONS = ("pause", "resume", "cancel")


class MemWalFleetControlOperator(BaseOperator):
    """Apply the run's ``params`` (action, target, reason, confirm_fleet_wide) to the fleet (see
    the module docstring).

    :param config_path: the fleet's config file (templated); None: ``$MEMWAL_FLEET_CONFIG``.
    """

    template_fields: tuple[str, ...] = ("config_path",)
    ui_color = "#f6e8df"

    def __init__(self, *, config_path: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path

    def execute(self, context: Context) -> dict[str, Any]:
        from memwal.airflow.fleet import load_fleet_config, state_of, storage_options_of

        from memwal.core import clock as clocks
        from memwal.errors import BadInputError
        from memwal.fleet import control_log as controls
        from memwal.fleet import targets
        from memwal.history import cancel_effect
        from memwal.lease import cancel
        from memwal.store import check_table_uri, open_store

        params = context["params"]
        action, target, reason = str(params.get("action")), str(params.get("target") or "").strip(), \
            str(params.get("reason") or "").strip()
        run = context.get("dag_run")
        by = str(getattr(run, "triggering_user_name", None) or "airflow")
        if action not in ACTIONS or not target or not reason:
            raise AirflowException(f"memwal fleet control: expected action in {ACTIONS}, a target and a reason")
        config = load_fleet_config(self.config_path)
        state = state_of(config)
        if state is None:
            raise AirflowException(f"memwal fleet control: the fleet's config {config.path} names no state")
        now = clocks.current()()
        target = controls.canonical_target(target) if action != "resume" else target
        try:
            if action == "pause":
                targets.check_target(state, target, is_table=lambda uri: _is_table(config, uri),
                                     confirmed=params.get("confirm_fleet_wide") is True)
                controls.pause(state, target, by=by, reason=reason, now=now)
                doc: dict[str, Any] = {"paused": target}
            elif action == "resume":
                controls.resume(state, target, by=by, reason=reason, now=now)
                doc = {"resumed": target}
        except BadInputError as exc:  # a target that names nothing: said, never retried
            raise AirflowFailException(f"memwal fleet control: {exc}") from None
        if action == "cancel":
            source = config.source_of(target)
            if source is None or not _is_table(config, target):
                raise AirflowFailException(f"memwal fleet control: {target}: no table of the fleet's sources there")
            store = open_store(check_table_uri(target), storage_options_of(source))
            asked = cancel.ask(store, by, reason, now=now)
            controls.log_action(state, "cancel", target, by=by, reason=reason, now=now)
            doc = {"table": target, "cancelled": [a.kind for a in asked], "jobs": cancel_effect.progress(store, asked)}
            if not asked:
                self.log.warning("memwal fleet control: no running job of %s holds a lease: nothing to cancel", target)
        self.log.info("memwal fleet control: %s %s by %s: %s -> %s", action, target, by, reason, doc)
        return {**doc, "by": by, "reason": reason, "at": now}


def _is_table(config: Any, uri: str) -> bool:
    """Whether a Lance table lies at ``uri``, read with the storage options of the source holding it."""
    from memwal.airflow.fleet import storage_options_of

    from memwal.fleet.targets import is_table

    source = config.source_of(uri)
    return source is not None and is_table(uri, storage_options_of(source))
