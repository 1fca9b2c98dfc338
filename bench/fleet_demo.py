"""A demo fleet: many tables in a handful of sources, in the states an operator meets.

Writing a thousand tables with ``ShardWriter`` takes a quarter of an hour, so a few pristine
tables are written (pylance's writer, as in :mod:`memwal.demo`), each brought to one state, and
copied (file times kept, as ``cp -p`` keeps them) into the fleet's folders:

- ``backlog``: generations flushed, none merged (behind);
- ``heavy``: twelve generations per shard (behind, and past an 8-generation service level);
- ``merged``: merged and compacted a moment ago, what readers list rolled up by GC, whose
  deletions the reader grace period and version expiry do not yet allow (waiting);
- ``idle``: merged, compacted and collected (nothing owed).

The fleet page's test (``tests/integration/test_fleet_page.py``) and its screenshot
(``docs/fleet_page_demo.py``) plan such a fleet.
"""

from __future__ import annotations

import shutil
from pathlib import Path

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


__all__ = ["MIX", "build_demo_fleet"]
