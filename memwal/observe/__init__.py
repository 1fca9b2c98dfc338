"""What an operator sees of the jobs while they run: OpenTelemetry metrics (``metrics``), the
SDK set up from the standard ``OTEL_*`` variables (``otel``), and progress events for
displays (``progress``: the plan, then GC shard by shard)."""
