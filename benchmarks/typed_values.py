"""Typed values through the gate: ``read_value`` / ``write_value`` against ``write_register``.

Not a test. Times, in one run with interleaved batches, ``Gate.handle`` on a gate without a
policy or an audit log, on an in-process ``RegisterFile`` with the example map
``examples/thermostat.rdl`` (8-bit registers with typed values), from raw text to an
observation:

* ``write int16``: ``write_value`` of ``SETPOINT`` (int16, scale 0.1, degC, 5..35), 21.5 from
  the text: the range and the resolution checked in decimal, two registers in one block write;
* ``read int16``: ``read_value`` of ``SETPOINT``: two registers in one block read, in degC;
* ``read float32``: ``read_value`` of ``TEMP`` (float32 over four registers);
* ``read sunssf``: ``read_value`` of ``W`` (uint16 x 10^W_SF: four registers in one read);
* ``write uint8``: ``write_value`` of ``MODE`` (one register, by enumerated name);

each against the anchor, ``write_register`` of one register of the same gate (the seed tool's
path on this map: ``ROOM[0]``, an 8-bit register with one field, as ``SETPOINT``'s are; a raw
write into ``SETPOINT``'s registers is refused, ``value-register``, as it has a range); and
``int16 vs blk``: the int16 write against ``write_registers`` of two such registers
(``ROOM[0..1]``: the block write it makes, of the same shape), which shows what the conversion
itself costs.
The goal: each at most 1.5x its anchor. Run::

    .venv/bin/python benchmarks/typed_values.py [--rounds N] [--batch-ms MS] [--wall] [--json]

Both sides' verdicts are checked before anything is timed (every input here is valid).
"""

from __future__ import annotations

from pathlib import Path

from _compare import Goal, case, compare, options
from regdev import Gate, RegisterFile
from regdev.bench._bench import Contender
from regdev.devices._rdl import load_map

MAP = Path(__file__).resolve().parent.parent / "examples" / "thermostat.rdl"
ANCHOR = '{"tool": "write_register", "arguments": {"addr": 11, "data": 215}}'
CASES = (
    case("write int16", ('{"tool": "write_value", "arguments": {"name": "SETPOINT", '
                         '"value": 21.5}}', ANCHOR), True),
    case("read int16", ('{"tool": "read_value", "arguments": {"name": "SETPOINT"}}', ANCHOR),
         True),
    case("read float32", ('{"tool": "read_value", "arguments": {"name": "TEMP"}}', ANCHOR),
         True),
    case("read sunssf", ('{"tool": "read_value", "arguments": {"name": "W"}}', ANCHOR), True),
    case("write uint8", ('{"tool": "write_value", "arguments": {"name": "MODE", '
                         '"value": "HEAT"}}', ANCHOR), True),
    case("int16 vs blk", ('{"tool": "write_value", "arguments": {"name": "SETPOINT", '
                          '"value": 21.5}}',
                          '{"tool": "write_registers", "arguments": {"addr": 11, '
                          '"data": [0, 215]}}'), True),
)
GOALS = {each.title: Goal(at_most=1.5) for each in CASES}


def main() -> None:
    args = options(__doc__.splitlines()[0])
    handle = Gate(RegisterFile(regmap=load_map(MAP))).handle
    compare("typed values against write_register, one gate",
            Contender("regdev", "Gate.handle: read_value / write_value, thermostat map",
                      raw=True, on_refusal="observation", run=lambda pair: handle(pair[0]),
                      valid=lambda pair: handle(pair[0]).ok),
            Contender("anchor", "Gate.handle: write_register (int16 vs blk: write_registers) "
                      "on the same gate", raw=True,
                      on_refusal="observation", run=lambda pair: handle(pair[1]),
                      valid=lambda pair: handle(pair[1]).ok),
            CASES, goals=GOALS, args=args)


if __name__ == "__main__":
    main()
