"""``regdev map``: a register map as a table, or in its compiled JSON form."""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path
from typing import Any, TextIO

from .._files import DataFileError, examples
from ..core._errors import MapError, RegdevError
from ..core._limits import seconds_problem
from ..core._text import display_text
from ..devices._modbus import URL_FORMS, is_modbus_url
from ..devices._regmap import Field, Register, RegisterMap
from ..devices._sunspec import Discovery, SunSpecMissing, discover_url
from ..gate._maptools import value_summary
from ._common import UsageError, register_map, tell

_ACCESS = {"rw": "rw", "r": "r", "w": "w"}


def _bits(mask: int) -> str:
    """The set bits of ``mask`` as ranges, highest first: ``7, 3:1``."""
    runs: list[str] = []
    bit = 7
    while bit >= 0:
        if mask >> bit & 1:
            top = bit
            while bit >= 0 and mask >> bit & 1:
                bit -= 1
            runs.append(str(top) if top == bit + 1 else f"{top}:{bit + 1}")
        else:
            bit -= 1
    return ", ".join(runs)


#: Fields this wide or wider show their values (reset, enumerated) in hex, as datasheets and
#: SystemRDL files write them (``0x80``); narrower ones in decimal, where the two agree but
#: for 10..15.
HEX_BITS = 4


def _number(field: Field, value: int) -> str:
    """A value of ``field`` as the table shows it: hex for a field of :data:`HEX_BITS` bits
    or more (``0x0A``), else decimal."""
    return f"0x{value:02X}" if field.width >= HEX_BITS else str(value)


def _field_line(field: Field, width: int = 10) -> str:
    """A field's line; ``width`` is the name column's (the map's longest field name)."""
    span = f"[{field.msb}]" if field.width == 1 else f"[{field.msb}:{field.lsb}]"
    what = [field.access]
    if field.onwrite:
        what.append("write 1 to clear")
    if field.onread:
        what.append("clears on read")
    reset = _number(field, field.reset)
    line = f"      {span:<7} {field.name:<{width}} {', '.join(what):<22} reset {reset:<5}"
    if field.encode:
        line += " " + " ".join(f"{name}={_number(field, value)}"
                               for name, value in field.encode) + ";"
    if field.description:
        line += f"  {field.description}"
    return display_text(line.rstrip())  # a description is the map file's text


def format_map(regmap: RegisterMap) -> str:
    """The register table of ``regdev map``: a line per register (address, name, access,
    reset value, protected, description), then a line per field (bits, name, access and
    behaviour, reset value, enumerated values, description) and the reserved bits; then a
    line per typed value (type, range, resolution, unit, registers, description). The name
    columns are as wide as the longest name, so a long name never shifts the columns after
    it; values of fields of 4 bits or more are in hex (``0x80``)."""
    width = max([len(r.name or "-") for r in regmap.registers] + [4])
    named = max([len(f.name) for r in regmap.registers for f in r.fields] + [10])
    head = regmap.name or "register map"
    widths = sorted({r.width for r in regmap.registers})
    bits = (f"of {widths[0]} bit{'s' * (widths[0] != 1)}" if len(widths) == 1
            else f"of {', '.join(map(str, widths))} bits")
    tables = ("" if regmap.tables == ("holding",) else
              ", in the " + ", ".join(regmap.tables) + " tables (each row says its table)")
    lines = [display_text(f"{head}: {regmap.description}" if regmap.description else head),
             f"{len(regmap)} register{'s' * (len(regmap) != 1)} {bits}{tables}"]
    lines.append(f"{'addr':<6}{'name':<{width + 2}}{'access':<8}{'reset':<7}description")
    for register in regmap.registers:
        lines.append(_register_line(register, width))
        lines.extend(_field_line(field, named) for field in register.fields)
        if register.fields and register.reserved_mask:
            lines.append(f"      [{_bits(register.reserved_mask)}] reserved (read as 0, "
                         "write as 0)")
    if regmap.values:  # as read_value's description lists them (a file's text: escaped)
        lines.append(f"{len(regmap.values)} typed value{'s' * (len(regmap.values) != 1)} "
                     "(read_value, write_value):")
        lines.extend("  " + display_text(value_summary(codec)) for codec in (
            regmap.value(value.name) for value in regmap.values) if codec is not None)
    return "\n".join(lines) + "\n"


def _register_line(register: Register, width: int) -> str:
    notes = " (protected: writes need approval)" if register.protected else ""
    if register.table != "holding":
        notes += f" ({register.table} table)"
    if register.width not in (1, 8):
        notes += f" ({register.width} bits)"
    text = (f"0x{register.addr:02X}  {register.name or '-':<{width + 2}}"
            f"{_ACCESS[register.access or 'rw']:<8}0x{register.reset or 0:02X}   "
            f"{register.description}{notes}")
    return display_text(text.rstrip())


def format_discovery(found: Discovery) -> str:
    """The table of ``regdev map --sunspec-discover URL``: the marker, a line per model
    (id, name, address, registers), then a line per value (name, address, type, unit, scale
    factor or scale, access), and the points given no value."""
    lines = [display_text(found.name()),
             f"SunSpec marker at {found.base}; {len(found.models)} "
             f"model{'s' * (len(found.models) != 1)}, end model at {found.end}"]
    for model in found.models:
        lines.append(display_text(f"  model {model.id:<5} {model.prefix:<32} at {model.addr}, "
                                  f"{model.length + 2} registers"))
    rows = [(value["name"], str(value["addr"]), value["type"], value.get("unit", ""),
             value.get("scale_factor") or value.get("scale") or "", value["access"])
            for value in found.values]
    head = ("value", "addr", "type", "unit", "scale", "access")
    widths = [max(len(row[column]) for row in [head, *rows]) + 2 for column in range(5)]
    for row in [head, *rows]:
        line = "".join(f"{cell:<{width}}" for cell, width in zip(row, widths, strict=False))
        lines.append(display_text(line + row[5]))
    lines.extend(display_text(f"no value: {why}") for why in found.skipped)
    return "\n".join(lines) + "\n"


