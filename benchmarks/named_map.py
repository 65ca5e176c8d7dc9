"""A write on a named map against the same write on the default map: ``Gate.handle`` of one
``write_register`` call, the one path for every map.

The goal (the consolidation's speed goals): a write to a plain read-write register of a named
map within 1.3x of the same write on the default map. The named map here has the default
map's 16 addresses, each register named (``R0`` .. ``R15``), register 5 split into fields
(``LOW`` bits 0..3, ``HIGH`` bits 4..7, any value valid) and register 9 with an enumerated
field (``MODE``, bits 0..1, values OFF/ON/AUTO/TEST, so every data value is one of them). Both
gates have no policy and no audit log and an in-process ``RegisterFile``; both sides get the
same raw text. Run::

    .venv/bin/python benchmarks/named_map.py [--rounds N] [--batch-ms MS] [--wall] [--json]

Cases: ``plain`` (a write to register 3, plain read-write on both maps), ``fields`` (a write
to register 5: fields on the named map), ``enum`` (register 9: an enumerated field), and a
``read`` of register 3. Both sides are timed in the same run, batches interleaved, by
default on this thread's CPU clock (``--wall`` for the wall clock).
"""

from __future__ import annotations

from _compare import Goal, case, compare, options
from regdev import Field, Gate, Register, RegisterFile, RegisterMap
from regdev.bench._bench import Contender


def named_map() -> RegisterMap:
    """The default map's 16 addresses, named, with fields on registers 5 and 9."""
    registers = []
    for addr in range(16):
        fields: tuple[Field, ...] = ()
        if addr == 5:
            fields = (Field("LOW", 0, 3), Field("HIGH", 4, 7))
        elif addr == 9:
            fields = (Field("MODE", 0, 1, encode={"OFF": 0, "ON": 1, "AUTO": 2, "TEST": 3}),
                      Field("REST", 2, 7))
        registers.append(Register(f"R{addr}", addr, fields=fields))
    return RegisterMap(registers, name="bench")


CASES = (
    case("plain", '{"tool": "write_register", "arguments": {"addr": 3, "data": 255}}', True),
    case("fields", '{"tool": "write_register", "arguments": {"addr": 5, "data": 165}}', True),
    case("enum", '{"tool": "write_register", "arguments": {"addr": 9, "data": 6}}', True),
    case("read", '{"tool": "read_register", "arguments": {"addr": 3}}', True),
)
GOALS = {"plain": Goal(at_most=1.3)}


def main() -> None:
    args = options(__doc__.splitlines()[0])
    named = Gate(RegisterFile(regmap=named_map())).handle
    default = Gate().handle
    compare("Gate.handle on a named map against the default map",
            Contender("regdev", "Gate.handle on the named map (R0..R15, fields on 5 and 9)",
                      raw=True, on_refusal="observation", run=named,
                      valid=lambda raw: named(raw).ok),
            Contender("anchor", "Gate.handle on the default map", raw=True,
                      on_refusal="observation", run=default,
                      valid=lambda raw: default(raw).ok),
            CASES, goals=GOALS, args=args)


if __name__ == "__main__":
    main()
