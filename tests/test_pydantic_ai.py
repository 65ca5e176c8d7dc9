"""The pydantic-ai toolset, driven by a FunctionModel: raw arguments text to the gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="needs the pydantic-ai extra: pip install "
                                           "'regdev[pydantic-ai]'")

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from regdev import AuditLog, Gate, Policy, RegisterFile, read_audit
from regdev.integrations import pydantic_ai as regdev_pydantic_ai
from support.framework_script import check_run, script


def scripted(calls: list[tuple[str, str, Any]]) -> FunctionModel:
    """A model answering each request with the next scripted call, then a text."""
    pending = list(calls)
    turn = [0]

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn[0] += 1
        if not pending:
            return ModelResponse(parts=[TextPart("done")])
        name, text, _ = pending.pop(0)
        return ModelResponse(parts=[ToolCallPart(name, text, tool_call_id=f"call_{turn[0]}")])

    return FunctionModel(answer, model_name="scripted-1")


def test_pydantic_ai_run_gets_the_gates_verdicts(tmp_path: Path) -> None:
    """Every scripted mistake gets the verdict its raw text gets in process, audited in the
    run's loop with the proposer; 0% first-try validity, every mistake recovered."""
    db = tmp_path / "audit.db"
    # pydantic-ai answers an unknown tool name itself, before any toolset: not sent here
    calls = script(skip_names=("functions.write_register",))
    with Gate(RegisterFile(), audit=AuditLog(db)) as gate:
        agent = Agent(scripted(calls), toolsets=[regdev_pydantic_ai.toolset(gate)])
        result = agent.run_sync("set register 3 to 1")
        assert result.output == "done"
    records = check_run(db, calls, "pydantic-ai:scripted-1")
    assert records[0].loop_id == result.run_id  # the run is the loop


def test_pydantic_ai_refusal_is_the_frameworks_retry_with_regdevs_message(
        tmp_path: Path) -> None:
    """The model's retry prompt carries regdev's observation."""
    seen: list[str] = []
    calls = [("write_register", '{"addr": 3, "data": 300}', "range-data"),
             ("write_register", '{"addr": 3, "data": 1}', None)]
    pending = list(calls)

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for part in messages[-1].parts:
            if getattr(part, "tool_call_id", None) == "c":  # the answer to the last call
                retry = part.part_kind == "retry-prompt" or getattr(part, "retry", None)
                seen.append(f"{'retry' if retry else 'result'} {part.content}")
        if not pending:
            return ModelResponse(parts=[TextPart("done")])
        name, text, _ = pending.pop(0)
        return ModelResponse(parts=[ToolCallPart(name, text, tool_call_id="c")])

    agent = Agent(FunctionModel(answer), toolsets=[regdev_pydantic_ai.toolset(Gate())])
    assert agent.run_sync("go").output == "done"
    assert len(seen) == 2
    assert seen[0].startswith("retry ") and '"code":"range-data"' in seen[0]
    assert seen[1].startswith("result ") and '"ok":true' in seen[1]


def test_pydantic_ai_offers_only_the_sessions_tools() -> None:
    """A read-only session is offered no write tool."""
    gate = Gate(RegisterFile(), policy=Policy.from_file("examples/policy.toml"))
    toolset = regdev_pydantic_ai.toolset(gate, session=gate.session("viewer"))
    assert [d.name for d in toolset.definitions] == ["read_register"]


def test_pydantic_ai_protected_write_is_a_deferred_approval(tmp_path: Path) -> None:
    """A protected write ends the run with DeferredToolRequests; the approval runs it."""
    db = tmp_path / "audit.db"
    with Gate(RegisterFile(), policy=Policy.from_file("examples/policy.toml"),
              audit=AuditLog(db)) as gate:
        model = scripted([("write_register", '{"addr": 15, "data": 9}', None)])
        agent = Agent(model, toolsets=[regdev_pydantic_ai.toolset(gate)],
                      output_type=[str, DeferredToolRequests])
        first = agent.run_sync("write")
        assert isinstance(first.output, DeferredToolRequests)
        (asked,) = first.output.approvals
        assert gate.device.read(15) == 0
        results = DeferredToolResults(approvals={asked.tool_call_id: True})
        second = agent.run_sync(message_history=first.all_messages(),
                                deferred_tool_results=results)
        assert second.output == "done"
        assert gate.device.read(15) == 9
    (record,) = [r for r in read_audit(db) if r.event == "call"]
    assert record.ok and record.approval == "pydantic-ai"
