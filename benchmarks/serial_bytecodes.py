"""The client's Python per serial transaction, counted: bytecodes run, regdev against pyserial.

A noise-free companion to ``serial_roundtrip.py``, whose CPU figures move by 20-40% on a
shared machine. Here the system calls are faked (``os.write`` takes the request, ``select``
says the reply is there, ``os.read`` returns it, in pyserial, through which both sides read),
and every bytecode the interpreter runs for one call is counted, by function
(``sys.settrace`` with opcode events; the fakes' own bytecodes are left out). Run::

    .venv/bin/python benchmarks/serial_bytecodes.py [--by-function]

It prints, for ``SerialDevice.read(3)``, ``.write(4, 90)`` and ``Gate.handle`` of a read and
a write call, the bytecodes per call against the anchor's (plain pyserial writing the request
frame and reading the reply by its length, as in ``serial_roundtrip.py``), and the ratio. A
bytecode is not a fixed time (a call or an attribute look-up costs more than a comparison),
and the system calls, the same for both sides, are not in it: read it as where the client's
Python goes, not as the ratio of the CPU figures.
"""

from __future__ import annotations

import argparse
import collections
import sys
import types
from collections.abc import Callable
from typing import Any

import serial
import serial.serialposix

from regdev import Gate, SerialDevice
from regdev.devices import _protocol as wire
from serial_roundtrip import READ_CALL, WRITE_CALL, anchor_exchanges, simulator

#: The reply to each request frame these calls send (any sequence number).
REPLIES = {wire.encode(request): wire.encode(reply)
           for seq in range(1, 256)
           for request, reply in ((wire.ReadRequest(seq, 3), wire.ReadReply(seq, 3, 0)),
                                  (wire.WriteRequest(seq, 4, 90), wire.WriteReply(seq, 4, 90)))}


class FakeLine:
    """``os`` and ``select`` for ports whose device answers at once: the request written is
    remembered, ``select`` says the ports (file descriptors ``ports``, not pyserial's abort
    pipes) are ready, ``os.read`` returns the reply."""

    def __init__(self, ports: set[Any]) -> None:
        self.ports = ports
        self.reply = b""

    def write(self, fd: int, data: bytes) -> int:
        self.reply = REPLIES[bytes(data)]
        return len(data)

    def read(self, fd: int, size: int) -> bytes:
        reply, self.reply = self.reply, b""
        return reply

    def select(self, read: Any, write: Any, error: Any, timeout: Any = None) -> tuple[Any, ...]:
        return ([fd for fd in read if fd in self.ports], [fd for fd in write if fd in self.ports],
                [])


def count(call: Callable[[], object]) -> collections.Counter[str]:
    """Bytecodes run by one ``call()``, by function, this file's own left out."""
    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: types.FrameType, event: str, arg: object) -> Any:
        if frame.f_code.co_filename == __file__:
            return None
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts[f"{code.co_qualname} ({code.co_filename.rsplit('/', 1)[-1]})"] += 1
        return tracer

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--by-function", action="store_true",
                        help="also list each side's bytecodes by function")
    args = parser.parse_args()
    with simulator() as ours, simulator() as theirs, \
            SerialDevice(ours, timeout=1.0) as device, \
            serial.serial_for_url(theirs, timeout=1.0) as line:
        device.read(3)  # the line synchronised, over the real pty
        gate = Gate(device)
        anchor = anchor_exchanges(line)
        fake = FakeLine({device._port.fd, line.fd})  # type: ignore[union-attr]
        faked = {"os": types.SimpleNamespace(write=fake.write, read=fake.read),
                 "select": types.SimpleNamespace(select=fake.select, error=OSError)}
        modules = (serial.serialposix,)  # pyserial's port reads: regdev's and the anchor's
        saved = [{name: vars(module)[name] for name in faked} for module in modules]
        for module in modules:
            vars(module).update(faked)
        try:
            rows = (("read", lambda: device.read(3), anchor["read"]),
                    ("write", lambda: device.write(4, 90), anchor["write"]),
                    ("gate read", lambda: gate.handle(READ_CALL), anchor["read"]),
                    ("gate write", lambda: gate.handle(WRITE_CALL), anchor["write"]))
            print("bytecodes per call, system calls faked (the client's Python alone)")
            print(f"  {'case':12s} {'regdev':>8s} {'anchor':>8s} {'ratio':>7s}")
            for name, ours_call, their_call in rows:
                ours_call(), their_call()  # warm: nothing first-time in the counts
                mine, theirs_counts = count(ours_call), count(their_call)
                total, anchor_total = sum(mine.values()), sum(theirs_counts.values())
                print(f"  {name:12s} {total:8d} {anchor_total:8d} {total / anchor_total:6.2f}x")
                if args.by_function:
                    for side, counts in (("regdev", mine), ("anchor", theirs_counts)):
                        for function, n in counts.most_common():
                            print(f"      {side} {n:5d}  {function}")
        finally:
            for module, names in zip(modules, saved, strict=True):
                vars(module).update(names)


if __name__ == "__main__":
    main()
