"""Register maps: what a device's registers are called, where they are, and how they behave.

A :class:`RegisterMap` is a list of 8-bit :class:`Register` objects, each with an address,
an optional name, and :class:`Field` objects that give bit ranges names, software access,
reset values, enumerated values, write-1-to-clear and clear-on-read. It drives everything
regdev does with a device: the in-process register file and the firmware simulator honour
it, the tools offered to models and the checks before the device come from it, and so do the
policy's defaults (see ``docs/maps.md``).

Rules of this file:

* Standard library only: the firmware simulator runs it without regdev's dependencies, and
  reads maps in the compiled JSON form of :meth:`RegisterMap.to_json` (``"format":
  "regdev-map"``, version 1), which regdev writes from SystemRDL (``regdev map FILE --json``).
* Every map is checked when it is made: a map that is not consistent (overlapping fields, a
  reset value wider than its field, two registers at one address) raises :class:`MapError`
  naming the register and field, so the device, the tools and the checks never meet one.
* The behaviour of a write, a masked write and a read is defined here, once
  (:meth:`Register.refuse_write`, :meth:`Register.written`, :meth:`Register.read_effect`),
  and the register file applies it.

What a register does, by the bits of its fields:

=================  ==============================================================
bits               behaviour
=================  ==============================================================
read-write         a write stores the written bits
write-1-to-clear   (``onwrite = woclr``) a written 1 clears the bit, a 0 leaves it
read-only          a write leaves them as they are (the hardware sets them)
write-only         read as 0
clear-on-read      (``onread = rclr``) a read returns them, then clears them to 0
reserved           (in no field) read as 0; a write that sets one is refused
=================  ==============================================================

A register no software access can write (every field read-only) refuses every write. A
register given without fields is one read-write (or read-only, or write-only) byte: the
default map (:meth:`RegisterMap.default`) is 16 such registers, unnamed, reset 0, which is
the device regdev had before it had maps.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as _dataclass_field
from typing import Any, Final

from ..core._errors import MapError
from ..core._text import escape_text, unicode_problem

__all__ = [
    "ACCESS",
    "BUS_KINDS",
    "FORMAT",
    "MAX_DESCRIPTION",
    "MAX_NAME",
    "MAX_REGISTERS",
    "REGISTER_BITS",
    "VERSION",
    "Bus",
    "Field",
    "Register",
    "RegisterMap",
]

#: Software access of a field or register: read-write, read-only, write-only.
ACCESS: Final = ("rw", "r", "w")
#: Bits in a register (regdev's registers are 8 bits wide).
REGISTER_BITS: Final = 8
#: Most registers in a map: addresses are one byte on the wire (0..255).
MAX_REGISTERS: Final = 256
#: Longest name of a register, field, enumerated value or map, in characters. Names reach
#: the tools offered to models (descriptions, ``REGISTER.FIELD`` arguments); 64 is the longest
#: function name OpenAI accepts (``^[a-zA-Z0-9_-]{1,64}$``), so a name always fits one.
#: SystemRDL sets no limit; the C firmware keeps no names.
MAX_NAME: Final = 64
#: Longest description of a register, field or map, in characters: a paragraph or a few,
#: printed by ``regdev map`` (SystemRDL sets no limit).
MAX_DESCRIPTION: Final = 4096
#: The compiled JSON form's ``format`` and ``version``.
FORMAT: Final = "regdev-map"
VERSION: Final = 1
_FULL: Final = (1 << REGISTER_BITS) - 1
#: A register or field name: an identifier, optionally with array indices (``DATA[2]``).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[0-9]+\])*")
#: An enumerated value's name.
_ENUM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _fail(where: str, problem: str) -> MapError:
    return MapError(f"{where}: {problem}")


def _shown(value: object) -> str:
    """A value as a message quotes it: a string escaped by :func:`escape_text` (printable
    ASCII, cut short) in backticks, anything else as Python writes it (``300``, ``None``)."""
    return f"`{escape_text(value)}`" if isinstance(value, str) else repr(value)


def _name_problem(name: object, pattern: re.Pattern[str] = _NAME,
                  what: str = "the name") -> str | None:
    """Why ``name`` is not a name (a string, not empty, at most :data:`MAX_NAME` characters,
    matching ``pattern``), or None when it is."""
    if type(name) is not str:
        return f"{what} must be a string, got {_shown(name)}"
    if not name:
        return f"{what} is empty (give an identifier: a letter or _, then letters, digits, _)"
    if len(name) > MAX_NAME:
        return (f"{what} is {len(name)} characters long, more than {MAX_NAME}: "
                f"{_shown(name)}")
    if not pattern.fullmatch(name):
        indices = "; array indices as in DATA[2]" if pattern is _NAME else ""
        return (f"{what} must be an identifier (a letter or _, then letters, digits, _"
                f"{indices}), got {_shown(name)}")
    return None


def _description_problem(description: object) -> str | None:
    """Why ``description`` is not one (a string of at most :data:`MAX_DESCRIPTION`
    characters), or None."""
    if type(description) is not str:
        return "the description must be a string"
    if len(description) > MAX_DESCRIPTION:
        return (f"the description is {len(description)} characters long, more than "
                f"{MAX_DESCRIPTION}")
    return None


def _is_int(value: object) -> bool:
    return type(value) is int


@dataclass(frozen=True, slots=True)
class Field:
    """A named bit range of a register.

    Attributes:
        name: the field's name, an identifier (``MODE``).
        lsb: its lowest bit, 0..7.
        msb: its highest bit, ``lsb``..7.
        access: software access: ``"rw"``, ``"r"`` (read-only) or ``"w"`` (write-only).
        reset: its value at reset, 0..2**width-1 (the field's own value, not shifted).
        onwrite: ``"woclr"`` (a written 1 clears the bit, a 0 leaves it) or None; only for a
            writable field.
        onread: ``"rclr"`` (a read returns the value and clears it to 0) or None; only for a
            readable field.
        encode: the field's enumerated values, ``(NAME, value)`` pairs (a mapping is taken
            too); names are identifiers, values fit the field. Empty: a plain number.
        description: what the field is, for people and models.
        enum_descriptions: what enumerated values mean, ``(NAME, description)`` pairs (a
            mapping is taken too), each NAME one of ``encode``'s, once; a description at
            most 4096 characters. Values without one are left out.

    Raises:
        MapError: any of the above does not hold (the message names the field).
    """

    name: str
    lsb: int
    msb: int
    access: str = "rw"
    reset: int = 0
    onwrite: str | None = None
    onread: str | None = None
    encode: tuple[tuple[str, int], ...] = ()
    description: str = ""
    enum_descriptions: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for name in ("encode", "enum_descriptions"):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                object.__setattr__(self, name, tuple(value.items()))
            elif not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        self.check(f"field {self.name}" if _name_problem(self.name) is None else "a field")

    def check(self, where: str) -> None:
        """Raise :class:`MapError` naming ``where`` unless the field is consistent."""
        problem = _name_problem(self.name)
        if problem is not None:
            raise _fail(where, problem)
        if not (_is_int(self.lsb) and _is_int(self.msb)
                and 0 <= self.lsb <= self.msb < REGISTER_BITS):
            raise _fail(where, f"bits [{self.msb}:{self.lsb}] are not within 7..0 "
                               "(msb >= lsb)")
        if self.access not in ACCESS:
            raise _fail(where, f"access must be rw, r or w, got {_shown(self.access)}")
        top = (1 << self.width) - 1
        if not _is_int(self.reset) or not 0 <= self.reset <= top:
            raise _fail(where, f"reset {_shown(self.reset)} does not fit its {self.width} bit(s) "
                               f"(0..{top})")
        if self.onwrite not in (None, "woclr"):
            raise _fail(where, f"onwrite must be woclr or absent, got {_shown(self.onwrite)}")
        if self.onwrite is not None and self.access == "r":
            raise _fail(where, "onwrite = woclr needs a field software can write")
        if self.onread not in (None, "rclr"):
            raise _fail(where, f"onread must be rclr or absent, got {_shown(self.onread)}")
        if self.onread is not None and self.access == "w":
            raise _fail(where, "onread = rclr needs a field software can read")
        names: set[str] = set()
        values: set[int] = set()
        for pair in self.encode:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise _fail(where, f"encode holds {_shown(pair)}, not a (NAME, value) pair")
            name, value = pair
            problem = _name_problem(name, _ENUM_NAME, "an enum name")
            if problem is not None:
                raise _fail(where, problem)
            if not _is_int(value) or not 0 <= value <= top:
                raise _fail(where, f"enum {name} = {_shown(value)} does not fit {self.width} bit(s)"
                                   f" (0..{top})")
            if name in names or value in values:
                raise _fail(where, f"enum {name} = {value} repeats a name or a value")
            names.add(name)
            values.add(value)
        problem = _description_problem(self.description)
        if problem is not None:
            raise _fail(where, problem)
        described: set[str] = set()
        for meaning in self.enum_descriptions:
            if not (isinstance(meaning, tuple) and len(meaning) == 2):
                raise _fail(where, f"enum_descriptions holds {_shown(meaning)}, not a (NAME, "
                                   "description) pair")
            name, text = meaning
            if name not in names or name in described:
                raise _fail(where, f"enum_descriptions: {_shown(name)} is not an enumerated "
                                   "value of the field, or is described twice")
            described.add(name)
            problem = _description_problem(text)
            if problem is not None:
                raise _fail(where, f"enum {name}: {problem}")

    @property
    def width(self) -> int:
        """Bits in the field, 1..8."""
        return self.msb - self.lsb + 1

    @property
    def mask(self) -> int:
        """The field's bits in its register, e.g. ``0b110`` for bits [2:1]."""
        return ((1 << self.width) - 1) << self.lsb

    @property
    def top(self) -> int:
        """The field's largest value, ``2**width - 1``."""
        return (1 << self.width) - 1

    @property
    def writable(self) -> bool:
        """True when software can write the field (``rw`` or ``w``)."""
        return self.access != "r"

    @property
    def readable(self) -> bool:
        """True when software can read the field (``rw`` or ``r``)."""
        return self.access != "w"

    @property
    def values(self) -> dict[str, int]:
        """The enumerated values by name (empty for a plain number)."""
        return dict(self.encode)

    def name_of(self, value: int) -> str | None:
        """The enumerated name of ``value``, or None when it has none."""
        return next((name for name, each in self.encode if each == value), None)

    def bits(self) -> str:
        """The field's bits as a datasheet writes them: ``bit 0``, ``bits 2:1``."""
        return f"bit {self.lsb}" if self.width == 1 else f"bits {self.msb}:{self.lsb}"


