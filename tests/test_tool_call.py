"""A framework's raw tool call (name and arguments text) and the gate's async forms."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from regdev import (
    Approval,
    AuditLog,
    Gate,
    MapError,
    Policy,
    RegisterFile,
    RegisterMap,
    read_audit,
    tool_definitions,
)

#: The cases a scripted model sends through every adapter, and the verdict of each.
CASES = {
    "string for an int": ('{"addr": "3", "data": 1}', "type-addr"),
    "extra argument": ('{"addr": 3, "data": 1, "note": "x"}', "unknown-argument"),
    "repeated key": ('{"addr": 3, "data": 1, "addr": 4}', "not-json"),
    "out of range": ('{"addr": 3, "data": 300}', "range-data"),
    "truncated": ('{"addr": 3, "da', "not-json"),
    "inexact number": ('{"addr": 3, "data": 3.0000000000000001}', "type-data"),
    "valid": ('{"addr": 3, "data": 7}', None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tool_call_verdict_is_the_raw_texts(case: str) -> None:
    """handle_tool_call gives the verdict and message that handle gives the same raw text."""
    text, code = CASES[case]
    framework = Gate().handle_tool_call("write_register", text, call_id="call_1")
    raw = Gate().handle(f'{{"tool": "write_register", "arguments": {text}}}')
    assert framework.code == raw.code == code
    assert framework.id == "call_1"
    if code not in (None, "not-json"):
        assert framework.to_dict()["message"] == raw.to_dict()["message"]


def test_tool_call_namespaced_name_is_unknown_tool() -> None:
    """A namespaced tool name is unknown-tool, listing the tools offered."""
    obs = Gate().handle_tool_call("functions.write_register", '{"addr": 3, "data": 1}')
    assert obs.code == "unknown-tool"
    assert "write_register" in obs.to_dict()["message"]


def test_tool_call_over_the_cap_is_too_large() -> None:
    """Arguments text over the gate's byte cap is too-large before it is parsed."""
    gate = Gate(max_input_bytes=64)
    obs = gate.handle_tool_call("write_register", '{"addr": 3, "data": 1, "pad": "' +
                                "x" * 80 + '"}')
    assert obs.code == "too-large"


def test_tool_call_is_audited_with_its_text(tmp_path: Path) -> None:
    """The record keeps the arguments text as sent, the tool, loop, step and proposer."""
    db = tmp_path / "audit.db"
    with Gate(audit=AuditLog(db)) as gate:
        gate.handle_tool_call("write_register", '{"addr": 3, "da', loop_id="run-1", step=2,
                              proposer="pydantic-ai:test")
    (record,) = read_audit(db)
    assert (record.dialect, record.tool, record.code) == ("tool-call", "write_register",
                                                          "not-json")
    assert record.raw == b'{"addr": 3, "da'
    assert (record.loop_id, record.step, record.proposer) == ("run-1", 2, "pydantic-ai:test")


def test_per_call_approve_hook_replaces_the_policys() -> None:
    """approve= answers for this call's protected write in place of the policy's hook."""
    policy = Policy.from_file("examples/policy.toml", approve=lambda request: False)
    gate = Gate(RegisterFile(), policy=policy)
    text = '{"addr": 15, "data": 1}'
    assert gate.handle_tool_call("write_register", text).code == "approval-denied"
    obs = gate.handle_tool_call("write_register", text,
                                approve=lambda request: Approval(True, "person", "framework"))
    assert obs.ok, obs.to_dict()


class _Held(RegisterFile):
    """A device whose reads wait until released, counting how many wait at once."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.waiting = 0
        self.most = 0

    def read(self, addr: int) -> int:
        with self.lock:
            self.waiting += 1
            self.most = max(self.most, self.waiting)
        try:
            assert self.release.wait(60)
            return super().read(addr)
        finally:
            with self.lock:
                self.waiting -= 1


def test_async_forms_leave_the_event_loop_free_and_are_bounded() -> None:
    """ahandle_tool_call waits in a worker thread (the loop runs meanwhile), at most
    async_threads calls at once."""
    device = _Held()
    gate = Gate(device, async_threads=2)

    async def main() -> list[Any]:
        calls = [asyncio.ensure_future(gate.ahandle_tool_call("read_register", '{"addr": 3}'))
                 for _ in range(5)]
        calls.append(asyncio.ensure_future(
            gate.ahandle('{"tool": "read_register", "arguments": {"addr": 4}}')))
        for _ in range(6000):  # the loop runs while the device holds the calls
            if device.waiting == 2:
                break
            await asyncio.sleep(0.01)
        assert device.waiting == 2
        device.release.set()
        return list(await asyncio.gather(*calls))

    results = asyncio.run(main())
    gate.close()
    assert [obs.ok for obs in results] == [True] * 6
    assert device.most == 2


def test_async_form_on_a_closed_gate_raises() -> None:
    """A closed gate's async form says so rather than starting a thread."""
    gate = Gate()
    gate.close()
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(gate.ahandle_tool_call("read_register", '{"addr": 3}'))


def test_needs_approval_names_valid_protected_writes_only() -> None:
    """needs_approval is True only for a valid call that writes a protected register."""
    gate = Gate(RegisterFile(), policy=Policy.from_file("examples/policy.toml"))
    assert gate.needs_approval("write_register", '{"addr": 15, "data": 1}')
    assert gate.needs_approval("write_register", {"addr": 15, "data": 1})
    assert not gate.needs_approval("write_register", '{"addr": 14, "data": 1}')
    assert not gate.needs_approval("write_register", '{"addr": 15, "data": 1, "addr": 15}')
    assert not gate.needs_approval("write_register", '{"addr": 15, "data": 300}')
    assert not gate.needs_approval("read_register", '{"addr": 15}')


def test_tool_definitions_take_a_gate_and_its_session() -> None:
    """tool_definitions(format, gate, session=...) declares what that gate runs for it."""
    gate = Gate(RegisterFile(), policy=Policy.from_file("examples/policy.toml"))
    names = [d["name"] for d in tool_definitions("mcp", gate)]
    assert names == list(gate.tools)
    viewer = [d["name"] for d in tool_definitions("mcp", gate, session=gate.session("viewer"))]
    assert "write_register" not in viewer and "read_register" in viewer


def test_register_map_from_file_reads_rdl_and_json(tmp_path: Path) -> None:
    """RegisterMap.from_file reads SystemRDL and the compiled JSON form to the same map."""
    rdl = RegisterMap.from_file("examples/sensor.rdl")
    compiled = tmp_path / "sensor.json"
    compiled.write_text(json.dumps(rdl.to_dict()))
    assert RegisterMap.from_file(compiled) == rdl
    assert rdl.name == "sensor"
    with pytest.raises(MapError, match="cannot read"):
        RegisterMap.from_file(tmp_path / "missing.rdl")
