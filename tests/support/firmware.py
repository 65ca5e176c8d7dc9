"""Helpers that run the firmware simulator for the serial tests: in a subprocess or a thread,
and an RFC 2217 server in front of it."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import serial
import serial.rfc2217

import regdev_firmware_sim as sim
from conftest import ROOT
from regdev.devices import _protocol as wire

SIM = ROOT / "firmware-sim" / "regdev_firmware_sim.py"

#: What the simulator answers to identify by default: its description, a random id of 8 hex
#: digits and its reset epoch of 16 (docs/protocol.md).
SIM_IDENTITY = re.compile(re.escape(sim.IDENTITY) + r" id=[0-9A-F]{8} epoch=[0-9A-F]{16}")


def is_sim_identity(text: str) -> bool:
    """Whether ``text`` is what the simulator answers to identify by default."""
    return SIM_IDENTITY.fullmatch(text) is not None


def stop(process: subprocess.Popen[str]) -> None:
    """Stop a simulator process: SIGTERM, then SIGKILL if it has not exited within 30 s (a
    loaded machine can take seconds to run its handler; a test's teardown does not judge
    that, the simulator's own tests of SIGTERM do)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


@contextmanager
def sim_process(*args: str, python: Sequence[str] = (sys.executable,)
                ) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Run the simulator script in another process; yield (the port it printed, the process).

    Waits for the first line of its standard output (no sleeps), and stops it on exit.
    """
    process = subprocess.Popen([*python, str(SIM), *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    try:
        port = process.stdout.readline().strip()
        if not port:
            process.wait(timeout=5)
            raise AssertionError(f"the simulator printed no port: {process.stderr.read()}")
        yield port, process
    finally:
        stop(process)
        process.stdout.close()
        process.stderr.close()


class CountingFirmware(sim.Firmware):
    """The simulator's firmware, counting the requests it executes by letter (``W``, ``R``...).

    A ``busy`` fault answers without executing, so it is not counted.
    """

    def __init__(self, registers: sim.RegisterFile | None = None) -> None:
        super().__init__(registers)
        self.executed: Counter[str] = Counter()
        self._lock = threading.Lock()

    def answer(self, request: wire.Request) -> wire.Reply:
        with self._lock:
            self.executed[chr(wire.encode(request)[4])] += 1
        return super().answer(request)


@contextmanager
def sim_thread(firmware: sim.Firmware | None = None,
               faults: sim.Faults | None = None) -> Iterator[str]:
    """Serve the simulator on a loopback TCP port in a thread of this process; yield its URL."""
    urls: queue.Queue[str] = queue.Queue()
    servers: list[socket.socket] = []

    def run() -> None:
        with contextlib.suppress(OSError):  # the server socket was shut down: the test is over
            sim.serve_tcp(firmware or sim.Firmware(), faults or sim.Faults(), host="127.0.0.1",
                          port=0, announce=urls.put, log=None, ready=servers.append)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield urls.get(timeout=10)
    finally:
        servers[0].shutdown(socket.SHUT_RDWR)
        servers[0].close()
        thread.join(timeout=5)


@contextmanager
def sim_pty_thread(firmware: sim.Firmware | None = None,
                   faults: sim.Faults | None = None) -> Iterator[str]:
    """Serve the simulator on a pseudo-terminal in a thread of this process; yield its path
    (a POSIX port: ``SerialDevice`` reads its replies with ``select`` and ``os.read``)."""
    pty = sim._Pty(None)

    def run() -> None:
        with contextlib.suppress(OSError, sim.Disconnect):  # the pty closed: the test is over
            sim.serve(sim._FdLine(pty.master), firmware or sim.Firmware(), faults or sim.Faults())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield pty.path
    finally:
        os.close(pty.slave)  # with the host's port closed too, the master's read ends (EIO)
        thread.join(timeout=5)
        os.close(pty.master)


class _Network:
    """The connection side of pyserial's PortManager: a thread-safe write to the client."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection = connection
        self.lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self.lock, contextlib.suppress(OSError):
            self.connection.sendall(data)


@contextmanager
def rfc2217_server(backend: str) -> Iterator[str]:
    """An RFC 2217 server in a thread (pyserial's PortManager, after pyserial's example
    ``rfc2217_server.py``) in front of the port ``backend``; yield its ``rfc2217://`` URL.

    It serves one client at a time: bytes from the client go to ``backend`` and bytes from
    ``backend`` to the client, and the client's port settings and purges reach ``backend``.
    """
    port = serial.serial_for_url(backend, timeout=0.05)
    server = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def pump(connection: socket.socket, manager: serial.rfc2217.PortManager,
             hung_up: threading.Event) -> None:
        while not hung_up.is_set() and not done.is_set():
            try:
                data = port.read(port.in_waiting or 1)
            except serial.SerialException:
                return
            if data:
                with contextlib.suppress(OSError):
                    connection.sendall(b"".join(manager.escape(data)))

    def serve() -> None:
        while not done.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                return
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            manager = serial.rfc2217.PortManager(port, _Network(connection))
            hung_up = threading.Event()
            reader = threading.Thread(target=pump, args=(connection, manager, hung_up),
                                      daemon=True)
            reader.start()
            with connection, contextlib.suppress(OSError):
                while data := connection.recv(1024):
                    port.write(b"".join(manager.filter(data)))
            hung_up.set()
            reader.join(timeout=5)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"rfc2217://127.0.0.1:{server.getsockname()[1]}"
    finally:
        done.set()
        server.shutdown(socket.SHUT_RDWR)
        server.close()
        thread.join(timeout=5)
        port.close()
