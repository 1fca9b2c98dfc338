"""The fleet's shared state: small JSON objects in one folder every machine can read.

A fleet runs on many machines at once (Airflow workers, the API server, an operator's laptop),
so what one plan learnt must not live on one machine's disk. The state folder is a URI
(``s3://lake/_memwal_fleet``, ``az://...``, ``gs://...``, or a local folder for a fleet on one
machine), reached through the same store layer as the tables (:mod:`memwal.store`: requests
counted and retried, conditional writes), with the same storage options. It holds:

- ``cache.json``: the probe cache (:class:`memwal.fleet.cache.ProbeCache`): what each table's
  manifest and listings showed, so an unchanged table is not read again, from any machine;
- ``plan.json``: the last plan's bounded report (:mod:`memwal.fleet.report`) and the history
  of earlier plans' totals (the page's trends): the page reads it and never plans;
- ``runs.json``: per table, its last runs, its failures with their reasons, and the jobs that
  wait for time (:mod:`memwal.fleet.runs`);
- ``controls.json``: the operator's pauses, with who, why and when (:mod:`memwal.fleet.controls`).

Every object is rewritten whole by compare-and-swap on the ETag it was read with
(:meth:`FleetState.update`), so two writers (a plan task and an operator pausing a table)
never lose each other's change. Storage is untrusted input: every object is capped in bytes
and in values (:data:`MAX_BYTES`, :data:`MAX_VALUES`) and read by the one bounded JSON reader
(:mod:`memwal.core.json_doc`: no nesting past the stack, no number that is not finite and
bounded); an unreadable one is read as empty with a warning (the state is a cache and a log:
the tables are the truth), and a top-level entry of the wrong type (:data:`SHAPES`) is
dropped with a warning, never fatal to a plan or a page. Each reader checks the entries it
uses in turn: one poisoned object, or one poisoned entry, never stops the fleet.
Why object storage and not Airflow's own storage: docs/decisions/0045-fleet-state-in-object-storage.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from memwal.core.json_doc import JsonDocError, load_json
from memwal.errors import MemWalError, NotFoundError
from memwal.store import Store, open_store

log = logging.getLogger(__name__)

CACHE, PLAN, RUNS, CONTROLS = "cache.json", "plan.json", "runs.json", "controls.json"
#: Largest object of the state read. The probe cache (:mod:`memwal.fleet.cache`) is some 1 to
#: 2 KB a table: 64 MiB holds some 40,000 tables.
MAX_BYTES = {CACHE: 64 << 20, PLAN: 16 << 20, RUNS: 16 << 20, CONTROLS: 4 << 20}
#: Most values an object may hold (:func:`memwal.core.json_doc.load_json`): a document of
#: small objects costs up to some 70 bytes of memory a value, so these keep any one object's
#: parse near 100 MB or under, whatever it holds. A real plan.json is some 200,000 values at
#: 20,000 tables; runs.json some 100 a table; controls.json some 10 a pause and 10 a log entry.
MAX_VALUES = {PLAN: 1_500_000, RUNS: 2_000_000, CONTROLS: 1_000_000}
#: The type of each top-level entry a reader uses; an entry of another type is dropped.
SHAPES: dict[str, dict[str, type]] = {PLAN: {"report": dict, "history": list}, RUNS: {"tables": dict},
                                      CONTROLS: {"pauses": list, "log": list}}
FORMAT = 1


class FleetState:
    """The state folder at ``uri`` (see the module docstring)."""

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None,
                 store: Store | None = None) -> None:
        self.uri = uri.rstrip("/")
        self.store = store or open_store(self.uri, dict(storage_options or {}))

    def __repr__(self) -> str:
        return f"FleetState({self.uri!r})"

    def read_bytes(self, name: str) -> tuple[bytes | None, str | None]:
        """An object's bytes and ETag (None, None: absent)."""
        try:
            return self.store.get_with_etag(name, max_bytes=MAX_BYTES.get(name))
        except NotFoundError:
            return None, None

    def read(self, name: str) -> tuple[dict[str, Any], str | None]:
        """An object as a document (empty when absent or unreadable) and its ETag."""
        try:
            data, etag = self.read_bytes(name)
        except (MemWalError, OSError) as exc:
            log.warning("fleet state %s/%s: not read (%s): taken as empty", self.uri, name, exc)
            return {}, None
        if data is None:
            return {}, None
        return parse(data, f"{self.uri}/{name}", max_values=MAX_VALUES.get(name, 1_000_000),
                     shape=SHAPES.get(name)), etag

    def write_bytes(self, name: str, data: bytes, etag: str | None = None) -> str:
        """Write an object: created (absent before), or swapped for the one read with ``etag``.
        A lost race raises :class:`~memwal.errors.PreconditionFailedError`."""
        if etag is None:
            return self.store.put(name, data)
        return self.store.put_if_match(name, data, etag)

    def write(self, name: str, doc: Mapping[str, Any]) -> str:
        """Write a document whole (for objects with one writer at a time: the cache, the plan)."""
        return self.store.put(name, dump(doc))

    def update(self, name: str, change: Callable[[dict[str, Any]], dict[str, Any]], *,
               read: tuple[dict[str, Any], str | None] | None = None) -> dict[str, Any]:
        """Read, change and write back an object by compare-and-swap, redone after a lost race
        (the one retry primitive: :func:`memwal.core.retry.after_conflict`); the new document.
        ``read``: the document and ETag :meth:`read` gave the caller a moment ago, used by the
        first attempt instead of a second GET (a plan reads ``plan.json`` once, issue 64); the
        compare-and-swap makes a stale one a lost race, redone from a fresh read."""
        from memwal.core.retry import after_conflict

        def attempt(n: int) -> dict[str, Any]:
            doc, etag = read if read is not None and n == 1 else self.read(name)
            new = change(dict(doc))
            new["format"] = FORMAT
            data = dump(new)
            if etag is None:
                self.store.put_if_absent(name, data)
            else:
                self.store.put_if_match(name, data, etag)
            return new

        return after_conflict(attempt, what=f"fleet state {self.uri}/{name}")


