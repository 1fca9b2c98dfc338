"""An Airflow notifier for the tests: what it is called with, appended to a file as JSON lines.

A real ``BaseNotifier`` (templated fields rendered with the task's context, ``notify`` called),
named in a fleet config's ``alerts.notifiers`` as any provider's notifier would be."""

from __future__ import annotations

import json
from typing import Any

from airflow.sdk import BaseNotifier


class FileNotifier(BaseNotifier):
    template_fields = ("message",)

    def __init__(self, path: str, message: str) -> None:
        super().__init__()
        self.path = path
        self.message = message

    def notify(self, context: Any) -> None:
        alert = context["memwal_slo"]
        with open(self.path, "a") as f:
            f.write(json.dumps({"message": self.message, "tables": alert["tables"], "count": alert["count"],
                                "dag_id": context["dag"].dag_id}) + "\n")
