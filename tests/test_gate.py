"""The gate end to end in process: one observation per call, nothing refused reaches the device."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import CountingDevice
from regdev import (
    REGISTER_TOOLS,
    AuditLog,
    AuditRecord,
    Device,
    DeviceBusy,
    DeviceError,
    DeviceRefused,
    DeviceTimeout,
    Gate,
    Observation,
    Policy,
    Refusal,
    RegisterFile,
    Tool,
    ToolSet,
    TransportError,
    anthropic_tool_results,
    openai_tool_results,
    read_audit,
    run_loop,
)
from regdev.core._observation import PIPELINE
from support.strategies import (
    canonical_calls,
    json_values,
    python_calls,
    raw_register_calls,
    to_json,
)


def test_accepted_write_reaches_device_and_reports_the_value(gate: Gate,
                                                             device: RegisterFile) -> None:
    """A valid write runs once and its result is the register's new value."""
    obs = gate.handle('{"tool": "write_register", "arguments": {"addr": 3, "data": 255}}')
    assert obs.to_dict() == {"ok": True, "tool": "write_register",
                             "result": {"addr": 3, "data": 255}}
    assert device.snapshot()[3] == 255
    assert device.write_count == 1


def test_integral_numbers_reach_the_device_as_int(gate: Gate, device: RegisterFile) -> None:
    """3.0 and 1e2 are integers and arrive as Python int."""
    seen: list[tuple[Any, Any]] = []
    original = device.write

    def spy(addr: int, data: int) -> int:
        seen.append((addr, data))
        return original(addr, data)

    device.write = spy  # type: ignore[method-assign]
    obs = gate.handle('{"tool": "write_register", "arguments": {"addr": 3.0, "data": 1e2}}')
    assert obs.ok and obs.result == {"addr": 3, "data": 100}
    assert seen == [(3, 100)]
    assert all(type(v) is int for v in seen[0])


def test_refusal_observation_shape(gate: Gate) -> None:
    """A refusal is one object: ok, stage, code, message, retryable."""
    obs = gate.handle('{"tool": "write_register", "arguments": {"addr": 16, "data": 1}}')
    assert obs.to_dict() == {"ok": False, "stage": "validate", "code": "range-addr",
                             "message": "addr 16 is outside 0..15", "retryable": True}


def test_id_is_echoed_on_success_and_refusal(gate: Gate) -> None:
    """The correlation id comes back either way."""
    ok = gate.handle('{"tool": "read_register", "arguments": {"addr": 1}, "id": "a1"}')
    bad = gate.handle('{"tool": "read_register", "arguments": {"addr": 99}, "id": "a2"}')
    assert ok.to_dict()["id"] == "a1"
    assert bad.to_dict()["id"] == "a2"


def test_dialects_reach_the_same_verdicts(gate: Gate) -> None:
    """The same call in each dialect gives the same observation."""
    raws = {
        "canonical": '{"tool": "read_register", "arguments": {"addr": 16}}',
        "mcp": '{"name": "read_register", "arguments": {"addr": 16}}',
        "anthropic": '{"type": "tool_use", "id": "t", "name": "read_register", '
                     '"input": {"addr": 16}}',
        "openai": '{"type": "function", "function": {"name": "read_register", '
                  '"arguments": "{\\"addr\\": 16}"}}',
    }
    codes = {d: gate.handle(raw, dialect=d).code for d, raw in raws.items()}
    assert codes == dict.fromkeys(raws, "range-addr")


def test_unknown_dialect_raises(gate: Gate) -> None:
    """A wrong dialect is the caller's bug, raised before anything runs."""
    with pytest.raises(ValueError, match="unknown dialect"):
        gate.handle("{}", dialect="xml")


def test_input_cap_is_configurable(device: RegisterFile) -> None:
    """A smaller input cap refuses a call that would otherwise run."""
    small = Gate(device, max_input_bytes=20)
    obs = small.handle('{"tool": "read_register", "arguments": {"addr": 1}}')
    assert (obs.stage, obs.code) == ("parse", "too-large")


