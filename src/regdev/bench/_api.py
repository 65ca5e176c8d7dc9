"""The benchmark as a library: :func:`measure` (``regdev.bench(...)``) and :func:`compare`.

Rules of this file:

* :func:`measure` is ``regdev bench`` without the command line: the same contenders, cases,
  agreement check and timing (:func:`~regdev.bench._bench.run_bench`), returning the
  :class:`~regdev.bench._bench.BenchResult` (figures per contender and case, the noise
  judgement; ``to_dict()`` is what ``regdev bench --json`` prints).
* :func:`compare` is the regression check between two runs (two versions of a tool schema,
  or of regdev): it takes results or their ``to_dict()``/``--json`` form, so a CI job can keep
  the JSON of the last good run. It compares only what both runs measured, and says when
  either run's figures mean nothing (then it calls nothing slower).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..devices._device import Device
from ..gate._compile import compile_validator
from ..gate._gate import Gate
from ..gate._tool import ToolSet
from . import _bench
from ._bench import (
    CASES,
    CPU_STOPWATCH,
    BenchResult,
    Case,
    Stopwatch,
    tools_gate,
)
from ._cases import case_of, generate_cases

__all__ = ["Comparison", "Slower", "compare", "measure"]

#: ``--quick``: rounds and batch length (seconds).
QUICK = (3, 0.002)


def _tool_set(tools: ToolSet | str | Path | Iterable[Mapping[str, Any]]) -> ToolSet:
    if isinstance(tools, ToolSet):
        return tools
    if isinstance(tools, (str, Path)):
        return ToolSet.from_json(Path(tools).read_bytes())
    return ToolSet.from_definitions(tools)


def measure(tools: ToolSet | str | Path | Iterable[Mapping[str, Any]] | None = None, *,
            cases: Sequence[Case | tuple[str, str | None]] | None = None,
            device: Device | None = None,
            rounds: int = 25, batch_seconds: float = 0.01, quick: bool = False,
            cpu_time: bool = False, progress: TextIO | None = None,
            stopwatch: Stopwatch | None = None) -> BenchResult:
    """Time regdev's compiled check, its gate and the peers on ``tools``; ``regdev.bench(...)``.

    Args:
        tools: the tool set: a :class:`~regdev.ToolSet`, the path of a tool file (what
            ``regdev compile --tools`` reads), or MCP tool definitions; None: the register
            tools and the block write with the built-in cases (what ``regdev bench`` times).
        cases: the calls: :class:`Case` objects, or ``(raw JSON text, expected verdict)``
            pairs, the verdict None for a valid call or a verdict code (``range-rpm``);
            None: generated from the schemas (a valid call per tool, then one mutation per
            keyword). Every contender's verdict is checked against regdev's before timing;
            regdev's against the expected one, here, first.
        device: the device behind the gate row (default: an in-process register file; the
            tools of a register map take that map's device).
        rounds: batches per cell, 1..1000; the cell's figure is their median.
        batch_seconds: the target length of one batch, in seconds.
        quick: 3 rounds of 2 ms batches (overrides ``rounds`` and ``batch_seconds``): a check
            that everything runs and agrees; its figures mean nothing.
        cpu_time: time with this thread's CPU clock instead of the wall clock.
        progress: where to report progress (``sys.stderr``), or None.
        stopwatch: how batches are timed (tests give one that times nothing).

    Returns:
        The :class:`BenchResult`; ``result.notes`` says which generated cases were left out.

    Raises:
        SchemaError: a tool's schema is outside the supported subset (with its pointer).
        ValueError: a case's text is not JSON, or regdev's verdict on a case is not the
            expected one (the message names the case and both verdicts).
        OSError: the tool file cannot be read.
    """
    if quick:
        rounds, batch_seconds = QUICK
    watch = stopwatch or (CPU_STOPWATCH if cpu_time else None)
    if tools is None and cases is None and device is None:
        return _bench.run_bench(rounds=rounds, batch_seconds=batch_seconds,
                                progress=progress, stopwatch=watch)
    tool_set = _tool_set(tools) if tools is not None else None
    gate = None if tool_set is None else tools_gate(tool_set, device)
    rows = _bench.contenders(tool_set, gate=gate)
    check = compile_validator(tool_set) if tool_set is not None else rows[0].run
    assert check is not None
    notes: list[str] = []
    if cases is None:
        if tool_set is None:
            chosen: tuple[Case, ...] = CASES
        else:
            assert gate is not None
            made = generate_cases(tool_set, check, functools.partial(_runs, gate))
            chosen, notes = tuple(made.cases), made.skipped
    else:
        chosen = tuple(_given(cases, check))
    if not chosen:
        raise ValueError("no cases to time: " + ("; ".join(notes) or "none were given"))
    # through the module, so that run_bench and contenders are looked up when called
    result = _bench.run_bench(rounds=rounds, batch_seconds=batch_seconds, progress=progress,
                              rows=rows, cases=chosen, control=rows[0], stopwatch=watch)
    result.notes = notes
    return result


def _runs(gate: Gate, raw: str) -> str | None:
    """The gate's verdict on ``raw``: None when the call ran, else its code."""
    observation = gate.handle(raw)
    return None if observation.ok else observation.code


def _given(cases: Sequence[Case | tuple[str, str | None]], check: Any) -> Iterable[Case]:
    """The given cases, each checked: regdev's verdict must be the expected one."""
    titles: set[str] = set()
    for number, given in enumerate(cases, 1):
        if isinstance(given, Case):
            case = given
        else:
            raw, expected = given
            try:
                case = case_of(f"case {number}", raw, raw, expected)
            except ValueError:
                raise ValueError(f"case {number} is not JSON text: {raw[:60]!r}") from None
        if case.title in titles:
            raise ValueError(f"two cases are titled {case.title!r}")
        titles.add(case.title)
        ours = check(case.call)
        if ours != case.code:
            raise ValueError(f"{case.title}: regdev's verdict is {ours or 'valid'}, the case "
                             f"expects {case.code or 'valid'}")
        yield case


# --- the regression check -----------------------------------------------------------------------


@dataclass(frozen=True)
class Slower:
    """One cell slower in the second run: ``row`` on ``case``, ns per call before and after."""

    row: str
    case: str
    before: float
    after: float

    @property
    def ratio(self) -> float:
        """after / before (1.25: a quarter slower)."""
        return self.after / self.before if self.before else float("inf")


@dataclass
class Comparison:
    """What :func:`compare` found.

    Attributes:
        slower: cells over the tolerance, slowest first.
        faster: cells under ``1 / (1 + tolerance)``, fastest first.
        verdicts: one sentence per case whose verdict changed, or contender that agreed
            with regdev on a case before and does not now.
        missing: cells of the first run that the second did not measure.
        noisy: the reasons either run's figures mean nothing (then nothing is called slower).
        tolerance: the share by which a cell may be slower (0.10: 10 %).
    """

    slower: list[Slower] = field(default_factory=list)
    faster: list[Slower] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    noisy: list[str] = field(default_factory=list)
    tolerance: float = 0.10

    @property
    def ok(self) -> bool:
        """True when no verdict changed and no cell is slower by more than the tolerance."""
        return not self.slower and not self.verdicts

    def format(self) -> str:
        """The comparison as lines of text."""
        lines = [f"{len(self.slower)} cells slower by more than {self.tolerance:.0%}, "
                 f"{len(self.faster)} faster, {len(self.verdicts)} verdicts changed"]
        lines += [f"  slower: {s.row} on {s.case}: {s.before:.0f} -> {s.after:.0f} ns "
                  f"({s.ratio:.2f}x)" for s in self.slower]
        lines += [f"  faster: {s.row} on {s.case}: {s.before:.0f} -> {s.after:.0f} ns "
                  f"({s.ratio:.2f}x)" for s in self.faster]
        lines += [f"  verdict: {v}" for v in self.verdicts]
        lines += [f"  not measured again: {m}" for m in self.missing]
        lines += [f"  ! figures mean nothing: {n}" for n in self.noisy]
        return "\n".join(lines)


def _as_dict(run: BenchResult | Mapping[str, Any]) -> Mapping[str, Any]:
    return run.to_dict() if isinstance(run, BenchResult) else run


def compare(before: BenchResult | Mapping[str, Any], after: BenchResult | Mapping[str, Any],
            *, tolerance: float = 0.10, rows: Iterable[str] | None = None) -> Comparison:
    """The regression check: ``after`` against ``before``, cell by cell.

    A cell is slower when its median grew by more than ``tolerance`` and by more than the
    two runs' spreads of that cell together (so a wide cell is not called slower on noise
    alone). When either run says its figures mean nothing, nothing is called slower.

    Args:
        before: the first run: a :class:`BenchResult`, its ``to_dict()``, or the object
            ``regdev bench --json`` printed.
        after: the second run, in any of those forms.
        tolerance: the share by which a cell may be slower, above 0 (0.10: 10 %).
        rows: the contenders to compare, by key (default: regdev's rows, those whose key
            starts with ``regdev``).

    Returns:
        The :class:`Comparison`; ``comparison.ok`` is the verdict for a CI job.

    Raises:
        ValueError: ``tolerance`` is not above 0, or a run is not a bench result.
    """
    if not tolerance > 0:
        raise ValueError(f"tolerance must be above 0, got {tolerance}")
    first, second = _as_dict(before), _as_dict(after)
    for run in (first, second):
        if not isinstance(run.get("rows"), list) or not isinstance(run.get("cases"), list):
            raise ValueError("not a regdev bench result: no rows and cases")
    found = Comparison(tolerance=tolerance)
    for name, run in (("first", first), ("second", second)):
        found.noisy += [f"{name} run: {reason}" for reason in run.get("noise_reasons", [])]
    codes = {c["title"]: c.get("code") for c in second["cases"]}
    for case in first["cases"]:
        title = case["title"]
        if title in codes and codes[title] != case.get("code"):
            found.verdicts.append(f"{title}: {case.get('code') or 'valid'} -> "
                                  f"{codes[title] or 'valid'}")
    wanted = set(rows) if rows is not None else None
    later = {r["key"]: r for r in second["rows"]}
    for row in first["rows"]:
        key = row["key"]
        if (wanted is not None and key not in wanted) or (
                wanted is None and not key.startswith("regdev")):
            continue
        other = later.get(key)
        for title, ns in row.get("ns", {}).items():
            now = None if other is None else other.get("ns", {}).get(title)
            if now is None:
                found.missing.append(f"{key} on {title}")
                continue
            if row.get("agrees", {}).get(title) and other is not None and not other.get(
                    "agrees", {}).get(title, True):
                found.verdicts.append(f"{key} on {title}: agreed with regdev, now does not")
            spread = (row.get("spread", {}).get(title, 0.0)
                      + other.get("spread", {}).get(title, 0.0)) if other else 0.0
            cell = Slower(key, title, ns, now)
            if cell.ratio > 1 + max(tolerance, spread) and not found.noisy:
                found.slower.append(cell)
            elif cell.ratio < 1 / (1 + max(tolerance, spread)):
                found.faster.append(cell)
    found.slower.sort(key=lambda s: -s.ratio)
    found.faster.sort(key=lambda s: s.ratio)
    return found


def median_ratio(result: BenchResult, peer: str, base: str = "regdev-compiled") -> float | None:
    """The median over cases of ``peer``'s ns / ``base``'s ns in one run (None when they
    share no timed case): above 1, the peer is slower than ``base``."""
    rows = {r["key"]: r for r in result.rows}
    if peer not in rows or base not in rows:
        return None
    ratios = [ns / rows[base]["ns"][t] for t, ns in rows[peer]["ns"].items()
              if rows[base]["ns"].get(t)]
    return statistics.median(ratios) if ratios else None

