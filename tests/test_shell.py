"""regdev shell: an empty line gives the prompt again; only quit, exit or end of input leave."""

from __future__ import annotations

import io
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from regdev import Gate, RegisterFile, map_tools
from regdev.agents._shell import format_registers, register_rows, run_shell, shell_tools
from regdev.devices._rdl import load_map

REGDEV = Path(sys.executable).parent / "regdev"

#: Lines with nothing to run: empty, blanks, tabs, a carriage return (a terminal's Enter in
#: raw mode), and the other whitespace str.split() knows.
BLANK_LINES = ["", " ", "   ", "\t", " \t ", "\r", "\x0b\x0c", "\u00a0", "\u2003"]


def _inputs(lines: list[str]) -> Iterator[str]:
    yield from lines
    raise EOFError  # Ctrl-D


@pytest.mark.parametrize("blank", BLANK_LINES, ids=range(len(BLANK_LINES)))
@pytest.mark.parametrize("interactive", [True, False], ids=["prompt", "piped"])
def test_a_blank_line_does_not_leave_the_shell(monkeypatch: pytest.MonkeyPatch, blank: str,
                                               interactive: bool) -> None:
    """A blank line, at the prompt or piped, runs nothing and the shell reads on: the
    commands after it run, and the shell ends only at end of input, with 0."""
    lines = [blank, blank, "write 1 7", blank, "read 1"]
    if interactive:
        feed = _inputs(lines)
        monkeypatch.setattr("builtins.input", lambda prompt: next(feed))
    else:
        monkeypatch.setattr("sys.stdin", io.StringIO("".join(line + "\n" for line in lines)))
    out = io.StringIO()
    with Gate(RegisterFile(), shell_tools()) as gate:
        status = run_shell(gate, gate.default_session, out, where="here",
                           interactive=interactive)
    assert status == 0
    assert out.getvalue().splitlines()[2:] == [
        "accepted  write_register: register 1 = 0x07 (7)",
        "accepted  read_register: register 1 = 0x07 (7)",
        *([""] if interactive else []),  # Ctrl-D ends the prompt's line
    ]


@pytest.mark.parametrize("leave", ["quit", "exit", "  quit  ", None], ids=str)
def test_only_quit_exit_or_end_of_input_leave(monkeypatch: pytest.MonkeyPatch,
                                              leave: str | None) -> None:
    """quit and exit leave at once (nothing after them runs); without them, end of input."""
    lines = ["", "read 1", *([leave] if leave else []), "write 1 1"]
    out = io.StringIO()
    feed = _inputs(lines)
    monkeypatch.setattr("builtins.input", lambda prompt: next(feed))
    with Gate(RegisterFile(), shell_tools()) as gate:
        assert run_shell(gate, gate.default_session, out, where="here", interactive=True) == 0
    ran = [line for line in out.getvalue().splitlines() if line.startswith("accepted  ")][1:]
    assert len(ran) == (1 if leave else 2)


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal (POSIX)")
@pytest.mark.timeout(60)
def test_enter_at_the_prompt_of_a_terminal_keeps_the_shell_open(tmp_path: Path) -> None:
    """On a real terminal (a pty: input() with line editing), Enter on an empty prompt gives
    the prompt again; the command typed next runs, and quit leaves with 0."""
    controller, terminal = os.openpty()
    shell = subprocess.Popen([str(REGDEV), "shell", "--no-audit"], stdin=terminal,
                             stdout=terminal, stderr=terminal, close_fds=True,
                             env={**os.environ, "TERM": "dumb", "HOME": str(tmp_path)})
    os.close(terminal)
    seen = b""

    def read_until(marker: bytes, count: int = 1) -> None:
        nonlocal seen
        deadline = time.monotonic() + 30
        while seen.count(marker) < count:
            assert time.monotonic() < deadline, seen
            ready, _, _ = select.select([controller], [], [], 1)
            if ready:
                seen += os.read(controller, 4096)

    try:
        read_until(b"regdev> ")
        for n in range(2, 5):  # Enter on an empty prompt, three times
            os.write(controller, b"\r")
            read_until(b"regdev> ", n)
        os.write(controller, b"read 2\r")
        read_until(b"accepted  read_register: register 2 = 0x00 (0)")
        read_until(b"regdev> ", 5)
        os.write(controller, b"quit\r")
        assert shell.wait(timeout=30) == 0
    finally:
        if shell.poll() is None:
            shell.kill()
        os.close(controller)


SENSOR = Path(__file__).resolve().parent.parent / "examples" / "sensor.rdl"


def _shell(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
           lines: list[str], *argv: str) -> tuple[int, list[str]]:
    """``regdev shell ARGV`` fed ``lines`` on a pipe: the status and the lines it printed."""
    from regdev.cli._main import main  # noqa: PLC0415 - the CLI, as the user runs it
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(line + "\n" for line in lines)))
    status = main(["shell", "--no-audit", *argv])
    return status, capsys.readouterr().out.splitlines()


