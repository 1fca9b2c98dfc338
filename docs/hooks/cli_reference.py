"""MkDocs hook: the CLI reference page gets every command's ``--help``, rendered from the CLI's own
parser (``memwal.cli.main.build_parser``) at build time, so the page cannot fall behind the code.

The page ``reference/cli.md`` holds the marker ``<!-- memwal-cli-reference -->``; this hook puts a
section per command there (sub-commands such as ``checkpoint create`` nested under theirs).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

MARKER = "<!-- memwal-cli-reference -->"
WIDTH = "100"  # argparse wraps to $COLUMNS: one width, whatever terminal builds the site


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _sections(parser: argparse.ArgumentParser, path: list[str], level: int) -> list[str]:
    out: list[str] = []
    for name, sub in _subcommands(parser).items():
        full = [*path, name]
        out += [f"{'#' * level} `{' '.join(full)}`", "", "```text", sub.format_help().rstrip(), "```", ""]
        out += _sections(sub, full, min(level + 1, 6))
    return out


def render() -> str:
    """The reference as Markdown: ``memwal --help``, then one section per command."""
    os.environ["COLUMNS"] = WIDTH
    from memwal.cli.main import build_parser

    parser = build_parser()
    return "\n".join(["```text", parser.format_help().rstrip(), "```", "", *_sections(parser, ["memwal"], 3)])


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
