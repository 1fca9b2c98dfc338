"""Provider metadata (entry point ``apache_airflow_provider``): Airflow discovers the hook,
the ``memwal`` connection type, operators, sensors and triggers from this dict.

Airflow loads this module while it initialises its own configuration, so it must not
import Airflow (nor anything heavy).
"""

from __future__ import annotations

CONN_TYPE = "memwal"
HOOK_CLASS = "memwal.airflow.hooks.MemWalHook"


def get_provider_info() -> dict:
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
                       "python-modules": ["memwal.airflow.operators", "memwal.airflow.checkpoint_operators"]}],
        "sensors": [{"integration-name": "Lance MemWAL", "python-modules": ["memwal.airflow.sensors"]}],
        "hooks": [{"integration-name": "Lance MemWAL", "python-modules": ["memwal.airflow.hooks"]}],
        "triggers": [{"integration-name": "Lance MemWAL", "python-modules": ["memwal.airflow.triggers"]}],
        "connection-types": [
            {
                "hook-class-name": HOOK_CLASS,
                "connection-type": CONN_TYPE,
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login", "password", "port"],
                    "relabeling": {"host": "Table URI"},
                    "placeholders": {
                        "host": "s3://bucket/prefix/table or /path/to/table",
                        "extra": '{"storage_options": {"aws_region": "us-east-1"}}',
                    },
                },
            }
        ],
    }
