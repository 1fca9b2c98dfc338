"""memwal's benchmarks: a few benches by concept on one harness (see bench/README.md).

``python -m bench`` lists them; nothing here imports Lance or memwal, so that the small
launcher of :mod:`bench.harness.peak` stays small.
"""
