"""SunSpec discovery: a register map (the compiled JSON form, with typed values) of the SunSpec
models a Modbus device says it has.

A SunSpec device (an inverter, a meter, a battery) describes itself in its holding
registers: the marker ``SunS`` (0x5375 0x6E53) at a base address (40000, 50000 or 0, looked for
in that order), then a chain of models, each an id register and a length register (the
registers after the two) followed by its points, up to the end model, id 0xFFFF. Each model's
points (names, types, sizes, scale-factor points, units, access, enumerated values, repeated
groups) are the SunSpec Alliance's JSON model definitions that pysunspec2 ships
(``sunspec2/models/json/model_ID.json``), read with pysunspec2's own loader
(:func:`sunspec2.mdef.from_json_file`) from pysunspec2's own folder, never from the working
directory (pysunspec2's ``get_model_def`` looks in ``.`` first).

:func:`discover` walks the chain with a ``read(addr, count)`` function; :func:`discover_url`
reads a ``modbus+tcp://`` or ``modbus+rtu://`` device with pymodbus's client; and
:meth:`Discovery.to_dict` is the map (``docs/sunspec.md``): registers of 16 bits in the holding
table, the chain's marker, model ids and lengths marked as identity registers, and a value
``MODEL.POINT`` (``common.Mn``, ``ac_meter_abcn.W``, ``mppt.module[2].DCA``) for every point.

Rules of this file:

* Everything is read and checked before anything is built: a chain that loops, runs past
  register 65535, or names a model id pysunspec2 has no definition for, and a model whose
  length disagrees with its definition, raise :class:`~regdev.core._errors.DeviceError`
  naming the address; no partial map is ever returned.
* pysunspec2 and pymodbus are imported only here, and only when called (the ``sunspec``
  extra); without them :class:`SunSpecMissing` says the install command.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from ..core._errors import DeviceError, DeviceRefused, DeviceTimeout, TransportError
from ..core._text import escape_text
from ._regmap import MAX_NAME, RegisterMap
from ._values import MAX_VALUE_REGISTERS

__all__ = [
    "BASES",
    "END_ID",
    "MARKER",
    "Discovery",
    "Model",
    "SunSpecMissing",
    "discover",
    "discover_url",
    "image_registers",
    "model_definition",
]

#: The ``SunS`` marker's two registers (0x53756E53).
MARKER: Final = (0x5375, 0x6E53)
#: Where the marker is looked for, in order (SunSpec Modbus specification: 40000, 50000, 0).
BASES: Final = (40000, 50000, 0)
#: The id of the end model.
END_ID: Final = 0xFFFF
#: The first address past the holding table.
_SPACE: Final = 0x10000
#: Most registers in one read request (Modbus application protocol, 03: 125).
_MAX_READ: Final = 125
#: The install command named when pysunspec2 or pymodbus is missing.
INSTALL: Final = "pip install 'regdev[sunspec]'"

#: A SunSpec point type: (the value's type in the map, its registers; None: the point's
#: ``size``). ``pad`` holds nothing and ``ipv6addr`` (128 bits) has no type of the map: their
#: registers are in the map, with no value.
_TYPES: Final[dict[str, tuple[str, int | None]]] = {
    "int16": ("int16", 1), "uint16": ("uint16", 1), "count": ("uint16", 1),
    "acc16": ("uint16", 1), "enum16": ("uint16", 1), "bitfield16": ("uint16", 1),
    "sunssf": ("int16", 1),
    "int32": ("int32", 2), "uint32": ("uint32", 2), "acc32": ("uint32", 2),
    "enum32": ("uint32", 2), "bitfield32": ("uint32", 2), "ipaddr": ("uint32", 2),
    "int64": ("int64", 4), "uint64": ("uint64", 4), "acc64": ("uint64", 4),
    "eui48": ("uint64", 4),
    "float32": ("float32", 2), "float64": ("float64", 4),
    "string": ("string", None),
}
#: Registers of the point types given no value.
_NO_VALUE: Final = {"pad": 1, "ipv6addr": 8}
#: A character a name of the map may not hold (pysunspec2's names may: ``ECC-256``).
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")


class SunSpecMissing(ImportError):
    """pysunspec2 or pymodbus is not installed (the ``sunspec`` extra)."""


def _sunspec2() -> Any:
    try:
        # the sunspec extra, imported when used; pysunspec2 ships no type information
        import sunspec2.device  # type: ignore[import-untyped]  # noqa: PLC0415
        import sunspec2.mdef  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError:
        raise SunSpecMissing(f"SunSpec discovery needs pysunspec2: {INSTALL}") from None
    return sunspec2


def model_definition(model_id: int) -> dict[str, Any] | None:
    """pysunspec2's JSON definition of SunSpec model ``model_id`` (``{"id", "group"}``), or
    None when pysunspec2 ships none. Read from pysunspec2's own ``models/json`` folder with
    its loader, never from the working directory.

    Raises:
        SunSpecMissing: pysunspec2 is not installed.
    """
    sunspec2 = _sunspec2()
    folder = Path(sunspec2.device.models_dir) / "json"
    path = folder / sunspec2.mdef.to_json_filename(model_id)
    if not path.is_file():
        return None
    definition: dict[str, Any] = sunspec2.mdef.from_json_file(str(path))
    return definition


def name_part(name: str) -> str:
    """A pysunspec2 name as a part of a value's or an enumerated value's name: every
    character other than a letter, a digit or ``_`` becomes ``_`` (``ECC-256`` is
    ``ECC_256``), and a leading digit gets a ``_`` before it."""
    part = _NOT_NAME.sub("_", name.strip()) or "_"
    return "_" + part if part[0].isdigit() else part


def group_part(name: str, parent: str) -> str:
    """A group's part of a value's name: :func:`name_part` of its name, without its
    parent's name when it begins with it and ``_`` or ``-`` (``lithium_ion_string_module``
    in ``lithium_ion_string`` is ``module``), so that names stay within 64 characters."""
    for joint in "_-":
        if name.startswith(parent + joint) and len(name) > len(parent) + 1:
            return name_part(name[len(parent) + 1:])
    return name_part(name)


@dataclass(frozen=True)
class Model:
    """One model of the chain.

    Attributes:
        id: the model id (1: common, 203: three-phase meter, 123: immediate controls...).
        name: its name in pysunspec2's definition (``common``, ``ac_meter_abcn``).
        prefix: its values' names start with this and a dot: the name, or ``name[2]`` where
            the chain has the model more than once.
        addr: the address of its id register.
        length: its length register (the registers after the id and the length).
    """

    id: int
    name: str
    prefix: str
    addr: int
    length: int


@dataclass
class _Point:
    """A point laid out: its value's name, first register, definition and scale factor."""

    name: str
    addr: int
    registers: int
    pdef: dict[str, Any]
    scale_factor: str | None = None