def test_output_cap_refuses_large_results(device: RegisterFile) -> None:
    """A result over the output cap is refused; for a write the message says it ran."""
    tiny = Gate(device, max_output_bytes=18)  # {"addr":1,"data":0} is 19 bytes
    read = tiny.handle('{"tool": "read_register", "arguments": {"addr": 1}}')
    assert (read.ok, read.stage, read.code) == (False, "observe", "output-too-large")
    assert read.message == "read_register ran, but its result is 19 bytes, over the cap of 18 bytes"
    write = tiny.handle('{"tool": "write_register", "arguments": {"addr": 1, "data": 7}}')
    assert write.code == "output-too-large"
    assert "write_register ran and its effect stands" in (write.message or "")
    assert device.snapshot()[1] == 7


def test_output_cap_does_not_count_the_echoed_id(device: RegisterFile) -> None:
    """The model's own id is not part of the result it is capped on."""
    gate = Gate(device, max_output_bytes=30)
    obs = gate.handle('{"tool": "read_register", "arguments": {"addr": 1}, "id": "'
                      + "i" * 200 + '"}')
    assert obs.ok and obs.id == "i" * 200


def test_openai_adapter_refusals_keep_the_id(gate: Gate) -> None:
    """A refused OpenAI call still carries its tool_call_id back."""
    obs = gate.handle('{"id": "call_1", "type": "function", "function": '
                      '{"name": "read_register", "arguments": 5}}', dialect="openai")
    assert obs.to_dict()["id"] == "call_1" and obs.code == "bad-arguments"


def test_openai_shape_order_matches_canonical(gate: Gate) -> None:
    """Without a name, the OpenAI dialect says missing-tool, as the canonical one does."""
    obs = gate.handle('{"id": "c", "type": "function", "function": {"arguments": 5}}',
                      dialect="openai")
    assert obs.code == gate.handle('{"arguments": 5}').code == "missing-tool"


@pytest.mark.parametrize("choice", ["nosuch", "", "read_register\n", 123])
def test_tool_choice_must_be_an_offered_tool(gate: Gate, choice: Any) -> None:
    """Forcing a tool the gate does not offer is the caller's bug, raised at once."""
    with pytest.raises(ValueError, match="tool_choice"):
        gate.handle('{"tool": "read_register", "arguments": {"addr": 1}}', tool_choice=choice)
    with pytest.raises(ValueError, match="tool_choice"):
        gate.handle_call({"tool": "read_register", "arguments": {"addr": 1}},
                         tool_choice=choice)


class LyingDevice(RegisterFile):
    """Answers writes and reads with a chosen value, whatever was asked."""

    def __init__(self, answer: Any) -> None:
        super().__init__()
        self.answer = answer

    def write(self, addr: int, data: int) -> int:
        return self.answer  # type: ignore[no-any-return]

    def read(self, addr: int) -> int:
        return self.answer  # type: ignore[no-any-return]


@pytest.mark.parametrize("answer", [None, 300, -1, "x", True, 8])
def test_a_device_answer_that_is_not_the_value_written_is_a_failure(answer: Any) -> None:
    """A write counts only when the device reports the value written, as a byte."""
    obs = Gate(LyingDevice(answer)).handle(
        '{"tool": "write_register", "arguments": {"addr": 1, "data": 7}}')
    assert (obs.ok, obs.stage, obs.code) == (False, "execute", "device-error")


@pytest.mark.parametrize("answer", [None, 300, "x", True])
def test_a_read_answer_that_is_not_a_byte_is_a_failure(answer: Any) -> None:
    """A read reports a failure when the device answers something that is not 0..255."""
    obs = Gate(LyingDevice(answer)).handle('{"tool": "read_register", "arguments": {"addr": 1}}')
    assert (obs.ok, obs.code) == (False, "device-error")


