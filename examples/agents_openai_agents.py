"""regdev in the OpenAI Agents SDK, against a recorded model (no network, no key).

Run: python examples/agents_openai_agents.py   (needs: pip install 'regdev[openai-agents]')

The recorded model makes the usual mistakes, each followed by its fix; every call's
arguments text reaches the gate as the model wrote it, and the audit log's report shows the
run's first-try validity and its recovery.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from regdev import AuditLog, Gate, RegisterFile, read_audit
from regdev.audit._report import adherence, format_report
from regdev.integrations import openai_agents

#: What the recorded model sends, one tool call a turn, each mistake then its fix.
FIX = ("write_register", '{"addr": 3, "data": 1}')
RECORDED = [
    ("write_register", '{"addr": "3", "data": 1}'), FIX,            # a string for an int
    ("write_register", '{"addr": 3, "data": 1, "addr": 4}'), FIX,   # a repeated key
    ("write_register", '{"addr": 3, "data": 3.0000000000000001}'), FIX,  # not exactly 3
    ("write_register", '{"addr": 3, "da'), FIX,                      # truncated
    ("functions.write_register", '{"addr": 3, "data": 1}'), FIX,     # a namespaced name
]


class RecordedModel(Model):
    """Answers each turn with the next recorded call, then says it is done."""

    model = "recorded-1"

    def __init__(self) -> None:
        self.turns = list(RECORDED)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        if not self.turns:
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            item: Any = ResponseOutputMessage(id="m", type="message", role="assistant",
                                              status="completed", content=[text])
        else:
            name, arguments = self.turns.pop(0)
            item = ResponseFunctionToolCall(type="function_call", name=name,
                                            arguments=arguments,
                                            call_id=f"call_{len(RECORDED) - len(self.turns)}")
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def main() -> None:
    set_tracing_disabled(True)
    db = Path(tempfile.mkdtemp()) / "audit.db"
    with Gate(RegisterFile(), audit=AuditLog(db)) as gate:
        tools = openai_agents.tools(gate)
        agent = Agent(name="bench", instructions="Set register 3 to 1.",
                      model=RecordedModel(), tools=tools)
        asyncio.run(Runner.run(agent, "Set register 3 to 1.", max_turns=20,
                               run_config=tools.run_config()))
    records = [r for r in read_audit(db) if r.event == "call"]
    for record in records:
        print(f"step {record.step}: {record.tool} -> {record.code or 'ok'}")
    print(format_report(adherence(read_audit(db))))


if __name__ == "__main__":
    main()
