"""LanceDB 0.40.0, the client most people write Lance with, as its users run it: a long-lived
process holding tables open, driven over a pipe (:mod:`tests.clients.lancedb_driver`, whose
docstring lists the commands).

It lives in its own virtual environment, ``.venv-ldb`` (``make lancedb``): it carries Lance 13
inside and needs no pylance, so it never shares a process with pylance 14. Starting one costs
seconds (importing lancedb), so one process serves many tables: a :class:`LanceDBTable` is a
handle on one table, through a connection of its own, in a :class:`LanceDBProcess`.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from tests.clients.piped import PipedClient

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-ldb" / "bin" / "python"
DRIVER = Path(__file__).with_name("lancedb_driver.py")

#: The vector column's width (the driver's schema: id, cat, v, text, vec).
DIM = 16


class LanceDBProcess(PipedClient):
    """One LanceDB process; :meth:`table` opens (or creates) a table in it."""

    name = "LanceDB"
    make_target = "lancedb"

    def __init__(self) -> None:
        super().__init__(PYTHON, DRIVER)
        self._handles = itertools.count()

    def table(self, db_uri: str, name: str, *, create: dict[str, Any] | None = None,
              storage_options: dict[str, str] | None = None,
              read_consistency_interval: float | None = None) -> LanceDBTable:
        """Table ``name`` of the database at ``db_uri`` through a new connection: created from
        ``create`` (the driver's ``create`` document) when given, else opened.
        ``read_consistency_interval`` (seconds) is LanceDB's own: None, its default, keeps the
        version the table opened until :meth:`LanceDBTable.checkout_latest`; 0 reads the latest
        at every read."""
        handle = f"h{next(self._handles)}"
        self.call("open", handle=handle, db=db_uri, name=name, create=create, storage_options=storage_options,
                  read_consistency_interval=read_consistency_interval)
        return LanceDBTable(self, handle, db_uri, name)


class LanceDBTable:
    """A table held open in a LanceDB process (:meth:`LanceDBProcess.table`)."""

    def __init__(self, process: LanceDBProcess, handle: str, db_uri: str, name: str) -> None:
        self.process, self.handle, self.db_uri, self.name = process, handle, db_uri, name

    def call(self, op: str, **args: Any) -> Any:
        return self.process.call(op, handle=self.handle, **args)

    @property
    def uri(self) -> str:
        """The table's own folder, as memwal names it: ``<database>/<name>.lance``."""
        return f"{self.db_uri.rstrip('/')}/{self.name}.lance"

    def merge_insert(self, rows: list[dict[str, Any]]) -> None:
        self.call("merge_insert", rows=rows)

    def close_writers(self) -> None:
        """``close_lsm_writers()``: the open shard writer flushes a generation."""
        self.call("close_writers")

    def checkout_latest(self) -> None:
        self.call("checkout_latest")

    def scan(self, **args: Any) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.call("scan", **args)
        return rows

    def filter(self, where: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.call("filter", where=where)
        return rows

    def fts(self, query: str, limit: int = 1000) -> list[int]:
        ids: list[int] = self.call("fts", query=query, limit=limit)
        return ids

    def vector(self, queries: list[list[float]], k: int = 10, **args: Any) -> list[list[int]]:
        found: list[list[int]] = self.call("vector", queries=queries, k=k, **args)
        return found

    def close(self) -> None:
        """The table closed in its process (its open writer flushed first)."""
        self.close_writers()
        self.call("close")


def available() -> bool:
    return PYTHON.exists()
