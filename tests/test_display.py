"""Text a model, a client, a file or a device controls never forges what a person reads.

Each human-readable output (audit, replay, demo, shell, serve's log, the error lines, the
refusal messages) is given hostile text in each slot it shows (tool names, argument names and
strings, idempotency keys, session names, messages, a device's identity), and must come out as
printable ASCII with exactly the lines it writes itself: no newline, control character or
escape sequence of the input gets through.
"""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import EXAMPLES, run
from regdev import (
    AuditLog,
    DeviceRefused,
    Gate,
    Observation,
    Policy,
    Refusal,
    RegisterFile,
    ScriptedProposer,
    SessionPolicy,
    read_audit,
    run_loop,
)
from regdev.agents._shell import run_shell, shell_tools
from regdev.cli._output import LogFormatter
from regdev.core._text import display_text, escape_text
from support.strategies import HOSTILE_TEXTS, hostile_text

REGDEV = Path(sys.executable).parent / "regdev"


def printable(text: str) -> bool:
    """Only printable ASCII, space to tilde: nothing that can act on a terminal."""
    return all(" " <= char <= "~" for char in text)


def safe_lines(output: str) -> list[str]:
    """The lines of ``output`` (which ends in a newline), each checked to be printable."""
    assert output.endswith("\n") or output == ""
    lines = output.split("\n")[:-1]
    bad = [line for line in lines if not printable(line)]
    assert bad == [], bad
    return lines


def call(tool: object, arguments: object, **envelope: object) -> str:
    return json.dumps({"tool": tool, "arguments": arguments, **envelope})


# --- the helper ---------------------------------------------------------------------------------


@given(st.text())
def test_display_text_leaves_only_printable_ascii(text: str) -> None:
    """Whatever the text, what is shown is printable ASCII (no line break, no control)."""
    assert printable(display_text(text))


@given(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E)))
def test_display_text_shows_safe_text_as_it_is(text: str) -> None:
    """Printable ASCII, backslashes included, is unchanged: an escaped message is not
    escaped twice, and display_text of display_text is the same text."""
    assert display_text(text) == text
    assert display_text(display_text(text + "\x1b\n")) == display_text(text + "\x1b\n")


json_documents = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text()),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)


@given(json_documents)
def test_display_text_keeps_json_the_same_json(value: Any) -> None:
    """JSON text shown through display_text is still JSON, with the same value: the
    arguments column of the audit view can be read back exactly."""
    shown = display_text(json.dumps(value, ensure_ascii=False))
    assert printable(shown) and json.loads(shown) == value


def test_display_text_cuts_at_the_limit() -> None:
    """A limit cuts after escaping, so the cut text is printable too."""
    assert display_text("a\nb" * 10, 8) == "a\\nba..."
    assert display_text("abc", 3) == "abc"


# --- regdev audit -------------------------------------------------------------------------------


def _hostile_audit(path: Path, text: str) -> int:
    """An audit log holding ``text`` in every slot a call or a loop can put it in; returns
    the number of records."""
    policy = Policy(sessions={text: SessionPolicy(scopes=frozenset({"read"}))},
                    tool_call_ids_as_keys=True)
    with Gate(audit=AuditLog(path), policy=policy) as gate:
        hostile = gate.session(text)
        for raw, dialect in [
            (call(text, {"addr": 1}), "canonical"),                       # tool name
            (call("write_register", {"addr": 1, "data": 2, text: 1}), "canonical"),  # arg name
            (call("write_register", {"addr": text, "data": 2}), "canonical"),  # string value
            (call("configure", {text: {text: [text]}}), "canonical"),     # nested
            (call("write_register", {"addr": 1, "data": 2}, idempotency_key=text[:200]),
             "canonical"),                                                # idempotency key
            (json.dumps({"name": text, "arguments": {}}), "mcp"),         # MCP name
            (json.dumps({"id": text[:200], "type": "function", "function": {
                "name": "write_register", "arguments": '{"addr": 2, "data": 3}'}}), "openai"),
        ]:
            gate.handle(raw, dialect=dialect)
        gate.handle(call("write_register", {"addr": 1, "data": 2}), session=hostile)  # session
        assert gate.audit is not None  # a caller and an approver (an OAuth subject can be any)
        gate.audit.append(gate.audit.row(
            time=1.0, session="default", dialect="mcp", raw=b"{}", tool="write_register",
            arguments=None, caller=text, approver=text, approval="url",
            observation=Observation.refused(Refusal("authorize", "approval-denied", "no"))))

        def proposer(observations: object) -> str:
            raise RuntimeError(text)  # a stop record whose detail quotes it

        run_loop(proposer, gate, loop_id=text)
        run_loop(ScriptedProposer([call(text, {})]), gate, loop_id=text + "2")
    return len(read_audit(path))


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
def test_audit_shows_every_record_on_one_printable_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> None:
    """`regdev audit`: one line per record and a summary, each printable, whatever the
    tool names, arguments, keys, sessions, loop ids and stop details hold."""
    path = tmp_path / "audit.db"
    records = _hostile_audit(path, text)
    shown = [record.id for record in read_audit(path)]  # a write's settled intent is not shown
    status, out, err = run(capsys, "audit", "--db", str(path))
    assert (status, err) == (0, "")
    lines = safe_lines(out)
    assert len(lines) == records + 1
    assert [line.split()[0] for line in lines[:-1]] == [str(n) for n in shown]
    assert lines[-1] == f"{records} records in {path}"


