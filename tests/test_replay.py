"""regdev replay: each verdict shown as its call runs, Ctrl-C keeps the results so far, and
lines are read one at a time with bounded memory (a line over the cap is its too-large)."""

from __future__ import annotations

import io
import json
import os
import select
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from conftest import EXAMPLES, default_rows, default_signals, run
from regdev import read_audit
from regdev.agents._replay import LineTooLong, max_line_bytes, read_replay

REGDEV = Path(sys.executable).parent / "regdev"
READ = '{"tool": "read_register", "arguments": {"addr": 1}}'
WRITE = '{"tool": "write_register", "arguments": {"addr": 1, "data": 9}}'


def line(raw: str, **fields: object) -> bytes:
    return (json.dumps({"raw": raw, **fields}) + "\n").encode()


# --- each verdict as it runs --------------------------------------------------------------------


def _read_line(stream: io.BufferedReader, timeout: float = 20) -> bytes:
    """One line of a child's output, or a failure when none comes in ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    got = b""
    while not got.endswith(b"\n"):
        assert time.monotonic() < deadline, f"no line in {timeout} s; got {got!r}"
        ready, _, _ = select.select([stream], [], [], 0.5)
        if ready:
            chunk = os.read(stream.fileno(), 1)
            assert chunk, f"end of output; got {got!r}"
            got += chunk
    return got


@pytest.mark.timeout(60)
@pytest.mark.parametrize("json_rows", [False, True], ids=["text", "json"])
def test_each_verdict_is_shown_before_the_next_line_is_read(json_rows: bool) -> None:
    """`replay -` prints a line's verdict as soon as the line has run, while standard input
    is still open: a pipe fed one line at a time gets each answer back before the next."""
    replay = subprocess.Popen([str(REGDEV), "replay", "-", "--no-audit",
                               *(["--json"] if json_rows else [])],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    assert replay.stdin is not None and replay.stdout is not None
    try:
        shown = []
        for number, raw in enumerate([WRITE, READ, '{"tool": "x"}'], start=1):
            replay.stdin.write(line(raw, expect="ok" if number < 3 else "bad-arguments"))
            replay.stdin.flush()
            got = _read_line(replay.stdout)  # type: ignore[arg-type]
            if not json_rows and number == 1:
                assert got.startswith(b"line ")  # the header
                got = _read_line(replay.stdout)  # type: ignore[arg-type]
            shown.append(got)
        replay.stdin.close()
        replay.stdin = None  # closed: communicate() only reads
        rest, err = replay.communicate(timeout=30)
    finally:
        if replay.poll() is None:
            replay.kill()
    assert (replay.returncode, err) == (0, b"")
    if json_rows:
        assert [json.loads(row)["line"] for row in shown] == [1, 2, 3]
    else:
        assert [row[:9] for row in shown] == [b"line    1", b"line    2", b"line    3"]
        assert b"\n3 calls, 3 with expectations, 0 not met\n" in rest


# --- Ctrl-C keeps what ran ----------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_ctrl_c_while_waiting_for_input_prints_the_summary_of_what_ran(tmp_path: Path) -> None:
    """SIGINT while `replay -` waits for its next line: the results so far stay, the summary
    and the registers are printed, one line on stderr says so, exit 130."""
    audit = tmp_path / "audit.db"
    replay = subprocess.Popen(  # (SIGINT at its default: a background job ignores it)
        default_signals([str(REGDEV), "replay", "-", "--audit", str(audit)]),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert replay.stdin is not None and replay.stdout is not None
    try:
        replay.stdin.write(line(WRITE, expect="ok") + line(READ, expect="range-addr"))
        replay.stdin.flush()
        for _ in range(4):  # the header, two results, one "expected ..." line
            _read_line(replay.stdout)  # type: ignore[arg-type]
        replay.send_signal(signal.SIGINT)
        out, err = replay.communicate(timeout=30)
    finally:
        if replay.poll() is None:
            replay.kill()
    assert replay.returncode == 130
    assert err.decode() == ("regdev replay: interrupted after 2 calls; the results above are "
                            "those of the calls that ran\n")
    text = out.decode()
    assert "\n2 calls, 2 with expectations, 1 not met (interrupted)\n" in text
    assert "  data 0x00 0x09 0x00" in text  # the registers after what ran
    assert len(read_audit(audit)) == 2


@pytest.mark.parametrize("json_rows", [False, True], ids=["text", "json"])
def test_ctrl_c_during_a_call_keeps_the_results_before_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        audit_path: Path, json_rows: bool) -> None:
    """Ctrl-C inside the third call of a file: the two results before it are printed with
    the summary of what ran (the interrupted call is recorded in the audit log), exit 130."""
    from regdev import RegisterFile  # noqa: PLC0415

    class Device(RegisterFile):
        reads = 0

        def read(self, addr: int) -> int:
            Device.reads += 1
            if Device.reads == 3:
                raise KeyboardInterrupt
            return super().read(addr)

    monkeypatch.setattr("regdev.cli._replay.port_device", lambda args: Device())
    path = tmp_path / "calls.jsonl"
    path.write_bytes(line(READ, expect="ok") * 5)
    status, out, err = run(capsys, "replay", str(path), *(["--json"] if json_rows else []))
    assert status == 130
    assert err == ("regdev replay: interrupted after 2 calls; the results above are those of "
                   "the calls that ran\n")
    if json_rows:
        rows = [json.loads(row) for row in out.splitlines()]
        assert [row.get("line") for row in rows[:-1]] == [1, 2]
        assert rows[-1] == {"registers": default_rows([0] * 16), "interrupted": True}
    else:
        assert [row[:9] for row in out.splitlines()[1:3]] == ["line    1", "line    2"]
        assert "\n2 calls, 2 with expectations, 0 not met (interrupted)\n" in out
    assert [r.code for r in read_audit(audit_path)] == [None, None, "internal-error"]


# --- bounded memory -----------------------------------------------------------------------------


class _Generated(io.RawIOBase):
    """A stream of ``size`` bytes of ``x`` and a newline, then ``tail``, made as it is read
    (never held whole)."""

    def __init__(self, size: int, tail: bytes) -> None:
        self.left, self.tail = size, tail + b""
        self.newline = True

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.left:
            n = min(len(buffer), self.left)
            buffer[:n] = b"x" * n
            self.left -= n
            return n
        rest = (b"\n" if self.newline else b"") + self.tail
        self.newline, self.tail = False, b""
        n = min(len(buffer), len(rest))
        buffer[:n] = rest[:n]
        self.tail = rest[n:]
        return n


def test_a_line_over_the_cap_is_counted_not_held() -> None:
    """A 64 MiB line is read in pieces: it comes out as LineTooLong with its exact size, the
    next line is read as usual, and memory stays a small multiple of the cap."""
    size = 64 * 1024 * 1024
    stream = io.BufferedReader(_Generated(size, line(READ, expect="ok")))
    tracemalloc.start()
    try:
        items = list(read_replay(stream, "<stdin>"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert items[0] == (1, LineTooLong(size, max_line_bytes()))
    assert items[1][0] == 2 and items[1][1].raw == READ  # type: ignore[union-attr]
    assert peak < 8 * max_line_bytes()


@pytest.mark.parametrize("over", [1, 2, 100_000])
@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b""], ids=["lf", "crlf", "eof"])
def test_the_cap_is_exact_at_its_edge(over: int, ending: bytes) -> None:
    """A line of exactly the cap is read; one byte more is too long (its size counted
    without its LF), whatever the line end, or none at the end of input."""
    cap = 200
    record = json.dumps({"raw": READ, "why": ""}).encode()
    exact = record[:-2] + b" " * (cap - len(record)) + b"\"}"
    assert len(exact) == cap
    longer = exact[:-2] + b" " * over + b"\"}"
    data = exact + b"\n" + longer + ending
    items = list(read_replay(io.BytesIO(data), "<stdin>", max_line=cap))
    assert items[0][0] == 1 and items[0][1].raw == READ  # type: ignore[union-attr]
    size = cap + over + (1 if ending == b"\r\n" else 0)  # the CR is part of an over-cap line
    assert items[1] == (2, LineTooLong(size, cap))


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_a_line_over_the_cap_is_that_lines_too_large(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        source: str) -> None:
    """From a file or standard input, an over-cap line is reported as that line's
    parse/too-large (not run, its expectation unchecked), and the lines after it run."""
    policy = tmp_path / "small.json"
    policy.write_text('{"max_input_bytes": 100}')
    cap = max_line_bytes(100)
    huge = line("x" * (cap + 10), expect="ok")
    data = line(WRITE, expect="ok") + huge + line(READ, expect="ok")
    path = tmp_path / "calls.jsonl"
    path.write_bytes(data)
    if source == "stdin":
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    status, out, err = run(capsys, "replay", "-" if source == "stdin" else str(path),
                           "--policy", str(policy), "--no-audit")
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[2] == (f"line    2  -        refused   parse/too-large (retryable): the replay "
                        f"line is {len(huge) - 1} bytes, over the cap of {cap} bytes; it was "
                        "not read, so nothing ran")
    assert lines[3].startswith("line    3  met      accepted  read_register: register 1 = 0x09")
    assert "\n3 calls, 2 with expectations, 0 not met\n" in out


def test_stdin_is_never_read_whole(capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`replay -` asks standard input for at most one line over the cap at a time."""
    asked: list[int | None] = []

    class Watched(io.BytesIO):
        def read(self, size: int | None = -1, /) -> bytes:
            asked.append(size)
            return super().read(size)

        def readline(self, size: int | None = -1, /) -> bytes:
            asked.append(size)
            return super().readline(size)

    stream = Watched(line(WRITE) * 3)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(stream))  # type: ignore[arg-type]
    status, _, _ = run(capsys, "replay", "-", "--no-audit")
    assert status == 0
    assert asked and all(size is not None and 0 < size <= max_line_bytes() + 1
                         for size in asked)


