"""Helpers for the C firmware's tests: which tools are here, building, the core through ctypes.

Two groups of tests need tools beyond Python: the host build and the differential test need
``make`` and a C compiler (``cc``); the simavr tests also need avr-gcc, avr-libc, binutils-avr
and simavr's development files. Where a tool is missing those tests are skipped, with the
reason from :func:`missing`, unless ``REGDEV_REQUIRE_FIRMWARE=1`` (as ``.ci/run`` sets after
installing them), which turns the skip into a failure so that CI cannot skip them silently.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

import pytest

from conftest import ROOT
from regdev import DeviceIdentity, RegisterFile, RegisterMap
from regdev.devices import _protocol as wire

C_DIR: Final = ROOT / "firmware-sim" / "c"
#: The Debian/Ubuntu packages of the AVR toolchain and simavr (as .ci/run installs them).
AVR_PACKAGES: Final = "gcc-avr avr-libc binutils-avr libsimavr-dev libelf-dev"
HOST_TOOLS: Final = ("make", "cc")
AVR_TOOLS: Final = ("avr-gcc", "avr-objcopy", "avr-size")
#: A file that compiles only with simavr's headers and links only with its libraries.
_SIMAVR_PROBE: Final = """
#include "sim_avr.h"
#include "uart_pty.h"
int main(void) { uart_pty_t p; (void)p; return avr_make_mcu_by_name("atmega328p") == 0; }
"""

#: Marks the tests that build into, or run from, firmware-sim/c/build (where `firmware-sim
#: --avr` builds, by default and for a map): they run on one pytest-xdist worker, one after
#: another (scripts/test distributes with ``--dist loadgroup``), as two makes into one
#: folder would race.
SHARED_BUILD: Final = pytest.mark.xdist_group("firmware-sim-c-build")

#: The line printed when firmware tests were skipped, and the skip reasons, by group.
GROUPS: Final = {"host": "the C firmware's host build and differential tests",
                 "avr": "the simavr firmware tests"}


def _simavr_usable() -> bool:
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "probe.c"
        source.write_text(_SIMAVR_PROBE)
        done = subprocess.run(
            ["cc", "-I/usr/include/simavr", "-I/usr/include/simavr/parts", "-o",
             str(Path(folder) / "probe"), str(source), "-lsimavrparts", "-lsimavr", "-lpthread",
             "-lutil"], capture_output=True, check=False)
    return done.returncode == 0


_MISSING: dict[str, str | None] = {}


def missing(group: str) -> str | None:
    """Why the tests of ``group`` (``"host"`` or ``"avr"``) cannot run here, or None."""
    if group not in _MISSING:
        tools = [tool for tool in HOST_TOOLS if shutil.which(tool) is None]
        reason = None
        if tools:
            reason = f"{' and '.join(tools)} not found"
        elif group == "avr":
            tools = [tool for tool in AVR_TOOLS if shutil.which(tool) is None]
            if tools:
                reason = f"{', '.join(tools)} not found (apt-get install {AVR_PACKAGES})"
            elif not _simavr_usable():
                reason = (f"simavr's headers or libraries not found (apt-get install "
                          f"{AVR_PACKAGES})")
        _MISSING[group] = reason
    return _MISSING[group]


def need(group: str) -> None:
    """Skip the calling test when the tools of ``group`` are missing (fail under
    ``REGDEV_REQUIRE_FIRMWARE=1``)."""
    reason = missing(group)
    if reason is None:
        return
    if os.environ.get("REGDEV_REQUIRE_FIRMWARE") == "1":
        pytest.fail(f"REGDEV_REQUIRE_FIRMWARE=1 but {reason}")
    pytest.skip(f"{GROUPS[group]}: {reason}")


def make(build: Path, *targets: str, regmap: Path | None = None) -> str:
    """Run the C firmware's Makefile into ``build``; return its output.

    Raises:
        AssertionError: make failed (its output in the message).
    """
    command = ["make", "-s", "-C", str(C_DIR), f"BUILD={build}", f"PYTHON={sys.executable}",
               *targets]
    if regmap is not None:
        command.append(f"MAP={regmap}")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}"
    return done.stdout


#: The id and start count a :class:`CCore` starts with unless told otherwise.
DEVICE_ID: Final = "5F3A9C01"
STARTS: Final = 4


def c_identify_text(description: str, device_id: str, starts: int, resets: int) -> str:
    """What the C firmware answers to ``I`` (docs/firmware.md): ``description`` cut to leave
    room for `` id=ID epoch=BBBBRRRR`` in 48 bytes (and the spaces the cut leaves at its end
    dropped), then that ending; without an id, the description alone."""
    if not device_id:
        return description
    room = wire.MAX_TEXT - len(" id= epoch=") - len(device_id) - 8
    return wire.identify_text(description[:room].rstrip(" "), device_id,
                              f"{starts:04X}{resets:04X}")


class CCore:
    """The C core (``libregdev_core.so``) through ctypes: byte strings in, replies out."""

    def __init__(self, library: Path) -> None:
        lib = ctypes.CDLL(str(library))
        lib.regdev_test_core_size.restype = ctypes.c_size_t
        lib.regdev_test_feed_all.restype = ctypes.c_long
        lib.regdev_test_feed_all.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                             ctypes.c_void_p, ctypes.c_size_t]
        lib.regdev_test_identity.restype = ctypes.c_char_p
        lib.regdev_core_init.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint16]
        lib.regdev_test_registers.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.regdev_test_register_count.restype = ctypes.c_size_t
        self.lib = lib
        self.state = ctypes.create_string_buffer(lib.regdev_test_core_size())
        #: The identify text's description compiled in.
        self.identity: str = lib.regdev_test_identity().decode("ascii")
        self.reset()

    def reset(self, device_id: str | None = DEVICE_ID, starts: int = STARTS) -> None:
        """A core fresh from regdev_core_init: reset values, hunting for a frame, the id
        ``device_id`` (None: a NULL pointer) and the start count ``starts``, no reset yet."""
        self.lib.regdev_core_init(self.state, None if device_id is None else device_id.encode(),
                                  starts)

    @property
    def next_starts(self) -> int:
        """How many times the core has asked the platform for a new start count."""
        return ctypes.c_ulong.in_dll(self.lib, "regdev_test_next_starts").value

    def feed(self, data: bytes) -> bytes:
        """Feed ``data`` byte by byte; return every reply it completed, in order."""
        out = ctypes.create_string_buffer(64 * (len(data) + 1))
        used = self.lib.regdev_test_feed_all(self.state, data, len(data), out, len(out))
        assert used >= 0
        return out.raw[:used]

    def registers(self) -> list[int]:
        """The registers of the map as held, in address order (write-only bits included)."""
        out = ctypes.create_string_buffer(self.lib.regdev_test_register_count())
        self.lib.regdev_test_registers(self.state, out)
        return list(out.raw)


class CEpochs(RegisterFile):
    """A register file whose reset epochs are the C firmware's, ``BBBBRRRR``: the start count
    and the resets since, 4 hex digits each; past FFFF resets, the next start count and 0000
    (as the C core asks its platform for one).

    For the Python firmware simulator in the differential tests, so that its identify text
    is the very one the C core says.
    """

    def __init__(self, starts: int = STARTS, regmap: RegisterMap | None = None) -> None:
        super().__init__(regmap=regmap)
        self.starts = starts
        self.resets = 0

    def reset(self) -> None:
        """Reset values, and the next epoch."""
        super().reset()
        self.resets = (self.resets + 1) & 0xFFFF
        if self.resets == 0:
            self.starts = (self.starts + 1) & 0xFFFF

    def identity(self, *, refresh: bool = False) -> DeviceIdentity:
        """Its id and ``BBBBRRRR``."""
        return DeviceIdentity(self.state_id(), f"{self.starts:04X}{self.resets:04X}")

    def known_identity(self) -> DeviceIdentity:
        """The same as :meth:`identity`."""
        return self.identity()
