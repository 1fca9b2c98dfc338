"""How a merge pass joins its change set to the base: through the key index, or a scan.

Lance's ``merge_insert`` finds the base rows of the change set's keys either through a
scalar index on the key (``use_index(True)``, its default when one exists: one index lookup
and one random ``take`` per key) or by scanning the key column of the whole base and
hash-joining (``use_index(False)``). The first costs per key, the second per base row, so
neither is right for every batch. Measured with ``bench/growth.py`` (2 cores, BTREE on an
int64 key, ``execute_uncommitted`` of the upsert pass, seconds, index / scan):

==========  ==============  ==============  ==============  ================
base rows   100 keys        1,000 keys      10,000 keys     ~181,000 keys
==========  ==============  ==============  ==============  ================
1M          0.008 / 0.025   0.026 / 0.016   0.071 / 0.035   0.84 / 0.096
4M          --              0.045 / 0.046   0.19 / 0.11     2.09 / 0.29
==========  ==============  ==============  ==============  ================

The index pays only for change sets of a few hundred to a thousand keys, and its cost per
key grows with the base too (random reads over more fragments), so at 200,000 keys into
16M rows the default join made the whole merge 3x the scan floor. The delete pass behaved
alike. The crossover moves up with the base (about 500 keys at 1M, 1,000 at 4M: the scan
grows with the base, the lookups less), so the rule scales the threshold with the square
root of the base and never goes below :data:`INDEX_JOIN_MIN_KEYS`.

The choice changes speed only: both paths find the same rows, the progress marker
(``mark_sstables_as_compacted``) and the bound delete pass (``execute_uncommitted`` then a
commit against the read version) behave the same with either (tests/test_cost_follows_work.py).
"""

from __future__ import annotations

import math

from lance import LanceDataset
from lance.dataset import MergeInsertBuilder

#: Change sets up to this many keys always join through the key index (when there is one).
INDEX_JOIN_MIN_KEYS = 500
#: Above the minimum, the index is used while ``keys <= INDEX_JOIN_SQRT_FACTOR * sqrt(base rows)``
#: (500 keys at 1M rows, 1,000 at 4M, 2,000 at 16M): the measured crossover.
INDEX_JOIN_SQRT_FACTOR = 0.5


def use_key_index(keys: int, base_rows: int) -> bool:
    """Whether a pass of ``keys`` change keys against ``base_rows`` rows should join through
    the key index (True) or scan the base (False)."""
    return keys <= max(INDEX_JOIN_MIN_KEYS, INDEX_JOIN_SQRT_FACTOR * math.sqrt(max(base_rows, 0)))


def join_builder(ds: LanceDataset, primary_key: list[str], keys: int) -> MergeInsertBuilder:
    """``ds.merge_insert(primary_key)`` with the join chosen by :func:`use_key_index`.

    ``count_rows()`` without a filter sums the fragments' row counts from the manifest
    already loaded (no data is read)."""
    return ds.merge_insert(primary_key).use_index(use_key_index(keys, ds.count_rows()))
