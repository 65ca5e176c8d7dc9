"""The command line against Modbus: demo, replay, shell and serve run unchanged on a
modbus+tcp:// or modbus+rtu:// port; regdev firmware-sim --modbus-tcp / --modbus-rtu."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES, default_rows, run
from regdev.cli._main import main
from regdev_modbus_sim import Background
from support.modbus_servers import Plain, modbus_sim_process

REGDEV = Path(sys.executable).parent / "regdev"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", [("--modbus-tcp", "127.0.0.1:0"), ("--modbus-rtu", "--pty")])
def test_demo_and_replay_over_modbus_match_in_process(capsys: pytest.CaptureFixture[str],
                                                      where: tuple[str, str]) -> None:
    """demo --port and replay --port on the Modbus simulator (another process) print what
    the in-process runs print."""
    wild = str(EXAMPLES / "wild-calls.jsonl")
    local_demo = run(capsys, "demo", "--json")
    local_replay = run(capsys, "replay", wild, "--json")
    with modbus_sim_process(*where) as url:
        assert url.startswith(("modbus+tcp://127.0.0.1:", "modbus+rtu:///dev/"))
        assert run(capsys, "demo", "--json", "--port", url, "--timeout", "5") == local_demo
        remote_replay = run(capsys, "replay", wild, "--json", "--port", url, "--reset",
                            "--timeout", "5")
    assert remote_replay == local_replay
    assert json.loads(remote_replay[1].splitlines()[-1]) == {
        "registers": default_rows([0, 0, 0, 200] + [0] * 12)}


@pytest.mark.timeout(60)
def test_shell_over_modbus_tcp_against_pymodbus() -> None:
    """The shell on a plain pymodbus server: identify (from the URL), reads, writes, dump,
    reset, and a refusal that never reaches the device."""
    script = "identify\nwrite 3 0xc8\nread 3\nwrite 3 300\ndump\nreset\nread 3\nquit\n"
    with Plain("tcp") as plain:
        done = subprocess.run([str(REGDEV), "shell", "--port", plain.url, "--timeout", "5",
                               "--no-audit"], input=script, capture_output=True, text=True,
                              timeout=60, check=False)
        executed = dict(plain.executed)
    assert (done.returncode, done.stderr) == (1, "")  # 1: write 3 300 was refused
    lines = done.stdout.splitlines()
    port = plain.url.split("//")[1].split("?")[0]
    assert lines[0] == f"regdev shell on {plain.url}. Type help for the commands, quit to leave."
    identity = (f"accepted  identify_device: Modbus TCP {port}, unit 1, 16 x 8-bit in "
                "holding registers 0..15")
    assert lines[1:] == [
        identity,  # the greeting
        identity,
        "accepted  write_register: register 3 = 0xc8 (200)",
        "accepted  read_register: register 3 = 0xc8 (200)",
        "refused   validate/range-data (retryable): data 300 is outside 0..255",
        "accepted  dump_registers",
        "  addr    0    1    2    3    4    5    6    7",
        "  data 0x00 0x00 0x00 0xc8 0x00 0x00 0x00 0x00",
        "  addr    8    9   10   11   12   13   14   15",
        "  data 0x00 0x00 0x00 0x00 0x00 0x00 0x00 0x00",
        "accepted  reset_device: every register holds its reset value",
        "accepted  read_register: register 3 = 0x00 (0)",
    ]
    assert executed == {(6, 3, (200,)): 1, (16, 0, (0,) * 16): 1}


@pytest.mark.timeout(60)
def test_serve_runs_the_calls_on_a_modbus_device(tmp_path: Path) -> None:
    """regdev serve --port modbus+rtu://PTY: a tools/call write reaches pymodbus's server."""
    from test_mcp import sdk_client  # noqa: PLC0415 - its MCP client helper

    with Plain("pty") as plain, sdk_client(tmp_path, "--port", plain.url, "--no-audit") as client:
        written = client.call("write_register", {"addr": 9, "data": 0x5A})
        read = client.call("read_register", {"addr": 9})
        refused = client.call("write_register", {"addr": 9, "data": 256})
        executed = dict(plain.executed)
    assert written.structured_content == {"ok": True, "tool": "write_register",
                                          "result": {"addr": 9, "data": 0x5A}}
    assert read.structured_content == {"ok": True, "tool": "read_register",
                                       "result": {"addr": 9, "data": 0x5A}}
    assert refused.is_error is True
    assert executed == {(6, 9, (0x5A,)): 1}


