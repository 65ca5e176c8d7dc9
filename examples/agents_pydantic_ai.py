"""regdev in pydantic-ai, against a recorded model (no network, no key).

Run: python examples/agents_pydantic_ai.py   (needs: pip install 'regdev[pydantic-ai]')

The recorded model makes the usual mistakes, each followed by its fix; the toolset hands
every call's arguments text to the gate as the model wrote it, a refusal comes back to the
model as pydantic-ai's retry with regdev's message, and the audit log's report shows the
run's first-try validity and its recovery.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from regdev import AuditLog, Gate, RegisterFile, read_audit
from regdev.audit._report import adherence, format_report
from regdev.integrations import pydantic_ai as regdev_pydantic_ai

#: What the recorded model sends, one tool call a turn, each mistake then its fix.
FIX = ("write_register", '{"addr": 3, "data": 1}')
RECORDED = [
    ("write_register", '{"addr": "3", "data": 1}'), FIX,            # a string for an int
    ("write_register", '{"addr": 3, "data": 1, "addr": 4}'), FIX,   # a repeated key
    ("write_register", '{"addr": 3, "data": 3.0000000000000001}'), FIX,  # not exactly 3
    ("write_register", '{"addr": 3, "da'), FIX,                      # truncated
]


def main() -> None:
    turns = list(RECORDED)

    def recorded(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not turns:
            return ModelResponse(parts=[TextPart("done")])
        name, arguments = turns.pop(0)
        return ModelResponse(parts=[ToolCallPart(name, arguments,
                                                 tool_call_id=f"call_{len(turns)}")])

    db = Path(tempfile.mkdtemp()) / "audit.db"
    with Gate(RegisterFile(), audit=AuditLog(db)) as gate:
        agent = Agent(FunctionModel(recorded, model_name="recorded-1"),
                      toolsets=[regdev_pydantic_ai.toolset(gate)])
        agent.run_sync("Set register 3 to 1.")
    for record in (r for r in read_audit(db) if r.event == "call"):
        print(f"step {record.step}: {record.tool} -> {record.code or 'ok'}")
    print(format_report(adherence(read_audit(db))))


if __name__ == "__main__":
    main()
