"""Protobuf messages of the MemWAL formats, generated from ``proto/`` (``make proto``; a test fails when stale)."""