@pytest.mark.timeout(30)
def test_a_modbus_port_that_cannot_open_is_one_line_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listening, a bad URL, a baud given twice: one line, exit 2."""
    status, out, err = run(capsys, "demo", "--port", "modbus+tcp://127.0.0.1:1", "--no-audit")
    assert (status, out) == (2, "")
    assert "cannot connect to 127.0.0.1:1" in err and err.count("\n") == 1
    status, _, err = run(capsys, "demo", "--port", "modbus+tcp://h:1?unit=0")
    assert status == 2 and "unit must be an integer 1..255" in err and err.count("\n") == 1
    status, _, err = run(capsys, "demo", "--port", "modbus+rtu:///dev/null?baud=9600",
                         "--baud", "19200")
    assert status == 2 and "give the line speed once" in err and err.count("\n") == 1


@pytest.mark.timeout(30)
def test_firmware_sim_modbus_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """--modbus-rtu needs --pty or --tcp; --registers and --base need a --modbus-* mode; the
    register range is checked. Each is exit 2 with one line."""
    for argv, words in [
        (["--modbus-rtu", "--modbus-tcp", "127.0.0.1:0"], "--modbus-rtu goes with --pty or --tcp"),
        (["--modbus-rtu", "--avr"], "--modbus-rtu goes with --pty or --tcp"),
        (["--tcp", "127.0.0.1:0", "--registers", "8"], "--registers and --base go with"),
    ]:
        with pytest.raises(SystemExit) as info:
            main(["firmware-sim", *argv])
        assert info.value.code == 2
        assert words in capsys.readouterr().err
    status, _, err = run(capsys, "firmware-sim", "--modbus-tcp", "127.0.0.1:0",
                         "--registers", "0")
    assert (status, err) == (2, "regdev firmware-sim: error: --registers 0 from --base 0 is "
                                "not within 0..65535\n")


def test_firmware_sim_without_pymodbus_names_the_install_command() -> None:
    """The Modbus simulator without pymodbus: one line naming pip install 'regdev[modbus]'."""
    code = ("import sys; sys.modules['pymodbus'] = None; sys.path.insert(0, 'firmware-sim'); "
            "import regdev_firmware_sim as s; "
            "sys.exit(s.main(['--modbus-tcp', '127.0.0.1:0'], prog='regdev firmware-sim'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, check=False, cwd=Path(__file__).parent.parent)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "regdev firmware-sim: error: the Modbus simulator needs pymodbus: "
        "pip install 'regdev[modbus]'")


@pytest.mark.timeout(30)
def test_simulator_base_and_registers_are_served() -> None:
    """--base and --registers move and size the holding registers served."""
    from regdev.devices._modbus import ModbusDevice  # noqa: PLC0415
    from regdev_modbus_sim import ModbusModel  # noqa: PLC0415

    with Background("tcp", model=ModbusModel(4, base=100)) as server, ModbusDevice(
            server.url + "?base=100", count=4, timeout=5) as device:
        device.write(3, 9)
        assert device.snapshot() == [0, 0, 0, 9]
        assert server.model.executed[(6, 103, (9,))] == 1


def test_a_modbus_url_typo_is_told_the_modbus_forms(capsys: pytest.CaptureFixture[str]) -> None:
    """--port modbus://HOST:PORT (no +tcp): one line, exit 2, whose hint lists the Modbus forms
    as well as the serial ones."""
    status, out, err = run(capsys, "shell", "--port", "modbus://127.0.0.1:5020")
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith("regdev shell: error: cannot open port modbus://127.0.0.1:5020: ")
    assert "modbus+tcp://HOST[:PORT]?unit=1 or modbus+rtu://PORT?baud=19200&unit=1" in err
    assert "socket://HOST:PORT or rfc2217://HOST:PORT" in err