@dataclass(frozen=True, slots=True)
class Register:
    """One 8-bit register of a map.

    Attributes:
        name: the register's name (``CTRL``, ``DATA[2]``), or None for an unnamed one (the
            default map's).
        addr: its address, 0..255.
        access: software access of the register as a whole: ``"rw"``, ``"r"`` or ``"w"``.
            With fields, it follows from theirs (``r`` when none is writable, ``w`` when none
            is readable); None takes that (or ``"rw"`` for a register without fields).
        reset: its value at reset, 0..255; with fields, the fields' resets put together.
            None takes that (or 0 without fields).
        description: what the register is.
        fields: its fields, any order (kept from the lowest bit up); they may not overlap.
            Empty: the register is one value of 8 bits with the register's access.
        protected: True when writing it needs approval (the policy's ``protected``; a
            policy file that lists ``registers.protected`` overrides the map's).
        identity: True when its value says which chip this is (a chip ID): a read-only
            register, without clear-on-read bits, whose reset value is the chip's value.
            regdev reads it when it connects to a device that cannot say its map (Modbus)
            and refuses to go on when it holds another value (``docs/maps.md``).

    Raises:
        MapError: the register is not consistent (the message names it and its field), or
            an identity register is writable or clears bits when read.
    """

    name: str | None
    addr: int
    access: str | None = None
    reset: int | None = None
    description: str = ""
    fields: tuple[Field, ...] = ()
    protected: bool = False
    identity: bool = False
    #: The masks, worked out once: field, writable, readable, woclr, rclr.
    _masks: tuple[int, int, int, int, int] = _dataclass_field(
        init=False, repr=False, compare=False, default=(0, 0, 0, 0, 0))

    def __post_init__(self) -> None:
        problem = None if self.name is None else _name_problem(self.name)
        where = (f"register {self.name}" if self.name is not None and problem is None
                 else f"register at {_shown(self.addr)}")
        if problem is not None:
            raise _fail(where, problem)
        if not _is_int(self.addr) or not 0 <= self.addr < MAX_REGISTERS:
            raise _fail(where, f"the address must be an integer 0..{MAX_REGISTERS - 1}, "
                               f"got {_shown(self.addr)}")
        fields = tuple(sorted(self.fields, key=lambda f: f.lsb if isinstance(f, Field) else 0))
        taken = 0
        seen: set[str] = set()
        for each in fields:
            if not isinstance(each, Field):
                raise _fail(where, f"{_shown(each)} is not a Field")
            if each.mask & taken:
                other = next(f for f in fields if f is not each and f.mask & each.mask)
                raise _fail(f"{where}, field {each.name}",
                            f"its {each.bits()} overlap field {other.name} ({other.bits()})")
            if each.name in seen:
                raise _fail(f"{where}, field {each.name}", "two fields have this name")
            taken |= each.mask
            seen.add(each.name)
        object.__setattr__(self, "fields", fields)
        if fields:
            derived_access = ("r" if not any(f.writable for f in fields)
                              else "w" if not any(f.readable for f in fields) else "rw")
            derived_reset = 0
            for each in fields:
                derived_reset |= each.reset << each.lsb
            if self.access is not None and self.access != derived_access:
                raise _fail(where, f"access {_shown(self.access)} disagrees with its fields' "
                                   f"({derived_access})")
            if self.reset is not None and self.reset != derived_reset:
                raise _fail(where, f"reset {_shown(self.reset)} disagrees with its fields' "
                                   f"(0x{derived_reset:02X})")
            object.__setattr__(self, "access", derived_access)
            object.__setattr__(self, "reset", derived_reset)
        else:
            access = "rw" if self.access is None else self.access
            if access not in ACCESS:
                raise _fail(where, f"access must be rw, r or w, got {_shown(access)}")
            reset = 0 if self.reset is None else self.reset
            if not _is_int(reset) or not 0 <= reset <= _FULL:
                raise _fail(where, f"reset must be an integer 0..255, got {_shown(reset)}")
            object.__setattr__(self, "access", access)
            object.__setattr__(self, "reset", reset)
        problem = _description_problem(self.description)
        if problem is not None:
            raise _fail(where, problem)
        if type(self.protected) is not bool:
            raise _fail(where, f"protected must be true or false, got {_shown(self.protected)}")
        if type(self.identity) is not bool:
            raise _fail(where, f"identity must be true or false, got {_shown(self.identity)}")
        if fields:
            masks = [0] * 5
            for each in fields:
                for index, keep in enumerate((True, each.writable, each.readable,
                                              each.onwrite == "woclr", each.onread == "rclr")):
                    if keep:
                        masks[index] |= each.mask
            object.__setattr__(self, "_masks", tuple(masks))
        else:
            object.__setattr__(self, "_masks", (_FULL, _FULL if self.access != "r" else 0,
                                                _FULL if self.access != "w" else 0, 0, 0))
        if self.identity and (self.writable_mask or self.rclr_mask or not self.readable_mask):
            raise _fail(where, "an identity register must be read-only, readable, and clear "
                               "nothing when read (its reset value is the chip's ID)")

    # --- the bits, by behaviour -----------------------------------------------------------

    @property
    def field_mask(self) -> int:
        """Bits that belong to a field (every bit, for a register without fields)."""
        return self._masks[0]

    @property
    def reserved_mask(self) -> int:
        """Bits in no field: read as 0, never set (0 for a register without fields)."""
        return _FULL & ~self._masks[0]

    @property
    def writable_mask(self) -> int:
        """Bits software can write: read-write, write-only and write-1-to-clear bits."""
        return self._masks[1]

    @property
    def readable_mask(self) -> int:
        """Bits a read returns; write-only and reserved bits read as 0."""
        return self._masks[2]

    @property
    def woclr_mask(self) -> int:
        """Write-1-to-clear bits (``onwrite = woclr``)."""
        return self._masks[3]

    @property
    def rclr_mask(self) -> int:
        """Clear-on-read bits (``onread = rclr``)."""
        return self._masks[4]

    @property
    def store_mask(self) -> int:
        """Bits a write stores as written: writable, and not write-1-to-clear."""
        return self.writable_mask & ~self.woclr_mask

    # --- behaviour --------------------------------------------------------------------------

    @property
    def label(self) -> str:
        """How messages name the register: ``CTRL (0x01)``, or ``3`` when it is unnamed."""
        return f"{self.name} (0x{self.addr:02X})" if self.name else str(self.addr)

    def refuse_write(self, data: int, mask: int = _FULL) -> str | None:
        """Why the register refuses to have the bits ``mask`` of ``data`` written, or None.

        A write to a register that software cannot write at all is refused, as is one that
        sets a reserved bit. Bits of read-only fields are ignored (they keep their value), as
        hardware ignores them.
        """
        if not self.writable_mask:
            return f"register {self.label} is read-only"
        reserved = data & mask & self.reserved_mask
        if reserved:
            return (f"data 0x{data:02X} sets reserved bits 0x{reserved:02X} of register "
                    f"{self.label}")
        return None

    def written(self, old: int, data: int, mask: int = _FULL) -> int:
        """The register's value after writing the bits ``mask`` of ``data`` over ``old``.

        Stored bits take ``data``; write-1-to-clear bits clear where ``data`` has a 1; every
        other bit (read-only, reserved, outside ``mask``) keeps its value. Call only when
        :meth:`refuse_write` returned None.
        """
        store = self.store_mask & mask
        clear = self.woclr_mask & mask & data
        return ((old & ~store) | (data & store)) & ~clear & _FULL

    def read_effect(self, value: int) -> tuple[int, int]:
        """``(what a read returns, the register's value after the read)`` for ``value``:
        write-only bits read as 0; clear-on-read bits are returned, then cleared."""
        return value & self.readable_mask, value & ~self.rclr_mask

    def field(self, name: str) -> Field | None:
        """The field called ``name``, or None."""
        return next((each for each in self.fields if each.name == name), None)

    def decode(self, value: int) -> dict[str, int | str]:
        """``value`` as named fields: ``{"EN": 1, "MODE": "FAST"}`` (an enumerated field by
        its name where ``value`` has one, else the number). Empty without fields."""
        out: dict[str, int | str] = {}
        for each in self.fields:
            number = (value & each.mask) >> each.lsb
            name = each.name_of(number)
            out[each.name] = name if name is not None else number
        return out

    def to_dict(self) -> dict[str, Any]:
        """The register in the compiled JSON form (see :meth:`RegisterMap.to_json`)."""
        return {
            "name": self.name, "addr": self.addr, "access": self.access, "reset": self.reset,
            "description": self.description, "protected": self.protected,
            "identity": self.identity, "reserved_mask": self.reserved_mask,
            "woclr_mask": self.woclr_mask, "rclr_mask": self.rclr_mask,
            "fields": [{"name": f.name, "lsb": f.lsb, "msb": f.msb, "access": f.access,
                        "reset": f.reset, "onwrite": f.onwrite, "onread": f.onread,
                        "encode": dict(f.encode), "description": f.description,
                        **({"enum_descriptions": dict(f.enum_descriptions)}
                           if f.enum_descriptions else {})}
                       for f in self.fields],
        }


