"""Provider metadata (entry point ``apache_airflow_provider``): Airflow discovers the hook,
the ``memwal`` connection type, operators, sensors and triggers from this dict.

Airflow loads this module while it initialises its own configuration, so it must not
import Airflow (nor anything heavy).
"""

from __future__ import annotations

from typing import Any

CONN_TYPE = "memwal"
HOOK_CLASS = "memwal.airflow.hooks.MemWalHook"

#: The connection form, declared once: what :meth:`MemWalHook.from_connection` reads is shown
#: (the host is the table URI; login and password an S3 key pair, kept out of the extra so
#: Airflow stores the secret as a password), the rest hidden. Airflow reads it from the
#: provider info (kebab-case keys) and from the hook (``get_ui_field_behaviour``, snake_case).
UI_FIELD_BEHAVIOUR = {
    "hidden-fields": ["schema", "port"],
    "relabeling": {"host": "Table URI", "login": "AWS access key id", "password": "AWS secret access key"},
    "placeholders": {
        "host": "s3://bucket/table, az://container/table, gs://bucket/table or /path/to/table",
        "login": "optional: for s3:// tables (or a role, or storage options in extra)",
        "password": "optional: for s3:// tables",
        "extra": '{"storage_options": {"aws_region": "us-east-1"}}',
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "memwal-jobs",
        "name": "MemWAL jobs",
        "description": "Background jobs (merge, index catch-up, compaction, snapshot refresh, GC) "
        "for Lance tables with a MemWAL.",
        "integrations": [
            {
                "integration-name": "Lance MemWAL",
                "external-doc-url": "https://lancedb.github.io/lance/",
                "tags": ["software"],
            }
        ],
        "operators": [{"integration-name": "Lance MemWAL",
                       "python-modules": ["memwal.airflow.operators", "memwal.airflow.maintenance_operators",
                                          "memwal.airflow.checkpoint_operators", "memwal.airflow.fleet_operators"]}],
        "sensors": [{"integration-name": "Lance MemWAL", "python-modules": ["memwal.airflow.sensors"]}],
        "hooks": [{"integration-name": "Lance MemWAL",
                   "python-modules": ["memwal.airflow.hooks"]}],
        "triggers": [{"integration-name": "Lance MemWAL", "python-modules": ["memwal.airflow.triggers"]}],
        "connection-types": [
            {
                "hook-class-name": HOOK_CLASS,
                "connection-type": CONN_TYPE,
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
            }
        ],
    }
