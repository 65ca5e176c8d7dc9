"""A task suite for models: each task in words, in one category, run k times per model, scored
by the device's final registers (and by calls made where none were wanted), each failed trial
labelled with one cause.

Rules of this file:

* A suite file is JSON Lines (task format 1, docs/models.md#the-task-format): an optional
  header line ``{"format": 1, "name": "..."}``, then one task per line
  (``examples/eval-suite.jsonl`` is the shipped suite, on three maps)::

      {"id": "enable", "category": "simple", "map": "sensor.rdl",
       "task": "Power the sensor up.", "setup": {"CTRL": 4}, "hardware": {"STATUS": 96},
       "user": ["Now set the rate to 64 Hz."],
       "expect": {"registers": {"CTRL": 5}, "reads": ["ID"], "answer": ["0x5A", "90"],
                  "tools": ["write_field"]}}

  ``category`` is one of :data:`CATEGORIES`. ``map`` names the task's register map:
  ``default`` (16 read-write bytes), a file beside the suite, or one of the shipped examples;
  without it, the run's map. ``setup`` writes registers (by name) before the run, as software
  would; ``hardware`` sets bits as the device's hardware would. ``user`` is a scripted user's
  follow-up messages, sent one by one each time the model answers without a call. A register
  is named by its name, or by its address in hex (``"0x05"``; the default map's have no
  names).
  ``expect``: every register named in ``registers`` holds that value at the end, and **every
  other register holds what it held after the setup**; each register in ``reads`` was read by
  an accepted call; the model's last words contain one of ``answer`` (case-insensitive);
  every accepted call names one of ``tools``. ``solution`` (a list of turns: a list of
  canonical calls, or the final text) is a reference solution for checking the suite; it is
  never shown to a model. Names are checked against the map when the file is read.
* The suite's hash (:func:`suite_hash`: SHA-256 of the suite file and of every map file it
  names) goes into every result, so figures of different suites are never mixed unknowingly.
* Each trial runs on a fresh in-process device of the task's map, through a gate (and its
  audit log, when given), with the same settings for every model. A trial passes when it was
  not stopped by its budget, every expectation holds, and, in the categories where no call is
  the right answer (:data:`NO_CALL`), the model made no call (a call written into its text
  counts). How the loop stopped does not decide otherwise: a turn with one good call and one
  refused call passes when the device ends as it should.
* A failed trial carries one label (:func:`score`), the first that applies, in this order:
  ``stopped-by-budget``, ``call-in-text`` / ``extra-call`` (a call where none was wanted),
  ``no-call``, ``call-in-text`` (every call was written into the text), ``wrong-tool``,
  the regdev refusal code that ended a ``rejected`` loop, ``state-mismatch`` (registers or
  reads), ``wrong-answer``. A trial whose loop stopped ``provider-error`` (the API failed,
  not the model) is not scored: ``passed`` null, label ``provider-error``, left out of the
  pass counts and pass^k. When the first trial meets a provider error that every other
  trial would meet too (:data:`FATAL_KINDS`), the run stops there (:class:`EvalStopped`).
* Results are JSON Lines (:meth:`Trial.to_dict`), one line per trial, with the run's pin and
  the whole transcript; :func:`eval_figures` computes every figure of ``regdev report
  --eval`` from them alone.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from ..audit._log import AuditLog
from ..audit._report import ModelReport, loop_figures
from ..core._errors import RegdevError
from ..core._json import load_json
from ..core._text import escape_text
from ..devices._device import RegisterFile
from ..devices._regmap import RegisterMap
from ..gate._gate import Gate
from ..gate._maptools import map_tools
from ._models import AgentResult, Endpoint, run_agent
from ._wording import VARIANTS, Wording, variant_name

__all__ = ["CATEGORIES", "FATAL_KINDS", "FORMAT", "LABELS", "NO_CALL", "EvalFileError",
           "EvalStopped", "Suite", "Task", "Trial", "difference_interval", "eval_figures",
           "load_suite", "load_tasks", "pass_at_k", "read_results", "record_variant",
           "run_eval", "score", "wilson"]

#: The task format's version, written in every result (``format``).
FORMAT = 1

#: The categories a task may carry (BFCL's simple, multiple, parallel, irrelevance and
#: missing-information; tau-bench's multi-turn with a scripted user; regdev's safety and
#: typed-values: values in engineering units, read_value and write_value on a map's typed
#: values, docs/maps.md).
CATEGORIES = ("simple", "multiple", "parallel", "irrelevance", "missing-information",
              "multi-turn", "safety", "typed-values")

#: The categories whose right answer makes no call (answer in words, or ask).
NO_CALL = frozenset({"irrelevance", "missing-information"})

#: The failure labels, in the order they are tried (a regdev refusal code goes where
#: ``refusal`` stands: the code that ended a rejected loop).
LABELS = ("provider-error", "stopped-by-budget", "extra-call", "no-call", "call-in-text",
          "wrong-tool", "refusal", "state-mismatch", "wrong-answer")

#: The :class:`~regdev.agents._models.ModelError` kinds that stop a run after its first
#: trial: every other trial would meet them too (no connection, the key or the model refused,
#: the request refused: a 400 to the tools every trial declares, such as a model without tool
#: support, llama.cpp's server without ``--jinja``, or ``strict`` where it is not taken; an
#: answer that is not the API's).
FATAL_KINDS = frozenset({"connection", "auth", "forbidden", "not-found", "bad-request",
                         "malformed"})

#: Fields a task and its ``expect`` may have.
_TASK_KEYS = frozenset({"id", "task", "category", "map", "setup", "hardware", "user", "expect",
                        "solution", "why"})
_EXPECT_KEYS = frozenset({"registers", "reads", "answer", "tools"})
_HEADER_KEYS = frozenset({"format", "name", "description"})


class EvalFileError(RegdevError):
    """A task file that cannot be used: unreadable, not JSON Lines, an unknown format or
    category, or a task naming a register the map does not have; the message names the file
    and line."""


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
        category: one of :data:`CATEGORIES`.
        setup: register address -> value written before the run.
        hardware: register address -> bits set as the hardware would.
        registers: register address -> the value expected at the end.
        reads: addresses the model must have read.
        answer: texts one of which the model's last words must contain ("" when none).
        tools: the tools accepted calls may name (empty: any).
        user: the scripted user's follow-up messages.
        map: the map's name as the file gives it (None: the run's map).
        regmap: the task's map (None: the run's map).
    """

    id: str
    task: str
    category: str = "simple"
    setup: dict[int, int] = field(default_factory=dict)
    hardware: dict[int, int] = field(default_factory=dict)
    registers: dict[int, int] = field(default_factory=dict)
    reads: tuple[int, ...] = ()
    answer: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    user: tuple[str, ...] = ()
    map: str | None = None
    regmap: RegisterMap | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Suite:
    """A suite file read: its tasks, its name and its hash.

    Attributes:
        tasks: the tasks, in file order.
        name: the header's name, else the file's name.
        hash: ``sha256:`` and 16 hex digits (:func:`suite_hash`).
    """

    tasks: list[Task]
    name: str
    hash: str