def dump(doc: Mapping[str, Any]) -> bytes:
    return json.dumps({**doc, "format": FORMAT}, separators=(",", ":"), default=str).encode()


def parse(data: bytes, where: str, *, max_values: int = 1_000_000,
          shape: Mapping[str, type] | None = None) -> dict[str, Any]:
    """A stored document (a mapping of our format), or empty with a warning; an entry whose
    type is not the one ``shape`` gives it is dropped, with a warning naming it."""
    try:
        doc = load_json(data, max_values=max_values)
    except JsonDocError as exc:
        log.warning("fleet state %s: %s: taken as empty", where, exc)
        return {}
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        log.warning("fleet state %s: not a document of format %d: taken as empty", where, FORMAT)
        return {}
    for key, kind in (shape or {}).items():
        if key in doc and doc[key] is not None and not isinstance(doc[key], kind):
            log.warning("fleet state %s: %s is not a %s: dropped", where, key, "mapping" if kind is dict else "list")
            del doc[key]
    return doc


def object_at(location: str, storage_options: Mapping[str, str] | None = None) -> tuple[Store, str]:
    """The store and key of one object named by a path or URI (``--cache s3://b/fleet/cache.json``):
    its folder's store, and its name in it."""
    import os

    if "://" not in location:
        location = os.path.abspath(location)
    folder, _, name = location.rstrip("/").rpartition("/")
    if not name or not folder or folder.endswith(":/"):
        from memwal.errors import BadInputError

        raise BadInputError(f"{location}: expected a file path or a URI of an object (folder/name)")
    return open_store(folder, dict(storage_options or {})), name


__all__ = ["CACHE", "CONTROLS", "PLAN", "RUNS", "FleetState", "dump", "object_at", "parse"]