@dataclass(frozen=True)
class Discovery:
    """What :func:`discover` found: the marker's base, the models, every register read.

    Attributes:
        base: the marker's address (40000, 50000 or 0).
        models: the models, in chain order (the end model left out).
        end: the address of the end model's id register.
        registers: every register read, by address (the marker's, each model's, the end
            model's id), as the device answered.
        values: the map's values (the compiled JSON form's objects), lowest address first.
        skipped: the points given no value, each ``NAME: why`` (a pad, an ipv6addr, a string
            of more than 16 registers).
        where: the device, as the user named it (for the map's description).
    """

    base: int
    models: tuple[Model, ...]
    end: int
    registers: dict[int, int]
    values: tuple[dict[str, Any], ...]
    skipped: tuple[str, ...] = ()
    where: str = ""
    _owners: dict[int, tuple[str, int, int, bool, str]] = field(default_factory=dict, repr=False,
                                                            compare=False)

    def name(self) -> str:
        """The map's name: ``SunSpec`` and the common model's manufacturer and model
        (printable ASCII, at most 64 characters), or ``SunSpec device``."""
        words = []
        for value in self.values:
            if value["name"] in ("common.Mn", "common.Md"):
                words.append(self.text(value))
        shown = " ".join(w for w in words if w)
        return (f"SunSpec {shown}" if shown else "SunSpec device")[:64]

    def text(self, value: dict[str, Any]) -> str:
        """A string value's text as read, as printable ASCII (anything else escaped)."""
        data = b"".join(self.registers[value["addr"] + i].to_bytes(2, "big")
                        for i in range(value["count"]))
        text = data.split(b"\x00", 1)[0].decode("utf-8", "replace").strip()
        return escape_text(text)

    def description(self) -> str:
        """The map's description: where it was found, and the chain."""
        chain = "; ".join(f"model {m.id} {m.name} at {m.addr} ({m.length + 2} registers)"
                          for m in self.models)
        where = f" on {escape_text(self.where)}" if self.where else ""
        return (f"Discovered by regdev map --sunspec-discover{where}: the SunSpec marker at "
                f"{self.base}; {chain}; the end model at {self.end}. Values are the points "
                "of pysunspec2's SunSpec model definitions.")

    def to_dict(self) -> dict[str, Any]:
        """The map, in the compiled JSON form (``"format": "regdev-map"``): a register of 16
        bits in the holding table for every address of the chain (marker, models, the end
        model's id), the marker, each model's id and length and the end id as read-only
        identity registers whose reset is the value read, and the values."""
        registers = []
        for addr in sorted(self.registers):
            owner = self._owners.get(addr)
            register: dict[str, Any] = {"addr": addr, "width": 16, "table": "holding"}
            if addr in (self.base, self.base + 1):
                register.update(access="r", description=f"the SunSpec marker SunS (register "
                                                        f"{addr - self.base + 1} of 2)")
            elif addr == self.end:
                register.update(access="r", description="the end model's id (0xFFFF)")
            elif owner is not None:
                name, index, count, writable, note = owner
                part = f"register {index + 1} of {count}" if count > 1 else ""
                part = f" ({part}{note})".replace("(; ", "(") if part or note else ""
                register.update(access="rw" if writable else "r",
                                description=f"{name}{part}")
            if self._identity(addr):
                register.update(reset=self.registers[addr], identity=True)
            registers.append(register)
        return {"format": "regdev-map", "version": 1, "name": self.name(),
                "description": self.description(), "registers": registers,
                "values": list(self.values)}

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text, indented as ``regdev map FILE --json`` writes."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def regmap(self) -> RegisterMap:
        """The map, read back as every ``--map`` reads it (:meth:`RegisterMap.from_dict`).

        Raises:
            MapError: regdev's map reader refuses it (a point pysunspec2 defines in a way the
                map cannot carry), naming the place.
        """
        return RegisterMap.from_dict(self.to_dict(), "the discovered map")

    def _identity(self, addr: int) -> bool:
        if addr in (self.base, self.base + 1, self.end):
            return True
        return any(addr in (model.addr, model.addr + 1) for model in self.models)


