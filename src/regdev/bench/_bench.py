"""``regdev bench``: the compiled validator against its peers, measured in one run.

Rules of this file:

* Every contender does the same job on the same inputs: judge one tool call to the register
  tools or the block write (:data:`BENCH_TOOLS`: shape, tool name, required and unknown
  arguments, types, ranges, an array's length and each of its elements) and say valid or
  refused.
* Agreement first: before anything is timed, each contender runs once on every input and its
  verdict (valid or refused) is compared with regdev's. A cell where they differ is not timed
  and gets no figure and no ratio: the table says "disagrees" and a line below names the case
  and who accepts what. ``regdev bench`` then exits 1.
* Every row names what runs: the library and its installed version
  (:func:`importlib.metadata.version`), the API called, and what it builds on a refusal (a
  message, an error object whose text is formatted only when read, or nothing).
* Peers are optional (``pip install 'regdev[bench]'``): a missing one is a row saying so.
  pydantic and msgspec are regdev dependencies, so they are always there.
* Timing: ``time.perf_counter_ns`` around a batch of calls of one contender on one input,
  with the garbage collector off (as :mod:`timeit` does). Batches of all cells are
  interleaved round by round, so a slow spell on a shared machine hits every cell alike;
  each cell reports the median over rounds of ns per call, less the cost of the empty loop
  (measured in the same run). Ratios are peer time / regdev time in the same section, case
  and run.
* Each figure comes with its spread (the interquartile range of its rounds, as a share of
  the median), and the run says when its figures mean nothing (:func:`noise_reasons`, one
  judgement for ``regdev bench`` and the scripts in ``benchmarks/``): fewer than
  :data:`NOISE_MIN_ROUNDS` rounds, the cells' typical spread over :data:`NOISE_SPREAD`, any
  one cell's over :data:`NOISE_CELL_SPREAD`, the control (the hand-written floor timed
  twice, as two cells) more than :data:`NOISE_RATIO` apart, or a load average above the CPU
  count before or after the run.
* Three sections, each with its own baseline (its first row): decoded call objects, raw JSON
  text to a verdict, and raw JSON text to an observation through the whole gate, against the
  minimal pipeline (:class:`MinimalPipeline`).
* No test asserts a time, and no test depends on one: the tests give :func:`run_bench` a
  :class:`Stopwatch` whose batches take a known number of nanoseconds without timing
  anything, and check the table's shape, the figures that follow from those nanoseconds,
  the verdicts and the agreement check.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import metadata
from itertools import repeat
from typing import Annotated, Any, Literal, TextIO, Union

import msgspec
from pydantic import BaseModel, ConfigDict, Field, RootModel

from ..core._observation import Refusal
from ..devices._device import Device, RegisterFile
from ..gate._compile import BIND, compile_refusals, compile_validator
from ..gate._gate import _DERIVED_KEY_PREFIXES, Gate, _prefixed_key
from ..gate._parse import (
    DEFAULT_MAX_INPUT_BYTES,
    decode_canonical,
    parse,
)
from ..gate._tools import REGISTER_TOOLS, Tool, ToolSet
from ..gate._validate import ReferenceValidator
from ._noise import (
    NOISE_CELL_SPREAD,
    NOISE_MIN_ROUNDS,
    NOISE_RATIO,
    NOISE_SPREAD,
    format_spread,
    noise_line,
    noise_reasons,
)

__all__ = [
    "BENCH_TOOLS",
    "BLOCK_WRITE",
    "CASES",
    "CPU_STOPWATCH",
    "NOISE_CELL_SPREAD",
    "NOISE_MIN_ROUNDS",
    "NOISE_RATIO",
    "NOISE_SPREAD",
    "STOPWATCH",
    "BenchResult",
    "Case",
    "Contender",
    "MinimalPipeline",
    "Stopwatch",
    "all_agree",
    "bench_gate",
    "contenders",
    "floor_valid",
    "format_ratio",
    "format_spread",
    "format_table",
    "noise_line",
    "noise_reasons",
    "run_bench",
]


@dataclass(frozen=True)
class Case:
    """One input, one column of the table.

    Attributes:
        title: the column title (short).
        about: what the input is, for the legend under the table's header.
        call: the decoded call object.
        code: regdev's verdict code for it (None: valid).
        raw: the raw JSON text of the call (the same call; for ``padded``, with whitespace).
        raw_only: True when the call-object section would only repeat another column (the
            padding exists only in the text), so the case runs in the raw-text section only.
    """

    title: str
    about: str
    call: dict[str, Any]
    code: str | None
    raw: str
    raw_only: bool = False

    @property
    def tool(self) -> str | None:
        """The tool the call names (None when it names none)."""
        name = self.call.get("tool") if type(self.call) is dict else None
        return name if type(name) is str else None


def _case(title: str, about: str, call: dict[str, Any], code: str | None) -> Case:
    return Case(title, about, call, code, msgspec.json.encode(call).decode())


#: The block write of the register-map work, as a schema only (its handler and its rule that
#: addr + len(data) stays within the map belong to the device): 1..16 bytes from ``addr``.
BLOCK_WRITE = Tool(
    name="write_registers",
    description="Write consecutive registers from addr: data[i] goes to addr + i.",
    input_schema={
        "type": "object",
        "properties": {
            "addr": {"type": "integer", "minimum": 0, "maximum": 15},
            "data": {"type": "array", "minItems": 1, "maxItems": 16,
                     "items": {"type": "integer", "minimum": 0, "maximum": 255}},
        },
        "required": ["addr", "data"],
        "additionalProperties": False,
    },
)
#: What every contender judges: the two register tools and the block write.
BENCH_TOOLS = ToolSet([*REGISTER_TOOLS.values(), BLOCK_WRITE])

_WRITE = {"tool": "write_register", "arguments": {"addr": 3, "data": 255}}
_BLOCK = [(17 * i) % 256 for i in range(16)]  # 16 bytes: 0, 17, ..., 255
_LONG = "x" * 4000
_PADDING = " " * 2000

#: The inputs: the two valid calls, one of each common refusal, a block write of 16 values
#: (valid, and with one value out of range), and two large calls.
CASES: tuple[Case, ...] = (
    _case("write", 'valid write_register {"addr": 3, "data": 255}', _WRITE, None),
    _case("read", 'valid read_register {"addr": 7}',
          {"tool": "read_register", "arguments": {"addr": 7}}, None),
    _case("type", 'wrong type: write_register {"addr": "3", "data": 1} (refused: type-addr)',
          {"tool": "write_register", "arguments": {"addr": "3", "data": 1}}, "type-addr"),
    _case("range", 'out of range: write_register {"addr": 3, "data": 300} (refused: '
          "range-data)", {"tool": "write_register", "arguments": {"addr": 3, "data": 300}},
          "range-data"),
    _case("missing", 'missing field: write_register {"data": 1} (refused: missing-addr)',
          {"tool": "write_register", "arguments": {"data": 1}}, "missing-addr"),
    _case("extra arg", 'unknown argument: write_register {"addr": 3, "data": 1, "colour": '
          '"red"} (refused: unknown-argument)',
          {"tool": "write_register", "arguments": {"addr": 3, "data": 1, "colour": "red"}},
          "unknown-argument"),
    _case("bad tool", 'unknown tool: erase_chip {"addr": 3, "data": 1} (refused: '
          "unknown-tool)", {"tool": "erase_chip", "arguments": {"addr": 3, "data": 1}},
          "unknown-tool"),
    _case("block write", 'valid block write: write_registers {"addr": 0, "data": [0, 17, '
          "..., 255]} (16 values)", {"tool": "write_registers",
                                     "arguments": {"addr": 0, "data": _BLOCK}}, None),
    _case("block range", "one value out of range: the block write with data[12] = 300 "
          "(refused: range-data[])", {"tool": "write_registers", "arguments": {
              "addr": 0, "data": [*_BLOCK[:12], 300, *_BLOCK[13:]]}}, "range-data[]"),
    _case("long arg", f"large refusal: the valid write plus a {len(_LONG)}-character string "
          'in an unknown argument "note" (refused: unknown-argument)',
          {"tool": "write_register",
           "arguments": {"addr": 3, "data": 255, "note": _LONG}}, "unknown-argument"),
    Case("padded", f"large valid call: the valid write's JSON text with {len(_PADDING)} "
         "spaces of whitespace (raw text only; as an object it is the write column)",
         _WRITE, None, '{"tool": "write_register",' + _PADDING
         + '"arguments": {"addr": 3,' + _PADDING + '"data": 255}}', raw_only=True),

)

INSTALL_HINT = ("not installed: pip install 'regdev[bench]' (in a clone of regdev: scripts/test "
                "installs it into .venv, or .venv/bin/pip install -e '.[bench]')")

#: What a contender builds when it refuses, shown with its name.
ON_REFUSAL = {
    "code": "returns a verdict code, builds no message",
    "message": "builds the refusal message",
    "observation": "returns the observation with its one-line message",
    "error": "raises an error object; its text is formatted only when read",
    "exception": "raises an exception with its message text",
    "bool": "returns False, builds nothing",
}


# --- the floor: the least code that tells valid from invalid for these two tools ----------------


def _int_in(value: object, high: int) -> bool:
    """An integer in ``0..high``: ``int`` (not ``bool``), or an integral ``float``/``Decimal``."""
    if type(value) is int:
        return 0 <= value <= high
    if type(value) is float:
        return value.is_integer() and 0 <= value <= high
    if type(value) is Decimal:
        return value.is_finite() and value == value.to_integral_value() and 0 <= value <= high
    return False


def floor_valid(call: object) -> bool:
    """True when ``call`` is a valid ``write_register``, ``read_register`` or
    ``write_registers`` call (:data:`BENCH_TOOLS`).

    The floor of ``regdev bench``: the least code we know that gives the same valid-or-refused
    answer as the compiled validator for these two tools, written by hand, with no verdict
    code, no order of checks, no message and no ``tool_choice``. The distance between it and
    the compiled validator is what the validator's generality costs (it handles any schema of
    the supported subset and says which rule failed).
    """
    if type(call) is not dict:
        return False
    a = call.get("arguments")
    if type(a) is not dict:
        return False
    name = call.get("tool")
    try:
        if name == "write_register":
            addr, data = a["addr"], a["data"]
            if len(a) != 2:
                return False
            if type(addr) is int and type(data) is int:  # the usual case, inline
                return addr >= 0 and addr <= 15 and data >= 0 and data <= 255
            return _int_in(addr, 15) and _int_in(data, 255)
        if name == "read_register":
            addr = a["addr"]
            if len(a) != 1:
                return False
            if type(addr) is int:
                return addr >= 0 and addr <= 15
            return _int_in(addr, 15)
        if name == "write_registers":
            addr, data = a["addr"], a["data"]
            if len(a) != 2 or type(data) is not list or not 1 <= len(data) <= 16:
                return False
            if type(addr) is int:
                if addr < 0 or addr > 15:
                    return False
            elif not _int_in(addr, 15):
                return False
            for value in data:
                if type(value) is int:
                    if value < 0 or value > 255:
                        return False
                elif not _int_in(value, 255):
                    return False
            return True
    except KeyError:
        return False
    return False


# --- the gate row's anchor: the least a pipeline from text to observation can do --------------

_decode_plain = msgspec.json.Decoder().decode


class MinimalPipeline:
    """The anchor of the gate row: the least a tool-call pipeline can do from raw text to an
    observation for :data:`BENCH_TOOLS`, written by hand. msgspec decodes the text (no exact
    decimals, no repeated-key check, no correlation id), a hand-written check tells valid
    from refused in no fixed order, a refusal gets a one-line message, a valid call writes or
    reads a ``bytearray`` of 16 registers under a lock, and the observation is a dict.

    The distance between it and :meth:`Gate.handle` is what the gate's guarantees and its
    generality cost (the first failure in a fixed order, exact numbers, repeated keys
    refused, the device's own checks, any tool set).
    """

    def __init__(self) -> None:
        self.registers = bytearray(16)
        self.lock = threading.Lock()

    @staticmethod
    def _refused(code: str, message: str) -> dict[str, Any]:
        return {"ok": False, "stage": "validate", "code": code, "message": message}

    def __call__(self, raw: str | bytes) -> dict[str, Any]:
        refused = self._refused
        try:
            call = _decode_plain(raw)
        except msgspec.DecodeError as error:
            return {"ok": False, "stage": "parse", "code": "not-json", "message": str(error)}
        if type(call) is not dict:
            return refused("not-an-object", "a tool call must be a JSON object")
        name, a = call.get("tool"), call.get("arguments")
        if type(a) is not dict:
            return refused("bad-arguments", "arguments must be a JSON object")
        if name in ("write_register", "write_registers"):  # a tuple: name may be a list
            if "addr" not in a:
                return refused("missing-addr", "missing required argument addr (an integer "
                                               "0..15)")
            if "data" not in a:
                return refused("missing-data", "missing required argument data")
            if len(a) != 2:
                return refused("unknown-argument", "unknown argument; takes: addr, data")
            addr, data = a["addr"], a["data"]
            if type(addr) is not int:
                return refused("type-addr", f"addr must be an integer 0..15, got {addr!r}")
            if not 0 <= addr <= 15:
                return refused("range-addr", f"addr {addr} is outside 0..15")
            if name == "write_register":
                if type(data) is not int:
                    return refused("type-data", f"data must be an integer 0..255, got {data!r}")
                if not 0 <= data <= 255:
                    return refused("range-data", f"data {data} is outside 0..255")
                with self.lock:
                    self.registers[addr] = data
                return {"ok": True, "tool": name, "result": {"addr": addr, "data": data}}
            if type(data) is not list or not 1 <= len(data) <= 16 or addr + len(data) > 16:
                return refused("range-data", "data must be 1..16 integers 0..255")
            for index, value in enumerate(data):
                if type(value) is not int or not 0 <= value <= 255:
                    return refused("range-data[]", f"data[{index}] {value!r} is outside 0..255")
            with self.lock:
                self.registers[addr:addr + len(data)] = bytes(data)
            return {"ok": True, "tool": name, "result": {"addr": addr, "data": data}}
        if name == "read_register":
            if "addr" not in a:
                return refused("missing-addr", "missing required argument addr (an integer "
                                               "0..15)")
            if len(a) != 1:
                return refused("unknown-argument", "unknown argument; takes: addr")
            addr = a["addr"]
            if type(addr) is not int:
                return refused("type-addr", f"addr must be an integer 0..15, got {addr!r}")
            if not 0 <= addr <= 15:
                return refused("range-addr", f"addr {addr} is outside 0..15")
            with self.lock:
                data = self.registers[addr]
            return {"ok": True, "tool": name, "result": {"addr": addr, "data": data}}
        return refused("unknown-tool", f"unknown tool {name!r}")


def _write_block(device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
    """The bench's handler of ``write_registers``: the device's block write."""
    return {"addr": arguments["addr"],
            "data": device.write_block(arguments["addr"], arguments["data"])}


def bench_gate() -> Gate:
    """The gate the gate row times: :data:`BENCH_TOOLS` (the block write with a handler), an
    in-process :class:`RegisterFile`, no policy, no audit log."""
    block = Tool(BLOCK_WRITE.name, BLOCK_WRITE.description, BLOCK_WRITE.input_schema,
                 handler=_write_block)
    return Gate(RegisterFile(), ToolSet([*REGISTER_TOOLS.values(), block]))


# --- contenders ---------------------------------------------------------------------------------


@dataclass
class Contender:
    """One row of the table.

    Attributes:
        key: a short stable identifier (``pydantic-json``), for pytest ids and ``--json``.
        name: the row's title: library, installed version and the API called.
        raw: True when it takes raw JSON text, False for a decoded call object.
        on_refusal: what it builds when it refuses: a key of :data:`ON_REFUSAL`.
        run: what is timed: one call on one input (raising on refusal is allowed).
        valid: its verdict on one input, True for valid (used to check agreement).
        note: why it could not run (a missing peer), else "".
        version: the library's installed version ("" for the hand-written floor).
        section: ``"object"`` (a decoded call to a verdict), ``"text"`` (raw text to a
            verdict) or ``"gate"`` (raw text to an observation); by default ``"text"`` when
            ``raw``, else ``"object"``.
        cannot: per tool name, why this contender cannot judge that tool's calls (a schema
            keyword its types cannot say, with its JSON Pointer): those cases are listed as
            such, never timed.
    """

    key: str
    name: str
    raw: bool
    on_refusal: str
    run: Callable[[Any], Any] | None = None
    valid: Callable[[Any], bool] | None = None
    note: str = ""
    version: str = ""
    section: str = ""
    cannot: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.section:
            self.section = "text" if self.raw else "object"


#: The sections of the table, in order, with their headings.
SECTIONS = {
    "object": "decoded call object -> verdict",
    "text": "raw JSON text -> verdict",
    "gate": "raw JSON text -> observation, the whole gate (no policy, no audit log; "
            "an in-process register file)",
}


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


class _PydanticBlockArguments(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    addr: _Addr
    data: Annotated[list[_Data], Field(min_length=1, max_length=16)]


class _PydanticWriteCall(BaseModel):
    model_config = ConfigDict(strict=True)
    tool: Literal["write_register"]
    arguments: _PydanticWriteArguments


class _PydanticReadCall(BaseModel):
    model_config = ConfigDict(strict=True)
    tool: Literal["read_register"]
    arguments: _PydanticReadArguments


class _PydanticBlockCall(BaseModel):
    model_config = ConfigDict(strict=True)
    tool: Literal["write_registers"]
    arguments: _PydanticBlockArguments


class PydanticCall(RootModel[Annotated[_PydanticWriteCall | _PydanticReadCall
                                       | _PydanticBlockCall, Field(discriminator="tool")]]):
    """The call as a strict pydantic v2 model: a union discriminated on ``tool``."""


_MsgspecAddr = Annotated[int, msgspec.Meta(ge=0, le=15)]
_MsgspecData = Annotated[int, msgspec.Meta(ge=0, le=255)]


class _MsgspecWriteArguments(msgspec.Struct, forbid_unknown_fields=True):
    addr: _MsgspecAddr
    data: _MsgspecData


class _MsgspecReadArguments(msgspec.Struct, forbid_unknown_fields=True):
    addr: _MsgspecAddr


class _MsgspecBlockArguments(msgspec.Struct, forbid_unknown_fields=True):
    addr: _MsgspecAddr
    data: Annotated[list[_MsgspecData], msgspec.Meta(min_length=1, max_length=16)]


class _MsgspecWriteCall(msgspec.Struct, tag_field="tool", tag="write_register"):
    arguments: _MsgspecWriteArguments


class _MsgspecReadCall(msgspec.Struct, tag_field="tool", tag="read_register"):
    arguments: _MsgspecReadArguments


class _MsgspecBlockCall(msgspec.Struct, tag_field="tool", tag="write_registers"):
    arguments: _MsgspecBlockArguments


#: The call as msgspec Structs: a union tagged by ``tool``, constraints in ``Meta``.
MsgspecCall = _MsgspecWriteCall | _MsgspecReadCall | _MsgspecBlockCall


def _call_schema(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema of one tool's whole call (shape, name, arguments)."""
    return {"type": "object", "required": ["tool", "arguments"],
            "properties": {"tool": {"const": name}, "arguments": arguments}}


