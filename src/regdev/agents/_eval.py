"""A task suite for models: each task in words, run k times per model, scored by the device's
final registers, the reads the model made and how its loop stopped.

Rules of this file:

* A task file is JSON Lines, one task per line (``examples/eval-tasks.jsonl`` is the shipped
  suite, on ``examples/sensor.rdl``)::

      {"id": "enable", "task": "Power the sensor up.",
       "setup": {"CTRL": 4}, "hardware": {"STATUS": 96},
       "expect": {"registers": {"CTRL": 5}, "reads": ["ID"], "answer": ["0x5A", "90"],
                  "stops": ["done"]}}

  ``setup`` writes registers (by name) before the run, as software would; ``hardware`` sets
  bits as the device's hardware would (status flags software can only clear). ``expect``:
  every register named in ``registers`` holds that value at the end, and **every other
  register holds what it held after the setup**; each register in ``reads`` was read by an
  accepted call; the model's last words contain one of ``answer`` (case-insensitive); the
  loop stopped for one of ``stops`` (default ``["done"]``). Names are checked against the map
  when the file is read.
* Each trial runs on a fresh in-process device of the map, through a gate (and its audit log,
  when given: every call is recorded with its proposer), with the same settings for every
  model. A trial passes when every expectation holds; a task passes ``pass^k`` when all of its
  k trials pass (tau-bench's measure: a model that passes 3 times out of 4 is not reliable).
* A trial whose loop stopped ``provider-error`` (the API failed, not the model) is not
  scored: it is recorded with ``passed`` null and the ``error`` in words, and left out of the
  pass counts and pass^k, which count it apart (``errored``). When the first trial stops on a
  provider error that every other trial would meet too (:data:`FATAL_KINDS`: the API cannot
  be reached, refuses the key or the model, or does not answer as its API), the run stops
  there (:class:`EvalStopped`).
* Results are JSON Lines (:meth:`Trial.to_dict`), one line per trial, which ``regdev report
  --eval FILE`` reads back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..audit._log import AuditLog
from ..core._errors import RegdevError
from ..core._json import load_json
from ..core._text import escape_text
from ..devices._device import RegisterFile
from ..devices._regmap import RegisterMap
from ..gate._gate import Gate
from ..gate._maptools import map_tools
from ._models import AgentResult, Endpoint, run_agent

__all__ = ["FATAL_KINDS", "EvalFileError", "EvalStopped", "Task", "Trial", "load_tasks",
           "run_eval", "score"]

#: The :class:`~regdev.agents._models.ModelError` kinds that stop a run after its first
#: trial: every other trial would meet them too (no connection, the key or the model refused,
#: an answer that is not the API's).
FATAL_KINDS = frozenset({"connection", "auth", "forbidden", "not-found", "malformed"})

#: Fields a task and its ``expect`` may have.
_TASK_KEYS = frozenset({"id", "task", "setup", "hardware", "expect", "why"})
_EXPECT_KEYS = frozenset({"registers", "reads", "answer", "stops"})


class EvalFileError(RegdevError):
    """A task file that cannot be used: unreadable, not JSON Lines, or a task naming a register
    the map does not have; the message names the file and line."""


class EvalStopped(RegdevError):
    """The run stopped after its first trial, which met a provider error every trial would
    meet (:data:`FATAL_KINDS`); the message says which, in words.

    Attributes:
        trials: the trials run (the one errored trial).
    """

    def __init__(self, message: str, trials: list[Trial]) -> None:
        super().__init__(message)
        self.trials = trials


@dataclass(frozen=True, slots=True)
class Task:
    """One task of the suite (see the module docstring for the file format).

    Attributes:
        id: a short name, unique in the file.
        task: what the model is asked, in words.
        setup: register address -> value written before the run.
        hardware: register address -> bits set as the hardware would.
        registers: register address -> the value expected at the end.
        reads: addresses the model must have read.
        answer: texts one of which the model's last words must contain ("" when none).
        stops: the stop reasons that count as success.
    """

    id: str
    task: str
    setup: dict[int, int] = field(default_factory=dict)
    hardware: dict[int, int] = field(default_factory=dict)
    registers: dict[int, int] = field(default_factory=dict)
    reads: tuple[int, ...] = ()
    answer: tuple[str, ...] = ()
    stops: tuple[str, ...] = ("done",)


def load_tasks(path: str | Path, regmap: RegisterMap) -> list[Task]:
    """Read a task file, checking every register name against ``regmap``.

    Raises:
        EvalFileError: the file cannot be read, a line is not a task object, a key is unknown,
            an id repeats, a register name is not in the map, or a value is not 0..255.
    """
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as error:
        raise EvalFileError(f"cannot read {path}: {error.strerror or error}") from None
    tasks: list[Task] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            doc = load_json(line)
        except ValueError as error:
            raise EvalFileError(f"{where}: not JSON: {error}") from None
        tasks.append(_task(doc, where, regmap))
    seen = set()
    for task in tasks:
        if task.id in seen:
            raise EvalFileError(f"{path}: task id `{escape_text(task.id)}` appears twice")
        seen.add(task.id)
    if not tasks:
        raise EvalFileError(f"{path} holds no task")
    return tasks


def _task(doc: object, where: str, regmap: RegisterMap) -> Task:
    if not isinstance(doc, dict):
        raise EvalFileError(f"{where}: a task is a JSON object")
    extra = set(doc) - _TASK_KEYS
    if extra:
        raise EvalFileError(f"{where}: unknown key `{escape_text(sorted(extra)[0])}` "
                            f"(a task has {', '.join(sorted(_TASK_KEYS))})")
    if not isinstance(doc.get("id"), str) or not isinstance(doc.get("task"), str):
        raise EvalFileError(f"{where}: a task needs a string `id` and a string `task`")
    expect = doc.get("expect", {})
    if not isinstance(expect, dict) or set(expect) - _EXPECT_KEYS:
        raise EvalFileError(f"{where}: `expect` is an object with keys among "
                            f"{', '.join(sorted(_EXPECT_KEYS))}")

    def values(name: str, mapping: object) -> dict[int, int]:
        if not isinstance(mapping, dict):
            raise EvalFileError(f"{where}: `{name}` maps register names to values")
        out = {}
        for register, value in mapping.items():
            if type(value) is not int or not 0 <= value <= 255:
                raise EvalFileError(f"{where}: `{name}` {escape_text(register)}: expected "
                                    "an integer 0..255")
            out[_addr(register, where, regmap)] = value
        return out

    def texts(name: str, items: object) -> tuple[str, ...]:
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise EvalFileError(f"{where}: `{name}` is a list of strings")
        return tuple(items)

    return Task(
        id=doc["id"], task=doc["task"], setup=values("setup", doc.get("setup", {})),
        hardware=values("hardware", doc.get("hardware", {})),
        registers=values("expect.registers", expect.get("registers", {})),
        reads=tuple(_addr(r, where, regmap) for r in texts("expect.reads",
                                                          expect.get("reads", []))),
        answer=texts("expect.answer", expect.get("answer", [])),
        stops=texts("expect.stops", expect.get("stops", ["done"])))


def _addr(name: str, where: str, regmap: RegisterMap) -> int:
    register = regmap.named(name)
    if register is None:
        names = ", ".join(r.name or f"0x{r.addr:02X}" for r in regmap.registers)
        raise EvalFileError(f"{where}: no register `{escape_text(name)}` in the map "
                            f"{escape_text(regmap.name or '')} ({names})")
    return register.addr


@dataclass(slots=True)
class Trial:
    """One run of one task by one model.

    Attributes:
        proposer: ``provider:model``.
        task: the task's id.
        trial: 1..k.
        passed: every expectation held; None when the trial errored (not scored).
        failures: what did not hold, in words (empty when passed or errored).
        result: the agent loop's result.
        registers: the device's registers at the end, by address.
        error: why the trial is not scored (the provider error, in words), else None.
    """

    proposer: str
    task: str
    trial: int
    passed: bool | None
    failures: list[str]
    result: AgentResult
    registers: dict[int, int]
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """One JSON Lines record of the results file (``passed`` null and ``error`` in words
        for a trial that errored)."""
        steps = self.result.steps
        return {"proposer": self.proposer, "task": self.task, "trial": self.trial,
                "passed": self.passed, "failures": self.failures, "error": self.error,
                "stop": self.result.stop, "detail": self.result.detail,
                "calls": len(steps), "refused": sum(not s.observation.ok for s in steps),
                "loop_id": self.result.loop_id,
                "registers": {f"0x{a:02X}": v for a, v in sorted(self.registers.items())}}


def score(task: Task, result: AgentResult, before: dict[int, int],
          after: dict[int, int]) -> list[str]:
    """What did not hold of ``task``'s expectations (empty: the trial passed).

    Args:
        task: the task.
        result: the loop's result.
        before: the registers after the setup, by address.
        after: the registers at the end, by address.
    """
    failures = []
    if result.stop not in task.stops:
        failures.append(f"the loop stopped {result.stop}, expected {' or '.join(task.stops)}")
    for addr, value in sorted(after.items()):
        want = task.registers.get(addr, before[addr])
        if value != want:
            failures.append(f"register 0x{addr:02X} holds 0x{value:02X}, expected 0x{want:02X}")
    read: set[int] = set()
    for step in result.steps:
        data = step.observation.result or {}
        if step.observation.ok and (step.observation.tool or "").startswith("read_"):
            first = data.get("addr")
            count = len(data["data"]) if isinstance(data.get("data"), list) else 1
            if isinstance(first, int):
                read.update(range(first, first + count))
    failures += [f"register 0x{addr:02X} was not read" for addr in task.reads
                 if addr not in read]
    last = result.turns[-1].text if result.turns else ""
    if task.answer and not any(a.lower() in last.lower() for a in task.answer):
        failures.append(f"the answer does not say {' or '.join(task.answer)}")
    return failures


def run_eval(endpoint: Endpoint, tasks: Sequence[Task], regmap: RegisterMap, *, k: int = 1,
             audit: AuditLog | None = None, max_steps: int = 12, retries: int = 1,
             on_trial: Callable[[Trial], None] | None = None) -> list[Trial]:
    """Run every task ``k`` times with the model behind ``endpoint``.

    Args:
        endpoint: the model.
        tasks: the suite (:func:`load_tasks`).
        regmap: the device's map (each trial gets a fresh in-process device of it).
        k: trials per task, >= 1.
        audit: the audit log every call is recorded in (shared by the trials; not closed).
        max_steps: each trial's call budget.
        retries: each trial's retries after a refusal.
        on_trial: called with each trial as it ends (progress).

    Returns:
        The trials in the order they ran (task by task, trial by trial). A trial whose loop
        stopped ``provider-error`` is not scored (``passed`` None, ``error`` set).

    Raises:
        ValueError: ``k`` < 1.
        EvalStopped: the first trial stopped on a provider error of :data:`FATAL_KINDS`
            (``on_trial`` has been called with it); no other trial was run.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    trials = []
    tools = map_tools(regmap)
    for task in tasks:
        for trial in range(1, k + 1):
            device = RegisterFile(regmap=regmap)
            for addr, value in task.setup.items():
                device.write(addr, value)
            for addr, bits in task.hardware.items():
                device.hardware_set(addr, bits)
            before = _registers(device, regmap)
            gate = Gate(device, tools, audit=audit)
            result = run_agent(endpoint, gate, task.task, max_steps=max_steps,
                               retries=retries)
            after = _registers(device, regmap)
            if result.stop == "provider-error":  # the API failed, not the model: not scored
                done = Trial(endpoint.proposer, task.id, trial, None, [], result, after,
                             error=result.detail)
            else:
                failures = score(task, result, before, after)
                done = Trial(endpoint.proposer, task.id, trial, not failures, failures,
                             result, after)
            trials.append(done)
            if on_trial is not None:
                on_trial(done)
            if len(trials) == 1 and result.error_kind in FATAL_KINDS:
                raise EvalStopped(f"stopped after the first trial, which every trial would "
                                  f"repeat: {result.detail}", trials)
    return trials


