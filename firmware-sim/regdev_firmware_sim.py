"""regdev firmware simulator: the device side of the wire protocol, on a pty or a TCP port.

It answers the frames of ``docs/protocol.md`` from the same register model regdev runs in
process (by default 16 registers of 8 bits, reset value 0; with ``--map FILE`` the registers
of a register map, with their reset values, read-only and reserved bits, write-1-to-clear and
clear-on-read), through the same codec (``regdev.devices._protocol``, used here in its
``DEVICE`` role), with seeded fault injection::

    regdev firmware-sim --pty                       # prints e.g. /dev/pts/7, then serves
    regdev firmware-sim --tcp 127.0.0.1:0           # prints e.g. socket://127.0.0.1:40521
    regdev firmware-sim --modbus-tcp 127.0.0.1:0    # Modbus TCP (regdev_modbus_sim.py, pymodbus)
    regdev firmware-sim --modbus-rtu --pty          # Modbus RTU on a pty
    regdev firmware-sim --modbus-tcp 127.0.0.1:0 --map examples/sensor.rdl   # a map, Modbus
    regdev firmware-sim --tcp 127.0.0.1:0 --map examples/sensor.rdl
    python firmware-sim/regdev_firmware_sim.py --pty --fault drop=0.05 --seed 7
    python firmware-sim/regdev_firmware_sim.py --pty --map sensor.json
    regdev firmware-sim --avr                       # the C firmware's Uno image, in simavr

Run as a script it reads a map only in the compiled JSON form (``regdev map FILE --json``),
which needs nothing beyond the standard library; ``regdev firmware-sim --map FILE`` also
reads SystemRDL, compiling it first.

``--avr`` does not run this simulator: it builds the C firmware of ``firmware-sim/c/`` if
needed (``make sim``: avr-gcc, avr-libc and simavr's development files) and becomes its simavr
harness, which runs the ATmega328P image you would flash on an Arduino Uno, in real time, with
its USART0 on a pty (docs/firmware.md). It takes ``--link``, ``-v``, ``--map`` (the image is
then built with that register map, in a build folder of its own; builds go to the user's
cache folder, :func:`avr_cache`, never beside the sources), ``--eeprom FILE`` (the
board's EEPROM, where the firmware keeps its id and start count, kept in FILE so that a restart
is a power cycle of the same board) and, with ``--eeprom``, ``--device-id`` (8 upper-case hex
digits, the id a new FILE's board gets; else a random one); faults, ``--no-extension``,
``--identity`` and ``--plain-identify`` belong to this simulator only.

The first line of standard output is the port to open (flushed); the simulator then serves
until interrupted (Ctrl-C or SIGTERM exit 0 quietly). ``-v`` logs each frame on stderr. When
the port cannot be set up (an address that cannot be listened on, a ``--link`` that cannot be
made, or whose path something already holds: the simulator replaces or removes only the link
it made itself) or its line cannot be written (standard output full or closed), it serves
nothing: one line on stderr and exit status 2.

It runs without regdev installed: the codec, errors and register modules import only the
standard library, so when run as a script it loads them from the ``src/regdev`` beside it,
under a private package name (``_regdev_sim``), without executing ``regdev/__init__.py``
(which needs regdev's dependencies) and without putting anything named ``regdev`` in
``sys.modules``. Imported as a module (as ``regdev firmware-sim`` and the tests do), it uses
the installed regdev.

It says who it is and when it last started over, as ``docs/protocol.md`` describes: its
identify reply ends with ``id=ID epoch=EPOCH``. The id is ``--device-id`` (by default 8
random hex digits drawn at start: a new device each run, unless given); the epoch is drawn at
start and again at every reset (``Z``), so a restart of the simulator is a power cycle that a
host sees. It says which register map it serves too: ``I 01`` is answered ``map=DIGEST NAME``
(the map's digest, which a host compares with its own map's). ``--plain-identify`` answers the
description alone, and ``I 01`` with ``e SYNTAX``, as a device that cannot say (protocol 1
without the extension).

Over TCP it serves one client at a time: a connection made while another is served is closed
at once, unread, so a request sent on it never runs later.

Faults apply to the replies to requests, one fault at most per reply, drawn from a
``random.Random(seed)`` so a run can be repeated:

==========  ===============================================================================
drop        one byte of the reply is lost
corrupt     one byte of the reply is changed
delay       the reply is sent ``--delay`` seconds late (beyond the host's timeout)
garbage     1..20 random bytes are sent before the reply (between frames)
disconnect  the link is cut instead of replying (TCP: the client socket is closed; pty: a
            new pty replaces the old one, at the ``--link`` path)
busy        the device answers ``e BUSY`` and does not execute the request
==========  ===============================================================================

A request is executed before its reply is faulted (except ``busy``): a write whose
acknowledgement is lost has happened, as on real hardware. Frames that are not requests (a
reply, such as the device's own echo) are dropped without an answer, by the codec.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib
import importlib.util
import json
import math
import os
import random
import re
import secrets
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

#: The modules of regdev the simulator runs on (each imports only the standard library).
NEEDED = ("devices._protocol", "devices._device", "devices._regmap", "devices._values",
          "core._errors", "core._text")


def _source_file(source: Path, name: str) -> Path:
    """The file of regdev module ``name`` (``devices._device``) under ``source``: the module's
    own, or a package's ``__init__.py`` (the codec, ``devices._protocol``, is a package)."""
    path = source / name.replace(".", "/")
    return path / "__init__.py" if name == "devices._protocol" else path.with_suffix(".py")


def _standalone_modules() -> tuple[types.ModuleType, ...]:
    """regdev's codec, register and error modules, for this file run as a script.

    From ``src/regdev`` beside this file, under the private package name ``_regdev_sim`` (so
    regdev need not be installed, and an installed regdev is left alone); else from an
    installed regdev; else one line on stderr naming the files needed, and exit status 2.
    """
    source = Path(__file__).resolve().parent.parent / "src" / "regdev"
    if all(_source_file(source, name).is_file() for name in NEEDED):
        package = types.ModuleType("_regdev_sim", "regdev's stdlib-only modules, for the simulator")
        package.__path__ = [str(source)]
        sys.modules[package.__name__] = package
        return tuple(importlib.import_module(f"_regdev_sim.{name}") for name in NEEDED)
    try:
        return tuple(importlib.import_module(f"regdev.{name}") for name in NEEDED)
    except ImportError:
        files = ", ".join(f"src/regdev/{_source_file(Path(), name)}" for name in NEEDED)
        print(f"{Path(sys.argv[0]).name}: error: the simulator needs regdev's {files}: run it "
              "from a regdev source tree (firmware-sim/ beside src/), or install regdev",
              file=sys.stderr)
        raise SystemExit(2) from None


