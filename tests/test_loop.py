"""The agent loop and the plain retry function."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from regdev import (
    AuditLog,
    DeviceRefused,
    Gate,
    Observation,
    RegisterFile,
    ScriptedProposer,
    Step,
    call_with_retry,
    read_audit,
    run_loop,
)

OK_WRITE = '{"tool": "write_register", "arguments": {"addr": 1, "data": 7}}'
BAD_WRITE = '{"tool": "write_register", "arguments": {"addr": 1, "data": 700}}'
PARTIAL = '{"tool": "write_register", "arguments": {"addr": 2, "da'


def test_done_when_the_proposer_is_done(gate: Gate) -> None:
    """The proposer returning None stops the loop with done."""
    result = run_loop(ScriptedProposer([OK_WRITE]), gate)
    assert result.stop == "done"
    assert [o.ok for o in result.observations] == [True]


def test_refusal_is_fed_back_and_retry_succeeds(gate: Gate, device: RegisterFile) -> None:
    """The proposer sees the refusal and its corrected retry runs."""
    seen: list[list[Observation]] = []

    def proposer(observations: Sequence[Observation]) -> str | None:
        seen.append(list(observations))
        return [BAD_WRITE, OK_WRITE, None][len(observations)]

    result = run_loop(proposer, gate)
    assert result.stop == "done"
    assert [s.retry for s in result.steps] == [False, True]
    assert seen[1][0].code == "range-data"
    assert device.snapshot()[1] == 7


def test_rejected_after_the_retry_is_refused(gate: Gate, device: RegisterFile) -> None:
    """Two refusals in a row with one retry allowed stop the loop with rejected."""
    result = run_loop(ScriptedProposer([BAD_WRITE, PARTIAL, OK_WRITE]), gate)
    assert result.stop == "rejected"
    assert [o.code for o in result.observations] == ["range-data", "not-json"]
    assert device.write_count == 0  # the partial call was never dispatched, nor the third


def test_retries_are_configurable(gate: Gate) -> None:
    """retries=0 stops at the first refusal; retries=2 allows two more attempts."""
    assert run_loop(ScriptedProposer([BAD_WRITE, OK_WRITE]), gate, retries=0).stop == "rejected"
    result = run_loop(ScriptedProposer([BAD_WRITE, BAD_WRITE, OK_WRITE]), gate, retries=2)
    assert result.stop == "done"


def test_success_resets_the_retry_count(gate: Gate) -> None:
    """Refusals separated by a success each get their retry."""
    script = [BAD_WRITE, OK_WRITE, BAD_WRITE, OK_WRITE]
    assert run_loop(ScriptedProposer(script), gate).stop == "done"


def test_budget(gate: Gate) -> None:
    """max_steps proposals, then stop with budget."""
    result = run_loop(ScriptedProposer([OK_WRITE] * 10), gate, max_steps=3)
    assert (result.stop, len(result.steps)) == ("budget", 3)


def test_error_when_the_proposer_raises(gate: Gate) -> None:
    """A proposer exception stops the loop with error and is not re-raised."""

    def proposer(observations: Sequence[Observation]) -> str:
        raise ConnectionError("model endpoint down")

    result = run_loop(proposer, gate)
    assert (result.stop, result.steps) == ("error", [])
    assert result.detail == "the proposer failed: model endpoint down"


def test_a_closed_output_is_worded_in_the_stop_detail(tmp_path: Path) -> None:
    """on_step raising BrokenPipeError stops the loop with "the output was closed", re-raised."""

    def on_step(step: Step) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    read = '{"tool": "read_register", "arguments": {"addr": 1}}'
    with Gate(RegisterFile(), audit=AuditLog(tmp_path / "audit.db")) as gate, \
            pytest.raises(BrokenPipeError):
        run_loop(ScriptedProposer([read]), gate, on_step=on_step)
    stop = [r for r in read_audit(tmp_path / "audit.db") if r.event == "stop"]
    assert [(r.code, r.message) for r in stop] == [("error", "the output was closed")]


def test_tool_choice_is_enforced_in_the_loop(gate: Gate) -> None:
    """A forced tool refuses other tools on every step."""
    read = '{"tool": "read_register", "arguments": {"addr": 1}}'
    result = run_loop(ScriptedProposer([read, read]), gate, tool_choice="write_register")
    assert [o.code for o in result.observations] == ["wrong-tool", "wrong-tool"]
    assert result.stop == "rejected"


def test_bad_limits_raise(gate: Gate) -> None:
    """max_steps < 1 or retries < 0 is a programming error."""
    with pytest.raises(ValueError):
        run_loop(ScriptedProposer([]), gate, max_steps=0)
    with pytest.raises(ValueError):
        run_loop(ScriptedProposer([]), gate, retries=-1)


def test_call_with_retry_corrects_once(gate: Gate, device: RegisterFile) -> None:
    """ask_model gets the refusal as JSON text and its correction runs."""
    asked: list[str] = []

    def ask_model(error_text: str) -> str:
        asked.append(error_text)
        return OK_WRITE

    obs = call_with_retry(BAD_WRITE, ask_model, gate)
    assert obs.ok and device.snapshot()[1] == 7
    assert len(asked) == 1 and '"code":"range-data"' in asked[0]


def test_call_with_retry_gives_up_after_one_retry(gate: Gate) -> None:
    """Two refusals: the last refusal is returned, the model was asked once."""
    asked: list[str] = []

    def ask_model(error_text: str) -> str:
        asked.append(error_text)
        return PARTIAL

    obs = call_with_retry(BAD_WRITE, ask_model, gate)
    assert (obs.ok, obs.code, len(asked)) == (False, "not-json", 1)


def test_call_with_retry_does_not_ask_after_success(gate: Gate) -> None:
    """A first success never calls the model back."""

    def ask_model(error_text: str) -> str:
        raise AssertionError("should not be called")

    assert call_with_retry(OK_WRITE, ask_model, gate).ok


class BrokenDevice(RegisterFile):
    """Every write fails with a device error (not retryable)."""

    def write(self, addr: int, data: int) -> int:
        raise DeviceRefused("ERR BUSY", code="BUSY")


def test_a_final_refusal_stops_the_loop_at_once() -> None:
    """A refusal that is not retryable stops the loop, whatever retries allow."""
    gate = Gate(BrokenDevice())
    result = run_loop(ScriptedProposer([OK_WRITE] * 5), gate, retries=3)
    assert (result.stop, len(result.steps)) == ("rejected", 1)
    assert "not retryable" in result.detail


def test_call_with_retry_does_not_ask_after_a_final_refusal() -> None:
    """ask_model is not called when the refusal is not retryable."""

    def ask_model(error_text: str) -> str:
        raise AssertionError("should not be called")

    obs = call_with_retry(OK_WRITE, ask_model, Gate(BrokenDevice()))
    assert (obs.ok, obs.code) == (False, "device-error")


def test_a_proposal_that_is_not_text_is_an_error(gate: Gate) -> None:
    """A proposer returning a non-text value has a bug: stop with error, send nothing."""
    result = run_loop(lambda observations: 5, gate)  # type: ignore[arg-type, return-value]
    assert (result.stop, result.steps) == ("error", [])
    assert "returned a value of type int" in result.detail


def test_bad_options_raise_before_the_first_proposal(gate: Gate) -> None:
    """A wrong dialect or forced tool raises before the proposer is called."""
    calls: list[int] = []

    def proposer(observations: Sequence[Observation]) -> str:
        calls.append(1)
        return OK_WRITE

    with pytest.raises(ValueError, match="dialect"):
        run_loop(proposer, gate, dialect="xx")
    with pytest.raises(ValueError, match="tool_choice"):
        run_loop(proposer, gate, tool_choice="erase_chip")
    assert calls == []