Read = Callable[[int, int], Sequence[int]]


def _read_span(read: Read, addr: int, count: int) -> list[int]:
    """``count`` registers from ``addr``, in requests of at most 125."""
    out: list[int] = []
    while count:
        take = min(count, _MAX_READ)
        got = list(read(addr, take))
        if len(got) != take:
            raise DeviceError(f"holding registers {addr}..{addr + take - 1}: the device "
                              f"answered {len(got)} registers, not {take}")
        out.extend(got)
        addr += take
        count -= take
    return out


def find_base(read: Read) -> int | None:
    """The address of the ``SunS`` marker (40000, then 50000, then 0), or None. A base the
    device refuses to read (a Modbus exception) has no marker, nor has one it does not answer
    at (some devices stay silent at an address they do not have), as long as it answers at
    another.

    Raises:
        DeviceError: the device answered at none of the three (the last error).
        TransportError: the device cannot be reached.
    """
    silent: DeviceError | None = None
    answered = False
    for base in BASES:
        try:
            got = tuple(read(base, 2))
        except DeviceRefused:
            answered = True
            continue
        except DeviceError as error:  # a timeout, a bad reply: try the next base
            silent = error
            continue
        answered = True
        if got == MARKER:
            return base
    if not answered and silent is not None:
        raise DeviceError(f"the device answered no read of the SunSpec marker at holding "
                          f"register 40000, 50000 or 0 (the last: {silent})")
    return None