def _by_name(validators: dict[str, Callable[[Any], Any]]) -> Callable[[Any], Any]:
    """Pick a JSON Schema validator by the call's tool name (an unknown name raises).

    One schema per tool with the name as a ``const``, picked by a dict lookup: the fastest
    use of these libraries we found (a single schema with ``if``/``then`` per tool makes
    fastjsonschema raise and catch inside every non-matching ``if``). On an unknown tool name
    the peer's row therefore times this lookup's ``KeyError``, not the peer.
    """
    def run(call: Any) -> Any:
        if type(call) is not dict:
            raise ValueError("not an object")
        return validators[call["tool"]](call)
    return run


def _is_valid(is_valid: Callable[[Any], Any]) -> Callable[[Any], bool]:
    """A peer's ``is_valid`` picked by tool name (:func:`_by_name`) as a verdict: False for a
    call it cannot even pick a schema for (not an object, an unknown tool name)."""
    def valid(call: Any) -> bool:
        try:
            return bool(is_valid(call))
        except (KeyError, TypeError, ValueError):
            return False
    return valid


def _plain_schema(schema: Any) -> Any:
    """A tool schema as plain JSON data (``json.loads`` of its text: a Decimal becomes a
    float), the form the JSON Schema peers take; the schema says the same."""
    return json.loads(msgspec.json.Encoder(decimal_format="number").encode(schema))


