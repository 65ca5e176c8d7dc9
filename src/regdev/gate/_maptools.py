"""The tools of a register map: what a model is offered for a device, and the map's rules.

:func:`map_tools` builds the tool set of a :class:`~regdev.RegisterMap`, every tool declared
once as JSON Schema (so the compiled validator checks it and every provider format carries
it) with a ``rules`` hook for what a schema cannot say (the per-register and per-field rules),
which the gate runs after the schema's checks, before authorize:

==================  ==========================================================================
tool                what it does
==================  ==========================================================================
write_register      one byte to one register (the seed tool), ``addr`` bounded by the map
read_register       one register (the seed tool); decoded into named fields when it has some
read_registers      ``count`` registers from ``addr`` (one frame over serial)
write_registers     ``data`` (1..16 bytes) from ``addr``, all or nothing (one frame)
write_field         one field by name (``CTRL.MODE``), by enumerated name or number: one
                    atomic read-modify-write (one masked-write frame), nothing else changes
read_fields         one register by name, decoded into named fields
==================  ==========================================================================

The default map (:meth:`RegisterMap.default`) gets the two seed tools exactly as they were
(:data:`~regdev.REGISTER_TOOLS`), so its tools, verdicts and messages do not change.

Why one generic ``write_field(field, value)`` and not a tool per register
(``write_CTRL(EN, MODE)``): the field's name is one closed ``enum`` of ``REGISTER.FIELD``
strings, so a model (and constrained decoding, OpenAI's strict mode) can only name a field
that exists; one call changes one field, which is exactly what the masked write does, so a
neighbour cannot be clobbered; the tool list stays six tools whatever the size of the map
(tool choice gets worse as the list grows); and OpenAI's strict mode makes every property
required, so a per-register tool would make the model restate every field (the whole-byte
write this tool exists to avoid). What a schema cannot tie together (which values a given
field takes) is checked by the rules, whose message names the field and its values.

The rules, in the order they run (the first failure decides), each one code:

* ``no-register``: an address (or an address of a block) that is no register (a gap in the
  map, or past its end);
* ``read-only-field``: ``write_field`` on a field software cannot write (final);
* ``reserved-bits``: data that sets a bit no field defines;
* ``field-value``: a field's value outside its enumerated values or its width (for
  ``write_field``; and for the bits of an enumerated field in ``write_register`` and
  ``write_registers`` data).

A write to a register the map makes read-only is the policy's ``read-only-register`` at
authorize (the map's read-only registers are the policy's by default).
"""

from __future__ import annotations

from typing import Any

from ..core._errors import DeviceError
from ..core._observation import Refusal
from ..core._text import escape_text
from ..devices._device import DATA_MAX, MAX_BLOCK, Device
from ..devices._regmap import Field, Register, RegisterMap
from ._tools import REGISTER_TOOLS, Tool, ToolSet

__all__ = ["map_tools", "register_summary"]


def map_tools(regmap: RegisterMap) -> ToolSet:
    """The tools offered to models for a device with ``regmap`` (see the module's table).

    The default map gets :data:`~regdev.REGISTER_TOOLS` (the two seed tools, unchanged).
    ``write_field`` and ``read_fields`` are offered when some register has fields.

    Raises:
        SchemaError: never for a valid map (a bug otherwise).
    """
    if regmap.is_default:
        return REGISTER_TOOLS
    return ToolSet(_MapTools(regmap).tools())


def register_summary(regmap: RegisterMap, limit: int = 24) -> str:
    """The registers in one line for a tool description: ``ID=0x00 (read-only), CTRL=0x01,
    ...`` (the first ``limit``, then how many more)."""
    parts = []
    for register in regmap.registers[:limit]:
        name = register.name or f"register {register.addr}"
        access = {"r": " (read-only)", "w": " (write-only)"}.get(register.access or "rw", "")
        parts.append(f"{name}=0x{register.addr:02X}{access}")
    more = len(regmap) - limit
    return ", ".join(parts) + (f", and {more} more" if more > 0 else "")


