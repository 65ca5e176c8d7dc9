"""``regdev bench``: the compiled validator against its peers, measured in one run.

Rules of this file:

* Every contender does the same job on the same inputs: judge one ``write_register`` call
  (shape, tool name, required and unknown arguments, types, ranges) and say valid or not.
  Before anything is timed, each contender's verdict is checked against ours on every input;
  a disagreement is shown in the table, never hidden.
* Peers are optional (``pip install 'regdev[bench]'``): a missing one is a row saying so.
  pydantic and msgspec are regdev dependencies, so they are always there.
* Timing: ``time.perf_counter_ns`` around a batch of calls of one contender on one input,
  with the garbage collector off (as :mod:`timeit` does). Batches of all cells are
  interleaved round by round, so a slow spell on a shared machine hits every cell alike;
  each cell reports the median over rounds of ns per call, less the cost of the empty loop
  (measured in the same run). Ratios compare against our compiled validator in that run.
* No test asserts a time: the tests run this with tiny batches and check the table's shape
  and the verdicts only.
"""

from __future__ import annotations

import gc
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from itertools import repeat
from typing import Annotated, Any, Literal, TextIO

import msgspec
from pydantic import BaseModel, ConfigDict, Field, RootModel

from ._compile import compile_validator
from ._observation import Refusal
from ._parse import parse
from ._runtime import is_integer
from ._tools import REGISTER_TOOLS
from ._validate import ReferenceValidator

__all__ = [
    "CASES",
    "BenchResult",
    "Contender",
    "all_agree",
    "contenders",
    "floor_check",
    "format_table",
    "run_bench",
]

#: The inputs, one per verdict kind: (column title, canonical call, our expected code).
CASES: tuple[tuple[str, dict[str, Any], str | None], ...] = (
    ("valid", {"tool": "write_register", "arguments": {"addr": 3, "data": 255}}, None),
    ("missing", {"tool": "write_register", "arguments": {"data": 1}}, "missing-addr"),
    ("type", {"tool": "write_register", "arguments": {"addr": "3", "data": 1}}, "type-addr"),
    ("range", {"tool": "write_register", "arguments": {"addr": 3, "data": 300}}, "range-data"),
    ("unknown tool", {"tool": "erase_chip", "arguments": {"addr": 3, "data": 1}},
     "unknown-tool"),
    ("unknown argument",
     {"tool": "write_register", "arguments": {"addr": 3, "data": 1, "colour": "red"}},
     "unknown-argument"),
)

INSTALL_HINT = "not installed: pip install 'regdev[bench]'"


# --- the floor: the same rules written by hand for these two tools ----------------------------

_NOT_NUMBERS = frozenset({str, bool, type(None), list, dict})


def floor_check(call: object, tool_choice: str | None = None) -> str | None:
    """The register tools' rules written by hand, as tight as we know how: the floor.

    Same order and codes as the compiled validator, for ``write_register`` and
    ``read_register`` only; used by ``regdev bench`` to show the cost of generality.
    """
    if type(call) is not dict:
        return "not-an-object"
    name = call.get("tool")
    if type(name) is not str:
        return "missing-tool"
    a = call.get("arguments")
    if type(a) is not dict:
        return "bad-arguments"
    if tool_choice is not None and name != tool_choice:
        return "wrong-tool"
    if name == "write_register":
        if "addr" not in a:
            return "missing-addr"
        if "data" not in a:
            return "missing-data"
        if len(a) != 2:
            return "unknown-argument"
        addr = a["addr"]
        data = a["data"]
        if type(addr) is not int and (type(addr) in _NOT_NUMBERS or not is_integer(addr)):
            return "type-addr"
        if type(data) is not int and (type(data) in _NOT_NUMBERS or not is_integer(data)):
            return "type-data"
        if not 0 <= addr <= 15:
            return "range-addr"
        if not 0 <= data <= 255:
            return "range-data"
        return None
    if name == "read_register":
        if "addr" not in a:
            return "missing-addr"
        if len(a) != 1:
            return "unknown-argument"
        addr = a["addr"]
        if type(addr) is not int and (type(addr) in _NOT_NUMBERS or not is_integer(addr)):
            return "type-addr"
        if not 0 <= addr <= 15:
            return "range-addr"
        return None
    return "unknown-tool"


# --- contenders ---------------------------------------------------------------------------------


