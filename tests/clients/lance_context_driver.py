"""A lance-context store driven over a pipe: one JSON command a line in, one JSON answer out.

Runs in lance-context's own virtual environment (``.venv-lc``: lance-context 0.6.7 with Lance 9
inside, pinned by ``tests/clients/lance-context.txt``), never in ours: it is the production
client as its users run it, one long-lived process holding one store. Commands:
``{"op": "open", "uri": ..., "schema": {...}}``, ``{"op": "open_existing", "uri": ...}``,
``{"op": "add", "rows": [...]}``, ``{"op": "flush"}``, ``{"op": "list"}``, ``{"op": "get", "id": ...}``,
``{"op": "cleanup_wal"}``, ``{"op": "version"}``; for the peer bench (bench/clients/peers.py), where JSON of
every row would cost more than the work measured: ``{"op": "fill", "generations": G, "rows": R}``
(G generations of R rows, half of them updates, written and flushed one by one),
``{"op": "timed_list"}`` (rows and seconds of one ``list()``) and ``{"op": "cleanup_all"}``
(``cleanup_wal()`` until it has nothing left: generations merged and calls); for the
steady-state bench (bench/read/steady.py): ``{"op": "gen", "rows": [...]}`` (one flushed generation
of those rows) and ``{"op": "read"}`` (one ``list()``: rows, the rows' digest of
:mod:`tests.clients.digest` over ``id`` and ``v``, seconds). Answers: ``{"ok": value}`` or
``{"error": "..."}``.
"""

from __future__ import annotations

import time
from typing import Any

import lance_context
from digest import rows_digest  # beside this file (tests/clients/digest.py)
from piped import serve  # beside this file: the other end of the pipe (tests/clients/piped.py)


def fill(store: Any, generations: int, rows: int, start: int) -> int:
    """Write ``generations`` flushed generations of ``rows`` rows: half updates of keys written
    before, half new keys; the number the next new key takes."""
    fresh = start
    for g in range(generations):
        old = [f"k{(fresh - 1 - 2 * i) % max(fresh, 1):08d}" for i in range(rows // 2)] if fresh else []
        new = [f"k{fresh + i:08d}" for i in range(rows - len(old))]
        fresh += len(new)
        store.add([{"id": k, "v": g, "name": f"g{g}"} for k in old + new])
        store.flush()
    return fresh


def run(held: dict[str, Any], op: str, cmd: dict[str, Any]) -> Any:
    """One command on the process's store (``held["store"]``, set by ``open``)."""
    opts = cmd.get("storage_options")
    if op == "open":
        held["store"] = lance_context.GenericStore.open(cmd["uri"], cmd["schema"], storage_options=opts)
        return None
    if op == "open_existing":
        held["store"] = lance_context.GenericStore.open_existing(cmd["uri"], storage_options=opts)
        return None
    store = held.get("store")
    if op == "add":
        return store.add(cmd["rows"])
    if op == "flush":
        return store.flush()
    if op == "list":
        return store.list()
    if op == "get":
        return store.get(cmd["id"])
    if op == "cleanup_wal":
        return store.cleanup_wal()
    if op == "version":
        return store.version()
    if op == "fill":
        return fill(store, cmd["generations"], cmd["rows"], cmd.get("start", 0))
    if op == "timed_list":
        t0 = time.perf_counter()
        n = len(store.list())
        return {"rows": n, "seconds": time.perf_counter() - t0}
    if op == "gen":
        store.add(cmd["rows"])
        store.flush()
        return None
    if op == "read":
        t0 = time.perf_counter()
        rows = store.list()
        seconds = time.perf_counter() - t0
        return {"rows": len(rows), "digest": rows_digest((r["id"], r.get("v")) for r in rows), "seconds": seconds}
    if op == "cleanup_all":
        merged = calls = 0
        while (n := store.cleanup_wal()) > 0:
            merged, calls = merged + n, calls + 1
        return {"merged": merged, "calls": calls + 1}
    raise ValueError(f"unknown op {op!r}")


if __name__ == "__main__":
    held: dict[str, Any] = {}
    serve(lambda op, cmd: run(held, op, cmd))
