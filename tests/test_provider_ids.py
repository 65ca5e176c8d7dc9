"""Provider tool call ids as idempotency keys: scoped to their conversation, because
open-weight stacks repeat them; and a key that cannot be kept (no audit log) is said so, once."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest

from conftest import CountingDevice
from regdev import (
    AuditLog,
    Gate,
    Policy,
    ScriptedProposer,
    anthropic_tool_results,
    openai_tool_results,
    read_audit,
    run_loop,
)
from regdev.cli._main import main
from regdev.gate._gate import KEYS_IGNORED

OPT_IN = Policy(tool_call_ids_as_keys=True)

#: Ids as open-weight stacks send them again: Kimi K2's per-turn index, a copied call_N, a
#: bare counter (sglang's K2 detector), OpenAI's and Anthropic's own shapes.
REPEATED_IDS = ["functions.write_register:0", "call_3", "0", "call00003",
                "call_abc123def456ghi789jkl0", "toolu_01A09q90qw90lq917835lq9"]


def openai_turn(call_id: str, data: int) -> dict[str, object]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {
            "name": "write_register", "arguments": json.dumps({"addr": 3, "data": data})}}]}


def anthropic_turn(call_id: str, data: int) -> dict[str, object]:
    return {"role": "assistant", "content": [
        {"type": "tool_use", "id": call_id, "name": "write_register",
         "input": {"addr": 3, "data": data}}]}


def _ok(answer: object) -> bool:
    """Whether a provider answer (OpenAI list, Anthropic message) carries an accepted call."""
    if isinstance(answer, list):
        return bool(json.loads(answer[0]["content"])["ok"])
    assert isinstance(answer, dict)
    return not answer["content"][0]["is_error"]


def _replayed(answer: object) -> bool:
    content = answer[0]["content"] if isinstance(answer, list) else (
        answer["content"][0]["content"])  # type: ignore[index]
    return bool(json.loads(content).get("replay"))


@pytest.mark.parametrize("call_id", REPEATED_IDS)
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_id_repeated_by_another_conversation_runs(tmp_path: Path, call_id: str,
                                                     provider: str) -> None:
    """Two conversations sending the same id (each a new call) both run: neither is taken
    for the other's replay; the same conversation sending it again is a replay."""
    results = openai_tool_results if provider == "openai" else anthropic_tool_results
    turn = openai_turn if provider == "openai" else anthropic_turn
    with Gate(CountingDevice(), audit=AuditLog(tmp_path / "a.db"), policy=OPT_IN) as gate:
        first = results(turn(call_id, 1), gate, conversation="chat-1")
        other = results(turn(call_id, 2), gate, conversation="chat-2")  # a new call, same id
        again = results(turn(call_id, 1), gate, conversation="chat-1")  # a re-sent turn
        assert [_ok(a) for a in (first, other, again)] == [True, True, True]
        assert [_replayed(a) for a in (first, other, again)] == [False, False, True]
        assert gate.device.snapshot()[3] == 2 and gate.device.accesses == 2  # type: ignore[attr-defined]
    keys = [r.idempotency_key for r in read_audit(tmp_path / "a.db")]
    assert keys == [f"{provider}@6:chat-1:{call_id}", f"{provider}@6:chat-2:{call_id}",
                    f"{provider}@6:chat-1:{call_id}"]
    assert [r.loop_id for r in read_audit(tmp_path / "a.db")] == ["chat-1", "chat-2", "chat-1"]


def test_loops_scope_the_keys_of_their_ids(tmp_path: Path) -> None:
    """run_loop: each loop's ids are its own; a loop run again under its id replays."""
    raw = json.dumps({"id": "functions.write_register:0", "type": "function", "function": {
        "name": "write_register", "arguments": '{"addr": 1, "data": 5}'}})
    with Gate(CountingDevice(), audit=AuditLog(tmp_path / "a.db"), policy=OPT_IN) as gate:
        runs = [run_loop(ScriptedProposer([raw]), gate, dialect="openai", loop_id=loop)
                for loop in ("a", "b", "a")]
        assert [r.observations[0].replay for r in runs] == [False, False, True]
        assert gate.device.accesses == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize(("loop", "call_id"), [("a:b", "c"), ("a", "b:c"), ("", "a:b:c")])
def test_no_two_conversations_and_ids_share_a_key(tmp_path: Path, loop: str,
                                                  call_id: str) -> None:
    """The scoped key names its loop's length, so (loop "a:b", id "c") and (loop "a", id
    "b:c") are two keys, and a call outside any loop never meets a scoped one."""
    raw = json.dumps({"id": call_id, "type": "function", "function": {
        "name": "write_register", "arguments": '{"addr": 1, "data": 5}'}})
    with Gate(CountingDevice(), audit=AuditLog(tmp_path / "a.db"), policy=OPT_IN) as gate:
        assert gate.handle(raw, dialect="openai", loop_id=loop).replay is False
        for other_loop, other_id in [("a:b", "c"), ("a", "b:c"), ("", "a:b:c")]:
            if (other_loop, other_id) != (loop, call_id):
                other = raw.replace(json.dumps(call_id), json.dumps(other_id))
                assert gate.handle(other, dialect="openai", loop_id=other_loop).replay is False
        assert gate.handle(raw.replace(json.dumps(call_id), json.dumps(f"{loop}:{call_id}")),
                           dialect="openai").replay is False


