"""``regdev demo``: a scripted agent drives a device through the gate."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any, TextIO

from ..agents._demo import DEMO_SCRIPT, ScriptedProposer
from ..agents._loop import Step, run_loop
from ..agents._shell import describe, format_registers
from ..gate._gate import Gate
from ..gate._policy import Session
from ._common import (
    add_gate_options,
    audit_note,
    device_call,
    json_line,
    open_gate,
    port_device,
    port_options,
)


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    with contextlib.closing(port_device(args)) as device:
        gate, session = open_gate(args, device)
        with gate:
            return _demo(args, out, gate, session)


def _demo(args: argparse.Namespace, out: TextIO, gate: Gate, session: Session) -> int:
    notes = [note for note, _ in DEMO_SCRIPT]
    proposer = ScriptedProposer([raw for _, raw in DEMO_SCRIPT])
    if not args.json:
        identity = device_call(args, gate.device.identify)
        where = ("the in-process register file" if args.port is None
                 else f"the device on {args.port}")
        out.write(f"regdev demo: a scripted agent drives {where} through the gate.\n")
        out.write(f"device: {identity}; tools: {', '.join(gate.tools)}; one retry after a "
                  "refusal.\n\n")

    def show(step: Step) -> None:
        index = proposer.calls
        if args.json:
            json_line({"step": index, "retry": step.retry, "raw": step.raw,
                        "observation": step.observation.to_dict()}, out)
            return
        label = f"step {index}" + (" (retry)" if step.retry else "")
        out.write(f"{label:<16}model: {notes[index - 1]}\n")
        out.write(f"{'':<16}sends {step.raw!s}\n")
        out.write(f"{'':<16}{describe(step.observation)}\n\n")

    result = run_loop(proposer, gate, on_step=show, session=session)
    registers = device_call(args, gate.device.snapshot)
    if args.json:
        json_line({"stop": result.stop, "detail": result.detail}, out)
        json_line({"registers": registers}, out)
    else:
        out.write(f"loop stopped: {result.stop} ({result.detail})\n\n")
        out.write("registers after the session:\n" + format_registers(registers) + "\n")
        audit_note(gate, out)
    return 0


def add_parser(sub: Any) -> None:
    """Add ``regdev demo`` to the subcommands."""
    demo = sub.add_parser(
        "demo", help="watch a scripted agent drive a device through the gate (in process, or "
                     "the one at --port)",
        description="A scripted agent makes accepted calls, a refused call corrected on its "
                    "retry, and a refusal whose retry is refused too; then the registers are "
                    "dumped. It drives a fresh in-process register file, or the device at "
                    "--port.")
    demo.add_argument("--json", action="store_true",
                      help="one JSON object per step, then the stop reason and the registers")
    port_options(demo)
    add_gate_options(demo)
    demo.set_defaults(func=cmd_demo)