def test_a_bad_line_on_stdin_stops_the_replay_after_what_ran(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """From standard input, lines run as they come: a bad third line stops the replay there;
    the two before it ran and are summed up, then the error line, exit 2."""
    data = line(WRITE, expect="ok") + line(READ, expect="ok") + b'{"raw": 3}\n' + line(READ)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    status, out, err = run(capsys, "replay", "-", "--no-audit")
    assert status == 2
    assert "\n2 calls, 2 with expectations, 0 not met\n" in out
    assert err == ("regdev replay: error: <stdin>:3: `raw` must be a string (the model's raw "
                   "output), got an integer\n")


def test_json_registers_give_addresses_and_names_across_a_gap(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """replay --json's registers are rows with the address and name: on a map with a gap
    (sensor.rdl has none at 0x09) the last register is EVENTS at 10, not position 9."""
    calls = tmp_path / "calls.jsonl"
    calls.write_text('{"raw": "{\\"tool\\": \\"write_register\\", \\"arguments\\": '
                     '{\\"addr\\": 7, \\"data\\": 66}}", "expect": "ok"}\n')
    status, out, err = run(capsys, "replay", str(calls), "--json", "--no-audit", "--map",
                           str(EXAMPLES / "sensor.rdl"))
    assert (status, err) == (0, "")
    registers = json.loads(out.splitlines()[-1])["registers"]
    assert [row["addr"] for row in registers] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10]
    assert registers[0] == {"addr": 0, "name": "ID", "data": 0x5A}
    assert registers[7] == {"addr": 7, "name": "DATA[3]", "data": 66}
    assert registers[-1] == {"addr": 10, "name": "EVENTS", "data": 0}


def test_replay_help_describes_the_register_rows(capsys: pytest.CaptureFixture[str]) -> None:
    """replay --help says the registers come as address, name and data (not 16 ints)."""
    with pytest.raises(SystemExit):
        run(capsys, "replay", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert '{"addr": A, "name": N, "data": D}' in text
    assert "16 ints" not in text
