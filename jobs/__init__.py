"""Spark engine and ``spark-submit`` entry points (DESIGN.md section 2: core + pyspark only)."""
