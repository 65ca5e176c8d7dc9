"""Register maps: what a device's registers are called, where they are, and how they behave.

A :class:`RegisterMap` is a list of :class:`Register` objects (8, 16, 32 or 64 bits wide,
8 by default; in one of Modbus's four tables, holding registers by default), each with an
address, an optional name, and :class:`Field` objects that give bit ranges names, software access,
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
import importlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as _dataclass_field
from pathlib import Path
from typing import Any, Final

from ..core._errors import MapError
from ..core._text import escape_text, unicode_problem
from ._values import Value, ValueCodec, bind_values, values_from_json

__all__ = [
    "ACCESS",
    "BUS_KINDS",
    "FORMAT",
    "MAX_ADDRESS",
    "MAX_DESCRIPTION",
    "MAX_NAME",
    "MAX_REGISTERS",
    "REGISTER_BITS",
    "SERIAL_ADDRESSES",
    "TABLES",
    "VERSION",
    "WIDTHS",
    "Bus",
    "Field",
    "MapNotJSON",
    "Register",
    "RegisterMap",
    "Value",
]

class MapNotJSON(MapError):
    """The text of a map in the compiled JSON form is not one strict JSON document (the
    message says what is wrong and where, in regdev's words; a command adds what a map file
    is when the text is not JSON-like at all).

    Attributes:
        json_like: the text starts like JSON (its first non-space character is ``{`` or
            ``[``): a JSON document with a fault, not some other kind of file.
    """

    def __init__(self, message: str, *, json_like: bool = False) -> None:
        super().__init__(message)
        self.json_like = json_like


#: Software access of a field or register: read-write, read-only, write-only.
ACCESS: Final = ("rw", "r", "w")
#: Bits in a register by default (the default map's, and regdev's serial protocol's).
REGISTER_BITS: Final = 8
#: The widths a register may have, in bits (1 is a coil's or a discrete input's).
WIDTHS: Final = (8, 16, 32, 64)
#: The tables a register may be in: Modbus's four (holding registers, input registers, coils,
#: discrete inputs). In process and on regdev's serial protocol, holding only.
TABLES: Final = ("holding", "input", "coil", "discrete")
#: The highest address of a register in a map (in process any 32-bit address; a Modbus
#: device's tables end at 65535, regdev's serial protocol's at 255).
MAX_ADDRESS: Final = 0xFFFF_FFFF
#: Most registers in a map (a Modbus device's four tables of 65536 each).
MAX_REGISTERS: Final = 4 * 65536
#: The addresses regdev's serial protocol carries: one byte on the wire (0..255).
SERIAL_ADDRESSES: Final = 256
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


def _bits_problem(field: Field, width: int) -> str:
    return f"bits [{field.msb}:{field.lsb}] are not within {width - 1}..0 (msb >= lsb)"


def _width_problem(table: object, width: object) -> str | None:
    """Why ``width`` is not a width of a register in ``table``, or None."""
    if table not in TABLES:
        return f"table must be one of {', '.join(TABLES)}, got {_shown(table)}"
    if table in ("coil", "discrete"):
        return None if width == 1 else (f"a {table} is one bit: its width must be 1, got "
                                        f"{_shown(width)}")
    if not _is_int(width) or width not in WIDTHS:
        return (f"the width must be one of {', '.join(map(str, WIDTHS))} (bits), got "
                f"{_shown(width)}")
    return None


@dataclass(frozen=True, slots=True)
class Field:
    """A named bit range of a register.

    Attributes:
        name: the field's name, an identifier (``MODE``).
        lsb: its lowest bit, 0..width-1 of its register (0..7 in an 8-bit register).
        msb: its highest bit, ``lsb``..width-1 of its register.
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
                and 0 <= self.lsb <= self.msb < WIDTHS[-1]):
            raise _fail(where, _bits_problem(self, WIDTHS[-1]))
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
        """Bits in the field, 1..64 (at most its register's width)."""
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
    """One register of a map: 8 bits wide unless it says otherwise (16, 32, 64), in one of
    Modbus's four tables (holding registers unless it says otherwise).

    Attributes:
        name: the register's name (``CTRL``, ``DATA[2]``), or None for an unnamed one (the
            default map's).
        addr: its address in its table, 0..:data:`MAX_ADDRESS` (a Modbus device's tables end
            at 65535, regdev's serial protocol's at 255: those backends refuse a map beyond).
        access: software access of the register as a whole: ``"rw"``, ``"r"`` or ``"w"``.
            With fields, it follows from theirs (``r`` when none is writable, ``w`` when none
            is readable); None takes that (or ``"rw"`` for a register without fields).
        reset: its value at reset, 0..2**width-1; with fields, the fields' resets put
            together.
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
        width: its bits: 8, 16, 32 or 64 (:data:`WIDTHS`); 1 for a coil or a discrete
            input. 0 (the default) takes 8, or 1 for a coil or a discrete input. Its fields
            lie within it, its values are 0..2**width-1.
        table: its Modbus table (:data:`TABLES`): ``"holding"`` (the default), ``"input"``
            (input registers, read-only), ``"coil"`` (one bit, read-write) or ``"discrete"``
            (discrete inputs: one bit, read-only). A register is identified by its table and
            its address.

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
    width: int = 0
    table: str = "holding"
    #: The masks, worked out once: field, writable, readable, woclr, rclr, every bit.
    _masks: tuple[int, int, int, int, int, int] = _dataclass_field(
        init=False, repr=False, compare=False, default=(0, 0, 0, 0, 0, 0))

    def __post_init__(self) -> None:
        problem = None if self.name is None else _name_problem(self.name)
        where = (f"register {self.name}" if self.name is not None and problem is None
                 else f"register at {_shown(self.addr)}")
        if problem is not None:
            raise _fail(where, problem)
        if not _is_int(self.addr) or not 0 <= self.addr <= MAX_ADDRESS:
            raise _fail(where, f"the address must be an integer 0..{MAX_ADDRESS}, "
                               f"got {_shown(self.addr)}")
        width = self._own_width(where)
        full = (1 << width) - 1
        fields = tuple(sorted(self.fields, key=lambda f: f.lsb if isinstance(f, Field) else 0))
        taken = 0
        seen: set[str] = set()
        for each in fields:
            if not isinstance(each, Field):
                raise _fail(where, f"{_shown(each)} is not a Field")
            if each.msb >= width:
                raise _fail(f"{where}, field {each.name}", _bits_problem(each, width))
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
            if not _is_int(reset) or not 0 <= reset <= full:
                raise _fail(where, f"reset must be an integer 0..{full}, got {_shown(reset)}")
            object.__setattr__(self, "access", access)
            object.__setattr__(self, "reset", reset)
        problem = _description_problem(self.description)
        if problem is not None:
            raise _fail(where, problem)
        if type(self.protected) is not bool:
            raise _fail(where, f"protected must be true or false, got {_shown(self.protected)}")
        if type(self.identity) is not bool:
            raise _fail(where, f"identity must be true or false, got {_shown(self.identity)}")
        if self.table in ("input", "discrete") and self.access != "r":
            raise _fail(where, f"the {self.table} table is read-only: its registers' access "
                               f"must be r, got {_shown(self.access)}")
        if fields:
            masks = [0] * 5 + [full]
            for each in fields:
                for index, keep in enumerate((True, each.writable, each.readable,
                                              each.onwrite == "woclr", each.onread == "rclr")):
                    if keep:
                        masks[index] |= each.mask
            object.__setattr__(self, "_masks", tuple(masks))
        else:
            object.__setattr__(self, "_masks", (full, full if self.access != "r" else 0,
                                                full if self.access != "w" else 0, 0, 0, full))
        if self.identity and (self.writable_mask or self.rclr_mask or not self.readable_mask):
            raise _fail(where, "an identity register must be read-only, readable, and clear "
                               "nothing when read (its reset value is the chip's ID)")

    def _own_width(self, where: str) -> int:
        """Check the table and the width (0 takes the table's default); set and return it."""
        width = self.width
        if width == 0:
            width = 1 if self.table in ("coil", "discrete") else REGISTER_BITS
        problem = _width_problem(self.table, width)
        if problem is not None:
            raise _fail(where, problem)
        if self.table in ("input", "discrete") and self.access is None and not self.fields:
            object.__setattr__(self, "access", "r")  # read-only by its table
        object.__setattr__(self, "width", width)
        return width

    # --- the bits, by behaviour -----------------------------------------------------------

    @property
    def full_mask(self) -> int:
        """Every bit of the register, ``2**width - 1`` (0xFF for an 8-bit register)."""
        return self._masks[5]

    @property
    def top(self) -> int:
        """The register's largest value, ``2**width - 1`` (255 for an 8-bit register)."""
        return self._masks[5]

    @property
    def field_mask(self) -> int:
        """Bits that belong to a field (every bit, for a register without fields)."""
        return self._masks[0]

    @property
    def reserved_mask(self) -> int:
        """Bits in no field: read as 0, never set (0 for a register without fields)."""
        return self._masks[5] & ~self._masks[0]

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
        """How messages name the register: ``CTRL (0x01)``, or ``3`` when it is unnamed; in
        a table other than holding, the table too: ``VOLTS (input 0x0010)``, ``input 16``."""
        if self.table != "holding":
            return (f"{self.name} ({self.table} 0x{self.addr:04X})" if self.name
                    else f"{self.table} {self.addr}")
        return f"{self.name} (0x{self.addr:02X})" if self.name else str(self.addr)

    def refuse_write(self, data: int, mask: int | None = None) -> str | None:
        """Why the register refuses to have the bits ``mask`` of ``data`` written, or None.

        A write to a register that software cannot write at all is refused, as is one that
        sets a reserved bit. Bits of read-only fields are ignored (they keep their value), as
        hardware ignores them. ``mask`` None: every bit.
        """
        if mask is None:
            mask = self._masks[5]
        if not self.writable_mask:
            return f"register {self.label} is read-only"
        reserved = data & mask & self.reserved_mask
        if reserved:
            return (f"data 0x{data:02X} sets reserved bits 0x{reserved:02X} of register "
                    f"{self.label}")
        return None

    def written(self, old: int, data: int, mask: int | None = None) -> int:
        """The register's value after writing the bits ``mask`` of ``data`` over ``old``.

        Stored bits take ``data``; write-1-to-clear bits clear where ``data`` has a 1; every
        other bit (read-only, reserved, outside ``mask``) keeps its value (``mask`` None:
        every bit). Call only when :meth:`refuse_write` returned None.
        """
        full = self._masks[5]
        if mask is None:
            mask = full
        store = self.store_mask & mask
        clear = self.woclr_mask & mask & data
        return ((old & ~store) | (data & store)) & ~clear & full

    def read_effect(self, value: int) -> tuple[int, int]:
        """``(what a read returns, the register's value after the read)`` for ``value``:
        write-only bits read as 0; clear-on-read bits are returned, then cleared."""
        return value & self.readable_mask, value & ~self.rclr_mask

    def _shape(self) -> dict[str, Any]:
        """``width`` and ``table`` for the JSON form and the digest, when not the default."""
        shape: dict[str, Any] = {}
        if self.table != "holding":
            shape["table"] = self.table
        if self.width != (1 if self.table in ("coil", "discrete") else REGISTER_BITS):
            shape["width"] = self.width
        return shape

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
        """The register in the compiled JSON form (see :meth:`RegisterMap.to_json`);
        ``width`` and ``table`` only when they are not the default's (8, holding)."""
        return {
            "name": self.name, "addr": self.addr, **self._shape(),
            "access": self.access, "reset": self.reset,
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
BUS_KINDS: Final = ("i2c", "spi")
#: The 7-bit I2C addresses a chip may have: 0x08..0x77 (the others are reserved by the I2C
#: specification: general call, CBUS, high-speed mode, 10-bit addressing).
I2C_ADDRESSES: Final = range(0x08, 0x78)
#: I2C clocks the bridge runs, in Hz: 10 kHz to 400 kHz (fast mode).
I2C_CLOCKS: Final = range(10_000, 400_001)
#: SPI clocks the bridge makes, in Hz: the ATmega328P's SPI clock is its 16 MHz clock divided
#: by 2, 4, 8, 16, 32, 64 or 128 (ATmega328P datasheet, SPCR's SPR1:0 and SPSR's SPI2X).
SPI_CLOCKS: Final = tuple(16_000_000 // divider for divider in (2, 4, 8, 16, 32, 64, 128))
#: The Arduino Uno pins that may select an SPI chip, by the port pin they are on: D2..D10 and
#: A0..A5 (D0 and D1 carry the serial line to the host; D11, D12 and D13 are MOSI, MISO and
#: SCK).
SPI_CS_PINS: Final = {**{f"D{n}": ("D", n) for n in range(2, 8)},
                      **{f"D{n}": ("B", n - 8) for n in range(8, 11)},
                      **{f"A{n}": ("C", n) for n in range(6)}}
#: The properties of each kind of bus beyond ``kind``, ``clock``, ``addr_width`` and
#: ``auto_increment``.
_BUS_OWN: Final = {"i2c": ("address",), "spi": ("mode", "cs", "read_mask", "write_mask",
                                                 "verify")}
#: Each bus's clock when the map gives none, in Hz.
_BUS_CLOCK: Final = {"i2c": 100_000, "spi": 1_000_000}


@dataclass(frozen=True)
class Bus:
    """Where the chip a map describes sits, for a board that bridges to it (the C firmware's
    bridge, ``docs/firmware.md``): the user-defined properties ``regdev_bus``,
    ``regdev_i2c_address``, ``regdev_bus_clock``, ``regdev_reg_addr_width``,
    ``regdev_auto_increment`` and, for SPI, ``regdev_spi_mode``, ``regdev_spi_cs``,
    ``regdev_spi_read_mask``, ``regdev_spi_write_mask`` and ``regdev_spi_verify`` of the map
    (``docs/maps.md``).

    Attributes:
        kind: the bus, one of :data:`BUS_KINDS` (``"i2c"``, ``"spi"``).
        address: I2C only (required there): the chip's 7-bit address, 0x08..0x77 (0x76 for a
            BME280); None on SPI.
        clock: the bus clock in Hz: on I2C 10000..400000 (default 100000); on SPI one of
            :data:`SPI_CLOCKS`, 125000..8000000 (default 1000000).
        addr_width: bits of the register address sent before the data, 8 or 16 (16: the
            high byte 0 first, as 24C32-style EEPROMs take it); default 8.
        auto_increment: True when the chip moves to the next register after each byte of a
            burst (most do); False makes the bridge move a block one register at a time.
        mode: SPI only: the SPI mode 0..3 (CPOL, CPHA: mode 0 is CPOL 0, CPHA 0); default 0.
        cs: SPI only: the Uno pin that selects the chip (active low), one of
            :data:`SPI_CS_PINS`; default ``"D10"`` (PB2, the SPI's own SS).
        read_mask, write_mask: SPI only: the bits set in the first address byte of a read
            and of a write, 0..255; the address's own bits there are replaced (default 0x80
            and 0x00: bit 7 set to read, as a BME280 in SPI mode takes it; an SX1276 is
            0x00 and 0x80). They must differ.
        verify: SPI only: True to have the bridge read back each write and answer an error
            when the chip does not hold the bits written (SPI has no acknowledgement);
            default False.

    Raises:
        MapError: a value out of its range or of the wrong type, or a property of the other
            bus.
    """

    kind: str
    address: int | None = None
    clock: int | None = None
    addr_width: int = 8
    auto_increment: bool = True
    mode: int | None = None
    cs: str | None = None
    read_mask: int | None = None
    write_mask: int | None = None
    verify: bool | None = None

    def __post_init__(self) -> None:
        if self.kind not in BUS_KINDS:
            raise MapError(f"the bus: {_shown(self.kind)} is not a bus the bridge knows; "
                           f"expected one of {', '.join(BUS_KINDS)}")
        other = next(kind for kind in BUS_KINDS if kind != self.kind)
        stray = [name for name in _BUS_OWN[other] if getattr(self, name) is not None]
        if stray:
            raise MapError(f"the bus: {', '.join(stray)} {'is' if len(stray) == 1 else 'are'} "
                           f"for {other.upper()}; this chip is on {self.kind.upper()}")
        if self.clock is None:
            object.__setattr__(self, "clock", _BUS_CLOCK[self.kind])
        if self.kind == "i2c":
            if self.address is None:
                raise MapError("the bus: an I2C chip needs its 7-bit address "
                               "(regdev_i2c_address; in JSON, `address`)")
            if type(self.address) is not int or self.address not in I2C_ADDRESSES:
                raise MapError(f"the bus: the I2C address must be a 7-bit address 0x08..0x77, "
                               f"got {_shown(self.address)}")
            if type(self.clock) is not int or self.clock not in I2C_CLOCKS:
                raise MapError(f"the bus: the clock must be 10000..400000 Hz, got "
                               f"{_shown(self.clock)}")
        else:
            self._check_spi()
        if self.addr_width not in (8, 16) or type(self.addr_width) is not int:
            raise MapError(f"the bus: the register address width must be 8 or 16 bits, got "
                           f"{_shown(self.addr_width)}")
        if type(self.auto_increment) is not bool:
            raise MapError("the bus: auto-increment must be true or false")

    def _check_spi(self) -> None:
        set_ = object.__setattr__
        for name, default in (("mode", 0), ("cs", "D10"), ("read_mask", 0x80),
                              ("write_mask", 0x00), ("verify", False)):
            if getattr(self, name) is None:
                set_(self, name, default)
        if type(self.clock) is not int or self.clock not in SPI_CLOCKS:
            raise MapError(f"the bus: the ATmega328P makes its SPI clock from 16 MHz divided "
                           f"by 2..128: {', '.join(map(str, SPI_CLOCKS))} Hz; got "
                           f"{_shown(self.clock)}")
        if type(self.mode) is not int or self.mode not in range(4):
            raise MapError(f"the bus: the SPI mode must be 0, 1, 2 or 3, got "
                           f"{_shown(self.mode)}")
        if type(self.cs) is not str or self.cs not in SPI_CS_PINS:
            raise MapError(f"the bus: the chip-select pin must be one of the Uno's D2..D10 or "
                           f"A0..A5 (D0 and D1 carry the serial line, D11..D13 are MOSI, MISO "
                           f"and SCK), got {_shown(self.cs)}")
        for name in ("read_mask", "write_mask"):
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value <= 0xFF:
                raise MapError(f"the bus: the SPI {name.replace('_', ' ')} must be a byte "
                               f"0..255, got {_shown(value)}")
        if self.read_mask == self.write_mask:
            raise MapError(f"the bus: the SPI read mask and write mask are both "
                           f"0x{self.read_mask:02X}: the chip could not tell a read from a "
                           "write")
        if type(self.verify) is not bool:
            raise MapError("the bus: verify must be true or false")

    @property
    def rw_mask(self) -> int:
        """SPI: the bits of the first address byte that say read or write (the read and
        write masks together); 0 on I2C."""
        return (self.read_mask or 0) | (self.write_mask or 0)

    @property
    def chip(self) -> str:
        """How messages name the chip: ``the chip at 0x76`` (I2C), ``the SPI chip on D10``."""
        if self.kind == "i2c":
            return f"the chip at 0x{self.address:02X}"
        return f"the SPI chip on {self.cs}"

    def to_dict(self) -> dict[str, Any]:
        """The bus as the compiled JSON form's ``"bus"`` object."""
        if self.kind == "i2c":
            return {"kind": self.kind, "address": self.address, "clock": self.clock,
                    "addr_width": self.addr_width, "auto_increment": self.auto_increment}
        return {"kind": self.kind, "clock": self.clock, "addr_width": self.addr_width,
                "auto_increment": self.auto_increment,
                **{name: getattr(self, name) for name in _BUS_OWN["spi"]}}


def _check_spi_addresses(registers: Sequence[Register], bus: Bus) -> None:
    """Refuse two registers the chip on ``bus`` (SPI, 8-bit addresses) cannot tell apart: the
    read and write bits replace bits of the address byte, so addresses that differ only there
    (0x74 and 0xF4 with bit 7 the read bit) are one register to the chip."""
    seen: dict[int, Register] = {}
    for register in registers:
        wire = register.addr & ~bus.rw_mask & 0xFF
        if register.addr <= 0xFF and wire in seen:
            raise _fail(f"register {register.label}", (
                f"on SPI its address byte is 0x{wire:02X} (the bits 0x{bus.rw_mask:02X} say "
                f"read or write), the same as {seen[wire].label}'s"))
        seen[wire] = register


class RegisterMap:
    """A device's registers: looked up by address and by name. Immutable.

    Args:
        registers: the registers, any order (kept in address order); addresses and names
            must be distinct. At least one.
        name: the map's (the device's) name; ``""`` for none.
        description: what the device is.
        values: its typed values (:class:`~regdev.devices._values.Value`), in the order
            given; none by default.
        bus: where the chip is, for a board that bridges to it (:class:`Bus`); None for a
            device that holds its registers itself.

    Raises:
        MapError: no register, two registers at one address of one table or with one name,
            or a ``FIELD`` name that is not unique in its register; or a value that does not
            fit its registers (``_values.bind_values``).
    """

    __slots__ = ("_by_addr", "_by_name", "_codecs", "_digest", "_tables", "bus", "description",
                 "name", "registers", "values")

    bus: Bus | None
    name: str
    description: str
    registers: tuple[Register, ...]
    values: tuple[Value, ...]
    _codecs: dict[str, ValueCodec]
    _by_addr: dict[int, Register]
    _by_name: dict[str, Register]
    _tables: dict[str, dict[int, Register]]

    def __init__(self, registers: Iterable[Register], *, name: str = "",
                 description: str = "", values: Iterable[Value] = (),
                 bus: Bus | None = None) -> None:
        regs = tuple(sorted(registers, key=_table_order))
        if not regs:
            raise MapError("a register map needs at least one register")
        if len(regs) > MAX_REGISTERS:
            raise MapError(f"a register map holds at most {MAX_REGISTERS} registers, got "
                           f"{len(regs)}")
        tables: dict[str, dict[int, Register]] = {}
        by_name: dict[str, Register] = {}
        for each in regs:
            if not isinstance(each, Register):
                raise MapError(f"{_shown(each)} is not a Register")
            by_addr = tables.setdefault(each.table, {})
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
        if bus is not None and bus.kind == "spi" and bus.addr_width == 8:
            _check_spi_addresses(regs, bus)
        set_(self, "_by_addr", tables.get("holding", {}))
        set_(self, "_by_name", by_name)
        set_(self, "_tables", tables)
        values = tuple(values)
        set_(self, "values", values)
        set_(self, "_codecs", bind_values(values, {
            (getattr(r, "table", "holding"), r.addr): r for r in regs}) if values else {})

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a RegisterMap is immutable: cannot set `{name}`")

    @classmethod
    def from_file(cls, path: str | Path) -> RegisterMap:
        """Read a register map from a file: SystemRDL when the name ends in ``.rdl`` (any
        case; needs the ``rdl`` extra, ``pip install 'regdev[rdl]'``), else the compiled JSON
        form (``regdev map FILE --json``), as ``--map FILE`` reads it.

        Args:
            path: the file.

        Returns:
            The map.

        Raises:
            MapError: the file cannot be read, the SystemRDL compiler is not installed or
                reports an error, or the map holds something regdev does not support; one
                line naming the file (and the line).
        """
        # The readers (devices/_rdl.py) build on this module, so they are looked up when a
        # file is read, not imported with it: no import cycle between the two.
        readers = importlib.import_module(f"{__package__}._rdl")
        found: RegisterMap = readers.load_map(path)
        return found

    @classmethod
    def default(cls) -> RegisterMap:
        """The default map: 16 unnamed read-write registers at 0..15, reset 0, no fields:
        the device regdev had before it had maps (its tools, checks and messages are the
        same)."""
        return _DEFAULT

    @property
    def is_default(self) -> bool:
        """True for a map equal to :meth:`default`."""
        # (the default itself at once; a map with values, or of another size, without
        # comparing every register: the device checks this on every access)
        return self is _DEFAULT or (not self.values and len(self.registers) == len(
            _DEFAULT.registers) and self == _DEFAULT)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RegisterMap):
            return NotImplemented
        return (self.registers, self.name, self.description, self.values, self.bus) == (
            other.registers, other.name, other.description, other.values, other.bus)

    def __hash__(self) -> int:
        return hash((self.registers, self.name))

    def __len__(self) -> int:
        return len(self.registers)

    def __iter__(self) -> Iterator[Register]:
        return iter(self.registers)

    def __repr__(self) -> str:
        return f"RegisterMap(name={self.name!r}, registers={len(self.registers)})"

    def at(self, addr: int, table: str = "holding") -> Register | None:
        """The register at ``addr`` of ``table`` (holding registers by default), or None."""
        if table == "holding":
            return self._by_addr.get(addr) if type(addr) is int else None
        found = self._tables.get(table)
        return found.get(addr) if found is not None and type(addr) is int else None

    @property
    def tables(self) -> tuple[str, ...]:
        """The tables the map has registers in, in :data:`TABLES` order."""
        return tuple(table for table in TABLES if table in self._tables)

    def in_table(self, table: str) -> tuple[Register, ...]:
        """The registers of ``table``, lowest address first (empty for a table it has
        none in)."""
        return tuple(self._tables.get(table, {}).values())

    @property
    def widest(self) -> int:
        """The widest register's width, in bits (8 for the default map)."""
        return max(register.width for register in self.registers)

    @property
    def top(self) -> int:
        """The largest value of the widest register (255 for the default map)."""
        return (1 << self.widest) - 1

    def serial_problem(self) -> str | None:
        """Why regdev's serial protocol (and its C firmware) cannot carry this map, or None:
        it carries 8-bit holding registers at addresses 0..255 (one byte each on the wire)."""
        for register in self.registers:
            if register.table != "holding":
                return (f"register {register.label} is in the {register.table} table; regdev's "
                        "serial protocol carries holding registers only (use Modbus)")
            if register.width != REGISTER_BITS:
                return (f"register {register.label} is {register.width} bits wide; regdev's "
                        "serial protocol carries 8-bit registers (one byte each on the wire)")
            if register.addr >= SERIAL_ADDRESSES:
                return (f"register {register.label} is at address {register.addr}; regdev's "
                        f"serial protocol carries addresses 0..{SERIAL_ADDRESSES - 1} (one byte "
                        "on the wire)")
        return None

    def named(self, name: str) -> Register | None:
        """The register called ``name``, or None."""
        return self._by_name.get(name)

    def value(self, name: str) -> ValueCodec | None:
        """The typed value called ``name``, laid out on its registers, or None."""
        return self._codecs.get(name)

    def guarded(self) -> dict[tuple[str, int], str]:
        """The registers that hold part of a guarded typed value (``Value.guarded``: writable,
        with a range a raw write could leave), as ``(table, address)`` -> the value's name;
        the map's rules refuse a raw write into them (``value-register``)."""
        return {(codec.value.table, addr): codec.value.name
                for codec in self._codecs.values() if codec.value.guarded
                for addr in codec.addresses}

    def find_field(self, path: str) -> tuple[Register, Field] | None:
        """The register and field of ``"REGISTER.FIELD"``, or None."""
        register_name, dot, field_name = path.rpartition(".")
        register = self._by_name.get(register_name) if dot else None
        found = register.field(field_name) if register is not None else None
        return (register, found) if register is not None and found is not None else None

    @property
    def addresses(self) -> tuple[int, ...]:
        """Every holding register's address, lowest first."""
        return tuple(self._by_addr)

    @property
    def last(self) -> int:
        """The highest holding register's address (-1 for a map without holding
        registers)."""
        return next(reversed(self._by_addr)) if self._by_addr else -1

    @property
    def contiguous(self) -> bool:
        """True when the registers are all holding registers at 0..N-1 with no gap."""
        return (self.last == len(self.registers) - 1 and bool(self._by_addr)
                and self.registers[0].addr == 0)

    def read_only(self) -> frozenset[int]:
        """Addresses of the holding registers software cannot write."""
        return frozenset(r.addr for r in self._by_addr.values() if not r.writable_mask)

    def protected(self) -> frozenset[int]:
        """Addresses of the holding registers the map marks protected."""
        return frozenset(r.addr for r in self._by_addr.values() if r.protected)

    def identity(self) -> tuple[Register, ...]:
        """The identity registers (a chip ID), lowest address first: each must read its
        reset value on a device of this map."""
        return tuple(r for r in self.registers if r.identity)

    def digest(self) -> str:
        """Which map this is, as 16 upper-case hex digits: the first 8 bytes of the SHA-256
        of the map's device form, its name and each register's name, address, access, reset,
        identity flag and fields (name, bits, access, reset, onwrite, onread, enumerated
        values), as compact JSON with sorted keys (``docs/protocol.md``, "Which map the device
        serves"). Descriptions, ``protected`` and the typed values are left out: they change
        no register (a value is how the host reads registers, not what the device does). A
        device that says its map says this digest; a host compares it with its own map's."""
        cached: str | None = getattr(self, "_digest", None)
        if cached is not None:
            return cached
        form = {"name": self.name, "registers": [
            {"name": r.name, "addr": r.addr, **r._shape(), "access": r.access,
             "reset": r.reset,
             "identity": r.identity,
             "fields": [{"name": f.name, "lsb": f.lsb, "msb": f.msb, "access": f.access,
                         "reset": f.reset, "onwrite": f.onwrite, "onread": f.onread,
                         "encode": [list(pair) for pair in f.encode]} for f in r.fields]}
            for r in self.registers]}
        text = json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        digest = hashlib.sha256(text.encode("ascii")).hexdigest()[:16].upper()
        object.__setattr__(self, "_digest", digest)
        return digest

    def label(self, addr: int, table: str = "holding") -> str:
        """How messages name the register at ``addr`` (``CTRL (0x01)``, or ``3``)."""
        register = self.at(addr, table)
        return register.label if register is not None else str(addr)

    # --- the compiled JSON form -------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The map as the compiled JSON form's object (see :meth:`to_json`)."""
        out = {"format": FORMAT, "version": VERSION, "name": self.name,
               "description": self.description,
               "registers": [each.to_dict() for each in self.registers]}
        if self.values:  # (a map without values writes what it always did)
            out["values"] = [each.to_dict() for each in self.values]
        if self.bus is not None:
            out["bus"] = self.bus.to_dict()
        return out

    def to_json(self) -> str:
        """The compiled JSON form, as ``regdev map FILE --json`` writes it::

            {"format": "regdev-map", "version": 1, "name": ..., "description": ...,
             "bus": {"kind": "i2c", "address", "clock", "addr_width", "auto_increment"}
                    or {"kind": "spi", "clock", "addr_width", "auto_increment", "mode",
                    "cs", "read_mask", "write_mask", "verify"}
                    (only for a map of a chip behind a bridge),
             "registers": [{"name", "addr", "table" (only when not "holding"), "width" (only
                            when not 8; 1 for a coil), "access": "rw"|"r"|"w", "reset",
                            "description",
                            "protected", "reserved_mask", "woclr_mask", "rclr_mask",
                            "fields": [{"name", "lsb", "msb", "access", "reset",
                                        "onwrite": null|"woclr", "onread": null|"rclr",
                                        "encode": {NAME: value}, "description",
                                        "enum_descriptions": {NAME: text} (only when
                                        some value has one)}]}],
             "values": [{"name", "addr", "type", ...}] (only when it has typed values;
                        see ``_values.py`` and docs/maps.md)}

        The masks are derived from the fields (a reader may use them rather than the
        fields); :meth:`from_json` checks that they agree.
        """
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "map") -> RegisterMap:
        """Read the compiled JSON form (:meth:`to_json`).

        Strict: the text is decoded as strictly as a tool call
        (:func:`~regdev.core._json.load_json`: a key given twice in one object, NaN, trailing
        text and invalid UTF-8 are errors, said in regdev's words), every key is checked, an
        unknown one is an error, and so is a mask that disagrees with the fields.

        Args:
            text: the JSON text (UTF-8 when bytes).
            source: names the map in messages, e.g. its file name.

        Raises:
            MapNotJSON: the text is not one strict JSON document: one line naming ``source``
                and what is wrong where, e.g. ``map.json: not valid JSON: more text after the
                end of the JSON document, at byte 25``.
            MapError: one line naming ``source`` and the place, e.g.
                ``map.json: `registers[1].fields[0].msb`: must be an integer 0..7``; a
                SunSpec device image (``models``, no ``registers``) is said to be one,
                with how to get its map.
        """
        # (Imported here: the simulator run as a script imports this module on the standard
        # library alone, and reads its maps with from_dict.)
        from ..core._json import load_json  # noqa: PLC0415

        start = text.lstrip()[:1]
        json_like = start in ((b"{", b"[") if isinstance(start, bytes) else ("{", "["))
        try:
            # A file that is not UTF-8 is said so first, as a SystemRDL file is
            if isinstance(text, bytes):
                text = text.decode("utf-8")
            document = load_json(text)
        except UnicodeDecodeError as error:
            raise MapNotJSON(f"{source}: not valid JSON: {unicode_problem(error)}",
                             json_like=json_like) from None
        except ValueError as error:  # in regdev's words already
            raise MapNotJSON(f"{source}: not valid JSON: {error}",
                             json_like=json_like) from None
        return cls.from_dict(document, source, text)

    @classmethod
    def from_dict(cls, document: object, source: str = "map",
                  text: str | None = None) -> RegisterMap:
        """Read the compiled JSON form, already decoded (see :meth:`from_json`); ``text``,
        the JSON text when there is one, places each typed value at its line in messages.

        Raises:
            MapError: as :meth:`from_json`.
        """
        reader = _Reader(source)
        if type(document) is dict and "models" in document and "registers" not in document:
            # (a SunSpec device image, pysunspec2's device JSON: what a server serves)
            raise MapError(
                f"{source}: a SunSpec device image (its `models`' register values, for a "
                "Modbus server to serve), not a register map: serve it (docs/sunspec.md, "
                "\"Example images\"), then `regdev map --sunspec-discover "
                "modbus+tcp://HOST:PORT?unit=1` prints its map, and with `--json -o "
                "MAP.json` writes the map that --map takes")
        top = reader.obj(document, "", {"format", "version", "name", "description",
                                           "registers", "values", "bus"},
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
        values = values_from_json(top["values"], source, text) if "values" in top else ()
        bus = reader.bus(top["bus"]) if "bus" in top else None
        try:
            return cls(registers, name=reader.text(top.get("name", ""), "name"),
                       description=reader.text(top.get("description", ""), "description"),
                       values=values, bus=bus)
        except MapError as error:  # (a value's message names its file already)
            raise (error if str(error).startswith(source) else
                   MapError(f"{source}: {error}")) from None


_KEYS_REGISTER = {"name", "addr", "access", "reset", "description", "protected", "identity",
                  "reserved_mask", "woclr_mask", "rclr_mask", "fields", "width", "table"}


def _table_order(register: object) -> tuple[int, int]:
    """Registers in a map: holding first, then input, coil, discrete; by address in each."""
    if not isinstance(register, Register):
        return (0, 0)
    return (TABLES.index(register.table), register.addr)
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
                                      "auto_increment", "mode", "cs", "read_mask",
                                      "write_mask", "verify"}, {"kind"})
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
        table, width = self.shape(data, where)
        parsed = tuple(self.field(each, f"{where}.fields[{index}]", width)
                       for index, each in enumerate(fields))
        protected = data.get("protected", False)
        if type(protected) is not bool:
            raise self.error(f"{where}.protected", "must be true or false")
        identity = data.get("identity", False)
        if type(identity) is not bool:
            raise self.error(f"{where}.identity", "must be true or false")
        addr = self.integer(data["addr"], f"{where}.addr", 0, MAX_ADDRESS)
        description = self.text(data.get("description", ""), f"{where}.description")
        try:
            register = Register(
                name=name, addr=addr,
                access=data.get("access"), reset=data.get("reset"),
                description=description, fields=parsed, protected=protected,
                identity=identity, width=width, table=table)
        except MapError as error:
            raise self.error(where, str(error)) from None
        for key in ("reserved_mask", "woclr_mask", "rclr_mask"):
            if key in data and data[key] != getattr(register, key):
                raise self.error(f"{where}.{key}", f"is {_shown(data[key])}, but the fields "
                                                   f"make it {getattr(register, key)}")
        return register

    def shape(self, data: dict[str, Any], where: str) -> tuple[str, int]:
        """A register's ``table`` and ``width`` (the table's default width when absent)."""
        table = data.get("table", "holding")
        if table not in TABLES:
            raise self.error(f"{where}.table", f"must be one of {', '.join(TABLES)}")
        width = data.get("width", 1 if table in ("coil", "discrete") else REGISTER_BITS)
        problem = _width_problem(table, width)
        if problem is not None:
            raise self.error(f"{where}.width", problem)
        return table, width

    def field(self, item: object, where: str, width: int = REGISTER_BITS) -> Field:
        data = self.obj(item, where, _KEYS_FIELD, {"name", "lsb", "msb"})
        lsb, msb = data["lsb"], data["msb"]
        if _is_int(lsb) and _is_int(msb) and 0 <= lsb <= msb and msb >= width:
            raise self.error(where, f"bits [{msb}:{lsb}] are not within {width - 1}..0 "
                                    "(msb >= lsb)")
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


_DEFAULT = RegisterMap([Register(None, addr) for addr in range(16)])
