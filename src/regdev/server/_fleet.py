"""A fleet file: the devices one ``regdev serve --http --fleet FILE`` serves, each at
``/mcp/NAME``.

The file is TOML, one table per device::

    [devices.bench1]
    port = "modbus+tcp://10.0.0.5:502"   # the device's URL, as --port takes it
    unit = 3                            # Modbus unit id (1..247; 1..255 on TCP), into ?unit=
    map = "maps/sensor.rdl"             # its register map (relative to the file), optional
    session = "lab"                     # the policy session its calls default to, optional

    [devices.oven]
    port = "/dev/ttyUSB0"

    [leases]                            # optional: the leases of serial lines
    seconds = 10                        # a lease lasts this long unless renewed (default 10)
    renew_seconds = 3                   # its owner renews it this often (default 3)

Rules of this file:

* A device's name is one path segment of a URL (letters, digits, ``-``, ``_``, ``.``, ``~``;
  not ``.`` nor ``..``), at most 64 characters: it is the end of the device's endpoint.
* One port, one owner: a port other than a Modbus one is named by one device only
  (``inprocess`` aside: each is a register file of its own). Units on
  one Modbus line (RS-485, ``modbus+rtu://``) or behind one gateway (``modbus+tcp://``) share
  the port, each with a unit id of its own: two devices on one port with one unit id are
  refused.
* One serial line, one owner: the devices on one serial line (:func:`~regdev.devices._open.
  line_name`: a port path, a link to it resolved; Modbus RTU on any port) are Modbus RTU
  units with ids of their own and one line's settings (baud, parity, stop bits, echo and
  the port's options: the URL's query but ``unit`` and ``base``), or one device of regdev's
  serial protocol alone. The server drives each line through one port, one transaction at
  a time; on a shared store, the process that holds the line's lease does
  (``docs/postgresql.md``).
* ``[leases]``: ``seconds`` (1..3600, default 10) and ``renew_seconds`` (> 0, less than
  ``seconds``; default 3). A process killed without a word keeps its lines until
  ``seconds`` after its last renewal.
* Every refusal names the file and the line of the table or key at fault, in one line
  (:class:`FleetError`); a fleet file refused starts nothing.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from ..core._errors import LineElsewhere, RegdevError
from ..core._text import escape_text
from ..devices._modbus import DEFAULT_BAUDRATE, parse_modbus_url
from ..devices._open import line_name, url_scheme
from ..devices._transaction import SharedLine

__all__ = ["LEASE_SECONDS", "RENEW_SECONDS", "Fleet", "FleetDevice", "FleetError",
           "lease_guard", "load_fleet"]

#: A serial line's lease lasts this long unless renewed, in seconds (``[leases] seconds``).
LEASE_SECONDS = 10.0
#: Its owner renews it this often, in seconds (``[leases] renew_seconds``).
RENEW_SECONDS = 3.0

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


@dataclass(frozen=True)
class Fleet:
    """A fleet file's devices, in the file's order, and its leases' times (seconds)."""

    devices: list[FleetDevice]
    lease_seconds: float = LEASE_SECONDS
    renew_seconds: float = RENEW_SECONDS


