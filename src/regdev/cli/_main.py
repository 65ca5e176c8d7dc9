"""The ``regdev`` command line.

Exit statuses are per command, declared once in :data:`~regdev.cli._common.EXIT_STATUS`
(each command's ``--help`` epilog, and docs/cli.md). For all of them 2 is a usage,
file or device-connection error, with a one-line message on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import TextIO, cast

from .._version import __version__
from ..core._text import display_text
from . import (
    _agent,
    _audit,
    _bench,
    _call,
    _compile,
    _demo,
    _eval,
    _firmware_sim,
    _map,
    _replay,
    _report,
    _serve,
    _shell,
    _tools,
)
from ._common import UsageError, exit_status_epilog
from ._output import Output, output_failed

__all__ = ["build_parser", "main"]

#: The commands, in the order ``regdev --help`` lists them: each module adds its parser.
COMMANDS = (_demo, _replay, _call, _shell, _firmware_sim, _map, _tools, _serve, _agent,
            _eval, _audit, _report, _compile, _bench)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for ``regdev`` and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="regdev",
        description=(
            "A validating tool backend for register devices (described by a register "
            "map; by default 16 registers of 8 bits) driven by "
            "language-model agents. Every tool call is parsed, validated, authorized and only "
            "then executed; a refusal names one stage and one code (see docs/errors.md). "
            "Every call is recorded in an audit log (see docs/safety.md)."
        ),
        epilog="Exit status: 0 ok; 1 the command ran, but not as hoped (call, shell: a call "
               "refused; replay, demo: a verdict other than the one expected; bench: a peer "
               "disagreed), or its output could not be written; 2 a usage, file or "
               "device-connection error; 130 interrupted (Ctrl-C). Each command's --help "
               "says what its statuses mean; all in docs/cli.md.",
    )
    parser.add_argument("--version", action="version", version=f"regdev {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    for name, command_parser in sub.choices.items():  # the exit statuses, from one table
        command_parser.epilog = exit_status_epilog(name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``regdev`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    if sys.stderr is None:  # file descriptor 2 closed (`2>&-`): errors go nowhere, not to stdout
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 -- for the life of the process
    parser = build_parser()
    out = Output(sys.stdout)
    try:
        with contextlib.redirect_stdout(out):  # --help and --version write there, then exit 0
            args = parser.parse_args(argv)
    except SystemExit as stop:
        if stop.code != 0:  # a usage error: argparse wrote it on stderr
            raise
        with contextlib.suppress(OSError):  # argparse ignores a failed write: it is kept
            out.flush()
        if out.failure is None:
            raise
        words = sys.argv[1:] if argv is None else list(argv)
        return output_failed(out.failure, next((w for w in words if w[:1] != "-"), None))
    try:
        status: int = args.func(args, cast(TextIO, out))
        out.flush()  # here, not at exit: a write that fails is this command's failure
    except UsageError as error:
        print(display_text(f"regdev {args.command}: error: {error}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"regdev {args.command}: interrupted", file=sys.stderr)
        return 130
    except OSError as error:
        if error is not out.failure:
            raise
        return output_failed(error, args.command)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
