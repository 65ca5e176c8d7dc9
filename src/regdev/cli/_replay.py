"""``regdev replay``: recorded model outputs (JSONL) run through the gate, their expectations
checked."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any, TextIO

import msgspec

from ..agents._replay import ReplayFileError, load_replay, parse_replay, run_replay
from ..agents._shell import describe, format_registers
from ..gate._gate import Gate
from ..gate._policy import Session
from ._common import (
    UsageError,
    add_gate_options,
    audit_note,
    check_stdin,
    check_tool_choice,
    count,
    device_call,
    dialect_options,
    json_line,
    map_option,
    map_tools_of,
    open_gate,
    port_device,
    port_options,
)


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    tools = map_tools_of(args)
    try:
        records = _stdin_replay(tools) if args.file == "-" else load_replay(args.file, tools)
    except ReplayFileError as error:
        raise UsageError(str(error)) from None
    check_tool_choice(args.tool_choice, tools)  # before a port is opened
    with contextlib.closing(port_device(args)) as device:
        gate, session = open_gate(args, device)
        with gate:
            if args.reset:  # through the gate: the reset ends the device's idempotency keys
                device_call(args, gate.reset_device)
            return _replay(args, out, records, gate, session)


def _stdin_replay(tools: Any) -> list[tuple[int, Any]]:
    """The replay records on standard input (``regdev replay -``), named ``<stdin>``."""
    check_stdin()
    try:
        data = sys.stdin.buffer.read()
    except OSError as error:
        raise UsageError(f"cannot read the standard input: {error.strerror or error}") from None
    return parse_replay(data, "<stdin>", tools)


def _replay(args: argparse.Namespace, out: TextIO, records: list[tuple[int, Any]], gate: Gate,
            session: Session) -> int:
    source = "<stdin>" if args.file == "-" else Path(args.file).name
    outcomes = run_replay(records, gate, dialect=args.dialect, tool_choice=args.tool_choice,
                          session=session, proposer=f"replay:{source}")
    failed = 0
    if not args.json:
        out.write(f"{'line':<9}  {'expect':<7}  verdict\n")
    for outcome in outcomes:
        failed += outcome.expect_met is False
        if args.json:
            json_line(outcome.to_dict(), out)
            continue
        mark = {True: "met", False: "NOT MET", None: "-"}[outcome.expect_met]
        out.write(f"line {outcome.line:>4}  {mark:<7}  {describe(outcome.observation)}\n")
        if outcome.expect_met is False:
            want = outcome.record.expect or "ok"
            if outcome.record.result is not None:
                want += f" with result {msgspec.json.encode(outcome.record.result).decode()}"
            out.write(f"{'':<20}expected {want}\n")
    try:  # every line ran: a failed dump must not lose their results
        registers, unread = device_call(args, gate.device.snapshot), None
    except UsageError as error:
        registers, unread = None, f"the registers could not be read after the replay: {error}"
    if args.json:
        json_line({"registers": registers} if unread is None
                   else {"registers": None, "error": unread}, out)
    else:
        checked = sum(o.expect_met is not None for o in outcomes)
        out.write(f"\n{count(len(outcomes), 'call')}, {checked} with expectations, {failed} "
                  "not met\n")
        if registers is not None:
            out.write("registers after the replay:\n"
                      + format_registers(registers, gate.regmap) + "\n")
        audit_note(gate, out)
    if unread is not None:
        out.flush()  # the results first, then the error
        print(f"regdev replay: error: {unread}", file=sys.stderr)
        return 2
    return 1 if failed else 0


def add_parser(sub: Any) -> None:
    """Add ``regdev replay`` to the subcommands."""
    replay = sub.add_parser(
        "replay", help="run recorded model outputs (JSONL) and check their expectations",
        description="Each line of FILE is a JSON object with `raw` (the model's output text) "
                    "and optionally `dialect`, `expect` (`ok` or a verdict code of "
                    "docs/errors.md; anything else is a file error), `result` "
                    "(the expected result object) and `why`. Lines run in order against one "
                    "device, so writes are seen by later reads: a fresh in-process register "
                    "file, or the device at --port (add --reset to start it from its reset "
                    "values). Exit 0 when "
                    "every expectation is met, 1 when any is not, 2 for a file error.")
    replay.add_argument("file", metavar="FILE",
                        help="JSONL file of recorded calls, or - to read them from standard "
                             "input")
    dialect_options(replay, "A line's own `dialect` wins.")
    replay.add_argument("--json", action="store_true",
                        help="one JSON object per line, then {\"registers\": [16 ints]} (or "
                             "{\"registers\": null, \"error\": TEXT} when the registers "
                             "could not be read after the calls: exit 2). A file error "
                             "(exit 2, nothing run) stays one line of text on stderr, as "
                             "without --json")
    map_option(replay)
    port_options(replay)
    replay.add_argument("--reset", action="store_true",
                        help="with --port: reset the device before the replay (without "
                             "--port the device is a fresh in-process one)")
    add_gate_options(replay)
    replay.set_defaults(func=cmd_replay)