def _field_summary(register: Register, field: Field) -> str:
    """``CTRL.MODE (bits 2:1, SLOW=0 FAST=1)``: a field for a tool description."""
    details = [field.bits()]
    if field.access == "r":
        details.append("read-only")
    elif field.access == "w":
        details.append("write-only")
    if field.onwrite == "woclr":
        details.append("write 1 to clear")
    if field.onread == "rclr":
        details.append("clears when read")
    if field.encode:
        details.append(" ".join(f"{name}={value}" for name, value in field.encode))
    return f"{register.name}.{field.name} ({', '.join(details)})"


class _MapTools:
    """Builds one map's tools: schemas, rules and handlers share what is worked out here."""

    def __init__(self, regmap: RegisterMap) -> None:
        self.map = regmap
        self.first, self.last = regmap.registers[0].addr, regmap.last
        self.summary = register_summary(regmap)
        self.fields = [(register, field) for register in regmap.registers if register.name
                       for field in register.fields]
        self.where = (f"{len(regmap)} registers at 0x{self.first:02X}..0x{self.last:02X}"
                      + ("" if regmap.contiguous else " (with gaps)"))
        self.device = f"the device{' ' + regmap.name if regmap.name else ''}"

    # --- schemas --------------------------------------------------------------------------

    def addr(self) -> dict[str, Any]:
        return {"type": "integer", "minimum": self.first, "maximum": self.last,
                "description": f"Register address, {self.first}..{self.last}: "
                               f"{self.summary}."}

    def tools(self) -> list[Tool]:
        data = {"type": "integer", "minimum": 0, "maximum": DATA_MAX,
                "description": f"Value to store, 0..{DATA_MAX} (one unsigned byte)."}
        clears = any(register.rclr_mask for register in self.map.registers)
        reads = ("A read clears the clear-on-read bits it returns. " if clears else "")
        tools = [
            Tool("write_register",
                 f"Write one byte to one register of {self.device} ({self.where}: "
                 f"{self.summary}). addr is the register address (integer "
                 f"{self.first}..{self.last}); data is the value (integer 0..{DATA_MAX}). Bits "
                 "of read-only fields keep their value, write-1-to-clear bits clear where "
                 "data has a 1, reserved bits must be 0. To change one field without "
                 "touching the others, use write_field. Returns the address and the value "
                 "the register holds after the write.",
                 {"type": "object", "properties": {"addr": self.addr(), "data": data},
                  "required": ["addr", "data"], "additionalProperties": False},
                 idempotent=True, destructive=True, open_world=False,
                 handler=self.write_register, rules=self.write_register_rules,
                 changes=_one_addr, repeat_risk=self.write_register_risk),
            Tool("read_register",
                 f"Read one register of {self.device} ({self.where}: {self.summary}). addr is "
                 f"the register address (integer {self.first}..{self.last}). {reads}Returns "
                 f"the address, the value (0..{DATA_MAX}) and, for a register with fields, "
                 "its fields by name.",
                 {"type": "object", "properties": {"addr": self.addr()},
                  "required": ["addr"], "additionalProperties": False},
                 read_only=True, idempotent=not clears, destructive=False, open_world=False,
                 handler=self.read_register, rules=self.addr_rules),
            Tool("read_registers",
                 f"Read {f'1..{MAX_BLOCK}'} consecutive registers of {self.device} at once, "
                 f"from addr up ({self.where}). {reads}Returns the first address and the "
                 "values, lowest address first.",
                 {"type": "object",
                  "properties": {"addr": self.addr(),
                                 "count": {"type": "integer", "minimum": 1,
                                           "maximum": min(MAX_BLOCK, len(self.map)),
                                           "description": "How many registers to read."}},
                  "required": ["addr", "count"], "additionalProperties": False},
                 read_only=True, idempotent=not clears, destructive=False, open_world=False,
                 handler=self.read_registers, rules=self.read_block_rules),
        ]
        tools.append(Tool(
            "write_registers",
            f"Write 1..{MAX_BLOCK} consecutive registers of {self.device} at once, from "
            f"addr up ({self.where}), all or nothing: every value is checked before any "
            "is written, and nothing is written if one is refused. data is the values, "
            f"lowest address first (integers 0..{DATA_MAX}). Returns the first address and "
            "the values after the write.",
            {"type": "object",
             "properties": {"addr": self.addr(),
                            "data": {"type": "array",
                                     "items": {"type": "integer", "minimum": 0,
                                               "maximum": DATA_MAX},
                                     "minItems": 1,
                                     "maxItems": min(MAX_BLOCK, len(self.map)),
                                     "description": "The values to write, lowest "
                                                    "address first."}},
             "required": ["addr", "data"], "additionalProperties": False},
            idempotent=True, destructive=True, open_world=False,
            handler=self.write_registers, rules=self.write_block_rules,
            changes=_block_addrs, repeat_risk=self.write_block_risk))
        if self.fields:
            tools.extend(self.field_tools())
        return tools

    def field_tools(self) -> list[Tool]:
        named = [register.name for register in self.map.registers
                 if register.name and register.fields]
        fields = "; ".join(_field_summary(register, field) for register, field in self.fields)
        return [
            Tool("write_field",
                 f"Set one field of one register of {self.device}, and nothing else: the "
                 "device changes only that field's bits, in one atomic read-modify-write. "
                 'field is "REGISTER.FIELD"; value is the field\'s enumerated name, or a '
                 "number that fits the field. Fields: " + fields + ". Returns the field, the "
                 "register's address, its value after and its fields by name.",
                 {"type": "object",
                  "properties": {
                      "field": {"type": "string",
                                "enum": [f"{r.name}.{f.name}" for r, f in self.fields],
                                "description": 'The field, as "REGISTER.FIELD".'},
                      "value": {"type": ["string", "integer"], "minimum": 0,
                                "maximum": DATA_MAX, "maxLength": 64,
                                "description": "The field's new value: one of its "
                                               "enumerated names, or a number within its "
                                               "width."}},
                  "required": ["field", "value"], "additionalProperties": False},
                 idempotent=True, destructive=True, open_world=False,
                 handler=self.write_field, rules=self.write_field_rules,
                 changes=self.field_addr, repeat_risk=self.write_field_risk),
            Tool("read_fields",
                 f"Read one register of {self.device} by name and decode it into its named "
                 "fields (an enumerated field by its name). register is one of: "
                 f"{', '.join(named)}.",
                 {"type": "object",
                  "properties": {"register": {"type": "string", "enum": named,
                                              "description": "The register's name."}},
                  "required": ["register"], "additionalProperties": False},
                 read_only=True,
                 idempotent=not any(self.map.named(n).rclr_mask  # type: ignore[union-attr]
                                    for n in named),
                 destructive=False, open_world=False, handler=self.read_fields),
        ]

    # --- rules (validate, after ranges) ---------------------------------------------------

    def _no_register(self, what: str, verb: str = "is") -> Refusal:
        return Refusal("validate", "no-register",
                       f"{what} {verb} not a register of this device; registers: "
                       f"{self.summary}")

    def addr_rules(self, arguments: dict[str, Any]) -> Refusal | None:
        addr = arguments["addr"]
        if self.map.at(addr) is None:
            return self._no_register(f"addr {addr}")
        return None

    def read_block_rules(self, arguments: dict[str, Any]) -> Refusal | None:
        return self._block(arguments["addr"], arguments["count"])

    def _block(self, addr: int, count: int) -> Refusal | None:
        missing = [a for a in range(addr, addr + count) if self.map.at(a) is None]
        if not missing:
            return None
        shown = ", ".join(str(a) for a in missing[:4]) + (", ..." if len(missing) > 4 else "")
        return self._no_register(
            f"the block of {count} register{'s' * (count != 1)} from addr {addr} "
            f"reaches {shown}, which", "is" if len(missing) == 1 else "are")

    def _value_rules(self, register: Register, data: int, what: str) -> Refusal | None:
        """reserved-bits, then field-value, for one byte written to ``register``."""
        reserved = data & register.reserved_mask
        if reserved:
            fields = ", ".join(f"{f.name} ({f.bits()})" for f in register.fields)
            return Refusal("validate", "reserved-bits",
                           f"{what} 0x{data:02X} sets reserved bit(s) 0x{reserved:02X} of "
                           f"register {register.label}; send them as 0 (its fields: "
                           f"{fields})")
        for field in register.fields:
            if not field.encode or not field.writable or field.onwrite == "woclr":
                continue
            number = (data & field.mask) >> field.lsb
            if field.name_of(number) is None:
                return Refusal("validate", "field-value",
                               f"{what} 0x{data:02X} would set {register.name}.{field.name} to "
                               f"{number}, which is not one of its values: "
                               f"{_enum_list(field)}")
        return None

    def write_register_rules(self, arguments: dict[str, Any]) -> Refusal | None:
        refusal = self.addr_rules(arguments)
        if refusal is not None:
            return refusal
        register = self.map.at(arguments["addr"])
        assert register is not None
        return self._value_rules(register, arguments["data"], "data")

    def write_block_rules(self, arguments: dict[str, Any]) -> Refusal | None:
        addr, data = arguments["addr"], arguments["data"]
        refusal = self._block(addr, len(data))
        if refusal is not None:
            return refusal
        for index, value in enumerate(data):
            register = self.map.at(addr + index)
            assert register is not None
            refusal = self._value_rules(register, value, f"data[{index}]")
            if refusal is not None:
                return refusal
        return None

    def write_field_rules(self, arguments: dict[str, Any]) -> Refusal | None:
        found = self.map.find_field(arguments["field"])
        assert found is not None  # the schema's enum
        register, field = found
        path = f"{register.name}.{field.name}"
        if not field.writable:
            writable = [f.name for f in register.fields if f.writable]
            others = (f"; writable fields of {register.name}: {', '.join(writable)}"
                      if writable else f"; no field of {register.name} is writable")
            return Refusal("validate", "read-only-field",
                           f"{path} is read-only (the device sets it): read it with "
                           f"read_fields{others}")
        value = arguments["value"]
        if _field_number(field, value) is None:
            got = (f'"{escape_text(value, 40)}"' if type(value) is str else str(value))
            if field.encode:
                allowed = f"one of {_enum_list(field)} (by name or number)"
            else:
                allowed = f"a number 0..{field.top} ({field.width} bit{'s' * (field.width > 1)})"
            return Refusal("validate", "field-value", f"{path} takes {allowed}, got {got}")
        return None

    def field_addr(self, arguments: dict[str, Any]) -> tuple[int, ...]:
        found = self.map.find_field(arguments["field"])
        assert found is not None
        return (found[0].addr,)

    # --- what makes a write unsafe to send twice (Tool.repeat_risk) -----------------------

    def _clears(self, addr: int, data: int) -> str | None:
        register = self.map.at(addr)
        if register is None or not data & register.woclr_mask:
            return None
        return f"it writes 1 to write-1-to-clear bits of register {register.label}"

    def write_register_risk(self, arguments: dict[str, Any]) -> str | None:
        return self._clears(arguments["addr"], arguments["data"])

    def write_block_risk(self, arguments: dict[str, Any]) -> str | None:
        addr = arguments["addr"]
        return next((risk for at, data in enumerate(arguments["data"], addr)
                     if (risk := self._clears(at, data)) is not None), None)

    def write_field_risk(self, arguments: dict[str, Any]) -> str | None:
        found = self.map.find_field(arguments["field"])
        if found is None or found[1].onwrite != "woclr":
            return None
        register, field = found
        number = _field_number(field, arguments["value"])
        return self._clears(register.addr, number << field.lsb) if number else None

    # --- handlers (execute) ---------------------------------------------------------------

    def _result(self, register: Register, value: int) -> dict[str, Any]:
        out: dict[str, Any] = {"addr": register.addr, "data": value}
        if register.name:
            out["register"] = register.name
        if register.fields:
            out["fields"] = register.decode(value)
        return out

    def write_register(self, device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
        addr, data = arguments["addr"], arguments["data"]
        register = self.map.at(addr)
        assert register is not None
        after = _byte(device.write(addr, data), f"write {addr}")
        _check_written(register, data, DATA_MAX, after)
        return self._result(register, after)

    def read_register(self, device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
        addr = arguments["addr"]
        register = self.map.at(addr)
        assert register is not None
        return self._result(register, _byte(device.read(addr), f"read {addr}"))

    def read_registers(self, device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
        addr, count = arguments["addr"], arguments["count"]
        values = device.read_block(addr, count)
        if type(values) is not list or len(values) != count:
            raise DeviceError(f"the device answered a block read of {count} with {values!r}")
        return {"addr": addr, "data": [_byte(v, f"read {addr}") for v in values]}

    def write_registers(self, device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
        addr, data = arguments["addr"], arguments["data"]
        after = device.write_block(addr, data)
        if type(after) is not list or len(after) != len(data):
            raise DeviceError(f"the device answered a block write of {len(data)} with "
                              f"{after!r}")
        for index, (value, held) in enumerate(zip(data, after, strict=True)):
            register = self.map.at(addr + index)
            assert register is not None
            _check_written(register, value, DATA_MAX, _byte(held, f"write {addr + index}"))
        return {"addr": addr, "data": after}

    def write_field(self, device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
        found = self.map.find_field(arguments["field"])
        assert found is not None
        register, field = found
        number = _field_number(field, arguments["value"])
        assert number is not None
        data = number << field.lsb
        after = _byte(device.write_masked(register.addr, field.mask, data),
                      f"write {register.name}.{field.name}")
        _check_written(register, data, field.mask, after)
        shown = field.name_of(number)
        return {"field": f"{register.name}.{field.name}",
                "value": shown if shown is not None else number,
                **self._result(register, after)}

    def read_fields(self, device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
        register = self.map.named(arguments["register"])
        assert register is not None
        return self._result(register, _byte(device.read(register.addr),
                                            f"read {register.name}"))


def _one_addr(arguments: dict[str, Any]) -> tuple[int, ...]:
    return (arguments["addr"],)


def _block_addrs(arguments: dict[str, Any]) -> tuple[int, ...]:
    addr = arguments["addr"]
    return tuple(range(addr, addr + len(arguments["data"])))


def _enum_list(field: Field) -> str:
    return ", ".join(f"{name}={value}" for name, value in field.encode)


def _field_number(field: Field, value: object) -> int | None:
    """The number ``value`` (an enumerated name, or a number) means for ``field``, or None when
    it is none of its values (an enumerated field takes only its enumerated values)."""
    if type(value) is str:
        found = field.values.get(value)
        return found
    if type(value) is not int or not 0 <= value <= field.top:
        return None
    if field.encode and field.name_of(value) is None:
        return None
    return value


def _byte(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value <= DATA_MAX:
        raise DeviceError(f"the device answered {what} with {value!r}, not a byte 0..{DATA_MAX}")
    return value


def _check_written(register: Register, data: int, mask: int, after: int) -> None:
    """A write counts only when the device holds what it should: the stored bits written
    (where they can be read back), and the write-1-to-clear bits written as 1 clear.

    Raises:
        DeviceError: the device executed the write and holds something else.
    """
    seen = register.readable_mask & mask
    wrong = ((after ^ data) & register.store_mask & seen) | (
        after & register.woclr_mask & data & seen)
    if wrong:
        raise DeviceError(f"register {register.label} holds 0x{after:02X} after writing "
                          f"0x{data:02X} (bits 0x{wrong:02X} differ)")