def discover(read: Read, where: str = "") -> Discovery:
    """Find the SunSpec marker, walk the model chain to the end model, and lay out every
    model from pysunspec2's definition.

    Args:
        read: ``read(addr, count)``: ``count`` (1..125) holding registers from ``addr``, as
            16-bit integers; raises :class:`~regdev.core._errors.DeviceRefused` for a Modbus
            exception, another :class:`~regdev.core._errors.DeviceError` or
            :class:`~regdev.core._errors.TransportError` when the device did not answer.
        where: the device as the user named it (for the map's description).

    Returns:
        The :class:`Discovery`.

    Raises:
        DeviceError: no marker at 40000, 50000 or 0 (one line saying so); the chain loops
            (a 16-bit address would wrap round to where it has been), runs past register
            65535, or names a model id pysunspec2 has no definition for; a model's length
            disagrees with its definition (a repeated group that does not fit); a read
            failed. Each message names the address.
        TransportError: the device cannot be reached.
        SunSpecMissing: pysunspec2 is not installed.
    """
    _sunspec2()
    base = find_base(read)
    if base is None:
        raise DeviceError("no SunSpec marker (SunS, 0x53756E53) at holding register 40000, "
                          "50000 or 0: not a SunSpec device, or another unit id")
    registers = dict(zip((base, base + 1), MARKER, strict=True))
    found: list[tuple[int, str, int, int, list[int], dict[str, Any]]] = []
    addr = base + 2
    while True:
        if addr >= _SPACE:
            raise DeviceError(f"the SunSpec chain runs past holding register 65535 with no end "
                              f"model (0xFFFF): the last model ends at {addr - 1}")
        (model_id,) = _read_span(read, addr, 1)
        registers[addr] = model_id
        if model_id == END_ID:
            break
        if addr + 1 >= _SPACE:
            raise DeviceError(f"the SunSpec model at {addr} (id {model_id}) has no length "
                              "register: it is the last register of the address space")
        (length,) = _read_span(read, addr + 1, 1)
        after = addr + 2 + length
        if after > _SPACE:
            back = after % _SPACE
            if base <= back <= addr:
                raise DeviceError(
                    f"the SunSpec chain loops: the model at {addr} (id {model_id}, length "
                    f"{length}) would end past register 65535, and a 16-bit address wraps "
                    f"round to {back}, where the chain has already been")
            raise DeviceError(f"the SunSpec model at {addr} (id {model_id}, length {length}) "
                              f"runs past holding register 65535, the end of the address "
                              "space")
        definition = model_definition(model_id)
        if definition is None:
            raise DeviceError(f"the SunSpec model at {addr} has id {model_id}, which "
                              "pysunspec2 has no model definition for (a vendor's model, or "
                              "not a model id: the chain may be broken)")
        body = _read_span(read, addr, length + 2)
        registers.update(zip(range(addr, after), body, strict=True))
        found.append((model_id, definition["group"]["name"], addr, length, body, definition))
        addr = after
    return _build(base, found, addr, registers, where)


def _build(base: int, found: list[tuple[int, str, int, int, list[int], dict[str, Any]]],
           end: int, registers: dict[int, int], where: str) -> Discovery:
    """Lay every model out, name its values, and put the discovery together."""
    seen: dict[str, int] = {}
    for _, name, *_ in found:
        seen[name] = seen.get(name, 0) + 1
    index: dict[str, int] = {}
    models: list[Model] = []
    values: list[dict[str, Any]] = []
    skipped: list[str] = []
    owners: dict[int, tuple[str, int, int, bool, str]] = {}
    for model_id, name, addr, length, body, definition in found:
        index[name] = index.get(name, 0) + 1
        prefix = name_part(name) + (f"[{index[name]}]" if seen[name] > 1 else "")
        model = Model(model_id, name, prefix, addr, length)
        models.append(model)
        for point in _layout(model, definition, body):
            kind = point.pdef["type"]
            if kind in _NO_VALUE or point.registers > MAX_VALUE_REGISTERS:
                why = ("a pad holds nothing" if kind == "pad" else
                       "an ipv6addr (128 bits) has no type of the map" if kind == "ipv6addr"
                       else f"a string of {point.registers} registers, more than the "
                            f"{MAX_VALUE_REGISTERS} a value may span")
                if kind != "pad":
                    skipped.append(f"{point.name}: {why}")
                for offset in range(point.registers):
                    owners[point.addr + offset] = (point.name, offset, point.registers, False,
                                                   f"; no value: {why}")
                continue
            value = _value(point)
            values.append(value)
            for offset in range(point.registers):
                owners[point.addr + offset] = (point.name, offset, point.registers,
                                               value["access"] == "rw", "")
    return Discovery(base, tuple(models), end, registers, tuple(values), tuple(skipped),
                     where, owners)


