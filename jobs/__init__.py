"""Spark engine and ``spark-submit`` entry points: the core plus pyspark only (docs/architecture.md, layers)."""
