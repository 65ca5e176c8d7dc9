"""One way to open a device from a URL: :func:`open_device`, with the one table of URL schemes
(:data:`SCHEMES`) that every command's ``--port`` and every library user go through. A new
backend adds its schemes to the table, nothing else here.

=====================  ================  ==============================================
URL                    backend           notes
=====================  ================  ==============================================
None, ``inprocess``    RegisterFile      the in-process register file; no timeout, no baud
``/dev/ttyUSB0``,      SerialDevice      a serial port path (no scheme): the device speaks
``COM3``                                 regdev's wire protocol (docs/protocol.md)
``socket://H:P``       SerialDevice      the same protocol over TCP (pyserial's URL)
``rfc2217://H:P``      SerialDevice      the same over an RFC 2217 port server
``loop://``            SerialDevice      pyserial's loopback (what is sent comes back)
``modbus+tcp://H:P``   ModbusDevice      Modbus TCP (docs/modbus.md)
``modbus+rtu://PORT``  ModbusDevice      Modbus RTU on a serial port
any other scheme       SerialDevice      pyserial's other URL handlers (``spy://``,
                                         ``alt://``, ``hwgrep://``); one it does not know
                                         is refused with the forms above
=====================  ================  ==============================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._device import Device, RegisterFile
from ._modbus import ModbusDevice, parse_modbus_url
from ._regmap import RegisterMap
from ._serial import SerialDevice, port_state_id
from ._transaction import SharedLine

__all__ = ["INPROCESS", "SCHEMES", "line_name", "open_device", "url_scheme"]

#: The URL of the in-process register file (also ``None``).
INPROCESS = "inprocess"

_Opener = Callable[..., Device]


def _inprocess(url: str, *, regmap: RegisterMap | None, **options: Any) -> Device:
    given = sorted(name for name, value in options.items() if value is not None)
    if given:
        raise ValueError(f"the in-process device takes no {' or '.join(given)} (they are "
                         "for a device at the end of a port)")
    return RegisterFile(regmap=regmap)


def _serial(url: str, *, regmap: RegisterMap | None, timeout: float | None = None,
            baudrate: int | None = None, **options: Any) -> Device:
    return SerialDevice(url, baudrate=115200 if baudrate is None else baudrate,
                        timeout=0.5 if timeout is None else timeout, regmap=regmap, **options)


def _modbus(url: str, *, regmap: RegisterMap | None, timeout: float | None = None,
            **options: Any) -> Device:
    return ModbusDevice(url, timeout=0.5 if timeout is None else timeout, regmap=regmap,
                        **options)


#: The URL schemes, lower case, and what opens each; ``""`` is a serial port path (no
#: scheme: ``/dev/ttyUSB0``, ``COM3``), :data:`INPROCESS` the in-process register file.
SCHEMES: dict[str, _Opener] = {
    INPROCESS: _inprocess,
    "": _serial,
    "socket": _serial,
    "rfc2217": _serial,
    "loop": _serial,
    "modbus+tcp": _modbus,
    "modbus+rtu": _modbus,
}


def url_scheme(url: str | None) -> str:
    """The key of :data:`SCHEMES` for ``url`` (one it may not hold): its scheme in lower
    case, ``""`` for a port path, :data:`INPROCESS` for None or ``inprocess`` (in any case,
    with or without ``://``)."""
    if url is None or url.lower() in (INPROCESS, INPROCESS + "://"):
        return INPROCESS
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep else ""


def line_name(url: str | None) -> str | None:
    """The serial line a device at ``url`` is on, as devices sharing it name it: its port's
    :func:`~regdev.devices._serial.port_state_id` (``serial:/dev/ttyUSB0``, a link resolved),
    for regdev's serial protocol on a device path and for Modbus RTU on any port; None for a
    device reached over the network (``socket://``, ``rfc2217://``, ``modbus+tcp://``) or in
    process, which needs no owner of a line.

    Raises:
        TransportError: a Modbus URL that is malformed.
    """
    scheme = url_scheme(url)
    assert url is not None or scheme == INPROCESS
    if scheme == "modbus+rtu":
        return port_state_id(parse_modbus_url(url or "").port)
    if scheme == "":
        return port_state_id(url or "")
    return None


def open_device(url: str | None = None, *, regmap: RegisterMap | None = None,
                timeout: float | None = None, baudrate: int | None = None,
                lines: dict[str, SharedLine] | None = None, **options: Any) -> Device:
    """Open the device at ``url`` with the register map ``regmap``: the one table of URL
    schemes (:data:`SCHEMES`, in the module's docstring) that the command line's ``--port``
    uses too. The device is a context manager: ``with open_device(url) as device: ...``
    closes it.

    Args:
        url: where the device is: None or ``"inprocess"`` for an in-process
            :class:`~regdev.RegisterFile`; a serial port path (``/dev/ttyUSB0``, ``COM3``),
            ``socket://HOST:PORT``, ``rfc2217://HOST:PORT`` or ``loop://`` for a
            :class:`~regdev.SerialDevice`; ``modbus+tcp://HOST:PORT?unit=1`` or
            ``modbus+rtu://PORT?baud=19200&unit=1`` for a :class:`~regdev.ModbusDevice`.
        regmap: the device's register map; None for the default map (16 unnamed read-write
            registers of 8 bits, reset 0).
        timeout: seconds to wait for each reply, 0.001..86400; None: 0.5. Not in process.
        baudrate: line speed in baud; None: 115200 for a serial device, the URL's (else
            19200) for Modbus RTU; ignored by ``socket://`` and ``modbus+tcp://``. Not in
            process.
        lines: the serial lines open so far, by :func:`line_name`: a device on one of them
            joins it (one port, one transaction at a time on the line), a device on a new
            one adds it; the port is then opened at the first transaction
            (:meth:`SharedLine.open` opens it sooner). None: every device opens its own port.
        **options: the backend's other keyword arguments (``flush_before_request``,
            ``retries``, ``first_seq``; ``count``, ``first_tid``), as its class takes them.

    Returns:
        The open device; close it (or use it in a ``with`` block) when done.

    Raises:
        ValueError: an option is out of range or not the backend's (an in-process device
            takes no ``timeout`` nor ``baudrate``).
        TransportError: the URL is malformed, its scheme is unknown (the message lists the
            forms above), or the port or connection cannot be opened.
    """
    scheme = url_scheme(url)
    opener: _Opener = SCHEMES.get(scheme, _serial)  # pyserial knows a few more, and words the rest
    name = line_name(url) if lines is not None else None
    if name is not None:
        assert lines is not None
        options["line"] = lines.setdefault(name, SharedLine(name))
    try:
        return opener(url or INPROCESS, regmap=regmap, timeout=timeout, baudrate=baudrate,
                      **options)
    except TypeError as error:  # an option the backend does not take
        raise ValueError(str(error)) from None
