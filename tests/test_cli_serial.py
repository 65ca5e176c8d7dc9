"""The command line against a serial device: demo/replay --port, shell, firmware-sim."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import regdev_firmware_sim as sim
from conftest import EXAMPLES, default_rows, default_signals, run
from regdev import read_audit
from regdev.cli._firmware_sim import FAULT_HELP
from regdev.cli._main import build_parser, main
from regdev.devices import _protocol as wire
from regdev.devices._serial import MODBUS_URL_FORMS, URL_FORMS, SerialDevice
from support.firmware import is_sim_identity, sim_process, sim_thread

REGDEV = Path(sys.executable).parent / "regdev"


@pytest.mark.timeout(30)
def test_demo_and_replay_over_a_port_match_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    """demo --port and replay --port print what the in-process runs print (--json)."""
    wild = str(EXAMPLES / "wild-calls.jsonl")
    local_demo = run(capsys, "demo", "--json")
    local_replay = run(capsys, "replay", wild, "--json")
    with sim_process("--pty") as (port, _):
        assert run(capsys, "demo", "--json", "--port", port, "--timeout", "2") == local_demo
        # The demo left registers set: --reset gives the replay a fresh device.
        remote_replay = run(capsys, "replay", wild, "--json", "--port", port, "--reset")
    assert remote_replay == local_replay
    assert json.loads(remote_replay[1].splitlines()[-1]) == {
        "registers": default_rows([0, 0, 0, 200] + [0] * 12)}


@pytest.mark.timeout(30)
def test_demo_text_names_the_port_and_the_device(capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's header says which port it drives and what the device identified as."""
    with sim_process("--pty", "--device-id", "DEMO1") as (port, _):
        status, out, _ = run(capsys, "demo", "--port", port)
    assert status == 0
    assert out.startswith(f"regdev demo: a scripted agent drives the device on {port} through")
    assert re.search(r"\ndevice: regdev sim id=DEMO1 epoch=[0-9A-F]{16}; tools:", out)
    assert "data 0xa5 0xff 0x42 0x00" in out


@pytest.mark.parametrize(
    ("port", "detail"),
    [("/dev/regdev-no-such-port", "No such file or directory"),
     ("bogus://x", "unknown URL scheme")],
)
def test_port_that_cannot_open_is_one_line_exit_2(capsys: pytest.CaptureFixture[str],
                                                   port: str, detail: str) -> None:
    """A misnamed --port is one line on stderr naming the accepted forms, exit 2, nothing run."""
    for command in (["demo"], ["replay", str(EXAMPLES / "wild-calls.jsonl")], ["shell"]):
        status, out, err = run(capsys, *command, "--port", port)
        assert (status, out) == (2, "")
        modbus = f", or a Modbus device: {MODBUS_URL_FORMS}" if "://" in port else ""
        assert err == (f"regdev {command[0]}: error: cannot open port {port}: {detail}; expected "
                       f"{URL_FORMS}{modbus}\n")


