"""How a merge pass joins its change set to the base: through the key index, or a scan.

Lance's ``merge_insert`` finds the base rows of the change set's keys either through a
scalar index on the key (``use_index(True)``, its default when one exists: one index lookup
and one random ``take`` per key) or by scanning the key column of the whole base and
hash-joining (``use_index(False)``). The first costs per key, the second per base row, so
neither is right for every batch. Measured with ``bench/growth.py`` (2 cores, BTREE on an
int64 key, ``execute_uncommitted`` of the upsert pass, medians, seconds, index / scan):

==========  =============  =============  =============  =============  ==============
base rows   100 keys       300 keys       1,000 keys     3,000 keys     10,000 keys
==========  =============  =============  =============  =============  ==============
1M          0.006 / 0.016  0.013 / 0.012  0.030 / 0.017  0.053 / 0.039  0.091 / 0.038
4M          0.015 / 0.073  0.023 / 0.045  0.043 / 0.048  0.150 / 0.075  0.192 / 0.095
16M         0.025 / 0.293  0.029 / 0.218  0.058 / 0.222  0.202 / 0.238  0.367 / 0.300
==========  =============  =============  =============  =============  ==============

At about 181,000 keys the index took 0.90 / 3.7 s against a scan's 0.20 / 0.65 s (1M / 4M),
and with Lance's default join a merge of 200,000 keys into 16M rows took 3x the scan
floor. The crossover grows in proportion to the base (about 300 keys at 1M, 1,200 at 4M,
5,000 at 16M: one key per ~3,000 base rows), so that is the rule, with a floor of
:data:`INDEX_JOIN_MIN_KEYS` below which the index always wins. The delete pass crosses
later (one delete key per ~500-1,000 rows); the one rule errs towards the scan there, which
cost at most ~10-20 ms in the sweep.

The choice changes speed only: both paths find the same rows, the progress marker
(``mark_sstables_as_compacted``) and the bound delete pass (``execute_uncommitted`` then a
commit against the read version) behave the same with either (tests/test_cost_follows_work.py).
"""

from __future__ import annotations

from lance import LanceDataset
from lance.dataset import MergeInsertBuilder

#: Change sets up to this many keys always join through the key index (when there is one).
INDEX_JOIN_MIN_KEYS = 100
#: Above the minimum, the index is used while each change key has at least this many base
#: rows (333 keys at 1M rows, 1,333 at 4M, 5,333 at 16M): the measured crossover.
INDEX_JOIN_BASE_ROWS_PER_KEY = 3_000


def use_key_index(keys: int, base_rows: int) -> bool:
    """Whether a pass of ``keys`` change keys against ``base_rows`` rows should join through
    the key index (True) or scan the base (False)."""
    return keys <= INDEX_JOIN_MIN_KEYS or keys * INDEX_JOIN_BASE_ROWS_PER_KEY <= base_rows


def join_builder(ds: LanceDataset, primary_key: list[str], keys: int) -> MergeInsertBuilder:
    """``ds.merge_insert(primary_key)`` with the join chosen by :func:`use_key_index`.

    ``count_rows()`` without a filter sums the fragments' row counts from the manifest
    already loaded (no data is read)."""
    return ds.merge_insert(primary_key).use_index(use_key_index(keys, ds.count_rows()))