@dataclass
class Contender:
    """One row of the table.

    Attributes:
        name: the row's title.
        raw: True when it takes raw JSON text, False for a decoded call object.
        run: what is timed: one call on one input (raising on refusal is allowed).
        valid: its verdict on one input, True for valid (used to check agreement).
        note: why it could not run (a missing peer), else "".
        version: the peer's version, for the header.
    """

    name: str
    raw: bool
    run: Callable[[Any], Any] | None = None
    valid: Callable[[Any], bool] | None = None
    note: str = ""
    version: str = ""


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


def _raises_means_invalid(run: Callable[[Any], Any]) -> Callable[[Any], bool]:
    def valid(value: Any) -> bool:
        try:
            run(value)
        except Exception:
            return False
        return True
    return valid


# --- the peers' models of the same two tools ---------------------------------------------------

_Addr = Annotated[int, Field(ge=0, le=15)]
_Data = Annotated[int, Field(ge=0, le=255)]


class _PydanticWriteArguments(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    addr: _Addr
    data: _Data


class _PydanticReadArguments(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    addr: _Addr


class _PydanticWriteCall(BaseModel):
    model_config = ConfigDict(strict=True)
    tool: Literal["write_register"]
    arguments: _PydanticWriteArguments


class _PydanticReadCall(BaseModel):
    model_config = ConfigDict(strict=True)
    tool: Literal["read_register"]
    arguments: _PydanticReadArguments


class PydanticCall(RootModel[Annotated[_PydanticWriteCall | _PydanticReadCall,
                                       Field(discriminator="tool")]]):
    """The call as a strict pydantic v2 model: a union discriminated on ``tool``."""


_MsgspecAddr = Annotated[int, msgspec.Meta(ge=0, le=15)]
_MsgspecData = Annotated[int, msgspec.Meta(ge=0, le=255)]


class _MsgspecWriteArguments(msgspec.Struct, forbid_unknown_fields=True):
    addr: _MsgspecAddr
    data: _MsgspecData


class _MsgspecReadArguments(msgspec.Struct, forbid_unknown_fields=True):
    addr: _MsgspecAddr


class _MsgspecWriteCall(msgspec.Struct, tag_field="tool", tag="write_register"):
    arguments: _MsgspecWriteArguments


class _MsgspecReadCall(msgspec.Struct, tag_field="tool", tag="read_register"):
    arguments: _MsgspecReadArguments


#: The call as msgspec Structs: a union tagged by ``tool``, constraints in ``Meta``.
MsgspecCall = _MsgspecWriteCall | _MsgspecReadCall


def _call_schema(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema of one tool's whole call (shape, name, arguments)."""
    return {"type": "object", "required": ["tool", "arguments"],
            "properties": {"tool": {"const": name}, "arguments": arguments}}


def _by_name(validators: dict[str, Callable[[Any], Any]]) -> Callable[[Any], Any]:
    """Pick a JSON Schema validator by the call's tool name (an unknown name raises).

    One schema per tool with the name as a ``const``, picked by a dict lookup: the fastest
    use of these libraries we found (a single schema with ``if``/``then`` per tool makes
    fastjsonschema raise and catch inside every non-matching ``if``).
    """
    def run(call: Any) -> Any:
        if type(call) is not dict:
            raise ValueError("not an object")
        return validators[call["tool"]](call)
    return run


def _fastjsonschema() -> Contender:
    name = "fastjsonschema"
    try:
        import fastjsonschema  # noqa: PLC0415
    except ImportError:
        return Contender(name, raw=False, note=INSTALL_HINT)
    validators = {tool.name: fastjsonschema.compile(_call_schema(tool.name,
                                                                 dict(tool.input_schema)))
                  for tool in REGISTER_TOOLS.values()}
    run = _by_name(validators)
    return Contender(name, raw=False, run=run, valid=_raises_means_invalid(run),
                     version=_version("fastjsonschema"))


def _jsonschema() -> Contender:
    name = "jsonschema (is_valid)"
    try:
        import jsonschema  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError:
        return Contender(name, raw=False, note=INSTALL_HINT)
    validators = {tool.name: jsonschema.Draft202012Validator(
        _call_schema(tool.name, dict(tool.input_schema))).is_valid
        for tool in REGISTER_TOOLS.values()}
    by_name = _by_name(validators)

    def valid(call: Any) -> bool:
        try:
            return bool(by_name(call))
        except (KeyError, TypeError, ValueError):
            return False

    return Contender(name, raw=False, run=by_name, valid=valid,
                     version=_version("jsonschema"))


def contenders() -> list[Contender]:
    """Every row of the table, call-object rows first, then raw-text rows."""
    compiled = compile_validator()
    reference = ReferenceValidator()
    rows = [
        Contender("regdev compiled", raw=False, run=compiled,
                  valid=lambda call: compiled(call) is None),
        Contender("regdev reference", raw=False, run=reference.check,
                  valid=lambda call: reference.check(call) is None),
        Contender("hand-written floor", raw=False, run=floor_check,
                  valid=lambda call: floor_check(call) is None),
    ]
    pydantic_version = _version("pydantic")
    validate = PydanticCall.model_validate
    rows.append(Contender("pydantic v2 strict", raw=False, run=validate,
                          valid=_raises_means_invalid(validate), version=pydantic_version))
    rows.append(_fastjsonschema())
    rows.append(_jsonschema())
    # msgspec.convert rebuilds its view of a Union type on every call (about 4 us here), so
    # it gets the same help as the JSON Schema peers: the Struct is picked by tool name.
    by_tool: dict[str, Any] = {"write_register": _MsgspecWriteCall,
                               "read_register": _MsgspecReadCall}

    def convert(call: Any) -> Any:
        if type(call) is not dict:
            raise ValueError("not an object")
        return msgspec.convert(call, by_tool[call["tool"]])

    rows.append(Contender("msgspec convert", raw=False, run=convert,
                          valid=_raises_means_invalid(convert), version=_version("msgspec")))

    def ours(raw: str) -> str | None:  # what Gate.handle does before authorizing
        parsed = parse(raw)
        if type(parsed) is Refusal:
            return parsed.code
        if parsed.refusal is not None:  # type: ignore[union-attr]
            return parsed.refusal.code  # type: ignore[union-attr]
        return compiled(parsed.call)  # type: ignore[union-attr]

    validate_json = PydanticCall.model_validate_json
    decode = msgspec.json.Decoder(MsgspecCall).decode
    rows += [
        Contender("regdev parse + compiled", raw=True, run=ours,
                  valid=lambda raw: ours(raw) is None),
        Contender("pydantic model_validate_json", raw=True, run=validate_json,
                  valid=_raises_means_invalid(validate_json), version=pydantic_version),
        Contender("msgspec typed decoder", raw=True, run=decode,
                  valid=_raises_means_invalid(decode), version=_version("msgspec")),
    ]
    return rows


# --- timing ------------------------------------------------------------------------------------


def _batch(run: Callable[[Any], Any], value: Any, number: int) -> int:
    """Nanoseconds for ``number`` calls of ``run(value)`` (a refusal may raise)."""
    start = time.perf_counter_ns()
    for _ in repeat(None, number):
        try:  # noqa: SIM105 - contextlib.suppress would cost more than a refusal
            run(value)
        except Exception:
            pass
    return time.perf_counter_ns() - start


def _empty_batch(number: int) -> int:
    """Nanoseconds for the same loop with nothing in it (subtracted from every cell)."""
    start = time.perf_counter_ns()
    for _ in repeat(None, number):
        try:  # noqa: SIM105 - the same loop as _batch, with nothing in it
            pass
        except Exception:
            pass
    return time.perf_counter_ns() - start


@dataclass
class BenchResult:
    """One run's table.

    Attributes:
        cases: column titles, in order.
        rows: per contender: name, raw, note, version, ``ns`` (median ns per call per
            case), ``ratio`` (that over ours in the same section and case), ``agrees`` (its
            verdict matched ours per case).
        rounds: batches per cell; number: calls per batch, per row name.
        loop_ns: the empty loop's cost per call, already subtracted.
    """

    cases: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    rounds: int = 0
    loop_ns: float = 0.0
    seconds: float = 0.0
    environment: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready values (``regdev bench --json``)."""
        return {"unit": "ns per call", "statistic": "median", "rounds": self.rounds,
                "loop_ns_subtracted": round(self.loop_ns, 1), "seconds": round(self.seconds, 1),
                "environment": self.environment, "cases": self.cases, "rows": self.rows}


def run_bench(*, rounds: int = 25, batch_seconds: float = 0.01,
              progress: TextIO | None = None) -> BenchResult:
    """Measure every contender on every case, interleaved round by round.

    Args:
        rounds: batches per cell; the cell's figure is their median.
        batch_seconds: the target length of one batch, in seconds (the number of calls per
            batch is calibrated per cell to reach it).
        progress: where to report progress (e.g. ``sys.stderr``), or None.

    Returns:
        The :class:`BenchResult`.
    """
    began = time.perf_counter()

    def say(text: str) -> None:
        if progress is not None:
            progress.write(f"regdev bench: {text}\n")
            progress.flush()

    rows = contenders()
    calls = [call for _, call, _ in CASES]
    inputs: dict[bool, list[Any]] = {
        False: calls, True: [msgspec.json.encode(call).decode() for call in calls]}
    expected = [code is None for _, _, code in CASES]
    result = BenchResult(cases=[title for title, _, _ in CASES], rounds=rounds)
    result.environment = {"python": platform.python_version(), "machine": platform.machine()}
    for package in ("pydantic", "msgspec", "fastjsonschema", "jsonschema"):
        if any(row.version and package in row.name for row in rows):
            result.environment[package] = _version(package)
    cells: list[tuple[int, int, int]] = []  # (row, case, number)
    say(f"calibrating {sum(r.run is not None for r in rows)} contenders x {len(CASES)} cases")
    records: list[dict[str, Any]] = []
    for index, row in enumerate(rows):
        record: dict[str, Any] = {"name": row.name, "raw": row.raw, "note": row.note,
                                  "version": row.version, "ns": {}, "ratio": {},
                                  "agrees": {}}
        records.append(record)
        if row.run is None or row.valid is None:
            continue
        for case, value in enumerate(inputs[row.raw]):
            record["agrees"][result.cases[case]] = row.valid(value) == expected[case]
            number = 1
            while _batch(row.run, value, number) < batch_seconds * 1e9 / 4 and number < 10**7:
                number *= 4
            cells.append((index, case, number))
    samples: dict[tuple[int, int], list[float]] = {(i, c): [] for i, c, _ in cells}
    empty: list[float] = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for done in range(rounds):
            say(f"round {done + 1}/{rounds}")
            for index, case, number in cells:
                run = rows[index].run
                assert run is not None
                value = inputs[rows[index].raw][case]
                samples[index, case].append(_batch(run, value, number) / number)
            empty.append(_empty_batch(100_000) / 100_000)
    finally:
        if enabled:
            gc.enable()
    result.loop_ns = statistics.median(empty) if empty else 0.0
    for (index, case), values in samples.items():
        records[index]["ns"][result.cases[case]] = max(
            statistics.median(values) - result.loop_ns, 0.0)
    for raw in (False, True):
        base = next(r for r in records if r["raw"] is raw and r["name"].startswith("regdev"))
        for record in records:
            if record["raw"] is raw:
                for case, ns in record["ns"].items():
                    ours = base["ns"].get(case) or 0.0
                    record["ratio"][case] = ns / ours if ours else float("nan")
    result.rows = records
    result.seconds = time.perf_counter() - began
    return result


def format_table(result: BenchResult) -> str:
    """The result as one text table: ns per call, and the ratio to ours in parentheses."""
    width = max(len(r["name"]) for r in result.rows) + 2
    column = 19
    lines = [
        f"regdev bench: ns per call (median of {result.rounds} batches, empty loop of "
        f"{result.loop_ns:.1f} ns subtracted); (x) = time / regdev's time in the same column",
        "inputs: write_register calls; " + "; ".join(
            f"{k} {v}" for k, v in result.environment.items()),
        "",
        " " * width + "".join(f"{title:>{column}}" for title in result.cases),
    ]
    for raw, heading in ((False, "call object (decoded JSON) -> verdict"),
                         (True, "raw JSON text -> verdict")):
        lines.append(heading)
        for record in result.rows:
            if record["raw"] is not raw:
                continue
            if record["note"]:
                lines.append(f"  {record['name']:<{width - 2}}{record['note']}")
                continue
            cells = []
            for title in result.cases:
                ns, ratio = record["ns"].get(title), record["ratio"].get(title)
                mark = "" if record["agrees"].get(title, True) else "!"
                cells.append(f"{ns:>8.0f} ({ratio:5.2f}x){mark}".rjust(column)
                             if ns is not None else "-".rjust(column))
            lines.append(f"  {record['name']:<{width - 2}}" + "".join(cells))
    wrong = [f"{r['name']} on {c}" for r in result.rows for c, ok in r["agrees"].items()
             if not ok]
    lines.append("")
    lines.append("every contender agreed with regdev's verdict on every input" if not wrong
                 else "! disagreed with regdev's verdict: " + ", ".join(wrong))
    lines.append(f"measured in {result.seconds:.1f} s")
    return "\n".join(lines)


def all_agree(result: BenchResult) -> bool:
    """True when every contender that ran agreed with our verdict on every input."""
    return all(all(r["agrees"].values()) for r in result.rows)

