"""DAG files of memwal-jobs (point Airflow's DAGs folder here, or copy them into yours)."""
