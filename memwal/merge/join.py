"""How a merge pass joins its change set to the base: through the key index, or a scan.

Lance's ``merge_insert`` finds the base rows of the change set's keys either through a
scalar index on the key (``use_index(True)``: one index lookup and one random ``take`` per
key) or by scanning the key column of the whole base and hash-joining (``use_index(False)``).
The first costs per key, the second per base row, so neither is right for every batch. The
rule (:func:`use_key_index`): the index up to :data:`INDEX_JOIN_MIN_KEYS` keys, or while each
key has at least :data:`INDEX_JOIN_BASE_ROWS_PER_KEY` base rows; the scan otherwise, and for
a pass with no key at all (the marker alone). The crossover and its figures:
docs/decisions/0004-key-index-or-scan-join.md.

The choice changes speed only: both paths find the same rows, the progress marker
(``mark_sstables_as_compacted``) and the bound delete pass (``execute_uncommitted`` then a
commit against the read version) behave the same with either (tests/integration/test_cost_follows_work.py).
"""

from __future__ import annotations

from lance import LanceDataset
from lance.dataset import MergeInsertBuilder

#: Change sets up to this many keys always join through the key index (when there is one).
INDEX_JOIN_MIN_KEYS = 100
#: Above the minimum, the index is used while each change key has at least this many base
#: rows (333 keys at 1M rows, 1,333 at 4M, 5,333 at 16M): the measured crossover (0004).
INDEX_JOIN_BASE_ROWS_PER_KEY = 3_000


def use_key_index(keys: int, base_rows: int) -> bool:
    """Whether a pass of ``keys`` change keys against ``base_rows`` rows should join through
    the key index (True) or scan the base (False). With no key at all (the marker alone) the
    scan join returns at once, while the index join still reads the fragments the index does
    not cover (docs/decisions/0004-key-index-or-scan-join.md)."""
    if keys == 0:
        return False
    return keys <= INDEX_JOIN_MIN_KEYS or keys * INDEX_JOIN_BASE_ROWS_PER_KEY <= base_rows


def join_builder(ds: LanceDataset, primary_key: list[str], keys: int) -> MergeInsertBuilder:
    """``ds.merge_insert(primary_key)`` with the join chosen by :func:`use_key_index`.

    ``count_rows()`` without a filter sums the fragments' row counts from the manifest
    already loaded (no data is read)."""
    return ds.merge_insert(primary_key).use_index(use_key_index(keys, ds.count_rows()))
