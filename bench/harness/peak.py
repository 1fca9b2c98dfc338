"""Run one command and report its own figures: ``python -m bench.peak REPORT -- ARGV...``.

A bench that starts a command from its own (large) process cannot take the command's peak
memory from ``wait4``: Linux keeps ``ru_maxrss`` across ``execve``, so a child started by a
500 MB harness reports at least 500 MB whatever it used (see ``bench/workers.py``). This small
process forks the command instead: the command's rusage starts from here. It writes the
command's CPU seconds, peak RSS and exit code to REPORT as JSON and exits with the command's
code; standard input and output pass through untouched.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> int:
    report, sep, *argv = sys.argv[1:]
    if sep != "--" or not argv:
        print("usage: python -m bench.peak REPORT -- ARGV...", file=sys.stderr)
        return 2
    pid = os.fork()
    if pid == 0:  # the command
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    Path(report).write_text(json.dumps({"cpu_seconds": usage.ru_utime + usage.ru_stime,
                                        "peak_rss_mb": usage.ru_maxrss / 1024, "rc": rc}))
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
