"""A merge's commits, bounded by decoded bytes: a large backlog is merged in several commits.

A driver that computes the net change set in-process (the local engine) holds a batch's rows
decoded, some three times over at its peak (the rows read, each key's newest version, Lance's
``merge_insert``). Lance compresses repetitive rows some 600x (issue 61), so neither a
generation's bytes on disk nor a figure read from storage can size that memory (invariant 13):
20 generations of 50 rows of 1 MiB each, 96 KB a folder on disk, took a default merge to 2.8 GB
(issue 83). Here each generation's decoded size is measured from Lance itself: its row count
(Lance's fragment metadata: what Lance decodes, not the shard manifest's ``physical_rows``)
times the width of a row (fixed-width columns from the schema; the others from a sample of rows
spread over the generation, decoded). The shard manifest's ``in_memory_bytes`` is never read
here: a forged small one would size nothing, a forged large one cannot split a merge into a
commit per generation.

:func:`split_plan` cuts a plan into batches of at most the bound each, in generation order
(round-robin over shards, each shard's generations gap-free, as the planner's own budgets take
them); each batch commits its data and its own progress marker (invariant 1), so a run stopped
between two leaves a table as a bounded run would. A generation larger than the bound alone
still merges, alone in its batch (a generation is never split across commits: its marker
would claim rows the commit did not hold). A plan that finishes an unfinished merge (its data
already in the base, or an intent's floor to reach) is never split: it commits as planned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import lance
import numpy as np
import pyarrow as pa

from memwal.core.pool import parallel_map
from memwal.merge import intents
from memwal.merge.inputs import OPEN_THREADS
from memwal.merge.model import GenerationRef, MergePlan, ShardMergePlan
from memwal.merge.read import reading
from memwal.table import Table
from memwal.table.generations import open_generation

#: Decoded bytes of the generations one merge commit reads, by default. The local engine's peak
#: is about three times its batch over a baseline of some 300 MB (measured on rows of 1 MiB: 100 MiB
#: a batch, 650 MB; 150 MiB, 790 MB; 200 MiB, 860 MB), so 128 MiB keeps it well under 1 GB; a
#: batch of small rows (200,000 changed keys of 16 bytes: some 7 MiB) stays one commit, as before.
DEFAULT_MAX_DECODED_BYTES = 128 << 20

#: Rows decoded to measure a generation's row width (spread over it: the first rows alone could
#: be the narrow ones).
SAMPLE_ROWS = 8

#: What the merge adds to every row read: row address, generation, shard code, tombstone.
INTERNAL_ROW_BYTES = 8 + 8 + 4 + 1


def fixed_width_bytes(t: pa.DataType) -> int | None:
    """Bytes a value of ``t`` decodes to, when the type alone says (None: variable width)."""
    try:
        bits = int(t.bit_width)
    except ValueError:
        return None
    return max(1, math.ceil(bits / 8))


def decoded_size(ds: lance.LanceDataset) -> int:
    """The decoded bytes of a generation's rows as the merge reads them: Lance's row count
    times the row width (fixed-width columns by type, the others from :data:`SAMPLE_ROWS` rows
    spread over the generation, decoded)."""
    rows = sum(int(f.metadata.physical_rows or 0) for f in ds.get_fragments())
    if rows == 0:
        return 0
    width, variable = INTERNAL_ROW_BYTES, []
    for f in ds.schema:
        fixed = fixed_width_bytes(f.type)
        if fixed is None:
            variable.append(f.name)
        else:
            width += fixed
    if variable:
        visible = int(ds.count_rows())  # take counts rows a deletion file hides out
        positions = np.unique(np.linspace(0, max(0, visible - 1), min(visible, SAMPLE_ROWS)).astype(np.int64))
        sample = ds.take(pa.array(positions), columns=variable)
        width += math.ceil(int(sample.nbytes) / max(1, sample.num_rows))
    return rows * width


def decoded_sizes(refs: Sequence[GenerationRef], storage_options: dict[str, str] | None) -> list[int]:
    """:func:`decoded_size` of each of ``refs``, measured on a thread pool, in order."""

    def measure(ref: GenerationRef) -> int:
        with reading(ref):  # a generation that fails here stops its shard, as a failed read does
            return decoded_size(open_generation(ref.uri, storage_options))

    return parallel_map(measure, list(refs), OPEN_THREADS, chunks_per_thread=4)


def _batches(plan: MergePlan, size: dict[tuple[str, int], int], bound: int) -> list[list[list[GenerationRef]]]:
    """Each batch's generations per shard (in ``plan.shards`` order): round-robin by depth, a
    shard stopping in a batch at its first generation that does not fit, the first generation
    of a batch always taken."""
    queues = [list(s.generations) for s in plan.shards]
    out: list[list[list[GenerationRef]]] = []
    while any(queues):
        taken: list[list[GenerationRef]] = [[] for _ in queues]
        stopped = [not q for q in queues]
        total = 0
        while not all(stopped):
            for i, q in enumerate(queues):
                if stopped[i]:
                    continue
                ref = q[0]
                cost = size[(ref.shard_id, ref.generation)]
                if total and total + cost > bound:
                    stopped[i] = True
                    continue
                taken[i].append(q.pop(0))
                total += cost
                stopped[i] = not q
        out.append(taken)
    return out


def split_plan(table: Table, plan: MergePlan, bound: int | None) -> list[MergePlan]:
    """``plan`` as batches of at most ``bound`` decoded bytes each (see the module docstring), in
    the order they commit; ``[plan]`` itself when it fits, when ``bound`` is None, or when it
    finishes an unfinished merge. Each batch's ``compacted_generation`` is what the batches
    before it merged; its ``read_version`` is the plan's, to be moved by the caller to the
    version the previous batch committed. Its ``blocked`` is empty: the plan's are reported once.
    """
    if bound is None or len(plan.generations) < 2 or plan.applied or any(s.applied_generation for s in plan.shards):
        return [plan]
    refs = plan.generations
    sizes = decoded_sizes(refs, table.storage_options)
    if sum(sizes) <= bound:
        return [plan]
    floors = intents.floors(intents.read_intents(table.store), table.manifest())
    if any(s.shard_id in floors for s in plan.shards):
        return [plan]
    size = {(r.shard_id, r.generation): n for r, n in zip(refs, sizes, strict=True)}
    compacted = {s.shard_id: s.compacted_generation for s in plan.shards}
    out: list[MergePlan] = []
    for taken in _batches(plan, size, bound):
        shards = []
        for s, gens in zip(plan.shards, taken, strict=True):
            if gens:
                shards.append(ShardMergePlan(s.shard_id, compacted[s.shard_id], tuple(gens)))
                compacted[s.shard_id] = gens[-1].generation
        out.append(replace(plan, shards=tuple(shards), blocked=()))
    return out


__all__ = ["DEFAULT_MAX_DECODED_BYTES", "decoded_size", "decoded_sizes", "fixed_width_bytes", "split_plan"]