def _discover(args: argparse.Namespace, out: TextIO) -> int:
    """``regdev map --sunspec-discover URL``: nothing is written unless all of the chain was
    read and laid out."""
    if args.map is not None or args.examples:
        raise UsageError("--sunspec-discover takes no FILE or --examples")
    if args.timeout is not None:
        problem = seconds_problem(args.timeout)
        if problem is not None:
            raise UsageError(f"--timeout {problem}")
    url = args.sunspec_discover
    if not is_modbus_url(url):
        raise UsageError(f"--sunspec-discover takes a Modbus URL, got {url}: expected "
                         f"{URL_FORMS}")
    try:
        found = discover_url(url, timeout=0.5 if args.timeout is None else args.timeout)
    except SunSpecMissing as error:
        raise UsageError(str(error)) from None
    except RegdevError as error:
        raise UsageError(f"SunSpec discovery on {url}: {error}") from None
    try:
        found.regmap()  # a map every --map takes, or nothing written
    except MapError as error:
        raise UsageError(f"SunSpec discovery on {url}: {error}") from None
    text = found.to_json() if args.json else format_discovery(found)
    if args.json:
        for why in found.skipped:
            tell("map", "warning", f"no value for {why}")
    if args.output in (None, "-"):
        out.write(text)
        return 0
    _write_whole(args.output, text)
    return 0


def _write_whole(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a file beside it, then renamed)."""
    target = Path(path)
    part = target.with_name(f".{target.name}.part")
    try:
        part.write_text(text, encoding="utf-8")
        os.replace(part, target)
    except OSError as error:
        with contextlib.suppress(OSError):
            part.unlink()
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from None


def cmd_map(args: argparse.Namespace, out: TextIO) -> int:
    if args.sunspec_discover is not None:
        return _discover(args, out)
    if args.timeout is not None:
        raise UsageError("--timeout goes with --sunspec-discover URL")
    if args.examples:
        if args.map is not None or args.json or args.output is not None:
            raise UsageError("--examples takes no FILE, --json or --output")
        try:
            found = examples()
        except DataFileError as error:
            raise UsageError(str(error)) from None
        out.write("".join(display_text(str(path)) + "\n" for path in found))
        return 0
    if args.map is None:
        raise UsageError("give a register map FILE (.rdl or .json), --examples for the "
                         "shipped ones, or --sunspec-discover URL")
    regmap = register_map(args)
    text = regmap.to_json() if args.json else format_map(regmap)
    if args.output in (None, "-"):
        out.write(text)
        return 0
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write {args.output}: {error.strerror or error}") from None
    return 0


def add_parser(sub: Any) -> None:
    """Add ``regdev map`` to the subcommands."""
    map_ = sub.add_parser(
        "map", help="print a register map's registers and fields, or its compiled JSON form",
        description="Read a register map (SystemRDL .rdl, which needs the rdl extra, or the "
                    "compiled JSON form) and print its register table: address, name, "
                    "access, reset value, and each field's bits, access, reset value and "
                    "enumerated values. With --json, write the compiled JSON form instead, "
                    "which the firmware simulator reads with the standard library alone and "
                    "which every --map option takes. A map regdev cannot honour is an error "
                    "naming the construct and its file:line (exit 2). With --examples, list "
                    "the example files installed with regdev, one path a line. See "
                    "docs/maps.md.")
    map_.add_argument("map", metavar="FILE", nargs="?", help="the register map (.rdl or .json)")
    map_.add_argument("--examples", action="store_true",
                      help="print the full path of each example file installed with "
                           "regdev, one a line, and exit: register maps (*.rdl), eval task "
                           "suites and recorded calls (*.jsonl), policies (*.toml), a "
                           "tool-definitions file (motor-tools.json), SunSpec device images "
                           "(sunspec-*.json: for a Modbus server to serve, not maps) and "
                           "agent-framework example scripts (agents_*.py)")
    map_.add_argument("--json", action="store_true",
                      help="write the compiled JSON form (format regdev-map, version 1)")
    map_.add_argument("-o", "--output", metavar="OUT",
                      help="write to OUT (default: standard output)")
    map_.add_argument("--sunspec-discover", metavar="URL",
                      help="discover the map of a SunSpec device (an inverter, a meter, a "
                           "battery) at this Modbus URL (modbus+tcp://HOST:PORT?unit=1, "
                           "modbus+rtu://PORT?unit=1): find the SunS marker at holding "
                           "register 40000, 50000 or 0, walk its model chain, and print the "
                           "models and values found (with --json, the map in the compiled "
                           "JSON form, which --map takes). Needs the sunspec extra. See "
                           "docs/sunspec.md")
    map_.add_argument("--timeout", metavar="SECONDS", type=float,
                      help="with --sunspec-discover: seconds to wait for each reply, "
                           "0.001..86400 (default 0.5)")
    map_.set_defaults(func=cmd_map)
