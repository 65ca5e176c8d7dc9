"""Generate the C firmware's register table (a header) from a compiled register map.

The C firmware does not describe its registers by hand: ``make`` runs this script, which
reads a compiled register map (JSON) and writes ``regmap.h`` into the build directory::

    python3 firmware-sim/c/gen_regmap.py -o build/regmap.h                 # the default map
    python3 firmware-sim/c/gen_regmap.py --map uart.json -o build/regmap.h

Without ``--map`` it writes the default device: 16 read-write registers at addresses
0x00..0x0F, reset value 0, no reserved, write-1-to-clear or clear-on-read bits (the device
regdev runs in process and the Python firmware simulator serves).

The map's shape (``"format": "regdev-map"``, version 1)::

    {"format": "regdev-map", "version": 1, "name": "uart",
     "registers": [{"name": "CTRL", "addr": 1, "access": "rw", "reset": 0,
                    "reserved_mask": 0, "woclr_mask": 0, "rclr_mask": 0, "fields": [...]}]}

``access`` is ``"rw"``, ``"r"`` (a write is refused with ``e DATA``) or ``"w"`` (reads give 0);
the three masks are 8-bit: reserved bits read as 0 and are never set by a write, a 1 written
to a write-1-to-clear bit clears it (a 0 leaves it), clear-on-read bits clear after a read
(``R``; a dump ``D`` has no side effects). Other keys (``fields``, descriptions) are not used
here. An address with no register answers ``e ADDR``.

Rules of this file: standard library only; the output depends only on the map's content (no
paths, dates or versions), so the same map always gives the same header and the same image.
Errors are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

#: Registers of protocol version 1 (docs/protocol.md): addresses 0x00..0x0F.
REGISTER_COUNT: Final = 16
#: Longest identify text (docs/protocol.md) and the part of its description before the map's
#: name (``regdev C/<platform> <name>``; platform names are at most 4 letters). The firmware
#: cuts the description further to make room for its id and epoch.
MAX_TEXT: Final = 48
IDENTITY_OVERHEAD: Final = len("regdev C/host ")
#: Longest map name kept in the description; a longer one is cut to this many characters.
MAX_NAME_IN_IDENTITY: Final = MAX_TEXT - IDENTITY_OVERHEAD
ACCESS: Final = {"rw": 0b111, "r": 0b011, "w": 0b101}  # present | readable | writable
MASKS: Final = ("reserved_mask", "woclr_mask", "rclr_mask")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_MAP_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

DEFAULT_MAP: Final[dict[str, Any]] = {
    "format": "regdev-map", "version": 1, "name": "default",
    "registers": [{"name": f"R{addr}", "addr": addr, "access": "rw", "reset": 0,
                   "reserved_mask": 0, "woclr_mask": 0, "rclr_mask": 0, "fields": []}
                  for addr in range(REGISTER_COUNT)],
}


class MapError(Exception):
    """The map is not a regdev register map this firmware can serve (the message says where)."""


def _byte(where: str, value: object) -> int:
    if type(value) is not int or not 0 <= value <= 0xFF:
        raise MapError(f"{where}: expected an int 0..255, got {value!r}")
    return value


def check_map(data: object) -> dict[str, Any]:
    """Check a decoded map and return it; every register's masks filled in (0 when absent).

    Raises:
        MapError: not the regdev-map format version 1, or a register is out of range, twice
            at one address, of an unknown access, or has a reset value with reserved bits.
    """
    if not isinstance(data, dict):
        raise MapError(f"expected a JSON object, got {type(data).__name__}")
    if data.get("format") != "regdev-map" or data.get("version") != 1:
        raise MapError('expected "format": "regdev-map" and "version": 1, got '
                       f'{data.get("format")!r} version {data.get("version")!r}')
    name = data.get("name")
    if not isinstance(name, str) or not _MAP_NAME.fullmatch(name):
        raise MapError(f"name: expected 1..64 letters, digits, `_`, `.` or `-`, got {name!r}")
    registers = data.get("registers")
    if not isinstance(registers, list) or not registers:
        raise MapError("registers: expected a non-empty list")
    seen: dict[int, str] = {}
    checked = []
    for index, register in enumerate(registers):
        where = f"registers[{index}]"
        if not isinstance(register, dict):
            raise MapError(f"{where}: expected an object")
        reg_name = register.get("name")
        if not isinstance(reg_name, str) or not _NAME.fullmatch(reg_name):
            raise MapError(f"{where}.name: expected a C identifier of 1..64 characters, "
                           f"got {reg_name!r}")
        addr = register.get("addr")
        if type(addr) is not int or not 0 <= addr < REGISTER_COUNT:
            raise MapError(f"{where}.addr: expected an int 0..{REGISTER_COUNT - 1} (protocol 1 "
                           f"has {REGISTER_COUNT} registers), got {addr!r}")
        if addr in seen:
            raise MapError(f"{where}.addr: address {addr} is already {seen[addr]}")
        seen[addr] = reg_name
        access = register.get("access")
        if access not in ACCESS:
            raise MapError(f"{where}.access: expected one of {', '.join(ACCESS)}, got {access!r}")
        entry = {"name": reg_name, "addr": addr, "access": access,
                 "reset": _byte(f"{where}.reset", register.get("reset"))}
        for mask in MASKS:
            entry[mask] = _byte(f"{where}.{mask}", register.get(mask, 0))
        if entry["reset"] & entry["reserved_mask"]:
            raise MapError(f"{where}.reset: 0x{entry['reset']:02X} sets reserved bits "
                           f"(reserved_mask 0x{entry['reserved_mask']:02X})")
        checked.append(entry)
    return {"name": name, "registers": sorted(checked, key=lambda entry: entry["addr"])}


def render(regmap: dict[str, Any], source: str) -> str:
    """The C header for a checked map (see :func:`check_map`)."""
    by_addr = {entry["addr"]: entry for entry in regmap["registers"]}
    name = regmap["name"][:MAX_NAME_IN_IDENTITY]

    def table(c_name: str, what: str, value: Any) -> list[str]:
        lines = [f"/* {what} */", f"static const uint8_t {c_name}[REGDEV_REGISTER_COUNT] "
                 "REGDEV_ROM = {"]
        for addr in range(REGISTER_COUNT):
            entry = by_addr.get(addr)
            label = entry["name"] if entry else "(no register)"
            lines.append(f"    0x{value(entry):02X}u, /* 0x{addr:02X} {label} */")
        return [*lines, "};", ""]

    out = [
        f"/* Generated by firmware-sim/c/gen_regmap.py from {source}: do not edit. */",
        "#ifndef REGDEV_REGMAP_H",
        "#define REGDEV_REGMAP_H",
        "",
        '#include "regdev_rom.h"',
        "",
        f'#define REGDEV_MAP_NAME "{name}"',
        "",
        *table("regdev_map_access", "REGDEV_PRESENT | REGDEV_READABLE | REGDEV_WRITABLE",
               lambda e: ACCESS[e["access"]] if e else 0),
        *table("regdev_map_reset", "reset values", lambda e: e["reset"] if e else 0),
        *table("regdev_map_reserved", "reserved bits: read as 0, never set by a write",
               lambda e: e["reserved_mask"] if e else 0),
        *table("regdev_map_woclr", "write-1-to-clear bits",
               lambda e: e["woclr_mask"] if e else 0),
        *table("regdev_map_rclr", "clear-on-read bits (after an R; a dump has no side effects)",
               lambda e: e["rclr_mask"] if e else 0),
        "#endif",
        "",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the header; return the exit status (0, or 2 with one line on stderr)."""
    parser = argparse.ArgumentParser(
        prog="gen_regmap.py",
        description="Write the C firmware's register table (regmap.h) from a compiled "
                    "register map (JSON, format regdev-map version 1); without --map, the "
                    "default 16 read-write registers, reset 0.")
    parser.add_argument("--map", type=Path, help="the compiled register map (JSON)")
    parser.add_argument("-o", "--output", type=Path, required=True,
                        help="the header to write (rewritten only when its text changes)")
    args = parser.parse_args(argv)
    try:
        if args.map is None:
            regmap, source = check_map(DEFAULT_MAP), "the default map"
        else:
            try:
                data = json.loads(args.map.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError) as error:
                raise MapError(f"cannot read it: {error}") from None
            except json.JSONDecodeError as error:
                raise MapError(f"not JSON: {error}") from None
            regmap, source = check_map(data), args.map.name
        text = render(regmap, source)
        try:
            if not args.output.is_file() or args.output.read_text(encoding="utf-8") != text:
                args.output.parent.mkdir(parents=True, exist_ok=True)
                args.output.write_text(text, encoding="utf-8")
        except OSError as error:
            print(f"gen_regmap.py: error: cannot write {args.output}: {error.strerror}",
                  file=sys.stderr)
            return 2
    except MapError as error:
        print(f"gen_regmap.py: error: {args.map or 'default map'}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