def test_block_commands_read_and_write_a_block(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """writeblock and readblock call write_registers and read_registers, by name or by
    address, on a map with block tools."""
    status, out = _shell(monkeypatch, capsys, ["writeblock DATA[0] 1 2 0x03 4",
                                               "readblock 4 4", "readblock DATA[2] 2"],
                         "--map", str(SENSOR))
    assert status == 0
    assert "accepted  write_registers: registers 4..7 = 0x01 0x02 0x03 0x04" in out
    assert "accepted  read_registers: registers 4..7 = 0x01 0x02 0x03 0x04" in out
    assert "accepted  read_registers: registers 6..7 = 0x03 0x04" in out


def test_block_commands_work_without_a_map(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """readblock and writeblock, listed by help, run on the default device too (they were
    unknown-tool refusals without --map)."""
    status, out = _shell(monkeypatch, capsys, ["writeblock 2 1 2", "readblock 0 4"],
                         "--no-audit")
    assert status == 0
    assert "accepted  write_registers: registers 2..3 = 0x01 0x02" in out
    assert "accepted  read_registers: registers 0..3 = 0x00 0x00 0x01 0x02" in out


def test_reset_runs_on_a_map_with_read_only_registers(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """reset on a map with a read-only ID register runs in process; a register the policy
    makes read-only still refuses it."""
    chip = tmp_path / "chip.rdl"
    chip.write_text("addrmap chip {\n  default regwidth = 8;\n"
                    "  reg { field { sw = r; hw = na; } PART[7:0] = 0x5A; } ID @ 0;\n"
                    "  reg { field { sw = rw; hw = r; } MODE[7:0] = 0; } CTRL @ 1;\n"
                    "  reg { field { sw = rw; hw = r; } VALUE[7:0] = 0; } DATA @ 2;\n};\n")
    status, out = _shell(monkeypatch, capsys, ["write CTRL 0x05", "reset", "read CTRL",
                                               "read ID"], "--map", str(chip))
    assert status == 0
    assert "accepted  reset_device: every register holds its reset value" in out
    assert "accepted  read_fields: register CTRL (0x01) = 0x00 MODE=0" in out
    assert "accepted  read_fields: register ID (0x00) = 0x5a PART=0x5a" in out
    policy = tmp_path / "policy.toml"
    policy.write_text("[registers]\nread_only = [2]\n")
    status, out = _shell(monkeypatch, capsys, ["reset"], "--map", str(chip), "--policy",
                         str(policy))
    assert status == 1
    assert any("refused   authorize/read-only-register" in line
               and "register DATA (0x02) is read-only by the gate's policy" in line
               for line in out)


def test_names_get_the_closest_and_the_list_says_how_many_more(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """A register or field name in the wrong case or misspelt is refused with the closest
    names ("did you mean CTRL.MODE?"); a list of names cut at 12 says how many more."""
    status, out = _shell(monkeypatch, capsys, ["write ctrl.mode ONESHOT", "read ctrl",
                                               "write CTRL.MOD 1", "read SAMPEL"],
                         "--map", str(SENSOR))
    assert status == 1
    errors = [line for line in out if line.startswith("error: ")]
    assert errors[0].startswith("error: no field `ctrl.mode`; did you mean CTRL.MODE?; "
                                "fields: ID.PART, CTRL.EN, CTRL.MODE,")
    assert errors[0].endswith("and 3 more (`regdev map FILE` lists them all)")
    assert errors[1] == ("error: no register `ctrl`; did you mean CTRL?; registers: ID, CTRL, "
                         "STATUS, CALIB, DATA[0], DATA[1], DATA[2], DATA[3], SAMPLE, EVENTS")
    assert errors[2].startswith("error: no field `CTRL.MOD`; did you mean CTRL.MODE")
    assert errors[3].startswith("error: no register `SAMPEL`; did you mean SAMPLE?")
    registers = "".join(f"reg {{ field {{ sw = rw; hw = r; }} F[7:0] = 0; }} R{n} @ {n};\n"
                        for n in range(20))
    many = tmp_path / "many.rdl"
    many.write_text(f"addrmap many {{\ndefault regwidth = 8;\n{registers}}};\n")
    status, out = _shell(monkeypatch, capsys, ["read NOPE"], "--map", str(many))
    assert [line for line in out if line.startswith("error: ")] == [
        "error: no register `NOPE`; registers: R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10, "
        "R11 and 8 more (`regdev map FILE` lists them all)"]


THERMOSTAT = SENSOR.parent / "thermostat.rdl"


def test_a_misspelt_name_on_a_map_with_values_suggests_value_names_too(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """On a map with typed values a misspelt name is "no register or value" with the closest
    value names; a map whose registers have no names lists none (never an empty list)."""
    status, out = _shell(monkeypatch, capsys, ["read SETPNT", "write SETPONT 21"],
                         "--map", str(THERMOSTAT))
    assert status == 1
    errors = [line for line in out if line.startswith("error: ")]
    listed = ("did you mean SETPOINT, SETPOINT_LO or SETPOINT_HI?; values and registers: "
              "SETPOINT, TEMP, MODE, W, W_SF, ROOM, ENABLED, SETPOINT_HI, SETPOINT_LO, TEMP_0, "
              "TEMP_1, TEMP_2 and 9 more (`regdev map FILE` lists them all)")
    assert errors == [f"error: no register or value `SETPNT`; {listed}",
                      f"error: no register or value `SETPONT`; {listed}"]
    unnamed = tmp_path / "unnamed.json"
    unnamed.write_text('{"format": "regdev-map", "version": 1, "registers": '
                       '[{"addr": 0, "width": 16}]}')
    status, out = _shell(monkeypatch, capsys, ["read controls.WMaxLimPc"],
                         "--map", str(unnamed))
    assert [line for line in out if line.startswith("error: ")] == [
        "error: no register `controls.WMaxLimPc`"]


def test_writing_a_read_only_value_says_it_is_read_only(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`write TEMP 3` (TEMP is access r) says TEMP is read-only and how to read it, not that
    it is not one of the writable names; nothing is sent; `read TEMP` reads it."""
    status, out = _shell(monkeypatch, capsys, ["write TEMP 3", "read TEMP"],
                         "--map", str(THERMOSTAT))
    assert status == 1
    assert [line for line in out if line.startswith("error: ")] == [
        "error: TEMP is a read-only value (the device sets it): `read TEMP` reads it"]
    assert "accepted  read_value: TEMP = 21.5 degC (raw 0x41 0xac 0x00 0x00)" in out
    assert not any("write_value" in line for line in out)


class _NoPeek(RegisterFile):
    """A register file that, as a bridge to a chip, cannot show a clear-on-read register
    without reading it, and whose reset leaves the chip's flags (its words say so)."""

    def snapshot(self) -> list[int | None]:
        values = super().snapshot()
        return [None if register.rclr_mask else value
                for register, value in zip(self.regmap.registers, values, strict=True)]

    def reset_leaves(self) -> str | None:
        return "the write-1-to-clear flags were not reset"


def test_dump_and_reset_say_what_the_device_did_not_do(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """A register a snapshot did not read is shown "not read: reading clears it", never a
    made-up value, and a reset that left registers says which instead of "every register
    holds its reset value"; a device that peeks and resets all is shown as before."""
    chip = tmp_path / "chip.rdl"
    chip.write_text("addrmap chip {\n  default regwidth = 8;\n"
                    "  reg { field { sw = rw; hw = r; } MODE[7:0] = 0; } CTRL @ 0;\n"
                    "  reg { field { sw = r; hw = w; onread = rclr; } COUNT[3:0] = 0; } "
                    "EVENTS @ 1;\n};\n")
    regmap = load_map(chip)
    shown = {}
    for device in (_NoPeek(regmap=regmap), RegisterFile(regmap=regmap)):
        device.hardware_set(1, 0x0F)  # EVENTS.COUNT, clear-on-read
        monkeypatch.setattr("sys.stdin", io.StringIO("dump\nreset\n"))
        out = io.StringIO()
        with Gate(device, shell_tools(tools=map_tools(regmap))) as gate:
            assert run_shell(gate, gate.default_session, out, where="here",
                             interactive=False) == 0
        shown[type(device)] = out.getvalue().splitlines()
    events = [line for line in shown[_NoPeek] if "EVENTS" in line]
    assert events == ["  0x01 EVENTS  not read: reading clears it"]
    assert shown[_NoPeek][-1] == ("accepted  reset_device: the write-1-to-clear flags were "
                                  "not reset")
    assert [line for line in shown[RegisterFile] if "EVENTS" in line] == [
        "  0x01 EVENTS  0x0f  COUNT=0x0f"]
    assert shown[RegisterFile][-1] == ("accepted  reset_device: every register holds its "
                                       "reset value")


def test_a_register_not_read_is_null_in_json_and_dashes_in_the_default_table() -> None:
    """register_rows gives a register not read (None) as null data, never 0; the default
    map's table shows it as ``----``."""
    rows = register_rows([7, None] + [0] * 14)
    assert rows[:2] == [{"addr": 0, "data": 7}, {"addr": 1, "data": None}]
    assert format_registers([7, None] + [0] * 14).splitlines()[1].split()[1:4] == [
        "0x07", "----", "0x00"]