def _registers(device: RegisterFile, regmap: RegisterMap) -> dict[int, int]:
    """Every register's value by address, read without side effects (a snapshot: clear-on-read
    bits are not cleared)."""
    return dict(zip((r.addr for r in regmap.registers), device.snapshot(), strict=True))


def pass_at_k(trials: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per proposer, from result records (:meth:`Trial.to_dict`, e.g. read back from a results
    file): trials scored, trials passed, tasks, and tasks whose every scored trial passed
    (pass^k). A trial that errored (``passed`` null: the provider failed) is not scored: it
    is counted in ``errored`` only, and a task with no scored trial is not counted.

    Returns:
        ``{proposer: {"trials", "passed", "errored", "tasks", "tasks_passed_every_trial",
        "k"}}``, with ``k`` the fewest scored trials any of its counted tasks had (0 when
        none).
    """
    by_task: dict[tuple[str, str], list[bool]] = {}
    errored: dict[str, int] = {}
    for record in trials:
        proposer = record["proposer"]
        errored.setdefault(proposer, 0)
        outcomes = by_task.setdefault((proposer, record["task"]), [])
        if record["passed"] is None:
            errored[proposer] += 1
        else:
            outcomes.append(bool(record["passed"]))
    out: dict[str, dict[str, Any]] = {
        proposer: {"trials": 0, "passed": 0, "errored": count, "tasks": 0,
                   "tasks_passed_every_trial": 0, "k": 0}
        for proposer, count in errored.items()}
    for (proposer, _), outcomes in by_task.items():
        if not outcomes:
            continue
        entry = out[proposer]
        if entry["tasks"] == 0:
            entry["k"] = len(outcomes)
        entry["trials"] += len(outcomes)
        entry["passed"] += sum(outcomes)
        entry["tasks"] += 1
        entry["tasks_passed_every_trial"] += all(outcomes)
        entry["k"] = min(entry["k"], len(outcomes))
    return out


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """The trial records of a results file written by ``regdev eval``.

    Raises:
        EvalFileError: unreadable, or a line that is not a trial record.
    """
    path = Path(path)
    try:
        lines = path.read_bytes().splitlines()
    except OSError as error:
        raise EvalFileError(f"cannot read {path}: {error.strerror or error}") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = msgspec.json.decode(line)
        except msgspec.DecodeError:
            raise EvalFileError(f"{path}:{number}: not a JSON line") from None
        if not isinstance(record, dict) or not {"proposer", "task", "passed"} <= set(record):
            raise EvalFileError(f"{path}:{number}: not a trial record of regdev eval "
                                "(proposer, task, passed)")
        records.append(record)
    return records
