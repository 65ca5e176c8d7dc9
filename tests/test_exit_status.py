"""Exit statuses: one table (EXIT_STATUS) is what every command's --help and docs/cli.md say,
and every status in it is what the command does, tried command by command."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT
from regdev import AuditLog, Gate, RegisterFile
from regdev.cli._common import EXIT_STATUS
from regdev.cli._main import COMMANDS, build_parser, main
from support.firmware import SIM
from support.firmware_c import make, need
from support.provider_server import ProviderServer, Reply, error_reply, openai_turn
from support.recorded_models import responder

REGDEV = Path(sys.executable).parent / "regdev"
READ = '{"tool": "read_register", "arguments": {"addr": 1}}'
BAD = '{"tool": "read_register", "arguments": {"addr": 16}}'


def words(text: str) -> str:
    return " ".join(text.split())


# --- one table, said in three places --------------------------------------------------------------


def test_every_command_has_its_statuses() -> None:
    """Each command of `regdev` has a row in the table, and nothing else does."""
    sub = next(action for action in build_parser()._actions
               if isinstance(action, argparse._SubParsersAction))
    assert list(EXIT_STATUS) == list(sub.choices) and len(COMMANDS) == len(EXIT_STATUS)


@pytest.mark.parametrize("command", EXIT_STATUS)
def test_help_ends_with_the_statuses_of_the_table(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    """`regdev COMMAND --help` lists each status and its meaning from the table."""
    try:
        status = main([command, "--help"])  # firmware-sim prints the simulator's own help
    except SystemExit as stop:  # argparse's --help
        status = stop.code  # type: ignore[assignment]
    assert status in (0, None)
    shown = words(capsys.readouterr().out)
    listed = words("Exit status: " + "; ".join(f"{status} {meaning}"
                                                for status, meaning in EXIT_STATUS[command]))
    assert listed in shown.replace("- ", "-")  # argparse may wrap at a hyphen


def test_docs_list_exactly_the_statuses_of_the_table() -> None:
    """docs/cli.md's table is the code's table, row for row."""
    page = (ROOT / "docs" / "cli.md").read_text()
    rows = re.findall(r"^\| `([\w-]+)` \| (\d+) \| (.+) \|$", page, re.MULTILINE)
    assert rows == [(command, str(status), meaning)
                    for command, entries in EXIT_STATUS.items()
                    for status, meaning in entries]


def test_the_top_level_help_points_to_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """`regdev --help` says that the statuses are per command and where they are."""
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = words(capsys.readouterr().out)
    assert "Each command's --help says what its statuses mean; all in docs/cli.md." in shown


# --- each status of each command, tried -----------------------------------------------------------

Case = Callable[[pytest.CaptureFixture[str], pytest.MonkeyPatch, Path], int]
#: (command, the status it must exit with, what makes it do so)
CASES: list[tuple[str, int, Case]] = []


def case(command: str, status: int) -> Callable[[Case], Case]:
    def add(function: Case) -> Case:
        CASES.append((command, status, function))
        return function
    return add


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> int:
    status = main(list(argv))
    capsys.readouterr()
    return status


def _closed_stdout(*argv: str) -> int:
    """Run regdev with standard output closed (`>&-`): a write that fails."""
    done = subprocess.run(["/bin/sh", "-c", '"$0" "$@" >&-', str(REGDEV), *argv],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=120,
                          check=False, env=os.environ | {"REGDEV_AUDIT": ""})
    assert b"cannot write the output: standard output is closed" in done.stderr
    return done.returncode


def _interrupt(monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    def stop(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt
    monkeypatch.setattr(target, stop)


def _policy(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return str(path)


class _Failing(RegisterFile):
    """A device whose writes the device refuses (the demo's writes get device-error)."""

    def write(self, addr: int, data: int) -> int:
        from regdev.core._errors import DeviceRefused  # noqa: PLC0415
        raise DeviceRefused("the register is locked")


# demo
case("demo", 0)(lambda c, m, t: _run(c, "demo", "--no-audit"))
case("demo", 1)(lambda c, m, t: _run(c, "demo", "--no-audit", "--policy",
                                     str(EXAMPLES / "policy.toml"), "--session", "viewer"))
case("demo", 2)(lambda c, m, t: _run(c, "demo", "--no-audit", "--port", "nowhere://x"))


@case("demo", 1)
def _demo_device_failure(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    m.setattr("regdev.cli._demo.port_device", lambda args: _Failing())
    return _run(c, "demo", "--no-audit")


@case("demo", 130)
def _demo_interrupted(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    _interrupt(m, "regdev.cli._demo.run_loop")
    return _run(c, "demo", "--no-audit")


# replay
def _replay_file(tmp_path: Path, *lines: dict[str, object]) -> str:
    path = tmp_path / "calls.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


case("replay", 0)(lambda c, m, t: _run(c, "replay", "--no-audit",
                                       str(EXAMPLES / "wild-calls.jsonl")))
case("replay", 1)(lambda c, m, t: _run(c, "replay", "--no-audit", _replay_file(
    t, {"raw": BAD, "expect": "ok"})))
case("replay", 2)(lambda c, m, t: _run(c, "replay", "--no-audit", _replay_file(
    t, {"raw": READ, "expect": "range-adr"})))


@case("replay", 130)
def _replay_interrupted(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    _interrupt(m, "regdev.gate._gate.Gate.handle")
    return _run(c, "replay", "--no-audit", _replay_file(t, {"raw": READ}))


# call
case("call", 0)(lambda c, m, t: _run(c, "call", "--no-audit", READ))
case("call", 1)(lambda c, m, t: _run(c, "call", "--no-audit", BAD))
case("call", 2)(lambda c, m, t: _run(c, "call", "--no-audit", READ, "--session", "nobody"))


@case("call", 130)
def _call_interrupted(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    _interrupt(m, "regdev.gate._gate.Gate.handle")
    return _run(c, "call", "--no-audit", READ)


# shell
def _shell(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, text: str,
           *argv: str) -> int:
    import io  # noqa: PLC0415
    m.setattr("sys.stdin", io.StringIO(text))
    return _run(c, "shell", "--no-audit", *argv)


case("shell", 0)(lambda c, m, t: _shell(c, m, "read 1\n\nwrite 1 2\nquit\nread 16\n"))
case("shell", 1)(lambda c, m, t: _shell(c, m, "read 1\nread 16\nread 2\n"))
case("shell", 2)(lambda c, m, t: _shell(c, m, "", "--baud", "9600"))


@case("shell", 1)
def _shell_not_understood(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch,
                          t: Path) -> int:
    return _shell(c, m, "read 1\nfly\n")


@case("shell", 130)
def _shell_interrupted(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    _interrupt(m, "regdev.cli._shell.run_shell")
    return _shell(c, m, "read 1\n")


# firmware-sim
@case("firmware-sim", 0)
def _sim_stopped(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    process = subprocess.Popen([str(REGDEV), "firmware-sim", "--tcp", "127.0.0.1:0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    try:
        assert process.stdout.readline().startswith(b"socket://")
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


#: An AVR program that sleeps with interrupts off: simavr stops it at once (cpu_Done).
_STOPPING_IMAGE = ".global main\nmain:\n  cli\n  sleep\n  rjmp main\n"


@case("firmware-sim", 1)
def _sim_image_stopped(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    """`regdev firmware-sim --avr` whose image stops: the harness's 1 is the command's."""
    need("avr")
    make(t / "build", "sim")
    source = t / "stop.S"
    source.write_text(_STOPPING_IMAGE)
    subprocess.run(["avr-gcc", "-mmcu=atmega328p", "-o", str(t / "stop.elf"), str(source)],
                   check=True)
    script = (  # the simulator module loaded first, its build pointed at the stopping image
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('regdev_firmware_sim', {str(SIM)!r})\n"
        "sim = importlib.util.module_from_spec(spec)\n"
        "sys.modules[spec.name] = sim\n"
        "spec.loader.exec_module(sim)\n"
        f"sim.avr_build = lambda *a, **k: ({str(t / 'build' / 'sim' / 'regdev-simavr')!r}, "
        f"{str(t / 'stop.elf')!r})\n"
        "from regdev.cli._main import main\n"
        "raise SystemExit(main(['firmware-sim', '--avr']))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert "the image stopped (slept with interrupts off)" in done.stderr
    return done.returncode


case("firmware-sim", 2)(lambda c, m, t: subprocess.run(
    [str(REGDEV), "firmware-sim", "--tcp", "nohost"], capture_output=True, timeout=60,
    check=False).returncode)


# map
case("map", 0)(lambda c, m, t: _run(c, "map", str(EXAMPLES / "sensor.rdl")))
case("map", 1)(lambda c, m, t: _closed_stdout("map", str(EXAMPLES / "sensor.rdl")))
case("map", 2)(lambda c, m, t: _run(c, "map", str(t / "missing.json")))
case("map", 2)(lambda c, m, t: _run(c, "map", str(EXAMPLES / "sensor.rdl"), "-o",
                                    str(t / "no" / "such" / "dir.json")))


@case("map", 130)
def _map_interrupted(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    _interrupt(m, "regdev.cli._map.format_map")
    return _run(c, "map", str(EXAMPLES / "sensor.rdl"))


# tools
case("tools", 0)(lambda c, m, t: _run(c, "tools"))
case("tools", 1)(lambda c, m, t: _closed_stdout("tools"))
case("tools", 2)(lambda c, m, t: _run(c, "tools", "--policy", _policy(t, "sessions = 3\n")))


@case("tools", 130)
def _tools_interrupted(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    _interrupt(m, "regdev.cli._tools.tool_definitions")
    return _run(c, "tools")


# serve
@case("serve", 0)
def _serve_end_of_input(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    return subprocess.run([str(REGDEV), "serve", "--no-audit"], input=b"",
                          capture_output=True, timeout=60, check=False).returncode


case("serve", 2)(lambda c, m, t: _run(c, "serve", "--no-audit", "--baud", "9600"))


@case("serve", 1)
def _serve_output_fails(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "0"}}}
    if not os.path.exists("/dev/full"):  # every write to it fails with ENOSPC
        pytest.skip("no /dev/full")
    with open("/dev/full", "wb") as out:
        return subprocess.run([str(REGDEV), "serve", "--no-audit"],
                              input=json.dumps(hello).encode() + b"\n", stdout=out,
                              stderr=subprocess.PIPE, timeout=60, check=False).returncode


# audit
def _db(tmp_path: Path) -> str:
    """An audit log holding one call."""
    path = tmp_path / "audit.db"
    with Gate(audit=AuditLog(path)) as gate:
        gate.handle(READ)
    return str(path)


case("audit", 0)(lambda c, m, t: _run(c, "audit", "--db", _db(t)))
case("audit", 0)(lambda c, m, t: _run(c, "audit", "--db", _db(t), "--code", "range-addr"))
case("audit", 1)(lambda c, m, t: _closed_stdout("audit", "--db", _db(t)))
@case("audit", 1)
def _audit_damaged(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    """A record another program wrote (its arguments not JSON) cannot be exported."""
    db = _db(t)
    with sqlite3.connect(db) as conn:  # an INSERT: the append-only triggers allow it
        conn.execute("INSERT INTO calls (time, event, session, ok, replay, tool, arguments) "
                     "VALUES (1.0, 'call', 'x', 0, 0, 'read_register', '{\"addr\": 1e')")
    return _run(c, "audit", "--db", db, "--json")


case("audit", 2)(lambda c, m, t: _run(c, "audit", "--last", "0"))
case("audit", 2)(lambda c, m, t: _run(c, "audit", "--db", str(t / "none.db")))


@case("audit", 130)
def _audit_interrupted(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    _interrupt(m, "regdev.cli._audit.read_audit")
    return _run(c, "audit", "--db", _db(t))


# compile
case("compile", 0)(lambda c, m, t: _run(c, "compile", "-o", str(t / "v.py")))
case("compile", 1)(lambda c, m, t: _closed_stdout("compile"))
case("compile", 2)(lambda c, m, t: _run(c, "compile", "--tools", str(t / "missing.json")))


@case("compile", 130)
def _compile_interrupted(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch,
                         t: Path) -> int:
    _interrupt(m, "regdev.cli._compile.generate_source")
    return _run(c, "compile")


# agent (a local stand-in for the provider's API)
def _agent(c: pytest.CaptureFixture[str], replies: list[Reply], *argv: str) -> int:
    with ProviderServer(replies) as server:
        return _run(c, "agent", "--model", "recorded", "--base-url", server.openai_url,
                    "--max-retries", "0", "--no-audit", *argv, "Read register 1.")


case("agent", 0)(lambda c, m, t: _agent(c, [
    openai_turn([("c1", "read_register", '{"addr": 1}')]), openai_turn(content="It is 0.")]))
case("agent", 1)(lambda c, m, t: _agent(c, [error_reply(401, "bad key")]))
case("agent", 1)(lambda c, m, t: _agent(c, [
    openai_turn([("c1", "read_register", '{"addr": 1}')])] * 2, "--max-steps", "2"))
case("agent", 2)(lambda c, m, t: _agent(c, [], "--max-steps", "0"))


@case("agent", 130)
def _agent_interrupted(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    _interrupt(m, "regdev.cli._agent.run_agent")
    return _agent(c, [])


# eval (recorded models through a local stand-in for the provider's API)
def _eval(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, sloppy: bool,
          *argv: str) -> int:
    pytest.importorskip("openai", reason="the models extra is not installed")
    m.setenv("OPENAI_API_KEY", "sk-test")
    with ProviderServer(responder(sloppy=sloppy)) as server:
        return _run(c, "eval", "--model", "m", "--base-url", server.openai_url,
                    "--max-retries", "0", "-k", "1", "--no-audit", "--quiet", *argv)


case("eval", 0)(lambda c, m, t: _eval(c, m, False))
case("eval", 1)(lambda c, m, t: _eval(c, m, True))
case("eval", 2)(lambda c, m, t: _eval(c, m, False, "-k", "0"))


@case("eval", 130)
def _eval_interrupted(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    _interrupt(m, "regdev.cli._eval.run_eval")
    return _eval(c, m, False)


# report
case("report", 0)(lambda c, m, t: _run(c, "report", "--db", _db(t)))
case("report", 1)(lambda c, m, t: _closed_stdout("report", "--db", _db(t)))
case("report", 2)(lambda c, m, t: _run(c, "report", "--db", str(t / "none.db")))


@case("report", 130)
def _report_interrupted(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    _interrupt(m, "regdev.cli._report.read_audit")
    return _run(c, "report", "--db", _db(t))


# bench
def _bench_with(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, agree: bool) -> int:
    import regdev.bench._bench as bench  # noqa: PLC0415
    from regdev.bench._bench import Contender, contenders  # noqa: PLC0415
    peers = [contenders()[0]]
    if not agree:
        peers.append(Contender("yes", "yes 1.0", raw=False, on_refusal="bool",
                               run=lambda value: None, valid=lambda value: True, version="1.0"))
    m.setattr(bench, "contenders", lambda: peers)
    return _run(c, "bench", "--quick")


case("bench", 0)(lambda c, m, t: _bench_with(c, m, agree=True))
case("bench", 1)(lambda c, m, t: _bench_with(c, m, agree=False))
case("bench", 2)(lambda c, m, t: _run(c, "bench", "--rounds", "0"))


@case("bench", 130)
def _bench_interrupted(c: pytest.CaptureFixture[str], m: pytest.MonkeyPatch, t: Path) -> int:
    _interrupt(m, "regdev.bench._bench.run_bench")
    return _run(c, "bench", "--quick")


def test_every_status_of_the_table_is_tried() -> None:
    """No status is documented without a case above that produces it, and no case tries a
    status the table does not document."""
    documented = {(command, status) for command, entries in EXIT_STATUS.items()
                  for status, _ in entries}
    assert {(command, status) for command, status, _ in CASES} == documented


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tried", CASES, ids=[f"{c}-{s}-{n}" for n, (c, s, _) in enumerate(CASES)])
def test_the_command_exits_with_the_status(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        tried: tuple[str, int, Case]) -> None:
    """The case for (command, status) makes the command exit with that status."""
    _, status, function = tried
    assert function(capsys, monkeypatch, tmp_path) == status
