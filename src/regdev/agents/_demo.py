"""The demo session: a scripted proposer and the calls it makes.

The default script shows, in order: accepted calls, a refused call corrected on its retry,
and a refusal whose retry is refused too, which stops the loop with ``rejected``. With a
register map, the script is made from the map (:func:`map_demo`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ..core._observation import Observation
from ..devices._regmap import Register, RegisterMap

__all__ = ["DEMO_SCRIPT", "DEMO_STOP", "MapDemo", "ScriptedProposer", "map_demo"]

#: ``(what the model is doing, its raw output, the verdict the script expects)`` in canonical
#: dialect; the verdict is ``"ok"`` or a refusal's code, None for the step that is never sent.
DEMO_SCRIPT: tuple[tuple[str, str, str | None], ...] = (
    ("read register 0",
     '{"tool": "read_register", "arguments": {"addr": 0}}', "ok"),
    ("write 0xA5 to register 0",
     '{"tool": "write_register", "arguments": {"addr": 0, "data": 165}}', "ok"),
    ("write 300 to register 1 (too big for 8 bits)",
     '{"tool": "write_register", "arguments": {"addr": 1, "data": 300}}', "range-data"),
    ("retry with 255",
     '{"tool": "write_register", "arguments": {"addr": 1, "data": 255}}', "ok"),
    ("write 0x42 to register 2, sent as 66.0 (an integer in JSON Schema)",
     '{"tool": "write_register", "arguments": {"addr": 2, "data": 66.0}}', "ok"),
    ("read register 1 back",
     '{"tool": "read_register", "arguments": {"addr": 1}}', "ok"),
    ("write to register \"7\" (a string, not an integer)",
     '{"tool": "write_register", "arguments": {"addr": "7", "data": 1}}', "type-addr"),
    ("retry with register 16 (there are only 0..15)",
     '{"tool": "write_register", "arguments": {"addr": 16, "data": 1}}', "range-addr"),
    ("never sent: the loop stops when the retry is refused",
     '{"tool": "write_register", "arguments": {"addr": 15, "data": 1}}', None),
)
#: How :data:`DEMO_SCRIPT` ends when every step gets the verdict the script expects.
DEMO_STOP = "rejected"


#: One step of a script: ``(what the model is doing, its raw output, the verdict the script
#: expects)``.
DemoStep = tuple[str, str, "str | None"]


@dataclass(frozen=True, slots=True)
class MapDemo:
    """The demo of a register map, made from the map (:func:`map_demo`).

    Attributes:
        steps: the script (as :data:`DEMO_SCRIPT`).
        stop: how the loop stops when every step gets its verdict: ``rejected`` when the
            script ends with a write to a read-only register, else ``done``.
        left_out: one line for each step the map cannot show, saying why.
    """

    steps: tuple[DemoStep, ...]
    stop: str
    left_out: tuple[str, ...]


def _call(tool: str, **arguments: object) -> str:
    return json.dumps({"tool": tool, "arguments": arguments})


def _valid_data(register: Register, values: dict[str, int] | None = None) -> int:
    """A byte the map's rules accept for ``register``: each writable field at a value it takes
    (``values``' when given, else its reset if that is one of its values, else its first
    enumerated value); write-1-to-clear bits, read-only fields and reserved bits 0."""
    data = 0
    for field in register.fields:
        if not field.writable or field.onwrite == "woclr":
            continue
        number = (values or {}).get(field.name, field.reset)
        if field.encode and field.name_of(number) is None:
            number = min(field.values.values())
        data |= (number << field.lsb) & field.mask
    if not register.fields:
        data = (values or {}).get("", register.reset or 0)
    return data


def _writable(register: Register, regmap: RegisterMap) -> bool:
    """Whether the demo may write ``register``: software can write it, the map neither makes
    it read-only nor protects it (no approver watches a demo), and it holds no typed value
    with a range (a raw write there is refused ``value-register``: the value is written in its
    units, by ``write_value``)."""
    return (register.writable_mask != 0 and register.addr not in regmap.read_only()
            and register.addr not in regmap.protected()
            and (register.table, register.addr) not in regmap.guarded())


def map_demo(regmap: RegisterMap) -> MapDemo:
    """The demo of any register map: read an identity register (the one the map marks, else
    the first read-only register with a reset value), a bad enumerated value corrected on its
    retry, a reserved bit refused and corrected, a block write and read, and a write to a
    read-only register, which stops the loop. Steps the map cannot show are left out, each
    with a line saying why.

    Args:
        regmap: the device's register map (with names: ``regdev demo --map FILE``).
    """
    steps: list[DemoStep] = []
    left_out: list[str] = []
    registers = list(regmap.in_table("holding"))  # (a map's other tables: read with tables)
    read_only = regmap.read_only()
    # the register the map marks as the chip's identity (regdev_identity), else the first
    # read-only one with a reset value
    identity = next((r for r in registers if r.identity and r.addr in read_only and r.reset),
                    None) or next((r for r in registers if r.addr in read_only and r.reset),
                                  None)
    if identity is not None and identity.name and identity.fields:
        steps.append((f"read the identity register {identity.name}, by name",
                      _call("read_fields", register=identity.name), "ok"))
    elif identity is not None:
        steps.append((f"read the identity register {identity.label}",
                      _call("read_register", addr=identity.addr), "ok"))
    else:
        left_out.append("reading an identity register: the map has no read-only register "
                        "with a reset value")
    enum = next(((r, f) for r in registers if r.name and _writable(r, regmap)
                 for f in r.fields if f.encode and f.writable and f.onwrite is None), None)
    if enum is not None:
        register, field = enum
        path = f"{register.name}.{field.name}"
        names = sorted(field.values, key=field.values.__getitem__)
        wanted = next((n for n in names if field.values[n] != field.reset), names[0])
        bad = "UNKNOWN"
        while bad in field.values:  # a name the field does not have
            bad += "_"
        steps.append((f"set {path} to {bad} (it has no such value)",
                      _call("write_field", field=path, value=bad), "field-value"))
        steps.append((f"retry with {wanted}", _call("write_field", field=path, value=wanted),
                      "ok"))
    else:
        left_out.append("writing a field by its enumerated name: the map has no writable "
                        "enumerated field in a register the demo may write")
    reserved = next((r for r in registers if r.reserved_mask and _writable(r, regmap)), None)
    if reserved is not None:
        good = _valid_data(reserved, {
            f.name: max(f.values.values()) if f.encode else 1 for f in reserved.fields})
        bit = reserved.reserved_mask & -reserved.reserved_mask
        steps.append((f"write 0x{good | bit:02X} to {reserved.label} (bit "
                      f"{bit.bit_length() - 1} is reserved)",
                      _call("write_register", addr=reserved.addr, data=good | bit),
                      "reserved-bits"))
        steps.append((f"retry with 0x{good:02X}",
                      _call("write_register", addr=reserved.addr, data=good), "ok"))
    else:
        left_out.append("a reserved bit: the map has no register with reserved bits the demo "
                        "may write")
    block = _block(registers, regmap)
    if len(block) >= 2:
        data = [_block_value(register, index) for index, register in enumerate(block)]
        first = block[0]
        steps.append((f"write {len(block)} registers from {first.label} at once (all or "
                      "nothing)", _call("write_registers", addr=first.addr, data=data), "ok"))
        steps.append(("read them back at once",
                      _call("read_registers", addr=first.addr, count=len(block)), "ok"))
    else:
        left_out.append("a block write and read: the map has no two consecutive registers "
                        "the demo may write")
    stop = "done"
    target = identity or next((r for r in registers if r.addr in read_only), None)
    if target is not None:
        steps.append((f"write the read-only register {target.label} (refused for good: the "
                      "loop stops)", _call("write_register", addr=target.addr, data=1),
                      "read-only-register"))
        steps.append(("never sent: the loop stopped",
                      _call("read_register", addr=target.addr), None))
        stop = "rejected"
    else:
        left_out.append("a write to a read-only register: the map has none (the loop ends "
                        "done)")
    if regmap.tables != ("holding",):  # the register tools take a table: holding's
        steps = [(what, _holding(raw), expect) for what, raw, expect in steps]
    return MapDemo(tuple(steps), stop, tuple(left_out))


def _holding(raw: str) -> str:
    """A demo call with ``"table": "holding"`` after its ``addr`` (a map with several tables);
    as it is without an ``addr``."""
    document = json.loads(raw)
    arguments = document["arguments"]
    if "addr" in arguments:
        document["arguments"] = {"addr": arguments.pop("addr"), "table": "holding",
                                 **arguments}
    return json.dumps(document)


def _block(registers: list[Register], regmap: RegisterMap) -> list[Register]:
    """The first run of 2..4 consecutive registers the demo may write, plain ones (no
    write-1-to-clear or clear-on-read bits) first."""
    def plain(register: Register) -> bool:
        return _writable(register, regmap) and not register.woclr_mask \
            and not register.rclr_mask

    for fits in (plain, lambda register: _writable(register, regmap)):
        run: list[Register] = []
        for register in registers:
            if fits(register) and (not run or register.addr == run[-1].addr + 1):
                run.append(register)
                if len(run) == 4:
                    return run
            elif len(run) >= 2:
                return run
            else:
                run = [register] if fits(register) else []
        if len(run) >= 2:
            return run
    return []


def _block_value(register: Register, index: int) -> int:
    """A value for the ``index``-th register of the block: its plain writable fields (or the
    whole register) set to 0x11 times ``index + 1``, masked; enumerated fields valid."""
    pattern = 0x11 * (index + 1)
    plain = {f.name: (pattern >> f.lsb) & (f.mask >> f.lsb) for f in register.fields
             if f.writable and not f.encode and f.onwrite is None}
    if not register.fields:
        return pattern & register.writable_mask & ~register.reserved_mask & register.top
    return _valid_data(register, plain)


class ScriptedProposer:
    """A proposer that returns fixed raw outputs in order, then None (done).

    Args:
        outputs: the raw outputs, first to last.
    """

    def __init__(self, outputs: Sequence[str | bytes]) -> None:
        self._outputs = list(outputs)
        self.calls = 0

    def __call__(self, observations: Sequence[Observation]) -> str | bytes | None:
        """Return the next output, or None when the script is spent."""
        if self.calls >= len(self._outputs):
            return None
        self.calls += 1
        return self._outputs[self.calls - 1]