def _size(pdef: dict[str, Any]) -> int:
    kind = pdef["type"]
    if kind == "string":
        return int(pdef["size"])
    if kind in _NO_VALUE:
        return _NO_VALUE[kind]
    registers = _TYPES.get(kind, (None, None))[1]
    if registers is None:
        raise DeviceError(f"pysunspec2's definition has a point {pdef.get('name')} of type "
                          f"{kind}, which regdev does not know")
    return registers


def _layout(model: Model, definition: dict[str, Any], body: list[int]) -> list[_Point]:
    """The model's points at their addresses, with their values' names and scale factors.

    Raises:
        DeviceError: the definition does not fill the model's length exactly (naming the
            model's address), or a repeated group's count cannot be had.
    """
    top = definition["group"]
    where = f"the SunSpec model at {model.addr} (id {model.id}, {model.name})"
    points = list(top["points"])
    if model.id == 1 and model.length == 65:  # the legacy common model, without its Pad
        points = [p for p in points if p["name"] != "Pad"]
    offsets: dict[str, int] = {}
    at = 0
    for pdef in points:
        offsets[pdef["name"]] = at
        at += _size(pdef)

    def counted(name: str) -> int:
        """A repeated group's count from a top-level point (as pysunspec2 reads it)."""
        if name not in offsets or offsets[name] >= len(body):
            raise DeviceError(f"{where}: its repeated group's count point {name} is not in "
                              "the model")
        return body[offsets[name]]

    def group_size(gdef: dict[str, Any], zero: int) -> int:
        size = sum(_size(p) for p in gdef["points"])
        for sub in gdef.get("groups", []):
            size += group_size(sub, zero) * instances(sub, zero)
        return size

    def instances(gdef: dict[str, Any], zero: int) -> int:
        count = gdef.get("count")
        if count is None:
            return 1
        if isinstance(count, str):
            return counted(count)
        return int(count) if int(count) else zero

    fixed = group_size({"points": points, "groups": top.get("groups", [])}, 0)
    total = model.length + 2
    zero = 0
    legacy = [g for g in top.get("groups", []) if g.get("count") in (0, "0")]
    if legacy:  # a repeated group counted by the model's length (pysunspec2 does the same)
        one = group_size(legacy[0], 0)
        if len(legacy) > 1 or not one or (total - fixed) % one or total < fixed:
            raise DeviceError(f"{where}: its length {model.length} does not hold a whole "
                              f"number of its repeated group {legacy[0]['name']} "
                              f"({one} registers each) after its {fixed} fixed registers")
        zero = (total - fixed) // one
    size = group_size({"points": points, "groups": top.get("groups", [])}, zero)
    if size != total:
        raise DeviceError(f"{where}: its length register says {model.length} (so {total} "
                          f"registers with the id and length), but its definition in "
                          f"pysunspec2 makes it {size}")
    out: list[_Point] = []

    def walk(gdef: dict[str, Any], pdefs: list[dict[str, Any]], path: str, start: int,
             outer: dict[str, str]) -> int:
        here: dict[str, str] = {}
        laid: list[_Point] = []
        for pdef in pdefs:
            point = _Point(f"{path}.{name_part(pdef['name'])}", model.addr + start,
                           _size(pdef), pdef)
            here[pdef["name"]] = point.name
            laid.append(point)
            start += point.registers
        scope = {**outer, **here}  # the point's own group first, then the model's top
        for point in laid:
            sf = point.pdef.get("sf")
            if isinstance(sf, str):
                if sf not in scope:
                    raise DeviceError(f"{where}: point {point.name}'s scale factor {sf} is "
                                      "not in its group or the model")
                point.scale_factor = scope[sf]
        out.extend(laid)
        for sub in gdef.get("groups", []):
            count = instances(sub, zero)
            repeated = sub.get("count") is not None
            part = group_part(sub["name"], gdef["name"])
            for number in range(1, count + 1):
                inner = f"{path}.{part}" + (f"[{number}]" if repeated else "")
                start = walk(sub, list(sub["points"]), inner, start, outer or here)
        return start

    walk(top, points, model.prefix, 0, {})
    for point in out:
        if len(point.name) > MAX_NAME:
            raise DeviceError(f"{where}: its point {point.name} makes a name longer than "
                              f"{MAX_NAME} characters")
    return out


