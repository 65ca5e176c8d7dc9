"""Five recorded "models" of different quality for the shipped benchmark
(examples/eval-suite.jsonl), answering as an OpenAI-compatible server would, each derived from
every task's reference ``solution``:

* ``good``: plays the solution (well-formed calls, one turn at a time as the solution has them).
* ``texter``: writes every call into its reply's text (a ``<tool_call>`` block) instead of
  making it, the commonest failure of local open-weight models.
* ``batcher``: adds a bad call (register 99, out of range) to every turn with calls.
* ``asker``: asks for clarification whatever it is asked.
* ``caller``: plays the solution, but first reads register 0 where no call is wanted.

And one whose behaviour depends on the format the tools are declared in (``regdev eval
--format-sensitivity``), which it reads from each request:

* ``fragile``: plays the solution when the tools are in regdev's own wording and strict; in
  the reworded wording it no longer recognises the tools and writes its calls into its text
  (as ``texter``); without strict mode it adds an undeclared argument (``unit``) to every
  call, twice, as decoding unconstrained by the schema lets it (refused ``unknown-argument``).

Each answers the OpenAI Chat Completions API, or with ``provider="anthropic"`` the Messages API
(``tool_use`` blocks, text blocks).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.provider_server import Reply, anthropic_turn, openai_turn, tool_use

SUITE = Path(__file__).resolve().parents[2] / "examples" / "eval-suite.jsonl"
MODELS = ("good", "texter", "batcher", "asker", "caller")
#: The models of the format-sensitivity test.
FORMAT_MODELS = ("good", "fragile")
NO_CALL = {"irrelevance", "missing-information"}
QUESTION = "Which register do you mean, and which value should it hold?"


def suite_tasks() -> list[dict[str, Any]]:
    """The suite's tasks (the header line left out)."""
    docs = [json.loads(line) for line in SUITE.read_text().splitlines() if line.strip()]
    return [doc for doc in docs if "task" in doc]


def _plan(task: dict[str, Any], kind: str, reworded: bool = False,
          strict: bool = True) -> list[Any]:
    solution: list[Any] = task["solution"]
    if kind == "fragile" and reworded:
        kind = "texter"
    elif kind == "fragile" and not strict:
        calls = [step for step in solution if not isinstance(step, str)]
        if calls:
            bad = [{"tool": c["tool"], "arguments": {**c["arguments"], "unit": "raw"}}
                   for c in calls[0]]
            return [bad, bad]
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


def responder(kind: str, provider: str = "openai") -> Any:
    """A function of a request body (Chat Completions, or Messages with ``provider``
    ``anthropic``) that answers as the ``kind`` of model would (one of :data:`MODELS`, or
    ``fragile``)."""
    tasks = {task["task"]: task for task in suite_tasks()}

    def answer(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        tools = body["tools"]
        if provider == "openai":
            task, declared = tasks[messages[1]["content"]], [t["function"] for t in tools]
        else:
            task, declared = tasks[messages[0]["content"]], tools
        reworded = not declared[0]["description"].startswith(("Read", "Write", "Set"))
        strict = all(tool.get("strict") is True for tool in declared)
        plan = _plan(task, kind, reworded, strict)
        turn = sum(m["role"] == "assistant" for m in messages)
        step = plan[min(turn, len(plan) - 1)]
        ids = [] if isinstance(step, str) else [f"call_{task['id']}_{turn}_{n}"
                                                for n in range(len(step))]
        if provider == "anthropic":
            if isinstance(step, str):
                return anthropic_turn([{"type": "text", "text": step}])
            return anthropic_turn([tool_use(i, c["tool"], c["arguments"])
                                   for i, c in zip(ids, step, strict=True)])
        if isinstance(step, str):
            return openai_turn(content=step)
        return openai_turn([(i, c["tool"], json.dumps(c["arguments"]))
                            for i, c in zip(ids, step, strict=True)])

    return answer
