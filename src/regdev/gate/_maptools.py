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
write_registers     ``data`` (1..N bytes, N the smaller of 16 and the map's number of
                    registers, as the schema and the description say) from ``addr``, all or
                    nothing (one frame); ``read_registers``' ``count`` likewise
write_field         one writable field by name (``CTRL.MODE``; a read-only field is not in
                    its ``enum``), by enumerated name or number: one atomic
                    read-modify-write (one masked-write frame), nothing else changes
read_fields         one register by name, decoded into named fields
read_value          one typed value by name (``SETPOINT``, ``ac_meter_abcn.W``), in its unit,
                    with its raw registers: its registers read in one transaction
write_value         one writable typed value by name, given in its unit: its range checked
                    exactly (decimal), then its resolution (``resolution``), then all of its
                    registers written in one atomic block write
==================  ==========================================================================

The default map (:meth:`RegisterMap.default`) gets ``write_register`` and ``read_register``
only: they are :data:`~regdev.REGISTER_TOOLS`, built here like any map's tools (and built once:
:func:`map_tools` gives the same set for every map equal to the default). What the builder
says and checks depends on what the map has: a map that has nothing to say but its size (no
name, no description, unnamed read-write registers from 0 without fields, none protected, as
the default map) gets the short wording ("one of the device's 16 registers"), without a list
of registers; a map whose registers have no fields and no gaps gets no ``rules`` hook on
``write_register`` and ``read_register`` (nothing to check after the schema), no ``changes``
hook (the address is what a call changes) and no ``repeat_risk`` hook; a map whose registers
are unnamed and without fields bounds their results (:attr:`Tool.result_bytes`). A write to a
register without fields that the device answers with another value fails with "register 3
holds 15 after writing 255"; with fields, the message shows the bits in hexadecimal.

The map's descriptions reach the model in the tools' descriptions: each register's (in
``write_register``, ``read_register`` and ``read_fields``), each field's and each enumerated
value's (in ``write_field`` for the writable fields, ``read_fields`` for all), so units,
scaling and formulas (``RSSI = -157 + value``) are where the model reads. They are the map
file's text, not the tool author's: each is escaped (printable ASCII, ``core/_text.py``) and
cut to :data:`DESCRIPTION_SHOWN` characters, and each list to :data:`LIST_SHOWN`.

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
* ``read-only-field``: ``write_field`` on a field software cannot write (final; the schema's
  ``enum`` holds only writable fields, so a call reaches this only from a caller that
  bypasses the schema: defence in depth);
* ``reserved-bits``: data that sets a bit no field defines;
* ``field-value``: a field's value outside its enumerated values or its width (for
  ``write_field``; and for the bits of an enumerated field in ``write_register`` and
  ``write_registers`` data).

A write to a register the map makes read-only is the policy's ``read-only-register`` at
authorize (the map's read-only registers are the policy's by default).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ..core._errors import DeviceError, ValueRefused
from ..core._observation import Refusal, refuse
from ..core._text import escape_text
from ..devices._device import DATA_MAX, MAX_BLOCK, Device
from ..devices._regmap import Field, Register, RegisterMap
from ..devices._values import ValueCodec
from ._maprules import MAP_RULES_SOURCE, map_changes, map_field_number, map_finding
from ._render import render_value
from ._tool import Tool, ToolSet

__all__ = ["DESCRIPTION_SHOWN", "LIST_SHOWN", "READ_REGISTER", "REGISTER_TOOLS",
           "WRITE_REGISTER", "map_tools", "read_codec", "register_summary", "rule_table",
           "value_summary"]

#: The most characters of one description from the map (a register's, a field's, an
#: enumerated value's) a tool description shows, escaped (then ``...``).
DESCRIPTION_SHOWN = 200
#: The most characters a tool description spends on its list of registers or of fields with
#: their descriptions; past it, the list says how many more there are.
LIST_SHOWN = 6000
#: The tables software can write: holding registers and coils (input registers and discrete
#: inputs are read-only).
_WRITABLE_TABLES = ("holding", "coil")
#: How a tool description names each table.
_TABLE_WORDS = {"holding": "holding registers", "input": "input registers (read-only)",
                "coil": "coils (one bit, 0..1)", "discrete": "discrete inputs (one bit, "
                                                              "read-only)"}


def map_tools(regmap: RegisterMap, *, blocks: bool = False) -> ToolSet:
    """The tools offered to models for a device with ``regmap`` (see the module's table).

    The default map gets :data:`~regdev.REGISTER_TOOLS` (``write_register`` and
    ``read_register``, built from it once), and with ``blocks`` (the shell's ``readblock``
    and ``writeblock``) ``read_registers`` and ``write_registers`` after them.
    ``write_field`` is offered when some register has a writable field, ``read_fields`` when
    some register has fields. The tool set carries the map's rules as standalone source
    (:attr:`ToolSet.standalone_rules`), so ``regdev compile --map`` writes a module whose
    verdicts are the gate's up to authorize (None when the map has no rule to check: no tool
    has a ``rules`` hook and no register is read-only, as for the default map).

    Raises:
        SchemaError: never for a valid map (a bug otherwise).
    """
    if regmap.is_default and not blocks:
        return REGISTER_TOOLS
    return _build(regmap, blocks=blocks)


def _build(regmap: RegisterMap, *, blocks: bool = False) -> ToolSet:
    built = _MapTools(regmap, blocks=blocks)
    tools = built.tools()
    checked = any(tool.rules is not None for tool in tools) or bool(regmap.read_only())
    return ToolSet(tools, standalone_rules=built.standalone_rules() if checked else None)


