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
