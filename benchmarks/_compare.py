"""Shared by the hot path's benchmark scripts: regdev against its anchor, in one run.

Each script names its rows (the inputs), the regdev side and the anchor, both written out in
the script, and the goal of each row's ratio. :func:`compare` checks that both sides give the
same verdict on every input (a row where they differ is not timed), times them in
interleaved batches (``regdev.bench._bench.run_bench``, the machinery of ``regdev bench``),
and prints per row: regdev's figure, the anchor's, their spread, the ratio regdev / anchor
measured in this run, and the goal; then the load average, and, by ``regdev bench``'s own
judgement (``regdev.bench._bench.noise_reasons``), whether the figures mean anything. Not a
test: nothing asserts a time.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from _script import BATCH_MS, MAX_ROUNDS, Parser, count, helper, span
from regdev.bench._bench import (
    CPU_STOPWATCH,
    NOISE_MIN_ROUNDS,
    STOPWATCH,
    BenchResult,
    Case,
    Contender,
    all_agree,
    format_spread,
    noise_line,
    noise_reasons,
    run_bench,
)


@dataclass(frozen=True)
class Goal:
    """A row's goal: the ratio regdev / anchor at most ``at_most`` (a time) or at least
    ``at_least`` (a rate)."""

    at_most: float | None = None
    at_least: float | None = None

    def met(self, ratio: float) -> bool:
        if self.at_most is not None:
            return ratio <= self.at_most
        assert self.at_least is not None
        return ratio >= self.at_least

    def __str__(self) -> str:
        return (f"<= {self.at_most:.2f}x" if self.at_most is not None
                else f">= {self.at_least:.2f}")


def options(description: str, *, rounds: int = 25, batch_ms: float = 5.0,
            cpu: bool = True,
            choices: dict[str, tuple[tuple[str, ...], str]] | None = None,
            dsn: bool = False) -> argparse.Namespace:
    """The scripts' common options: --rounds, --batch-ms, --wall (or --cpu), --json; and a
    script's own ``choices``: ``{"--option": ((value, ...), help)}``, the first value the
    default."""
    parser = Parser(description=description)
    for flag, (values, text) in (choices or {}).items():
        parser.add_argument(flag, choices=values, default=values[0],
                            help=f"{text} (default {values[0]})")
    parser.add_argument("--rounds", type=count(1, MAX_ROUNDS), default=rounds, metavar="N",
                        help=f"interleaved batches per cell, the median shown: 1..{MAX_ROUNDS} "
                             f"(default {rounds}; fewer than {NOISE_MIN_ROUNDS} and the last "
                             "line says the figures mean nothing)")
    parser.add_argument("--batch-ms", type=span(*BATCH_MS), default=batch_ms, metavar="MS",
                        help=f"the length of one batch, in ms: {BATCH_MS[0]:g}..{BATCH_MS[1]:g} "
                             f"(default {batch_ms:g})")
    if cpu:
        parser.add_argument("--wall", action="store_true",
                            help="time with the wall clock (default: the CPU time of this "
                                 "thread, steadier on a shared machine)")
    else:
        parser.add_argument("--cpu", action="store_true",
                            help="time with the CPU time of this thread (default: the wall "
                                 "clock): this side's own work, without the peer's or the wait")
    if dsn:
        parser.add_argument("--dsn", metavar="URL",
                            help="a PostgreSQL server's postgresql:// URL (default: start one "
                                 "on 127.0.0.1 for this run, as the tests do)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    args.stopwatch = (CPU_STOPWATCH if args.cpu else STOPWATCH) if not cpu else (
        STOPWATCH if args.wall else CPU_STOPWATCH)
    return args


def compare(title: str, regdev: Contender, anchor: Contender, cases: tuple[Case, ...], *,
            goals: dict[str, Goal], args: argparse.Namespace, unit: str = "ns",
            scale: float = 1.0,
            figure: Callable[[float], float] | None = None) -> BenchResult:
    """Time ``regdev`` against ``anchor`` on ``cases`` and print the rows (see the module
    docstring). ``scale`` divides the ns figures for display in ``unit``; ``figure`` turns
    the ratio of times anchor / regdev into the ratio shown (default: regdev / anchor).
    Exits with status 1 when a side disagrees with the other's verdict."""
    result = run_bench(rows=[regdev, anchor], cases=cases, control=anchor,
                       rounds=args.rounds, batch_seconds=args.batch_ms / 1000,
                       stopwatch=args.stopwatch)
    ours, theirs = result.rows
    rows = []
    for case in cases:
        if case.title not in ours["ns"] or case.title not in theirs["ns"]:
            rows.append({"case": case.title, "timed": False})
            continue
        times = theirs["ns"][case.title] / ours["ns"][case.title] if ours["ns"][case.title] \
            else float("inf")
        ratio = figure(times) if figure else (1 / times if times else float("inf"))
        goal = goals.get(case.title)
        rows.append({"case": case.title, "regdev": ours["ns"][case.title] / scale,
                     "regdev_spread": ours["spread"][case.title],
                     "anchor": theirs["ns"][case.title] / scale,
                     "anchor_spread": theirs["spread"][case.title], "ratio": ratio,
                     "goal": str(goal) if goal else None,
                     "met": goal.met(ratio) if goal else None})
    clock = args.stopwatch.name
    if args.json:
        print(json.dumps({"title": title, "unit": unit, "clock": clock, "rounds": args.rounds,
                          "regdev": regdev.name, "anchor": anchor.name, "rows": rows,
                          "load": list(result.load), "control": result.control,
                          "typical_spread": result.spread, "noisy": result.noisy,
                          "noise_reasons": noise_reasons(result, "the anchor"),
                          "disagreements": ours["disagreements"] + theirs["disagreements"]}))
    else:
        print(f"{title}: {unit} per call, {clock}, median of {args.rounds} interleaved batches"
              f" of {args.batch_ms:g} ms (spread: the interquartile range, half each side)")
        print(f"  regdev: {regdev.name}")
        print(f"  anchor: {anchor.name}")
        print(f"  {'case':<14}{'regdev':>16}{'anchor':>16}{'ratio':>10}   goal")
        for row in rows:
            if "timed" in row:
                print(f"  {row['case']:<14}  not timed: the two disagree")
                continue
            verdict = "" if row["goal"] is None else (
                f"{row['goal']}: {'met' if row['met'] else 'MISSED'}")
            print(f"  {row['case']:<14}"
                  f"{row['regdev']:>10.0f} {format_spread(row['regdev_spread']):>5}"
                  f"{row['anchor']:>10.0f} {format_spread(row['anchor_spread']):>5}"
                  f"{row['ratio']:>9.2f}x   {verdict}")
        for line in ours["disagreements"] + theirs["disagreements"]:
            print(f"  ! {line}")
        print(noise_line(result, "the anchor"))
    if not all_agree(result):
        sys.exit(1)
    return result


def case(title: str, value: Any, valid: bool, about: str = "") -> Case:
    """One row's input: raw text (or any value the two sides take) and whether it is valid."""
    return Case(title, about or title, {}, None if valid else "refused", value, raw_only=True)


if __name__ == "__main__":
    sys.exit(helper(__file__, __doc__))