@pytest.mark.parametrize("cap", [0, -1, 1.5, "8"])
def test_caps_must_be_positive_ints(cap: Any) -> None:
    """Caps are bytes: positive ints (None means the policy's cap, else the default)."""
    with pytest.raises(ValueError, match="positive int"):
        Gate(max_input_bytes=cap)


class FailingDevice(RegisterFile):
    """A register file whose writes fail in a chosen way."""

    def __init__(self, error: Exception | None) -> None:
        super().__init__()
        self.error = error

    def write(self, addr: int, data: int) -> int:
        if self.error is None:
            return super().write(addr, data)
        raise self.error


DEVICE_FAILURES = [
    (DeviceTimeout("no valid reply within 0.5 s"), "device-timeout", True,
     "the device did not answer in time: no valid reply within 0.5 s"),
    (TransportError("the write was not sent: port /dev/x failed"), "device-unavailable", True,
     "the device is unavailable: the write was not sent: port /dev/x failed"),
    (DeviceBusy("register 1: BUSY", code="BUSY"), "device-busy", True,
     "the device could not take the call now: register 1: BUSY"),
    (DeviceRefused("register 1: ADDR", code="ADDR"), "device-error", False,
     "the device refused: register 1: ADDR"),
    (DeviceError("acknowledged 0x02, not 0x01"), "device-error", False,
     "the device failed: acknowledged 0x02, not 0x01"),
]


class OtherValueDevice(RegisterFile):
    """A register file that stores the low nibble of what is written (a stuck bus line)."""

    def write(self, addr: int, data: int) -> int:
        return super().write(addr, data & 0x0F)


def test_a_write_that_stored_another_value_failed_it_was_not_refused(tmp_path: Path) -> None:
    """The register changed, so the write executed: device-error "failed", its key kept."""
    device = OtherValueDevice()
    raw = ('{"tool": "write_register", "arguments": {"addr": 3, "data": 255}, '
           '"idempotency_key": "k"}')
    with Gate(device, audit=AuditLog(tmp_path / "audit.db")) as gate:
        first, again = gate.handle(raw), gate.handle(raw)
    assert (first.stage, first.code, first.message) == (
        "execute", "device-error", "the device failed: register 3 holds 15 after writing 255")
    assert (again.code, again.replay) == ("device-error", True)
    assert device.snapshot()[3] == 15 and device.write_count == 1


@pytest.mark.parametrize(("error", "code", "retryable", "message"), DEVICE_FAILURES)
def test_device_failures_are_failures(error: Exception, code: str, retryable: bool,
                                      message: str) -> None:
    """A device failure is reported as a failure at the execute stage, never as success, with
    a code that says whether the request may have run and whether to retry."""
    obs = Gate(FailingDevice(error)).handle(
        '{"tool": "write_register", "arguments": {"addr": 1, "data": 1}}')
    assert (obs.ok, obs.stage, obs.code, obs.message) == (False, "execute", code, message)
    assert obs.refusal is not None and obs.refusal.retryable is retryable


@pytest.mark.parametrize(("error", "code", "retryable", "message"), DEVICE_FAILURES)
def test_idempotency_key_after_a_device_failure(tmp_path: Path, error: Exception, code: str,
                                                retryable: bool, message: str) -> None:
    """After a timeout, a port failure before sending or a busy refusal, the key stays free
    and the retry runs; after a definite device error the stored outcome is replayed."""
    device = FailingDevice(error)
    raw = ('{"tool": "write_register", "arguments": {"addr": 1, "data": 1}, '
           '"idempotency_key": "k1"}')
    with Gate(device, audit=AuditLog(tmp_path / "audit.db")) as gate:
        first = gate.handle(raw)
        device.error = None  # the device works again
        second = gate.handle(raw)
    assert first.code == code
    if retryable:
        assert (second.ok, second.replay) == (True, False)
    else:
        assert (second.code, second.replay) == (code, True)