if TYPE_CHECKING or __name__ != "__main__":
    import regdev.devices._protocol as wire
    from regdev.core._errors import (
        LocalProtocolError,
        MapError,
        RegisterRangeError,
        RemoteProtocolError,
    )
    from regdev.core._text import display_text, escape_text, unicode_problem
    from regdev.devices._device import REGISTER_COUNT, RegisterFile
    from regdev.devices._regmap import RegisterMap
else:  # run as a script: regdev need not be installed
    wire, _device, _regmap, _values, _errors, _text = _standalone_modules()
    display_text, unicode_problem = _text.display_text, _text.unicode_problem
    escape_text = _text.escape_text
    RegisterFile, RegisterMap = _device.RegisterFile, _regmap.RegisterMap
    REGISTER_COUNT = _device.REGISTER_COUNT
    LocalProtocolError = _errors.LocalProtocolError
    MapError = _errors.MapError
    RegisterRangeError = _errors.RegisterRangeError
    RemoteProtocolError = _errors.RemoteProtocolError

__all__ = ["FAULT_KINDS", "IDENTITY", "Faults", "Firmware", "main", "serve"]

#: The C firmware (its Makefile, sources and simavr harness), for ``--avr``.
FIRMWARE_C = Path(__file__).resolve().parent / "c"
#: What ``--avr`` needs on PATH, and the Debian/Ubuntu packages that give it.
AVR_TOOLS = ("make", "cc", "avr-gcc", "avr-objcopy")
AVR_PACKAGES = "gcc-avr avr-libc binutils-avr libsimavr-dev libelf-dev"
#: The description the simulator's identify text starts with (``id=`` and ``epoch=`` follow).
IDENTITY = "regdev sim"
#: Fault kinds, in the order their rates are drawn for each reply.
FAULT_KINDS = ("drop", "corrupt", "delay", "garbage", "disconnect", "busy")
#: Longest ``--delay``, in seconds.
MAX_DELAY = 3600.0
_GARBAGE = b"$\n\r*0123456789ABCDEFWRwrez \x00\x7f\xff"


class Firmware:
    """The device's request handler: one request in, its reply out, over a register file.

    Args:
        registers: the register model; a fresh :class:`RegisterFile` of ``regmap`` by default.
            Its reset epoch (new at construction and at every reset) is the one said to ``I``.
        identity: the description the identify text starts with (printable ASCII, no ``$``
            or ``*``; with ``plain``, the whole text, 1..48 characters).
        device_id: the id said to ``I``, 1..16 of ``0-9A-Z``; by default 8 random hex digits.
        plain: answer ``I`` with ``identity`` alone, as a device that cannot say its id and
            epoch (nor its map: ``I 01`` is answered ``e SYNTAX``).
        regmap: the register map of the default register file (the default map when None).
        extension: answer the protocol extension's frames (``G``, ``P``, ``M`` and ``D AA``);
            False answers them ``e SYNTAX``, as a device of protocol 1 alone (the C firmware).

    Raises:
        LocalProtocolError: the identify text would not fit a frame, or the id is malformed.
    """

    def __init__(self, registers: RegisterFile | None = None, identity: str = IDENTITY, *,
                 device_id: str | None = None, plain: bool = False,
                 regmap: RegisterMap | None = None, extension: bool = True) -> None:
        self.extension = extension
        self.registers = registers if registers is not None else RegisterFile(regmap=regmap)
        self.regmap = self.registers.regmap
        self.identity = identity
        self.device_id = device_id if device_id is not None else secrets.token_hex(4).upper()
        self.plain = plain
        wire.encode(wire.IdentifyReply(1, self.identify_text()))  # it fits, or raises

    def identify_text(self) -> str:
        """The text answered to ``I`` now: ``identity``, and unless ``plain``, `` id=ID
        epoch=EPOCH`` with the register file's current epoch."""
        if self.plain:
            return self.identity
        epoch = self.registers.identity().epoch
        assert epoch is not None  # a RegisterFile always has one
        return wire.identify_text(self.identity, self.device_id, epoch)

    def answer(self, request: wire.Request) -> wire.Reply:
        """The reply to ``request``: its acknowledgement; ``e ADDR`` for an address that is no
        register (any of a block's); ``e DATA`` for a value the register refuses (a write to
        a read-only register, a reserved bit set). A refused request changes nothing."""
        regs, regmap, seq = self.registers, self.regmap, request.seq
        if not self.extension and (
                isinstance(request, (wire.ReadBlockRequest, wire.WriteBlockRequest,
                                     wire.MaskedWriteRequest))
                or (isinstance(request, wire.DumpRequest) and request.addr)):
            return wire.ErrorReply(seq, "SYNTAX")  # a frame protocol 1 alone cannot read
        match request:
            case wire.IdentifyRequest(page=wire.MAP_PAGE):
                if self.plain:  # a device that cannot say
                    return wire.ErrorReply(seq, "SYNTAX")
                return wire.IdentifyReply(seq, wire.map_text(regmap.digest(), regmap.name))
            case wire.IdentifyRequest():
                return wire.IdentifyReply(seq, self.identify_text())
            case wire.ResetRequest():
                regs.reset()
                return wire.ResetReply(seq)
            case wire.DumpRequest(addr=start):
                held = dict(zip(regmap.addresses, regs.snapshot(), strict=True))
                return wire.DumpReply(
                    seq, tuple(held.get(a, 0) for a in range(start, start + 16)), start)
        addr: int = request.addr
        count = {wire.ReadBlockRequest: getattr(request, "count", 1),
                 wire.WriteBlockRequest: len(getattr(request, "values", ()))
                 }.get(type(request), 1)
        if any(regmap.at(each) is None for each in range(addr, addr + count)):
            return wire.ErrorReply(seq, "ADDR")
        try:
            match request:
                case wire.ReadRequest():
                    return wire.ReadReply(seq, addr, regs.read(addr))
                case wire.WriteRequest(data=data):
                    return wire.WriteReply(seq, addr, regs.write(addr, data))
                case wire.ReadBlockRequest(count=count):
                    return wire.ReadBlockReply(seq, addr, tuple(regs.read_block(addr, count)))
                case wire.WriteBlockRequest(values=values):
                    return wire.WriteBlockReply(seq, addr, tuple(regs.write_block(addr, values)))
                case wire.MaskedWriteRequest(mask=mask, data=data):
                    return wire.MaskedWriteReply(seq, addr, regs.write_masked(addr, mask, data))
        except RegisterRangeError:
            return wire.ErrorReply(seq, "DATA")
        raise AssertionError(f"not a request: {request!r}")  # pragma: no cover


