"""The command line: demo, replay, call, tools, serve; exit codes; no tracebacks."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, default_rows, run
from regdev import read_audit, tool_definitions
from regdev.agents._shell import shell_call
from regdev.audit import _writer as _audit_writer
from regdev.cli._main import main


def test_demo_shows_acceptance_retry_rejection_and_registers(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The demo shows each kind of outcome and the final register dump."""
    status, out, _ = run(capsys, "demo")
    assert status == 0
    assert "accepted  write_register: register 0 = 0xa5 (165)" in out
    assert "refused   validate/range-data (retryable): data 300 is outside 0..255" in out
    assert "step 4 (retry)" in out
    assert "loop stopped: rejected" in out
    assert "data 0xa5 0xff 0x42 0x00" in out


def test_demo_json(capsys: pytest.CaptureFixture[str]) -> None:
    """--json gives one object per step, then the stop reason and the registers."""
    status, out, _ = run(capsys, "demo", "--json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert status == 0
    assert lines[-2] == {"stop": "rejected", "detail": lines[-2]["detail"], "as_scripted": True}
    assert lines[-1] == {"registers": default_rows([165, 255, 66] + [0] * 13)}
    codes = [line["observation"].get("code") for line in lines[:-2]]
    assert codes == [None, None, "range-data", None, None, None, "type-addr", "range-addr"]


def test_replay_wild_cases_meets_every_expectation(capsys: pytest.CaptureFixture[str]) -> None:
    """The shared wild cases all get their expected verdicts; only accepted writes show."""
    status, out, _ = run(capsys, "replay", str(EXAMPLES / "wild-calls.jsonl"), "--json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert status == 0
    assert all(line["expect_met"] is True for line in lines[:-1])
    assert len(lines) == 19
    assert {"line", "ok", "stage", "code", "message", "result", "expect_met"} <= set(lines[0])
    assert lines[-1] == {"registers": default_rows([0, 0, 0, 200] + [0] * 12)}


def test_replay_reports_unmet_expectations(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    """An unmet expectation exits 1 and says NOT MET."""
    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"raw": "{\\"tool\\": \\"read_register\\", \\"arguments\\": {\\"addr\\": 1}}", '
        '"expect": "range-addr"}\n\n'
        '{"raw": "{\\"tool\\": \\"read_register\\", \\"arguments\\": {\\"addr\\": 1}}", '
        '"result": {"addr": 1, "data": 9}}\n'
        '{"raw": "{}"}\n')
    status, out, _ = run(capsys, "replay", str(path))
    assert status == 1
    assert out.count("NOT MET") == 2
    assert "3 calls, 2 with expectations, 2 not met" in out


def test_replay_dialect_option_and_line_override(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    """--dialect applies to lines without one; a line's own dialect wins."""
    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"raw": "{\\"name\\": \\"read_register\\", \\"arguments\\": {\\"addr\\": 1}}", '
        '"expect": "ok"}\n'
        '{"raw": "{\\"tool\\": \\"read_register\\", \\"arguments\\": {\\"addr\\": 1}}", '
        '"dialect": "canonical", "expect": "ok"}\n')
    assert run(capsys, "replay", str(path), "--dialect", "mcp")[0] == 0
    assert run(capsys, "replay", str(path))[0] == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json\n", "r.jsonl:1: not a replay record"),
        ('{"expect": "ok"}\n',
         "r.jsonl:1: `raw` is required: the model's raw output, a string\n"),
        ('{"raw": "{}"}\n{"raw": 5}\n',
         "r.jsonl:2: `raw` must be a string (the model's raw output), got an integer\n"),
        ('{"raw": "{}"}\n\n{"raw": "{}", "expect": 3}\n',
         'r.jsonl:3: `expect` must be a string ("ok" or a verdict code), got an integer\n'),
        ('{"raw": "{}", "result": [1]}\n',
         "r.jsonl:1: `result` must be an object (the expected result), got an array\n"),
        ('{"raw": "{}", "dialect": 1.5}\n', "r.jsonl:1: `dialect` must be a string (canonical, "
         "mcp, openai, anthropic), got a number\n"),
        ('["raw"]\n', "r.jsonl:1: a replay record is a JSON object, got an array\n"),
        ('{"raw": "{}", "expcet": "ok"}\n', "r.jsonl:1: unknown field `expcet`; a replay "
         "record has raw, dialect, expect, result, why\n"),
        ('{"raw": "{}", "dialect": "xml"}\n', "r.jsonl:1: unknown dialect 'xml'"),
    ],
)
def test_replay_file_errors_exit_2_without_traceback(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, message: str) -> None:
    """A bad replay file names the line and the problem; nothing runs."""
    path = tmp_path / "r.jsonl"
    path.write_text(content)
    status, out, err = run(capsys, "replay", str(path))
    assert status == 2
    assert message in err
    assert out == "" and "Traceback" not in err


