"""``regdev shell``: an interactive prompt for engineers, each command a tool call through the
gate."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any, TextIO

from ..agents._shell import run_shell, shell_tools
from ..devices._device import Device
from ..gate._gate import Gate
from ..gate._maptools import map_tools
from ._common import (
    add_gate_options,
    check_stdin,
    device_options,
    open_gate,
    port_device,
    register_map,
)


def cmd_shell(args: argparse.Namespace, out: TextIO) -> int:
    check_stdin()
    interactive = sys.stdin.isatty()
    if interactive:
        import readline  # noqa: F401, PLC0415 - line editing and history for input()
    with contextlib.closing(port_device(args)) as device:
        gate: Gate

        def reset(runner: Device) -> None:  # the gate is made with the tools: looked up late
            gate.reset_device(runner)  # the reset ends the device's idempotency keys

        tools = map_tools(register_map(args), blocks=True)  # readblock, writeblock: any map
        gate, session = open_gate(args, device, shell_tools(reset, tools))
        with gate:
            return run_shell(gate, session, out, where=args.port or "the in-process register "
                             "file", interactive=interactive)


def add_parser(sub: Any) -> None:
    """Add ``regdev shell`` to the subcommands."""
    shell = sub.add_parser(
        "shell", help="an interactive prompt for engineers: read, write, readblock, writeblock, "
                      "dump, identify, reset",
        description="Each command is a tool call through the gate, and its verdict is shown. "
                    "Without --port it drives an in-process register file.")
    device_options(shell)
    add_gate_options(shell)
    shell.set_defaults(func=cmd_shell)
