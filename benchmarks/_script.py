"""What every script in ``benchmarks/`` shares: a parser whose usage errors are one line,
counts bounded to a sensible range, one line (not a traceback) for an optional package that
is not installed, saying how to get it, and what a pytest-benchmark suite or a helper module
says when it is run as a script.

It imports only the standard library and regdev's runtime, so that every script's ``--help``
works in each ``.venv`` the README makes (``scripts/demo``'s has no pytest, pymodbus nor mcp).
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from regdev.bench._noise import MAX_ROUNDS

__all__ = ["BATCH_MS", "INSTALL", "MAX_ROUNDS", "Parser", "count", "helper", "need", "span",
           "suite"]

#: How to get each extra the scripts need, in the project's own commands (pyproject.toml's
#: ``[project.optional-dependencies]``; ``dev`` includes every other extra).
INSTALL = {
    "dev": "scripts/test installs it into .venv (or: .venv/bin/pip install -e '.[dev]')",
    "modbus": ".venv/bin/pip install -e '.[modbus]' (scripts/test installs it too)",
    "mcp": "scripts/serve installs it into .venv (or: .venv/bin/pip install -e '.[mcp]'; "
           "scripts/test installs it too)",
    "otel": ".venv/bin/pip install -e '.[otel]' (scripts/test installs it too)",
    "postgresql": ".venv/bin/pip install -e '.[postgresql]' (scripts/test installs it too)",
}
#: The range of ``--batch-ms`` (the length of one timed batch, in milliseconds).
BATCH_MS = (0.01, 100.0)


class Parser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose usage errors are one line on stderr,
    ``SCRIPT: error: MESSAGE (--help for the usage)``, and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (--help for the usage)\n")


def count(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number in ``low..high``; anything else is refused with
    ``must be a whole number in LOW..HIGH, got 'TEXT'``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be a whole number in {low}..{high}, got {text!r}")
        return value
    return parse


def span(low: float, high: float) -> Callable[[str], float]:
    """An argparse ``type``: a number in ``low..high`` (not nan, not inf); anything else is
    refused with ``must be a number in LOW..HIGH, got 'TEXT'``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not low <= value <= high:  # nan compares false
            raise argparse.ArgumentTypeError(f"must be a number in {low:g}..{high:g}, got {text!r}")
        return value
    return parse


def need(extra: str, *modules: str) -> None:
    """Import ``modules`` (top-level names, e.g. ``"pymodbus"``), or exit with status 2 and
    one line on stderr naming the first that is missing and how to get ``extra`` (a key of
    :data:`INSTALL`). Call it after parsing the arguments, so that ``--help`` needs none."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:
            script = Path(sys.argv[0]).name
            print(f"{script}: needs {error.name or module} (the {extra} extra): "
                  f"{INSTALL[extra]}", file=sys.stderr)
            sys.exit(2)


def suite(path: str, doc: str | None, argv: list[str] | None = None) -> int:
    """What a pytest-benchmark suite (``bench_*.py``) does when run as a script: with
    ``--help``, print how to run it and its docstring, and return 0; otherwise one line on
    stderr saying how to run it, and return 2. Needs nothing beyond the standard library, so
    it works in a venv without pytest."""
    argv = sys.argv[1:] if argv is None else argv
    name = Path(path).name
    command = f"scripts/test benchmarks/{name}"
    if "-h" in argv or "--help" in argv:
        print(f"usage: {command} [PYTEST OPTIONS]")
        print()
        print((doc or "").strip())
        print()
        print(f"A pytest-benchmark suite, not a script: pytest collects and times it. It "
              f"needs pytest and pytest-benchmark (the dev extra): scripts/test installs them "
              f"into .venv and runs pytest with the arguments given. In a venv that has them, "
              f".venv/bin/python -m pytest benchmarks/{name} does the same.")
        return 0
    print(f"{name}: a pytest-benchmark suite, not a script: run it with {command} "
          f"(--help: more)", file=sys.stderr)
    return 2


def helper(path: str, doc: str | None, argv: list[str] | None = None) -> int:
    """What a helper module of the scripts (``_*.py``) does when run: with ``--help``, say
    what it is and return 0; otherwise one line on stderr, and return 2."""
    argv = sys.argv[1:] if argv is None else argv
    name = Path(path).name
    if "-h" in argv or "--help" in argv:
        print(f"usage: {name} is imported by the scripts in benchmarks/, not run "
              "(benchmarks/README.md lists the scripts)")
        print()
        print((doc or "").strip())
        return 0
    print(f"{name}: imported by the scripts in benchmarks/, not run "
          "(benchmarks/README.md lists the scripts)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(helper(__file__, __doc__))


def serve(command: list[str]) -> tuple[subprocess.Popen[str], str]:
    """Start ``command`` (a simulator that prints the port it serves, e.g. a pty's path, as
    its first line of output); the process and that port.

    Raises:
        SystemExit: it printed no port (its error output in the message).
    """
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    if not port:
        raise SystemExit(f"{Path(command[0]).name} printed no port: "
                         f"{process.communicate()[1].strip()}")
    return process, port