def test_replay_file_with_bom_crlf_and_unicode_separators(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A BOM, CRLF line ends and U+2028 inside a JSON string are all fine."""
    raw = '{"tool": "read_register", "arguments": {"addr": 1}, "id": "a\u2028b"}'
    line = json.dumps({"raw": raw, "expect": "ok"}, ensure_ascii=False)
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (line + "\r\n").encode() * 2)
    status, out, err = run(capsys, "replay", str(path), "--json")
    assert (status, err) == (0, "")
    assert [json.loads(x)["line"] for x in out.splitlines()[:-1]] == [1, 2]


def test_replay_non_utf8_line_names_the_line(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    """Invalid UTF-8 is reported with its line number."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"raw": "{}"}\n{"raw": "\xff"}\n')
    status, _, err = run(capsys, "replay", str(path))
    assert status == 2 and "r.jsonl:2: not a replay record" in err


def test_replay_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A missing file is a clear error, exit 2."""
    status, _, err = run(capsys, "replay", str(tmp_path / "nope.jsonl"))
    assert status == 2 and "cannot read" in err and "nope.jsonl" in err


def test_call_prints_the_observation(capsys: pytest.CaptureFixture[str]) -> None:
    """call prints one JSON observation; exit 0 when accepted, 1 when refused."""
    status, out, _ = run(capsys, "call",
                         '{"tool": "write_register", "arguments": {"addr": 3, "data": 255}}')
    assert (status, json.loads(out)) == (0, {"ok": True, "tool": "write_register",
                                            "result": {"addr": 3, "data": 255}})
    status, out, _ = run(capsys, "call", '{"name": "erase_chip", "arguments": {}}',
                         "--dialect", "mcp", "--tool-choice", "write_register")
    assert status == 1 and json.loads(out)["code"] == "wrong-tool"


def test_call_reads_stdin(capsys: pytest.CaptureFixture[str],
                          monkeypatch: pytest.MonkeyPatch) -> None:
    """RAW of - reads the call from standard input."""
    stdin = io.TextIOWrapper(io.BytesIO(b'{"tool": "read_register", "arguments": {}}'))
    monkeypatch.setattr("sys.stdin", stdin)
    status, out, _ = run(capsys, "call", "-")
    assert status == 1 and json.loads(out)["code"] == "missing-addr"


def test_call_reads_stdin_as_bytes_and_caps_it(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Invalid UTF-8 on stdin is not-json, and an endless stdin is too-large, not a hang."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe")))
    status, out, err = run(capsys, "call", "-")
    assert (status, json.loads(out)["code"], err) == (1, "not-json", "")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b" " * 200_000)))
    status, out, _ = run(capsys, "call", "-")
    assert (status, json.loads(out)["code"]) == (1, "too-large")


@pytest.mark.parametrize(("raw", "stdin"), [("-", b""), ("-", b" \n\t\r\n"), ("", b""),
                                          ("  \n", b"")],
                         ids=["stdin-empty", "stdin-blank", "arg-empty", "arg-blank"])
def test_call_with_empty_input_says_so(capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch, raw: str,
                                       stdin: bytes) -> None:
    """Nothing (or only whitespace) to parse: not-json saying the input is empty, exit 1."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    status, out, err = run(capsys, "call", "--no-audit", raw)
    assert (status, err) == (1, "")
    assert out == ('{"ok":false,"stage":"parse","code":"not-json","message":"not one strict '
                   'JSON document: the input is empty; send one JSON object",'
                   '"retryable":true}\n')


def test_replay_dash_reads_standard_input(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`replay -` runs the JSONL on stdin as it runs a file; its errors name <stdin>."""
    wild = (EXAMPLES / "wild-calls.jsonl").read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(wild)))
    status, out, err = run(capsys, "replay", "--no-audit", "--json", "-")
    from_file = run(capsys, "replay", "--no-audit", "--json", str(EXAMPLES / "wild-calls.jsonl"))
    assert (status, out, err) == from_file
    assert (status, json.loads(out.splitlines()[-1])) == (
        0, {"registers": default_rows([0, 0, 0, 200] + [0] * 12)})
    bad = b'{"raw": "{}", "expect": "x"}'
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(bad)))
    assert run(capsys, "replay", "--no-audit", "-") == (
        2, "", "regdev replay: error: <stdin>:1: expect 'x' is not \"ok\" nor a verdict code a "
               "call can get (see docs/errors.md)\n")
    monkeypatch.setattr("sys.stdin", None)
    assert run(capsys, "replay", "--no-audit", "-") == (
        2, "", "regdev replay: error: cannot read the input: standard input is closed\n")


def test_summaries_count_one_in_the_singular(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    """One call replayed, one tool compiled: "1 call", "1 tool", never "1 calls"."""
    replay = _replay_file(tmp_path, {"raw": "{}"})
    status, out, _ = run(capsys, "replay", "--no-audit", replay)
    assert status == 0 and "\n1 call, 0 with expectations, 0 not met\n" in out
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(tool_definitions("mcp")[1:]))
    status, out, err = run(capsys, "compile", "--tools", str(tools), "-o", str(tmp_path / "v.py"))
    assert (status, out, err) == (
        0, "", f"regdev compile: wrote {tmp_path / 'v.py'} (1 tool: read_register); it needs "
               "only the standard library: check(call, tool_choice=None)\n")


@pytest.mark.parametrize("command", [["call", "{}"],
                                     ["replay", str(EXAMPLES / "wild-calls.jsonl")]])
def test_unknown_tool_choice_is_a_usage_error(capsys: pytest.CaptureFixture[str],
                                             audit_path: Path, command: list[str]) -> None:
    """--tool-choice must name an offered tool; checked before anything runs or is recorded."""
    status, out, err = run(capsys, *command, "--tool-choice", "erase_chip")
    assert (status, out) == (2, "")
    assert err == (f"regdev {command[0]}: error: --tool-choice erase_chip is not one of the "
                   "tools offered: write_register, read_register\n")
    assert not audit_path.exists()


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A bad option is a usage error from argparse, exit 2."""
    with pytest.raises(SystemExit) as info:
        main(["call", "{}", "--dialect", "xml"])
    assert info.value.code == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err


def test_console_script_help_lists_commands() -> None:
    """The installed regdev command and python -m regdev both work and list the commands."""
    for argv in (["regdev", "--help"], [sys.executable, "-m", "regdev", "--help"]):
        exe = Path(sys.executable).parent / argv[0] if argv[0] == "regdev" else argv[0]
        done = subprocess.run([str(exe), *argv[1:]], capture_output=True, text=True, check=True)
        for command in ("demo", "replay", "call", "tools", "serve"):
            assert command in done.stdout


@pytest.mark.parametrize("fmt", ["mcp", "openai", "anthropic"])
def test_tools_prints_the_definitions(capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    """tools --format F prints tool_definitions(F) as JSON."""
    status, out, _ = run(capsys, "tools", "--format", fmt)
    assert status == 0
    assert json.loads(out) == tool_definitions(fmt)


def test_tools_defaults_to_mcp(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --format, tools prints the MCP form."""
    _, out, _ = run(capsys, "tools")
    assert json.loads(out)[0]["inputSchema"]["required"] == ["addr", "data"]


def test_serve_without_the_mcp_extra_says_how_to_install_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """No mcp package: one line naming the install command, exit 2, no traceback."""
    monkeypatch.setitem(sys.modules, "mcp", None)
    monkeypatch.setitem(sys.modules, "mcp.server", None)
    monkeypatch.delitem(sys.modules, "regdev.server._mcp", raising=False)
    status, out, err = run(capsys, "serve")
    assert status == 2 and out == ""
    assert err == ("regdev serve: error: the MCP server needs the `mcp` package: pip install "
                   "'regdev[mcp]' (pipx install 'regdev[mcp]' for the command); in a clone of "
                   "regdev, scripts/serve installs it into .venv and runs the server\n")


def test_serve_port_that_cannot_open_is_one_line_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    """serve --port to nothing fails before serving: one line, exit 2, stdout untouched."""
    status, out, err = run(capsys, "serve", "--port", "socket://127.0.0.1:1")
    assert status == 2 and out == ""
    assert err == "regdev serve: error: cannot open port socket://127.0.0.1:1: Connection refused\n"


@pytest.mark.parametrize(
    ("command", "name", "content", "message"),
    [
        (["compile", "--tools"], "tools.json",
         '[{"name": "t", "inputSchema": {"type": "object", "properties": {"x": {"type": '
         '"integer", "maximum": 15, "maximum": 255}}}}]',
         'tools.json: the tool definitions are not JSON: key "maximum" appears twice'),
        (["call", "{}", "--policy"], "policy.json",
         '{"registers": {"read_only": [0]}, "registers": {}}',
         'policy.json: not valid JSON: key "registers" appears twice in one object'),
        (["replay"], "calls.jsonl", '{"raw": "{}", "expect": "ok", "expect": "not-json"}\n',
         'calls.jsonl:1: not a replay record: key "expect" appears twice in one object'),
        (["replay"], "calls.jsonl", '{"raw": "{}", "result": {"addr": NaN}}\n',
         "calls.jsonl:1: not a replay record: NaN, at byte 33, is not a JSON number (JSON has "
         "no NaN or Infinity)"),
    ],
    ids=["compile-tools", "policy", "replay", "replay-nan"])
def test_every_json_file_is_read_strictly(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          command: list[str], name: str, *, content: str,
                                          message: str) -> None:
    """Tool definitions, JSON policies and replay files refuse a repeated key or a NaN, as
    the gate does, instead of keeping the last value: one line, exit 2, nothing run."""
    path = tmp_path / name
    path.write_text(content)
    status, out, err = run(capsys, *command, str(path))
    assert (status, out) == (2, "")
    assert message in err and err.count("\n") == 1


@pytest.fixture
def unwritable_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME is a file (nothing can be created under it, even by root), and nothing names an
    audit path: the default one, ~/.local/state/regdev/audit.db, cannot be opened."""
    home = tmp_path / "home"
    home.write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("REGDEV_AUDIT")
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return home


@pytest.mark.usefixtures("unwritable_home")
@pytest.mark.parametrize("argv", [["demo"], ["call", '{"tool": "read_register", "arguments": '
                                                    '{"addr": 1}}'],
                                  ["replay", str(EXAMPLES / "wild-calls.jsonl")]])
def test_an_unusable_default_audit_path_warns_and_runs_without_one(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """The user asked for no audit path: the default one failing is a one-line warning on
    stderr, and the command runs as usual, without an audit log."""
    status, out, err = run(capsys, *argv)
    assert status == 0
    assert err.startswith(f"regdev {argv[0]}: warning: the default audit log ")
    assert "cannot be used: cannot make the folder " in err
    assert err.endswith("; going on without an audit log (--audit PATH to record one "
                        "elsewhere, --no-audit to say so)\n")
    assert err.count("\n") == 1 and "recorded in the audit log" not in out


def test_an_audit_path_the_user_gave_that_cannot_open_is_an_error(
        capsys: pytest.CaptureFixture[str], unwritable_home: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """--audit PATH or $REGDEV_AUDIT that cannot be opened: one line, exit 2, nothing run."""
    path = str(unwritable_home / "audit.db")
    status, out, err = run(capsys, "demo", "--audit", path)
    assert (status, out) == (2, "")
    assert err.startswith(f"regdev demo: error: cannot open the audit database {path}: ")
    monkeypatch.setenv("REGDEV_AUDIT", path)
    status, out, err = run(capsys, "demo")
    assert (status, out) == (2, "") and err.startswith("regdev demo: error: cannot open")
    status, out, err = run(capsys, "demo", "--no-audit")  # asked for nothing: no warning
    assert (status, err) == (0, "") and "recorded in the audit log" not in out


def test_audit_and_no_audit_are_exclusive(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    """--audit PATH with --no-audit is a usage error, not one of them silently winning."""
    with pytest.raises(SystemExit) as info:
        main(["call", "{}", "--audit", str(tmp_path / "a.db"), "--no-audit"])
    assert info.value.code == 2
    assert "argument --no-audit: not allowed with argument --audit" in capsys.readouterr().err
    assert not (tmp_path / "a.db").exists()


def _regdev(argv: list[str], stdout: int, env_extra: dict[str, str]) -> tuple[int, str]:
    """Run the installed regdev with ``stdout`` as its standard output: (status, stderr)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    done = subprocess.run([str(Path(sys.executable).parent / "regdev"), *argv], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, env=env | env_extra, check=False)
    return done.returncode, done.stderr


@pytest.mark.parametrize("buffering", [{}, {"PYTHONUNBUFFERED": "1"}], ids=["buffered", "unbuf"])
def test_a_closed_output_is_a_failure_without_a_traceback(buffering: dict[str, str]) -> None:
    """Output to a pipe nobody reads (`| true`): exit 1, not 0, and nothing on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        status, err = _regdev(["call", "--no-audit", '{"tool": "x"}'], write_end, buffering)
    finally:
        os.close(write_end)
    assert (status, err) == (1, "")


@pytest.mark.parametrize("buffering", [{}, {"PYTHONUNBUFFERED": "1"}], ids=["buffered", "unbuf"])
def test_a_full_disk_is_one_line_and_exit_1(buffering: dict[str, str]) -> None:
    """Output to /dev/full: one line naming the OS's reason, exit 1, no traceback."""
    with open("/dev/full", "wb") as full:
        status, err = _regdev(["tools", "--format", "mcp"], full.fileno(), buffering)
    assert (status, err) == (1, "regdev tools: error: cannot write the output: "
                                "No space left on device\n")


def test_a_missing_home_is_not_created_for_the_default_audit_log(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """HOME that does not exist: a one-line warning, no log, nothing made. A missing
    $XDG_STATE_HOME is made, as the XDG spec says, with the folders below it, each 0700."""
    monkeypatch.delenv("REGDEV_AUDIT")
    home = tmp_path / "nonexistent"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    status, out, err = run(capsys, "call", '{"tool": "read_register", "arguments": {"addr": 1}}')
    assert (status, json.loads(out)["ok"]) == (0, True)
    assert err == (f"regdev call: warning: the default audit log {home}/.local/state/regdev/"
                   f"audit.db cannot be used: the home directory {home} does not exist; going "
                   "on without an audit log (--audit PATH to record one elsewhere, --no-audit "
                   "to say so)\n")
    assert not home.exists()
    state = tmp_path / "xdg" / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    status, _, err = run(capsys, "call", '{"tool": "read_register", "arguments": {"addr": 1}}')
    assert (status, err) == (0, "")
    assert [r.tool for r in read_audit(state / "regdev" / "audit.db")] == ["read_register"]
    for made in (tmp_path / "xdg", state, state / "regdev"):
        assert made.stat().st_mode & 0o777 == 0o700 & ~current_umask()
    assert not home.exists()


def test_a_default_audit_folder_that_cannot_be_made_is_a_warning(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """$XDG_STATE_HOME under a file: one warning naming the folder and why, no log."""
    monkeypatch.delenv("REGDEV_AUDIT")
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "file" / "state"))
    status, out, err = run(capsys, "call", '{"tool": "read_register", "arguments": {"addr": 1}}')
    assert (status, json.loads(out)["ok"]) == (0, True)
    assert err == (f"regdev call: warning: the default audit log {tmp_path}/file/state/regdev/"
                   f"audit.db cannot be used: cannot make the folder {tmp_path}/file/state: "
                   "Not a directory; going on without an audit log (--audit PATH to record "
                   "one elsewhere, --no-audit to say so)\n")


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("how", ["option", "environment"])
def test_an_audit_path_in_a_missing_directory_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        how: str) -> None:
    """--audit or $REGDEV_AUDIT in a directory that does not exist: exit 2, nothing created."""
    missing = tmp_path / "no" / "dir"
    argv = ["call", "{}"]
    if how == "option":
        argv[1:1] = ["--audit", str(missing / "audit.db")]
    else:
        monkeypatch.setenv("REGDEV_AUDIT", str(missing / "audit.db"))
    status, out, err = run(capsys, *argv)
    assert (status, out) == (2, "")
    assert err == (f"regdev call: error: the directory {missing} does not exist (choose "
                   "another file with --audit PATH, or record nothing with --no-audit)\n")
    assert not (tmp_path / "no").exists()


AUDIT_ADVICE = "(choose another file with --audit PATH, or record nothing with --no-audit)"


def test_an_audit_path_that_is_a_directory_is_named_so(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--audit DIR, or a lock path that is a directory: exit 2, one line, no errno."""
    status, out, err = run(capsys, "call", "--audit", str(tmp_path), "{}")
    assert (status, out, err) == (
        2, "", f"regdev call: error: {tmp_path} is a directory, not a database file "
               f"{AUDIT_ADVICE}\n")
    (tmp_path / "a.db.lock").mkdir()
    status, out, err = run(capsys, "call", "--audit", str(tmp_path / "a.db"), "{}")
    assert (status, out, err) == (
        2, "", f"regdev call: error: cannot open the audit database {tmp_path / 'a.db'}: "
               f"{tmp_path / 'a.db.lock'} is a directory {AUDIT_ADVICE}\n")
    status, out, err = run(capsys, "audit", "--db", str(tmp_path))
    assert (status, out, err) == (
        2, "", f"regdev audit: error: {tmp_path} is a directory, not an audit database\n")


def test_an_audit_path_on_a_read_only_file_system_gives_the_os_reason(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock file cannot be made (EROFS): the OS's words, no errno number or file repeat."""
    def read_only(path: Path) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), f"{path}.lock")

    monkeypatch.setattr(_audit_writer, "take_lock", read_only)
    status, out, err = run(capsys, "call", "--audit", str(tmp_path / "a.db"), "{}")
    assert (status, out, err) == (
        2, "", f"regdev call: error: cannot open the audit database {tmp_path / 'a.db'}: "
               f"Read-only file system {AUDIT_ADVICE}\n")


def _replay_file(tmp_path: Path, *records: dict[str, object]) -> str:
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(path)


READ_1 = json.dumps({"tool": "read_register", "arguments": {"addr": 1}})


def test_replay_refuses_an_expect_that_is_no_verdict_code(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A typo in expect ("range-adr") is a file error naming the line, not a silent NOT MET."""
    path = _replay_file(tmp_path, {"raw": READ_1, "expect": "ok"},
                        {"raw": READ_1, "expect": "range-adr"})
    status, out, err = run(capsys, "replay", path)
    assert (status, out) == (2, "")
    assert err == (f"regdev replay: error: {path}:2: expect 'range-adr' is not \"ok\" nor a "
                   "verdict code a call can get (see docs/errors.md)\n")
    # the codes that name an argument, a tool, or none are all accepted
    path = _replay_file(tmp_path, *({"raw": READ_1, "expect": code} for code in (
        "range-addr", "missing-data", "denied-write_register", "device-busy", "not-json")))
    status, out, _ = run(capsys, "replay", path)
    assert status == 1 and "5 calls, 5 with expectations, 5 not met" in out


@pytest.mark.parametrize("content", ["", "\n\n  \n"], ids=["empty", "blank-lines"])
def test_replay_of_a_file_with_no_calls_is_an_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str) -> None:
    """A replay file without a call says so, exit 2 (not "0 calls", exit 0)."""
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    status, out, err = run(capsys, "replay", str(path))
    assert (status, out) == (2, "")
    assert err == (f"regdev replay: error: {path} holds no calls (one JSON object per line, "
                   'each with at least "raw")\n')


def test_replay_json_rows_say_whether_the_observation_was_replayed(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--json rows carry "replay": the second call with the same idempotency key is one."""
    keyed = json.dumps({"tool": "write_register", "arguments": {"addr": 3, "data": 9},
                        "idempotency_key": "k1"})
    path = _replay_file(tmp_path, {"raw": keyed}, {"raw": keyed}, {"raw": READ_1})
    status, out, _ = run(capsys, "replay", path, "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert status == 0
    assert [(row["ok"], row["replay"]) for row in rows[:-1]] == [
        (True, False), (True, True), (True, False)]


def test_call_with_a_file_name_for_raw_hints_at_stdin(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RAW naming an existing file: still not-json (exit 1), plus a hint on stderr; text that
    cannot be a file name (too long) gets no hint and no error."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "call.json").write_text('{"tool": "read_register", "arguments": {"addr": 1}}')
    status, out, err = run(capsys, "call", "call.json")
    assert (status, json.loads(out)["code"]) == (1, "not-json")
    assert err == ("regdev call: hint: RAW is the call's JSON text; to send a file's contents "
                   "use: regdev call - < call.json\n")
    for raw in ("missing.json", "x" * 5000, "a\x00b"):
        status, out, err = run(capsys, "call", raw)
        assert (status, json.loads(out)["code"], err) == (1, "not-json", "")


def _regdev_closed(argv: list[str], closed: str) -> tuple[int, str, str]:
    """Run the installed regdev from a shell with file descriptor ``closed`` ("1" or "2")
    closed (`>&-`, `2>&-`) and stdin empty: (status, stdout, stderr)."""
    done = subprocess.run(["/bin/sh", "-c", f'"$0" "$@" {closed}>&-',
                           str(Path(sys.executable).parent / "regdev"), *argv],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          env=os.environ | {"REGDEV_AUDIT": ""}, timeout=60, check=False)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("argv", [
    ["call", "--no-audit", '{"tool": "read_register", "arguments": {"addr": 1}}'],
    ["tools"], ["demo", "--no-audit"], ["compile"], ["shell", "--no-audit"],
    ["replay", "--no-audit", str(EXAMPLES / "wild-calls.jsonl")],
], ids=lambda argv: argv[0])
def test_a_closed_stdout_is_one_line_and_exit_1(argv: list[str]) -> None:
    """stdout closed (`>&-`): one line on stderr naming it, exit 1, no traceback."""
    assert _regdev_closed(argv, "1") == (
        1, "", f"regdev {argv[0]}: error: cannot write the output: standard output is closed\n")


@pytest.mark.parametrize(("argv", "name"), [
    (["--help"], "regdev"), (["--version"], "regdev"), (["call", "--help"], "regdev call"),
], ids=["help", "version", "call-help"])
def test_help_and_version_that_cannot_be_written_fail(argv: list[str], name: str) -> None:
    """--help and --version to /dev/full or a closed stdout: one line, exit 1, not 0."""
    with open("/dev/full", "wb") as full:
        assert _regdev(argv, full.fileno(), {}) == (
            1, f"{name}: error: cannot write the output: No space left on device\n")
    assert _regdev_closed(argv, "1") == (
        1, "", f"{name}: error: cannot write the output: standard output is closed\n")


def test_help_and_version_that_are_written_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    """--version written: exit 0 (a SystemExit, as argparse gives), the version on stdout."""
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("regdev ")


def test_serve_with_a_closed_stdout_refuses_to_start() -> None:
    """`regdev serve >&-`: exit 2 at once with one line, before opening the device or log."""
    assert _regdev_closed(["serve", "--no-audit"], "1") == (
        2, "", "regdev serve: error: cannot write the output: standard output is closed\n")


def test_a_closed_stderr_loses_the_message_not_the_status() -> None:
    """stderr closed (`2>&-`): a usage error still exits 2 and writes nothing to stdout."""
    assert _regdev_closed(["replay", "--no-audit", "no-such-file"], "2") == (2, "", "")
    status, out, _ = _regdev_closed(
        ["call", "--no-audit", '{"tool": "read_register", "arguments": {"addr": 1}}'], "2")
    assert (status, json.loads(out)["ok"]) == (0, True)


@pytest.mark.parametrize(("words", "call"), [
    (["read", "3"], {"tool": "read_register", "arguments": {"addr": 3}}),
    (["read", "007"], {"tool": "read_register", "arguments": {"addr": 7}}),
    (["write", "0x1F", "0Xc8"], {"tool": "write_register", "arguments": {"addr": 31, "data": 200}}),
    (["write", "3", "300"], {"tool": "write_register", "arguments": {"addr": 3, "data": 300}}),
])
def test_shell_numbers_are_decimal_or_hex(words: list[str], call: dict[str, Any]) -> None:
    """ASCII decimal and 0x hex become the call's integers (out of range is the gate's)."""
    assert json.loads(shell_call(words)) == call


@pytest.mark.parametrize("word", ["\uff10", "1_0", "0b11", "0o7", "-1", "+3", "0x", "3.0",
                                  "\u0663"])
def test_shell_refuses_number_forms_its_help_does_not_name(word: str) -> None:
    """Fullwidth or Arabic-Indic digits, underscores, 0b/0o, signs: the bad-number error."""
    with pytest.raises(ValueError) as info:
        shell_call(["read", word])
    shown = word.encode("unicode_escape").decode()
    assert str(info.value) == f"ADDR must be a number like 3 or 0x1f, got `{shown}`"


def test_shell_cuts_an_unknown_command_and_a_bad_number_short() -> None:
    """A 5000-character word is echoed escaped and cut to 40 characters."""
    with pytest.raises(ValueError) as info:
        shell_call(["x" * 5000])
    assert str(info.value) == f"unknown command `{'x' * 37}...`; type help"
    with pytest.raises(ValueError) as info:
        shell_call(["read", "\x1b[2J" + "9" * 5000])
    assert str(info.value) == f"ADDR must be a number like 3 or 0x1f, got `\\x1b[2J{'9' * 30}...`"


@pytest.mark.parametrize("word", ["9" * 4301, "9" * 5000, "1" + "0" * 4300,
                                  "0x" + "f" * 20000, "0x" + "F" * 3572, "0x1" + "0" * 3572])
def test_a_number_past_what_a_call_holds_is_the_shells_one_line(word: str) -> None:
    """A decimal number of more than 4300 digits, or a hex one worth more (20000 hex digits):
    the shell's error in its own words, for either argument, never int()'s limit advice."""
    for words, name in ((["read", word], "ADDR"), (["write", "1", word], "DATA")):
        with pytest.raises(ValueError) as info:
            shell_call(words)
        assert str(info.value) == (f"{name} has more than 4300 decimal digits, the most a call "
                                   "may hold; use a number like 3 or 0x1f")


@pytest.mark.parametrize(("word", "value"), [
    ("9" * 4300, 10**4300 - 1), ("0" * 6000 + "3", 3), ("0x" + "0" * 20000 + "3", 3),
    ("0x" + "f" * 3571, 16**3571 - 1)])
def test_a_long_number_the_call_can_hold_goes_to_the_gate(word: str, value: int) -> None:
    """Leading zeros cost nothing, and a number of up to 4300 digits is sent to the gate
    (which refuses it as out of range)."""
    assert json.loads(shell_call(["read", word]))["arguments"]["addr"] == value


def test_the_shell_answers_huge_numbers_and_stays_open(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A 5000-digit number and a 20000-digit hex number typed at the shell: one line each,
    no traceback, and the next command runs."""
    lines = ["read " + "9" * 5000, "write 1 0x" + "f" * 20000, "read 0x" + "f" * 3571,
             "write 2 7", "read 2", ""]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines)))
    assert main(["shell", "--no-audit"]) == 1  # 1: three commands were refused (docs/cli.md)
    out, err = capsys.readouterr()
    shown = out.splitlines()[2:]
    assert err == "" and "Traceback" not in out
    assert shown[:2] == [
        "error: ADDR has more than 4300 decimal digits, the most a call may hold; use a number "
        "like 3 or 0x1f",
        "error: DATA has more than 4300 decimal digits, the most a call may hold; use a number "
        "like 3 or 0x1f"]
    assert shown[2].startswith("refused   validate/range-addr (retryable): addr an integer of ")
    assert shown[3:] == ["accepted  write_register: register 2 = 0x07 (7)",
                         "accepted  read_register: register 2 = 0x07 (7)"]


def test_replay_json_file_errors_are_text_on_stderr_as_help_says(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """With --json a file error is still one text line on stderr, and --help says so."""
    path = tmp_path / "r.jsonl"
    path.write_text('{"raw": "{}", "expect": 3}\n')
    assert run(capsys, "replay", "--json", str(path)) == (2, "", (
        f"regdev replay: error: {path}:1: `expect` must be a string (\"ok\" or a verdict code), "
        "got an integer\n"))
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    assert ("A file error (exit 2, nothing run) stays one line of text on stderr, as without "
            "--json") in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("argv", [["call", "--no-audit", "-"], ["shell", "--no-audit"]],
                         ids=["call", "shell"])
def test_a_closed_stdin_is_one_line_and_exit_2(argv: list[str]) -> None:
    """stdin closed (`<&-`) for a command that reads it: one line, exit 2, no traceback."""
    done = subprocess.run(["/bin/sh", "-c", '"$0" "$@" <&-',
                           str(Path(sys.executable).parent / "regdev"), *argv],
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", f"regdev {argv[0]}: error: cannot read the input: standard input is closed\n")


@pytest.mark.parametrize("command", [["agent", "a task"], ["eval"]])
@pytest.mark.parametrize(("option", "message"), [
    *[(f"--request-timeout={given}",
       f"--request-timeout must be a number of seconds in 0.001..86400, got {shown}")
      for given, shown in (("5e-324", "5e-324"), ("1e-300", "1e-300"), ("0", "0.0"),
                           ("-1", "-1.0"), ("nan", "nan"), ("inf", "inf"),
                           ("0.0000001", "1e-07"), ("1e300", "1e+300"))],
    *[(f"--temperature={given}", f"--temperature must be a number in 0..2, got {shown}")
      for given, shown in (("nan", "nan"), ("inf", "inf"), ("-inf", "-inf"), ("-1", "-1.0"),
                           ("2.5", "2.5"))],
])
def test_model_options_out_of_range_are_one_line_before_anything_runs(
        capsys: pytest.CaptureFixture[str], command: list[str], option: str,
        message: str) -> None:
    """A model's request timeout (seconds, 0.001..86400) and temperature (0..2) out of range,
    NaN or infinite: one line naming the flag and the range, exit 2, no model asked."""
    status, out, err = run(capsys, command[0], "--model", "m", "--base-url",
                           "http://127.0.0.1:9", "--no-audit", option, *command[1:])
    assert (status, out) == (2, "")
    assert err == f"regdev {command[0]}: error: {message}\n"


def test_port_inprocess_is_the_in_process_device_of_the_device_factory(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--port inprocess runs in process, as no --port does; a port's --timeout is refused."""
    call = '{"tool": "write_register", "arguments": {"addr": 3, "data": 7}}'
    assert run(capsys, "call", "--no-audit", "--port", "inprocess", call) == run(
        capsys, "call", "--no-audit", call)
    status, out, err = run(capsys, "call", "--no-audit", "--port", "inprocess",
                           "--timeout", "1", call)
    assert (status, out) == (2, "")
    assert err == ("regdev call: error: the in-process device takes no timeout (they are for a "
                   "device at the end of a port)\n")


def test_report_exit_2_covers_a_bad_eval_file_and_an_unwritable_html_page(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """report --eval with a missing or invalid file, or --html naming a directory: one line,
    exit 2, as report --help's exit statuses say."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    missing = tmp_path / "missing.jsonl"
    error = "regdev report: error: "
    assert run(capsys, "report", "--eval", str(missing)) == (
        2, "", f"{error}cannot read {missing}: No such file or directory\n")
    assert run(capsys, "report", "--eval", str(bad)) == (
        2, "", f"{error}{bad}:1: not a JSON line\n")
    assert run(capsys, "report", "--eval", str(empty), "--html", str(tmp_path)) == (
        2, "", f"{error}cannot write {tmp_path}: Is a directory\n")
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    usage = " ".join(capsys.readouterr().out.split())
    assert ("the --eval file cannot be read or is not eval results, or the chart or the "
            "--html file cannot be written") in usage


def test_map_examples_help_says_what_it_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """`regdev map --help` says what --examples prints: each kind of file it lists, and that
    the SunSpec images are not maps; every file it lists is of a kind the help names."""
    with pytest.raises(SystemExit):
        main(["map", "--help"])
    usage = " ".join(capsys.readouterr().out.split())
    said = usage[usage.index("--examples "):usage.index("--json ")]
    assert ("print the full path of each example file installed with regdev, one a line, and "
            "exit: register maps (*.rdl), eval task suites and recorded calls (*.jsonl), "
            "policies (*.toml), a tool-definitions file (motor-tools.json), SunSpec device "
            "images (sunspec-*.json: for a Modbus server to serve, not maps) and "
            "agent-framework example scripts (agents_*.py)") in said
    status, out, _ = run(capsys, "map", "--examples")
    assert status == 0 and out
    for line in out.splitlines():
        name = Path(line).name
        assert (Path(line).suffix in (".rdl", ".jsonl", ".toml") or name == "motor-tools.json"
                or (name.startswith("sunspec-") and name.endswith(".json"))
                or (name.startswith("agents_") and name.endswith(".py"))), line
