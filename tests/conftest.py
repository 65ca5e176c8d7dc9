"""Shared fixtures and hypothesis settings."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, Sequence
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from regdev import Field, Gate, Register, RegisterFile, RegisterMap, Tool
from regdev.cli._main import main
from support import pgserver

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
#: The project's shared folder, beside this checkout: the peer test data and the real-world
#: cases that the copies under examples/ and tests/data were taken from.
SHARED = ROOT.parent / "shared"


def shared_missing(path: Path) -> str:
    """The reason to skip a test that compares a copy with ``path`` in the shared folder:
    what is missing, and the command that puts the shared folder in place."""
    return (f"{path} not found: the project's shared folder is not beside this checkout "
            f"(ln -s /path/to/shared {SHARED})")

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
# machine; it draws the same examples every run, so it keeps no example database (which would
# be one folder written by every pytest-xdist worker). HYPOTHESIS_PROFILE=dev draws new
# examples each run, to explore, and keeps the failing ones in a database of each worker's
# own (.hypothesis/examples-gw0, ...; .hypothesis/examples-main without workers).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
settings.register_profile("ci", max_examples=300, deadline=None, derandomize=True,
                          database=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None,
                          database=DirectoryBasedExampleDatabase(
                              ROOT / ".hypothesis" / f"examples-{_WORKER}"))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: The pytest-xdist workers of ``-n auto`` (scripts/test passes it), chosen by measurement on
#: a 2-core machine: the suite mostly waits on ptys, subprocesses and servers, so more
#: workers than cores pay. PYTEST_XDIST_AUTO_NUM_WORKERS=N or ``-n N`` chooses another.
AUTO_WORKERS = 4


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """The worker count of ``-n auto``: :data:`AUTO_WORKERS`, unless
    PYTEST_XDIST_AUTO_NUM_WORKERS says otherwise (pytest-xdist's own default reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return AUTO_WORKERS


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


@pytest.fixture(scope="session")
def postgres() -> Iterator[pgserver.Server]:
    """A PostgreSQL server of the tests' own on 127.0.0.1 (tests/support/pgserver.py), for this
    worker's session; skipped in one line when PostgreSQL is not installed, failed in CI."""
    try:
        server_context = pgserver.started()
        server = server_context.__enter__()
    except pgserver.Missing as error:
        if pgserver.in_ci():
            pytest.fail(f"{error} (CI installs it: .ci/run)")
        pytest.skip(str(error))
    try:
        yield server
    finally:
        server_context.__exit__(None, None, None)


#: The audit stores the store tests run on.
STORES = ("sqlite", "postgresql")


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """A new, empty audit store: a SQLite file that does not exist yet, or a PostgreSQL URL
    of an empty schema of its own (on the :func:`postgres` server)."""
    if request.param == "sqlite":
        return tmp_path / "audit.db"
    server: pgserver.Server = request.getfixturevalue("postgres")
    return server.fresh_dsn()


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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep each test file on one pytest-xdist worker, its tests in their order (scripts/test
    distributes with ``--dist loadgroup``): a module-scoped server or build is made once, and
    a test that looks at what the file's earlier tests left on it (the fuzz server's log)
    sees all of them. A test marked ``xdist_group`` goes with its group instead (before
    pytest-xdist reads the marks: tryfirst)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.path.name))
    # The longest files first: the workers take files in this order, so a long file started
    # last would leave the others idle while it finishes.
    items.sort(key=lambda item: _LONGEST_FIRST.get(item.path.name, len(_LONGEST_FIRST)))


#: The test files that take longest (summed test time, ``scripts/test --durations=0``), longest
#: first; the rest keep their order after them (the sort is stable).
_LONGEST_FIRST = {name: rank for rank, name in enumerate((
    "test_eval_suite.py", "test_mcp.py", "test_install.py", "test_firmware_c.py", "test_cli.py",
    "test_bench.py", "test_modbus.py", "test_bridge_sessions.py", "test_firmware_sim.py",
    "test_compile.py", "test_display.py", "test_equivalence.py", "test_http.py"))}


#: The user property under which a test leaves a line for the end of the run.
_SUMMARY = "regdev-summary"


def summary_line(request: pytest.FixtureRequest, line: str) -> None:
    """Print ``line`` at the end of the pytest run (after the test, on whichever pytest-xdist
    worker it ran: the line travels in the test's report)."""
    request.node.user_properties.append((_SUMMARY, line))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the lines tests left with :func:`summary_line` (how many JSON Schema Test Suite
    cases ran and how many were refused), in the order of the tests, and in one line which C
    firmware tests were skipped for want of a tool, and why."""
    reports = [report for reports in terminalreporter.stats.values() for report in reports
               if getattr(report, "when", None) == "call"]
    for report in sorted(reports, key=lambda report: report.nodeid):
        for name, line in report.user_properties:
            if name == _SUMMARY:
                terminalreporter.write_line(str(line))
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if report.nodeid.startswith("tests/test_firmware_c.py")
               and isinstance(report.longrepr, tuple)]
    if skipped:
        reasons = sorted({str(report.longrepr[2]).removeprefix("Skipped: ")  # type: ignore[index]
                          for report in skipped})
        terminalreporter.write_line(f"firmware tests skipped: {len(skipped)} "
                                    f"({'; '.join(reasons)})")


class HeldFirstWrite(RegisterFile):
    """The sensor map's registers, whose first write of any kind (``write``, ``write_masked``,
    ``write_block``) calls :meth:`first_write` before it runs: a slow device with a write on
    its way, for the tests of two approved writes racing."""

    def __init__(self) -> None:
        from regdev.devices._rdl import load_map  # noqa: PLC0415

        super().__init__(regmap=load_map(EXAMPLES / "sensor.rdl"))
        self._first = threading.Lock()

    def first_write(self) -> None:
        """What the first write does before it runs (the subclass says)."""

    def _starts(self) -> None:
        if self._first.acquire(blocking=False):  # the first write only
            self.first_write()

    def write(self, addr: int, data: int) -> int:
        self._starts()
        return super().write(addr, data)

    def write_masked(self, addr: int, mask: int, data: int) -> int:
        self._starts()
        return super().write_masked(addr, mask, data)

    def write_block(self, addr: int, data: Sequence[int]) -> list[int]:
        self._starts()
        return super().write_block(addr, data)


#: Two writes of each kind to the sensor map's protected CALIB (0x03): a register, a field and
#: a block write (first, second).
CALIB_WRITE_PAIRS = [
    ("write_register", {"addr": 3, "data": 0x11}, {"addr": 3, "data": 0x22}),
    ("write_field", {"field": "CALIB.OFFSET", "value": 0x11},
     {"field": "CALIB.OFFSET", "value": 0x22}),
    ("write_registers", {"addr": 3, "data": [0x11, 1]}, {"addr": 3, "data": [0x22, 2]}),
]
