"""The benches' input data, each written by pylance's own ``ShardWriter`` (never forged where a
writer can afford it), kept apart from the benches that time what runs on it:

- :mod:`~bench.data.tables`: the demo workload's tables (base rows, shards, generations), copies;
- :mod:`~bench.data.growth`: the same change set against bases of 1M to 64M rows (numpy-written base);
- :mod:`~bench.data.tiny`: thousands of tiny generations;
- :mod:`~bench.data.forged`: 10,000 merged generations, one real generation copied (GC's input);
- :mod:`~bench.data.fleet`: a lake of small tables, and a demo fleet in every state an operator meets.

Several can be run by hand to build one table (``python -m bench.data.tiny PATH N``).
"""