#: The buses a map may put its chip on (the C firmware's bridge, ``docs/firmware.md``).
BUS_KINDS: Final = ("i2c",)
#: The 7-bit I2C addresses a chip may have: 0x08..0x77 (the others are reserved by the I2C
#: specification: general call, CBUS, high-speed mode, 10-bit addressing).
I2C_ADDRESSES: Final = range(0x08, 0x78)
#: I2C clocks the bridge runs, in Hz: 10 kHz to 400 kHz (fast mode).
I2C_CLOCKS: Final = range(10_000, 400_001)


@dataclass(frozen=True)
class Bus:
    """Where the chip a map describes sits, for a board that bridges to it (the C firmware's
    bridge, ``docs/firmware.md``): the user-defined properties ``regdev_bus``,
    ``regdev_i2c_address``, ``regdev_bus_clock``, ``regdev_reg_addr_width`` and
    ``regdev_auto_increment`` of the map (``docs/maps.md``).

    Attributes:
        kind: the bus, one of :data:`BUS_KINDS` (``"i2c"``).
        address: the chip's 7-bit I2C address, 0x08..0x77 (0x76 for a BME280).
        clock: the bus clock in Hz, 10000..400000 (default 100000).
        addr_width: bits of the register address sent before the data, 8 or 16 (16: the
            high byte 0 first, as 24C32-style EEPROMs take it); default 8.
        auto_increment: True when the chip moves to the next register after each byte of a
            burst (most do); False makes the bridge move a block one register at a time.

    Raises:
        MapError: a value out of its range or of the wrong type.
    """

    kind: str
    address: int
    clock: int = 100_000
    addr_width: int = 8
    auto_increment: bool = True

    def __post_init__(self) -> None:
        if self.kind not in BUS_KINDS:
            raise MapError(f"the bus: {_shown(self.kind)} is not a bus the bridge knows; "
                           f"expected one of {', '.join(BUS_KINDS)}")
        if type(self.address) is not int or self.address not in I2C_ADDRESSES:
            raise MapError(f"the bus: the I2C address must be a 7-bit address 0x08..0x77, "
                           f"got {_shown(self.address)}")
        if type(self.clock) is not int or self.clock not in I2C_CLOCKS:
            raise MapError(f"the bus: the clock must be 10000..400000 Hz, got "
                           f"{_shown(self.clock)}")
        if self.addr_width not in (8, 16) or type(self.addr_width) is not int:
            raise MapError(f"the bus: the register address width must be 8 or 16 bits, got "
                           f"{_shown(self.addr_width)}")
        if type(self.auto_increment) is not bool:
            raise MapError("the bus: auto-increment must be true or false")

    def to_dict(self) -> dict[str, Any]:
        """The bus as the compiled JSON form's ``"bus"`` object."""
        return {"kind": self.kind, "address": self.address, "clock": self.clock,
                "addr_width": self.addr_width, "auto_increment": self.auto_increment}