# --- refusal messages ---------------------------------------------------------------------------


SLOTS = {
    "tool": lambda text: (call(text, {"addr": 1}), "canonical"),
    "argument name": lambda text: (call("read_register", {"addr": 1, text: 1}), "canonical"),
    "nested name": lambda text: (call("read_register", {text: {text: 1}}), "canonical"),
    "string value": lambda text: (call("write_register", {"addr": 1, "data": text}),
                                  "canonical"),
    "forced tool": lambda text: (call(text, {}), "canonical"),
    "key": lambda text: (call("write_register", {"addr": 1, "data": 1}, idempotency_key=text),
                         "canonical"),
    "derived key prefix": lambda text: (call("write_register", {"addr": 1, "data": 1},
                                             idempotency_key="openai:" + text), "canonical"),
    "mcp name": lambda text: (json.dumps({"name": text, "arguments": {}}), "mcp"),
    "openai arguments": lambda text: (json.dumps({"type": "function", "function": {
        "name": "read_register", "arguments": text}}), "openai"),
    "anthropic input": lambda text: (json.dumps({"type": "tool_use", "id": "t", "name":
                                                 "read_register", "input": {text: text}}),
                                     "anthropic"),
    "raw text": lambda text: (text, "canonical"),
}


#: One gate for every example below (no policy, no audit log; whatever an earlier example
#: left on it, every message must be printable all the same); making one per example, its
#: checks compiled each time, was most of the test's time.
_GATE = Gate()


@pytest.mark.parametrize("slot", SLOTS)
@given(text=hostile_text)
def test_refusal_messages_quote_untrusted_text_escaped(slot: str, text: str) -> None:
    """Every message a model (and a person, through the CLI) reads is printable ASCII,
    whatever untrusted slot the hostile text is in."""
    raw, dialect = SLOTS[slot](text)
    tool_choice = "write_register" if slot == "forced tool" else None
    observation = _GATE.handle(raw, dialect=dialect, tool_choice=tool_choice)
    assert observation.message is None or printable(observation.message), observation


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
def test_a_session_name_is_quoted_escaped_in_refusals(text: str) -> None:
    """A session's name (a policy's) in denied-* and rate-limited is escaped too."""
    policy = Policy(sessions={text: SessionPolicy(scopes=frozenset({"read"}))},
                    rate_limit={"rate": 0.001, "burst": 1})
    gate = Gate(policy=policy)
    session = gate.session(text)
    denied = gate.handle(call("write_register", {"addr": 1, "data": 1}), session=session)
    gate.handle(call("read_register", {"addr": 1}), session=session)
    limited = gate.handle(call("read_register", {"addr": 1}), session=session)
    assert (denied.code, limited.code) == ("denied-write_register", "rate-limited")
    assert f"session {escape_text(text)} " in (denied.message or "")
    assert printable(denied.message or "") and printable(limited.message or "")


