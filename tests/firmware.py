"""Helpers that run the firmware simulator for the serial tests: in a subprocess or a thread."""

from __future__ import annotations

import contextlib
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import regdev_firmware_sim as sim
from conftest import ROOT

SIM = ROOT / "firmware-sim" / "regdev_firmware_sim.py"


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
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=5)
        process.stdout.close()
        process.stderr.close()


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