class RegisterMap:
    """A device's registers: looked up by address and by name. Immutable.

    Args:
        registers: the registers, any order (kept in address order); addresses and names
            must be distinct. At least one.
        name: the map's (the device's) name; ``""`` for none.
        description: what the device is.
        bus: where the chip is, for a board that bridges to it (:class:`Bus`); None for a
            device that holds its registers itself.

    Raises:
        MapError: no register, two registers at one address or with one name, or a
            ``FIELD`` name that is not unique in its register.
    """

    __slots__ = ("_by_addr", "_by_name", "_digest", "bus", "description", "name", "registers")

    bus: Bus | None
    name: str
    description: str
    registers: tuple[Register, ...]
    _by_addr: dict[int, Register]
    _by_name: dict[str, Register]

    def __init__(self, registers: Iterable[Register], *, name: str = "",
                 description: str = "", bus: Bus | None = None) -> None:
        regs = tuple(sorted(registers, key=lambda r: r.addr if isinstance(r, Register) else 0))
        if not regs:
            raise MapError("a register map needs at least one register")
        by_addr: dict[int, Register] = {}
        by_name: dict[str, Register] = {}
        for each in regs:
            if not isinstance(each, Register):
                raise MapError(f"{_shown(each)} is not a Register")
            if each.addr in by_addr:
                raise _fail(f"register {each.label}", f"address 0x{each.addr:02X} is taken "
                                                      f"by {by_addr[each.addr].label} too")
            if each.name is not None:
                if each.name in by_name:
                    raise _fail(f"register {each.label}", "two registers have this name")
                by_name[each.name] = each
            by_addr[each.addr] = each
        if type(name) is not str or type(description) is not str:
            raise MapError("a map's name and description must be strings")
        if len(name) > MAX_NAME:
            raise MapError(f"the map's name is {len(name)} characters long, more than "
                           f"{MAX_NAME}: {_shown(name)}")
        if not name.isprintable():  # it reaches tool descriptions and identify texts
            raise MapError(f"the map's name has a control or format character: {_shown(name)} "
                           "(printable characters only)")
        problem = _description_problem(description)
        if problem is not None:
            raise MapError(f"the map: {problem}")
        set_ = object.__setattr__
        set_(self, "registers", regs)
        set_(self, "name", name)
        set_(self, "description", description)
        if bus is not None and not isinstance(bus, Bus):
            raise MapError(f"the map's bus must be a Bus, got {_shown(bus)}")
        set_(self, "bus", bus)
        set_(self, "_by_addr", by_addr)
        set_(self, "_by_name", by_name)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a RegisterMap is immutable: cannot set `{name}`")

    @classmethod
    def default(cls) -> RegisterMap:
        """The default map: 16 unnamed read-write registers at 0..15, reset 0, no fields:
        the device regdev had before it had maps (its tools, checks and messages are the
        same)."""
        return _DEFAULT

    @property
    def is_default(self) -> bool:
        """True for a map equal to :meth:`default`."""
        return self is _DEFAULT or self == _DEFAULT  # (the default itself, at once)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RegisterMap):
            return NotImplemented
        return (self.registers, self.name, self.description, self.bus) == (
            other.registers, other.name, other.description, other.bus)

    def __hash__(self) -> int:
        return hash((self.registers, self.name))

    def __len__(self) -> int:
        return len(self.registers)

    def __iter__(self) -> Iterator[Register]:
        return iter(self.registers)

    def __repr__(self) -> str:
        return f"RegisterMap(name={self.name!r}, registers={len(self.registers)})"

    def at(self, addr: int) -> Register | None:
        """The register at ``addr``, or None."""
        return self._by_addr.get(addr) if type(addr) is int else None

    def named(self, name: str) -> Register | None:
        """The register called ``name``, or None."""
        return self._by_name.get(name)

    def find_field(self, path: str) -> tuple[Register, Field] | None:
        """The register and field of ``"REGISTER.FIELD"``, or None."""
        register_name, dot, field_name = path.rpartition(".")
        register = self._by_name.get(register_name) if dot else None
        found = register.field(field_name) if register is not None else None
        return (register, found) if register is not None and found is not None else None

    @property
    def addresses(self) -> tuple[int, ...]:
        """Every register's address, lowest first."""
        return tuple(self._by_addr)

    @property
    def last(self) -> int:
        """The highest register address."""
        return self.registers[-1].addr

    @property
    def contiguous(self) -> bool:
        """True when the registers are at 0..N-1 with no gap."""
        return self.last == len(self.registers) - 1 and self.registers[0].addr == 0

    def read_only(self) -> frozenset[int]:
        """Addresses of the registers software cannot write."""
        return frozenset(r.addr for r in self.registers if not r.writable_mask)

    def protected(self) -> frozenset[int]:
        """Addresses of the registers the map marks protected."""
        return frozenset(r.addr for r in self.registers if r.protected)

    def identity(self) -> tuple[Register, ...]:
        """The identity registers (a chip ID), lowest address first: each must read its
        reset value on a device of this map."""
        return tuple(r for r in self.registers if r.identity)

    def digest(self) -> str:
        """Which map this is, as 16 upper-case hex digits: the first 8 bytes of the SHA-256
        of the map's device form, its name and each register's name, address, access, reset,
        identity flag and fields (name, bits, access, reset, onwrite, onread, enumerated
        values), as compact JSON with sorted keys (``docs/protocol.md``, "Which map the device
        serves"). Descriptions and ``protected`` are left out: they change no register. A
        device that says its map says this digest; a host compares it with its own map's."""
        cached: str | None = getattr(self, "_digest", None)
        if cached is not None:
            return cached
        form = {"name": self.name, "registers": [
            {"name": r.name, "addr": r.addr, "access": r.access, "reset": r.reset,
             "identity": r.identity,
             "fields": [{"name": f.name, "lsb": f.lsb, "msb": f.msb, "access": f.access,
                         "reset": f.reset, "onwrite": f.onwrite, "onread": f.onread,
                         "encode": [list(pair) for pair in f.encode]} for f in r.fields]}
            for r in self.registers]}
        text = json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        digest = hashlib.sha256(text.encode("ascii")).hexdigest()[:16].upper()
        object.__setattr__(self, "_digest", digest)
        return digest

    def label(self, addr: int) -> str:
        """How messages name the register at ``addr`` (``CTRL (0x01)``, or ``3``)."""
        register = self._by_addr.get(addr)
        return register.label if register is not None else str(addr)

    # --- the compiled JSON form -------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The map as the compiled JSON form's object (see :meth:`to_json`)."""
        out = {"format": FORMAT, "version": VERSION, "name": self.name,
               "description": self.description,
               "registers": [each.to_dict() for each in self.registers]}
        if self.bus is not None:
            out["bus"] = self.bus.to_dict()
        return out

    def to_json(self) -> str:
        """The compiled JSON form, as ``regdev map FILE --json`` writes it::

            {"format": "regdev-map", "version": 1, "name": ..., "description": ...,
             "bus": {"kind": "i2c", "address", "clock", "addr_width", "auto_increment"}
                    (only for a map of a chip behind a bridge),
             "registers": [{"name", "addr", "access": "rw"|"r"|"w", "reset", "description",
                            "protected", "reserved_mask", "woclr_mask", "rclr_mask",
                            "fields": [{"name", "lsb", "msb", "access", "reset",
                                        "onwrite": null|"woclr", "onread": null|"rclr",
                                        "encode": {NAME: value}, "description",
                                        "enum_descriptions": {NAME: text} (only when
                                        some value has one)}]}]}

        The masks are derived from the fields (a reader may use them rather than the
        fields); :meth:`from_json` checks that they agree.
        """
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "map") -> RegisterMap:
        """Read the compiled JSON form (:meth:`to_json`).

        Strict: every key is checked, an unknown one or one given twice is an error, and so
        is a mask that disagrees with the fields.

        Args:
            text: the JSON text (UTF-8 when bytes).
            source: names the map in messages, e.g. its file name.

        Raises:
            MapError: one line naming ``source`` and the place, e.g.
                ``map.json: `registers[1].fields[0].msb`: must be an integer 0..7``.
        """
        try:
            if isinstance(text, bytes):  # UTF-8 only (json.loads would guess UTF-16 or 32)
                text = text.decode("utf-8")
            document = json.loads(text, object_pairs_hook=_no_repeats,
                                  parse_constant=_no_constant)
        except UnicodeDecodeError as error:
            raise MapError(f"{source}: not valid JSON: {unicode_problem(error)}") from None
        except json.JSONDecodeError as error:  # its place, never Python's wording
            raise MapError(f"{source}: not valid JSON at line {error.lineno}, column "
                           f"{error.colno}") from None
        except RecursionError:
            raise MapError(f"{source}: not valid JSON: it is nested too deeply") from None
        except ValueError as error:  # _no_repeats, _no_constant: in regdev's words
            raise MapError(f"{source}: not valid JSON: {error}") from None
        return cls.from_dict(document, source)

    @classmethod
    def from_dict(cls, document: object, source: str = "map") -> RegisterMap:
        """Read the compiled JSON form, already decoded (see :meth:`from_json`).

        Raises:
            MapError: as :meth:`from_json`.
        """
        reader = _Reader(source)
        top = reader.obj(document, "", {"format", "version", "name", "description",
                                           "registers", "bus"},
                         {"format", "version", "registers"})
        if top["format"] != FORMAT or top["version"] != VERSION:
            raise reader.error("", f'not a regdev map: expected "format": "{FORMAT}", '
                                   f'"version": {VERSION}')
        registers = []
        raw = top["registers"]
        if type(raw) is not list:
            raise reader.error("registers", "must be an array of registers")
        for index, item in enumerate(raw):
            registers.append(reader.register(item, f"registers[{index}]"))
        bus = reader.bus(top["bus"]) if "bus" in top else None
        try:
            return cls(registers, name=reader.text(top.get("name", ""), "name"),
                       description=reader.text(top.get("description", ""), "description"),
                       bus=bus)
        except MapError as error:
            raise MapError(f"{source}: {error}") from None