class Faults:
    """Seeded fault injection on replies.

    Args:
        rates: probability (0..1) per reply of each kind in :data:`FAULT_KINDS`.
        seed: seed of the ``random.Random`` that draws faults and their details.
        after: replies sent clean before any fault.
        count: most faults injected, then clean again; None for no limit.
        delay: seconds a ``delay`` fault holds the reply back, 0..:data:`MAX_DELAY`.

    Raises:
        ValueError: an unknown kind, a rate outside 0..1, a negative ``after`` or ``count``,
            or a ``delay`` that is not a finite number in 0..:data:`MAX_DELAY`.
    """

    def __init__(self, rates: dict[str, float] | None = None, *, seed: int = 0, after: int = 0,
                 count: int | None = None, delay: float = 1.0) -> None:
        rates = dict(rates or {})
        for kind, rate in rates.items():
            if kind not in FAULT_KINDS:
                raise ValueError(f"unknown fault `{kind}`; expected one of "
                                 f"{', '.join(FAULT_KINDS)}")
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"fault rate for `{kind}` must be in 0..1, got {rate}")
        if after < 0 or (count is not None and count < 0):
            raise ValueError("--fault-after and --fault-count must be >= 0")
        if not math.isfinite(delay) or not 0 <= delay <= MAX_DELAY:
            raise ValueError(f"--delay must be a number of seconds in 0..{MAX_DELAY:g}, "
                             f"got {delay}")
        self.rates = rates
        self.random = random.Random(seed)
        self.after = after
        self.count = count
        self.delay = delay
        self.replies = 0
        #: Faults injected so far, by kind.
        self.injected: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)

    def pick(self) -> str | None:
        """Draw the fault for the next reply, or None for a clean one."""
        self.replies += 1
        draws = [(kind, self.random.random()) for kind in FAULT_KINDS]
        if self.replies <= self.after or self.count == sum(self.injected.values()):
            return None
        for kind, draw in draws:
            if draw < self.rates.get(kind, 0.0):
                self.injected[kind] += 1
                return kind
        return None

    def damage(self, kind: str, data: bytes) -> bytes:
        """The reply bytes as a ``drop``, ``corrupt`` or ``garbage`` fault sends them."""
        rng = self.random
        if kind == "drop":
            at = rng.randrange(len(data))
            return data[:at] + data[at + 1:]
        if kind == "corrupt":
            at = rng.randrange(len(data))
            byte = (data[at] + rng.randrange(1, 256)) % 256
            return data[:at] + bytes([byte]) + data[at + 1:]
        if kind == "garbage":
            noise = bytes(rng.choice(_GARBAGE) for _ in range(rng.randint(1, 20)))
            return noise + data
        return data


class Disconnect(Exception):
    """A ``disconnect`` fault: the link is to be cut instead of replying."""


class CannotServe(Exception):
    """The port cannot be set up or announced (the message says why, in the OS's words)."""


def _reason(error: OSError) -> str:
    """The OS's text for ``error`` (its strerror), without errno number or Python wording.

    ``socket.create_server`` re-raises a failed bind with the address appended to strerror;
    the original error is its ``__context__``.
    """
    original = error.__context__ if isinstance(error.__context__, OSError) else error
    return original.strerror or str(original)


class Line(Protocol):
    """The byte stream to the host: a pty master or a TCP client socket."""

    def read(self) -> bytes:
        """Block for the next bytes from the host; b"" when the host hung up."""

    def write(self, data: bytes) -> None:
        """Send bytes to the host."""


def serve(line: Line, firmware: Firmware, faults: Faults,
          log: Callable[[str], None] | None = None) -> None:
    """Answer requests on ``line`` until the host hangs up.

    Frames it cannot read are answered ``e CKSUM`` or ``e SYNTAX`` (with their sequence
    number, or 0), as ``docs/protocol.md`` says.

    Raises:
        Disconnect: a ``disconnect`` fault fired: the caller cuts the link.
        OSError: the line failed.
    """
    link = wire.Connection(wire.DEVICE)
    while True:
        data = line.read()
        if not data:
            return
        try:
            link.receive_data(data)
        except RemoteProtocolError as error:
            _send(line, link, wire.ErrorReply(0, error.code), log, error)
        while True:
            try:
                request = link.next_event()
            except RemoteProtocolError as error:
                _send(line, link, wire.ErrorReply(error.seq or 0, error.code), log, error)
                continue
            if request is wire.NEED_DATA:
                break
            assert isinstance(request, wire.Request)
            if log:
                log(f"<- {wire.encode(request)!r}")
            fault = faults.pick()
            reply = (wire.ErrorReply(request.seq, "BUSY") if fault == "busy"
                     else firmware.answer(request))
            out = link.send(reply)
            if fault == "disconnect":
                if log:
                    log("   fault: disconnect")
                raise Disconnect
            if fault == "delay":
                time.sleep(faults.delay)
            elif fault is not None:
                out = faults.damage(fault, out)
            if log:
                log(f"-> {out!r}" + (f"  (fault: {fault})" if fault else ""))
            line.write(out)


def _send(line: Line, link: wire.Connection, reply: wire.ErrorReply,
          log: Callable[[str], None] | None, error: RemoteProtocolError) -> None:
    out = link.send(reply)
    if log:
        log(f"<- bad frame: {error}\n-> {out!r}")
    line.write(out)


# --- the two ways to reach it ---------------------------------------------------------------------


class _FdLine:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self) -> bytes:
        return os.read(self.fd, 256)

    def write(self, data: bytes) -> None:
        while data:
            data = data[os.write(self.fd, data):]


class _SocketLine:
    """A TCP client; while it is served, other clients are accepted and closed at once."""

    def __init__(self, sock: socket.socket, server: socket.socket,
                 log: Callable[[str], None] | None) -> None:
        self.sock = sock
        self.server = server
        self.log = log

    def read(self) -> bytes:
        while True:
            try:
                ready, _, _ = select.select([self.sock, self.server], [], [])
            except ValueError:  # a socket was closed under us (the server is shutting down)
                raise OSError("the server socket was closed") from None
            if self.server in ready:
                self._turn_away()
            if self.sock in ready:
                try:
                    return self.sock.recv(256)
                except ConnectionError:
                    return b""

    def _turn_away(self) -> None:
        """Close a second client unread: one host at a time, and nothing it sent runs."""
        extra, address = self.server.accept()
        extra.close()
        if self.log:
            self.log(f"   closed a second connection from {address[0]}:{address[1]} (busy)")

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)


