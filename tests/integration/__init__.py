"""Integration tests: the jobs through the paths users take, against the real components that
run here (Lance, Spark local and standalone, Airflow, S3 on moto, Azure on Azurite, Chromium)."""
