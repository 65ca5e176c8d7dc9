"""The whole gate against the minimal pipeline: ``Gate.handle`` from raw text to an observation.

The hot-path table's first two rows: ``Gate.handle`` on a gate without a policy or an audit log (an
in-process ``RegisterFile``), on a valid write and read (goal: at most 1.6x the anchor) and on
the three common refusals, wrong type, out of range and missing field (goal: at most 2x), with
the one-line message on both sides. Run::

    .venv/bin/python benchmarks/gate_pipeline.py [--rounds N] [--batch-ms MS] [--wall] [--json]

The anchor, written out below: the least a pipeline from text to observation does for the two
register tools. msgspec decodes the text (no exact decimals, no repeated-key check, no
correlation id), a hand-written check tells valid from refused, a refusal gets a one-line
message, a valid call writes or reads a ``bytearray`` under a lock, and the observation is a
dict. Both sides are timed in the same run, batches interleaved, by default on the CPU clock
of this thread (steadier on a shared machine; ``--wall`` for the wall clock).
"""

from __future__ import annotations

import threading
from typing import Any

import msgspec

from _compare import Goal, case, compare, options
from regdev import Gate
from regdev.bench._bench import Contender

_decode = msgspec.json.Decoder().decode


class MinimalPipeline:
    """The anchor: raw text to an observation dict for write_register and read_register."""

    def __init__(self) -> None:
        self.registers = bytearray(16)
        self.lock = threading.Lock()

    def __call__(self, raw: str) -> dict[str, Any]:
        try:
            call = _decode(raw)
        except msgspec.DecodeError as error:
            return {"ok": False, "code": "not-json", "message": str(error)}
        if type(call) is not dict or type(call.get("arguments")) is not dict:
            return {"ok": False, "code": "not-an-object", "message": "send one JSON object"}
        name, a = call.get("tool"), call["arguments"]
        if name == "write_register":
            if "addr" not in a:
                return {"ok": False, "code": "missing-addr",
                        "message": "missing required argument addr (an integer 0..15)"}
            if "data" not in a:
                return {"ok": False, "code": "missing-data",
                        "message": "missing required argument data (an integer 0..255)"}
            if len(a) != 2:
                return {"ok": False, "code": "unknown-argument", "message": "takes addr, data"}
            addr, data = a["addr"], a["data"]
            if type(addr) is not int:
                return {"ok": False, "code": "type-addr",
                        "message": f"addr must be an integer 0..15, got {addr!r}"}
            if type(data) is not int:
                return {"ok": False, "code": "type-data",
                        "message": f"data must be an integer 0..255, got {data!r}"}
            if not 0 <= addr <= 15:
                return {"ok": False, "code": "range-addr",
                        "message": f"addr {addr} is outside 0..15"}
            if not 0 <= data <= 255:
                return {"ok": False, "code": "range-data",
                        "message": f"data {data} is outside 0..255"}
            with self.lock:
                self.registers[addr] = data
            return {"ok": True, "tool": name, "result": {"addr": addr, "data": data}}
        if name == "read_register":
            if "addr" not in a:
                return {"ok": False, "code": "missing-addr",
                        "message": "missing required argument addr (an integer 0..15)"}
            if len(a) != 1:
                return {"ok": False, "code": "unknown-argument", "message": "takes addr"}
            addr = a["addr"]
            if type(addr) is not int:
                return {"ok": False, "code": "type-addr",
                        "message": f"addr must be an integer 0..15, got {addr!r}"}
            if not 0 <= addr <= 15:
                return {"ok": False, "code": "range-addr",
                        "message": f"addr {addr} is outside 0..15"}
            with self.lock:
                data = self.registers[addr]
            return {"ok": True, "tool": name, "result": {"addr": addr, "data": data}}
        return {"ok": False, "code": "unknown-tool", "message": f"unknown tool {name!r}"}


CASES = (
    case("write", '{"tool": "write_register", "arguments": {"addr": 3, "data": 255}}', True),
    case("read", '{"tool": "read_register", "arguments": {"addr": 7}}', True),
    case("type", '{"tool": "write_register", "arguments": {"addr": "3", "data": 1}}', False),
    case("range", '{"tool": "write_register", "arguments": {"addr": 3, "data": 300}}', False),
    case("missing", '{"tool": "write_register", "arguments": {"data": 1}}', False),
)
GOALS = {"write": Goal(at_most=1.6), "read": Goal(at_most=1.6), "type": Goal(at_most=2.0),
         "range": Goal(at_most=2.0), "missing": Goal(at_most=2.0)}


def main() -> None:
    args = options(__doc__.splitlines()[0])
    handle = Gate().handle
    anchor = MinimalPipeline()
    compare("Gate.handle against the minimal pipeline",
            Contender("regdev", "Gate.handle, no policy, no audit log, in-process RegisterFile",
                      raw=True, on_refusal="observation", run=handle,
                      valid=lambda raw: handle(raw).ok),
            Contender("anchor", "the minimal pipeline written out in this script", raw=True,
                      on_refusal="observation", run=anchor,
                      valid=lambda raw: anchor(raw)["ok"]),
            CASES, goals=GOALS, args=args)


if __name__ == "__main__":
    main()
