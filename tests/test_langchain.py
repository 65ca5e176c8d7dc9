"""The LangChain adapter, driven by a fake chat model: raw arguments text to the gate."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core", reason="needs the langchain extra: pip install "
                                              "'regdev[langchain]'")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from regdev import AuditLog, Gate, Policy, RegisterFile, read_audit
from regdev.integrations import langchain as regdev_langchain
from support.framework_script import check_run, script


def provider_message(turn: int, name: str, text: str) -> AIMessage:
    """An AIMessage as an OpenAI-compatible integration makes it: the raw call kept in
    additional_kwargs, parsed by langchain-core into tool_calls (or invalid_tool_calls)."""
    raw = {"id": f"call_{turn}", "type": "function", "function": {"name": name,
                                                                 "arguments": text}}
    return AIMessage(content="", additional_kwargs={"tool_calls": [raw]},
                     response_metadata={"model_name": "scripted-1"})


def run(tools: regdev_langchain.RegdevTools, calls: list[tuple[str, str, Any]]) -> int:
    """Drive a fake chat model's scripted turns to the end; the number of tool messages."""
    replies = [provider_message(i, name, text) for i, (name, text, _) in enumerate(calls)]
    model = GenericFakeChatModel(messages=iter([*replies, AIMessage(content="done")]))
    messages: list[BaseMessage] = [HumanMessage("set register 3 to 1")]
    answered = 0
    while True:
        reply = model.invoke(messages)
        messages.append(reply)
        if not reply.additional_kwargs.get("tool_calls"):
            return answered
        answers = asyncio.run(tools.aanswer(reply))  # type: ignore[arg-type]
        answered += len(answers)
        messages += answers


def test_langchain_answer_gets_the_gates_verdicts(tmp_path: Path) -> None:
    """Every scripted mistake gets the verdict its raw text gets in process, audited in one
    loop with the proposer; 0% first-try validity, every mistake recovered."""
    db = tmp_path / "audit.db"
    calls = script()
    with Gate(RegisterFile(), audit=AuditLog(db)) as gate:
        tools = regdev_langchain.tools(gate)
        assert run(tools, calls) == len(calls)
    check_run(db, calls, "langchain:scripted-1")


def test_langchain_parsed_message_without_raw_text_loses_the_repeated_key() -> None:
    """Without the raw text, the parsed args are all there is: the repeated key's last
    value is what reaches the gate (documented), the truncated call is still not-json."""
    message = provider_message(1, "write_register", '{"addr": 3, "data": 1, "addr": 4}')
    parsed = AIMessage(content="", tool_calls=message.tool_calls,
                       invalid_tool_calls=message.invalid_tool_calls)
    gate = Gate()
    (answer,) = regdev_langchain.tools(gate).answer(parsed)
    assert answer.status == "success" and gate.device.read(4) == 1
    truncated = provider_message(2, "write_register", '{"addr": 3, "da')
    bare = AIMessage(content="", invalid_tool_calls=truncated.invalid_tool_calls)
    (answer,) = regdev_langchain.tools(gate).answer(bare)
    assert '"code":"not-json"' in str(answer.content)


def test_langchain_tool_invoked_with_a_tool_call_goes_through_the_gate(
        tmp_path: Path) -> None:
    """A tool invoked by ToolNode's way (a tool call) is validated and audited by the gate."""
    db = tmp_path / "audit.db"
    with Gate(RegisterFile(), audit=AuditLog(db)) as gate:
        (write, _read) = regdev_langchain.tools(gate, proposer="langchain:m")
        result = write.invoke({"name": "write_register", "args": {"addr": 3, "data": 300},
                               "id": "call_1", "type": "tool_call"})
        assert '"code":"range-data"' in str(result.content)
    (record,) = read_audit(db)
    assert record.code == "range-data" and record.proposer == "langchain:m"


def test_langchain_offers_only_the_sessions_tools() -> None:
    """A read-only session is offered no write tool."""
    gate = Gate(RegisterFile(), policy=Policy.from_file("examples/policy.toml"))
    names = [t.name for t in regdev_langchain.tools(gate, session=gate.session("viewer"))]
    assert names == ["read_register"]


def test_langchain_approval_answer_reaches_the_gate() -> None:
    """A person's answer passed to answer() decides the protected write."""
    gate = Gate(RegisterFile(), policy=Policy.from_file("examples/policy.toml"))
    tools = regdev_langchain.tools(gate)
    message = provider_message(1, "write_register", '{"addr": 15, "data": 9}')
    assert gate.needs_approval("write_register", '{"addr": 15, "data": 9}')
    (denied,) = tools.answer(message)
    assert '"code":"approval-denied"' in str(denied.content)
    (done,) = tools.answer(message, approved={"call_1": True})
    assert done.status == "success" and gate.device.read(15) == 9