def test_unexpected_exception_becomes_internal_error(caplog: pytest.LogCaptureFixture) -> None:
    """A bug in a device becomes an internal-error observation, logged, never raised."""
    with caplog.at_level(logging.ERROR, logger="regdev"):
        obs = Gate(FailingDevice(ZeroDivisionError("boom"))).handle(
            '{"tool": "write_register", "arguments": {"addr": 1, "data": 1}}')
    assert (obs.ok, obs.stage, obs.code) == (False, "internal", "internal-error")
    assert "Traceback" not in obs.to_json()
    assert "ZeroDivisionError" in caplog.text


def test_validated_only_tool_is_refused_at_execute() -> None:
    """A tool without a handler is validated but cannot run."""
    tool = Tool(name="t", description="", input_schema={"type": "object"})
    obs = Gate(tools=ToolSet([tool])).handle('{"tool": "t", "arguments": {}}')
    assert (obs.stage, obs.code) == ("execute", "device-error")


def assert_one_observation(obs: Observation, device: CountingDevice, before: list[int]) -> None:
    assert isinstance(obs, Observation)
    out = obs.to_dict()
    assert out["ok"] is obs.ok
    if obs.ok:
        assert device.accesses == 1
        assert out["result"]["addr"] in range(16)
    else:
        assert device.accesses == 0, "a refused call reached the device"
        assert device.snapshot() == before
        assert out["stage"] in ("parse", "validate")
        assert "\n" not in out["message"]


#: One gate over one counting device for the property tests below: making a gate per example,
#: its checks compiled each time, was most of their time.
_DEVICE = CountingDevice()
_GATE = Gate(_DEVICE)


def _fresh() -> tuple[CountingDevice, Gate]:
    """The shared gate and its device as a new one would be: registers at reset, no access
    counted (the gate keeps nothing between calls without a policy or an audit log)."""
    _DEVICE.reset()
    _DEVICE.accesses = 0
    return _DEVICE, _GATE


@given(st.one_of(st.text(max_size=200), st.binary(max_size=200)),
       st.sampled_from(["canonical", "mcp", "openai", "anthropic"]))
def test_arbitrary_text_gives_one_observation(raw: str | bytes, dialect: str) -> None:
    """Any text in any dialect gives exactly one observation; nothing refused is executed."""
    device, gate = _fresh()
    before = device.snapshot()
    assert_one_observation(gate.handle(raw, dialect=dialect), device, before)


@given(json_values, st.sampled_from(["canonical", "mcp", "openai", "anthropic"]))
def test_arbitrary_json_gives_one_observation(value: Any, dialect: str) -> None:
    """Any JSON document gives exactly one observation; nothing refused is executed."""
    device, gate = _fresh()
    assert_one_observation(gate.handle(to_json(value), dialect=dialect), device,
                           device.snapshot())


@given(canonical_calls(), st.sampled_from([None, "write_register", "read_register"]))
def test_near_miss_calls_give_one_observation(call: Any, tool_choice: str | None) -> None:
    """Calls biased to edges: refusals never reach the device; acceptances reach it once."""
    device, gate = _fresh()
    before = device.snapshot()
    obs = gate.handle(to_json(call), tool_choice=tool_choice)
    assert_one_observation(obs, device, before)
    if obs.ok:
        assert obs.tool == call["tool"]
        assert obs.result is not None and obs.result["addr"] == call["arguments"]["addr"]


@given(raw_register_calls())
def test_number_literals_at_the_edges(raw: str) -> None:
    """Edge number literals and ids: never an internal error; what runs is exact ints."""
    device, gate = _fresh()
    before = device.snapshot()
    obs = gate.handle(raw)
    assert obs.code != "internal-error"
    assert_one_observation(obs, device, before)
    if obs.ok:
        assert obs.result is not None and type(obs.result["addr"]) is int