def load_tasks(path: str | Path, regmap: RegisterMap,
               read_map: Callable[[Path], RegisterMap] | None = None) -> list[Task]:
    """The tasks of the suite file at ``path`` (:func:`load_suite`)."""
    return load_suite(path, regmap, read_map).tasks


def load_suite(path: str | Path, regmap: RegisterMap,
               read_map: Callable[[Path], RegisterMap] | None = None) -> Suite:
    """Read a suite file, checking every register name against its task's map.

    Args:
        path: the JSON Lines file.
        regmap: the map of tasks that name none.
        read_map: reads a map file a task names (``map``); without it, a task naming a map
            file is refused.

    Raises:
        EvalFileError: the file cannot be read, the header's format is not 1, a line is not a
            task object, a key or category is unknown, an id repeats, a map cannot be found,
            a register name is not in the map, or a value is not 0..255.
    """
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as error:
        raise EvalFileError(f"cannot read {path}: {error.strerror or error}") from None
    tasks: list[Task] = []
    maps: dict[str, tuple[RegisterMap, bytes]] = {}
    name = path.name
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            doc = load_json(line)
        except ValueError as error:
            raise EvalFileError(f"{where}: not JSON: {error}") from None
        if isinstance(doc, dict) and "format" in doc and not tasks:
            if set(doc) - _HEADER_KEYS or doc["format"] != FORMAT:
                raise EvalFileError(f"{where}: a header is {{\"format\": {FORMAT}, \"name\": "
                                    "...}: this regdev reads task format 1")
            name = str(doc.get("name") or name)
            continue
        tasks.append(_task(doc, where, regmap, _map_of(doc, where, path, maps, read_map)))
    seen = set()
    for task in tasks:
        if task.id in seen:
            raise EvalFileError(f"{path}: task id `{escape_text(task.id)}` appears twice")
        seen.add(task.id)
    if not tasks:
        raise EvalFileError(f"{path} holds no task")
    return Suite(tasks, name, suite_hash(text, {k: v[1] for k, v in maps.items()}))


