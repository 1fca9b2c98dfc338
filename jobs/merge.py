"""``spark-submit jobs/merge.py TABLE [--shard ID]... [--max-generations N] [--json]``."""

from memwal.spark._entry import run

if __name__ == "__main__":
    raise SystemExit(run("merge"))