def test_gate_is_a_device_abstraction_user() -> None:
    """Any Device subclass works behind the gate."""

    class Constant(Device):
        def read(self, addr: int) -> int:
            return 42

        def write(self, addr: int, data: int) -> int:
            return data

        def reset(self) -> None:
            pass

        def snapshot(self) -> list[int]:
            return [42] * 16

    obs = Gate(Constant()).handle('{"tool": "read_register", "arguments": {"addr": 0}}')
    assert obs.result == {"addr": 0, "data": 42}


class AppliesThenFails(RegisterFile):
    """Applies a write, then fails unexpectedly (a bug after the device call)."""

    def write(self, addr: int, data: int) -> int:
        super().write(addr, data)
        raise ZeroDivisionError("after the write")


def test_an_exception_after_the_device_call_keeps_the_record_and_the_key(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Once the device call started, the write is recorded durably and its key kept, so a
    retry with the key is answered, not run a second time."""
    device = AppliesThenFails()
    gate = Gate(device, audit=AuditLog(tmp_path / "audit.db", flush_interval=3600))
    raw = ('{"tool": "write_register", "arguments": {"addr": 1, "data": 7}, '
           '"idempotency_key": "k"}')
    with caplog.at_level(logging.ERROR, logger="regdev"):
        first = gate.handle(raw)
    assert (first.stage, first.code) == ("internal", "internal-error")
    record = only_record(tmp_path / "audit.db")  # committed already: durable
    assert (record.code, record.idempotency_key, record.execute_ns) == (
        "internal-error", "k", None)
    again = gate.handle(raw)
    assert (again.code, again.replay) == ("internal-error", True)
    assert device.write_count == 1 and device.snapshot()[1] == 7
    gate.close()


def only_record(path: Path) -> AuditRecord:
    records = read_audit(path)
    assert len(records) == 1, records
    return records[0]


@pytest.fixture(scope="module")
def gates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Gate]]:
    """A plain gate, one with an empty policy, one with an audit log (each its own device)."""
    audited = Gate(RegisterFile(), audit=AuditLog(tmp_path_factory.mktemp("a") / "audit.db"))
    yield [Gate(RegisterFile()), Gate(RegisterFile(), policy=Policy()), audited]
    audited.close()


@given(canonical_calls(), st.sampled_from([None, "write_register", "read_register"]))
def test_one_pipeline_whatever_is_switched_on(gates: list[Gate], call: Any,
                                             tool_choice: str | None) -> None:
    """The plain gate, a gate with an empty policy, one with an audit log, and handle_call on
    the decoded call all give the same observation."""
    raw = to_json(call)
    observations = []
    for gate in gates:
        gate.device.reset()
        observations.append(gate.handle(raw, tool_choice=tool_choice))
    for gate in gates[:2]:
        gate.device.reset()
        observations.append(gate.handle_call(call, tool_choice=tool_choice))
    assert len({obs.to_json() for obs in observations}) == 1, observations


def _is_json_data(value: Any) -> bool:
    """The test's own reading of JSON data: str-keyed dicts, lists, tuples, finite numbers."""
    if type(value) is dict:
        return all(type(k) is str and _is_json_data(v) for k, v in value.items())
    if type(value) in (list, tuple):
        return all(_is_json_data(item) for item in value)
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is Decimal:
        return value.is_finite()
    return value is None or type(value) in (str, int, bool)


@given(python_calls())
def test_handle_call_refuses_python_data_that_is_not_json(call: Any) -> None:
    """Any Python value: never internal-error, not-json when it is not JSON data, and the
    device is reached only by a call that was accepted."""
    device, gate = _fresh()
    observation = gate.handle_call(call)
    code = observation.refusal.code if observation.refusal is not None else None
    assert code != "internal-error"
    assert device.accesses == (1 if code is None else 0)
    if not _is_json_data(call):
        assert code == "not-json"


@pytest.mark.parametrize(("arguments", "problem"), [
    ({"addr": 3, "data": 1, 5: 1}, "a key of Python type int at `$.arguments`"),
    ({"addr": 3, "data": math.nan}, "nan at `$.arguments.data` (JSON numbers are finite)"),
    ({"addr": 3, "data": {1, 2}}, "a Python set at `$.arguments.data`"),
    ({"addr": b"3", "data": 1}, "a Python bytes at `$.arguments.addr`"),
])
def test_handle_call_and_the_provider_path_agree_on_non_json_data(
        arguments: dict[Any, Any], problem: str, tmp_path: Path) -> None:
    """handle_call words non-JSON data as the provider helpers do, and both audit it
    textless (the provider's call by handle_call too, so with no canonical tool name)."""
    device = CountingDevice()
    with Gate(device, audit=AuditLog(tmp_path / "a.db")) as gate:
        observation = gate.handle_call({"tool": "write_register", "arguments": arguments})
        reply = anthropic_tool_results({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "write_register", "input": arguments}]},
            gate)
    message = f"the tool call is not JSON data: {problem}"
    assert observation.refusal == Refusal("parse", "not-json", message)
    assert reply is not None
    assert json.loads(reply["content"][0]["content"])["message"] == message.replace(
        "$.arguments", "$.input")  # the provider's block, where its arguments are `input`
    assert device.accesses == 0
    direct, provider = read_audit(tmp_path / "a.db")
    assert (direct.code, direct.tool, direct.raw, direct.arguments) == (
        "not-json", "write_register", None, None)
    assert (provider.code, provider.raw, provider.arguments) == ("not-json", None, None)