def test_a_file_that_is_not_a_serial_port_is_named_so(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    """--port naming a regular file: "not a serial port (the OS's reason)", no errno tuple."""
    plain = tmp_path / "plain.txt"
    plain.write_text("not a tty\n")
    status, out, err = run(capsys, "demo", "--port", str(plain))
    assert (status, out) == (2, "")
    assert err == (f"regdev demo: error: cannot open port {plain}: not a serial port "
                   "(Inappropriate ioctl for device)\n")


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--timeout", "2"], "--timeout goes with --port URL (without --port the device is in "
                          "process)"),
     (["--baud", "9600", "--timeout", "1"], "--timeout and --baud go with --port URL"),
     (["--reset"], "--reset goes with --port URL (without --port the device is in process)"),
     *[(["--port", "loop://", f"--timeout={given}"], "--timeout must be a number of seconds in "
        f"0.001..86400, got {shown}\n")
       for given, shown in (("-5", "-5.0"), ("nan", "nan"), ("inf", "inf"), ("-inf", "-inf"),
                            ("0", "0.0"), ("5e-324", "5e-324"), ("1e-300", "1e-300"),
                            ("0.0000001", "1e-07"), ("0.0009", "0.0009"), ("86401", "86401.0"),
                            ("1e300", "1e+300"))],
     (["--port", "loop://", "--baud", "4000000000"], "--baud must be 1..20000000 (baud), got "
                                                     "4000000000"),
     (["--port", "socket://localhost"], "cannot open port socket://localhost: expected "
                                        "socket://HOST:PORT with a port 1..65535, e.g. "
                                        "socket://127.0.0.1:7000")],
)
def test_port_options_are_checked_before_anything_runs(
        capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    """--timeout, --baud and replay's --reset need --port, and sane values (a timeout in
    0.001..86400 s: no NaN, infinity, zero, subnormal or century), on every command that
    takes them; one line, exit 2, nothing run."""
    for command in (["demo"], ["replay", str(EXAMPLES / "wild-calls.jsonl")], ["shell"],
                    ["serve"], ["call", '{"tool": "read_register", "arguments": {"addr": 0}}'],
                    ["agent", "--model", "m", "--base-url", "http://127.0.0.1:9", "a task"]):
        if "--reset" in argv and command[0] != "replay":
            continue
        status, out, err = run(capsys, *command, *argv)
        assert (status, out) == (2, "")
        assert err.startswith(f"regdev {command[0]}: error: {message}")
        assert err.count("\n") == 1


@pytest.mark.timeout(30)
def test_call_runs_on_the_device_at_port(capsys: pytest.CaptureFixture[str]) -> None:
    """regdev call --port URL RAW runs the call on that device: a write is there for the next
    call's read (it took no --port, and said the JSON was an unrecognized argument)."""
    write = '{"tool": "write_register", "arguments": {"addr": 3, "data": 251}}'
    read = '{"tool": "read_register", "arguments": {"addr": 3}}'
    with sim_thread() as url:
        assert run(capsys, "call", "--port", url, write) == (
            0, '{"ok":true,"tool":"write_register","result":{"addr":3,"data":251}}\n', "")
        assert run(capsys, "call", "--port", url, "--timeout", "2", "--baud", "9600", read) == (
            0, '{"ok":true,"tool":"read_register","result":{"addr":3,"data":251}}\n', "")


def test_every_command_that_runs_calls_takes_the_device_options() -> None:
    """call, shell, demo, replay, agent and serve all take --port, --map, --timeout and --baud,
    from one definition."""
    parser = build_parser()
    sub = next(action for action in parser._actions
               if isinstance(action, argparse._SubParsersAction))
    for command in ("call", "shell", "demo", "replay", "agent", "serve"):
        options = {option for action in sub.choices[command]._actions
                   for option in action.option_strings}
        assert {"--port", "--map", "--timeout", "--baud"} <= options, command


def test_refused_connection_does_not_list_the_url_forms(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A well-formed URL whose server is not there: the cause alone, one line, exit 2."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"socket://127.0.0.1:{probe.getsockname()[1]}"
    status, out, err = run(capsys, "demo", "--port", url)
    assert (status, out, err) == (2, "", f"regdev demo: error: cannot open port {url}: "
                                         "Connection refused\n")


def test_demo_and_replay_help_name_both_devices() -> None:
    """demo and replay --help say they run in process or on the device at --port."""
    for command in ("demo", "replay"):
        done = subprocess.run([str(REGDEV), command, "--help"], capture_output=True, text=True,
                              check=True)
        text = " ".join(done.stdout.split())
        assert "in-process" in text and "the device at --port" in text


@pytest.mark.timeout(30)
def test_silent_device_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A port whose device never answers: the demo stops at identify with one line, exit 2."""
    with sim_process("--pty", "--fault", "drop=1") as (port, _):
        status, out, err = run(capsys, "demo", "--port", port, "--timeout", "0.1")
    assert (status, out) == (2, "")
    assert err.startswith(f"regdev demo: error: the device on {port} failed: no valid reply")
    assert err.count("\n") == 1


@pytest.mark.timeout(30)
def test_shell_runs_every_command_through_the_gate() -> None:
    """The shell shows each verdict: accepted reads and writes, refusals, dump, reset, errors."""
    script = ("read 3\nwrite 3 0xc8\nread 0x03\nwrite 0x1f 1\nwrite 3 300\nread three\n"
              "dump\nreset\nread 3\nidentify\nfly\nhelp\nquit\nread 3\n")
    with sim_process("--pty", "--device-id", "SHELL1") as (port, _):
        done = subprocess.run([str(REGDEV), "shell", "--port", port, "--timeout", "2"],
                              input=script, capture_output=True, text=True, timeout=30,
                              check=False)
    assert (done.returncode, done.stderr) == (1, "")  # 1: some commands were refused
    lines = done.stdout.splitlines()
    assert lines[0] == f"regdev shell on {port}. Type help for the commands, quit to leave."
    said = re.fullmatch(r"accepted  identify_device: regdev sim id=SHELL1 epoch=([0-9A-F]{16})",
                        lines[1])
    assert said is not None
    assert lines[2:8] == [
        "accepted  read_register: register 3 = 0x00 (0)",
        "accepted  write_register: register 3 = 0xc8 (200)",
        "accepted  read_register: register 3 = 0xc8 (200)",
        "refused   validate/range-addr (retryable): addr 31 is outside 0..15",
        "refused   validate/range-data (retryable): data 300 is outside 0..255",
        "error: ADDR must be a number like 3 or 0x1f, got `three`",
    ]
    assert lines[8:11] == ["accepted  dump_registers", "  addr    0    1    2    3    4    5"
                           "    6    7", "  data 0x00 0x00 0x00 0xc8 0x00 0x00 0x00 0x00"]
    assert lines[13:15] == [
        "accepted  reset_device: every register holds its reset value",
        "accepted  read_register: register 3 = 0x00 (0)",
    ]
    again = re.fullmatch(r"accepted  identify_device: regdev sim id=SHELL1 epoch=([0-9A-F]{16})",
                         lines[15])
    assert again is not None and again[1] != said[1]  # the reset began a new epoch
    assert lines[16] == "error: unknown command `fly`; type help"
    assert "write ADDR DATA   write_register" in done.stdout
    assert lines[-1].startswith("every command is a tool call")  # nothing ran after quit


@pytest.mark.timeout(60)
def test_ctrl_c_in_the_shell_cancels_the_command_not_the_shell() -> None:
    """Ctrl-C while a command waits for the device cancels that command; the shell goes on."""
    # Replies: 1 the identify that synchronises the line on open, 2 the map check on
    # connect, 3 the shell's identify, 4 read 3: 3 s late.
    args = ["--pty", "--fault", "delay=1", "--fault-after", "3", "--fault-count", "1",
            "--delay", "3", "-v"]
    with sim_process(*args) as (port, simulator):
        # The shell's own environment: stdout a pipe, block-buffered (no PYTHONUNBUFFERED),
        # SIGINT at its default even when the tests run as a background job.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        shell = subprocess.Popen(default_signals([str(REGDEV), "shell", "--port", port,
                                                  "--timeout", "10"]),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env)
        assert shell.stdin is not None and shell.stdout is not None
        shell.stdin.write("read 3\nwrite 4 4\nread 4\n")
        shell.stdin.close()
        assert shell.stdout.readline().startswith("regdev shell on")
        assert shell.stdout.readline().startswith("accepted  identify_device")
        assert simulator.stderr is not None
        while " R 03*" not in (logged := simulator.stderr.readline()):  # the simulator logs the
            assert logged, "the simulator stopped before read 3 came"  # frame it received
        shell.send_signal(signal.SIGINT)  # read 3 is sent and waits 3 s for its reply
        shell.stdin = None  # closed above; communicate() only reads
        out, err = shell.communicate(timeout=30)
    assert (shell.returncode, err) == (1, "")  # 1: a command was interrupted
    assert out.splitlines() == ["interrupted",
                                "accepted  write_register: register 4 = 0x04 (4)",
                                "accepted  read_register: register 4 = 0x04 (4)"]


def test_shell_without_a_port_drives_the_in_process_device() -> None:
    """With no --port the shell runs on an in-process register file; EOF ends it with 0."""
    done = subprocess.run([str(REGDEV), "shell"], input="write 1 2\nread 1\n",
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0
    assert done.stdout.splitlines()[2:] == [
        "accepted  write_register: register 1 = 0x02 (2)",
        "accepted  read_register: register 1 = 0x02 (2)"]


def test_shell_greets_a_session_that_cannot_identify_with_its_tools(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A session not offered identify_device is not greeted with a refusal: the greeting
    names the tools it may call, and the commands run as usual."""
    monkeypatch.setattr("sys.stdin", io.StringIO("read 1\nwrite 1 2\n"))
    status, out, err = run(capsys, "shell", "--policy", str(EXAMPLES / "policy.toml"),
                           "--session", "reader")
    assert (status, err) == (1, "")  # 1: write was refused
    assert out.splitlines()[1:] == [
        "session reader may call read_register; other commands are refused",
        "accepted  read_register: register 1 = 0x00 (0)",
        'refused   validate/unknown-tool (retryable): unknown tool "write_register"; available '
        "tools: read_register"]


@pytest.mark.timeout(30)
def test_regdev_firmware_sim_prints_the_url_first_and_stops_on_ctrl_c() -> None:
    """`regdev firmware-sim --tcp` prints socket://... first, serves, and exits 0 on SIGINT."""
    process = subprocess.Popen([str(REGDEV), "firmware-sim", "--tcp", "127.0.0.1:0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    url = process.stdout.readline().strip()
    assert url.startswith("socket://127.0.0.1:")
    try:
        with SerialDevice(url, timeout=2) as device:
            assert is_sim_identity(device.identify())
    finally:
        process.send_signal(signal.SIGINT)
        status = process.wait(timeout=10)
    assert status == 0 and process.stderr.read() == ""
    process.stdout.close()
    process.stderr.close()


def test_firmware_sim_help_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """`regdev firmware-sim --help` shows the simulator's options and what each fault kind
    does; a bad option exits 2."""
    assert main(["firmware-sim", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: regdev firmware-sim")
    assert "--fault KIND=RATE" in out and "--link PATH" in out
    assert set(FAULT_HELP) == set(sim.FAULT_KINDS)  # a new kind needs its line
    text = " ".join(out.split())
    for kind, effect in FAULT_HELP.items():
        assert f" {kind} {effect}" in text
    with pytest.raises(SystemExit) as info:
        main(["firmware-sim", "--pty", "--fault", "meteor=1"])
    assert info.value.code == 2
    assert "expected KIND=RATE" in capsys.readouterr().err


def test_help_lists_the_serial_commands() -> None:
    """regdev --help lists shell and firmware-sim; demo --help documents --port."""
    done = subprocess.run([str(REGDEV), "--help"], capture_output=True, text=True, check=True)
    assert "shell" in done.stdout and "firmware-sim" in done.stdout
    done = subprocess.run([str(REGDEV), "demo", "--help"], capture_output=True, text=True,
                          check=True)
    assert "--port URL" in done.stdout and "--timeout SECONDS" in done.stdout


@pytest.mark.timeout(30)
def test_replay_reset_ends_the_keys_of_the_port(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """replay --reset records the reset: a keyed write replayed after it runs on the device
    again (the bug: "done" was replayed and the register kept its reset value)."""
    replay = tmp_path / "keyed.jsonl"
    replay.write_text(json.dumps({"raw": json.dumps({
        "tool": "write_register", "arguments": {"addr": 3, "data": 200},
        "idempotency_key": "k"})}) + "\n")
    audit = str(tmp_path / "audit.db")
    with sim_process("--pty") as (port, _):
        first = run(capsys, "replay", str(replay), "--json", "--port", port, "--audit", audit)
        again = run(capsys, "replay", str(replay), "--json", "--port", port, "--audit", audit)
        reset = run(capsys, "replay", str(replay), "--json", "--port", port, "--audit", audit,
                    "--reset")
        with SerialDevice(port, timeout=2) as device:
            registers = device.snapshot()
    assert [status for status, _, _ in (first, again, reset)] == [0, 0, 0]
    assert [record.replay for record in read_audit(audit)] == [False, True, False]
    assert json.loads(reset[1].splitlines()[-1]) == {
        "registers": default_rows([0, 0, 0, 200] + [0] * 12)}
    assert registers[3] == 200


@pytest.mark.timeout(30)
def test_shell_reset_is_recorded_in_the_audit_log(tmp_path: Path) -> None:
    """The shell's reset ends the keys of the device's epoch (a row in device_resets), and each
    record names the device by the id it says, with its epoch: a new one after the reset."""
    audit = tmp_path / "audit.db"
    with sim_process("--pty", "--device-id", "SHELL2") as (port, _):
        done = subprocess.run([str(REGDEV), "shell", "--port", port, "--audit", str(audit)],
                              input="write 3 9\nreset\nread 3\n", capture_output=True,
                              text=True, timeout=30, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[-2] == (
        "accepted  reset_device: every register holds its reset value")
    conn = sqlite3.connect(audit)
    resets = conn.execute("SELECT device FROM device_resets").fetchall()
    conn.close()
    records = read_audit(audit)
    assert [r.tool for r in records] == ["identify_device", "write_register", "reset_device",
                                         "read_register"]
    assert {r.device for r in records} == {"SHELL2"}
    before, after = records[1].device_epoch, records[3].device_epoch
    assert before is not None and after is not None and before != after
    assert resets == [(f"SHELL2@{before}",)]


class _NoDumpFirmware(sim.Firmware):
    """The simulator's firmware refusing every register dump (``e ADDR``), all else as usual."""

    def answer(self, request: wire.Request) -> wire.Reply:
        if isinstance(request, wire.DumpRequest):
            return wire.ErrorReply(request.seq, "ADDR")
        return super().answer(request)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("json_output", [False, True], ids=["text", "json"])
def test_replay_keeps_its_results_when_the_register_dump_fails(
        capsys: pytest.CaptureFixture[str], json_output: bool) -> None:
    """Every line ran but the dump fails: the results and summary, then one error line, exit 2."""
    wild = str(EXAMPLES / "wild-calls.jsonl")
    with sim_thread(_NoDumpFirmware()) as port:
        status, out, err = run(capsys, "replay", wild, "--port", port,
                               *(["--json"] if json_output else []))
    assert status == 2
    assert err.count("\n") == 1
    assert err.startswith(f"regdev replay: error: the registers could not be read after the "
                          f"replay: the device on {port} failed: ")
    if json_output:
        rows = [json.loads(line) for line in out.splitlines()]
        assert len(rows) == 19 and all(row["expect_met"] for row in rows[:-1])
        assert rows[-1] == {"registers": None, "error": err.removeprefix(
            "regdev replay: error: ").rstrip("\n")}
    else:
        assert "\n18 calls, 18 with expectations, 0 not met\n" in out
        assert "registers after the replay" not in out
