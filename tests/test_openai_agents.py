"""The OpenAI Agents SDK adapter, driven by a scripted model: raw arguments text to the gate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="needs the openai-agents extra: pip install "
                                      "'regdev[openai-agents]'")

from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from regdev import AuditLog, Gate, Policy, RegisterFile, read_audit
from regdev.integrations import openai_agents
from support.framework_script import check_run, script

set_tracing_disabled(True)


class ScriptedModel(Model):
    """A model that answers each turn with the next scripted tool call, then a text."""

    model = "scripted-1"

    def __init__(self, calls: list[tuple[str, str, Any]]) -> None:
        self.calls = list(calls)
        self.turn = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        self.turn += 1
        if self.calls:
            name, text, _ = self.calls.pop(0)
            item: Any = ResponseFunctionToolCall(
                type="function_call", call_id=f"call_{self.turn}", name=name, arguments=text)
        else:
            item = ResponseOutputMessage(
                id="msg", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text="done", annotations=[])])
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def test_agents_sdk_run_gets_the_gates_verdicts(tmp_path: Path) -> None:
    """Every scripted mistake gets the verdict its raw text gets in process, audited in one
    loop with the proposer; the report shows 0% first-try validity, all recovered."""
    db = tmp_path / "audit.db"
    calls = script()
    with Gate(RegisterFile(), audit=AuditLog(db)) as gate:
        tools = openai_agents.tools(gate)
        agent = Agent(name="bench", instructions="", model=ScriptedModel(calls), tools=tools)
        result = asyncio.run(Runner.run(agent, "set register 3 to 1",
                                        run_config=tools.run_config(), max_turns=40))
        assert result.final_output == "done"
    check_run(db, calls, "openai-agents:scripted-1")


def test_agents_sdk_offers_only_the_sessions_tools() -> None:
    """A read-only session is offered no write tool."""
    gate = Gate(RegisterFile(), policy=Policy.from_file("examples/policy.toml"))
    names = [tool.name for tool in openai_agents.tools(gate, session=gate.session("viewer"))]
    assert names == ["read_register"]


def test_agents_sdk_protected_write_interrupts_for_approval(tmp_path: Path) -> None:
    """A protected write interrupts the run; the person's approval reaches the gate."""
    db = tmp_path / "audit.db"
    policy = Policy.from_file("examples/policy.toml")
    with Gate(RegisterFile(), policy=policy, audit=AuditLog(db)) as gate:
        tools = openai_agents.tools(gate)
        model = ScriptedModel([("write_register", '{"addr": 15, "data": 9}', None)])
        agent = Agent(name="bench", instructions="", model=model, tools=tools)

        async def main() -> Any:
            first = await Runner.run(agent, "write", run_config=tools.run_config())
            assert [i.raw_item.name for i in first.interruptions] == ["write_register"]
            state = first.to_state()
            state.approve(first.interruptions[0])
            return await Runner.run(agent, state, run_config=tools.run_config())

        assert asyncio.run(main()).final_output == "done"
        assert gate.device.read(15) == 9
    (record,) = [r for r in read_audit(db) if r.event == "call"]
    assert record.ok and record.approval == "openai-agents"
