"""Typed values: named quantities held in one or more consecutive registers, in engineering units.

A :class:`Value` is declared in a register map (``RegisterMap.values``; the JSON form's
``"values"``, SystemRDL's ``regdev_*`` properties, ``docs/maps.md``): a name (``SETPOINT``,
``ac_meter_abcn.W``), its first register, a type (``int8``..``int64``, ``uint8``..``uint64``,
``float32``, ``float64`` (IEEE 754), ``bool``, ``string`` of N registers), the order of its
bytes and registers, a scale (``value = raw x scale + offset``, or SunSpec's ``sunssf``:
``value = raw x 10^sf``, ``sf`` another int16 value), a unit, a range in units, access, a
description and enumerated values.

Rules of this file:

* Standard library only (the map model and the firmware simulator import it).
* Width-agnostic: the width of a register (8 bits for regdev's own maps; 16, 32 or 64 where a
  map says so; 1 for a coil) comes from the map. A value's bytes, most significant first
  (IEEE 754 big-endian for a float, the encoded text then padding for a string), are cut into
  register-sized words; ``word_order`` ``"little"`` puts the last word in the first register,
  ``byte_order`` ``"little"`` reverses the bytes within each register. This is pymodbus's
  ``convert_to_registers`` for 16-bit registers (``word_order``; its bytes within a register
  are big-endian, so ``byte_order="little"`` is its registers byte-swapped), which the tests
  use as the oracle. With 8-bit registers a register holds one byte: the two orders name the
  same thing, either may be given, and both must then agree.
* Exact: engineering values are :class:`decimal.Decimal` (never rounded through float); a
  write's range and resolution are checked on the number as the call wrote it.
* Every problem of a declaration is one :class:`MapError` line naming the value and where it
  is declared (``map.json:14: value SETPOINT: ...``), raised when the map is made.
* A write's problems are ``(code, message)`` pairs for the gate to word as refusals:
  ``type-value``, ``range-value`` and ``resolution`` (docs/errors.md).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as _dataclass_field
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal, InvalidOperation
from typing import Any, Final, Protocol

from ..core._errors import MapError
from ..core._text import escape_text

__all__ = ["ENCODINGS", "MAX_VALUE_REGISTERS", "ORDERS", "PADDINGS", "TABLES", "TYPES",
           "Value", "ValueCodec", "bind_values", "float_text"]

#: The types, as ``name: (bits, kind, signed)``; a string's bits are its registers'.
TYPES: Final[dict[str, tuple[int, str, bool]]] = {
    "int8": (8, "int", True), "int16": (16, "int", True), "int32": (32, "int", True),
    "int64": (64, "int", True), "uint8": (8, "int", False), "uint16": (16, "int", False),
    "uint32": (32, "int", False), "uint64": (64, "int", False),
    "float32": (32, "float", True), "float64": (64, "float", True),
    "bool": (1, "bool", False), "string": (0, "string", False),
}
#: Byte and word orders.
ORDERS: Final = ("big", "little")
#: The Modbus tables a value's registers may be in (``Register.table``; ``"holding"`` by
#: default).
TABLES: Final = ("holding", "input", "coil", "discrete")
#: A string's encodings.
ENCODINGS: Final = ("ascii", "utf-8")
#: A string's padding (after the text, to the end of its registers), by name.
PADDINGS: Final = {"nul": b"\x00", "space": b" "}
#: Most registers a value spans: one block read or write (``MAX_BLOCK``), so a value is read
#: in one transaction and written in one atomic write.
MAX_VALUE_REGISTERS: Final = 16
#: Longest unit, in characters (``degC``, ``W``, ``%``, ``kWh``).
MAX_UNIT: Final = 32
_MAX_NAME = 64
_MAX_DESCRIPTION = 4096
#: A value's name: identifiers, with array indices, joined by dots (``curve[2].v``).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[0-9]+\])*"
                   r"(?:\.[A-Za-z_][A-Za-z0-9_]*(?:\[[0-9]+\])*)*")
_ENUM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Exact enough for any product of a 64-bit raw value and a scale of a map's.
_EXACT = Context(prec=100)
#: The SystemRDL term of each JSON key of a value whose property is not ``regdev_`` + key.
_RDL_TERMS: Final = {"name": "regdev_value", "description": "desc", "table": "regdev_table",
                     "addr": "the register's address"}
#: What a float's non-finite values are called in results and calls (JSON has no NaN).
NON_FINITE: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _shown(value: object) -> str:
    return f"`{escape_text(value)}`" if isinstance(value, str) else repr(value)


def _decimal(value: object, what: str) -> Decimal | None:
    """``value`` (a decimal string, an int, a Decimal or a float as written) as a finite
    Decimal; None for None.

    Raises:
        ValueError: anything else (bool, NaN, text that is no number), naming ``what``.
    """
    if value is None:
        return None
    try:
        if type(value) is float:
            number = Decimal(repr(value))
        elif type(value) in (int, str, Decimal):
            number = Decimal(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
        else:
            raise InvalidOperation
    except (InvalidOperation, ValueError):
        raise ValueError(f"{what} must be a number (a decimal string such as \"0.1\"), got "
                         f"{_shown(value)}") from None
    if not number.is_finite():
        raise ValueError(f"{what} must be a finite number, got {_shown(value)}")
    return number


def float_text(number: float, bits: int) -> str:
    """The shortest decimal text that reads back as ``number`` in a float of ``bits`` (32 or
    64): ``21.5``, ``0.1`` for the float32 nearest 0.1."""
    if bits == 64:
        return repr(number)
    for digits in range(1, 10):
        text = f"{number:.{digits}g}"
        try:
            if struct.unpack(">f", struct.pack(">f", float(text)))[0] == number:
                return text
        except OverflowError:  # (rounded away from the largest float32)
            continue
    return repr(number)  # pragma: no cover - 9 digits always round-trip a float32


def _plain(number: Decimal) -> Decimal | int:
    """A Decimal as a result shows it: an integral one with a positive exponent (``1.2E+3``)
    as an int, else as it is (``21.5``, ``20.0``: the resolution's digits kept)."""
    if number.as_tuple().exponent > 0:  # type: ignore[operator]
        return int(number)
    return number


@dataclass(frozen=True, slots=True)
class Value:
    """One typed value of a register map, as declared (the map works out its layout).

    Attributes:
        name: dotted and indexed identifiers (``SETPOINT``, ``common.Mn``, ``curve[2].v``),
            at most 64 characters.
        addr: the address of its first register (a register of the map, in ``table``).
        type: one of :data:`TYPES`.
        table: the Modbus table of its registers (:data:`TABLES`), ``"holding"`` by default.
        count: its registers, 1..16 (:data:`MAX_VALUE_REGISTERS`); required for a string,
            else None takes what its type needs at the registers' width.
        byte_order: ``"big"`` or ``"little"``: the order of its bytes in a register; required
            when a register holds more than one of its bytes.
        word_order: ``"big"`` (first register most significant) or ``"little"``; required
            when it spans more than one register (with 8-bit registers, ``byte_order`` may
            say it instead).
        scale: engineering value = raw x scale + offset (a nonzero decimal; None: 1).
        offset: see ``scale`` (None: 0).
        scale_factor: the name of another value of the map, an ``int16``: engineering value
            = raw x 10^sf (SunSpec's ``sunssf``); not with ``scale`` or ``offset``.
        unit: the unit, at most 32 printable characters (``degC``, ``W``).
        min: the least engineering value a write may give (a decimal; None: the type's).
        max: the greatest (None: the type's).
        access: ``"rw"``, ``"r"`` or ``"w"``.
        description: what the value is, at most 4096 characters.
        enum: named raw values of an integer value, ``(NAME, raw)`` pairs (a mapping is
            taken too).
        encoding: a string's, ``"ascii"`` or ``"utf-8"``.
        padding: a string's, after the text: ``"nul"`` or ``"space"``.
        allow_nan: a float value may be written NaN or an infinity (``"NaN"``,
            ``"Infinity"``, ``"-Infinity"``).
        where: where it is declared, for messages (``map.json:14``); not compared.
        rdl: declared in SystemRDL: messages name its ``regdev_*`` properties
            (``regdev_word_order``), not the JSON keys; not compared.

    Raises:
        MapError: the declaration is not consistent on its own (the message names the value
            and ``where``); what depends on the registers is checked by the map.
    """

    name: str
    addr: int
    type: str
    table: str = "holding"
    count: int | None = None
    byte_order: str | None = None
    word_order: str | None = None
    scale: Decimal | None = None
    offset: Decimal | None = None
    scale_factor: str | None = None
    unit: str = ""
    min: Decimal | None = None
    max: Decimal | None = None
    access: str = "rw"
    description: str = ""
    enum: tuple[tuple[str, int], ...] = ()
    encoding: str = "ascii"
    padding: str = "nul"
    allow_nan: bool = False
    where: str = _dataclass_field(default="", compare=False)
    rdl: bool = _dataclass_field(default=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if isinstance(self.enum, Mapping):
            set_(self, "enum", tuple(self.enum.items()))
        elif not isinstance(self.enum, tuple):
            set_(self, "enum", tuple(self.enum))
        for key in ("scale", "offset", "min", "max"):
            try:
                set_(self, key, _decimal(getattr(self, key), self.term(key)))
            except ValueError as error:
                raise self.fail(str(error)) from None
        self.check()

    @property
    def label(self) -> str:
        """How messages name the value: ``value SETPOINT``."""
        return (f"value {self.name}" if type(self.name) is str and _NAME.fullmatch(self.name)
                else f"a value at {_shown(self.addr)}")

    def term(self, key: str) -> str:
        """How messages name the declaration's ``key`` (a JSON key: ``word_order``): the
        SystemRDL property (``regdev_word_order``) for a value declared in SystemRDL."""
        return _RDL_TERMS.get(key, f"regdev_{key}") if self.rdl else key

    def fail(self, problem: str) -> MapError:
        """The :class:`MapError` of ``problem``, naming the value and where it is declared."""
        return MapError(f"{self.where + ': ' if self.where else ''}{self.label}: {problem}")

    def check(self) -> None:
        """Raise :class:`MapError` unless the declaration is consistent on its own."""
        if type(self.name) is not str or not _NAME.fullmatch(self.name) or len(
                self.name) > _MAX_NAME:
            raise self.fail("the name must be identifiers joined by dots, with array indices "
                            f"(common.Mn, curve[2].v), at most {_MAX_NAME} characters, got "
                            f"{_shown(self.name)}")
        if type(self.addr) is not int or self.addr < 0:
            raise self.fail(f"addr must be a register address, got {_shown(self.addr)}")
        if self.type not in TYPES:
            raise self.fail(f"{self.term('type')} must be one of {', '.join(TYPES)}, got "
                            f"{_shown(self.type)}")
        if self.table not in TABLES:
            raise self.fail(f"{self.term('table')} must be one of {', '.join(TABLES)}, got "
                            f"{_shown(self.table)}")
        kind = self.kind
        if self.count is not None and (type(self.count) is not int or self.count < 0
                                       or self.count > MAX_VALUE_REGISTERS):
            raise self.fail(f"{self.term('count')} must be an integer 1.."
                            f"{MAX_VALUE_REGISTERS} (registers), "
                            f"got {_shown(self.count)}")
        if kind == "string" and not self.count:
            raise self.fail(f"a string of length 0: give {self.term('count')}, its registers (1.."
                            f"{MAX_VALUE_REGISTERS})")
        if self.count == 0:
            raise self.fail(f"{self.term('count')} must be an integer 1.."
                            f"{MAX_VALUE_REGISTERS} (registers), "
                            "got 0")
        for key in ("byte_order", "word_order"):
            if getattr(self, key) not in (None, *ORDERS):
                raise self.fail(f"{self.term(key)} must be \"big\" or \"little\", got "
                                f"{_shown(getattr(self, key))}")
        numeric = kind in ("int", "float")
        if not numeric:
            for key in ("scale", "offset", "scale_factor", "min", "max"):
                if getattr(self, key) is not None:
                    raise self.fail(f"{self.term(key)} is for a number; a {self.type} has none")
            if self.unit:
                raise self.fail(f"{'regdev_unit' if self.rdl else 'a unit'} is for a number; a "
                                f"{self.type} has none")
        if self.scale is not None and self.scale.is_zero():
            raise self.fail(f"{self.term('scale')} 0 makes every raw value 0: give a nonzero "
                            "scale")
        if self.scale_factor is not None:
            if type(self.scale_factor) is not str or not _NAME.fullmatch(self.scale_factor):
                raise self.fail(f"{self.term('scale_factor')} must name another value, got "
                                f"{_shown(self.scale_factor)}")
            if self.scale is not None or self.offset is not None:
                raise self.fail(f"give {self.term('scale')} and {self.term('offset')}, or "
                                f"{self.term('scale_factor')}, not both")
        if type(self.unit) is not str or len(self.unit) > MAX_UNIT or not (
                self.unit.isprintable()):
            raise self.fail(f"{self.term('unit')} must be at most {MAX_UNIT} printable "
                            "characters, got "
                            f"{_shown(self.unit)}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise self.fail(f"{self.term('min')} {self.min} is above {self.term('max')} "
                            f"{self.max}")
        if self.access not in ("rw", "r", "w"):
            raise self.fail(f"{self.term('access')} must be rw, r or w, got {_shown(self.access)}")
        if type(self.description) is not str or len(self.description) > _MAX_DESCRIPTION:
            raise self.fail(f"the description must be a string of at most {_MAX_DESCRIPTION} "
                            "characters")
        if self.enum and kind != "int":
            raise self.fail(f"{self.term('enum')} is for an integer; a {self.type} has none")
        bits, _, signed = TYPES[self.type]
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (
            0, (1 << bits) - 1)
        names: set[str] = set()
        raws: set[int] = set()
        for pair in self.enum:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise self.fail(f"{self.term('enum')} holds {_shown(pair)}, not a NAME: raw "
                                "pair")
            name, raw = pair
            if type(name) is not str or not _ENUM_NAME.fullmatch(name) or len(name) > 64:
                raise self.fail(f"an enum name must be an identifier, got {_shown(name)}")
            if type(raw) is not int or not low <= raw <= high:
                raise self.fail(f"{self.term('enum')} {name} = {_shown(raw)} does not fit "
                                f"{self.type} ({low}..{high})")
            if name in names or raw in raws:
                raise self.fail(f"{self.term('enum')} {name} = {raw} repeats a name or a value")
            names.add(name)
            raws.add(raw)
        if self.encoding not in ENCODINGS:
            raise self.fail(f"{self.term('encoding')} must be ascii or utf-8, got "
                            f"{_shown(self.encoding)}")
        if self.padding not in PADDINGS:
            raise self.fail(f"{self.term('padding')} must be nul or space, got "
                            f"{_shown(self.padding)}")
        if type(self.allow_nan) is not bool:
            raise self.fail(f"{self.term('allow_nan')} must be true or false")
        if self.allow_nan and kind != "float":
            raise self.fail(f"{self.term('allow_nan')} is for a float; a {self.type} has no NaN")

    @property
    def kind(self) -> str:
        """``"int"``, ``"float"``, ``"bool"`` or ``"string"``."""
        return TYPES[self.type][1]

    @property
    def readable(self) -> bool:
        """True when software can read it (``rw`` or ``r``)."""
        return self.access != "w"

    @property
    def writable(self) -> bool:
        """True when software can write it (``rw`` or ``w``)."""
        return self.access != "r"

    @property
    def guarded(self) -> bool:
        """True when it is writable and its registers can hold a raw value ``write_value``
        refuses: it has a ``min`` or a ``max``, or it is a float that takes no NaN (its range
        is the finite numbers). The map's rules refuse a raw write into its registers
        (``value-register``), so nothing outside its range reaches the device."""
        return self.writable and (self.min is not None or self.max is not None or (
            self.kind == "float" and not self.allow_nan))

    def to_dict(self) -> dict[str, Any]:
        """The value in the compiled JSON form (keys at their defaults left out; decimals as
        strings, exact)."""
        out: dict[str, Any] = {"name": self.name, "addr": self.addr, "type": self.type}
        defaults = {"table": "holding", "count": None, "byte_order": None, "word_order": None,
                    "scale": None, "offset": None, "scale_factor": None, "unit": "",
                    "min": None, "max": None, "access": "rw", "description": "",
                    "encoding": "ascii", "padding": "nul", "allow_nan": False}
        for key, default in defaults.items():
            item = getattr(self, key)
            if item != default or (key in ("encoding", "padding") and self.kind == "string"):
                out[key] = str(item) if isinstance(item, Decimal) else item
        if self.enum:
            out["enum"] = dict(self.enum)
        return out


#: The keys of a value in the compiled JSON form.
VALUE_KEYS: Final = frozenset({
    "name", "addr", "table", "type", "count", "byte_order", "word_order", "scale", "offset",
    "scale_factor", "unit", "min", "max", "access", "description", "enum", "encoding",
    "padding", "allow_nan"})


def values_from_json(items: object, source: str, text: str | None = None) -> tuple[Value, ...]:
    """The ``"values"`` array of the compiled JSON form as :class:`Value` declarations, each
    placed at its line of ``text`` (``map.json:14``) where it can be found there, else at
    ``values[3]``.

    Raises:
        MapError: not an array of objects, an unknown key, or a declaration that is not
            consistent (one line naming the value and its place).
    """
    if type(items) is not list:
        raise MapError(f"{source}: `values`: must be an array of values")
    out = []
    search = 0
    if text is not None:
        found = re.search(r'"values"\s*:', text)
        search = found.end() if found else len(text)
    for index, item in enumerate(items):
        where = f"{source}: `values[{index}]`"
        if type(item) is not dict:
            raise MapError(f"{where}: must be an object")
        name = item.get("name")
        if text is not None and type(name) is str:
            found = re.compile(r'"name"\s*:\s*' + re.escape(f'"{name}"')).search(text, search)
            if found is not None:
                where = f"{source}:{text.count(chr(10), 0, found.start()) + 1}"
                search = found.end()
        for key in item:
            if key not in VALUE_KEYS:
                raise MapError(f"{where}: `values[{index}].{escape_text(key)}`: unknown key; "
                               f"allowed: {', '.join(sorted(VALUE_KEYS))}")
        for key in ("name", "addr", "type"):
            if key not in item:
                raise MapError(f"{where}: `values[{index}].{key}`: required")
        enum = item.get("enum", {})
        if type(enum) is not dict:
            raise MapError(f"{where}: `values[{index}].enum`: must be an object of NAME: raw")
        fields = {key: item[key] for key in VALUE_KEYS - {"enum"} if key in item}
        out.append(Value(**fields, enum=tuple(enum.items()), where=where))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ValueCodec:
    """A value laid out on its registers: what the map works out (:func:`bind_values`).

    Attributes:
        value: the declaration.
        width: bits of each of its registers (8, 16, 32, 64; 1 for a coil).
        count: its registers.
        word_order: the order of its registers (``"big"``: the most significant first).
        byte_order: the order of its bytes within a register.
        factor: the value that holds its scale factor (an int16), or None.
    """

    value: Value
    width: int
    count: int
    word_order: str
    byte_order: str
    factor: ValueCodec | None = None
    #: The bounds of a value without a scale factor, worked out once (:meth:`bounds`).
    _bounds: tuple[Decimal, Decimal] | None = _dataclass_field(
        default=None, init=False, repr=False, compare=False)
    #: An integer value's enumerated names by raw value.
    _names: dict[int, str] = _dataclass_field(
        default_factory=dict, init=False, repr=False, compare=False)
    #: True when a scaled engineering value may come out with a positive exponent
    #: (``1.2E+3``, shown as an int): a scale or an offset with one.
    _coarse: bool = _dataclass_field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        value = self.value
        set_ = object.__setattr__
        if self.factor is None and value.kind in ("int", "float"):
            set_(self, "_bounds", self._work_out_bounds(None))
        set_(self, "_names", {raw: name for name, raw in value.enum})
        set_(self, "_coarse", any(each is not None and each.as_tuple().exponent > 0  # type: ignore[operator]
                                  for each in (value.scale, value.offset)))

    @property
    def addresses(self) -> tuple[int, ...]:
        """Its registers' addresses, first to last."""
        return tuple(range(self.value.addr, self.value.addr + self.count))

    # --- registers <-> raw ------------------------------------------------------------

    @property
    def _bytes(self) -> int:
        """The bytes of its raw form: the type's, or a string's registers'."""
        bits = TYPES[self.value.type][0]
        return self.count * self.width // 8 if self.value.kind == "string" else bits // 8

    def to_registers(self, raw: int | float | bool | str) -> list[int]:
        """The register values that hold the raw value ``raw`` (an int of the type's range, a
        float, a bool, or a string that fits)."""
        value = self.value
        kind = value.kind
        if kind == "bool":
            return [int(bool(raw))]
        bits = TYPES[value.type][0]
        if kind == "float":
            data = struct.pack(">f" if bits == 32 else ">d", raw)
        elif kind == "int":
            assert type(raw) is int
            data = (raw & ((1 << bits) - 1)).to_bytes(bits // 8, "big")
        else:
            assert type(raw) is str
            encoded = raw.encode(value.encoding)
            data = encoded + PADDINGS[value.padding] * (self._bytes - len(encoded))
        return self._split(data)

    def _split(self, data: bytes) -> list[int]:
        size = self.width // 8
        if size == 1:  # 8-bit registers: one byte each, the two orders one
            return list(data) if self.word_order == "big" else list(reversed(data))
        if len(data) < size:  # a value narrower than its one register: its low-order bytes
            ordered = data[::-1] if self.byte_order == "little" else data
            return [int.from_bytes(ordered, "big")]
        words = [data[at:at + size] for at in range(0, len(data), size)]
        if self.word_order == "little":
            words.reverse()
        if self.byte_order == "little":
            words = [word[::-1] for word in words]
        return [int.from_bytes(word, "big") for word in words]

    def _join(self, registers: Sequence[int]) -> bytes:
        size = self.width // 8
        if size == 1:
            data = bytes(register & 0xFF for register in registers)
            return data if self.word_order == "big" else data[::-1]
        total = self._bytes
        if total < size:
            data = (registers[0] & ((1 << (8 * total)) - 1)).to_bytes(total, "big")
            return data[::-1] if self.byte_order == "little" else data
        words = [(register & ((1 << self.width) - 1)).to_bytes(size, "big")
                 for register in registers]
        if self.byte_order == "little":
            words = [word[::-1] for word in words]
        if self.word_order == "little":
            words.reverse()
        return b"".join(words)

    def from_registers(self, registers: Sequence[int]) -> int | float | bool | str:
        """The raw value its registers hold (a string without its padding; bytes that are
        not text in its encoding are shown as U+FFFD)."""
        value = self.value
        kind = value.kind
        if kind == "bool":
            return bool(registers[0])
        data = self._join(registers)
        if kind == "int":
            return int.from_bytes(data, "big", signed=TYPES[value.type][2])
        if kind == "float":
            unpacked: float = struct.unpack(">f" if len(data) == 4 else ">d", data)[0]
            return unpacked
        return data.rstrip(PADDINGS[value.padding]).rstrip(b"\x00").decode(
            value.encoding, "replace")

    # --- raw <-> engineering ------------------------------------------------------------

    def engineering(self, raw: int | float | bool | str, sf: int | None = None
                    ) -> Decimal | int | str | bool:
        """The value in its unit: a Decimal (or an int when unscaled); an enumerated name; a
        float's NaN and infinities as ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; a bool; a
        string. ``sf``: the scale factor's raw value, for a value that has one."""
        value = self.value
        if isinstance(raw, (bool, str)):
            return raw
        if type(raw) is float:
            if not math.isfinite(raw):
                return "NaN" if math.isnan(raw) else "Infinity" if raw > 0 else "-Infinity"
            number = Decimal(float_text(raw, TYPES[value.type][0]))
        else:
            name = self._names.get(raw) if self._names and type(raw) is int else None
            if name is not None:
                return name
            if value.scale is None and value.offset is None and self.factor is None:
                return int(raw)
            number = Decimal(raw)
        if self.factor is not None:
            scaled = number.scaleb(sf or 0, _EXACT)
            return int(scaled) if (sf or 0) > 0 else scaled
        if value.scale is not None:
            number = _EXACT.multiply(number, value.scale)
        if value.offset is not None:
            number = _EXACT.add(number, value.offset)
        return _plain(number) if self._coarse or type(raw) is float else number

    def resolution(self, sf: int | None = None) -> Decimal | None:
        """The step between two engineering values of an integer value (its scale, or
        10^sf); None for a float, a bool or a string."""
        if self.value.kind != "int" or (self.value.enum and not self.scaled):
            return None
        if self.factor is not None:
            return Decimal(1).scaleb(sf or 0)
        return abs(self.value.scale) if self.value.scale is not None else Decimal(1)

    @property
    def scaled(self) -> bool:
        """True when the value has a scale, an offset or a scale factor."""
        value = self.value
        return value.scale is not None or value.offset is not None or self.factor is not None

    def bounds(self, sf: int | None = None) -> tuple[Decimal, Decimal]:
        """The least and greatest engineering values a write may give: the map's ``min`` and
        ``max`` within what the type's raw range converts to (at the scale factor ``sf``, for
        a value that has one)."""
        return self._bounds if self._bounds is not None else self._work_out_bounds(sf)

    def _work_out_bounds(self, sf: int | None) -> tuple[Decimal, Decimal]:
        value = self.value
        bits, kind, signed = TYPES[value.type]
        if kind == "float":
            # the largest finite float, as its shortest text (which converts to it)
            top = Decimal("3.4028235E+38" if bits == 32 else "1.7976931348623157E+308")
            low, high = -top, top
        else:
            low = Decimal(-(1 << (bits - 1)) if signed else 0)
            high = Decimal((1 << (bits - 1)) - 1 if signed else (1 << bits) - 1)
        if self.factor is not None:
            low, high = low.scaleb(sf or 0, _EXACT), high.scaleb(sf or 0, _EXACT)
        else:
            if value.scale is not None:
                low, high = _EXACT.multiply(low, value.scale), _EXACT.multiply(high, value.scale)
            if value.offset is not None:
                low, high = _EXACT.add(low, value.offset), _EXACT.add(high, value.offset)
        low, high = min(low, high), max(low, high)
        if value.min is not None and value.min > low:
            low = value.min
        if value.max is not None and value.max < high:
            high = value.max
        return low, high

    def unit_text(self, number: object) -> str:
        """``21.5 degC`` (``21.5`` without a unit)."""
        return f"{number} {self.value.unit}" if self.value.unit else str(number)

    def raw_of(self, given: object, sf: int | None = None
               ) -> tuple[int | float | bool | str, None] | tuple[None, tuple[str, str]]:
        """The raw value of the engineering value ``given`` (a call's ``value``: an int or a
        Decimal as the gate decoded it, a float from Python, a bool, a string) for a write:
        ``(raw, None)``, or ``(None, (code, message))`` with the code ``type-value``,
        ``range-value`` or ``resolution`` and a one-line message for a model."""
        value = self.value
        kind = value.kind
        name = value.name
        if kind == "bool":
            if type(given) is not bool:
                return None, ("type-value", f"{name} is a bool: value must be true or false, "
                                            f"got {_quoted(given)}")
            return given, None
        if kind == "string":
            if type(given) is not str:
                return None, ("type-value", f"{name} is a string: value must be a string, "
                                            f"got {_quoted(given)}")
            try:
                encoded = given.encode(value.encoding)
            except UnicodeEncodeError:
                return None, ("range-value", f"{name} holds {value.encoding} text only, got "
                                             f"{_quoted(given)}")
            if len(encoded) > self._bytes:
                return None, ("range-value", f"{name} holds at most {self._bytes} bytes of "
                                             f"{value.encoding} text, got {len(encoded)}")
            return given, None
        if type(given) is str:
            if kind == "int" and value.enum:
                raw = dict(value.enum).get(given)
                if raw is not None:
                    return raw, None
                return None, ("range-value", f"{name} takes one of {_enum_text(value)} (or a "
                                             f"number), got {_quoted(given)}")
            if kind == "float" and given in NON_FINITE:
                if value.allow_nan:
                    return NON_FINITE[given], None
                return None, ("range-value", f"{name} takes a finite number; NaN and the "
                                             f"infinities are not allowed, got {_quoted(given)}")
            return None, ("type-value", f"{name} is a number: value must be a number, got "
                                        f"{_quoted(given)}")
        if type(given) is bool or type(given) not in (int, float, Decimal):
            return None, ("type-value", f"{name} is a number: value must be a number, got "
                                        f"{_quoted(given)}")
        if type(given) is float and not math.isfinite(given):  # (Python callers only)
            if kind == "float" and value.allow_nan:
                return given, None
            return None, ("range-value", f"{name} takes a finite number, got {given!r}")
        number = Decimal(repr(given)) if type(given) is float else Decimal(given)  # type: ignore[arg-type]
        low, high = self.bounds(sf)
        if not low <= number <= high:
            return None, ("range-value", f"{name} takes {_plain(low)}.."
                                         f"{self.unit_text(_plain(high))}, got "
                                         f"{self.unit_text(number)}")
        if self.factor is not None:
            exact = number.scaleb(-(sf or 0), _EXACT)
        else:
            exact = number
            if value.offset is not None:
                exact = _EXACT.subtract(exact, value.offset)
            if value.scale is not None:
                exact = _EXACT.divide(exact, value.scale)
        if kind == "float":
            raw_float = float(exact)
            if TYPES[value.type][0] == 32:
                try:
                    raw_float = struct.unpack(">f", struct.pack(">f", raw_float))[0]
                except OverflowError:  # pragma: no cover - bounds() keeps it within
                    return None, ("range-value", f"{name} does not fit a float32")
            return raw_float, None
        if exact == exact.to_integral_value() and self._back(exact, sf) == number:
            return int(exact), None
        step = self.resolution(sf)
        near = [self._back(exact.to_integral_value(rounding), sf)
                for rounding in (ROUND_FLOOR, ROUND_CEILING)]
        near = sorted({each for each in near if low <= each <= high})
        shown = " or ".join(str(_plain(each)) for each in near) or "none within the range"
        return None, ("resolution", f"{name} takes whole steps of {self.unit_text(step)}: "
                                    f"{number} at a resolution of {step}: {shown}")

    def _back(self, raw: Decimal, sf: int | None) -> Decimal:
        """The engineering value of the raw number ``raw``."""
        value = self.value
        if self.factor is not None:
            return raw.scaleb(sf or 0, _EXACT)
        number = raw
        if value.scale is not None:
            number = _EXACT.multiply(number, value.scale)
        if value.offset is not None:
            number = _EXACT.add(number, value.offset)
        return number


def _a(kind: str) -> str:
    """``a float32``, ``an int16``."""
    return f"{'an' if kind.startswith('int') else 'a'} {kind}"


def _quoted(given: object) -> str:
    if type(given) is str:
        return f'"{escape_text(given, 40)}"'
    if type(given) is bool:
        return "true" if given else "false"
    return escape_text(str(given), 40)


def _enum_text(value: Value) -> str:
    return ", ".join(f"{name}={raw}" for name, raw in value.enum)


class Register(Protocol):
    """What laying out a value reads of a register: its width in bits and its table
    (:class:`~regdev.devices._regmap.Register` has both; that module imports this one, so the
    import goes one way)."""

    @property
    def width(self) -> int: ...

    @property
    def table(self) -> str: ...


def _width(register: Register) -> int:
    """A register's width in bits (8 until the map says otherwise)."""
    width = getattr(register, "width", 8)
    return width if type(width) is int else 8


def _table(register: Register) -> str:
    table = getattr(register, "table", "holding")
    return table if type(table) is str else "holding"


def bind_values(values: Iterable[Value], registers: Mapping[tuple[str, int], Register]
                ) -> dict[str, ValueCodec]:
    """Lay out ``values`` on a map's registers (keyed by ``(table, addr)``), checking what
    depends on them; their codecs by name, in declaration order.

    Raises:
        MapError: one line naming the value and where it is declared: an address that is no
            register of its table, registers of different widths, a value wider or narrower
            than its registers, a multi-register value without a declared order, orders that
            contradict each other, two values that overlap or share a name, a scale factor
            that is not an int16 value of the map.
    """
    codecs: dict[str, ValueCodec] = {}
    taken: dict[tuple[str, int], Value] = {}
    declared = list(values)
    for value in declared:
        if not isinstance(value, Value):
            raise MapError(f"{_shown(value)} is not a Value")
        if value.name in codecs:
            raise value.fail("two values have this name")
        first = registers.get((value.table, value.addr))
        if first is None:
            raise value.fail(f"addr {value.addr} is not a register of the {value.table} table")
        width = _width(first)
        bits, kind, _ = TYPES[value.type]
        if value.table in ("input", "discrete") and value.writable:
            raise value.fail(f"the {value.table} table is read-only: give {value.term('access')} "
                             "r")
        if width < 8 and kind != "bool":
            raise value.fail(f"{_a(value.type)} needs registers of 8 bits or more; its register "
                             f"is {width} bit{'s' * (width != 1)} wide")
        if kind == "string":
            count = value.count or 0
            if width % 8:
                raise value.fail("a string needs registers of whole bytes")
        elif kind == "bool":
            count = 1
        else:
            count = -(-bits // width)
        if value.count is not None and value.count != count:
            have = value.count * width
            if have < bits:
                raise value.fail(f"{_a(value.type)} is {bits} bits, wider than its {value.count} "
                                 f"register{'s' * (value.count != 1)} of {width} bits")
            raise value.fail(f"{_a(value.type)} takes {count} register{'s' * (count != 1)} of "
                             f"{width} bits, not {value.count}")
        addresses = [(value.table, value.addr + index) for index in range(count)]
        for key in addresses:
            register = registers.get(key)
            if register is None:
                raise value.fail(f"its {count} registers from {value.addr} reach {key[1]}, "
                                 f"which is not a register of the {value.table} table")
            if _width(register) != width:
                raise value.fail(f"its registers are not all {width} bits wide (the one at "
                                 f"{key[1]} is {_width(register)})")
            if key in taken:
                raise value.fail(f"it overlaps value {taken[key].name} at register {key[1]}")
        multi = count > 1
        per_register = (width // 8 if kind == "string" else min(bits, width) // 8)
        word, byte = value.word_order, value.byte_order
        if width == 8:
            if word is not None and byte is not None and word != byte:
                raise value.fail(f"contradictory orders: {value.term('byte_order')} {byte} and "
                                 f"{value.term('word_order')} {word} (a register holds one "
                                 "byte: they name one order)")
            order = word or byte
            if multi and order is None:
                raise value.fail(f"{_a(value.type)} over {count} registers needs a declared "
                                 f"order: {value.term('word_order')} (or "
                                 f"{value.term('byte_order')}) \"big\" or \"little\"")
            word = byte = order or "big"
        else:
            if multi and word is None:
                raise value.fail(f"{_a(value.type)} over {count} registers needs a declared "
                                 f"{value.term('word_order')}: \"big\" or \"little\"")
            if per_register > 1 and byte is None:
                raise value.fail(f"{_a(value.type)} puts {per_register} bytes in a register of "
                                 f"{width} bits: it needs a declared "
                                 f"{value.term('byte_order')}, \"big\" or \"little\"")
            word, byte = word or "big", byte or "big"
        for key in addresses:
            taken[key] = value
        codecs[value.name] = ValueCodec(value, width, count, word, byte)
    for name, codec in list(codecs.items()):
        factor_name = codec.value.scale_factor
        if factor_name is None:
            continue
        factor = codecs.get(factor_name)
        if factor is None or factor.value.type != "int16" or factor.scaled or factor.value.enum:
            raise codec.value.fail(f"{codec.value.term('scale_factor')} {_shown(factor_name)} "
                                   "must name an int16 value "
                                   "of the map without a scale of its own (a sunssf)")
        if factor.value.access == "w":
            raise codec.value.fail(f"{codec.value.term('scale_factor')} {factor_name} must be "
                                   "readable")
        codecs[name] = ValueCodec(codec.value, codec.width, codec.count, codec.word_order,
                                  codec.byte_order, factor)
    return codecs


#: The SystemRDL user-defined properties of a typed value, set on its first register
#: (``docs/maps.md``), with the type each takes: the value's name (the register's by
#: default), then the keys of the JSON form.
RDL_PROPERTIES: Final[dict[str, type]] = {
    "regdev_value": str, "regdev_type": str, "regdev_count": int, "regdev_byte_order": str,
    "regdev_word_order": str, "regdev_scale": str, "regdev_offset": str,
    "regdev_scale_factor": str, "regdev_unit": str, "regdev_min": str, "regdev_max": str,
    "regdev_access": str, "regdev_enum": str, "regdev_encoding": str, "regdev_padding": str,
    "regdev_allow_nan": bool,
}


def value_of_rdl(reg: Any, name: str, addr: int, table: str, where: Any) -> Value | None:
    """The typed value a SystemRDL register node declares (``regdev_type`` set), or None.

    A value named by ``regdev_value`` on a register array is declared by its first element
    (it spans the array: ``ROOM[4]``, a string of 4 registers); without ``regdev_value``
    each element is a value of its own, named as the register (``DATA[2]``).

    Args:
        reg: the register's node (systemrdl-compiler's ``RegNode``; read with
            ``get_property`` and ``property_src_ref`` only).
        name: the register's name (the value's, unless ``regdev_value`` gives one).
        addr: its address; table: its table.
        where: ``(node, property) -> "file:line:column"``.

    Raises:
        MapError: the declaration is not consistent, naming ``file:line``.
    """
    kind = reg.get_property("regdev_type", default=None)
    if kind is None:
        used = [prop for prop in RDL_PROPERTIES
                if reg.get_property(prop, default=None) is not None]
        if used:
            raise MapError(f"{where(reg, used[0])}: register {name}: {used[0]} without "
                           "regdev_type (a typed value needs its type)")
        return None
    got = {prop: reg.get_property(prop, default=None) for prop in RDL_PROPERTIES}
    if got["regdev_value"] is not None and any(getattr(reg, "current_idx", None) or ()):
        return None  # a named value on an array starts at its first element and spans it
    enum: list[tuple[str, int]] = []
    for item in (got["regdev_enum"] or "").replace(",", " ").split():
        key, _, raw = item.partition("=")
        try:
            enum.append((key, int(raw, 0)))
        except ValueError:
            raise MapError(f"{where(reg, 'regdev_enum')}: register {name}: regdev_enum is "
                           f"NAME=raw pairs (\"OFF=0 ON=1\"), got {_shown(item)}") from None
    return Value(
        name=got["regdev_value"] or name, addr=addr, type=kind, table=table,
        count=got["regdev_count"], byte_order=got["regdev_byte_order"],
        word_order=got["regdev_word_order"], scale=got["regdev_scale"],
        offset=got["regdev_offset"], scale_factor=got["regdev_scale_factor"],
        unit=got["regdev_unit"] or "", min=got["regdev_min"], max=got["regdev_max"],
        access=got["regdev_access"] or "rw",
        description=" ".join(str(reg.get_property("desc", default=None) or "").split()),
        enum=tuple(enum), encoding=got["regdev_encoding"] or "ascii",
        padding=got["regdev_padding"] or "nul", allow_nan=bool(got["regdev_allow_nan"]),
        where=where(reg, "regdev_type"), rdl=True)