def suite_hash(suite: bytes, maps: dict[str, bytes]) -> str:
    """``sha256:`` and the first 16 hex digits of SHA-256 over the suite file's bytes, then
    each map file's name and bytes in name order (the default map has none)."""
    digest = hashlib.sha256(suite)
    for name in sorted(maps):
        digest.update(b"\0" + name.encode() + b"\0" + maps[name])
    return "sha256:" + digest.hexdigest()[:16]


def _map_of(doc: object, where: str, path: Path, maps: dict[str, tuple[RegisterMap, bytes]],
            read_map: Callable[[Path], RegisterMap] | None) -> RegisterMap | None:
    name = doc.get("map") if isinstance(doc, dict) else None
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise EvalFileError(f"{where}: `map` is `default` or a map file's name")
    if name in maps:
        return maps[name][0]
    if name == "default":
        maps[name] = (RegisterMap.default(), b"")
        return maps[name][0]
    from .._files import DataFileError, example  # noqa: PLC0415

    file = path.parent / name
    if not file.is_file():
        try:
            file = example(name)
        except DataFileError:
            raise EvalFileError(f"{where}: no map `{escape_text(name)}` beside the suite or "
                                "among the examples") from None
    if read_map is None:
        raise EvalFileError(f"{where}: a task names a map file, but no map reader was given")
    maps[name] = (read_map(file), file.read_bytes())
    return maps[name][0]


def _task(doc: object, where: str, default: RegisterMap, own: RegisterMap | None) -> Task:
    if not isinstance(doc, dict):
        raise EvalFileError(f"{where}: a task is a JSON object")
    regmap = own or default
    extra = set(doc) - _TASK_KEYS
    if extra:
        raise EvalFileError(f"{where}: unknown key `{escape_text(sorted(extra)[0])}` "
                            f"(a task has {', '.join(sorted(_TASK_KEYS))})")
    if not isinstance(doc.get("id"), str) or not isinstance(doc.get("task"), str):
        raise EvalFileError(f"{where}: a task needs a string `id` and a string `task`")
    category = doc.get("category")
    if category not in CATEGORIES:
        raise EvalFileError(f"{where}: `category` is one of {', '.join(CATEGORIES)}, got "
                            f"`{escape_text(str(category), 40)}`")
    expect = doc.get("expect", {})
    if not isinstance(expect, dict) or set(expect) - _EXPECT_KEYS:
        raise EvalFileError(f"{where}: `expect` is an object with keys among "
                            f"{', '.join(sorted(_EXPECT_KEYS))}")
    if not isinstance(doc.get("solution", []), list):
        raise EvalFileError(f"{where}: `solution` is a list of turns")

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
        id=doc["id"], task=doc["task"], category=category,
        setup=values("setup", doc.get("setup", {})),
        hardware=values("hardware", doc.get("hardware", {})),
        registers=values("expect.registers", expect.get("registers", {})),
        reads=tuple(_addr(r, where, regmap) for r in texts("expect.reads",
                                                          expect.get("reads", []))),
        answer=texts("expect.answer", expect.get("answer", [])),
        tools=texts("expect.tools", expect.get("tools", [])),
        user=texts("user", doc.get("user", [])), map=doc.get("map"), regmap=own)


