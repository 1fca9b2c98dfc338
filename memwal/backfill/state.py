"""The backfill's state file: finished (table, job) pairs, with the options they ran with.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

from memwal.backfill.tables import table_key
from memwal.errors import BadInputError

DEFAULT_STATE_FILE = os.path.join(".memwal-backfill", "state.json")


STATE_FORMAT = 1


def options_fingerprint(engine: str, options: dict[str, Any]) -> str:
    """What a finished (table, job) was run with: a rerun with other options (``--grace-seconds
    0`` after a run with the default) is new work, not something finished earlier."""
    import hashlib

    doc = json.dumps({"engine": engine, **{k: v for k, v in options.items() if k != "lease_ttl"}},
                     sort_keys=True, default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


class BackfillState:
    """Finished (table, job) pairs, persisted atomically after every change."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.finished: dict[str, dict[str, dict[str, Any]]] = {}
        if os.path.exists(path):
            try:
                with open(path) as f:
                    doc = json.load(f)
                if doc.get("format") != STATE_FORMAT or not isinstance(doc.get("finished"), dict):
                    raise ValueError("not a memwal backfill state file")
                self.finished = doc["finished"]
            except (OSError, ValueError, AttributeError) as exc:
                raise BadInputError(f"state file {path}: unreadable ({exc}); fix it or pass --restart") from exc

    def is_done(self, table: str, job: str) -> dict[str, Any] | None:
        with self._lock:
            return self.finished.get(table_key(table), {}).get(job)

    def mark_done(self, table: str, job: str, record: dict[str, Any]) -> None:
        with self._lock:
            self.finished.setdefault(table_key(table), {})[job] = record
            self._save()

    def forget(self, tables: Sequence[str]) -> None:
        with self._lock:
            for t in tables:
                self.finished.pop(table_key(t), None)
            self._save()

    def _save(self) -> None:
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".state-", dir=directory)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"format": STATE_FORMAT, "finished": self.finished}, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
