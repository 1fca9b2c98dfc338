"""``spark-submit jobs/catchup.py TABLE [options]``."""

from memwal.spark._entry import run

if __name__ == "__main__":
    raise SystemExit(run("catchup"))