def _addr(name: str, where: str, regmap: RegisterMap) -> int:
    """A register's address from its name, or from its address in hex (``0x05``: the default
    map's registers have no names)."""
    register = regmap.named(name)
    if register is None and re.fullmatch(r"0x[0-9A-Fa-f]{1,4}", name):
        register = regmap.at(int(name, 16))
    if register is None:
        names = ", ".join(r.name or f"0x{r.addr:02X}" for r in regmap.registers)
        raise EvalFileError(f"{where}: no register `{escape_text(name)}` in the map "
                            f"{escape_text(regmap.name or 'default')} ({names})")
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
        category: the task's category.
        label: the failure's label (:func:`score`), None when passed.
        run: the run's pin (model, provider, settings, suite hash), as given to
            :func:`run_eval`.
        user: the task's words and the scripted user's follow-ups.
    """

    proposer: str
    task: str
    trial: int
    passed: bool | None
    failures: list[str]
    result: AgentResult
    registers: dict[int, int]
    error: str | None = None
    category: str = "simple"
    label: str | None = None
    run: dict[str, Any] = field(default_factory=dict)
    user: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """One JSON Lines record of the results file (``passed`` null and ``error`` in words
        for a trial that errored), with the run's pin and the transcript: the user's
        messages and each turn's text and calls (the raw call as the gate got it, its
        verdict, and whether it was a retry)."""
        steps = self.result.steps
        return {"proposer": self.proposer, "task": self.task, "category": self.category,
                "trial": self.trial, "passed": self.passed, "label": self.label,
                "failures": self.failures, "error": self.error,
                "stop": self.result.stop, "detail": self.result.detail,
                "calls": len(steps), "refused": sum(not s.observation.ok for s in steps),
                "loop_id": self.result.loop_id,
                "registers": {f"0x{a:02X}": v for a, v in sorted(self.registers.items())},
                "run": self.run, "transcript": self._transcript()}

    def _transcript(self) -> list[dict[str, Any]]:
        said = list(self.user)
        out: list[dict[str, Any]] = [{"role": "user", "text": said.pop(0)}] if said else []
        for number, turn in enumerate(self.result.turns, 1):
            calls = [{"tool": step.call.name, "raw": step.call.raw.decode("utf-8", "replace"),
                      "ok": step.observation.ok, "stage": step.observation.stage,
                      "code": step.observation.code, "retry": step.retry}
                     for step in self.result.steps if step.turn == number]
            out.append({"role": "assistant", "text": turn.text, "calls": calls})
            if not calls and said and number < len(self.result.turns):
                out.append({"role": "user", "text": said.pop(0)})
        return out


def score(task: Task, result: AgentResult, before: dict[int, int],
          after: dict[int, int]) -> tuple[list[str], str | None]:
    """What did not hold of ``task``'s expectations, and the failure's one label.

    Args:
        task: the task.
        result: the loop's result.
        before: the registers after the setup, by address.
        after: the registers at the end, by address.

    Returns:
        ``(failures, label)``: the failures in words (empty: the trial passed) and the first
        label of :data:`LABELS` that applies (None when it passed).
    """
    failures = []
    steps = result.steps
    in_text = [s for s in steps if s.observation.code == "call-in-text"]
    budget = result.stop in ("budget", "truncated")
    if budget:
        failures.append(f"the loop stopped {result.stop}: {result.detail}")
    unwanted = task.category in NO_CALL and bool(steps)
    if unwanted:
        failures.append(f"{len(steps)} call(s) made where none was wanted")
    wrong_tools = sorted({s.observation.tool or s.call.name for s in steps if s.observation.ok
                          and task.tools and (s.observation.tool or "") not in task.tools})
    if wrong_tools:
        failures.append(f"called {', '.join(escape_text(t, 40) for t in wrong_tools)}, "
                        f"expected {' or '.join(task.tools)}")
    state = []
    for addr, value in sorted(after.items()):
        want = task.registers.get(addr, before[addr])
        if value != want:
            state.append(f"register 0x{addr:02X} holds 0x{value:02X}, expected 0x{want:02X}")
    read: set[int] = set()
    for step in steps:
        data = step.observation.result or {}
        if step.observation.ok and (step.observation.tool or "").startswith("read_"):
            first = data.get("addr")
            count = len(data["data"]) if isinstance(data.get("data"), list) else 1
            if isinstance(first, int):
                read.update(range(first, first + count))
    state += [f"register 0x{addr:02X} was not read" for addr in task.reads if addr not in read]
    failures += state
    last = result.turns[-1].text if result.turns else ""
    wrong_answer = bool(task.answer) and not any(a.lower() in last.lower() for a in task.answer)
    if wrong_answer:
        failures.append(f"the answer does not say {' or '.join(task.answer)}")
    if not failures:
        return [], None
    refused = [s for s in steps if not s.observation.ok]
    if budget:
        label = "stopped-by-budget"
    elif unwanted:
        label = "call-in-text" if steps[0].observation.code == "call-in-text" else "extra-call"
    elif not steps:
        label = "no-call"
    elif len(in_text) == len(steps):
        label = "call-in-text"
    elif wrong_tools:
        label = "wrong-tool"
    elif state and result.stop == "rejected" and refused:
        label = refused[-1].observation.code or "state-mismatch"
    elif state:
        label = "state-mismatch"
    else:
        label = "wrong-answer"
    return failures, label


def run_eval(endpoint: Endpoint, tasks: Sequence[Task], regmap: RegisterMap, *, k: int = 1,
             audit: AuditLog | None = None, max_steps: int = 12, retries: int = 1,
             on_trial: Callable[[Trial], None] | None = None,
             run: dict[str, Any] | None = None,
             wording: Wording | None = None) -> list[Trial]:
    """Run every task ``k`` times with the model behind ``endpoint``.

    Args:
        endpoint: the model.
        tasks: the suite (:func:`load_tasks`).
        regmap: the map of tasks that name none (each trial gets a fresh in-process device of
            its task's map).
        k: trials per task, >= 1.
        audit: the audit log every call is recorded in (shared by the trials; not closed).
        max_steps: each trial's call budget (across the scripted user's turns).
        retries: each trial's retries after a refusal.
        on_trial: called with each trial as it ends (progress).
        run: the run's pin, copied into every trial's record (model, provider, base URL's
            host kind, date, temperature, tool format, strict mode, regdev version, suite
            hash, wording and its hash).
        wording: the wording of the tools' descriptions (:mod:`regdev.agents._wording`);
            None: regdev's own. Strict mode is the endpoint's (``endpoint.strict``).

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
    tools: dict[int, Any] = {}
    for task in tasks:
        task_map = task.regmap or regmap
        offered = tools.get(id(task_map)) or tools.setdefault(id(task_map), map_tools(task_map))
        for trial in range(1, k + 1):
            device = RegisterFile(regmap=task_map)
            for addr, value in task.setup.items():
                device.write(addr, value)
            for addr, bits in task.hardware.items():
                device.hardware_set(addr, bits)
            before = _registers(device, task_map)
            gate = Gate(device, offered, audit=audit)
            result = run_agent(endpoint, gate, task.task, max_steps=max_steps,
                               retries=retries, follow_ups=task.user, wording=wording)
            after = _registers(device, task_map)
            said = (task.task, *task.user)
            if result.stop == "provider-error":  # the API failed, not the model: not scored
                done = Trial(endpoint.proposer, task.id, trial, None, [], result, after,
                             error=result.detail, category=task.category,
                             label="provider-error", run=run or {}, user=said)
            else:
                failures, label = score(task, result, before, after)
                done = Trial(endpoint.proposer, task.id, trial, not failures, failures,
                             result, after, category=task.category, label=label,
                             run=run or {}, user=said)
            trials.append(done)
            if on_trial is not None:
                on_trial(done)
            if len(trials) == 1 and result.error_kind in FATAL_KINDS:
                raise EvalStopped(f"stopped after the first trial, which every trial would "
                                  f"repeat: {result.detail}", trials)
    return trials


