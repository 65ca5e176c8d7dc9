"""Replay: recorded model outputs (JSONL) run in order through one gate, with expectations.

A replay file holds one JSON object per line::

    {"raw": "<the model's raw output>", "dialect": "mcp", "expect": "range-addr",
     "result": {"addr": 3, "data": 200}, "why": "a note for people"}

Only ``raw`` is required. ``dialect`` overrides the default for that line; ``expect`` is
``"ok"`` or a verdict code; ``result`` is the expected result object of an accepted call.
The file is UTF-8 (a byte order mark is allowed); lines end at LF (a CR before it is
dropped), never at the other Unicode line separators, which are legal inside JSON strings.
Blank lines are skipped. Each line is decoded as strictly as a call
(:func:`regdev.gate._parse.load_json`: a repeated key, NaN or trailing data is an error), so the
expectations a file states are the ones checked.

Lines are read one at a time, each at most :func:`max_line_bytes` long, so memory stays bounded
whatever the input: a longer line is not read (only counted, as it goes past) and is that
line's ``too-large`` verdict (:class:`LineTooLong`), never one huge read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec

from ..core._errors import RegdevError
from ..core._json import load_json
from ..core._observation import FIXED_CODES, NAMED_CODES, Observation, refuse
from ..core._text import escape_text
from ..gate._gate import Gate
from ..gate._parse import DEFAULT_MAX_INPUT_BYTES, DIALECTS
from ..gate._policy import Session
from ..gate._schema import a_json_type
from ..gate._tools import REGISTER_TOOLS, ToolSet

__all__ = ["LineTooLong", "ReplayFileError", "ReplayOutcome", "ReplayRecord", "iter_replay",
           "load_replay", "max_line_bytes", "read_replay", "run_replay",
           "verdict_codes"]


class ReplayRecord(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One line of a replay file (see the module docstring)."""

    raw: str
    dialect: str | None = None
    expect: str | None = None
    result: dict[str, Any] | None = None
    why: str | None = None


class ReplayFileError(RegdevError, ValueError):
    """A replay file cannot be read or a line is not a replay record; names the line."""


@dataclass(frozen=True, slots=True)
class LineTooLong:
    """A replay line over the cap: not read, so neither run nor checked; its verdict is
    ``too-large``.

    Attributes:
        size: the line's length in bytes, without its LF (counted as it was skipped).
        cap: the cap it is over, in bytes.
    """

    size: int
    cap: int

    def observation(self) -> Observation:
        """The line's verdict: ``parse/too-large``, naming its size and the cap."""
        return Observation.refused(refuse(
            "too-large", f"the replay line is {self.size} bytes, over the cap of "
                                  f"{self.cap} bytes; it was not read, so nothing ran"))


#: One line of a replay: its number (from 1) and its record, or what stood for a line too long.
ReplayItem = tuple[int, "ReplayRecord | LineTooLong"]