def _value(point: _Point) -> dict[str, Any]:
    """A point's value in the compiled JSON form."""
    pdef = point.pdef
    kind = pdef["type"]
    value: dict[str, Any] = {"name": point.name, "addr": point.addr,
                             "type": _TYPES[kind][0]}
    if kind == "string":
        value["count"] = point.registers
    value["byte_order"] = "big"
    if point.registers > 1:
        value["word_order"] = "big"
    sf = pdef.get("sf")
    if point.scale_factor is not None:
        value["scale_factor"] = point.scale_factor
    elif sf is not None:  # a constant scale factor
        value["scale"] = str(Decimal(1).scaleb(int(sf)))
    units = str(pdef.get("units") or "").strip()
    if units and kind != "string":
        value["unit"] = units
    value["access"] = "rw" if pdef.get("access") == "RW" else "r"
    words = [str(pdef.get(key) or "").strip() for key in ("label", "desc")]
    if words[0] == pdef["name"]:  # a label that only repeats the name
        words[0] = ""
    if words[1].rstrip(".") == words[0].rstrip("."):  # a description that repeats the label
        words[1] = ""
    text = ". ".join(w.rstrip(".") for w in words if w)
    if kind == "sunssf":
        text = (text + ". " if text else "") + "A scale factor: values that name it are raw x 10^it"
    if text:
        value["description"] = (text + ".")[:4096]
    symbols = pdef.get("symbols") or []
    if symbols and kind.startswith(("enum", "bitfield")):
        enum: dict[str, int] = {}
        bits = kind.startswith("bitfield")
        for symbol in symbols:
            name = name_part(str(symbol["name"]))
            raw = 1 << int(symbol["value"]) if bits else int(symbol["value"])
            if name in enum:
                name = f"{name}_{symbol['value']}"
            if raw in enum.values() or name in enum:
                continue
            enum[name] = raw
        value["enum"] = enum
        if bits:
            value["description"] = (value.get("description", "") + " Bits, as the value of "
                                    "each set alone: a reading is their sum.").strip()
    if kind == "string":
        value["encoding"] = "utf-8"
        value["padding"] = "nul"
    return value


# --- a device by URL, with pymodbus's client ---------------------------------------------------


