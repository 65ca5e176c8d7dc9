"""Generate the C firmware's register table (a header) from a compiled register map.

The C firmware does not describe its registers by hand: ``make`` runs this script, which
reads a register map in its compiled JSON form (what ``regdev map FILE --json`` writes, from
SystemRDL or JSON; ``docs/maps.md``) and writes ``regmap.h`` into the build directory::

    python3 firmware-sim/c/gen_regmap.py -o build/regmap.h                 # the default map
    python3 firmware-sim/c/gen_regmap.py --map sensor.json -o build/regmap.h

Without ``--map`` it writes the default device: 16 read-write registers at addresses
0x00..0x0F, reset value 0 (the device regdev runs in process and the Python firmware
simulator serves without a map).

The map is read by regdev's own map model, ``src/regdev/devices/_regmap.py`` (loaded from the
source tree beside this file, standard library only), so the firmware's registers are the ones
regdev's register file and simulator have: for each register its address (0..255), reset
value, and the masks of its bits by behaviour (writable, readable, reserved, write-1-to-clear,
clear-on-read), from which the firmware does what ``Register.refuse_write``,
``Register.written`` and ``Register.read_effect`` say. The firmware holds at most
:data:`MAX_REGISTERS` registers (one byte of RAM each).

Rules of this file: standard library only; the output depends only on the map's content (no
paths, dates or versions), so the same map always gives the same header and the same image.
Errors are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

#: Longest identify text (docs/protocol.md) and the part of its description before the map's
#: name (``regdev C/<platform> <name>``; platform names are at most 4 letters). The firmware
#: cuts the description further to make room for its id and epoch.
MAX_TEXT: Final = 48
IDENTITY_OVERHEAD: Final = len("regdev C/host ")
#: Longest map name kept in the description; a longer one is cut to this many characters.
MAX_NAME_IN_IDENTITY: Final = MAX_TEXT - IDENTITY_OVERHEAD
#: Most registers the firmware holds (its RAM keeps one byte each; the Uno's image with the
#: default map keeps 16 within the 512-byte budget, and 128 would still fit 2 KiB).
MAX_REGISTERS: Final = 128
#: The characters a map's name keeps in the description; others become ``-``.
_NAME_KEEPS: Final = re.compile(r"[^A-Za-z0-9_.-]+")
#: What the C table says of each register, one row each (see regdev_core.c, ``COL_*``).
COLUMNS: Final = ("addr", "reset", "writable", "readable", "reserved", "woclr", "rclr")


class MapError(Exception):
    """The map cannot be served by the firmware (the message says why and where)."""


def regmap_module() -> types.ModuleType:
    """regdev's map model (``devices/_regmap.py``), from the regdev beside this file under a
    private package name, so that neither regdev nor its dependencies need be installed: in a
    source tree ``src/regdev``, in an installed regdev the package itself (this file is then
    ``regdev/_firmware/c/gen_regmap.py``)."""
    here = Path(__file__).resolve().parents[2]
    source = next((folder for folder in (here / "src" / "regdev", here)
                   if (folder / "devices" / "_regmap.py").is_file()), here / "src" / "regdev")
    name = "_regdev_gen_regmap"
    if name not in sys.modules:
        package = types.ModuleType(name, "regdev's stdlib-only modules, for gen_regmap.py")
        package.__path__ = [str(source)]
        sys.modules[name] = package
    return importlib.import_module(f"{name}.devices._regmap")


def load(path: Path | None) -> tuple[Any, str]:
    """The map at ``path`` (the compiled JSON form), or the default map; and its name for the
    identify text: the map's name, else the file's stem, with characters other than letters,
    digits, ``_``, ``.`` and ``-`` made ``-``, cut to :data:`MAX_NAME_IN_IDENTITY`.

    Raises:
        MapError: the file cannot be read, is not a map (regdev's message, naming the place),
            or is one the firmware cannot hold (:func:`refusal`).
    """
    model = regmap_module()
    if path is None:
        return model.RegisterMap.default(), "default"
    try:
        text = path.read_bytes()
    except OSError as error:
        raise MapError(f"{path}: cannot read it: {error.strerror or error}") from None
    try:
        regmap = model.RegisterMap.from_json(text, str(path))
    except Exception as error:  # regdev's MapError, from its private package
        if "MapError" not in (kind.__name__ for kind in type(error).__mro__):
            raise
        raise MapError(str(error)) from None
    problem = refusal(regmap)
    if problem is not None:
        raise MapError(f"{path}: {problem}")
    name = _NAME_KEEPS.sub("-", regmap.name or path.stem).strip("-") or "map"
    return regmap, name[:MAX_NAME_IN_IDENTITY]


def refusal(regmap: Any) -> str | None:
    """Why the firmware cannot hold ``regmap`` (a map regdev's map model accepted, any
    ``RegisterMap``), as one phrase without the file's name, or None when it can. The one
    limit the firmware adds to the model's: at most :data:`MAX_REGISTERS` registers, and those
    of regdev's serial protocol (8-bit holding registers at 0..255, ``serial_problem``).
    ``regdev firmware-sim --avr`` asks this before it builds, to name the user's file."""
    problem = regmap.serial_problem()
    if problem is not None:
        return f"the C firmware cannot hold this map: {problem}"
    if len(regmap) > MAX_REGISTERS:
        return (f"the C firmware holds at most {MAX_REGISTERS} registers (one byte of RAM "
                f"each); this map has {len(regmap)}")
    return None


def header(path: Path | None) -> str:
    """The header for the map at ``path`` (the compiled JSON form), or for the default map:
    what ``gen_regmap.py [--map PATH] -o FILE`` writes.

    Raises:
        MapError: as :func:`load`.
    """
    regmap, name = load(path)
    return render(regmap, name, path.name if path is not None else "the default map")


def map_text(regmap: Any, name: str) -> str:
    """The answer to ``I 01``: ``map=DIGEST NAME`` (docs/protocol.md, "Which map the device
    serves"), the map's digest and its name as the identify text has it, cut to fit 48
    bytes."""
    text = f"map={regmap.digest()}"
    return text + (f" {name[:MAX_TEXT - len(text) - 1]}" if name else "")


def bus_defines(regmap: Any) -> list[str]:
    """The bridge's settings, for a map whose chip is on a bus (its ``bus``: the user-defined
    properties of docs/maps.md, "A chip behind a bridge"); none for a map without one. With
    them the core forwards every register access to the chip (``REGDEV_BUS``, and
    ``REGDEV_BUS_I2C`` or ``REGDEV_BUS_SPI``)."""
    bus = regmap.bus
    if bus is None:
        return []
    common = [f"#define REGDEV_BUS_CLOCK {bus.clock}UL /* Hz */",
              f"#define REGDEV_BUS_ADDR_WIDTH {bus.addr_width}u /* bits of a register "
              "address */",
              f"#define REGDEV_BUS_AUTO_INCREMENT {int(bus.auto_increment)}"]
    if bus.kind == "i2c":
        return ["",
                "/* The chip is on I2C: the firmware is a bridge to it (docs/firmware.md). */",
                "#define REGDEV_BUS 1",
                "#define REGDEV_BUS_I2C 1",
                f"#define REGDEV_BUS_ADDRESS 0x{bus.address:02X}u /* 7-bit */", *common]
    port, bit = cs_pin(bus)
    identity = spi_identity(regmap)
    return ["",
            "/* The chip is on SPI: the firmware is a bridge to it (docs/firmware.md). */",
            "#define REGDEV_BUS 1",
            "#define REGDEV_BUS_SPI 1", *common,
            f"#define REGDEV_SPI_MODE {bus.mode}u /* CPOL CPHA */",
            f"#define REGDEV_SPI_CS_PORT PORT{port} /* chip select: {bus.cs} */",
            f"#define REGDEV_SPI_CS_DDR DDR{port}",
            f"#define REGDEV_SPI_CS_BIT {bit}u",
            f"#define REGDEV_SPI_READ 0x{bus.read_mask:02X}u /* in the first address byte */",
            f"#define REGDEV_SPI_WRITE 0x{bus.write_mask:02X}u",
            f"#define REGDEV_SPI_VERIFY {int(bus.verify)} /* read back every write */",
            *([f"#define REGDEV_SPI_IDENTITY 0x{identity.addr:02X}u /* {identity.label}, "
               f"holds 0x{identity.reset:02X} */"] if identity is not None else [])]


def cs_pin(bus: Any) -> tuple[str, int]:
    """The port (``B``, ``C``, ``D``) and bit of an SPI bus's chip-select pin (``D10``: B
    2), by the map model's table of the Uno's pins."""
    port, bit = regmap_module().SPI_CS_PINS[bus.cs]
    return str(port), int(bit)


def spi_identity(regmap: Any) -> Any:
    """The register an SPI bridge reads to tell a stuck MISO from a value (docs/firmware.md,
    "SPI errors"): the map's first identity register whose reset value (the chip's id) is
    neither 0x00 nor 0xFF and whose bits all read; None when the map names none."""
    return next((r for r in regmap.registers if r.identity and r.reset not in (0, 0xFF)
                 and r.readable_mask == 0xFF), None)


def chip_table(regmap: Any) -> str:
    """The simulated chip's table, for the simavr harness's ``--i2c-chip FILE`` or
    ``--spi-chip FILE`` (``sim/harness.c``): ``i2c ADDRESS ADDR_WIDTH AUTO_INCREMENT`` or
    ``spi ADDR_WIDTH AUTO_INCREMENT MODE CS_PORT CS_BIT READ_MASK WRITE_MASK``, then one line
    a register, ``ADDR RESET WRITABLE READABLE WOCLR RCLR`` in hex, from the same map as the
    image.

    Raises:
        MapError: the map has no bus (no chip to simulate).
    """
    bus = regmap.bus
    if bus is None:
        raise MapError("the map puts no chip on a bus (docs/maps.md, \"A chip behind a "
                       "bridge\"): there is no chip to simulate")
    if bus.kind == "i2c":
        lines = [f"i2c {bus.address:02X} {bus.addr_width} {int(bus.auto_increment)}"]
    else:
        port, bit = cs_pin(bus)
        lines = [f"spi {bus.addr_width} {int(bus.auto_increment)} {bus.mode} {port} {bit} "
                 f"{bus.read_mask:02X} {bus.write_mask:02X}"]
    lines += [f"{r.addr:02X} {r.reset:02X} {r.writable_mask:02X} {r.readable_mask:02X} "
              f"{r.woclr_mask:02X} {r.rclr_mask:02X}" for r in regmap.registers]
    return "\n".join(lines) + "\n"


def render(regmap: Any, name: str, source: str) -> str:
    """The C header for a map: its name, its register count, and the table (one row per
    column of :data:`COLUMNS`, each with one value per register, in address order)."""
    registers = regmap.registers
    columns = {"addr": [r.addr for r in registers], "reset": [r.reset for r in registers],
               "writable": [r.writable_mask for r in registers],
               "readable": [r.readable_mask for r in registers],
               "reserved": [r.reserved_mask for r in registers],
               "woclr": [r.woclr_mask for r in registers],
               "rclr": [r.rclr_mask for r in registers]}
    names = ", ".join(r.name or f"R{r.addr}" for r in registers)
    rows = []
    for column in COLUMNS:
        values = ", ".join(f"0x{value:02X}u" for value in columns[column])
        rows.append(f"    {{{values}}}, /* {column} */")
    out = [
        f"/* Generated by firmware-sim/c/gen_regmap.py from {source}: do not edit. */",
        "#ifndef REGDEV_REGMAP_H",
        "#define REGDEV_REGMAP_H",
        "",
        "#include <stdint.h>",
        "",
        '#include "regdev_rom.h"',
        "",
        f'#define REGDEV_MAP_NAME "{name}"',
        f'#define REGDEV_MAP_TEXT "{map_text(regmap, name)}"',
        f"#define REGDEV_REGISTER_COUNT {len(regmap.registers)}u",
        *bus_defines(regmap),
        "",
        "#endif",
        "",
        "/* The table, for regdev_core.c only (which defines REGDEV_MAP_TABLE). */",
        "#if defined(REGDEV_MAP_TABLE) && !defined(REGDEV_MAP_TABLE_DONE)",
        "#define REGDEV_MAP_TABLE_DONE",
        f"/* one row per column, one column per register: {names} */",
        "static const uint8_t regdev_map[7][REGDEV_REGISTER_COUNT] REGDEV_ROM = {",
        *rows,
        "};",
        "#endif",
        "",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the header; return the exit status (0, or 2 with one line on stderr)."""
    parser = argparse.ArgumentParser(
        prog="gen_regmap.py",
        description="Write the C firmware's register table (regmap.h) from a register map in "
                    "its compiled JSON form (regdev map FILE --json); without --map, the "
                    "default 16 read-write registers, reset 0.")
    parser.add_argument("--map", type=Path, help="the compiled register map (JSON)")
    parser.add_argument("-o", "--output", type=Path, required=True,
                        help="the header to write (rewritten only when its text changes)")
    parser.add_argument("--chip", action="store_true",
                        help="write the simulated chip's table (for the simavr harness's "
                             "--i2c-chip or --spi-chip) instead of the header; the map "
                             "must have a bus")
    args = parser.parse_args(argv)
    try:
        text = chip_table(load(args.map)[0]) if args.chip else header(args.map)
    except MapError as error:
        print(f"gen_regmap.py: error: {error}", file=sys.stderr)
        return 2
    try:
        if not args.output.is_file() or args.output.read_text(encoding="utf-8") != text:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(text, encoding="utf-8")
    except OSError as error:
        print(f"gen_regmap.py: error: cannot write {args.output}: {error.strerror}",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
