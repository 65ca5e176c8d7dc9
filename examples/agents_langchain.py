"""regdev in LangChain, against a recorded chat model (no network, no key).

Run: python examples/agents_langchain.py   (needs: pip install 'regdev[langchain]')

The recorded model's messages are shaped as an OpenAI-compatible integration shapes them (the
raw call kept in ``additional_kwargs``); ``tools.answer`` reads each call's arguments text
there and hands it to the gate, and the audit log's report shows the run's first-try
validity and its recovery.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from regdev import AuditLog, Gate, RegisterFile, read_audit
from regdev.audit._report import adherence, format_report
from regdev.integrations import langchain as regdev_langchain

#: What the recorded model sends, one tool call a turn, each mistake then its fix.
FIX = ("write_register", '{"addr": 3, "data": 1}')
RECORDED = [
    ("write_register", '{"addr": "3", "data": 1}'), FIX,            # a string for an int
    ("write_register", '{"addr": 3, "data": 1, "addr": 4}'), FIX,   # a repeated key
    ("write_register", '{"addr": 3, "data": 3.0000000000000001}'), FIX,  # not exactly 3
    ("write_register", '{"addr": 3, "da'), FIX,                      # truncated
    ("functions.write_register", '{"addr": 3, "data": 1}'), FIX,     # a namespaced name
]


def recorded_message(turn: int, name: str, arguments: str) -> AIMessage:
    """The model's message as an OpenAI-compatible integration makes it."""
    call = {"id": f"call_{turn}", "type": "function",
            "function": {"name": name, "arguments": arguments}}
    return AIMessage(content="", additional_kwargs={"tool_calls": [call]},
                     response_metadata={"model_name": "recorded-1"})


def main() -> None:
    replies = [recorded_message(i, *call) for i, call in enumerate(RECORDED)]
    model = GenericFakeChatModel(messages=iter([*replies, AIMessage(content="done")]))
    db = Path(tempfile.mkdtemp()) / "audit.db"
    with Gate(RegisterFile(), audit=AuditLog(db)) as gate:
        tools = regdev_langchain.tools(gate)  # model.bind_tools(tools) with a real model
        messages: list[BaseMessage] = [HumanMessage("Set register 3 to 1.")]
        while True:
            reply = model.invoke(messages)
            messages.append(reply)
            if not reply.additional_kwargs.get("tool_calls"):
                break
            messages += tools.answer(reply)  # type: ignore[arg-type]
    for record in (r for r in read_audit(db) if r.event == "call"):
        print(f"step {record.step}: {record.tool} -> {record.code or 'ok'}")
    print(format_report(adherence(read_audit(db))))


if __name__ == "__main__":
    main()
