"""The shard-manifest versions memwal's GC wrote lately, per shard: how ``memwal status`` tells a
writer's last write from GC's own (issue 64: GC's drain showed as the writer's "last write").

``memwal status`` lists no WAL and reads only each shard's latest manifest; a compactor's drain or
rollup writes a manifest version as a writer's flush does. So each GC run that wrote one leaves
the last :data:`COMPACTIONS_KEPT` of them per shard in ``_mem_wal/_jobs/gc-compactions.json``.
A view's cache: no decision reads it, and anything malformed in it is left unused (logged).

It used to be part of the retained-progress digest (:mod:`memwal.table.progress_digest`), which
made every GC run that rolled something up write the digest, the merge progress of every version
the retention keeps (1,400 versions, 226 KB at minute 27 beside a pylance writer): a follower's
listing pass rolls up every few seconds, and writing the digest was 9% of its busy time. A
listing pass now writes this small document; the digest is the whole run's.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from typing import Any

from memwal.errors import MemWalError
from memwal.store import Store
from memwal.table.naming import JOBS_DIR
from memwal.table.progress_digest import load_cache

log = logging.getLogger(__name__)

COMPACTIONS_KEY = f"{JOBS_DIR}/gc-compactions.json"
FORMAT = 1
#: GC's own shard-manifest versions remembered per shard (a writer flushes between GC runs).
COMPACTIONS_KEPT = 16

Compactions = dict[str, tuple[int, ...]]

#: What the same bytes decoded to, per table (a follower's status and lag read it after each job).
_DECODED: OrderedDict[str, tuple[bytes, Any]] = OrderedDict()


def load_compactions(store: Store) -> Compactions:
    """Per shard, the manifest versions GC wrote lately (empty when none are recorded, or the
    record is unusable)."""
    return load_cache(store, COMPACTIONS_KEY, _decode, {}, memo=_DECODED)


def record_compactions(store: Store, written: dict[str, int]) -> None:
    """Add the versions a GC run just ``written`` (``{shard: version}``) to the record. Never
    raises: the run has done its work. Two runs that race leave one's versions (an atomic put
    each): a status then names one of GC's versions as the writer's, until the next run."""
    if not written:
        return
    out = dict(load_compactions(store))
    for shard, version in written.items():
        out[shard] = tuple(sorted({*out.get(shard, ()), version}))[-COMPACTIONS_KEPT:]
    doc = {"format": FORMAT, "compactions": {s: list(v) for s, v in sorted(out.items())}}
    try:
        store.put(COMPACTIONS_KEY, json.dumps(doc, separators=(",", ":")).encode())
    except (MemWalError, OSError) as exc:
        log.warning("could not write %s: %s", store.uri_for(COMPACTIONS_KEY), exc)


def _decode(doc: Any) -> Compactions:
    """The record of a parsed document (untrusted JSON: a malformed entry is left out)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("compactions"), dict):
        raise ValueError("not a record of GC's compactions")
    return {s: tuple(v for v in vs if type(v) is int and v >= 0)[-COMPACTIONS_KEPT:]
            for s, vs in doc["compactions"].items() if isinstance(s, str) and isinstance(vs, list)}


__all__ = ["COMPACTIONS_KEPT", "COMPACTIONS_KEY", "Compactions", "load_compactions", "record_compactions"]
