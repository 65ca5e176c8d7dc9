"""``regdev demo``: a scripted agent drives a device through the gate."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any, TextIO

from ..agents._demo import DEMO_SCRIPT, DEMO_STOP, ScriptedProposer, map_demo
from ..agents._loop import Step, run_loop
from ..agents._shell import describe, format_registers, register_rows
from ..gate._gate import Gate
from ..gate._policy import Session
from ._common import (
    add_gate_options,
    audit_note,
    device_call,
    device_options,
    json_line,
    open_gate,
    port_device,
    register_map,
    write_line,
)


def _script(args: argparse.Namespace) -> None:
    """The default demo, or with ``--map`` the demo made from the map (``args.script``,
    ``args.stop``, ``args.left_out``)."""
    if args.map is None:
        args.script, args.stop, args.left_out = DEMO_SCRIPT, DEMO_STOP, ()
        return
    made = map_demo(register_map(args))
    args.script, args.stop, args.left_out = made.steps, made.stop, made.left_out


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    _script(args)
    with contextlib.closing(port_device(args)) as device:
        gate, session = open_gate(args, device)
        with gate:
            return _demo(args, out, gate, session)


def _demo(args: argparse.Namespace, out: TextIO, gate: Gate, session: Session) -> int:
    notes = [note for note, _, _ in args.script]
    proposer = ScriptedProposer([raw for _, raw, _ in args.script])
    if not args.json:
        identity = device_call(args, gate.device.identify)
        where = ("the in-process register file" if args.port is None
                 else f"the device on {args.port}")
        if args.map is not None:
            where += f" of the register map {args.map}"
        write_line(out, f"regdev demo: a scripted agent drives {where} through the gate.")
        write_line(out, f"device: {identity}; tools: {', '.join(gate.tools)}; one retry after "
                        "a refusal.")
        for line in args.left_out:
            write_line(out, f"left out: {line}")
        write_line(out)
    verdicts: list[str | None] = []

    def show(step: Step) -> None:
        index = proposer.calls
        verdicts.append("ok" if step.observation.ok else step.observation.code)
        if args.json:
            json_line({"step": index, "retry": step.retry, "raw": step.raw,
                        "observation": step.observation.to_dict()}, out)
            return
        label = f"step {index}" + (" (retry)" if step.retry else "")
        write_line(out, f"{label:<16}model: {notes[index - 1]}")
        raw = step.raw if isinstance(step.raw, str) else step.raw.decode(errors="replace")
        write_line(out, f"{'':<16}sends {raw}")
        write_line(out, f"{'':<16}{describe(step.observation)}")
        write_line(out)
        out.flush()  # each step as it runs

    result = run_loop(proposer, gate, on_step=show, session=session)
    registers = device_call(args, gate.device.snapshot)
    expected = [verdict for _, _, verdict in args.script if verdict is not None]
    differs = _first_difference(verdicts, expected)
    if differs is None and result.stop != args.stop:
        differs = f"the loop stopped with {result.stop}, the script with {args.stop}"
    if args.json:
        json_line({"stop": result.stop, "detail": result.detail,
                   "as_scripted": differs is None}, out)
        json_line({"registers": register_rows(registers, gate.regmap)}, out)
    else:
        write_line(out, f"loop stopped: {result.stop} ({result.detail})")
        if differs is not None:
            write_line(out, f"not as scripted: {differs}")
        write_line(out)
        out.write("registers after the session:\n"
                  + format_registers(registers, gate.regmap) + "\n")
        audit_note(gate, out)
    return 0 if differs is None else 1


def _first_difference(verdicts: list[str | None], expected: list[str]) -> str | None:
    """Where the verdicts the steps got first differ from the script's, in words; or None."""
    for number, (got, want) in enumerate(zip(verdicts, expected, strict=False), start=1):
        if got != want:
            return f"step {number} got {got}, the script shows {want}"
    if len(verdicts) < len(expected):
        return (f"the loop stopped after step {len(verdicts)}; the script runs "
                f"{len(expected)} steps")
    return None


def add_parser(sub: Any) -> None:
    """Add ``regdev demo`` to the subcommands."""
    demo = sub.add_parser(
        "demo", help="watch a scripted agent drive a device through the gate (in process, or "
                     "the one at --port)",
        description="A scripted agent makes accepted calls, a refused call corrected on its "
                    "retry, and a refusal whose retry is refused too; then the registers are "
                    "dumped. It drives a fresh in-process register file, or the device at "
                    "--port. With --map FILE, a demo made from the map: an identity register "
                    "read by name, a field written by its enumerated name after a bad "
                    "value, a reserved bit refused and corrected, a block write and read, "
                    "and a write to a read-only register; a step the map cannot show is left "
                    "out, with a line saying so.")
    demo.add_argument("--json", action="store_true",
                      help="one JSON object per step, then the stop reason and the registers")
    device_options(demo)
    add_gate_options(demo)
    demo.set_defaults(func=cmd_demo)