def max_line_bytes(max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> int:
    """The longest replay line read, in bytes, for a gate whose raw calls are capped at
    ``max_input_bytes``: room for such a call written with JSON's longest escape for each of
    its bytes (6 bytes, ``\\u00XX``), and 64 KiB for the other fields."""
    return 6 * max_input_bytes + 65536


@dataclass(frozen=True, slots=True)
class ReplayOutcome:
    """What one replayed line gave.

    Attributes:
        line: the 1-based line number in the replay file.
        record: the line as read (:class:`LineTooLong` for a line over the cap).
        observation: the gate's observation.
        expect_met: True or False when the line states an expectation, else None.
    """

    line: int
    record: ReplayRecord | LineTooLong
    observation: Observation
    expect_met: bool | None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object ``regdev replay --json`` prints for this line."""
        obs = self.observation
        return {
            "line": self.line,
            "ok": obs.ok,
            "tool": obs.tool,
            "stage": obs.stage,
            "code": obs.code,
            "message": obs.message,
            "result": obs.result,
            "expect": self.record.expect if isinstance(self.record, ReplayRecord) else None,
            "expect_met": self.expect_met,
            "replay": obs.replay,
        }


def verdict_codes(tools: ToolSet) -> frozenset[str]:
    """Every verdict code a call to ``tools`` can be refused with: :data:`FIXED_CODES`, and
    ``missing-``, ``type-`` and ``range-`` each argument's path (``limits.low``; an array's
    elements ``data[]``, ``pair[0]``, ``points[].x``), ``denied-`` each tool."""
    codes = set(FIXED_CODES)
    for tool in tools.values():
        codes.add(f"denied-{tool.name}")
        places: list[tuple[str, Any]] = [("", tool.input_schema)]
        while places:
            label, schema = places.pop()
            if label:
                codes.update(f"{kind}-{label}" for kind in NAMED_CODES[:3])
            if not isinstance(schema, dict):
                continue
            for name, sub in (schema.get("properties") or {}).items():
                places.append((f"{label}.{name}" if label else name, sub))
            for index, sub in enumerate(schema.get("prefixItems") or ()):
                places.append((f"{label}[{index}]", sub))
            if "items" in schema:
                places.append((f"{label}[]", schema["items"]))
    return frozenset(codes)


def load_replay(path: str | Path, tools: ToolSet = REGISTER_TOOLS, *,
                max_line: int | None = None) -> list[ReplayItem]:
    """Read a replay file, every line of it, before anything runs.

    Args:
        path: a JSONL file (UTF-8), one :class:`ReplayRecord` per line.
        tools: the tools the calls will be offered; an ``expect`` must be ``"ok"`` or one of
            their :func:`verdict_codes`.
        max_line: the longest line read, in bytes (default :func:`max_line_bytes`); a longer
            one is a :class:`LineTooLong`.

    Returns:
        ``(line number, record)`` pairs in file order, line numbers 1-based; at least one.

    Raises:
        ReplayFileError: the file cannot be read, holds no calls, or a line is not a valid
            record or expects a verdict code that no call can get (a typo would otherwise be
            a silent NOT MET); the message names the line and the problem.
    """
    try:
        with Path(path).open("rb") as stream:
            return list(read_replay(stream, str(path), tools, max_line=max_line))
    except OSError as error:
        raise ReplayFileError(f"cannot read {path}: {error.strerror or error}") from None


def read_replay(stream: IO[bytes], path: str, tools: ToolSet = REGISTER_TOOLS, *,
                max_line: int | None = None) -> Iterator[ReplayItem]:
    """The records of the replay text on ``stream``, one line at a time, as they come (so a
    replay of standard input runs each line as soon as it is read).

    Memory is bounded by ``max_line`` (bytes; default :func:`max_line_bytes`): a longer line
    is skipped in pieces, never held, and comes out as a :class:`LineTooLong`.

    Raises:
        ReplayFileError: when the line that is not a valid record is reached (the lines
            before it have been yielded), or at the end when there was no call.
        OSError: the stream cannot be read.
    """
    return _records(_lines(stream, max_line_bytes() if max_line is None else max_line),
                    path, tools)


def _lines(stream: IO[bytes], cap: int) -> Iterator[tuple[int, bytes | LineTooLong]]:
    """Numbered lines of ``stream`` without their LF, each at most ``cap`` bytes; a longer one
    is counted while it is skipped."""
    number = 0
    while True:
        chunk = stream.readline(cap + 1)
        if not chunk:
            return
        number += 1
        if chunk.endswith(b"\n"):
            yield number, chunk[:-1]
        elif len(chunk) <= cap:  # the last line, with no LF
            yield number, chunk
        else:
            size = len(chunk)
            while True:
                chunk = stream.readline(65536)
                if not chunk or chunk.endswith(b"\n"):
                    size += len(chunk.removesuffix(b"\n"))
                    break
                size += len(chunk)
            yield number, LineTooLong(size, cap)


def _records(lines: Iterable[tuple[int, bytes | LineTooLong]], path: str, tools: ToolSet
             ) -> Iterator[ReplayItem]:
    codes = verdict_codes(tools)
    empty = True
    for number, text in lines:
        if isinstance(text, LineTooLong):
            empty = False
            yield number, text
            continue
        line = text.removesuffix(b"\r")
        if not line.strip():
            continue
        empty = False
        yield number, _record(line, number, path, codes)
    if empty:
        raise ReplayFileError(f"{path} holds no calls (one JSON object per line, each with "
                              "at least \"raw\")")


def _record(line: bytes, number: int, path: str, codes: frozenset[str]) -> ReplayRecord:
    """One line's record, or the ReplayFileError naming the line."""
    try:
        doc = load_json(line)
    except ValueError as error:
        raise ReplayFileError(f"{path}:{number}: not a replay record: {error}") from None
    problem = _shape_problem(doc)
    if problem is not None:
        raise ReplayFileError(f"{path}:{number}: {problem}")
    record = msgspec.convert(doc, ReplayRecord)
    if record.dialect is not None and record.dialect not in DIALECTS:
        raise ReplayFileError(
            f"{path}:{number}: unknown dialect {record.dialect!r}; "
            f"expected one of {', '.join(DIALECTS)}"
        )
    if record.expect is not None and record.expect != "ok" and record.expect not in codes:
        raise ReplayFileError(
            f"{path}:{number}: expect {record.expect!r} is not \"ok\" nor a verdict code "
            "a call can get (see docs/errors.md)")
    return record


