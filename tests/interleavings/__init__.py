"""Interleavings: races between jobs, leases and readers, each side held at a named step
(``tests.interleave``: step hooks, manual clocks, barriers), never free threads and sleeps."""
