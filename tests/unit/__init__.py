"""Unit tests: one module's contract at a time, against real files pylance writes (no Spark,
no Airflow, no store server)."""