def _what_is(st: os.stat_result, path: Path) -> str:
    """What the file at ``path`` is, in words: ``a regular file``, ``a symlink to /dev/pts/3``."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        try:
            return f"a symlink to {os.readlink(path)}"
        except OSError:
            return "a symlink"
    kinds = [(stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket")]
    return next((words for test, words in kinds if test(mode)), "a file")


class _Link:
    """The symlink at ``--link PATH``: made by this simulator, and only then touched by it.

    The simulator never deletes or replaces what it did not create. The link is made only
    where nothing is (an existing file, device node, directory or symlink, a stale link of
    an earlier run included, is refused with :class:`CannotServe`). It knows its own link
    by what it made: the link's device and inode numbers and its target, the pty this
    simulator opened (a symlink to that same pty that someone else put there under the same
    inode number cannot be told apart, and is harmless to remove: the pty closes with the
    simulator). A new pty (the ``disconnect`` fault) replaces the link only while
    that is still what is at PATH, and at exit the link is removed only then; anything put
    there meanwhile is left alone. The new link is made under a fresh name beside PATH
    (``os.symlink`` refuses an existing name, so nothing is overwritten) and renamed over
    the old one, so a host opening PATH always finds a link.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._made: tuple[int, int, str] | None = None  # (st_dev, st_ino, target)

    def point_at(self, target: str) -> None:
        """Make the link to ``target``, or move this simulator's own link there.

        Raises:
            CannotServe: something this simulator did not make is at PATH, or the link
                cannot be made (the OS's reason).
        """
        if self._made is not None and self._is_ours():
            self._replace(target)
        else:  # where nothing is: the first time, or the link was removed meanwhile
            self._make(target)
        st = os.lstat(self.path)
        self._made = (st.st_dev, st.st_ino, target)

    def remove(self) -> None:
        """Remove the link if it is still the one this simulator made; else leave PATH be."""
        if self._made is not None and self._is_ours():
            with contextlib.suppress(OSError):  # gone meanwhile, or the folder is read-only
                os.unlink(self.path)
        self._made = None

    def _make(self, target: str) -> None:
        try:
            os.symlink(target, self.path)
        except FileExistsError:
            try:
                there = _what_is(os.lstat(self.path), self.path)
            except OSError:
                there = "a file"
            if self._made is not None:
                raise CannotServe(f"the link {self.path} was replaced while serving ({there} "
                                  "is there now); the simulator leaves it alone") from None
            raise CannotServe(
                f"cannot make the link {self.path}: {there} is already there (the simulator "
                "replaces only a link it made itself; remove it or choose another path)"
            ) from None
        except OSError as error:
            raise CannotServe(f"cannot make the link {self.path}: {_reason(error)}") from None

    def _replace(self, target: str) -> None:
        temporary = self._fresh_link(target)
        try:
            if not self._is_ours():  # something else was put at PATH since the last check
                raise CannotServe(f"the link {self.path} was replaced while serving; the "
                                  "simulator leaves it alone")
            os.replace(temporary, self.path)
        except OSError as error:
            raise CannotServe(f"cannot move the link {self.path}: {_reason(error)}") from None
        finally:
            if os.path.lexists(temporary):
                os.unlink(temporary)  # ours: made just above, under a name nobody had

    def _fresh_link(self, target: str) -> Path:
        """A new symlink to ``target`` beside PATH, under a name nothing had."""
        for attempt in range(100):
            candidate = self.path.with_name(f".{self.path.name}.{os.getpid()}.{attempt}.new")
            try:
                os.symlink(target, candidate)
            except FileExistsError:
                continue
            except OSError as error:
                raise CannotServe(f"cannot move the link {self.path}: "
                                  f"{_reason(error)}") from None
            return candidate
        raise CannotServe(f"cannot move the link {self.path}: no free name beside it")

    def _is_ours(self) -> bool:
        """PATH is still the link this simulator made."""
        try:
            st = os.lstat(self.path)
            target = os.readlink(self.path) if stat.S_ISLNK(st.st_mode) else None
        except OSError:
            return False
        return self._made == (st.st_dev, st.st_ino, target)


class _Pty:
    """A pseudo-terminal in raw mode; its slave end is the port the host opens."""

    def __init__(self, link: _Link | None) -> None:
        import tty  # noqa: PLC0415 - POSIX only; imported here so --tcp works everywhere

        try:
            self.master, self.slave = os.openpty()
        except OSError as error:
            raise CannotServe(f"cannot open a pseudo-terminal: {_reason(error)}") from None
        try:
            tty.setraw(self.slave)  # no echo, no CR/LF translation, whoever opens it
            self.path = os.ttyname(self.slave)
            if link is not None:
                link.point_at(self.path)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        os.close(self.master)
        os.close(self.slave)


def serve_pty(firmware: Firmware, faults: Faults, *, link: Path | None,
              announce: Callable[[str], None], log: Callable[[str], None] | None) -> None:
    """Serve on a new pty until interrupted; announce its path (or ``link``) first.

    ``link`` is made only where nothing is, and replaced or removed only while it is still
    the link made here (see :class:`_Link`): the simulator never deletes what it did not
    create.

    Raises:
        CannotServe: no pty, or the link cannot be made: something is already at ``link``
            (``announce`` may raise it too).
    """
    own_link = _Link(link) if link is not None else None
    pty = _Pty(own_link)
    try:
        announce(str(link) if link is not None else pty.path)
        while True:
            try:
                serve(_FdLine(pty.master), firmware, faults, log)
                return
            except Disconnect:
                # Like a USB adapter unplugged and plugged back: the old port dies, a new
                # one appears under the same stable name (the link), registers intact.
                old, pty = pty, _Pty(own_link)
                old.close()
    finally:
        pty.close()
        if own_link is not None:
            own_link.remove()