#: Each field of a record: the JSON type it takes (null is allowed except for ``raw``), and
#: how a message names what it holds.
_FIELDS: dict[str, tuple[type, str]] = {
    "raw": (str, "a string (the model's raw output)"),
    "dialect": (str, f"a string ({', '.join(DIALECTS)})"),
    "expect": (str, 'a string ("ok" or a verdict code)'),
    "result": (dict, "an object (the expected result)"),
    "why": (str, "a string"),
}


def _shape_problem(doc: object) -> str | None:
    """What keeps a decoded line from being a :class:`ReplayRecord`, worded for a person (the
    fields by name, not msgspec's ``$.`` paths), or None."""
    if type(doc) is not dict:
        return f"a replay record is a JSON object, got {a_json_type(doc)}"
    for key in doc:
        if key not in _FIELDS:
            return (f"unknown field `{escape_text(key)}`; a replay record has "
                    f"{', '.join(_FIELDS)}")
    if "raw" not in doc:
        return "`raw` is required: the model's raw output, a string"
    for key, value in doc.items():
        kind, wanted = _FIELDS[key]
        if type(value) is not kind and (value is not None or key == "raw"):
            return f"`{key}` must be {wanted}, got {a_json_type(value)}"
    return None


def _expect_met(record: ReplayRecord, observation: Observation) -> bool | None:
    if record.expect is None and record.result is None:
        return None
    met = True
    if record.expect is not None:
        met = observation.ok if record.expect == "ok" else observation.code == record.expect
    if record.result is not None:
        met = met and observation.ok and observation.result == record.result
    return met


def run_replay(
    records: Iterable[ReplayItem],
    gate: Gate,
    *,
    dialect: str = "canonical",
    tool_choice: str | None = None,
    session: Session | None = None,
    proposer: str | None = None,
) -> list[ReplayOutcome]:
    """Run records in order through ``gate`` (one device, so writes are seen by later reads).

    Args:
        records: ``(line number, record)`` pairs, as :func:`load_replay` returns.
        gate: the gate to run them through.
        dialect: the dialect of lines that do not name one.
        tool_choice: force this tool on every line.
        session: the session the calls are made in; the gate's default when None.
        proposer: recorded as each call's proposer in the audit log (``regdev replay`` gives
            ``replay:FILE``).

    Returns:
        One :class:`ReplayOutcome` per record, in order.
    """
    return list(iter_replay(records, gate, dialect=dialect, tool_choice=tool_choice,
                            session=session, proposer=proposer))


def iter_replay(
    records: Iterable[ReplayItem],
    gate: Gate,
    *,
    dialect: str = "canonical",
    tool_choice: str | None = None,
    session: Session | None = None,
    proposer: str | None = None,
) -> Iterator[ReplayOutcome]:
    """:func:`run_replay` one line at a time: each outcome is yielded as soon as its call
    has run (a :class:`LineTooLong` gives its ``too-large`` outcome without running
    anything), so a caller can show it at once and keep the outcomes so far when stopped."""
    for line, record in records:
        if isinstance(record, LineTooLong):
            yield ReplayOutcome(line, record, record.observation(), None)
            continue
        observation = gate.handle(record.raw, dialect=record.dialect or dialect,
                                  tool_choice=tool_choice, session=session, proposer=proposer)
        yield ReplayOutcome(line, record, observation, _expect_met(record, observation))