def test_handle_call_refuses_a_call_that_holds_itself(tmp_path: Path) -> None:
    """A container that holds itself is not-json, not an internal error in the audit log."""
    arguments: dict[str, Any] = {"addr": 3, "data": 1}
    arguments["again"] = arguments
    with Gate(audit=AuditLog(tmp_path / "a.db")) as gate:
        observation = gate.handle_call({"tool": "write_register", "arguments": arguments})
    assert observation.refusal is not None
    assert (observation.refusal.stage, observation.refusal.code) == ("parse", "not-json")
    assert [r.code for r in read_audit(tmp_path / "a.db")] == ["not-json"]


# --- strings that are not Unicode text (a lone surrogate), handed over as Python data -------

SURROGATE = "x\ud800"


def test_a_lone_surrogate_in_call_data_is_not_json_and_every_call_is_recorded(
        tmp_path: Path) -> None:
    """A tool name or an argument key holding a lone surrogate is not-json, in words; the
    calls around it are all recorded (the audit log stores the bad text escaped)."""
    device = CountingDevice()
    with Gate(device, audit=AuditLog(tmp_path / "a.db")) as gate:
        before = [gate.handle_call({"tool": "read_register", "arguments": {"addr": i}})
                  for i in range(3)]
        bad_name = gate.handle_call({"tool": SURROGATE, "arguments": {}})
        bad_key = gate.handle_call({"tool": "read_register", "arguments": {SURROGATE: 1}})
        after = gate.handle_call({"tool": "read_register", "arguments": {"addr": 4}})
    assert [o.ok for o in before] == [True, True, True] and after.ok
    assert (bad_name.code, bad_name.message) == ("not-json", (
        "the tool call is not JSON data: a string holding a lone surrogate (not Unicode text) "
        "at `$.tool`"))
    assert bad_key.code == "not-json" and bad_key.message is not None
    assert "a key holding a lone surrogate (not Unicode text) at `$.arguments`" in (
        bad_key.message)
    records = read_audit(tmp_path / "a.db")
    assert [r.code for r in records] == [None, None, None, "not-json", "not-json", None]
    assert device.accesses == 4


