"""When a benchmark's figures mean nothing: one judgement for ``regdev bench``
(:mod:`regdev.bench._bench`) and the scripts in ``benchmarks/``, with its limits; and the most
rounds a run may ask for.

Kept apart from :mod:`regdev.bench._bench` so that ``regdev bench --help`` can state the limits
without importing the peers. A spread is a cell's interquartile range over its median, shown
as half of it each side of the median (0.20 is "±10%").
"""

from __future__ import annotations

from typing import Protocol

__all__ = [
    "MAX_ROUNDS",
    "NOISE_CELL_SPREAD",
    "NOISE_MIN_ROUNDS",
    "NOISE_RATIO",
    "NOISE_SPREAD",
    "Measured",
    "format_spread",
    "noise_line",
    "noise_reasons",
]

#: The control's two timings of the same code further apart than this (larger / smaller).
NOISE_RATIO = 1.10
#: The cells' typical spread (the median of every cell's) over this: ±10%.
NOISE_SPREAD = 0.20
#: Any one cell's spread over this: ±50% (the middle half of its batches spans half its
#: median or more, so its median, and every ratio made with it, can be off by as much).
NOISE_CELL_SPREAD = 1.0
#: Fewer rounds than this per cell: too few batches to tell a figure from a slow spell, or to
#: measure the spread at all (``regdev bench --quick`` runs 3).
NOISE_MIN_ROUNDS = 10
#: The most rounds a run may ask for (``regdev bench --rounds``, the scripts' ``--rounds``):
#: 1000 rounds of regdev bench's 10 ms batches take about 15 minutes of its 100-odd cells.
MAX_ROUNDS = 1000


class Measured(Protocol):
    """What the judgement reads of a run (``regdev bench``'s :class:`BenchResult`, or a
    script's own): declared here so that this module imports no harness (and the harness,
    which imports this one, makes no cycle)."""

    @property
    def rounds(self) -> int: ...
    @property
    def spread(self) -> float: ...
    @property
    def widest(self) -> tuple[float, str] | None: ...
    @property
    def control(self) -> float | None: ...
    @property
    def load(self) -> tuple[float | None, float | None]: ...
    @property
    def environment(self) -> dict[str, str]: ...


def format_spread(spread: float | None) -> str:
    """A cell's spread (interquartile range over median) as ``±6%`` (half the range each
    side)."""
    return "-" if spread is None else f"\u00b1{spread * 50:.0f}%"


def _cpus(result: Measured) -> int | None:
    """The CPU count the run recorded (None where the platform did not say)."""
    cpus = result.environment.get("cpus", "")
    return int(cpus) if cpus.isdigit() and int(cpus) > 0 else None


def noise_reasons(result: Measured, control: str = "the floor") -> list[str]:
    """Why ``result``'s figures cannot be trusted, one phrase each; [] when they can.

    The limits (each a module constant): at least :data:`NOISE_MIN_ROUNDS` rounds; the cells'
    typical spread at most :data:`NOISE_SPREAD` and every cell's at most
    :data:`NOISE_CELL_SPREAD`; the control's two timings at most :data:`NOISE_RATIO` apart;
    the load average over one minute, before and after the run, at most the CPU count (above
    it, other work waited for a CPU, and so did the batches, or their caches were cold).

    Args:
        result: a run's result; only its rounds, spreads, control, load and CPU count count.
        control: what the control timed twice, for the phrase (``"the anchor"`` in the
            scripts of ``benchmarks/``).
    """
    reasons = []
    if result.rounds < NOISE_MIN_ROUNDS:
        reasons.append(f"only {result.rounds} round{'s' * (result.rounds != 1)} "
                       f"(at least {NOISE_MIN_ROUNDS} needed)")
    if result.spread > NOISE_SPREAD:
        reasons.append(f"the cells spread {format_spread(result.spread)} typically (limit "
                       f"{format_spread(NOISE_SPREAD)})")
    if result.widest is not None and result.widest[0] > NOISE_CELL_SPREAD:
        reasons.append(f"{result.widest[1]} spread {format_spread(result.widest[0])} (limit "
                       f"{format_spread(NOISE_CELL_SPREAD)} for any cell)")
    if result.control is not None and result.control > NOISE_RATIO:
        reasons.append(f"{control} timed twice came out {result.control:.2f}x apart (limit "
                       f"{NOISE_RATIO:.2f}x)")
    cpus = _cpus(result)
    loads = [value for value in result.load if value is not None]
    if cpus is not None and loads and max(loads) > cpus:
        reasons.append(f"load average {max(loads):.1f} on {cpus} CPUs (limit: the CPU count)")
    return reasons


def noise_line(result: Measured, control: str = "the floor") -> str:
    """One line on how far the run's figures can be trusted: ``noise: FACTS`` when they can;
    ``! these figures mean nothing: REASONS. Measured: FACTS. Run again ...`` when
    :func:`noise_reasons` gives a reason (REASONS joined by ``; ``). ``control`` names what
    the control timed twice, as there."""
    load = " ".join(f"{value:.1f}" if value is not None else "?" for value in result.load)
    cpus = result.environment.get("cpus", "?")
    twice = ("" if result.control is None else
             f"{control} timed twice came out {result.control:.2f}x apart, ")
    widest = ("" if result.widest is None else
              f" (widest {format_spread(result.widest[0])}: {result.widest[1]})")
    facts = (f"{twice}cells spread {format_spread(result.spread)} typically{widest}, "
             f"{result.rounds} round{'s' * (result.rounds != 1)}, load average {load} "
             f"(before, after) on {cpus} CPUs")
    reasons = noise_reasons(result, control)
    if not reasons:
        return f"noise: {facts}"
    advice = []
    if result.rounds < NOISE_MIN_ROUNDS:
        advice.append(f"with at least {NOISE_MIN_ROUNDS} rounds")
    loaded = any(reason.startswith("load average") for reason in reasons)
    if loaded:
        advice.append("on a machine with a load average below its CPU count")
    elif len(reasons) > len(advice):  # spreads or the control, on a machine not loaded
        advice.append("when nothing else runs (something took the CPU or its caches "
                      "during the batches)")
    return (f"! these figures mean nothing: {'; '.join(reasons)}. Measured: {facts}. "
            f"Run again {' '.join(advice)}")
