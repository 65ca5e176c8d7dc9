"""Two recorded "models" for regdev eval's tests, answering the shipped task suite
(examples/eval-tasks.jsonl) as an OpenAI-compatible server would: ``clean`` solves every task
with well-formed calls; ``sloppy`` makes the wild-case mistakes first (a number sent as a
string, an undeclared argument, a namespaced tool name, truncated JSON, a value out of range),
recovers from most on its retry, and fails two tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.provider_server import Reply, openai_turn

TASKS = Path(__file__).resolve().parents[2] / "examples" / "eval-tasks.jsonl"

Call = tuple[str, str]  # (tool name, arguments text)


def _c(name: str, **arguments: Any) -> Call:
    return name, json.dumps(arguments)


#: task id -> turns: a list of calls (one turn), or the final text.
CLEAN: dict[str, list[list[Call] | str]] = {
    "enable": [[_c("write_field", field="CTRL.EN", value=1)], "The sensor is powered up."],
    "continuous-16hz": [[_c("write_field", field="CTRL.MODE", value="CONTINUOUS"),
                         _c("write_field", field="CTRL.RATE", value="HZ16"),
                         _c("write_field", field="CTRL.EN", value=1)], "Done."],
    "oneshot-keep-rest": [[_c("write_field", field="CTRL.MODE", value="ONESHOT")], "Done."],
    "rate-64hz": [[_c("write_field", field="CTRL.RATE", value="HZ64")], "Done."],
    "sleep": [[_c("write_field", field="CTRL.MODE", value="SLEEP")], "Done."],
    "power-down": [[_c("write_field", field="CTRL.EN", value=0)], "Done."],
    "clear-por": [[_c("write_field", field="STATUS.POR", value=1)], "Cleared."],
    "clear-ovf-only": [[_c("write_field", field="STATUS.OVF", value=1)], "Cleared."],
    "clear-all-errors": [[_c("write_register", addr=2, data=0x70)], "Cleared."],
    "read-id": [[_c("read_register", addr=0)], "The part number is 0x5A."],
    "id-is-read-only": ["ID is read-only: it cannot be written."],
    "data2-200": [[_c("write_register", addr=6, data=200)], "Done."],
    "data-1-to-4": [[_c("write_registers", addr=4, data=[1, 2, 3, 4])], "Done."],
    "data-all-ff": [[_c("write_registers", addr=4, data=[255] * 4)], "Done."],
    "copy-data": [[_c("read_register", addr=4)], [_c("write_register", addr=7, data=66)],
                  "Copied 0x42."],
    "swap-data": [[_c("read_registers", addr=4, count=2)],
                  [_c("write_registers", addr=4, data=[34, 17])], "Swapped."],
    "increment": [[_c("read_register", addr=5)], [_c("write_register", addr=5, data=42)],
                  "DATA[1] is now 42."],
    "read-temperature": [[_c("read_register", addr=8)], "The sample is 23 degrees Celsius."],
    "out-of-range": ["300 does not fit in a byte (0..255): nothing was written."],
    "calib-protected": [[_c("write_register", addr=3, data=5)], "CALIB needs approval."],
    "count-alarms": [[_c("read_register", addr=10)], "3 alarms happened."],
}

#: The sloppy model's first turns before the clean plan (task id -> mistake turns).
MISTAKES: dict[str, list[list[Call]]] = {
    "enable": [[_c("write_field", field="CTRL.EN", value=1, force=True)]],  # unknown-argument
    "data2-200": [[("write_register", '{"addr": "6", "data": 200}')]],        # type-addr
    "data-1-to-4": [[_c("write_registers", addr=4, data=[1, 2, 3, 300])]],   # range-data[]
    "copy-data": [[("read_register", '{"addr": 4')]],                          # not-json
    "swap-data": [[_c("default_api:read_registers", addr=4, count=2)]],        # unknown-tool
    "increment": [[_c("read_register", register=5)],                           # missing-addr
                  [("read_register", '{"addr": 5.5}')]],                       # type-addr
    "id-is-read-only": [[_c("write_register", addr=0, data=0)]],               # read-only
}


def _task_ids() -> dict[str, str]:
    lines = [json.loads(line) for line in TASKS.read_text().splitlines() if line.strip()]
    return {task["task"]: task["id"] for task in lines}


def responder(sloppy: bool) -> Any:
    """A function of a Chat Completions request body that answers as the model would."""
    ids = _task_ids()

    def answer(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        task = ids[messages[1]["content"]]
        plan = (MISTAKES.get(task, []) if sloppy else []) + CLEAN[task]
        turn = sum(m["role"] == "assistant" for m in messages)
        step = plan[min(turn, len(plan) - 1)]
        if isinstance(step, str):
            return openai_turn(content=step)
        return openai_turn([(f"call_{task}_{turn}_{n}", name, arguments)
                            for n, (name, arguments) in enumerate(step)])

    return answer
