"""lance-context 0.6.7, the production MemWAL client, as its users run it: one long-lived
process holding one store, driven over a pipe (:mod:`tests.clients.lance_context_driver`).

It lives in its own virtual environment, ``.venv-lc`` (``make lance-context``): it carries
Lance 9 inside and depends on pyarrow only, so it never shares a process with pylance 14.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.clients.piped import PipedClient

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-lc" / "bin" / "python"
DRIVER = Path(__file__).with_name("lance_context_driver.py")

#: The store our tests write: ``id`` is lance-context's key, the others plain columns.
SCHEMA: dict[str, Any] = {"id": {"type": "string", "nullable": False}, "v": "int64", "name": "string"}


class LanceContextStore(PipedClient):
    """One lance-context process holding one store (``open`` creates it, else it is opened)."""

    name = "lance-context"
    make_target = "lance-context"

    def __init__(self, uri: str, *, create: bool = False, storage_options: dict[str, str] | None = None) -> None:
        super().__init__(PYTHON, DRIVER)
        self.uri = uri
        opts = {"storage_options": storage_options} if storage_options else {}
        if create:
            self.call("open", uri=uri, schema=SCHEMA, **opts)
        else:
            self.call("open_existing", uri=uri, **opts)

    def add(self, rows: list[dict[str, Any]]) -> None:
        self.call("add", rows=rows)

    def flush(self) -> None:
        self.call("flush")

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Rows added and sealed: one flushed generation."""
        self.add(rows)
        self.flush()

    def rows(self) -> dict[str, dict[str, Any]]:
        """What ``list()`` returns, by id (lance-context leaves null columns out of a row)."""
        return {r["id"]: r for r in self.call("list")}

    def get(self, key: str) -> dict[str, Any] | None:
        value: dict[str, Any] | None = self.call("get", id=key)
        return value

    def cleanup_wal(self) -> int:
        return int(self.call("cleanup_wal"))


def row(key: str, v: int, name: str | None = None) -> dict[str, Any]:
    """A row as lance-context returns it (no key for a null column)."""
    out: dict[str, Any] = {"id": key, "v": v}
    if name is not None:
        out["name"] = name
    return out


def available() -> bool:
    return PYTHON.exists()


if __name__ == "__main__":  # a smoke check: python -m tests.clients.context_store <dir>
    with LanceContextStore(sys.argv[1], create=True) as s:
        s.write([row("a", 1)])
        print(s.rows())
