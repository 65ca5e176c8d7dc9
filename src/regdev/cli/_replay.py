"""``regdev replay``: recorded model outputs (JSONL) run through the gate, their expectations
checked, each verdict shown as it comes."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import msgspec

from ..agents._replay import (
    ReplayFileError,
    ReplayItem,
    ReplayOutcome,
    ReplayRecord,
    iter_replay,
    load_replay,
    max_line_bytes,
    read_replay,
)
from ..agents._shell import describe, format_registers, register_rows
from ..gate._gate import Gate
from ..gate._parse import DEFAULT_MAX_INPUT_BYTES
from ..gate._policy import Session
from ..gate._tools import ToolSet
from ._common import (
    UsageError,
    add_gate_options,
    audit_note,
    check_stdin,
    check_tool_choice,
    count,
    device_call,
    device_options,
    dialect_options,
    json_line,
    load_policy,
    map_tools_of,
    open_gate,
    port_device,
    tell,
    write_line,
)


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    tools = map_tools_of(args)
    policy = load_policy(args)  # its max_input_bytes sets the longest line read
    cap = max_line_bytes(policy.max_input_bytes if policy is not None
                         and policy.max_input_bytes is not None else DEFAULT_MAX_INPUT_BYTES)
    records: Iterable[ReplayItem]
    if args.file == "-":  # read and run line by line, as the lines come
        check_stdin()
        records = _stdin_records(tools, cap)
    else:  # the whole file is checked first: a file error runs nothing
        try:
            records = load_replay(args.file, tools, max_line=cap)
        except ReplayFileError as error:
            raise UsageError(str(error)) from None
    check_tool_choice(args.tool_choice, tools)  # before a port is opened
    with contextlib.closing(port_device(args)) as device:
        gate, session = open_gate(args, device)
        with gate:
            if args.reset:  # through the gate: the reset ends the device's idempotency keys
                device_call(args, gate.reset_device)
            return _replay(args, out, records, gate, session)


def _stdin_records(tools: ToolSet, cap: int) -> Iterator[ReplayItem]:
    """The replay records on standard input (``regdev replay -``), named ``<stdin>``, read one
    line at a time (at most ``cap`` bytes held)."""
    try:
        yield from read_replay(sys.stdin.buffer, "<stdin>", tools, max_line=cap)
    except OSError as error:
        raise ReplayFileError(f"cannot read the standard input: {error.strerror or error}"
                              ) from None


def _replay(args: argparse.Namespace, out: TextIO, records: Iterable[ReplayItem], gate: Gate,
            session: Session) -> int:
    source = "<stdin>" if args.file == "-" else Path(args.file).name
    outcomes: list[ReplayOutcome] = []
    problem = interrupted = None
    try:
        for outcome in iter_replay(records, gate, dialect=args.dialect,
                                   tool_choice=args.tool_choice, session=session,
                                   proposer=f"replay:{source}"):
            if not outcomes and not args.json:
                write_line(out, f"{'line':<9}  {'expect':<7}  verdict")
            outcomes.append(outcome)
            _show(args, out, outcome)
            out.flush()  # each verdict as it runs
    except ReplayFileError as error:  # standard input only: a file was checked first
        problem = str(error)
    except KeyboardInterrupt:
        interrupted = (f"interrupted after {count(len(outcomes), 'call')}; the results above "
                       "are those of the calls that ran")
    if problem is not None and not outcomes:  # nothing ran: one line, as for a file
        raise UsageError(problem)
    try:  # the lines ran: a failed dump must not lose their results
        registers, unread = device_call(args, gate.device.snapshot), None
    except UsageError as error:
        registers, unread = None, f"the registers could not be read after the replay: {error}"
    failed = sum(o.expect_met is False for o in outcomes)
    if args.json:
        end: dict[str, Any] = ({"registers": register_rows(registers, gate.regmap)}
                               if registers is not None
                               else {"registers": None, "error": unread})
        if interrupted is not None:
            end["interrupted"] = True
        json_line(end, out)
    else:
        checked = sum(o.expect_met is not None for o in outcomes)
        write_line(out)
        write_line(out, f"{count(len(outcomes), 'call')}, {checked} with expectations, "
                        f"{failed} not met" + (" (interrupted)" if interrupted else ""))
        if registers is not None:
            out.write("registers after the replay:\n"
                      + format_registers(registers, gate.regmap) + "\n")
        audit_note(gate, out)
    out.flush()  # the results first, then the error
    if interrupted is not None:
        print(f"regdev replay: {interrupted}", file=sys.stderr)
    for line in (problem, unread):
        if line is not None:
            tell("replay", "error", line)
    if problem is not None:
        return 2
    if interrupted is not None:
        return 130
    if unread is not None:
        return 2
    return 1 if failed else 0


def _show(args: argparse.Namespace, out: TextIO, outcome: ReplayOutcome) -> None:
    """One outcome: a JSON row, or a line of text (and what was expected when not met)."""
    if args.json:
        json_line(outcome.to_dict(), out)
        return
    mark = {True: "met", False: "NOT MET", None: "-"}[outcome.expect_met]
    write_line(out, f"line {outcome.line:>4}  {mark:<7}  {describe(outcome.observation)}")
    record = outcome.record
    if outcome.expect_met is False and isinstance(record, ReplayRecord):
        want = record.expect or "ok"
        if record.result is not None:
            want += f" with result {msgspec.json.encode(record.result).decode()}"
        write_line(out, f"{'':<20}expected {want}")


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
                    "values). Each verdict is shown as its call runs; Ctrl-C stops the "
                    "replay and prints the summary of what ran. A FILE is checked whole "
                    "before anything runs; - reads standard input line by line and runs each "
                    "line as it comes (a bad line stops the replay there). A line longer "
                    "than 6 x the gate's input cap + 64 KiB "
                    f"({max_line_bytes() // 1024} KiB by default) is not read: its verdict "
                    "is parse/too-large, nothing runs, and its expectation is not checked.")
    replay.add_argument("file", metavar="FILE",
                        help="JSONL file of recorded calls, or - to read them from standard "
                             "input")
    dialect_options(replay, "A line's own `dialect` wins.")
    replay.add_argument("--json", action="store_true",
                        help="one JSON object per line, then the registers after the "
                             "calls, {\"registers\": [{\"addr\": A, \"name\": N, "
                             "\"data\": D}, ...]} in address order (name when the map "
                             "names the register; or "
                             "{\"registers\": null, \"error\": TEXT} when the registers "
                             "could not be read after the calls: exit 2; and "
                             "\"interrupted\": true after Ctrl-C). A file error "
                             "(exit 2, nothing run) stays one line of text on stderr, as "
                             "without --json")
    device_options(replay)
    replay.add_argument("--reset", action="store_true",
                        help="with --port: reset the device before the replay (without "
                             "--port the device is a fresh in-process one)")
    add_gate_options(replay)
    replay.set_defaults(func=cmd_replay)