_KEYS_REGISTER = {"name", "addr", "access", "reset", "description", "protected", "identity",
                  "reserved_mask", "woclr_mask", "rclr_mask", "fields"}
_KEYS_FIELD = {"name", "lsb", "msb", "access", "reset", "onwrite", "onread", "encode",
               "description", "enum_descriptions"}


class _Reader:
    """Reads the compiled JSON form, naming the place of each problem."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, where: str, problem: str) -> MapError:
        return MapError(f"{self.source}: `{where or '(top)'}`: {problem}")

    def obj(self, value: object, where: str, allowed: set[str],
               required: set[str]) -> dict[str, Any]:
        if type(value) is not dict:
            raise self.error(where, "must be an object")
        for key in value:
            if key not in allowed:
                raise self.error(f"{where}.{escape_text(key)}".lstrip("."),
                                 f"unknown key; allowed: {', '.join(sorted(allowed))}")
        for key in sorted(required):
            if key not in value:
                raise self.error(f"{where}.{key}".lstrip("."), "required")
        return value

    def text(self, value: object, where: str) -> str:
        if type(value) is not str:
            raise self.error(where, "must be a string")
        return value

    def integer(self, value: object, where: str, low: int, high: int) -> int:
        if type(value) is not int or not low <= value <= high:
            raise self.error(where, f"must be an integer {low}..{high}")
        return value

    def bus(self, item: object) -> Bus:
        data = self.obj(item, "bus", {"kind", "address", "clock", "addr_width",
                                      "auto_increment"}, {"kind", "address"})
        try:
            return Bus(**data)
        except MapError as error:
            raise self.error("bus", str(error).partition(": ")[2]) from None

    def register(self, item: object, where: str) -> Register:
        data = self.obj(item, where, _KEYS_REGISTER, {"addr"})
        name = data.get("name")
        if name is not None:
            self.text(name, f"{where}.name")
        fields = data.get("fields", [])
        if type(fields) is not list:
            raise self.error(f"{where}.fields", "must be an array of fields")
        parsed = tuple(self.field(each, f"{where}.fields[{index}]")
                       for index, each in enumerate(fields))
        protected = data.get("protected", False)
        if type(protected) is not bool:
            raise self.error(f"{where}.protected", "must be true or false")
        identity = data.get("identity", False)
        if type(identity) is not bool:
            raise self.error(f"{where}.identity", "must be true or false")
        addr = self.integer(data["addr"], f"{where}.addr", 0, 255)
        description = self.text(data.get("description", ""), f"{where}.description")
        try:
            register = Register(
                name=name, addr=addr,
                access=data.get("access"), reset=data.get("reset"),
                description=description, fields=parsed, protected=protected,
                identity=identity)
        except MapError as error:
            raise self.error(where, str(error)) from None
        for key in ("reserved_mask", "woclr_mask", "rclr_mask"):
            if key in data and data[key] != getattr(register, key):
                raise self.error(f"{where}.{key}", f"is {_shown(data[key])}, but the fields "
                                                   f"make it {getattr(register, key)}")
        return register

    def field(self, item: object, where: str) -> Field:
        data = self.obj(item, where, _KEYS_FIELD, {"name", "lsb", "msb"})
        encode = data.get("encode", {})
        if type(encode) is not dict:
            raise self.error(f"{where}.encode", "must be an object of NAME: value")
        description = self.text(data.get("description", ""), f"{where}.description")
        meanings = data.get("enum_descriptions", {})
        if type(meanings) is not dict:
            raise self.error(f"{where}.enum_descriptions", "must be an object of NAME: text")
        for name, text in meanings.items():
            self.text(text, f"{where}.enum_descriptions.{escape_text(name)}")
        try:
            return Field(name=data["name"], lsb=data["lsb"], msb=data["msb"],
                         access=data.get("access", "rw"), reset=data.get("reset", 0),
                         onwrite=data.get("onwrite"), onread=data.get("onread"),
                         encode=tuple(encode.items()), description=description,
                         enum_descriptions=tuple(meanings.items()))
        except MapError as error:
            raise self.error(where, str(error).partition(": ")[2] or str(error)) from None


def _no_repeats(pairs: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f'key "{escape_text(key)}" appears twice in one object')
        out[key] = value
    return out


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


_DEFAULT = RegisterMap([Register(None, addr) for addr in range(16)])
