"""``regdev call``: one raw call through the gate, on a fresh in-process device or the device
at ``--port``."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from pathlib import Path
from typing import Any, TextIO

from ..devices._device import Device
from ._common import (
    add_gate_options,
    check_stdin,
    check_tool_choice,
    device_options,
    dialect_options,
    json_line,
    map_tools_of,
    open_gate,
    port_device,
    tell,
)


def cmd_call(args: argparse.Namespace, out: TextIO) -> int:
    check_tool_choice(args.tool_choice, map_tools_of(args))
    if args.raw == "-":
        check_stdin()
    with contextlib.closing(port_device(args)) as device:
        return _call(args, out, device)


def _call(args: argparse.Namespace, out: TextIO, device: Device) -> int:
    gate, session = open_gate(args, device)
    with gate:
        # stdin is read as bytes, at most one byte over the cap: the gate refuses it as too-large.
        # RAW is given as the bytes on the command line (os.fsencode undoes the decoding of
        # sys.argv), so the gate parses and the audit log records what was typed, even bytes
        # that are not UTF-8.
        raw = sys.stdin.buffer.read(gate.max_input_bytes + 1) if args.raw == "-" \
            else os.fsencode(args.raw)
        observation = gate.handle(raw, dialect=args.dialect, tool_choice=args.tool_choice,
                                  session=session)
    json_line(observation.to_dict(), out)
    if observation.code == "not-json" and args.raw != "-" and _names_a_file(args.raw):
        tell("call", "hint", "RAW is the call's JSON text; to send a file's contents use: "
                             f"regdev call - < {shlex.quote(args.raw)}")
    return 0 if observation.ok else 1


def _names_a_file(text: str) -> bool:
    """Whether ``text`` is the name of an existing file (no error for text that cannot be one:
    too long, or holding a NUL)."""
    try:
        return Path(text).is_file()
    except (OSError, ValueError):
        return False


def add_parser(sub: Any) -> None:
    """Add ``regdev call`` to the subcommands."""
    call = sub.add_parser(
        "call", help="run one raw call against a fresh in-process device (of --map FILE), or "
                     "the device at --port",
        description="Print the observation as one line of JSON.")
    call.add_argument("raw", metavar="RAW", help="the call as JSON text, or - to read stdin")
    dialect_options(call, "")
    device_options(call)
    add_gate_options(call)
    call.set_defaults(func=cmd_call)
