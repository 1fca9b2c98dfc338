"""Fleets of small tables: the benches' lake, and a demo fleet in the states an operator meets.

**The lake** (:func:`build_lake`): small tables written by pylance's ``ShardWriter`` (:data:`RECIPE`:
300 base rows, a BTREE and an IVF_PQ index, 2 shards, 3 generations of 10 rows per shard, none
merged), built once and reused while its recipe is the same, spread over folders ``p0``, ``p1``, ...
so that the first k folders are a fleet of the k-th size. The fleet benches plan and run it.

**The demo fleet** (:func:`build_demo_fleet`): writing a thousand tables with ``ShardWriter`` takes
a quarter of an hour, so a few pristine tables are written (pylance's writer, as in
:mod:`memwal.demo`), each brought to one state, and copied (file times kept, as ``cp -p`` keeps
them) into the fleet's folders:

- ``backlog``: generations flushed, none merged (behind);
- ``heavy``: twelve generations per shard (behind, and past an 8-generation service level);
- ``merged``: merged and compacted a moment ago, what readers list rolled up by GC, whose
  deletions the reader grace period and version expiry do not yet allow (waiting);
- ``idle``: merged, compacted and collected (nothing owed).

The fleet page's test (``tests/integration/test_fleet_page.py``) and its screenshot
(``docs/fleet_page_demo.py``) plan such a fleet.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from bench.harness.results import log

#: The recipe of the lake's tables (a cached lake is reused only with the same recipe).
RECIPE = {"format": 1, "base_rows": 300, "shards": 2, "generations": 3, "rows_per_generation": 10, "indexes": True}

#: How many of each 20 tables are in each state.
MIX = (("backlog", 6), ("heavy", 2), ("merged", 5), ("idle", 7))


def _pristine(root: Path, shards: int) -> dict[str, Path]:
    import memwal
    from memwal.demo import Workload, create_base_table, write_generations

    out = {}
    for i, (name, gens) in enumerate((("backlog", 3), ("heavy", 12), ("merged", 3), ("idle", 3))):
        wl = Workload(base_rows=120, shards=shards, generations=gens, rows_per_generation=8, seed=40 + i,
                      indexes=False)
        path = root / name
        model = create_base_table(str(path), wl)[1]
        write_generations(str(path), wl, model)
        if name in ("merged", "idle"):
            t = memwal.open(str(path))
            assert t.merge().ok and t.compact().ok and t.snapshot().ok
            if name == "idle":
                assert t.gc(grace_seconds=0, writer_idle_seconds=0, expire_versions=0).ok
            else:
                assert t.gc().ok
        out[name] = path
    return out


def build_demo_fleet(root: str | Path, *, tables: int = 1000, sources: int = 5, shards: int = 2) -> list[str]:
    """``tables`` tables of ``shards`` shards under ``root/<source>/`` (``sources`` folders: the
    fleet's sources), in the :data:`MIX` of states; the sources' URIs. Pristine tables are built
    in ``root/.pristine``."""
    base = Path(root)
    pristine = _pristine(base / ".pristine", shards)
    kinds = [name for name, n in MIX for _ in range(n)]
    folders = [base / f"tenant-{s:02d}" for s in range(sources)]
    for i in range(tables):
        kind = kinds[i % len(kinds)]
        shutil.copytree(pristine[kind], folders[i % sources] / f"{kind}-{i:04d}", symlinks=True)
    return [str(f) for f in folders]


def small_workload(seed: int, *, generations: int | None = None):  # -> Workload
    from memwal.demo import Workload

    r = RECIPE
    return Workload(base_rows=r["base_rows"], shards=r["shards"], rows_per_generation=r["rows_per_generation"],
                    generations=r["generations"] if generations is None else generations, indexes=r["indexes"],
                    seed=seed)


def table_name(i: int) -> str:
    return f"t{i:04d}"


def parts_of(sizes: list[int]) -> list[tuple[str, range]]:
    """The folders of the lake and the table numbers each holds (``p0``: the first size, ...)."""
    out, start = [], 0
    for k, size in enumerate(sizes):
        out.append((f"p{k}", range(start, size)))
        start = size
    return out


def build_lake(lake: Path, sizes: list[int]) -> dict[str, Any]:
    """The lake (see the module docstring), built once: a lake with the same recipe is reused."""
    from memwal.demo import create_base_table, write_generations

    stamp = lake / "built.json"
    recipe = {**RECIPE, "sizes": sizes}
    if stamp.exists() and json.loads(stamp.read_text()).get("recipe") == recipe:
        return {**json.loads(stamp.read_text()), "reused": True}
    shutil.rmtree(lake, ignore_errors=True)
    t0 = time.perf_counter()
    for part, numbers in parts_of(sizes):
        log(f"building {len(numbers)} tables in {part}", "fleet")
        for i in numbers:
            path = str(lake / part / table_name(i))
            wl = small_workload(i)
            _, model = create_base_table(path, wl)
            write_generations(path, wl, model)
    files = sum(len(fs) for _, _, fs in os.walk(lake))
    doc = {"recipe": recipe, "tables": sizes[-1], "files": files, "build_seconds": round(time.perf_counter() - t0, 1)}
    stamp.write_text(json.dumps(doc))
    return {**doc, "reused": False}


__all__ = ["MIX", "RECIPE", "build_demo_fleet", "build_lake", "parts_of", "small_workload", "table_name"]
