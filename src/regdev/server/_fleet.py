"""A fleet file: the devices one ``regdev serve --http --fleet FILE`` serves, each at
``/mcp/NAME``.

The file is TOML, one table per device::

    [devices.bench1]
    port = "modbus+tcp://10.0.0.5:502"   # the device's URL, as --port takes it
    unit = 3                            # Modbus unit id (1..247), into the URL's ?unit=
    map = "maps/sensor.rdl"             # its register map (relative to the file), optional
    session = "lab"                     # the policy session its calls default to, optional

    [devices.oven]
    port = "/dev/ttyUSB0"

Rules of this file:

* A device's name is one path segment of a URL (letters, digits, ``-``, ``_``, ``.``, ``~``;
  not ``.`` nor ``..``), at most 64 characters: it is the end of the device's endpoint.
* One port, one owner: a port other than a Modbus one is named by one device only
  (``inprocess`` aside: each is a register file of its own). Units on
  one Modbus line (RS-485, ``modbus+rtu://``) or behind one gateway (``modbus+tcp://``) share
  the port, each with a unit id of its own: two devices on one port with one unit id are
  refused.
* Every refusal names the file and the line of the table or key at fault, in one line
  (:class:`FleetError`); a fleet file refused starts nothing.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..core._errors import RegdevError
from ..core._text import escape_text

__all__ = ["FleetDevice", "FleetError", "load_fleet"]

#: A device name: one URL path segment of unreserved characters (RFC 3986, 2.3).
_NAME = re.compile(r"[A-Za-z0-9._~-]{1,64}")
#: The keys a device's table may hold.
_KEYS = frozenset({"port", "unit", "map", "session"})
#: The URL schemes whose port several devices share, one unit id each.
_BUS_SCHEMES = ("modbus+rtu://", "modbus+tcp://")


class FleetError(RegdevError):
    """A fleet file that cannot be served; the message names the file and line."""


@dataclass(frozen=True)
class FleetDevice:
    """One device of a fleet.

    Attributes:
        name: its name: its endpoint is ``/mcp/NAME``.
        port: its URL as ``--port`` takes it, its unit id included (``?unit=N``).
        map: its register map's file (resolved against the fleet file's folder), or None
            for the default map.
        session: the policy session its calls default to, or None (the caller's scopes
            choose).
        line: the line of its table in the fleet file.
    """

    name: str
    port: str
    map: Path | None
    session: str | None
    line: int

    @property
    def line_key(self) -> str:
        """The port without its unit: the line (or gateway) it shares with other units."""
        return _line_of(self.port)[0]


def load_fleet(path: str | Path) -> list[FleetDevice]:
    """The devices of the fleet file at ``path``, in the file's order.

    Raises:
        FleetError: the file cannot be read, is not TOML, or breaks a rule of the module
            docstring; the message names the file and the line.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        problem = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise FleetError(f"cannot read the fleet file {path}: {problem or error}") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise FleetError(f"{path}: not TOML: {error}") from None
    lines = text.splitlines()
    extra = sorted(set(document) - {"devices"})
    if extra:
        raise FleetError(f"{path}:{_find(lines, extra[0]) or 1}: unknown table or key "
                         f"`{escape_text(extra[0])}` (a fleet file holds [devices.NAME] tables)")
    tables = document.get("devices")
    if not isinstance(tables, dict) or not tables:
        raise FleetError(f"{path}: no devices: give one [devices.NAME] table per device")
    devices: list[FleetDevice] = []
    seen: dict[tuple[str, int | None], FleetDevice] = {}
    for name, table in tables.items():
        line = _table_line(lines, name)
        where = f"{path}:{line}"
        shown = escape_text(name)
        if not _NAME.fullmatch(name) or name in (".", ".."):
            raise FleetError(f"{where}: the device name `{shown}` is not one URL path segment "
                             "(letters, digits, -, _, ., ~; at most 64; not . or ..): it ends "
                             "the device's endpoint /mcp/NAME")
        if not isinstance(table, dict):
            raise FleetError(f"{where}: devices.{shown} must be a table ([devices.{shown}])")
        device = _device(path, lines, name, table, line)
        base, unit = _line_of(device.port)
        key = (base, unit)
        first = seen.get(key) if base != "inprocess" else None  # each its own registers
        if first is not None:
            port_line = _key_line(lines, device.line, "port")
            what = (f"unit {unit} on the line {base}" if unit is not None
                    else f"the port {base}")
            raise FleetError(f"{path}:{port_line}: devices {first.name} (line {first.line}) "
                             f"and {shown} both name {escape_text(what, 120)}; one port has "
                             "one owner" + (", each unit an id of its own" if unit is not None
                                            else ""))
        seen[key] = device
        devices.append(device)
    return devices