# --- regdev replay ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
def test_replay_shows_each_line_and_expectation_on_printable_lines(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> None:
    """`regdev replay`: hostile tool names, argument names and values, and an expected
    result holding hostile text, each stay on their own printable line."""
    records = [
        {"raw": call(text, {"addr": 1})},
        {"raw": call("read_register", {"addr": 1, text: 2}), "expect": "unknown-argument"},
        {"raw": call("write_register", {"addr": text, "data": 1}), "expect": "type-addr"},
        {"raw": call("read_register", {"addr": 1}), "expect": "ok", "result": {"addr": text}},
        {"raw": text},
    ]
    path = tmp_path / "calls.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    status, out, err = run(capsys, "replay", "--no-audit", str(path))
    assert (status, err) == (1, "")
    lines = safe_lines(out)
    # header, 5 results, 1 expectation not met, blank, summary, and the 4-line register table
    assert len(lines) == 1 + 5 + 1 + 1 + 1 + 1 + 4
    assert [line[:9] for line in lines[1:7]] == [
        "line    1", "line    2", "line    3", "line    4", " " * 9, "line    5"]
    assert lines[5].startswith(" " * 20 + "expected ok with result {")


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
def test_replay_file_errors_are_one_printable_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> None:
    """A replay file naming a hostile field or dialect: one printable line on stderr."""
    path = tmp_path / "calls.jsonl"
    for record in ({"raw": "{}", text: 1}, {"raw": "{}", "dialect": text},
                   {"raw": "{}", "expect": text}):
        path.write_text(json.dumps(record) + "\n")
        status, out, err = run(capsys, "replay", "--no-audit", str(path))
        assert (status, out) == (2, "")
        assert len(safe_lines(err)) == 1


# --- regdev demo and regdev shell ---------------------------------------------------------------


class HostileDevice(RegisterFile):
    """A device whose identity and refusals are text it chose."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def identify(self) -> str:
        return self.text

    def read(self, addr: int) -> int:
        if addr == 9:
            raise DeviceRefused(self.text)
        return super().read(addr)


def _policy_file(tmp_path: Path, session: str, **spec: Any) -> str:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"sessions": {session: spec}}))
    return str(path)


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
def test_demo_shows_a_hostile_device_and_session_on_printable_lines(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        text: str) -> None:
    """`regdev demo` on a device that identifies with hostile text, in a session whose
    name is hostile (so its writes are denied, quoting it): every line printable, each step
    four lines."""
    monkeypatch.setattr("regdev.cli._demo.port_device", lambda args: HostileDevice(text))
    policy = _policy_file(tmp_path, text, scopes=["read"])
    status, out, err = run(capsys, "demo", "--no-audit", "--policy", policy, "--session", text)
    assert (status, err) == (1, "")  # the writes were denied: not as scripted
    lines = safe_lines(out)
    steps = [n for n, line in enumerate(lines) if line.startswith("step ")]
    assert len(steps) == 2  # read; write denied (final): the loop stops
    assert [lines[n + 3] for n in steps] == ["", ""]
    assert lines[1].startswith("device: ")
    assert not any(line.startswith(("accepted", "refused", "line ")) for line in lines)


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
def test_shell_shows_hostile_words_devices_and_sessions_on_printable_lines(
        monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """`regdev shell`: a hostile command word, number, device identity, device refusal and
    session name: one printable line for each, the greeting two."""
    words = [word for word in text.split() if word] or ["x"]
    commands = [words[0], f"read {words[-1]}", "identify", "read 9", "read 1"]
    out = io.StringIO()
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(c + "\n" for c in commands)))
    policy = Policy(sessions={text: SessionPolicy()})
    with Gate(HostileDevice(text), shell_tools(), policy=policy) as gate:
        status = run_shell(gate, gate.session(text), out, where=text, interactive=False)
    assert status == 1
    lines = safe_lines(out.getvalue())
    assert len(lines) == 2 + len(commands)
    assert lines[0].startswith("regdev shell on ")
    assert lines[2].startswith("error: ") and lines[3].startswith("error: ")
    assert lines[4].startswith("accepted  identify_device: ")
    assert lines[5].startswith("refused   execute/device-error (final): the device refused: ")
    assert lines[6] == "accepted  read_register: register 1 = 0x00 (0)"


def test_shell_greets_a_hostile_session_on_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session not offered identify_device is greeted by name: escaped, one line."""
    text = HOSTILE_TEXTS[0]
    out = io.StringIO()
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    policy = Policy(sessions={text: SessionPolicy(tools=("read_register",))})
    with Gate(RegisterFile(), shell_tools(), policy=policy) as gate:
        assert run_shell(gate, gate.session(text), out, where="here", interactive=False) == 0
    lines = safe_lines(out.getvalue())
    assert lines[1] == (f"session {display_text(text)} may call read_register; other "
                        "commands are refused")


# --- error lines on stderr ----------------------------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
def test_error_lines_naming_hostile_text_are_one_printable_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> None:
    """A --session the policy lacks, a policy offering a hostile tool name: one line."""
    policy = _policy_file(tmp_path, "ok")
    status, out, err = run(capsys, "call", "{}", "--no-audit", "--policy", policy,
                           "--session", text)
    assert (status, out) == (2, "") and len(safe_lines(err)) == 1
    policy = _policy_file(tmp_path, text, tools=[text])
    status, out, err = run(capsys, "call", "{}", "--no-audit", "--policy", policy,
                           "--session", text)
    assert (status, out) == (2, "") and len(safe_lines(err)) == 1


# --- regdev serve's log -------------------------------------------------------------------------


def test_log_formatter_keeps_each_record_on_its_line() -> None:
    """A record quoting hostile text is one printable line; its traceback's lines follow,
    each indented, so none can pass for a record."""
    formatter = LogFormatter("regdev serve: %(levelname)s %(name)s: %(message)s")
    for text in HOSTILE_TEXTS:
        record = logging.LogRecord("regdev", logging.WARNING, __file__, 1, "tools/call %s: %s",
                                   (text, "unknown-tool"), None)
        assert formatter.format(record) == ("regdev serve: WARNING regdev: tools/call "
                                            f"{display_text(text)}: unknown-tool")
        try:
            raise ValueError(text)
        except ValueError:
            record = logging.LogRecord("regdev", logging.ERROR, __file__, 1, text, (),
                                       sys.exc_info())
        first, *rest = safe_lines(formatter.format(record) + "\n")
        assert first == f"regdev serve: ERROR regdev: {display_text(text)}"
        assert rest and all(line.startswith("    ") for line in rest)
        last = display_text(text.splitlines()[-1] if text.splitlines() else text)
        assert any(line.startswith("    ValueError: ") for line in rest)
        assert rest[-1].endswith(last)  # a line break in the message: the rest indented too


@pytest.mark.timeout(60)
def test_serve_logs_a_hostile_tool_name_on_one_line(tmp_path: Path) -> None:
    """`regdev serve --log-level debug`: each tools/call is one log line, whatever its name."""
    messages = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *({"jsonrpc": "2.0", "id": n, "method": "tools/call",
           "params": {"name": text, "arguments": {}}}
          for n, text in enumerate(HOSTILE_TEXTS, start=1)),
    ]
    done = subprocess.run([str(REGDEV), "serve", "--no-audit", "--log-level", "debug"],
                          input="".join(json.dumps(m) + "\n" for m in messages).encode(),
                          capture_output=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0
    lines = safe_lines(done.stderr.decode())
    assert all(line.startswith(("regdev serve: ", "    ")) for line in lines), lines
    calls = [line for line in lines if re.match(r"regdev serve: DEBUG regdev: tools/call ", line)]
    assert len(calls) == len(HOSTILE_TEXTS)


def test_policy_example_still_loads() -> None:
    """The example policy (TOML) is untouched by the escaping: its sessions keep their names."""
    assert set(Policy.from_file(EXAMPLES / "policy.toml").sessions) == {
        "default", "viewer", "reader"}


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
def test_map_table_shows_hostile_descriptions_on_their_lines(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> None:
    """`regdev map`: a map whose descriptions (a vendor's file) hold hostile text keeps one
    printable line per map, register and field."""
    status, plain, _ = run(capsys, "map", str(EXAMPLES / "sensor.rdl"))
    status, compiled, _ = run(capsys, "map", str(EXAMPLES / "sensor.rdl"), "--json")
    doc = json.loads(compiled)
    doc["description"] = text
    for register in doc["registers"]:
        register["description"] = text
        for field in register["fields"]:
            field["description"] = text
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    status, out, err = run(capsys, "map", str(path))
    assert (status, err) == (0, "")
    assert len(safe_lines(out)) == len(plain.splitlines())