def serve_tcp(firmware: Firmware, faults: Faults, *, host: str, port: int,
              announce: Callable[[str], None], log: Callable[[str], None] | None,
              ready: Callable[[socket.socket], None] | None = None) -> None:
    """Serve one client at a time on ``host:port`` until interrupted; announce its URL first.

    A client that connects while another is served is closed at once, unread (a TCP port has
    no exclusive open; this is how the device side keeps to one host).

    Raises:
        CannotServe: the address cannot be listened on (``announce`` may raise it too).
    """
    try:
        server = socket.create_server((host, port))
    except OSError as error:
        where = f"[{host}]" if ":" in host else host
        raise CannotServe(f"cannot listen on {where}:{port}: {_reason(error)}") from None
    with server:
        bound_host, bound_port = server.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        announce(f"socket://{shown}:{bound_port}")
        if ready is not None:
            ready(server)
        while True:
            client, _ = server.accept()
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with client:
                try:
                    serve(_SocketLine(client, server, log), firmware, faults, log)
                except Disconnect:
                    pass
                except OSError:
                    pass  # the client went away mid-reply; wait for the next


# --- command line ---------------------------------------------------------------------------------


def _fault_rates(text: str) -> dict[str, float]:
    rates = {}
    for item in text.split(","):
        kind, sep, rate = item.partition("=")
        try:
            value = float(rate)
        except ValueError:
            value = -1.0
        if not sep or kind not in FAULT_KINDS or not 0.0 <= value <= 1.0:
            raise argparse.ArgumentTypeError(
                f"expected KIND=RATE with KIND one of {', '.join(FAULT_KINDS)} and RATE in "
                f"0..1, got `{display_text(item)}`")
        rates[kind] = value
    return rates


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError("expected HOST:PORT (e.g. 127.0.0.1:0), got "
                                         f"`{display_text(text)}`")
    return host.strip("[]") or "127.0.0.1", int(port)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The simulator's command-line parser."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="The device side of regdev's serial protocol (docs/protocol.md), served "
                    "on a pseudo-terminal or a TCP port, with seeded fault injection; or the "
                    "same registers as a Modbus TCP or RTU device on pymodbus's server "
                    "(--modbus-tcp, --modbus-rtu; docs/modbus.md). The "
                    "first line of standard output is the port to open; then it serves "
                    "until interrupted.",
        epilog="Example: --pty --fault drop=0.05,corrupt=0.02 --seed 7. Fault kinds: "
               + ", ".join(FAULT_KINDS) + ".")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--pty", action="store_true",
                       help="serve on a new pseudo-terminal; prints its path (POSIX only)")
    where.add_argument("--tcp", metavar="HOST:PORT", type=_host_port,
                       help="serve on a TCP port (0 picks a free one); prints socket://HOST:PORT")
    where.add_argument("--avr", action="store_true",
                       help="run the C firmware's ATmega328P (Arduino Uno) image in simavr on a "
                            "new pseudo-terminal instead, building it first if needed (make, "
                            "avr-gcc, simavr: docs/firmware.md); prints the pty's path; takes "
                            "--link, -v, --map, --eeprom and --device-id, not faults, "
                            "--identity, --plain-identify or --no-extension")
    where.add_argument("--modbus-tcp", metavar="HOST:PORT", type=_host_port,
                       help="serve the registers as a Modbus TCP device (pymodbus's server; "
                            "needs pip install 'regdev[modbus]'); prints "
                            "modbus+tcp://HOST:PORT")
    parser.add_argument("--modbus-rtu", action="store_true",
                        help="with --pty or --tcp: serve the registers as a Modbus RTU device "
                             "(pymodbus's server) instead of regdev's protocol; open it as "
                             "modbus+rtu://PORT (docs/modbus.md)")
    parser.add_argument("--registers", type=int, default=REGISTER_COUNT, metavar="N",
                        help=f"with --modbus-*: holding registers served ({REGISTER_COUNT})")
    parser.add_argument("--base", type=int, default=0, metavar="ADDRESS",
                        help="with --modbus-*: the holding register of register 0 (0)")
    parser.add_argument("--link", metavar="PATH", type=Path,
                        help="with --pty or --avr: keep a symlink to the pty at PATH and print "
                             "PATH; needed for the disconnect fault, which replaces the pty. "
                             "Nothing may be at PATH: the simulator replaces or removes only "
                             "the link it made")
    parser.add_argument("--fault", metavar="KIND=RATE", type=_fault_rates, action="append",
                        default=[], help="inject a fault in this fraction (0..1) of replies; "
                                         "repeat or separate with commas")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault draws (0)")
    parser.add_argument("--delay", type=float, default=1.0, metavar="SECONDS",
                        help="how late a delay fault sends the reply, in seconds (1.0)")
    parser.add_argument("--fault-after", type=int, default=0, metavar="N",
                        help="send the first N replies clean (0)")
    parser.add_argument("--fault-count", type=int, default=None, metavar="N",
                        help="inject at most N faults, then run clean (no limit)")
    parser.add_argument("--map", metavar="FILE", type=Path,
                        help="serve the registers of this register map: regdev firmware-sim "
                             "reads SystemRDL (.rdl) or its compiled JSON form; this file run "
                             "as a script reads the JSON form alone (make it with regdev map "
                             "FILE.rdl --json -o FILE.json); default: 16 read-write registers, "
                             "reset 0; with --avr, the C firmware is built with it; with "
                             "--modbus-*, as holding registers from --base")
    parser.add_argument("--no-extension", action="store_true",
                        help="answer the block and masked-write frames (G, P, M and D AA) "
                             "e SYNTAX, as a device of protocol 1 alone")
    parser.add_argument("--identity", default=IDENTITY, metavar="TEXT",
                        help="the description that starts the identify text, before its id "
                             f"and epoch (default: {IDENTITY!r})")
    parser.add_argument("--device-id", metavar="ID",
                        help="the id said in the identify reply, 1..16 of 0-9 and A-Z, kept "
                             "across resets; give the same one to a restarted simulator to "
                             "model a power-cycled device (default: 8 random hex digits)")
    parser.add_argument("--eeprom", metavar="FILE", type=Path,
                        help="with --avr: keep the board's EEPROM (its id and start count) in "
                             "FILE, so that a restart is a power cycle of the same board: same "
                             "id, a new epoch (default: a new board with a random id each "
                             "run); a new FILE's board gets --device-id (with --avr: 8 hex "
                             "digits 0-9 A-F), else 8 random ones")
    parser.add_argument("--bus-fault", metavar="KIND", choices=BUS_FAULTS,
                        help="with --avr and a map with a bus (a bridge): the simulated chip "
                             "misbehaves for the whole run: on I2C "
                             f"{', '.join(CHIP_FAULTS['i2c'])}; on SPI "
                             f"{', '.join(CHIP_FAULTS['spi'])} (docs/firmware.md, \"Bus "
                             "errors\", \"SPI errors\")")
    parser.add_argument("--plain-identify", action="store_true",
                        help="answer identify with the description alone, as a device that "
                             "cannot say its id and reset epoch (then regdev replays no "
                             "idempotency key to it)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log every frame in and out on stderr")
    return parser