def rule_table(regmap: RegisterMap) -> dict[str, Any]:
    """The map's rule table (plain JSON-like data; its layout is in ``_maprules.py``): what
    the map's rules and ``changes`` hooks read, in process and in a standalone module."""
    tables: dict[str, Any] = {}
    fields: dict[str, list[int]] = {}
    guarded = regmap.guarded()
    for table in regmap.tables:
        registers = regmap.in_table(table)
        first = registers[0].addr
        rows: list[Any] = [None] * (registers[-1].addr - first + 1)
        for register in registers:
            described = []
            for index, field in enumerate(register.fields):
                values = dict(field.encode) if field.encode else None
                described.append([field.name, field.lsb, field.mask, field.writable,
                                  bool(field.encode) and field.writable
                                  and field.onwrite != "woclr", field.top, values])
                if register.name and table == "holding":
                    fields[f"{register.name}.{field.name}"] = [register.addr, index]
            rows[register.addr - first] = [register.name, register.reserved_mask, described,
                                           register.top, table in _WRITABLE_TABLES,
                                           guarded.get((table, register.addr))]
        tables[table] = [first, rows]
    typed = {value.name: [value.table, value.addr, _codec(regmap, value.name).count]
             for value in regmap.values}
    return {"tables": tables, "fields": fields, "read_only": sorted(regmap.read_only()),
            "values": typed}


def _codec(regmap: RegisterMap, name: str) -> ValueCodec:
    """The layout of ``regmap``'s value ``name`` (one of its values)."""
    codec = regmap.value(name)
    assert codec is not None
    return codec


def register_summary(regmap: RegisterMap, limit: int = 24) -> str:
    """The registers in one line for a tool description: ``ID=0x00 (read-only), CTRL=0x01,
    ...`` (the first ``limit``, then how many more)."""
    parts = []
    for register in regmap.registers[:limit]:
        name = register.name or f"register {register.addr}"
        access = {"r": " (read-only)", "w": " (write-only)"}.get(register.access or "rw", "")
        parts.append(f"{name}={_place(register)}{access}")
    more = len(regmap) - limit
    return ", ".join(parts) + (f", and {more} more" if more > 0 else "")


def _place(register: Register) -> str:
    """``0x01`` for an 8-bit holding register; its table and width otherwise: ``input
    0x0010``, ``0x0002 (16-bit)``."""
    place = f"0x{register.addr:02X}"
    if register.table != "holding":
        place = f"{register.table} {place}"
    if register.width not in (1, 8):
        place += f" ({register.width}-bit)"
    return place


def _described(text: str) -> str:
    """A description from the map as a tool description shows it: without its final period
    (the list puts its own separators), escaped (the map is a file, its text is not the
    tool author's) and cut to :data:`DESCRIPTION_SHOWN` characters."""
    return escape_text(text.rstrip("."), DESCRIPTION_SHOWN)


def _bounded_list(items: list[str], what: str, where: str, sep: str = "; ") -> str:
    """``items`` joined by ``sep`` up to :data:`LIST_SHOWN` characters, then how many more
    ``what`` there are and ``where`` to find them; an item longer than the whole (a field
    of 256 described values) is cut to it."""
    shown: list[str] = []
    used = 0
    for whole in items:  # (printable ASCII already: cutting an item is safe)
        item = whole if len(whole) <= LIST_SHOWN else whole[:LIST_SHOWN - 3] + "..."
        if shown and used + len(item) + len(sep) > LIST_SHOWN:
            break
        shown.append(item)
        used += len(item) + len(sep)
    more = len(items) - len(shown)
    return sep.join(shown) + (f"{sep}and {more} more {what} ({where})" if more else "")


def _register_entry(register: Register) -> str:
    """``CTRL=0x01: Control: enable and conversion mode.``: a register for a tool
    description, with its access and its description."""
    name = register.name or f"register {register.addr}"
    access = {"r": " (read-only)", "w": " (write-only)"}.get(register.access or "rw", "")
    text = f"{name}={_place(register)}{access}"
    if register.protected:
        text += " (protected: a write needs approval)"
    return text + (f": {_described(register.description)}" if register.description else "")


def _field_summary(register: Register, field: Field) -> str:
    """``CTRL.MODE (bits 2:1, SLEEP=0 ONESHOT=1): Conversion mode. SLEEP: no conversions``:
    a field for a tool description, with its description and its values' descriptions."""
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
    text = f"{register.name}.{field.name} ({', '.join(details)})"
    notes = [_described(field.description)] if field.description else []
    notes += [f"{name}: {_described(text)}" for name, text in field.enum_descriptions]
    return text + (": " + ". ".join(notes) if notes else "")


