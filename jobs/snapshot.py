"""``spark-submit jobs/snapshot.py TABLE [--dry-run] [--json]``: the shard snapshot refresh on Spark."""

from memwal.spark._entry import run

if __name__ == "__main__":
    raise SystemExit(run("snapshot"))