def load_map(path: Path) -> RegisterMap:
    """The register map in the compiled JSON form at ``path``.

    Raises:
        MapError: the file cannot be read or is not such a map (one line naming it; a file
            that is not JSON, SystemRDL included, is told how to get the JSON form).
    """
    try:
        text = path.read_bytes()
    except OSError as error:
        raise MapError(f"cannot read {path}: {error.strerror or error}") from None
    if path.suffix.lower() == ".rdl":
        raise MapError(f"{path} is SystemRDL: run as a script, the simulator reads a map only "
                       f"in its compiled JSON form; make it with `regdev map {path} --json -o "
                       f"{path.with_suffix('.json')}`, or serve the map with `regdev "
                       f"firmware-sim --map {path}`")
    compile_it = ("the simulator run as a script reads a map in its compiled JSON form, made "
                  "from SystemRDL by `regdev map FILE.rdl --json -o FILE.json`")
    # Decoded here with the standard library (regdev's strict decoder is msgspec's, which a
    # script run on the standard library alone does not have), as strictly as it can: a key
    # given twice in one object and NaN are refused, as regdev refuses them.
    try:
        # UTF-8 only (json.loads would guess UTF-16 or 32)
        document = json.loads(text.decode("utf-8"), object_pairs_hook=_no_repeats,
                              parse_constant=_no_constant)
    except UnicodeDecodeError as error:  # as regdev says it of any map
        raise MapError(f"{path}: not a map in the compiled JSON form "
                       f"({unicode_problem(error)}); {compile_it}") from None
    except json.JSONDecodeError as error:  # its place, never Python's wording
        raise MapError(f"{path}: not a map in the compiled JSON form (not valid JSON at line "
                       f"{error.lineno}, column {error.colno}); {compile_it}") from None
    except RecursionError:
        raise MapError(f"{path}: not valid JSON: it is nested too deeply") from None
    except ValueError as error:  # _no_repeats, _no_constant, a huge integer
        raise MapError(f"{path}: not valid JSON: {error}") from None
    return RegisterMap.from_dict(document, str(path))


def _no_repeats(pairs: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f'key "{escape_text(key)}" appears twice in one object')
        out[key] = value
    return out


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def serial_refusal(regmap: RegisterMap | None, avr_source: str | None = None) -> str | None:
    """Why regdev's serial protocol cannot serve ``regmap`` (wider registers, other tables,
    addresses past 255), or None. With ``avr_source`` (the map's file, for ``--avr``), the C
    firmware's refusal naming it: the firmware speaks that protocol only, so Modbus, which
    this simulator could serve the map on, is not suggested."""
    problem = regmap.serial_problem() if regmap is not None else None
    if problem is None:
        return None
    if avr_source is not None:
        return f"{avr_source}: the C firmware cannot serve this map: {problem}"
    return (f"the map cannot be served on regdev's serial protocol: {problem} (serve it with "
            "--modbus-tcp or --modbus-rtu)")


def main(argv: Sequence[str] | None = None, prog: str | None = None,
         regmap: RegisterMap | None = None) -> int:
    """Run the simulator; return the exit status (0 when interrupted, 2 on a usage error).

    Args:
        argv: the command line (``sys.argv[1:]`` when None).
        prog: the program's name in messages.
        regmap: the register map to serve (``regdev firmware-sim`` passes the one it read,
            SystemRDL included); None reads ``--map`` (JSON), else the default map.
    """
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if regmap is None and args.map is not None:
        try:
            regmap = load_map(args.map)
        except MapError as error:
            parser.exit(2, f"{parser.prog}: error: {error}\n")
    if not (args.modbus_rtu or args.modbus_tcp is not None):
        refused = serial_refusal(
            regmap, (str(args.map) if args.map is not None else "the map") if args.avr else None)
        if refused is not None:
            parser.exit(2, f"{parser.prog}: error: {refused}\n")
    rates: dict[str, float] = {}
    for group in args.fault:
        rates.update(group)
    if args.avr and args.device_id is not None:  # the Uno's rule, before the simulator's
        if args.eeprom is None:
            parser.error("--device-id with --avr needs --eeprom FILE: a board that keeps its "
                         "id keeps its start count, or a restart says old epochs again")
        if not re.fullmatch(r"[0-9A-F]{8}", args.device_id):
            parser.error("--device-id with --avr: expected 8 upper-case hex digits 0-9 A-F "
                         f"(what the Uno keeps in EEPROM), got {args.device_id!r}")
    try:
        faults = Faults(rates, seed=args.seed, after=args.fault_after, count=args.fault_count,
                        delay=args.delay)
        modbus_map = args.modbus_rtu or args.modbus_tcp is not None
        firmware = Firmware(identity=args.identity, device_id=args.device_id,
                            plain=args.plain_identify,
                            regmap=None if modbus_map else regmap,  # Modbus serves its own
                            extension=not args.no_extension)
    except (ValueError, LocalProtocolError) as error:
        parser.error(str(error))
    if not rates and not args.avr:  # they shape faults: without one they would do nothing
        idle = [option for option, value, default in (
            ("--seed", args.seed, 0), ("--delay", args.delay, 1.0),
            ("--fault-after", args.fault_after, 0), ("--fault-count", args.fault_count, None))
            if value != default]
        if idle:
            parser.error(f"{', '.join(idle)} go{'es' * (len(idle) == 1)} with --fault "
                         "KIND=RATE (without a fault they change nothing)")
    if rates.get("disconnect") and args.pty and args.link is None:
        parser.error("the disconnect fault on --pty needs --link PATH (the pty is replaced, "
                     "and the host reopens it by the link)")
    if args.link is not None and not (args.pty or args.avr):
        parser.error("--link goes with --pty or --avr")
    if args.eeprom is not None and not args.avr:
        parser.error("--eeprom goes with --avr (the Uno's EEPROM)")
    if args.bus_fault is not None and not (args.avr and regmap is not None
                                           and regmap.bus is not None):
        parser.error("--bus-fault goes with --avr and a map whose chip is on a bus "
                     "(a bridge: docs/maps.md)")
    if args.bus_fault is not None and regmap is not None and regmap.bus is not None \
            and args.bus_fault not in CHIP_FAULTS[regmap.bus.kind]:
        kind = regmap.bus.kind
        parser.error(f"--bus-fault {args.bus_fault} is not a fault of a chip on "
                     f"{kind.upper()}, as this map's is; expected one of "
                     f"{', '.join(CHIP_FAULTS[kind])}")
    modbus = args.modbus_rtu or args.modbus_tcp is not None
    if args.modbus_rtu and not (args.pty or args.tcp):
        parser.error("--modbus-rtu goes with --pty or --tcp")
    if not modbus and (args.registers != REGISTER_COUNT or args.base != 0):
        parser.error("--registers and --base go with --modbus-tcp or --modbus-rtu")
    if modbus and regmap is not None and not regmap.is_default \
            and args.registers != REGISTER_COUNT:
        parser.error("--registers and --map: give one (the map says which registers are "
                     "served)")
    if args.avr:
        given = [option for option, value, default in (
            ("--fault", rates, {}), ("--seed", args.seed, 0), ("--delay", args.delay, 1.0),
            ("--fault-after", args.fault_after, 0), ("--fault-count", args.fault_count, None),
            ("--identity", args.identity, IDENTITY),
            ("--plain-identify", args.plain_identify, False),
            ("--no-extension", args.no_extension, False))
            if value != default]
        if given:
            parser.error(f"{', '.join(given)} cannot go with --avr: the C firmware runs as "
                         "built, without faults, with its own identity")
        return run_avr(parser.prog, link=args.link, verbose=args.verbose, eeprom=args.eeprom,
                       device_id=args.device_id, regmap=regmap,
                       source=str(args.map) if args.map is not None else None,
                       bus_fault=args.bus_fault)

    def announce(port: str) -> None:
        """The port on the first line of stdout, flushed: a host waits for it to connect."""
        if sys.stdout is None:  # file descriptor 1 closed (`>&-`)
            raise CannotServe("cannot write the port to standard output: standard output is "
                              "closed")
        try:
            sys.stdout.write(port + "\n")
            sys.stdout.flush()
        except OSError as error:
            _drop_stdout()
            raise CannotServe("cannot write the port to standard output: "
                              f"{_reason(error)}") from None

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def stop(signum: int, frame: types.FrameType | None) -> None:
        raise KeyboardInterrupt

    # Both, explicitly: a shell starting this in the background may have set SIGINT to ignored.
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        if modbus:
            _modbus_module(parser).run_modbus(args, faults, announce,
                                              log if args.verbose else None, regmap=regmap)
        elif args.pty:
            if not hasattr(os, "openpty"):
                parser.error("--pty needs a POSIX system; use --tcp HOST:PORT")
            serve_pty(firmware, faults, link=args.link, announce=announce,
                      log=log if args.verbose else None)
        else:
            host, port = args.tcp
            serve_tcp(firmware, faults, host=host, port=port, announce=announce,
                      log=log if args.verbose else None)
    except KeyboardInterrupt:
        return 0
    except (CannotServe, ValueError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"{parser.prog}: error: {_reason(error)}", file=sys.stderr)
        return 2
    return 0