def discover_url(url: str, *, timeout: float = 0.5) -> Discovery:
    """:func:`discover` on the device at a ``modbus+tcp://`` or ``modbus+rtu://`` URL (its unit
    id from the URL), with pymodbus's client, each read retried once (discovery only reads:
    no write's outcome is ever in doubt). pymodbus's errors are said in regdev's words: what
    was read, from which unit, and that no valid answer came within ``timeout``.

    Args:
        url: the device (``docs/modbus.md``); ``base`` is refused (SunSpec says where).
        timeout: the wait for each reply, in seconds.

    Raises:
        TransportError: a bad URL (naming the forms), a ``base`` in it, or the device
            cannot be reached.
        DeviceError: as :func:`discover`.
        SunSpecMissing: pysunspec2 or pymodbus is not installed.
    """
    from ._modbus import parse_modbus_url  # noqa: PLC0415 - pyserial, only for a URL

    target = parse_modbus_url(url)
    if target.base:
        raise TransportError("give the URL no base: the SunSpec marker is looked for at "
                             "holding registers 40000, 50000 and 0")
    _sunspec2()
    try:
        from pymodbus.client import ModbusSerialClient, ModbusTcpClient  # noqa: PLC0415
        from pymodbus.exceptions import (  # noqa: PLC0415
            ConnectionException,
            ModbusException,
        )
        from pymodbus.framer import FramerType  # noqa: PLC0415
    except ImportError:
        raise SunSpecMissing(f"SunSpec discovery needs pymodbus: {INSTALL}") from None
    logging.getLogger("pymodbus").addHandler(logging.NullHandler())  # errors are ours
    logging.getLogger("pymodbus").propagate = False
    client: Any
    if target.framing == "tcp":
        client = ModbusTcpClient(target.host, port=target.tcp_port, timeout=timeout, retries=1)
    else:
        client = ModbusSerialClient(target.port, framer=FramerType.RTU,
                                    baudrate=target.baudrate or 19200, parity=target.parity,
                                    stopbits=target.stopbits, handle_local_echo=target.echo,
                                    timeout=timeout, retries=1)
    if not client.connect():
        client.close()
        raise TransportError(f"cannot open the port: {target.port} does not answer, or "
                             "cannot be opened")

    where = (f"{target.host}:{target.tcp_port}" if target.framing == "tcp"
             else str(target.port))

    def read(addr: int, count: int) -> list[int]:
        span = f"holding registers {addr}..{addr + count - 1}"
        try:
            reply = client.read_holding_registers(addr, count=count, device_id=target.unit)
        except ConnectionException:  # (pymodbus's words stay out: its text names its internals)
            raise TransportError(f"a read of {span} (function 03) to unit {target.unit}: the "
                                 f"connection to {where} was closed or could not be made"
                                 ) from None
        except ModbusException:  # no reply, or none that was valid, on every attempt
            raise DeviceTimeout(f"a read of {span} (function 03) to unit {target.unit}: no "
                                f"valid answer within {timeout * 1000:g} ms, sent twice (a "
                                "read changes nothing)") from None
        if reply.isError():
            code = getattr(reply, "exception_code", 0)
            raise DeviceRefused(f"{span}: the device answered Modbus exception {code:02X}")
        return list(reply.registers)[:count]

    try:
        return discover(read, url)
    finally:
        client.close()


# --- device images ----------------------------------------------------------------------------


def image_registers(path: str | Path) -> tuple[int, list[int]]:
    """The holding registers of a SunSpec device image: ``(base, registers)``, the marker at
    ``base``, the models, the end model (0xFFFF, length 0).

    An image is pysunspec2's device JSON (what its ``FileClientDevice`` reads and
    ``Device.get_dict`` writes): ``{"base": 40000, "models": [{"ID": 1, "L": 66, "Mn":
    "...", ...}, ...]}``, each model's points by name as raw register values (before scale
    factors), a repeated group as a list of objects; a point left out is "not implemented"
    (0x8000, 0xFFFF, NaN, ... as SunSpec says). ``base`` (40000, 50000 or 0) is regdev's; 40000
    when left out. pysunspec2 lays the registers out.

    Raises:
        ValueError: the file is not an image (one line).
        SunSpecMissing: pysunspec2 is not installed.
    """
    _sunspec2()
    import sunspec2.file.client as file_client  # type: ignore[import-untyped]  # noqa: PLC0415

    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        base = document.get("base", BASES[0])
        if base not in BASES:
            raise ValueError(f"base must be one of 40000, 50000, 0, got {base!r}")
        device = file_client.FileClientDevice(str(path))
        device.scan()
    except (OSError, ValueError, AttributeError, file_client.FileClientError) as error:
        raise ValueError(f"{path}: not a SunSpec device image: {error}") from None
    registers = list(MARKER)
    for model in device.model_list:
        if model.error_info:
            raise ValueError(f"{path}: model {model.model_id}: {model.error_info.strip()}")
        data = model.get_mb()
        registers.extend(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    registers.extend((END_ID, 0))
    return base, registers