def _device(path: Path, lines: list[str], name: str, table: dict[str, Any],
            line: int) -> FleetDevice:
    """One device's table, checked."""
    shown = escape_text(name)
    extra = sorted(set(table) - _KEYS)
    if extra:
        raise FleetError(f"{path}:{_key_line(lines, line, extra[0])}: devices.{shown} has an "
                         f"unknown key `{escape_text(extra[0])}` (port, unit, map, session)")
    port = table.get("port")
    if not isinstance(port, str) or not port:
        raise FleetError(f"{path}:{_key_line(lines, line, 'port')}: devices.{shown} needs "
                         "port = \"URL\" (as --port takes it)")
    unit = table.get("unit")
    if unit is not None:
        if type(unit) is not int or not 1 <= unit <= 247:
            raise FleetError(f"{path}:{_key_line(lines, line, 'unit')}: devices.{shown}: unit "
                             f"must be a Modbus unit id 1..247, got {escape_text(repr(unit))}")
        if not port.startswith(_BUS_SCHEMES):
            raise FleetError(f"{path}:{_key_line(lines, line, 'unit')}: devices.{shown}: unit "
                             "goes with a modbus+rtu:// or modbus+tcp:// port")
        if "unit=" in urlsplit(port).query:
            raise FleetError(f"{path}:{_key_line(lines, line, 'unit')}: devices.{shown}: the "
                             "unit is given twice (unit = and the port's ?unit=)")
        port += ("&" if "?" in port else "?") + f"unit={unit}"
    regmap = table.get("map")
    if regmap is not None and (not isinstance(regmap, str) or not regmap):
        raise FleetError(f"{path}:{_key_line(lines, line, 'map')}: devices.{shown}: map must "
                         "be a file name")
    session = table.get("session")
    if session is not None and (not isinstance(session, str) or not session):
        raise FleetError(f"{path}:{_key_line(lines, line, 'session')}: devices.{shown}: "
                         "session must be a session's name")
    return FleetDevice(name, port, path.parent / regmap if regmap else None, session, line)


def _line_of(port: str) -> tuple[str, int | None]:
    """The port without its query (the line or gateway), and its unit id (Modbus: 1 when
    the URL gives none; None for a port that is not a bus)."""
    if not port.startswith(_BUS_SCHEMES):
        return port, None
    parts = urlsplit(port)
    query = dict(parse_qsl(parts.query))
    try:
        unit = int(query.get("unit", "1"))
    except ValueError:
        unit = 1
    return port.partition("?")[0].partition("#")[0], unit


def _find(lines: list[str], word: str) -> int | None:
    """The first line (from 1) that starts with ``word`` (a key or a table), or None."""
    for number, text in enumerate(lines, 1):
        stripped = text.strip().lstrip("[").strip()
        if stripped.startswith(word):
            return number
    return None


def _table_line(lines: list[str], name: str) -> int:
    """The line of ``[devices.NAME]`` (quoted or not), else 1."""
    pattern = re.compile(r"\s*\[\s*devices\s*\.\s*(\"?)" + re.escape(name) + r"\1\s*\]")
    for number, text in enumerate(lines, 1):
        if pattern.match(text):
            return number
    return 1


def _key_line(lines: list[str], table_line: int, key: str) -> int:
    """The line of ``key = ...`` in the table that starts at ``table_line``, else that."""
    pattern = re.compile(r"\s*" + re.escape(key) + r"\s*=")
    for number in range(table_line + 1, len(lines) + 1):
        text = lines[number - 1]
        if text.lstrip().startswith("["):
            break
        if pattern.match(text):
            return number
    return table_line