#: What the Makefile builds for ``make sim`` and what each output is made from (its rules),
#: for telling, without make, whether a build is needed.
_AVR_OUTPUTS = {
    Path("sim/regdev-simavr"): ("sim/harness.c", "avr/eeprom_layout.h", "host/own_file.h",
                                "host/own_link.h"),
    Path("avr/regdev-uno.elf"): ("avr/main.c", "avr/i2c.c", "avr/spi.c",
                                 "avr/eeprom_layout.h", "src/regdev_core.c",
                                 "src/regdev_core.h", "src/regdev_rom.h", "regmap.h"),
}
#: The simulated chip's faults by its bus (the harness's --i2c-fault and --spi-fault), for a
#: bridge's --bus-fault.
CHIP_FAULTS = {"i2c": ("nack-address", "nack-data", "arbitration", "sda-low", "stretch"),
               "spi": ("miso-high", "miso-low", "ignore-writes")}
BUS_FAULTS = (*CHIP_FAULTS["i2c"], *CHIP_FAULTS["spi"])
#: What in make's output says that a tool, header or library is missing (then the packages
#: that give them are named; any other failure is quoted alone).
_MISSING_TOOL = re.compile(r"fatal error: [^:\n]+: No such file or directory|cannot find -l\S+"
                           r"|: (?:command )?not found|\] Error 127$", re.MULTILINE)


def _generator() -> types.ModuleType:
    """``firmware-sim/c/gen_regmap.py``, the C firmware's table generator, as a module (its
    :func:`refusal` and :func:`header`)."""
    name = "regdev_gen_regmap"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, FIRMWARE_C / "gen_regmap.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def avr_refusal(regmap: RegisterMap) -> str | None:
    """Why the C firmware cannot hold ``regmap`` (one phrase, e.g. ``the C firmware holds at
    most 128 registers (one byte of RAM each); this map has 256``), or None when it can: the
    generator's own check (``gen_regmap.py``), asked before anything is built."""
    problem: str | None = _generator().refusal(regmap)
    return problem


def _built(folder: Path, compiled: Path | None) -> bool:
    """True when ``make sim`` in ``folder`` would build nothing: the harness and the image
    exist, are no older than what their rules make them from, and the register table the
    generator would write now is the one there (checked without make or a compiler)."""
    try:
        if (folder / "regmap.h").read_text(encoding="utf-8") != _generator().header(compiled):
            return False
        for output, sources in _AVR_OUTPUTS.items():
            made = (folder / output).stat().st_mtime
            for source in sources:
                where = folder / source if source == "regmap.h" else FIRMWARE_C / source
                if where.stat().st_mtime > made:
                    return False
    except (OSError, UnicodeDecodeError, _generator().MapError):
        return False
    return True


