"""``spark-submit jobs/compact.py TABLE [--target-rows-per-fragment N] [--max-fragments N] [--json]``.

Storage credentials go in ``--storage-options-file PATH`` (mode 0600), not on the command line.
"""

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from jobs._entry import run

    raise SystemExit(run("compact"))
