"""The exit codes are worded once (``memwal.cli.commands.common.EXIT_CODES``): ``memwal --help``
prints that sentence, and the README says it word for word."""

from __future__ import annotations

import re

from memwal.cli.commands.common import EXIT_CODES
from memwal.cli.main import build_parser
from tests.helpers import ROOT


def test_the_readme_and_the_help_word_the_exit_codes_alike():
    def words(text: str) -> str:
        return re.sub(r"\s+", " ", text)

    assert EXIT_CODES in words((ROOT / "README.md").read_text())
    assert EXIT_CODES in words(build_parser().format_help())
    assert "3 stopped by another party" in EXIT_CODES and "cancel" in EXIT_CODES


def test_the_cycle_table_keeps_its_columns_after_a_cancelled_row():
    """``memwal cycle``'s table: job, status and time in columns as wide as the widest status,
    so a ``cancelled`` row (issue 64) or a ``not-run`` one moves no column of the others."""
    from memwal.cli.commands.cycle import render
    from memwal.cycle import CycleResult, JobOutcome, JobStatus

    jobs = (JobOutcome("/t", "merge", JobStatus.DONE, 0.2, "v6: 6 generations"),
            JobOutcome("/t", "catchup", JobStatus.CANCELLED, 9.7, "cancelled by ops: test"),
            JobOutcome("/t", "compact", JobStatus.NOT_RUN, 0.0, "not run: cancelled by ops: test"),
            JobOutcome("/t", "gc", JobStatus.WAITING, 1.25, "0 deleted, 5 blocked"))
    lines = render(CycleResult("/t", jobs)).splitlines()[1:]
    starts = {line.index(j.summary) for line, j in zip(lines, jobs, strict=True)}
    assert len(starts) == 1, lines  # every summary starts in the same column
    assert [line.split()[2] for line in lines if "not-run" not in line] == ["0.2s", "9.7s", "1.2s"]