class _MapTools:
    """Builds one map's tools: schemas, rules and handlers share what is worked out here."""

    def __init__(self, regmap: RegisterMap, *, blocks: bool = False) -> None:
        self.map = regmap
        #: The default map's block tools too (the shell's; models are offered only two).
        self.blocks = blocks
        self.table = rule_table(regmap)
        self.first = min(register.addr for register in regmap.registers)
        self.last = max(register.addr for register in regmap.registers)
        #: The map's tables, when it has registers in another than holding: the tools then
        #: take a ``table`` argument (required), else none.
        self.tables = regmap.tables if regmap.tables != ("holding",) else ()
        #: The largest value of the widest register (255 when all are 8 bits wide).
        self.top = regmap.top
        self.summary = register_summary(regmap)
        self.fields = [(register, field) for register in regmap.in_table("holding")
                       if register.name for field in register.fields]
        self.values = [codec for codec in (regmap.value(v.name) for v in regmap.values)
                       if codec is not None]
        #: write_value's conversions by ``(name, type, value)``, from its rules to its
        #: handler (a value is converted once a call; at most :data:`_CONVERTED` kept).
        self.converted: dict[tuple[str, type, object], int | float | bool | str] = {}
        self.writable = [(register, field) for register, field in self.fields
                         if field.writable]
        self.where = (f"{len(regmap)} registers at 0x{self.first:02X}..0x{self.last:02X}"
                      + ("" if regmap.contiguous else " (with gaps)"))
        self.device = f"the device{' ' + _described(regmap.name) if regmap.name else ''}"
        self.block = min(MAX_BLOCK, len(regmap))
        self.registers = _bounded_list([_register_entry(r) for r in regmap.registers],
                                       "registers", "read_register gives any of them")
        fielded = any(register.fields for register in regmap.registers)
        #: The map says nothing but its size (the default map): the short wording.
        self.bare = (not regmap.name and not regmap.description and regmap.contiguous
                     and self.first == 0 and all(
                         register.name is None and not register.description
                         and not register.fields and register.access == "rw"
                         and not register.protected for register in regmap.registers))
        #: No gap, no field, one width, no guarded value (``Value.guarded``): write_register
        #: and read_register have no rule to check after the schema's, and a write changes its
        #: address and is harmless to repeat.
        self.simple = (regmap.contiguous and not fielded
                       and all(r.width == regmap.widest for r in regmap.registers)
                       and not any(value.guarded for value in regmap.values))
        #: The 8-bit read-write holding registers without fields, by address, each with its
        #: result's ``register`` name (None for an unnamed one): a write there stores what it
        #: writes, and a result is ``{"addr", "data"}`` and the name, nothing else.
        self.plain: dict[int, str | None] = {
            register.addr: register.name for register in regmap.in_table("holding")
            if not register.fields and register.access == "rw" and register.width == 8}
        #: The most bytes a write_register or read_register result takes, when no register
        #: adds fields or a table to it: ``{"addr":15,"data":255}`` is 22, a name adds
        #: ``,"register":"NAME"`` (an identifier: no escapes).
        self.result_bytes = None if fielded or self.tables else max(
            (len(f'{{"addr":{register.addr},"data":{register.top}}}')
             + (len(f',"register":"{register.name}"') if register.name else 0)
             for register in regmap.registers), default=0) or None

    def standalone_rules(self) -> str:
        """Source defining ``tool_rules(name, a)`` for a standalone module: the map's rules'
        code, then ``read-only-register`` for a write the map makes impossible (what the gate
        answers at authorize, with no policy file); None when all hold."""
        return (MAP_RULES_SOURCE + "\n\n_MAP = " + render_value(self.table) + "\n"
                "_READ_ONLY = frozenset(_MAP['read_only'])\n\n\n"
                "def tool_rules(name, a):\n"
                '    """None when the map\'s rules hold for a call that passed the schema, '
                'else its code."""\n'
                "    finding = map_finding(_MAP, name, a)\n"
                "    if finding is not None:\n"
                "        return finding[0]\n"
                "    if not _READ_ONLY.isdisjoint(map_changes(_MAP, name, a)):\n"
                "        return 'read-only-register'\n"
                "    return None\n")

    def changes(self, name: str) -> Any:
        """The ``changes`` hook of tool ``name``: the registers its call may change."""
        return functools.partial(map_changes, self.table, name)

    # --- schemas --------------------------------------------------------------------------

    def addr(self) -> dict[str, Any]:
        listed = "" if self.bare else f": {self.summary}"
        return {"type": "integer", "minimum": self.first, "maximum": self.last,
                "description": f"Register address, {self.first}..{self.last}{listed}."}

    def with_table(self, properties: dict[str, Any], required: list[str], *,
                   write: bool = False) -> dict[str, Any]:
        """A tool's input schema: ``properties`` (addr first), with a required ``table``
        after ``addr`` when the map has tables other than holding."""
        if self.tables:
            words = "; ".join(_TABLE_WORDS[table] for table in self.tables)
            note = (" Input registers and discrete inputs are read-only." if write
                    and any(t not in _WRITABLE_TABLES for t in self.tables) else "")
            table = {"type": "string", "enum": list(self.tables),
                     "description": f"The register's table: {words}.{note}"}
            properties = {"addr": properties["addr"], "table": table,
                          **{k: v for k, v in properties.items() if k != "addr"}}
            required = [required[0], "table", *required[1:]]
        return {"type": "object", "properties": properties, "required": required,
                "additionalProperties": False}

    def tools(self) -> list[Tool]:
        top = self.top
        shape = ("(one unsigned byte)" if top == DATA_MAX else
                 "(each register's width bounds it: 0..255 for 8 bits, 0..65535 for 16, "
                 "0..1 for a coil)")
        data = {"type": "integer", "minimum": 0, "maximum": top,
                "description": f"Value to store, 0..{top} {shape}."}
        clears = any(register.rclr_mask for register in self.map.registers)
        reads = ("A read clears the clear-on-read bits it returns. " if clears else "")
        about = (f" The device: {_described(self.map.description)}."
                 if self.map.description else "")
        # The wording follows what the map has: a bare map's tools say its size and range.
        unit = "one byte" if top == DATA_MAX else "one value"
        tables = (" table is the register's table (holding, input, coil, discrete: an "
                  "address is one register in each)." if self.tables else "")
        if self.bare:
            one = f"one of the device's {len(self.map)} registers"
            writes, reads_one = f"Write {unit} to {one}.", f"Read {one}."
            fields_note = registers = ""
            read_result = f" and its current value (0..{top})."
        else:
            one = f"one register of {self.device} ({self.where}).{about}"
            writes, reads_one = f"Write {unit} to {one}", f"Read {one}"
            fields_note = (" Bits of read-only fields keep their value, write-1-to-clear bits "
                           "clear where data has a 1, reserved bits must be 0. To change one "
                           "field without touching the others, use write_field.")
            registers = f" Registers: {self.registers}."
            read_result = (f", the value (0..{top}) and, for a register with fields, "
                           "its fields by name.")
        simple = self.simple
        tools = [
            Tool("write_register",
                 f"{writes} addr is the register address (integer {self.first}..{self.last});"
                 f"{tables} data is the value (integer 0..{top}).{fields_note} Returns the "
                 f"address and the value the register holds after the write.{registers}",
                 self.with_table({"addr": self.addr(), "data": data}, ["addr", "data"],
                                 write=True),
                 idempotent=True, destructive=True, open_world=False,
                 handler=self.write_register,
                 rules=None if simple else self.rules("write_register"),
                 changes=None if simple else self.changes("write_register"),
                 repeat_risk=None if simple else self.write_register_risk,
                 result_bytes=self.result_bytes),
            Tool("read_register",
                 f"{reads_one} addr is the register address (integer {self.first}..{self.last})"
                 f".{tables} {reads}Returns the address{read_result}{registers}",
                 self.with_table({"addr": self.addr()}, ["addr"]),
                 read_only=True, idempotent=not clears, destructive=False, open_world=False,
                 handler=self.read_register,
                 rules=None if simple else self.rules("read_register"),
                 result_bytes=self.result_bytes),
        ]
        if self.map.is_default and not self.blocks:
            return tools  # the default map offers the two tools regdev has always offered
        tools += [
            Tool("read_registers",
                 f"Read 1..{self.block} consecutive registers of {self.device} at once, "
                 f"from addr up ({self.where}). count is how many (integer 1..{self.block}). "
                 f"{reads}Returns the first address and the values, lowest address first.",
                 self.with_table({"addr": self.addr(),
                                  "count": {"type": "integer", "minimum": 1,
                                            "maximum": self.block,
                                            "description": "How many registers to read, "
                                                           f"1..{self.block}."}},
                                 ["addr", "count"]),
                 read_only=True, idempotent=not clears, destructive=False, open_world=False,
                 handler=self.read_registers, rules=self.rules("read_registers")),
        ]
        tools.append(Tool(
            "write_registers",
            f"Write 1..{self.block} consecutive registers of {self.device} at once, from "
            f"addr up ({self.where}), all or nothing: every value is checked before any "
            "is written, and nothing is written if one is refused. data is the values, "
            f"lowest address first (1..{self.block} integers 0..{top}). Returns the "
            "first address and the values after the write.",
            self.with_table({"addr": self.addr(),
                             "data": {"type": "array",
                                      "items": {"type": "integer", "minimum": 0,
                                                "maximum": top},
                                      "minItems": 1,
                                      "maxItems": self.block,
                                      "description": f"The values to write (1..{self.block}),"
                                                     " lowest address first."}},
                            ["addr", "data"], write=True),
            idempotent=True, destructive=True, open_world=False,
            handler=self.write_registers, rules=self.rules("write_registers"),
            changes=self.changes("write_registers"), repeat_risk=self.write_block_risk))
        if self.writable:
            tools.append(self.write_field_tool())
        if self.fields:
            tools.append(self.read_fields_tool())
        if any(codec.value.readable for codec in self.values):
            tools.append(self.read_value_tool())
        if any(codec.value.writable for codec in self.values):
            tools.append(self.write_value_tool())
        return tools

    # --- typed values ---------------------------------------------------------------------

    def read_value_tool(self) -> Tool:
        readable = [codec for codec in self.values if codec.value.readable]
        entries = _bounded_list([value_summary(codec) for codec in readable], "values",
                                "read_registers gives their registers")
        return Tool(
            "read_value",
            f"Read one typed value of {self.device} by name, in its engineering unit: its "
            "registers are read in one transaction and converted (scale, offset, scale "
            "factor, byte and word order). name is one of the values. Returns the name, "
            "the value (a number in its unit, an enumerated name, true/false or text; a "
            'float that holds NaN or an infinity as "NaN", "Infinity" or "-Infinity"), the '
            f"unit, the first address and the raw registers. Values: {entries}.",
            {"type": "object",
             "properties": {"name": {"type": "string",
                                     "enum": [codec.value.name for codec in readable],
                                     "description": "The value's name."}},
             "required": ["name"], "additionalProperties": False},
            read_only=True, idempotent=True, destructive=False, open_world=False,
            handler=self.read_value)

    def write_value_tool(self) -> Tool:
        writable = [codec for codec in self.values if codec.value.writable]
        entries = _bounded_list([value_summary(codec) for codec in writable], "values",
                                "read_value lists the readable ones")
        longest = max([64] + [codec.count * codec.width // 8 for codec in writable
                              if codec.value.kind == "string"])
        return Tool(
            "write_value",
            f"Write one typed value of {self.device} by name, in its engineering unit: value "
            "is checked against the value's range (exactly, in its unit) and its resolution "
            "(a number that does not convert to a whole raw value is refused, naming the "
            "nearest that do), converted, and all of its registers are written in one "
            "atomic write. value is a number in the value's unit (an integer value's "
            "enumerated name is taken too), true/false for a bool, text for a string. "
            "Returns the name, the value the device holds after, the unit and the raw "
            f"registers. Writable values: {entries}.",
            {"type": "object",
             "properties": {
                 "name": {"type": "string",
                          "enum": [codec.value.name for codec in writable],
                          "description": "The value's name."},
                 "value": {"type": ["number", "string", "boolean"], "maxLength": longest,
                           "description": "The new value, in the value's unit."}},
             "required": ["name", "value"], "additionalProperties": False},
            idempotent=True, destructive=True, open_world=False,
            handler=self.write_value, rules=self.value_rules,
            changes=self.changes("write_value"))

    def value_rules(self, arguments: dict[str, Any]) -> Refusal | None:
        """``write_value``'s checks after the schema: the value's type, its range in units and
        its resolution (for a value with a scale factor, what depends on the factor is
        checked when the factor has been read, before anything is written)."""
        codec = self.map.value(arguments["name"])
        assert codec is not None
        if codec.factor is not None:
            given = arguments["value"]
            if type(given) is str or type(given) is bool:
                problem = codec.raw_of(given)[1]
            else:
                low, high = codec.value.min, codec.value.max
                problem = (None if (low is None or low <= given) and (high is None
                                                                      or given <= high)
                           else codec.raw_of(given, 0)[1])
        else:
            given = arguments["value"]
            raw, problem = codec.raw_of(given)
            if raw is not None:  # (the handler takes it from here: converted once)
                if len(self.converted) >= _CONVERTED:
                    self.converted.clear()
                self.converted[codec.value.name, type(given), given] = raw
        return None if problem is None else refuse(problem[0], problem[1], "validate")

    def _value_result(self, codec: ValueCodec, registers: list[int], sf: int | None
                      ) -> dict[str, Any]:
        out: dict[str, Any] = {"name": codec.value.name,
                               "value": codec.engineering(codec.from_registers(registers), sf)}
        if codec.value.unit:
            out["unit"] = codec.value.unit
        out["addr"] = codec.value.addr
        out["raw"] = registers
        return out

    def read_value(self, device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
        codec = self.map.value(arguments["name"])
        assert codec is not None
        registers, sf = read_codec(device, self.map, codec)
        return self._value_result(codec, registers, sf)

    def write_value(self, device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
        """Convert and write all of the value's registers in one atomic block write (one
        register: one write); count it done only when the device holds what was written.

        Raises:
            ValueRefused: a value with a scale factor that does not convert at the factor
                the device holds (nothing written).
            DeviceError: the device holds something else after the write.
        """
        codec = self.map.value(arguments["name"])
        assert codec is not None
        sf = None
        if codec.factor is not None:
            factor = codec.factor
            sf_value = factor.from_registers(_read_span(
                device, factor.value.table, factor.value.addr, factor.count, factor.value.name))
            assert type(sf_value) is int
            sf = sf_value
        given = arguments["value"]
        raw = (self.converted.get((codec.value.name, type(given), given)) if sf is None
               else None)
        problem = None
        if raw is None:
            raw, problem = codec.raw_of(given, sf)
        if problem is not None:  # (the map's min and max held at validate: the factor's)
            raise ValueRefused(f"{problem[1]} (at the scale factor the device holds, "
                               f"{codec.factor.value.name if codec.factor else ''} = {sf})",
                               "resolution")
        assert raw is not None
        registers = codec.to_registers(raw)
        addr = codec.value.addr
        after = device.write_table(codec.value.table, addr, registers)
        if after != registers:
            raise DeviceError(f"value {codec.value.name} holds {_hex_list(after)} after "
                              f"writing {_hex_list(registers)}")
        # (the device holds what was written: the value after is the raw value's)
        out: dict[str, Any] = {"name": codec.value.name, "value": codec.engineering(raw, sf)}
        if codec.value.unit:
            out["unit"] = codec.value.unit
        out["addr"] = addr
        out["raw"] = registers
        return out

    def write_field_tool(self) -> Tool:
        fields = _bounded_list([_field_summary(r, f) for r, f in self.writable],
                               "fields", "read_fields decodes a register into its fields")
        read_only = [f"{r.name}.{f.name}" for r, f in self.fields if not f.writable]
        others = (f" Read-only fields, which no call can write (read them with read_fields): "
                  f"{_bounded_list(read_only, 'fields', 'read_fields lists them', ', ')}."
                  if read_only else "")
        return Tool(
            "write_field",
            f"Set one field of one register of {self.device}, and nothing else: the "
            "device changes only that field's bits, in one atomic read-modify-write. "
            'field is "REGISTER.FIELD", one of the writable fields; value is the field\'s '
            "enumerated name, or a number that fits the field. Returns the field, the "
            "register's address, its value after and its fields by name. Writable fields: "
            f"{fields}.{others}",
            {"type": "object",
             "properties": {
                 "field": {"type": "string",
                           "enum": [f"{r.name}.{f.name}" for r, f in self.writable],
                           "description": 'The field, as "REGISTER.FIELD".'},
                 "value": {"type": ["string", "integer"], "minimum": 0,
                           "maximum": self.top, "maxLength": 64,
                           "description": "The field's new value: one of its "
                                          "enumerated names, or a number within its "
                                          "width."}},
             "required": ["field", "value"], "additionalProperties": False},
            idempotent=True, destructive=True, open_world=False,
            handler=self.write_field, rules=self.rules("write_field"),
            changes=self.changes("write_field"), repeat_risk=self.write_field_risk)

    def read_fields_tool(self) -> Tool:
        named = [register for register in self.map.registers
                 if register.name and register.fields]
        entries = [_register_entry(register) + " [fields: " + ", ".join(
            _field_summary(register, field).removeprefix(f"{register.name}.")
            for field in register.fields) + "]" for register in named]
        return Tool(
            "read_fields",
            f"Read one register of {self.device} by name and decode it into its named "
            "fields (an enumerated field by its name). register is one of the registers: "
            f"{_bounded_list(entries, 'registers', 'read_register gives any register')}.",
            {"type": "object",
             "properties": {"register": {"type": "string",
                                         "enum": [register.name for register in named],
                                         "description": "The register's name."}},
             "required": ["register"], "additionalProperties": False},
            read_only=True,
            idempotent=not any(register.rclr_mask for register in named),
            destructive=False, open_world=False, handler=self.read_fields)

    # --- rules (validate, after ranges) ---------------------------------------------------

    def rules(self, name: str) -> Any:
        """The ``rules`` hook of tool ``name``: the map's rules (``_maprules.py``), each
        finding worded for a model."""
        table = self.table
        # The addresses at which a call of the one-register tools breaks no rule whatever
        # the schema let through (a register; for a write, no reserved bit and no field
        # whose values are checked): worked out once, so that such a call costs one lookup.
        # A holding register, named without a table argument; for a write, one that takes
        # every value the schema lets through (as wide as the widest), is writable and holds
        # no guarded value.
        first, rows = table["tables"].get("holding", (0, []))
        free = frozenset(
            first + index for index, row in enumerate(rows) if row is not None and (
                name == "read_register" or (
                    name == "write_register" and row[4] and not row[1] and row[5] is None
                    and row[3] >= self.top and not any(field[4] for field in row[2]))))

        def rules(arguments: dict[str, Any]) -> Refusal | None:
            if free and "table" not in arguments and arguments["addr"] in free:
                return None
            finding = map_finding(table, name, arguments)
            return None if finding is None else self.refusal(name, arguments, finding)

        return rules

    def refusal(self, name: str, arguments: dict[str, Any], finding: tuple[Any, ...]
                ) -> Refusal:
        """The refusal of a call of ``name`` whose rules gave ``finding``."""
        code = finding[0]
        table = arguments.get("table", "holding")
        if code == "no-register":
            missing: list[int] = finding[1]
            if name in ("read_register", "write_register"):
                return self._no_register(f"addr {missing[0]}"
                                         + (f" of the {table} table" if self.tables else ""))
            count = (arguments["count"] if name == "read_registers"
                     else len(arguments["data"]))
            shown = (", ".join(str(a) for a in missing[:4])
                     + (", ..." if len(missing) > 4 else ""))
            return self._no_register(
                f"the block of {count} register{'s' * (count != 1)} from addr "
                f"{arguments['addr']} reaches {shown}, which",
                "is" if len(missing) == 1 else "are")
        if name == "write_field":
            register = self.map.at(finding[1])
            assert register is not None
            field = register.fields[finding[2]]
            if code == "value-register":
                return self._value_register(f"{register.name}.{field.name} is a field of "
                                            f"register {register.label}, which",
                                            finding[3])
            return self._field_refusal(register, field, code, arguments["value"])
        index, addr, data = finding[1], finding[2], finding[3]
        register = self.map.at(addr, table)
        assert register is not None
        what = f"data[{index}]" if name == "write_registers" else "data"
        if code == "value-register":
            return self._value_register(
                f"{what} is for register {register.label}, which", finding[4])
        if code.startswith("range-data"):  # as the schema says it of a value past its bound
            return refuse(code, f"{what} {data} is outside 0..{finding[4]} (register "
                                f"{register.label} is {register.width} "
                                f"bit{'s' * (register.width > 1)} wide)")
        if code == "read-only-register":
            return refuse(code, f"register {register.label} is read-only: the {table} table "
                                "cannot be written (input registers and discrete inputs are "
                                "the device's); read it with read_register", "validate")
        if code == "reserved-bits":
            fields = ", ".join(f"{f.name} ({f.bits()})" for f in register.fields)
            return refuse("reserved-bits",
                          f"{what} 0x{data:02X} sets reserved bit(s) 0x{finding[4]:02X} of "
                          f"register {register.label}; send them as 0 (its fields: "
                          f"{fields})")
        field = register.fields[finding[4]]
        return refuse("field-value",
                      f"{what} 0x{data:02X} would set {register.name}.{field.name} to "
                      f"{finding[5]}, which is not one of its values: {_enum_list(field)}")

    def _value_register(self, what: str, name: str) -> Refusal:
        """``value-register``: ``what`` (a register, "which") holds part of the guarded value
        ``name``, which only ``write_value`` writes."""
        codec = _codec(self.map, name)
        value = codec.value
        if value.min is None and value.max is None:  # (a float that takes no NaN)
            shown = "finite numbers only"
        else:
            low, high = (codec.bounds() if codec.factor is None else (value.min, value.max))
            shown = ("" if low is None else f"{low}") + ".." + (
                "" if high is None else codec.unit_text(high))
        first, last = codec.addresses[0], codec.addresses[-1]
        place = (f"register 0x{first:02X}" if first == last
                 else f"registers 0x{first:02X}..0x{last:02X}")
        return refuse("value-register",
                      f"{what} holds part of value {name} ({value.type}, {shown}, "
                      f"{place}): a raw write could put it outside its range; write it in "
                      f"units with write_value")

    def _no_register(self, what: str, verb: str = "is") -> Refusal:
        return refuse("no-register",
                      f"{what} {verb} not a register of this device; registers: "
                      f"{self.summary}")

    def _field_refusal(self, register: Register, field: Field, code: str,
                       value: object) -> Refusal:
        path = f"{register.name}.{field.name}"
        if code == "read-only-field":
            writable = [f.name for f in register.fields if f.writable]
            others = (f"; writable fields of {register.name}: {', '.join(writable)}"
                      if writable else f"; no field of {register.name} is writable")
            return refuse("read-only-field",
                          f"{path} is read-only (the device sets it): read it with "
                          f"read_fields{others}")
        got = (f'"{escape_text(value, 40)}"' if type(value) is str else str(value))
        if field.encode:
            allowed = f"one of {_enum_list(field)} (by name or number)"
        else:
            allowed = f"a number 0..{field.top} ({field.width} bit{'s' * (field.width > 1)})"
        return refuse("field-value", f"{path} takes {allowed}, got {got}")

    # --- what makes a write unsafe to send twice (Tool.repeat_risk) -----------------------

    def _clears(self, addr: int, data: int, table: str = "holding") -> str | None:
        register = self.map.at(addr, table)
        if register is None or not data & register.woclr_mask:
            return None
        return f"it writes 1 to write-1-to-clear bits of register {register.label}"

    def write_register_risk(self, arguments: dict[str, Any]) -> str | None:
        return self._clears(arguments["addr"], arguments["data"],
                            arguments.get("table", "holding"))

    def write_block_risk(self, arguments: dict[str, Any]) -> str | None:
        addr, table = arguments["addr"], arguments.get("table", "holding")
        return next((risk for at, data in enumerate(arguments["data"], addr)
                     if (risk := self._clears(at, data, table)) is not None), None)

    def write_field_risk(self, arguments: dict[str, Any]) -> str | None:
        addr, index = self.table["fields"][arguments["field"]]
        register = self.map.at(addr)
        assert register is not None
        field = register.fields[index]
        if field.onwrite != "woclr":
            return None
        number = map_field_number(self._field_row(addr, index), arguments["value"])
        return self._clears(addr, number << field.lsb) if number else None

    def _field_row(self, addr: int, index: int) -> list[Any]:
        """The rule table's row of field ``index`` of holding register ``addr``."""
        first, rows = self.table["tables"]["holding"]
        row: list[Any] = rows[addr - first][2][index]
        return row

    # --- handlers (execute) ---------------------------------------------------------------

    def _result(self, register: Register, value: int) -> dict[str, Any]:
        out: dict[str, Any] = {"addr": register.addr, "data": value}
        if register.name:
            out["register"] = register.name
        if register.fields:
            out["fields"] = register.decode(value)
        return out

    def write_register(self, device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
        """Write, and count it done only when the device holds what it should; otherwise
        the device did execute the write (the register changed), so the failure is a
        :class:`DeviceError`, never a refusal."""
        addr, data = arguments["addr"], arguments["data"]
        table = arguments.get("table", "holding")
        if table != "holding":
            return self.write_registers(device, {"addr": addr, "table": table,
                                                 "data": [data]}, one=True)
        after = device.write(addr, data)
        # (data is a validated int 0..255, one of CPython's cached small ints: a device that
        # answers a plain register with an equal int answers with that very object; anything
        # else takes the full check below.)
        if after is data and addr in self.plain:
            name = self.plain[addr]
            return {"addr": addr, "data": after} if name is None else \
                {"addr": addr, "data": after, "register": name}
        register = self.map.at(addr)
        assert register is not None
        after = _value(after, register, f"write {addr}")
        _check_written(register, data, register.top, after)
        return self._result(register, after)

    def read_register(self, device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
        addr = arguments["addr"]
        table = arguments.get("table", "holding")
        if table != "holding":
            register = self.map.at(addr, table)
            assert register is not None
            values = device.read_table(table, addr, 1)
            if type(values) is not list or len(values) != 1:
                raise DeviceError(f"the device answered a read of {register.label} with "
                                  f"{values!r}")
            return {"table": table,
                    **self._result(register, _value(values[0], register, f"read {addr}"))}
        data = device.read(addr)
        if addr in self.plain and type(data) is int and 0 <= data <= DATA_MAX:
            name = self.plain[addr]
            return {"addr": addr, "data": data} if name is None else \
                {"addr": addr, "data": data, "register": name}
        register = self.map.at(addr)
        assert register is not None
        return self._result(register, _value(data, register, f"read {addr}"))

    def read_registers(self, device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
        addr, count = arguments["addr"], arguments["count"]
        table = arguments.get("table", "holding")
        values = (device.read_block(addr, count) if table == "holding"
                  else device.read_table(table, addr, count))
        if type(values) is not list or len(values) != count:
            raise DeviceError(f"the device answered a block read of {count} with {values!r}")
        shown = [_value(value, self.map.at(at, table), f"read {addr}")
                 for at, value in enumerate(values, addr)]
        return {"addr": addr, **({"table": table} if self.tables else {}), "data": shown}

    def write_registers(self, device: Device, arguments: dict[str, Any], *,
                        one: bool = False) -> dict[str, Any]:
        addr, data = arguments["addr"], arguments["data"]
        table = arguments.get("table", "holding")
        after = (device.write_block(addr, data) if table == "holding"
                 else device.write_table(table, addr, data))
        if type(after) is not list or len(after) != len(data):
            raise DeviceError(f"the device answered a block write of {len(data)} with "
                              f"{after!r}")
        for index, (value, held) in enumerate(zip(data, after, strict=True)):
            register = self.map.at(addr + index, table)
            assert register is not None
            _check_written(register, value, register.top,
                           _value(held, register, f"write {addr + index}"))
        if one:
            register = self.map.at(addr, table)
            assert register is not None
            return {"table": table, **self._result(register, after[0])}
        return {"addr": addr, **({"table": table} if self.tables else {}), "data": after}

    def write_field(self, device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
        addr, index = self.table["fields"][arguments["field"]]
        register = self.map.at(addr)
        assert register is not None
        field = register.fields[index]
        number = map_field_number(self._field_row(addr, index), arguments["value"])
        assert number is not None
        data = number << field.lsb
        after = _value(device.write_masked(register.addr, field.mask, data), register,
                       f"write {register.name}.{field.name}")
        _check_written(register, data, field.mask, after)
        shown = field.name_of(number)
        return {"field": f"{register.name}.{field.name}",
                "value": shown if shown is not None else number,
                **self._result(register, after)}

    def read_fields(self, device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
        register = self.map.named(arguments["register"])
        assert register is not None
        return self._result(register, _value(device.read(register.addr), register,
                                             f"read {register.name}"))


#: The most conversions ``write_value``'s rules keep for its handler.
_CONVERTED = 256


def read_codec(device: Device, regmap: RegisterMap, codec: ValueCodec
               ) -> tuple[list[int], int | None]:
    """The registers of ``codec`` and its scale factor's raw value (None without one),
    read in one transaction (the factor with them when one block holds both)."""
    addr, count, table = codec.value.addr, codec.count, codec.value.table
    factor = codec.factor
    if factor is None:
        return _read_span(device, table, addr, count, codec.value.name), None
    low = min(addr, factor.value.addr)
    high = max(addr + count, factor.value.addr + factor.count)
    if factor.value.table == table and high - low <= MAX_BLOCK and all(
            regmap.at(a, table) is not None for a in range(low, high)):
        block = _read_span(device, table, low, high - low, codec.value.name)
        registers = block[addr - low:addr - low + count]
        sf_registers = block[factor.value.addr - low:
                             factor.value.addr - low + factor.count]
    else:  # apart: the factor is a constant of the device
        sf_registers = _read_span(device, factor.value.table, factor.value.addr,
                                  factor.count, factor.value.name)
        registers = _read_span(device, table, addr, count, codec.value.name)
    sf = factor.from_registers(sf_registers)
    assert type(sf) is int
    return registers, sf


def _read_span(device: Device, table: str, addr: int, count: int, what: str) -> list[int]:
    """``count`` registers of ``table`` from ``addr`` in one transaction
    (:meth:`Device.read_table`)."""
    values = device.read_table(table, addr, count)
    if type(values) is not list or len(values) != count or not all(
            type(v) is int and v >= 0 for v in values):
        raise DeviceError(f"the device answered a read of {what} ({count} register"
                          f"{'s' * (count != 1)} from {addr}) with {values!r}")
    return values


def value_summary(codec: ValueCodec) -> str:
    """``SETPOINT (int16, 5.0..35.0 degC, resolution 0.1; 0x10..0x11): Target temperature``:
    a typed value for a tool description."""
    value = codec.value
    kind = value.kind
    details = [value.type if kind != "string" else
               f"string of {codec.count * codec.width // 8} bytes, {value.encoding}"]
    if kind in ("int", "float"):
        if codec.factor is not None:
            low, high = value.min, value.max
            details.append(f"x 10^{codec.factor.value.name}")
            if low is not None or high is not None:
                details.append(f"{'' if low is None else low}..{'' if high is None else high}")
        else:
            low_b, high_b = codec.bounds()
            details.append(f"{low_b}..{codec.unit_text(high_b)}"
                           if value.min is not None or value.max is not None
                           or codec.scaled else "")
        step = codec.resolution()
        if step is not None and codec.factor is None and codec.scaled:
            details.append(f"resolution {step}")
        if value.unit:
            details.append(f"unit {escape_text(value.unit, 32)}")
        if value.enum:
            details.append(" ".join(f"{name}={raw}" for name, raw in value.enum))
    if value.access == "r":
        details.append("read-only")
    elif value.access == "w":
        details.append("write-only")
    first, last = codec.addresses[0], codec.addresses[-1]
    details.append(f"register 0x{first:02X}" if first == last
                   else f"registers 0x{first:02X}..0x{last:02X}")
    text = f"{value.name} ({', '.join(d for d in details if d)})"
    return text + (f": {_described(value.description)}" if value.description else "")


def _enum_list(field: Field) -> str:
    return ", ".join(f"{name}={value}" for name, value in field.encode)


def _value(value: object, register: Register | None, what: str) -> int:
    """``value`` when it is an int that fits ``register``; else :class:`DeviceError`."""
    top = register.top if register is not None else DATA_MAX
    if type(value) is not int or not 0 <= value <= top:
        kind = "a byte" if top == DATA_MAX else "a value"
        raise DeviceError(f"the device answered {what} with {value!r}, not {kind} 0..{top}")
    return value


def _hex_list(values: Sequence[int]) -> str:
    """Registers' values as a register mismatch shows them: ``[0x00, 0xC8]``."""
    return "[" + ", ".join(f"0x{value:02X}" for value in values) + "]"


def _check_written(register: Register, data: int, mask: int, after: int) -> None:
    """A write counts only when the device holds what it should: the stored bits written
    (where they can be read back), and the write-1-to-clear bits written as 1 clear.

    Raises:
        DeviceError: the device executed the write and holds something else: "register 3
            holds 15 after writing 255" for a register without fields, else with the bits in
            hexadecimal and those that differ.
    """
    seen = register.readable_mask & mask
    wrong = ((after ^ data) & register.store_mask & seen) | (
        after & register.woclr_mask & data & seen)
    if wrong and not register.fields:
        raise DeviceError(f"register {register.label} holds {after} after writing {data}")
    if wrong:
        raise DeviceError(f"register {register.label} holds 0x{after:02X} after writing "
                          f"0x{data:02X} (bits 0x{wrong:02X} differ)")


#: The two tools regdev offers by default, ``write_register`` first: the default map's tools.
REGISTER_TOOLS = _build(RegisterMap.default())
#: ``write_register`` of the default map: one byte to one of 16 registers.
WRITE_REGISTER = REGISTER_TOOLS["write_register"]
#: ``read_register`` of the default map: one of 16 registers.
READ_REGISTER = REGISTER_TOOLS["read_register"]
