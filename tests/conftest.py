"""Shared fixtures and hypothesis settings."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from regdev import Field, Gate, Register, RegisterFile, RegisterMap, Tool
from regdev.cli._main import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

#: A tool using every keyword of the supported subset, nested objects included (shared by the
#: reference and compiler tests).
CONFIGURE = Tool(
    name="configure",
    description="test tool",
    input_schema={
        "type": "object",
        "properties": {
            "mode": {"enum": ["fast", "slow", 1]},
            "label": {"type": "string", "minLength": 1, "maxLength": 4},
            "gain": {"type": ["number", "null"], "exclusiveMinimum": 0, "exclusiveMaximum": 2.5},
            "level": {"type": "integer", "minimum": Decimal("1.5"),
                      "exclusiveMaximum": Decimal("9.5")},
            "version": {"const": 2},
            "off": False,
            "limits": {
                "type": "object",
                "properties": {"low": {"type": "integer", "minimum": 0},
                               "deep": {"properties": {"x": {"const": "y"}}, "required": ["x"]}},
                "required": ["low"],
                "additionalProperties": False,
            },
        },
        "required": ["mode"],
    },
)

#: A tool using every array keyword, minProperties/maxProperties and multipleOf: the block
#: write of the register-map work (16 bytes at most), a position-typed pair, points (objects
#: in an array), a matrix (arrays in an array) and counted options (shared by the reference
#: and compiler tests).
ARRAYS = Tool(
    name="arrays",
    description="test tool",
    input_schema={
        "type": "object",
        "properties": {
            "data": {"type": "array", "minItems": 1, "maxItems": 16,
                     "items": {"type": "integer", "minimum": 0, "maximum": 255}},
            "pair": {"type": "array", "prefixItems": [{"type": "string"},
                                                      {"type": "integer", "multipleOf": 2}],
                     "items": False},
            "points": {"type": "array", "uniqueItems": True, "items": {
                "type": "object", "properties": {"x": {"type": "number"},
                                                 "y": {"type": "number"}},
                "required": ["x"], "additionalProperties": False}},
            "matrix": {"type": "array", "items": {"type": "array", "maxItems": 2,
                                                  "items": {"type": "integer", "maximum": 3}}},
            "options": {"type": "object", "minProperties": 1, "maxProperties": 2},
            "step": {"type": "number", "multipleOf": Decimal("0.1")},
        },
        "required": ["data"],
        "additionalProperties": False,
    },
)


#: The signals a test may send a child to stop it.
#: A map with one register of each behaviour, for the device tests
#: (test_maps.py, and over Modbus in test_modbus_map.py).
KINDS = RegisterMap([
    Register("RO", 0, fields=(Field("V", 0, 7, "r", reset=0x5A),)),
    Register("MIX", 1, fields=(Field("A", 0, 1), Field("RDY", 2, 2, "r", reset=1),
                               Field("W", 4, 5, "w"), Field("ERR", 6, 7, onwrite="woclr",
                                                           reset=3))),
    Register("CNT", 2, fields=(Field("N", 0, 7, "r", onread="rclr"),)),
    Register("RW", 3, fields=(Field("D", 0, 7),)),
], name="kinds")

STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")

_EXEC_WITH_SIGNALS = """\
import os, signal, sys
for name in sys.argv[1].split(","):
    if name and hasattr(signal, name):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
for name in sys.argv[2].split(","):
    if name and hasattr(signal, name):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
os.execv(sys.argv[3], sys.argv[3:])
"""


def default_signals(argv: Sequence[str], *, ignored: Sequence[str] = ()) -> list[str]:
    """``argv`` run with the stop signals at their defaults, whatever this process has.

    A child inherits ignored signals: under ``nohup`` SIGHUP is ignored, and a shell's
    background job ignores SIGINT, so a test that sends one would find it ignored. The
    returned command puts SIGINT, SIGTERM and SIGHUP back to ``SIG_DFL`` (a Python child
    then installs its usual SIGINT handler) and execs ``argv`` (same process id). It is a
    small Python program rather than a ``preexec_fn``, which is unsafe in a process with
    threads (a lock held by another thread at the fork would never be released).

    Args:
        argv: the command; ``argv[0]`` is a path (it is not looked up on PATH).
        ignored: names of signals to start ignored instead (``["SIGHUP"]``, as ``nohup``).
    """
    reset = [name for name in STOP_SIGNALS if name not in ignored]
    return [sys.executable, "-c", _EXEC_WITH_SIGNALS, ",".join(reset), ",".join(ignored),
            *argv]


# ci, the default: derandomized, so a failure in CI repeats on the next run and on any
# machine. HYPOTHESIS_PROFILE=dev draws new examples each run, to explore.
settings.register_profile("ci", max_examples=300, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``regdev ARGV`` in this process: (exit status, stdout, stderr), as captured."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def default_rows(values: Sequence[int]) -> list[dict[str, int]]:
    """The registers of the default map as ``--json`` prints them after replay, demo and
    agent: one ``{"addr": A, "data": D}`` per register, address 0 first."""
    return [{"addr": addr, "data": data} for addr, data in enumerate(values)]


@pytest.fixture(autouse=True)
def audit_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CLI's default audit log, moved into this test's own folder (never ~/.local)."""
    path = tmp_path / "state" / "audit.db"
    path.parent.mkdir()
    monkeypatch.setenv("REGDEV_AUDIT", str(path))
    return path


class CountingDevice(RegisterFile):
    """Counts every access that reaches the device (``state_id`` and ``epoch`` as for
    RegisterFile: give both to stand for the registers of an earlier one, not reset since)."""

    def __init__(self, *, state_id: str | None = None, epoch: str | None = None) -> None:
        super().__init__(state_id=state_id, epoch=epoch)
        self.accesses = 0

    def read(self, addr: int) -> int:
        self.accesses += 1
        return super().read(addr)

    def write(self, addr: int, data: int) -> int:
        self.accesses += 1
        return super().write(addr, data)


@pytest.fixture
def device() -> RegisterFile:
    """A fresh in-process register file, all registers 0."""
    return RegisterFile()


@pytest.fixture
def gate(device: RegisterFile) -> Gate:
    """A gate over the fresh register file with the register tools."""
    return Gate(device)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print how many JSON Schema Test Suite cases ran and how many were refused, and in one
    line which C firmware tests were skipped for want of a tool, and why."""
    suite = sys.modules.get("test_schema_suite")
    for line in getattr(suite, "SUMMARY", []):
        terminalreporter.write_line(line)
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if report.nodeid.startswith("tests/test_firmware_c.py")
               and isinstance(report.longrepr, tuple)]
    if skipped:
        reasons = sorted({str(report.longrepr[2]).removeprefix("Skipped: ")  # type: ignore[index]
                          for report in skipped})
        terminalreporter.write_line(f"firmware tests skipped: {len(skipped)} "
                                    f"({'; '.join(reasons)})")