def load_fleet(path: str | Path) -> Fleet:
    """The fleet file at ``path``: its devices, in the file's order, and its leases.

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
    extra = sorted(set(document) - {"devices", "leases"})
    if extra:
        raise FleetError(f"{path}:{_find(lines, extra[0]) or 1}: unknown table or key "
                         f"`{escape_text(extra[0])}` (a fleet file holds [devices.NAME] "
                         "tables and a [leases] table)")
    seconds, renew = _leases(path, lines, document.get("leases", {}))
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
        _check_line(path, lines, device, devices)
        seen[key] = device
        devices.append(device)
    return Fleet(devices, seconds, renew)


class _Leases(Protocol):
    """What :func:`lease_guard` needs of the store's leases
    (:class:`~regdev.audit._postgres.LineLeases`)."""

    def hold(self, line: str) -> bool: ...


def lease_guard(leases: _Leases) -> Callable[[SharedLine], None]:
    """The guard of a serial line (:attr:`SharedLine.guard`) that drives it only while this
    process holds its lease: a line whose lease another process holds (or that cannot be
    confirmed) is dropped (its port closed, so that the owner can open it) and the call
    refused with :class:`LineElsewhere`, nothing sent; a lease taken anew drops the line
    first too, so that every device on it is synchronised again and asked who it is
    (another process drove it meanwhile)."""

    def guard(line: SharedLine) -> None:
        try:
            fresh = leases.hold(line.name)
        except LineElsewhere:
            line.drop()
            raise
        if fresh:
            line.drop()

    return guard


def _leases(path: Path, lines: list[str], table: object) -> tuple[float, float]:
    """``[leases]``: (seconds, renew_seconds), checked."""
    line = _find(lines, "leases") or 1
    if not isinstance(table, dict):
        raise FleetError(f"{path}:{line}: leases must be a table ([leases])")
    extra = sorted(set(table) - {"seconds", "renew_seconds"})
    if extra:
        raise FleetError(f"{path}:{_key_line(lines, line, extra[0])}: [leases] has an unknown "
                         f"key `{escape_text(extra[0])}` (seconds, renew_seconds)")
    seconds, renew = table.get("seconds", LEASE_SECONDS), table.get("renew_seconds",
                                                                    RENEW_SECONDS)
    for key, value in (("seconds", seconds), ("renew_seconds", renew)):
        if type(value) not in (int, float) or not 0 < value <= 3600:
            raise FleetError(f"{path}:{_key_line(lines, line, key)}: leases.{key} must be a "
                             f"number of seconds in (0, 3600], got {escape_text(repr(value))}")
    if not renew < seconds:
        raise FleetError(f"{path}:{_key_line(lines, line, 'renew_seconds')}: "
                         f"leases.renew_seconds ({renew:g}) must be less than leases.seconds "
                         f"({seconds:g}): a lease is renewed before it lapses")
    return float(seconds), float(renew)


def _line_settings(port: str) -> tuple[str, list[tuple[str, str]]]:
    """A device's protocol and its line's settings: the URL's query but unit and base; for
    Modbus RTU the settings in effect, defaults filled in (``?baud=19200`` is the line of
    no ``baud``: 19200 is the default), whatever their order and case."""
    scheme = url_scheme(port)
    if scheme == "modbus+rtu":
        try:
            target = parse_modbus_url(port)
        except RegdevError:
            pass  # a bad URL is refused, naming its fault, when its device is opened
        else:
            return scheme, [("baud", str(target.baudrate or DEFAULT_BAUDRATE)),
                            ("parity", target.parity), ("stopbits", str(target.stopbits)),
                            ("echo", str(int(target.echo)))]
    query = urlsplit(port).query if "://" in port else ""
    return scheme, sorted((k, v) for k, v in parse_qsl(query) if k not in ("unit", "base"))


def _check_line(path: Path, lines: list[str], device: FleetDevice,
                before: list[FleetDevice]) -> None:
    """Refuse ``device`` when it cannot share its serial line with a device ``before`` it:
    one of them is not a Modbus RTU unit, their line settings differ, or their unit ids are
    one (the line named as :func:`line_name` names it, links resolved)."""
    try:
        name = line_name(device.port)
    except RegdevError as error:
        raise FleetError(f"{path}:{_key_line(lines, device.line, 'port')}: devices."
                         f"{escape_text(device.name)}: {error}") from None
    if name is None:
        return
    for first in before:
        if line_name(first.port) != name:
            continue
        where = f"{path}:{_key_line(lines, device.line, 'port')}: devices {first.name} " \
                f"(line {first.line}) and {escape_text(device.name)} are on one serial line " \
                f"{escape_text(name, 120)}"
        mine, theirs = _line_settings(device.port), _line_settings(first.port)
        if mine[0] != "modbus+rtu" or theirs[0] != "modbus+rtu":
            raise FleetError(f"{where}; one port has one owner (only Modbus RTU units share "
                             "a line)")
        if mine != theirs:
            theirs_only = [pair for pair in theirs[1] if pair not in mine[1]]
            mine_only = [pair for pair in mine[1] if pair not in theirs[1]]
            raise FleetError(f"{where} with other settings ({_shown(theirs_only)} and "
                             f"{_shown(mine_only)}): give every unit of a line the same")
        if _line_of(first.port)[1] == _line_of(device.port)[1]:
            raise FleetError(f"{where}, both unit {_line_of(device.port)[1]}; one port has "
                             "one owner, each unit an id of its own")


def _shown(settings: list[tuple[str, str]]) -> str:
    return escape_text("&".join(f"{k}={v}" for k, v in settings) or "none", 80)


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
        high = 255 if port.startswith("modbus+tcp://") else 247  # as the URL's ?unit= takes
        if type(unit) is not int or not 1 <= unit <= high:
            raise FleetError(f"{path}:{_key_line(lines, line, 'unit')}: devices.{shown}: unit "
                             f"must be a Modbus unit id 1..{high}"
                             f"{' (Modbus TCP)' if high == 255 else ''}, "
                             f"got {escape_text(repr(unit))}")
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