def test_a_lone_surrogate_idempotency_key_is_refused_before_the_device(tmp_path: Path) -> None:
    """An idempotency key that is not Unicode text is bad-idempotency-key: the write does not
    run, and it is recorded."""
    device = CountingDevice()
    with Gate(device, audit=AuditLog(tmp_path / "a.db")) as gate:
        refused = gate.handle_call({"tool": "write_register", "arguments": {"addr": 2, "data": 3}},
                                   idempotency_key=SURROGATE)
    assert (refused.stage, refused.code) == ("validate", "bad-idempotency-key")
    assert refused.message == ("idempotency_key must be a string of 1..256 characters, got a "
                               "string holding a lone surrogate (not Unicode text)")
    assert device.accesses == 0 and device.read(2) == 0
    assert [r.code for r in read_audit(tmp_path / "a.db")] == ["bad-idempotency-key"]


def test_a_lone_surrogate_loop_id_is_a_caller_error_and_a_call_id_is_not_echoed(
        tmp_path: Path) -> None:
    """loop_id must be text (ValueError before anything runs, in handle, handle_call and
    run_loop); a call_id that is not text is not echoed, and the call is recorded."""
    device = CountingDevice()
    write = {"tool": "write_register", "arguments": {"addr": 2, "data": 3}}
    with Gate(device, audit=AuditLog(tmp_path / "a.db")) as gate:
        with pytest.raises(ValueError, match="loop_id must be a string of Unicode text"):
            gate.handle_call(write, loop_id=SURROGATE)
        with pytest.raises(ValueError, match="loop_id must be a string of Unicode text"):
            gate.handle(json.dumps(write), loop_id=SURROGATE)
        with pytest.raises(ValueError, match="loop_id must be a string of Unicode text"):
            run_loop(lambda observations: None, gate, loop_id=SURROGATE)
        assert device.accesses == 0
        done = gate.handle_call(write, call_id=SURROGATE)
    assert done.ok and done.id is None and device.read(2) == 3
    assert [r.ok for r in read_audit(tmp_path / "a.db")] == [True]


def test_provider_call_ids_that_are_not_text_stop_the_turn_before_any_call_runs() -> None:
    """An OpenAI or Anthropic tool call id with a lone surrogate is a ValueError before the
    first call of the turn runs (its answer could not be sent back)."""
    device = CountingDevice()
    gate = Gate(device)
    write = {"type": "function",
             "function": {"name": "write_register", "arguments": '{"addr": 4, "data": 9}'}}
    turn = {"role": "assistant", "tool_calls": [{"id": "c1", **write}, {"id": "c\ud800", **write}]}
    with pytest.raises(ValueError, match="OpenAI tool_calls 1 needs a non-empty string `id`"):
        openai_tool_results(turn, gate)
    anthropic = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t\ud800", "name": "read_register", "input": {"addr": 1}}]}
    with pytest.raises(ValueError, match="needs a non-empty string `id`"):
        anthropic_tool_results(anthropic, gate)
    assert device.accesses == 0


def test_python_data_messages_name_huge_integers_and_cycles() -> None:
    """not-json for Python data says what is wrong in regdev's words, not Python's."""
    gate = Gate()
    huge = gate.handle_call({"tool": "write_register", "arguments": {"addr": 10**5000, "data": 1}})
    assert huge.code == "not-json" and huge.message == (
        "the tool call is not JSON data: an integer of more than 4300 digits at "
        "`$.arguments.addr` (the most regdev reads)")
    cycle: dict[str, Any] = {"tool": "read_register"}
    cycle["arguments"] = cycle
    looped = gate.handle_call(cycle)
    assert looped.code == "not-json" and looped.message == (
        "the tool call is not JSON data: a container that holds itself, or nesting deeper "
        "than regdev reads")


# --- a handler that fails, and a log that cannot commit: the answer and the record -----------

_BOOM = Tool("boom", "A handler that fails in a way regdev does not know.", {
    "type": "object", "properties": {}, "additionalProperties": False},
    handler=lambda device, arguments: 1 / 0)  # type: ignore[arg-type,return-value]
_LATE = Tool("late", "A handler whose device does not answer in time.", {
    "type": "object", "properties": {}, "additionalProperties": False},
    handler=lambda device, arguments: (_ for _ in ()).throw(DeviceTimeout("no reply")))
