"""The ``regdev`` command line.

Exit codes: 0 success; 1 a call was refused or an expectation was not met; 2 a usage, file or
device-connection error (with a one-line message on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import msgspec

from . import __version__
from ._demo import DEMO_SCRIPT, ScriptedProposer
from ._device import REGISTER_COUNT
from ._gate import Gate
from ._loop import Step, run_loop
from ._observation import Observation
from ._parse import DIALECTS
from ._replay import ReplayFileError, load_replay, run_replay

__all__ = ["main"]


class UsageError(Exception):
    """A command-line mistake: printed as one line, exit status 2."""


def _json_line(value: Any, out: TextIO) -> None:
    out.write(msgspec.json.encode(value).decode() + "\n")


def format_registers(values: Sequence[int]) -> str:
    """The 16 registers as a two-row table of hex bytes."""
    lines = []
    for start in range(0, REGISTER_COUNT, 8):
        row = range(start, start + 8)
        lines.append("  addr " + " ".join(f"{a:>4}" for a in row))
        lines.append("  data " + " ".join(f"0x{values[a]:02x}" for a in row))
    return "\n".join(lines)


def _describe(observation: Observation) -> str:
    if observation.ok:
        result = observation.result or {}
        if set(result) == {"addr", "data"}:
            return (f"accepted  {observation.tool}: register {result['addr']} = "
                    f"0x{result['data']:02x} ({result['data']})")
        return f"accepted  {observation.tool}: {msgspec.json.encode(result).decode()}"
    retry = "retryable" if observation.refusal and observation.refusal.retryable else "final"
    return f"refused   {observation.stage}/{observation.code} ({retry}): {observation.message}"


# --- commands ---------------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    gate = Gate()
    notes = [note for note, _ in DEMO_SCRIPT]
    proposer = ScriptedProposer([raw for _, raw in DEMO_SCRIPT])
    if not args.json:
        out.write("regdev demo: a scripted agent drives the in-process register file "
                  "through the gate.\n")
        out.write(f"device: {gate.device.identify()}; tools: {', '.join(gate.tools)}; "
                  "one retry after a refusal.\n\n")

    def show(step: Step) -> None:
        index = proposer.calls
        if args.json:
            _json_line({"step": index, "retry": step.retry, "raw": step.raw,
                        "observation": step.observation.to_dict()}, out)
            return
        label = f"step {index}" + (" (retry)" if step.retry else "")
        out.write(f"{label:<16}model: {notes[index - 1]}\n")
        out.write(f"{'':<16}sends {step.raw!s}\n")
        out.write(f"{'':<16}{_describe(step.observation)}\n\n")

    result = run_loop(proposer, gate, on_step=show)
    registers = gate.device.snapshot()
    if args.json:
        _json_line({"stop": result.stop, "detail": result.detail}, out)
        _json_line({"registers": registers}, out)
    else:
        out.write(f"loop stopped: {result.stop} ({result.detail})\n\n")
        out.write("registers after the session:\n" + format_registers(registers) + "\n")
    return 0


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    try:
        records = load_replay(args.file)
    except ReplayFileError as error:
        raise UsageError(str(error)) from None
    gate = Gate()
    try:
        gate.check_options(args.dialect, args.tool_choice)
    except ValueError as error:
        raise UsageError(str(error)) from None
    outcomes = run_replay(records, gate, dialect=args.dialect, tool_choice=args.tool_choice)
    failed = 0
    if not args.json:
        out.write(f"{'line':<9}  {'expect':<7}  verdict\n")
    for outcome in outcomes:
        failed += outcome.expect_met is False
        if args.json:
            _json_line(outcome.to_dict(), out)
            continue
        mark = {True: "met", False: "NOT MET", None: "-"}[outcome.expect_met]
        out.write(f"line {outcome.line:>4}  {mark:<7}  {_describe(outcome.observation)}\n")
        if outcome.expect_met is False:
            want = outcome.record.expect or "ok"
            if outcome.record.result is not None:
                want += f" with result {msgspec.json.encode(outcome.record.result).decode()}"
            out.write(f"{'':<20}expected {want}\n")
    registers = gate.device.snapshot()
    if args.json:
        _json_line({"registers": registers}, out)
    else:
        checked = sum(o.expect_met is not None for o in outcomes)
        out.write(f"\n{len(outcomes)} calls, {checked} with expectations, {failed} not met\n")
        out.write("registers after the replay:\n" + format_registers(registers) + "\n")
    return 1 if failed else 0


def cmd_call(args: argparse.Namespace, out: TextIO) -> int:
    gate = Gate()
    # stdin is read as bytes, at most one byte over the cap: the gate refuses it as too-large
    raw = sys.stdin.buffer.read(gate.max_input_bytes + 1) if args.raw == "-" else args.raw
    try:
        observation = gate.handle(raw, dialect=args.dialect, tool_choice=args.tool_choice)
    except ValueError as error:
        raise UsageError(str(error)) from None
    _json_line(observation.to_dict(), out)
    return 0 if observation.ok else 1


# --- parser -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for ``regdev`` and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="regdev",
        description=(
            "A validating tool backend for a 16-register, 8-bit device driven by "
            "language-model agents. Every tool call is parsed, validated and only then "
            "executed; a refusal names one stage and one code (see docs/errors.md)."
        ),
        epilog="Exit status: 0 ok; 1 a call refused or an expectation not met; 2 usage or "
               "file error.",
    )
    parser.add_argument("--version", action="version", version=f"regdev {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def dialect_options(p: argparse.ArgumentParser, default_help: str) -> None:
        p.add_argument("--dialect", choices=DIALECTS, default="canonical",
                       help=f"shape of the raw calls (default: canonical). {default_help}")
        p.add_argument("--tool-choice", metavar="TOOL",
                       help="force this tool: a call naming any other is refused (wrong-tool)")

    demo = sub.add_parser(
        "demo", help="watch a scripted agent drive the in-process device through the gate",
        description="A scripted agent makes accepted calls, a refused call corrected on its "
                    "retry, and a refusal whose retry is refused too; then the registers are "
                    "dumped.")
    demo.add_argument("--json", action="store_true",
                      help="one JSON object per step, then the stop reason and the registers")
    demo.set_defaults(func=cmd_demo)

    replay = sub.add_parser(
        "replay", help="run recorded model outputs (JSONL) and check their expectations",
        description="Each line of FILE is a JSON object with `raw` (the model's output text) "
                    "and optionally `dialect`, `expect` (`ok` or a verdict code), `result` "
                    "(the expected result object) and `why`. Lines run in order against one "
                    "fresh in-process device, so writes are seen by later reads. Exit 0 when "
                    "every expectation is met, 1 when any is not, 2 for a file error.")
    replay.add_argument("file", metavar="FILE", help="JSONL file of recorded calls")
    dialect_options(replay, "A line's own `dialect` wins.")
    replay.add_argument("--json", action="store_true",
                        help="one JSON object per line, then {\"registers\": [16 ints]}")
    replay.set_defaults(func=cmd_replay)

    call = sub.add_parser(
        "call", help="run one raw call against a fresh in-process device",
        description="Print the observation as one line of JSON. Exit 0 when the call was "
                    "accepted, 1 when refused.")
    call.add_argument("raw", metavar="RAW", help="the call as JSON text, or - to read stdin")
    dialect_options(call, "")
    call.set_defaults(func=cmd_call)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``regdev`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.func(args, sys.stdout)
    except UsageError as error:
        print(f"regdev {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"regdev {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    return status


if __name__ == "__main__":
    raise SystemExit(main())
