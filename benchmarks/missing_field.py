"""The compiled check on a missing required argument, against a hand-written floor.

The hot-path table's fourth row: ``compile_validator()(call)`` on a ``write_register`` call without
``addr``, and one without ``data`` (goal: at most 1.15x the anchor for each; a form that
tests the first name alone first serves one at the other's cost), and on the valid call
beside it (the missing-field form must not slow it), against the anchor written out below:
the least code that tells a valid ``write_register`` or ``read_register`` call from a
refused one, by hand, with ``len()`` and ``in`` tests for the required names. Run::

    .venv/bin/python benchmarks/missing_field.py [--rounds N] [--batch-ms MS] [--wall] [--json]
"""

from __future__ import annotations

from typing import Any

from _compare import Goal, compare, options
from regdev import compile_validator
from regdev.bench._bench import Case, Contender


def floor(call: Any) -> bool:
    """The anchor: True for a valid register-tool call, by hand, in no fixed order."""
    if type(call) is not dict:
        return False
    a = call.get("arguments")
    if type(a) is not dict:
        return False
    name = call.get("tool")
    if name == "write_register":
        if len(a) != 2 or "addr" not in a or "data" not in a:
            return False
        addr, data = a["addr"], a["data"]
        return (type(addr) is int and 0 <= addr <= 15 and type(data) is int
                and 0 <= data <= 255)
    if name == "read_register":
        if len(a) != 1 or "addr" not in a:
            return False
        addr = a["addr"]
        return type(addr) is int and 0 <= addr <= 15
    return False


CASES = (
    Case("missing", "write_register without addr", {}, "missing-addr",
         {"tool": "write_register", "arguments": {"data": 1}}, raw_only=True),
    Case("missing data", "write_register without data", {}, "missing-data",
         {"tool": "write_register", "arguments": {"addr": 3}}, raw_only=True),
    Case("write", "a valid write_register", {}, None,
         {"tool": "write_register", "arguments": {"addr": 3, "data": 255}}, raw_only=True),
)
GOALS = {"missing": Goal(at_most=1.15), "missing data": Goal(at_most=1.15),
         "write": Goal(at_most=1.15)}


def main() -> None:
    args = options(__doc__.splitlines()[0])
    check = compile_validator()
    compare("The compiled check against the hand-written floor",
            Contender("regdev", "compile_validator()(call), the code only", raw=True,
                      on_refusal="code", run=check, valid=lambda call: check(call) is None),
            Contender("anchor", "floor(call), written out in this script", raw=True,
                      on_refusal="bool", run=floor, valid=floor),
            CASES, goals=GOALS, args=args)


if __name__ == "__main__":
    main()