_UNBUILT = Tool("unbuilt", "Validated only: no handler.", {
    "type": "object", "properties": {}, "additionalProperties": False})


def _interrupt(device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
    raise KeyboardInterrupt


_FAILING_TOOLS = ToolSet([*REGISTER_TOOLS.values(), _BOOM, _LATE, _UNBUILT,
                          Tool("stop", "Ctrl-C while the device runs it.", {
                              "type": "object", "properties": {},
                              "additionalProperties": False}, handler=_interrupt)])


def _last_record(gate: Gate) -> dict[str, Any]:
    """The gate's last audit record, column by column, but its id and time, and of each stage
    time and of its intent id (random) only whether there is one."""
    assert gate.audit is not None
    gate.audit.flush()
    columns = msgspec.structs.asdict(read_audit(gate.audit.path, last=1)[0])
    del columns["id"], columns["time"]
    columns["intent"] = columns["intent"] is not None
    for stage in PIPELINE:
        columns[f"{stage}_ns"] = columns[f"{stage}_ns"] is not None
    return columns


@pytest.mark.parametrize("tool", ["boom", "late", "unbuilt", "stop"])
def test_a_failing_call_is_answered_and_recorded_with_its_code(tmp_path: Path,
                                                               tool: str) -> None:
    """A handler that raises (an error regdev does not know, a device timeout, Ctrl-C) or a
    tool with no handler: its code, or Ctrl-C raised after the call is recorded."""
    code = {"boom": "internal-error", "late": "device-timeout", "unbuilt": "device-error",
            "stop": "internal-error"}[tool]
    with Gate(RegisterFile(), _FAILING_TOOLS,
              audit=AuditLog(tmp_path / "audit.db", flush_interval=3600)) as gate:
        raw = json.dumps({"tool": tool, "arguments": {}, "id": "c1"})
        if tool == "stop":
            with pytest.raises(KeyboardInterrupt):
                gate.handle(raw)
        else:
            assert gate.handle(raw).code == code
        record = _last_record(gate)
    assert (record["code"], record["tool"]) == (code, tool)
    assert record["execute_ns"] is (tool in ("late", "unbuilt"))  # a raise is not timed


def test_a_closed_audit_log_refuses_at_authorize_and_nothing_is_sent(tmp_path: Path) -> None:
    """A closed audit log refuses every call at authorize, and nothing reaches the device."""
    gate = Gate(RegisterFile(), audit=AuditLog(tmp_path / "audit.db"))
    assert gate.audit is not None
    gate.audit.close()
    seen = gate.handle(to_json({"tool": "write_register", "arguments": {"addr": 1, "data": 2}}))
    assert (seen.stage, seen.code) == ("authorize", "audit-error")
    assert gate.device.snapshot()[1] == 0


def test_a_value_quoted_by_repr_is_escaped_once() -> None:
    """A loop_id, a provider call id or a schema key shown by its repr() is escaped once:
    the lone surrogate reads ``\\ud800``, the ESC ``\\x1b`` (not ``\\\\ud800``)."""
    from regdev.core._errors import SchemaError  # noqa: PLC0415
    from regdev.gate._schema import check_input_schema  # noqa: PLC0415

    with Gate() as gate:
        with pytest.raises(ValueError) as raised:
            gate.handle("{}", loop_id=SURROGATE)
        assert str(raised.value) == ("loop_id must be a string of Unicode text, got "
                                     "'x\\ud800'")
        turn = {"role": "assistant", "tool_calls": [{"id": "c\ud800", "type": "function",
                                                     "function": {"name": "read_register",
                                                                  "arguments": "{}"}}]}
        with pytest.raises(ValueError) as raised:
            openai_tool_results(turn, gate)
        assert "got id 'c\\ud800'; no call was run" in str(raised.value)
    with pytest.raises(SchemaError) as schema_error:
        check_input_schema({"type": "object", "properties": {b"\x1b": {}}})
    assert str(schema_error.value).startswith("property names must be strings, got b'\\x1b'")
