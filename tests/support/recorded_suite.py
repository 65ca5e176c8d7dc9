"""Five recorded "models" of different quality for the shipped benchmark
(examples/eval-suite.jsonl), answering as an OpenAI-compatible server would, each derived from
every task's reference ``solution``:

* ``good``: plays the solution (well-formed calls, one turn at a time as the solution has them).
* ``texter``: writes every call into its reply's text (a ``<tool_call>`` block) instead of
  making it, the commonest failure of local open-weight models.
* ``batcher``: adds a bad call (register 99, out of range) to every turn with calls.
* ``asker``: asks for clarification whatever it is asked.
* ``caller``: plays the solution, but first reads register 0 where no call is wanted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.provider_server import Reply, openai_turn

SUITE = Path(__file__).resolve().parents[2] / "examples" / "eval-suite.jsonl"
MODELS = ("good", "texter", "batcher", "asker", "caller")
NO_CALL = {"irrelevance", "missing-information"}
QUESTION = "Which register do you mean, and which value should it hold?"


def suite_tasks() -> list[dict[str, Any]]:
    """The suite's tasks (the header line left out)."""
    docs = [json.loads(line) for line in SUITE.read_text().splitlines() if line.strip()]
    return [doc for doc in docs if "task" in doc]


def _plan(task: dict[str, Any], kind: str) -> list[Any]:
    solution: list[Any] = task["solution"]
    if kind == "asker":
        return [QUESTION]
    if kind == "caller" and task["category"] in NO_CALL:
        return [[{"tool": "read_register", "arguments": {"addr": 0}}], *solution]
    if kind == "texter":
        return [step if isinstance(step, str) else
                "<tool_call>" + json.dumps({"name": step[0]["tool"],
                                            "arguments": step[0]["arguments"]}) + "</tool_call>"
                for step in solution]
    if kind == "batcher":
        bad = {"tool": "write_register", "arguments": {"addr": 99, "data": 1}}
        return [step if isinstance(step, str) else [*step, bad] for step in solution]
    return solution


def responder(kind: str) -> Any:
    """A function of a Chat Completions request body that answers as the ``kind`` of model
    would (one of :data:`MODELS`)."""
    plans = {task["task"]: (task["id"], _plan(task, kind)) for task in suite_tasks()}

    def answer(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        name, plan = plans[messages[1]["content"]]
        turn = sum(m["role"] == "assistant" for m in messages)
        step = plan[min(turn, len(plan) - 1)]
        if isinstance(step, str):
            return openai_turn(content=step)
        return openai_turn([(f"call_{name}_{turn}_{n}", call["tool"],
                             json.dumps(call["arguments"])) for n, call in enumerate(step)])

    return answer
