"""The MemWAL clients users run, each as the benches drive it: a writer process kept open, a new
process's read, and a reference table holding the same rows and no generation.

Every client runs in its own driver process (``tests/clients/``, one JSON command a line), in its
own virtual environment where it needs one (``make lance-context``, ``make lancedb``): pylance 14
in ours, lance-context 0.6.7 and LanceDB 0.40 beside it. Used by ``read steady`` and the peers bench.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.processes import ROOT
from tests.clients.piped import PipedClient

OURS = ROOT / ".venv" / "bin" / "python"
PYLANCE_DRIVER = ROOT / "tests" / "clients" / "pylance_driver.py"
LC_PYTHON = ROOT / ".venv-lc" / "bin" / "python"
LC_DRIVER = ROOT / "tests" / "clients" / "lance_context_driver.py"
LDB_PYTHON = ROOT / ".venv-ldb" / "bin" / "python"
LDB_DRIVER = ROOT / "tests" / "clients" / "lancedb_driver.py"


class Driver(PipedClient):
    """A client's driver process (tests/clients/), one command at a time: the bench's writer
    thread and its measurements share it."""

    name = "bench client"

    def __init__(self, python: Path, script: Path) -> None:
        super().__init__(python, script)
        self.lock = threading.Lock()

    def call(self, op: str, **args: Any) -> Any:
        with self.lock:
            return super().call(op, **args)


@dataclass
class Client:
    """How one client is written and read: its writer process, a new process's read, the
    reference table (the same rows and no generation), and its rows (key, value, generation)."""

    name: str
    open_writer: Callable[[str, int, list[dict[str, Any]]], Driver]
    reopen_writer: Callable[[str, int], Driver]
    read_new: Callable[[str], dict[str, Any]]
    reference: Callable[[str, list[dict[str, Any]]], None]
    row: Callable[[object, int, int], dict[str, Any]]


def _named_row(key: object, v: int, g: int) -> dict[str, Any]:
    return {"id": key, "v": v, "name": f"g{g}"}


def _ldb_row(key: object, v: int, g: int) -> dict[str, Any]:
    return {"id": key, "cat": "a", "v": v, "text": f"g{g}", "vec": [0.0] * 16}


def _pylance_writer(uri: str, rows: int, base: list[dict[str, Any]]) -> Driver:
    d = Driver(OURS, PYLANCE_DRIVER)
    d.call("create", uri=uri, rows=base)
    d.call("open", uri=uri, rows=rows)
    return d


def _pylance_reopen(uri: str, rows: int) -> Driver:
    d = Driver(OURS, PYLANCE_DRIVER)
    d.call("open", uri=uri, rows=rows)
    return d


def _pylance_read_new(uri: str) -> dict[str, Any]:
    d = Driver(OURS, PYLANCE_DRIVER)
    try:
        return dict(d.call("read_new", uri=uri))
    finally:
        d.close()


def _pylance_reference(uri: str, rows: list[dict[str, Any]]) -> None:
    import lance
    import pyarrow as pa

    from tests.clients.pylance_driver import SCHEMA

    shutil.rmtree(uri, ignore_errors=True)
    lance.write_dataset(pa.Table.from_pylist(rows, schema=SCHEMA), uri).initialize_mem_wal(unsharded=True)


def _lc_writer(uri: str, rows: int, base: list[dict[str, Any]]) -> Driver:
    from tests.clients.context_store import SCHEMA

    d = Driver(LC_PYTHON, LC_DRIVER)
    d.call("open", uri=uri, schema=SCHEMA)
    if base:  # merged by lance-context itself, which refreshes its own process's base
        d.call("gen", rows=base)
        d.call("cleanup_all")
    return d


def _lc_reopen(uri: str, rows: int) -> Driver:
    d = Driver(LC_PYTHON, LC_DRIVER)
    d.call("open_existing", uri=uri)
    return d


def _lc_read_new(uri: str) -> dict[str, Any]:
    d = Driver(LC_PYTHON, LC_DRIVER)
    try:
        d.call("open_existing", uri=uri)
        return dict(d.call("read"))
    finally:
        d.close()


def _lc_reference(uri: str, rows: list[dict[str, Any]]) -> None:
    from tests.clients.context_store import SCHEMA

    shutil.rmtree(uri, ignore_errors=True)
    d = Driver(LC_PYTHON, LC_DRIVER)
    try:
        d.call("open", uri=uri, schema=SCHEMA)
        d.call("gen", rows=rows)
        d.call("cleanup_all")
    finally:
        d.close()


def _ldb_table(uri: str) -> tuple[str, str]:
    """A LanceDB database folder and table name for the table at ``uri`` (``<db>/<name>.lance``)."""
    path = Path(uri)
    return str(path.parent), path.name.removesuffix(".lance")


def _ldb_writer(uri: str, rows: int, base: list[dict[str, Any]]) -> Driver:
    db, name = _ldb_table(uri)
    d = Driver(LDB_PYTHON, LDB_DRIVER)
    d.call("open", db=db, name=name, create={"rows": base, "key": ["id"], "spec": {"kind": "unsharded"},
                                             "max_memtable_rows": 10 * rows})
    return d


def _ldb_reopen(uri: str, rows: int) -> Driver:
    db, name = _ldb_table(uri)
    d = Driver(LDB_PYTHON, LDB_DRIVER)
    d.call("open", db=db, name=name)
    return d


def _ldb_read_new(uri: str) -> dict[str, Any]:
    db, name = _ldb_table(uri)
    d = Driver(LDB_PYTHON, LDB_DRIVER)
    try:
        d.call("open", db=db, name=name)
        return dict(d.call("read"))
    finally:
        d.close()


def _ldb_reference(uri: str, rows: list[dict[str, Any]]) -> None:
    shutil.rmtree(uri, ignore_errors=True)
    db, name = _ldb_table(uri)
    d = Driver(LDB_PYTHON, LDB_DRIVER)
    try:
        d.call("open", db=db, name=name, create={"rows": rows, "key": ["id"], "spec": {"kind": "unsharded"}})
    finally:
        d.close()


CLIENTS = {
    "pylance": Client("pylance", _pylance_writer, _pylance_reopen, _pylance_read_new, _pylance_reference, _named_row),
    "lance-context": Client("lance-context", _lc_writer, _lc_reopen, _lc_read_new, _lc_reference, _named_row),
    "lancedb": Client("lancedb", _ldb_writer, _ldb_reopen, _ldb_read_new, _ldb_reference, _ldb_row),
}

#: arm -> (client, maintenance)
ARMS = {"pylance": ("pylance", "memwal"), "lance-context": ("lance-context", "memwal"),
        "lance-context-peer": ("lance-context", "cleanup_wal"), "lancedb": ("lancedb", "memwal"),
        "lance-context-both": ("lance-context", "both")}


def available(arm: str) -> bool:
    client = ARMS[arm][0]
    if client == "lance-context":
        return LC_PYTHON.exists()
    if client == "lancedb":
        return LDB_PYTHON.exists() and LDB_DRIVER.exists()
    return True


__all__ = ["ARMS", "CLIENTS", "Client", "Driver", "available"]