def _schemas(tools: ToolSet) -> dict[str, dict[str, Any]]:
    """Each tool's whole-call schema (:func:`_call_schema`), as plain JSON data."""
    return {tool.name: _plain_schema(_call_schema(tool.name, dict(tool.input_schema)))
            for tool in tools.values()}


def _fastjsonschema(tools: ToolSet = BENCH_TOOLS) -> Contender:
    key, api = "fastjsonschema", "compile(), one schema per tool, picked by tool name"
    try:
        import fastjsonschema  # noqa: PLC0415
    except ImportError:
        return Contender(key, f"fastjsonschema ({api})", raw=False, on_refusal="exception",
                         note=INSTALL_HINT)
    version = _version("fastjsonschema")
    validators = {name: fastjsonschema.compile(schema)
                  for name, schema in _schemas(tools).items()}
    run = _by_name(validators)
    return Contender(key, f"fastjsonschema {version} ({api})", raw=False,
                     on_refusal="exception", run=run, valid=_raises_means_invalid(run),
                     version=version)


def _jsonschema(tools: ToolSet = BENCH_TOOLS) -> list[Contender]:
    """jsonschema's verdict alone (``is_valid``) and with its message (the first of
    ``iter_errors``, its ``message`` read)."""
    key, api = "jsonschema", "Draft202012Validator.is_valid, one per tool, picked by tool name"
    try:
        import jsonschema  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError:
        return [Contender(key, f"jsonschema ({api})", raw=False, on_refusal="bool",
                          note=INSTALL_HINT)]
    version = _version("jsonschema")
    built = {name: jsonschema.Draft202012Validator(schema)
             for name, schema in _schemas(tools).items()}
    by_name = _by_name({name: v.is_valid for name, v in built.items()})

    def first_error(validator: Any) -> Callable[[Any], Any]:
        def run(call: Any) -> Any:
            error = next(validator.iter_errors(call), None)
            if error is not None:
                raise ValueError(error.message)
        return run

    worded = _by_name({name: first_error(v) for name, v in built.items()})
    return [Contender(key, f"jsonschema {version} ({api})", raw=False, on_refusal="bool",
                      run=by_name, valid=_is_valid(by_name), version=version),
            Contender("jsonschema-message", f"jsonschema {version} (the first of iter_errors, "
                      "its message read; picked by tool name)", raw=False,
                      on_refusal="exception", run=worded, valid=_raises_means_invalid(worded),
                      version=version)]