@pytest.mark.parametrize("key", ["openai@4:loop:call_1", "anthropic@1:x:y", "openai:call_1"])
def test_an_explicit_key_may_not_take_a_derived_form(tmp_path: Path, key: str) -> None:
    """An explicit key shaped as a derived one (scoped or not) is bad-idempotency-key."""
    raw = json.dumps({"tool": "write_register", "arguments": {"addr": 1, "data": 1},
                      "idempotency_key": key})
    with Gate(audit=AuditLog(tmp_path / "a.db")) as gate:
        observation = gate.handle(raw)
    assert observation.code == "bad-idempotency-key"
    assert (observation.message or "").startswith(
        "an idempotency key may not start with openai: or anthropic: (nor openai@, "
        "anthropic@: those name provider tool call ids)")


def test_the_conversation_must_be_text() -> None:
    """A conversation id that is not a string of text is the caller's mistake: ValueError,
    before any call runs."""
    gate = Gate(CountingDevice())
    for bad in (3, "\ud800"):
        with pytest.raises(ValueError, match="loop_id must be a string of Unicode text"):
            openai_tool_results(openai_turn("c", 1), gate, conversation=bad)  # type: ignore[arg-type]
    assert gate.device.accesses == 0  # type: ignore[attr-defined]


# --- a key without an audit log -------------------------------------------------------------------

KEYED = [
    ('{"tool": "write_register", "arguments": {"addr": 1, "data": 1}, '
     '"idempotency_key": "k"}', "canonical"),
    ('{"name": "write_register", "arguments": {"addr": 1, "data": 1}, '
     '"_meta": {"idempotency_key": "k"}}', "mcp"),
    ('{"id": "call_1", "type": "function", "function": {"name": "read_register", '
     '"arguments": "{\\"addr\\": 1}"}}', "openai"),
    ('{"type": "tool_use", "id": "toolu_1", "name": "write_register", '
     '"input": {"addr": 1, "data": 1}}', "anthropic"),
]


@pytest.mark.parametrize(("raw", "dialect"), KEYED, ids=[d for _, d in KEYED])
def test_a_gate_without_an_audit_log_says_once_that_it_ignores_keys(
        raw: str, dialect: str) -> None:
    """Every dialect's key, dropped for want of an audit log, is said once per gate (from
    many threads too), and a call without a key says nothing."""
    told: list[str] = []
    gate = Gate(CountingDevice(), policy=OPT_IN)
    gate.warn = told.append
    gate.handle('{"tool": "write_register", "arguments": {"addr": 1, "data": 1}}')
    assert told == []
    threads = [threading.Thread(target=gate.handle, args=(raw,), kwargs={"dialect": dialect})
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert told == [KEYS_IGNORED]
    assert gate.device.accesses == 9  # type: ignore[attr-defined]  # every keyed call ran


def test_the_warning_goes_to_the_regdev_logger_by_default(
        caplog: pytest.LogCaptureFixture) -> None:
    """From Python, the warning is the `regdev` logger's (visible without any setup)."""
    with caplog.at_level(logging.WARNING, logger="regdev"):
        gate = Gate()
        for _ in range(3):
            gate.handle(KEYED[0][0])
    assert [r.getMessage() for r in caplog.records] == [KEYS_IGNORED]


def test_the_command_line_warns_once_with_no_audit(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`--no-audit` with keyed calls: one warning line on stderr, whatever the number of
    keyed calls and their dialects; none without a keyed call."""
    path = tmp_path / "calls.jsonl"
    path.write_text("".join(json.dumps({"raw": raw, "dialect": dialect}) + "\n"
                            for raw, dialect in KEYED * 2))
    warning = f"regdev replay: warning: {KEYS_IGNORED}\n"
    assert main(["replay", "--no-audit", str(path)]) == 0
    assert capsys.readouterr().err == warning
    assert main(["call", "--no-audit", KEYED[0][0]]) == 0
    assert capsys.readouterr().err == warning.replace("replay", "call")
    assert main(["call", "--no-audit", '{"tool": "read_register", "arguments": {"addr": 1}}']) == 0
    assert capsys.readouterr().err == ""
    assert main(["call", "--audit", str(tmp_path / "a.db"), KEYED[0][0]]) == 0
    assert capsys.readouterr().err == ""  # with an audit log the key is kept: no warning