def _registers(device: RegisterFile, regmap: RegisterMap) -> dict[int, int]:
    """Every register's value by address, read without side effects (a snapshot: clear-on-read
    bits are not cleared). Trials run on the in-process register file, which has every value
    (its snapshot is ``list[int]``): never a register not read (None), which a bridge's
    snapshot may give, so no task is scored on a value made up for one."""
    return dict(zip((r.addr for r in regmap.registers), device.snapshot(), strict=True))


#: The normal quantile of a two-sided 95% interval.
_Z95 = 1.959963984540054


def wilson(successes: float, n: int, z: float = _Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion (95% by default): ``(low, high)`` in 0..1,
    None when ``n`` is 0. Source: E. B. Wilson, "Probable inference, the law of succession,
    and statistical inference", JASA 22 (1927)."""
    if n <= 0:
        return None
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _pass_hat(outcomes: list[list[bool]], k: int) -> float:
    """tau-bench's pass^k: the mean over tasks of C(c, k) / C(n, k), c of n trials passed
    (Yao et al., "tau-bench", 2024, eq. 1): the chance that k trials drawn from a task's n
    all pass."""
    return sum(math.comb(sum(o), k) / math.comb(len(o), k) for o in outcomes) / len(outcomes)


class _Outcome(NamedTuple):
    """A call's verdict as a results file keeps it (what :func:`loop_figures` reads)."""

    ok: bool
    stage: str | None
    code: str | None


def _figures(records: list[dict[str, Any]], k: int | None) -> dict[str, Any]:
    by_task: dict[str, list[bool]] = {}
    for record in records:
        if record["passed"] is not None:
            by_task.setdefault(record["task"], []).append(bool(record["passed"]))
    outcomes = [o for o in by_task.values() if o]
    n_min = min((len(o) for o in outcomes), default=0)
    kk = min(k, n_min) if k else n_min
    tasks = len(outcomes)
    every = sum(all(o) for o in outcomes)
    entry: dict[str, Any] = {
        "tasks": tasks, "trials": sum(len(o) for o in outcomes),
        "passed": sum(sum(o) for o in outcomes),
        "errored": sum(r["passed"] is None for r in records),
        "tasks_passed_every_trial": every, "k": kk,
        "pass^1": _pass_hat(outcomes, 1) if tasks else None,
        "pass^k": _pass_hat(outcomes, kk) if tasks and kk else None}
    entry["pass^k_ci95"] = (wilson(entry["pass^k"] * tasks, tasks)
                            if entry["pass^k"] is not None else None)
    entry["labels"] = dict(sorted(Counter(r["label"] for r in records
                                          if r.get("label")).items()))
    return entry


def eval_figures(records: Iterable[dict[str, Any]], k: int | None = None
                 ) -> dict[str, dict[str, Any]]:
    """Every figure of ``regdev report --eval``, per proposer, from result records alone
    (:meth:`Trial.to_dict`, e.g. read back with :func:`read_results`).

    Args:
        records: the trial records.
        k: the k of pass^k; None: the fewest scored trials any task had (capped there).

    Returns:
        ``{proposer: {"tasks", "trials", "passed", "errored", "tasks_passed_every_trial",
        "k", "pass^1", "pass^k", "pass^k_ci95", "labels", "categories": {category: the same
        figures}, "first_try_validity", "first_tries", "recovery_rate", "episodes",
        "calls_per_task", "runs": [pins], "rank", "variant", "formats"}}``. pass^k is
        tau-bench's (the mean over tasks of C(c, k)/C(n, k)); its 95% interval is Wilson's
        over the tasks (a task's value counted as a success share); a trial that errored is
        counted in ``errored`` only; rank 1 is the best (pass^k, then pass^1, then first-try
        validity, then the lowest pass^k over its format variants).

        A proposer run in several format variants (:func:`record_variant`: the wording and
        the strict mode of its pin) has its figures from its reference variant (``variant``:
        the first of :data:`~regdev.agents._wording.VARIANTS` it was run in), and
        ``formats``: per variant, ``{"tasks", "trials", "passed", "errored", "k", "pass^1",
        "pass^k", "pass^k_ci95", "labels", "difference", "difference_ci95"}``, the
        difference being the variant's pass^k minus the reference's, with Newcombe's 95%
        interval (:func:`difference_interval`).
    """
    by_proposer: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_proposer.setdefault(record["proposer"], []).append(record)
    out: dict[str, dict[str, Any]] = {}
    for proposer, every in by_proposer.items():
        variants: dict[str, list[dict[str, Any]]] = {}
        for record in every:
            variants.setdefault(record_variant(record), []).append(record)
        reference = min(variants, key=_variant_order)
        mine = variants[reference]
        entry = _figures(mine, k)
        entry["variant"] = reference
        entry["formats"] = _formats(variants, reference, entry)
        categories: dict[str, list[dict[str, Any]]] = {}
        for record in mine:
            categories.setdefault(record.get("category") or "simple", []).append(record)
        entry["categories"] = {name: _figures(categories[name], entry["k"] or None)
                               for name in (*CATEGORIES, *sorted(set(categories)
                                                                 - set(CATEGORIES)))
                               if name in categories}
        adherence = ModelReport(proposer)
        scored = [r for r in mine if r["passed"] is not None]
        for record in scored:
            loop = [_Outcome(c["ok"], c["stage"], c["code"])
                    for turn in record.get("transcript", []) for c in turn.get("calls", [])]
            loop_figures(adherence, loop)
        entry["first_tries"] = adherence.first_tries
        entry["first_try_validity"] = adherence.first_try_validity
        entry["episodes"] = adherence.episodes
        entry["recovery_rate"] = adherence.recovery_rate
        entry["calls_per_task"] = (sum(r.get("calls", 0) for r in scored) / len(scored)
                                   if scored else None)
        runs: list[dict[str, Any]] = []
        for record in every:
            if record.get("run") and record["run"] not in runs:
                runs.append(record["run"])
        entry["runs"] = runs
        out[proposer] = entry
    order = sorted(out, key=lambda p: (-(out[p]["pass^k"] or 0), -(out[p]["pass^1"] or 0),
                                       -(out[p]["first_try_validity"] or 0),
                                       -min(row["pass^k"] or 0
                                            for row in out[p]["formats"].values()), p))
    for rank, proposer in enumerate(order, 1):
        out[proposer]["rank"] = rank
    return {p: out[p] for p in order}


def record_variant(record: dict[str, Any]) -> str:
    """The format variant a trial record was run in, from its pin: ``WORDING/strict-on`` or
    ``WORDING/strict-off`` (:func:`~regdev.agents._wording.variant_name`; a pin without
    ``wording`` is regdev's own, ``original``; one without ``strict``, strict on)."""
    run = record.get("run") or {}
    return variant_name(str(run.get("wording") or "original"), bool(run.get("strict", True)))


def _variant_order(name: str) -> tuple[int, str]:
    known = [variant_name(w, s) for w, s in VARIANTS]
    return (known.index(name) if name in known else len(known), name)


def _formats(variants: dict[str, list[dict[str, Any]]], reference: str,
             entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per variant (the reference first): its figures, and its pass^k's difference from the
    reference's with Newcombe's interval."""
    out = {}
    for name in sorted(variants, key=_variant_order):
        figures = entry if name == reference else _figures(variants[name], entry["k"] or None)
        row = {key: figures[key] for key in ("tasks", "trials", "passed", "errored", "k",
                                             "pass^1", "pass^k", "pass^k_ci95", "labels")}
        row["difference"] = (row["pass^k"] - entry["pass^k"]
                             if row["pass^k"] is not None and entry["pass^k"] is not None
                             else None)
        row["difference_ci95"] = (difference_interval(
            row["pass^k"], row["tasks"], entry["pass^k"], entry["tasks"])
            if row["difference"] is not None else None)
        out[name] = row
    return out


def difference_interval(p1: float, n1: int, p2: float, n2: int) -> tuple[float, float] | None:
    """A 95% interval of ``p1 - p2``, two proportions of ``n1`` and ``n2`` (``(low, high)``
    in -1..1; None when either n is 0): Newcombe's hybrid score interval, from the two Wilson
    intervals (R. G. Newcombe, "Interval estimation for the difference between independent
    proportions: comparison of eleven methods", Statistics in Medicine 17 (1998), method 10).
    The variants of a sweep ran the same tasks, so the pairing would narrow it: this interval
    leaves the pairing out, and errs wide."""
    first, second = wilson(p1 * n1, n1), wilson(p2 * n2, n2)
    if first is None or second is None:
        return None
    (l1, u1), (l2, u2) = first, second
    difference = p1 - p2
    return (max(-1.0, difference - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)),
            min(1.0, difference + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)))


def pass_at_k(trials: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per proposer, from result records: :func:`eval_figures` with k the fewest scored
    trials any task had."""
    return eval_figures(trials)


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