def _jsonschema_rs(tools: ToolSet = BENCH_TOOLS) -> list[Contender]:
    """jsonschema-rs (Rust): the verdict alone (``is_valid``) and with its message
    (``validate``, which raises the first error with its message)."""
    key, api = "jsonschema-rs", "validator_for(...).is_valid, one per tool, picked by tool name"
    try:
        import jsonschema_rs  # noqa: PLC0415
    except ImportError:
        return [Contender(key, f"jsonschema-rs ({api})", raw=False, on_refusal="bool",
                          note=INSTALL_HINT)]
    version = _version("jsonschema-rs")
    built = {name: jsonschema_rs.validator_for(schema)
             for name, schema in _schemas(tools).items()}
    by_name = _by_name({name: v.is_valid for name, v in built.items()})

    worded = _by_name({name: v.validate for name, v in built.items()})
    return [Contender(key, f"jsonschema-rs {version} ({api})", raw=False, on_refusal="bool",
                      run=by_name, valid=_is_valid(by_name), version=version),
            Contender("jsonschema-rs-message", f"jsonschema-rs {version} (validate: raises "
                      "the first error with its message; picked by tool name)", raw=False,
                      on_refusal="exception", run=worded, valid=_raises_means_invalid(worded),
                      version=version)]


def _raising_message(run: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``run``, with the text of the error it raises formatted (``str``) before it goes on."""
    def worded(value: Any) -> Any:
        try:
            return run(value)
        except Exception as error:
            raise ValueError(str(error)) from None
    return worded


def _typed_peers(tools: ToolSet) -> list[Contender]:
    """pydantic (strict) and msgspec on types regdev builds from each tool's schema
    (:mod:`regdev.bench._typed`); a tool whose schema they cannot say is listed as such."""
    from ._typed import BUILT, Inexpressible, msgspec_call, pydantic_call  # noqa: PLC0415

    models: dict[str, Any] = {}
    structs: dict[str, Any] = {}
    cannot_p: dict[str, str] = {}
    cannot_m: dict[str, str] = {}
    for tool in tools.values():
        try:
            models[tool.name] = pydantic_call(tool.name, tool.input_schema)
        except Inexpressible as error:
            cannot_p[tool.name] = str(error)
        try:
            structs[tool.name] = msgspec_call(tool.name, tool.input_schema)
        except Inexpressible as error:
            cannot_m[tool.name] = str(error)
    pydantic, msgspec_name = f"pydantic {_version('pydantic')}", f"msgspec {_version('msgspec')}"
    validate = _by_name({name: model.model_validate for name, model in models.items()})
    worded = _raising_message(validate)

    def convert_with(struct: Any) -> Callable[[Any], Any]:
        return functools.partial(msgspec.convert, type=struct)

    convert = _by_name({name: convert_with(struct) for name, struct in structs.items()})
    rows = [
        Contender("pydantic", f"{pydantic} (strict model_validate; {BUILT}; picked by tool "
                  "name)", raw=False, on_refusal="error", run=validate,
                  valid=_raises_means_invalid(validate), version=_version("pydantic"),
                  cannot=cannot_p),
        Contender("pydantic-message", f"{pydantic} (the same, the error's text formatted)",
                  raw=False, on_refusal="exception", run=worded,
                  valid=_raises_means_invalid(worded), version=_version("pydantic"),
                  cannot=cannot_p),
        Contender("msgspec-convert", f"{msgspec_name} (convert; {BUILT}; picked by tool "
                  "name)", raw=False, on_refusal="exception", run=convert,
                  valid=_raises_means_invalid(convert), version=_version("msgspec"),
                  cannot=cannot_m),
    ]
    union_p = list(models.values())
    if union_p:
        root: Any = union_p[0] if len(union_p) == 1 else Annotated[
            Union[tuple(union_p)], Field(discriminator="tool")]  # noqa: UP007
        validate_json = RootModel[root].model_validate_json
        rows.append(Contender("pydantic-json", f"{pydantic} (strict model_validate_json of "
                              "the tools' models as one union on tool)", raw=True,
                              on_refusal="error", run=validate_json,
                              valid=_raises_means_invalid(validate_json),
                              version=_version("pydantic"), cannot=cannot_p))
    union_m = list(structs.values())
    if union_m:
        decode = msgspec.json.Decoder(Union[tuple(union_m)]).decode  # noqa: UP007
        rows.append(Contender("msgspec-decode", f"{msgspec_name} (json.Decoder of the "
                              "tools' Structs as one union tagged by tool, decode)",
                              raw=True, on_refusal="exception", run=decode,
                              valid=_raises_means_invalid(decode), version=_version("msgspec"),
                              cannot=cannot_m))
    return rows


def _echo(device: Device, arguments: dict[str, Any]) -> dict[str, Any]:
    """The bench's handler of a tool that has none: the arguments back (no device)."""
    return arguments


def tools_gate(tools: ToolSet, device: Device | None = None) -> Gate:
    """A gate for ``tools`` with no policy and no audit log; a tool without a handler gets
    one that answers with its arguments, so the gate row times the gate, not a device.

    Args:
        tools: the tool set.
        device: the device (default: an in-process :class:`RegisterFile`).
    """
    handled = [tool if tool.handler is not None else Tool(
        tool.name, tool.description, tool.input_schema, handler=_echo)
        for tool in tools.values()]
    return Gate(device or RegisterFile(), ToolSet(handled))


def contenders(tools: ToolSet | None = None, gate: Gate | None = None) -> list[Contender]:
    """Every row of the table, call-object rows first, then raw-text rows.

    The first row of each section is regdev's baseline, the one the ratios divide by.

    Args:
        tools: the tool set every contender judges (default :data:`BENCH_TOOLS`, with the
            hand-written floor, hand-written pydantic and msgspec models and the minimal
            pipeline; any other tool set gets the peers' types built from its schemas).
        gate: the gate the gate row times (default :func:`bench_gate` for the bench tools,
            :func:`tools_gate` for others).
    """
    fixed = tools is None
    tools = BENCH_TOOLS if tools is None else tools
    compiled = compile_validator(tools)
    reference = ReferenceValidator(tools)
    refusals = compile_refusals(tools, reference)
    refusal = refusals.refusal
    ours = f"regdev {_version('regdev')}"

    def worded(call: Any) -> Refusal | None:  # what Gate's validate stage does
        verdict = refusals(call)
        return verdict if isinstance(verdict, Refusal) else None

    rows = [
        Contender("regdev-compiled", f"{ours}: compiled validator, check(call)", raw=False,
                  on_refusal="code", run=compiled, valid=lambda call: compiled(call) is None,
                  version=_version("regdev")),
        Contender("regdev-refusal", f"{ours}: the gate's compiled check, its refusal worded "
                  "(the gate's validate stage)", raw=False, on_refusal="message",
                  run=refusals, valid=lambda call: worded(call) is None,
                  version=_version("regdev")),
        Contender("regdev-reference", f"{ours}: ReferenceValidator.check (the reference, "
                  "not on the gate's path)", raw=False, on_refusal="message",
                  run=reference.check, valid=lambda call: reference.check(call) is None,
                  version=_version("regdev")),
    ]
    if fixed:
        rows.append(Contender("floor", "floor: hand-written valid-or-not test of these three "
                              "tools (regdev.bench._bench.floor_valid)", raw=False,
                              on_refusal="bool", run=floor_valid, valid=floor_valid))
    pydantic = f"pydantic {_version('pydantic')}"
    msgspec_name = f"msgspec {_version('msgspec')}"
    typed = [] if fixed else _typed_peers(tools)
    if fixed:
        validate = PydanticCall.model_validate
        typed.append(Contender("pydantic", f"{pydantic} (strict model, model_validate)",
                               raw=False, on_refusal="error", run=validate,
                               valid=_raises_means_invalid(validate),
                               version=_version("pydantic")))
        message = _raising_message(validate)
        typed.append(Contender("pydantic-message", f"{pydantic} (the same, the error's text "
                               "formatted)", raw=False, on_refusal="exception", run=message,
                               valid=_raises_means_invalid(message),
                               version=_version("pydantic")))
        # msgspec.convert rebuilds its view of a Union type on every call (about 4 us
        # here), so it gets the same help as the JSON Schema peers: the Struct is picked
        # by tool name.
        by_tool: dict[str, Any] = {"write_register": _MsgspecWriteCall,
                                   "read_register": _MsgspecReadCall,
                                   "write_registers": _MsgspecBlockCall}

        def convert(call: Any) -> Any:
            if type(call) is not dict:
                raise ValueError("not an object")
            return msgspec.convert(call, by_tool[call["tool"]])

        typed.append(Contender("msgspec-convert", f"{msgspec_name} (convert to tagged "
                               "Structs, picked by tool name)", raw=False,
                               on_refusal="exception", run=convert,
                               valid=_raises_means_invalid(convert),
                               version=_version("msgspec")))
    rows += [row for row in typed if not row.raw]
    rows += [*_jsonschema_rs(tools), _fastjsonschema(tools), *_jsonschema(tools)]

    def gate_verdict(raw: str) -> Refusal | None:  # what Gate.handle does before authorizing
        decoded = decode_canonical(raw, DEFAULT_MAX_INPUT_BYTES)  # the usual call
        if type(decoded) is tuple:
            verdict = refusal(decoded[0], decoded[1])
            return None if verdict is None or verdict is BIND else verdict
        if decoded is not None:
            return decoded  # type: ignore[return-value]
        parsed = parse(raw)  # any other text: the general parse, as Gate.handle
        if isinstance(parsed, Refusal):
            return parsed
        key = parsed.idempotency_key
        refused = parsed.refusal or (_prefixed_key(key) if key is not None and
                                     key.startswith(_DERIVED_KEY_PREFIXES) else None)
        if refused is not None:
            return refused
        return worded(parsed.call)

    if gate is None:
        gate = bench_gate() if fixed else tools_gate(tools)
    handle = gate.handle
    rows.append(Contender("regdev-gate", f"{ours}: parse + the gate's compiled check, refusal "
                          "worded (the gate's parse and validate stages)", raw=True,
                          on_refusal="message", run=gate_verdict,
                          valid=lambda raw: gate_verdict(raw) is None,
                          version=_version("regdev")))
    if fixed:
        validate_json = PydanticCall.model_validate_json
        decode = msgspec.json.Decoder(MsgspecCall).decode
        rows += [
            Contender("pydantic-json", f"{pydantic} (strict model, model_validate_json)",
                      raw=True, on_refusal="error", run=validate_json,
                      valid=_raises_means_invalid(validate_json),
                      version=_version("pydantic")),
            Contender("msgspec-decode", f"{msgspec_name} (json.Decoder of the tagged "
                      "Structs, decode)", raw=True, on_refusal="exception", run=decode,
                      valid=_raises_means_invalid(decode), version=_version("msgspec")),
        ]
    rows += [row for row in typed if row.raw]
    rows.append(Contender("regdev-handle", f"{ours}: Gate.handle ("
                          + ("regdev.bench._bench.bench_gate" if fixed else
                             "no policy, no audit log; a tool without a handler answers with "
                             "its arguments") + ")",
                          raw=True, on_refusal="observation", run=handle,
                          valid=lambda raw: handle(raw).ok, version=_version("regdev"),
                          section="gate"))
    if fixed:
        minimal = MinimalPipeline()
        rows.append(Contender("minimal", "minimal pipeline: msgspec decode, hand-written "
                              "check, locked bytearray write, observation dict "
                              "(regdev.bench._bench.MinimalPipeline)", raw=True,
                              on_refusal="observation", run=minimal,
                              valid=lambda raw: minimal(raw)["ok"], section="gate"))
    return rows


# --- timing ------------------------------------------------------------------------------------


#: What a batch is timed with: nanoseconds from some fixed point.
Clock = Callable[[], int]


def _batch(run: Callable[[Any], Any], value: Any, number: int,
           clock: Clock = time.perf_counter_ns) -> int:
    """Nanoseconds for ``number`` calls of ``run(value)`` (a refusal may raise)."""
    start = clock()
    for _ in repeat(None, number):
        try:  # noqa: SIM105 - contextlib.suppress would cost more than a refusal
            run(value)
        except Exception:
            pass
    return clock() - start


def _empty_batch(number: int, clock: Clock = time.perf_counter_ns) -> int:
    """Nanoseconds for the same loop with nothing in it (subtracted from every cell)."""
    start = clock()
    for _ in repeat(None, number):
        try:  # noqa: SIM105 - the same loop as _batch, with nothing in it
            pass
        except Exception:
            pass
    return clock() - start


@dataclass(frozen=True)
class Stopwatch:
    """How :func:`run_bench` times a batch: the real clock, or a test's stand-in.

    Attributes:
        batch: ``batch(run, value, number)``: nanoseconds for ``number`` calls of
            ``run(value)`` (a refusal may raise; it is caught), an int >= 0.
        empty: ``empty(number)``: nanoseconds for the same loop with nothing in it,
            subtracted from every cell (per call).
    """

    batch: Callable[[Callable[[Any], Any], Any, int], int] = _batch
    empty: Callable[[int], int] = _empty_batch
    name: str = "wall clock"  #: what it times with, for the report


#: The stopwatch :func:`run_bench` uses unless it is given one: ``time.perf_counter_ns``.
STOPWATCH = Stopwatch()
#: One that times the CPU this thread spent (``time.thread_time_ns``): steadier on a shared
#: machine, since it does not count the time the thread waits for a CPU.
CPU_STOPWATCH = Stopwatch(functools.partial(_batch, clock=time.thread_time_ns),
                          functools.partial(_empty_batch, clock=time.thread_time_ns),
                          "CPU time of this thread")


def _verdict(valid: bool) -> str:
    return "accepts" if valid else "refuses"


@dataclass
class BenchResult:
    """One run's table.

    Attributes:
        cases: the inputs, in column order.
        rows: per contender: key, name, raw, section, on_refusal, note, version, ``ns``
            (median ns per call per case title), ``spread`` (the interquartile range of its
            rounds over that median, per case title), ``ratio`` (that over regdev's baseline
            in the same section and case: peer time / regdev time), ``agrees`` (its verdict
            matched regdev's, per case title), ``disagreements`` (one sentence per case where
            it did not; those cases are not timed).
        rounds: batches per cell.
        loop_ns: the empty loop's cost per call, already subtracted.
        seconds: how long the whole run took.
        environment: Python's version and implementation, the platform, the CPU count.
        load: the load average over one minute before and after the run (None where the
            platform has none).
        control: the hand-written floor on the first case timed as two cells: the larger of
            their medians over the smaller (1.0 on a quiet machine); None when not measured.
        spread: the median of every cell's spread.
        widest: the widest spread of any cell and the cell's name (``"floor on missing"``;
            the control's two cells are named ``"control"``), or None before any is timed.
        clock: what timed the batches: ``"wall clock"`` or ``"CPU time of this thread"``.
        notes: what was left out of the run and why (generated cases regdev accepts, a
            tool whose generated call it refuses).
    """

    cases: list[Case]
    rows: list[dict[str, Any]] = field(default_factory=list)
    rounds: int = 0
    loop_ns: float = 0.0
    seconds: float = 0.0
    environment: dict[str, str] = field(default_factory=dict)
    load: tuple[float | None, float | None] = (None, None)
    control: float | None = None
    spread: float = 0.0
    widest: tuple[float, str] | None = None
    clock: str = "wall clock"
    notes: list[str] = field(default_factory=list)

    @property
    def control_name(self) -> str:
        """What the control timed twice: the floor, or regdev's compiled check where there is
        no floor (a user's tools)."""
        if any(row["key"] == "floor" for row in self.rows) or not self.rows:
            return "the floor"
        return "regdev's compiled check"

    @property
    def noisy(self) -> bool:
        """True when the figures cannot be trusted: :func:`noise_reasons` gives a reason."""
        return bool(noise_reasons(self, self.control_name))

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready values (``regdev bench --json``)."""
        return {"unit": "ns per call", "statistic": "median", "rounds": self.rounds,
                "ratio": "peer time / regdev time (the first row of the same section)",
                "spread": "interquartile range of the rounds / median",
                "loop_ns_subtracted": round(self.loop_ns, 1), "seconds": round(self.seconds, 1),
                "environment": self.environment, "load": list(self.load),
                "control": None if self.control is None else round(self.control, 3),
                "typical_spread": round(self.spread, 3),
                "widest_spread": None if self.widest is None else round(self.widest[0], 3),
                "widest_cell": None if self.widest is None else self.widest[1],
                "noisy": self.noisy, "noise_reasons": noise_reasons(self, self.control_name),
                "clock": self.clock, "notes": self.notes,
                "cases": [{"title": c.title, "about": c.about, "code": c.code,
                           "raw_only": c.raw_only, "tool": c.tool} for c in self.cases],
                "rows": self.rows}


def _environment() -> dict[str, str]:
    return {"python": f"{platform.python_implementation()} {platform.python_version()}",
            "platform": platform.platform(), "machine": platform.machine(),
            "cpus": str(os.cpu_count())}


def _load() -> float | None:
    """The load average over the last minute, or None where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - Windows
        return None


def _spread(values: list[float]) -> float:
    """The interquartile range of ``values`` over their median (0 for fewer than 2)."""
    if len(values) < 2:
        return 0.0
    low, _, high = statistics.quantiles(values, n=4, method="inclusive")
    middle = statistics.median(values)
    return (high - low) / middle if middle > 0 else 0.0


def run_bench(*, rounds: int = 25, batch_seconds: float = 0.01,
              progress: TextIO | None = None,
              rows: list[Contender] | None = None,
              cases: tuple[Case, ...] = CASES,
              control: Contender | None = None,
              stopwatch: Stopwatch | None = None) -> BenchResult:
    """Check every contender's verdicts, then time it on every case it agrees on.

    Args:
        rounds: batches per cell; the cell's figure is their median.
        batch_seconds: the target length of one batch, in seconds (the number of calls per
            batch is calibrated per cell to reach it).
        progress: where to report progress (e.g. ``sys.stderr``), or None.
        rows: the contenders (default :func:`contenders`); the first of each section is the
            baseline the ratios divide by.
        cases: the inputs (default :data:`CASES`), in column order.
        control: what is timed twice, on the first case, as two cells interleaved with the
            others, to show how far apart noise alone puts the same code (default: the
            floor row of ``rows``, when there is one).
        stopwatch: how batches are timed (default :data:`STOPWATCH`, the wall clock;
            :data:`CPU_STOPWATCH` times the CPU this thread spent: steadier on a shared
            machine, blind to waiting).

    Returns:
        The :class:`BenchResult`.
    """
    began = time.perf_counter()
    watch = stopwatch or STOPWATCH

    def say(text: str) -> None:
        if progress is not None:
            progress.write(f"regdev bench: {text}\n")
            progress.flush()

    rows = contenders() if rows is None else rows
    if control is None:
        control = next((row for row in rows if row.key == "floor"), None)
    result = BenchResult(cases=list(cases), rounds=rounds, environment=_environment(),
                         clock=watch.name)
    result.load = (_load(), None)
    cells: list[tuple[Contender, int, int, int]] = []  # (row, its index, case, number)
    say(f"checking verdicts, then calibrating {sum(r.run is not None for r in rows)} "
        f"contenders x {len(cases)} cases")
    records: list[dict[str, Any]] = []
    for index, row in enumerate(rows):
        record: dict[str, Any] = {"key": row.key, "name": row.name, "raw": row.raw,
                                  "section": row.section, "on_refusal": row.on_refusal,
                                  "note": row.note, "version": row.version, "ns": {},
                                  "spread": {}, "ratio": {}, "agrees": {},
                                  "disagreements": [], "cannot": {}}
        records.append(record)
        if row.run is None or row.valid is None:
            continue
        for number_of_case, case in enumerate(cases):
            if case.raw_only and not row.raw:
                continue
            why = row.cannot.get(case.tool or "") if row.cannot else None
            if why is not None:
                record["cannot"][case.title] = why
                continue
            value = case.raw if row.raw else case.call
            theirs, expected = row.valid(value), case.code is None
            record["agrees"][case.title] = theirs == expected
            if theirs != expected:
                record["disagreements"].append(
                    f"disagrees on case {case.title!r}: regdev {_verdict(expected)}, "
                    f"{row.key} {_verdict(theirs)}")
                continue
            cells.append((row, index, number_of_case,
                          _calibrate(watch, row, value, batch_seconds)))
    if control is not None and control.run is not None and cases:
        value = cases[0].raw if control.raw else cases[0].call
        number = _calibrate(watch, control, value, batch_seconds)
        cells += [(control, -1, 0, number), (control, -2, 0, number)]
    samples: dict[tuple[int, int], list[float]] = {(i, c): [] for _, i, c, _ in cells}
    empty: list[float] = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for done in range(rounds):
            say(f"round {done + 1}/{rounds}")
            for row, index, case_index, number in cells:
                run = row.run
                assert run is not None
                case = cases[case_index]
                value = case.raw if row.raw else case.call
                samples[index, case_index].append(watch.batch(run, value, number) / number)
            empty.append(watch.empty(100_000) / 100_000)
    finally:
        if enabled:
            gc.enable()
    result.loop_ns = statistics.median(empty) if empty else 0.0
    spreads = []
    for (index, case_index), values in samples.items():
        spreads.append(_spread(values))
        title = cases[case_index].title
        name = "control" if index < 0 else f"{rows[index].key} on {title}"
        if result.widest is None or spreads[-1] > result.widest[0]:
            result.widest = (spreads[-1], name)
        if index < 0:
            continue
        records[index]["ns"][title] = max(statistics.median(values) - result.loop_ns, 0.0)
        records[index]["spread"][title] = spreads[-1]
    if (-1, 0) in samples:
        first, second = (statistics.median(samples[i, 0]) for i in (-1, -2))
        result.control = max(first, second) / min(first, second) if min(first, second) else None
    result.spread = statistics.median(spreads) if spreads else 0.0
    for section in SECTIONS:
        members = [r for r in records if r["section"] == section]
        if not members:
            continue
        base = members[0]
        for record in members:
            for title, ns in record["ns"].items():
                ours = base["ns"].get(title)
                record["ratio"][title] = ns / ours if ours else None
    result.rows = records
    result.load = (result.load[0], _load())
    result.seconds = time.perf_counter() - began
    return result


def _calibrate(watch: Stopwatch, row: Contender, value: Any, batch_seconds: float) -> int:
    """Calls of ``row`` on ``value`` per batch: enough to take ``batch_seconds``."""
    assert row.run is not None
    number = 1
    while watch.batch(row.run, value, number) < batch_seconds * 1e9 / 4 and number < 10**7:
        number *= 4
    return number


def format_ratio(ratio: float | None) -> str:
    """A ratio of peer time / regdev time in words: ``8.3x slower``, ``2.1x faster``.

    ``faster`` gives regdev time / peer time, so both read as "how many times"; a ratio of
    exactly 1 is ``1.00x`` (the baseline), and None (regdev's time rounded to 0) is ``-``.
    """
    if ratio is None:
        return "-"
    if ratio == 1.0:
        return "1.00x"
    times = ratio if ratio > 1 else 1 / ratio if ratio else float("inf")
    digits = 2 if times < 10 else 1 if times < 100 else 0
    return f"{times:.{digits}f}x {'slower' if ratio > 1 else 'faster'}"


def format_table(result: BenchResult) -> str:
    """The result as text: a header, the cases, then per section one block per contender
    (its figures, their spread, its ratios), then the agreement and the noise."""
    column, label = 14, 24
    env = result.environment
    lines = [
        f"regdev bench: ns per call ({result.clock}), median of {result.rounds} interleaved "
        f"batches per cell (an empty loop's {result.loop_ns:.1f} ns subtracted, garbage "
        "collector off); spread: the interquartile range of the batches, half each side of "
        "the median",
        f"{env['python']} on {env['platform']} ({env['machine']}, {env['cpus']} CPUs)",
        "ratios are peer time / regdev time (same section, case and run), in words: \"8.3x "
        "slower\" means the row took",
        "8.3 times regdev's time, \"2.0x faster\" that regdev took 2.0 times the row's. A "
        "\"disagrees\" cell was not timed.",
        "",
        "cases (columns):",
    ]
    lines += [f"  {case.title:<12} {case.about}" for case in result.cases]
    for section, heading in SECTIONS.items():
        members = [r for r in result.rows if r.get("section", "text" if r["raw"] else "object")
                   == section]
        if not members:
            continue
        raw = members[0]["raw"]
        titles = [c.title for c in result.cases if raw or not c.raw_only]
        lines += ["", f"{heading} (ratios against the first row)",
                  " " * label + "".join(f"{t:>{column}}" for t in titles)]
        for record in members:
            lines.append(f"  {record['name']}")
            if record["note"]:
                lines.append(f"    {record['note']}")
                continue
            lines.append(f"    on refusal: {ON_REFUSAL[record['on_refusal']]}")
            ns_cells, spread_cells, ratio_cells = [], [], []
            for title in titles:
                if title in record.get("cannot", {}):
                    ns_cells.append("cannot")
                    spread_cells.append("")
                    ratio_cells.append("cannot")
                elif not record["agrees"].get(title, True):
                    ns_cells.append("disagrees")
                    spread_cells.append("")
                    ratio_cells.append("disagrees")
                elif title in record["ns"]:
                    ns_cells.append(f"{record['ns'][title]:.0f}")
                    spread_cells.append(format_spread(record.get("spread", {}).get(title)))
                    ratio_cells.append(format_ratio(record["ratio"].get(title)))
                else:
                    ns_cells.append("-")
                    spread_cells.append("")
                    ratio_cells.append("-")
            lines.append(f"{'    ns per call':<{label}}"
                         + "".join(f"{c:>{column}}" for c in ns_cells))
            lines.append(f"{'    spread':<{label}}"
                         + "".join(f"{c:>{column}}" for c in spread_cells))
            if record is not members[0]:
                lines.append(f"{'    than regdev':<{label}}"
                             + "".join(f"{c:>{column}}" for c in ratio_cells))
    wrong = [f"  {r['name']}: {d}" for r in result.rows for d in r["disagreements"]]
    lines.append("")
    lines += cannot_lines(result)
    if wrong:
        lines.append("! not timed, because the contender does not do the same work there:")
        lines += wrong
    else:
        lines.append("every contender agreed with regdev's verdict on every case")
    lines.append(noise_line(result))
    lines.append(f"measured in {result.seconds:.1f} s")
    return "\n".join(lines)


def cannot_lines(result: BenchResult) -> list[str]:
    """One line per contender and tool it cannot judge, and why (its cases not timed)."""
    tool_of = {case.title: case.tool for case in result.cases}
    lines = []
    for record in result.rows:
        reasons = dict.fromkeys((tool_of.get(title), why)
                                for title, why in record.get("cannot", {}).items())
        lines += [f"- {record['key']} cannot judge {tool!r}: {why}; its cases are not timed"
                  for tool, why in reasons]
    return lines


def all_agree(result: BenchResult) -> bool:
    """True when every contender that ran agreed with regdev's verdict on every case."""
    return not any(r["disagreements"] for r in result.rows)


def format_case_table(result: BenchResult) -> str:
    """The result as text with one line per case and one column per contender (for many
    cases: a tool file's generated calls): a header, the contenders by number, per section
    the ns per call, then each contender's ratio to regdev's baseline over the cases (median,
    least and most), then what was not timed and the noise."""
    env = result.environment
    lines = [
        f"regdev bench: ns per call ({result.clock}), median of {result.rounds} interleaved "
        f"batches per cell (an empty loop's {result.loop_ns:.1f} ns subtracted, garbage "
        "collector off)",
        f"{env['python']} on {env['platform']} ({env['machine']}, {env['cpus']} CPUs)",
        "a cell says 'cannot' where the contender cannot express the tool's schema, "
        "'disagrees' where its verdict is not regdev's (neither is timed)",
    ]
    width = max([len(c.title) for c in result.cases] + [10]) + 2
    for section, heading in SECTIONS.items():
        members = [r for r in result.rows if r.get("section") == section and not r["note"]]
        if not members:
            continue
        raw = members[0]["raw"]
        lines += ["", f"{heading}:"]
        lines += [f"  [{n}] {r['name']} (on refusal: {ON_REFUSAL[r['on_refusal']]})"
                  for n, r in enumerate(members, 1)]
        lines.append(f"  {'case':<{width}}" + "".join(f"{f'[{n}]':>9}"
                                                     for n in range(1, len(members) + 1)))
        for case in result.cases:
            if case.raw_only and not raw:
                continue
            cells = []
            for record in members:
                if case.title in record.get("cannot", {}):
                    cells.append("cannot")
                elif not record["agrees"].get(case.title, True):
                    cells.append("disagrees")
                elif case.title in record["ns"]:
                    cells.append(f"{record['ns'][case.title]:.0f}")
                else:
                    cells.append("-")
            lines.append(f"  {case.title:<{width}}" + "".join(f"{c:>9}" for c in cells))
        for n, record in enumerate(members[1:], 2):
            ratios = [r for r in record["ratio"].values() if r is not None]
            if ratios:
                lines.append(f"  [{n}] {record['key']} against [1]: median "
                             f"{format_ratio(statistics.median(ratios))}, from "
                             f"{format_ratio(min(ratios))} to {format_ratio(max(ratios))} "
                             f"over {len(ratios)} cases")
    lines.append("")
    missing = [f"  {r['name']}: {r['note']}" for r in result.rows if r["note"]]
    if missing:
        lines.append("not run:")
        lines += missing
    lines += [f"- {note}" for note in result.notes]
    lines += cannot_lines(result)
    wrong = [f"  {r['key']}: {d}" for r in result.rows for d in r["disagreements"]]
    if wrong:
        lines.append("! not timed, because the contender does not do the same work there:")
        lines += wrong
    else:
        lines.append("every contender that ran agreed with regdev's verdict on every case it "
                     "can express")
    lines.append(noise_line(result, result.control_name))
    lines.append(f"measured in {result.seconds:.1f} s")
    return "\n".join(lines)