def avr_cache() -> Path:
    """Where ``--avr`` builds: ``$XDG_CACHE_HOME/regdev/firmware-`` and 12 hex digits of the
    SHA-256 of :data:`FIRMWARE_C`'s path, where ``$XDG_CACHE_HOME`` defaults to ``~/.cache``
    and a relative one is ignored (XDG Base Directory Specification). Never beside the
    sources, which may be an installed package's (site-packages); one folder per copy of the
    sources, so that two installations do not take each other's images for built."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(cache) if os.path.isabs(cache) else Path.home() / ".cache"
    digest = hashlib.sha256(str(FIRMWARE_C).encode("utf-8")).hexdigest()[:12]
    return root / "regdev" / f"firmware-{digest}"


def avr_build(build: Path | None = None, regmap: RegisterMap | None = None, *,
              source: str | None = None) -> tuple[Path, Path]:
    """Build the C firmware's Uno image and simavr harness if needed (``make sim``).

    Args:
        build: the build directory (default :func:`avr_cache`; with a map other than the
            default, its ``map-`` and 12 hex digits of the compiled form's SHA-256, where
            that form is written as ``map.json``).
        regmap: the register map the image serves (the default map when None).
        source: how messages name the map (the user's file); default ``the map``.

    Returns:
        The harness and the image (ELF) to give it.

    Raises:
        CannotServe: the C firmware cannot hold the map (:func:`avr_refusal`, naming
            ``source``); a build is needed and a tool is missing (naming the tools and the
            packages); or the build failed (quoting the compiler's last lines, with the
            packages only when a header, library or command was not found).
    """
    named = source if source is not None else "the map"
    folder = build if build is not None else avr_cache()
    compiled = None
    if regmap is not None and not regmap.is_default:
        problem = avr_refusal(regmap)
        if problem is not None:
            raise CannotServe(f"{named}: {problem}")
        text = regmap.to_json()
        if build is None:
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
            folder = avr_cache() / f"map-{digest}"
        compiled = folder / "map.json"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if not compiled.is_file() or compiled.read_text(encoding="utf-8") != text:
                compiled.write_text(text, encoding="utf-8")
        except OSError as error:
            raise CannotServe(f"cannot write {compiled}: {_reason(error)}") from None
    outputs = folder / "sim" / "regdev-simavr", folder / "avr" / "regdev-uno.elf"
    missing = [tool for tool in AVR_TOOLS if shutil.which(tool) is None]
    if missing:
        if _built(folder, compiled):
            return outputs  # nothing to build: the tools are not needed
        raise CannotServe(f"--avr needs {', '.join(missing)} on PATH to build the C firmware "
                          f"(Debian/Ubuntu: apt-get install {AVR_PACKAGES})")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # One build of a folder at a time: two processes starting the same image (two tests,
        # two shells) would otherwise both link it, one reading the other's half-written file.
        with open(folder / ".build-lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            done = subprocess.run(["make", "-s", "-C", str(FIRMWARE_C), f"BUILD={folder}",
                                   f"PYTHON={sys.executable}",
                                   *([f"MAP={compiled}"] if compiled is not None else []),
                                   *(["BUS=1"] if regmap is not None and regmap.bus else []),
                                   "sim"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace",
                                  check=False,
                                  env={**os.environ, "LC_ALL": "C"})  # the tools' plain quotes
    except OSError as error:
        raise CannotServe(f"cannot run make: {_reason(error)}") from None
    if done.returncode != 0:
        raise CannotServe(_build_failure(done.stdout, compiled, named))
    return outputs


def _build_failure(output: str, compiled: Path | None, named: str) -> str:
    """One line for a failed ``make sim``: the last lines of what the tools said, without
    make's own (``make: *** ...``), the generator's prefix, or the build copy of the map
    (named as the user's file); the packages only when something was not found."""
    lines, makes = [], []
    for line in output.splitlines():
        own = re.match(r"make(?:\[\d+\])?: (.*)", line)
        if own is None and line.strip():
            lines.append(line.removeprefix("gen_regmap.py: error: ").strip())
        elif own is not None and not own.group(1).startswith("***"):
            makes.append(own.group(1))  # make's own words: a command it could not run...
    said = " | ".join(lines[-3:] or makes[-1:]) or "make failed without saying why"
    if compiled is not None:
        said = said.replace(str(compiled), named)
    advice = (f" (a tool, header or library is missing: Debian/Ubuntu: apt-get install "
              f"{AVR_PACKAGES})" if _MISSING_TOOL.search(output) else "")
    return f"building the C firmware failed: {display_text(said)}{advice}"


def run_avr(prog: str, *, link: Path | None, verbose: bool, eeprom: Path | None = None,
            device_id: str | None = None, regmap: RegisterMap | None = None,
            source: str | None = None, bus_fault: str | None = None) -> int:
    """Build if needed, then become the simavr harness running the Uno image (``exec``), with
    the board's EEPROM in ``eeprom`` (a new one's id ``device_id``, 8 upper-case hex digits)
    if given, serving ``regmap`` (the default map when None; ``source`` names it in
    messages). The harness runs under the name ``prog``, so its error lines start as this
    program's do. A map with a bus is a bridge's: the harness attaches the simulated chip
    of the same map to the TWI or the SPI, as the map's bus says (its ``--i2c-chip`` or
    ``--spi-chip``), misbehaving as ``bus_fault`` says (one of :data:`CHIP_FAULTS` for that
    bus) when given.

    Returns:
        2 (one line on stderr) when it cannot be built or started; else it does not return.
    """
    try:
        harness, image = avr_build(regmap=regmap, source=source)
    except CannotServe as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    options = [*(["--link", str(link)] if link else []),
               *(["--eeprom", str(eeprom)] if eeprom else []),
               *(["--id", device_id] if device_id else []),
               *(["-v"] if verbose else []),
               *([f"--{regmap.bus.kind}-chip", str(image.parents[1] / "chip.txt")]
                 if regmap is not None and regmap.bus else []),
               *([f"--{regmap.bus.kind}-fault", bus_fault]
                 if bus_fault and regmap is not None and regmap.bus else []), str(image)]
    sys.stdout.flush()
    try:
        os.execv(harness, [prog, *options])
    except OSError as error:
        print(f"{prog}: error: cannot run {harness}: {_reason(error)}", file=sys.stderr)
    return 2


def _modbus_module(parser: argparse.ArgumentParser) -> types.ModuleType:
    """The Modbus simulator (``regdev_modbus_sim.py`` beside this file), which needs pymodbus;
    without it, a usage error naming the install command."""
    sys.modules.setdefault("regdev_firmware_sim", sys.modules[__name__])
    if "regdev_modbus_sim" in sys.modules:
        return sys.modules["regdev_modbus_sim"]
    try:
        import pymodbus  # noqa: F401, PLC0415 - the optional extra, only for --modbus-*
    except ImportError:
        parser.error("the Modbus simulator needs pymodbus: pip install 'regdev[modbus]'")
    path = Path(__file__).resolve().with_name("regdev_modbus_sim.py")
    spec = importlib.util.spec_from_file_location("regdev_modbus_sim", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _drop_stdout() -> None:
    """Point standard output at the null device, so that flushing the text a failed write
    left buffered does not fail again at exit (as regdev's command line does)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no descriptor (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":
    raise SystemExit(main())
