"""What every command shares: common options, output, exit codes, opening the table."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from memwal.core import validate
from memwal.core.secrets import redact_pair
from memwal.core.text import one_line, terminal_safe
from memwal.errors import BadInputError

if TYPE_CHECKING:
    from memwal.table import Table

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_LEASE = 0, 1, 2, 3
#: The exit codes in one sentence: ``memwal --help`` prints it, and the README says it word for word.
EXIT_CODES = ("Exit codes: 0 done, 1 failed, 2 bad usage or bad input (nothing written), 3 stopped by another "
              "party: a lease another live job holds, a lost lease, a race lost to concurrent writers after "
              "retries, or an operator's cancel.")
#: What ``add_subparsers`` returns (generic only to the type checker).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class Parser(argparse.ArgumentParser):
    """argparse already exits 2 on bad usage; we make the message one clear line that names
    the command and where its usage is (not the usage itself: six lines around one error)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        command = self.prog.removeprefix("memwal").strip()
        where = f"{command}: " if command else ""
        print(f"memwal: error: {where}{one_line(message)} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        """A command's own arguments: one it does not know is its error (naming its ``--help``, and
        the option meant when one is close), not the top parser's (``see memwal --help``)."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None and self.prog != "memwal":
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._meant(extras)}")
        return parsed, extras

    def _meant(self, extras: Sequence[str]) -> str:
        options = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        for extra in extras:
            if extra.startswith("--"):
                close = difflib.get_close_matches(extra.split("=", 1)[0], options, n=1, cutoff=0.75)
                if close:
                    return f" (did you mean {close[0]}?)"
        return ""


def parse_storage_options(pairs: Sequence[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInputError(f"--storage-option {redact_pair(pair)!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def assignments(items: list[str], shape: str) -> dict[str, str]:
    """Repeated ``--set KEY=VALUE`` values as a dict, each side stripped; BadInputError naming
    the item and the ``shape`` expected (``COLUMN=OPERATOR``) for one without both sides."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise BadInputError(f"--set {item!r}: expected {shape}")
        out[key.strip()] = value.strip()
    return out


def common_options(*, json_flag: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--storage-option",
        action="append",
        metavar="KEY=VALUE",
        default=[],
        help="Lance storage option (repeatable), e.g. aws_endpoint=http://127.0.0.1:9000",
    )
    p.add_argument(  # credentials stay off the command line, which every local user can read
        "--storage-options-file",
        metavar="PATH",
        help="JSON object of storage options (keep it mode 0600); --storage-option overrides its keys",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    if json_flag:
        p.add_argument("--json", action="store_true", help="print the result as one JSON document on stdout")
        p.add_argument(
            "--result-file",
            metavar="PATH",
            help="also write the JSON result to PATH (spark-submit merges stderr into stdout)",
        )
    return p


def table_command(sub: Subparsers, name: str, help: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, parents=[common_options()], help=help, description=help)
    p.add_argument("table", metavar="TABLE", help="local path or s3://bucket/prefix of the base table")
    return p


def _converter(check: Callable[[str, Any], Any], doc: str) -> Callable[[str], Any]:
    """An argparse ``type=`` from a :mod:`memwal.core.validate` check (the one rule for each kind
    of value, shared with the Python API); argparse names the option in its message."""

    def convert(text: str) -> Any:
        try:
            return check("value", text)
        except BadInputError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("value: ")) from None

    convert.__name__ = check.__name__
    convert.__doc__ = doc
    return convert


def argparse_type(check: Callable[[str, Any], object]) -> Callable[[str], object]:
    """The argparse ``type=`` of a :mod:`memwal.core.validate` check (used by memwal.actions.options)."""
    return _converter(check, (check.__doc__ or "").split("\n")[0])


#: For the commands' own counts (--limit, --concurrency ...); job options get theirs from memwal.actions.options.
positive_int = argparse_type(validate.positive_int)


def check_output_file(flag: str, path: str) -> None:
    """Refuse an output file (``--result-file``, ``--html``) that could not be written, before
    the command reads or changes anything: exit 2 naming the flag and the path."""
    full = os.path.abspath(path)
    folder = os.path.dirname(full)
    if os.path.islink(full):  # written by replacing the path (write_chunks), never through a link
        raise BadInputError(f"{flag} {path}: is a symbolic link (never written through)")
    if os.path.isdir(full):
        raise BadInputError(f"{flag} {path}: is a folder")
    if not os.path.isdir(folder):
        raise BadInputError(f"{flag} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(full) and not os.access(full, os.W_OK)):
        raise BadInputError(f"{flag} {path}: not writable")


def check_result_file(path: str | None) -> None:
    """Refuse a ``--result-file`` that could not be written, before the job changes anything
    (a result lost after a committed merge is worse than a job that never started)."""
    if path:
        check_output_file("--result-file", path)


def write_failure(path: str | None, error: str, exit_code: int, *, cancelled: bool = False) -> None:
    """Record a failed command in its ``--result-file`` (already checked writable) as
    ``{"failure": {"error": ..., "exit_code": ..., "cancelled": ...}}``: a launcher (the Airflow
    operator around spark-submit) learns why the job failed from the file, never from log text
    (``cancelled``: an operator's cancel stopped it, no failure to retry)."""
    if not path:
        return
    from memwal.core.files import write_chunks

    try:
        failure = {"error": error, "exit_code": exit_code, "cancelled": cancelled}
        write_chunks(path, [json.dumps({"failure": failure}, indent=2)])
    except OSError:  # the failure itself is on stderr; a result file that vanished adds nothing
        pass


def open_table_arg(args: argparse.Namespace) -> Table:
    from memwal.table import open_table  # Lance loads only when a command runs, not for --help

    return open_table(args.table, args.storage_options)


def emit(args: argparse.Namespace, doc: dict[str, Any], human: Callable[[], str]) -> None:
    """The JSON document on stdout with ``--json`` (and to ``--result-file``), else text."""
    if getattr(args, "result_file", None):
        from memwal.core.files import write_chunks

        write_chunks(args.result_file, [json.dumps(doc, indent=2, default=str)])  # replaces a link, never follows
    if getattr(args, "json", False):
        json.dump(doc, sys.stdout, indent=2, default=str)  # escapes every control character
        sys.stdout.write("\n")
    else:
        print(terminal_safe(human()))  # values from storage print, they never act on the terminal
