"""``spark-submit jobs/snapshot.py TABLE [--dry-run] [--json]``: the shard snapshot refresh on Spark."""

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from jobs._entry import run

    raise SystemExit(run("snapshot"))
