"""Schema adherence per model, from the audit log: how strictly each proposer's tool calls
follow the schemas, and how it recovers from a refusal.

Rules of this file:

* Everything is computed from audit records (:class:`~regdev.AuditRecord`), so any run that
  was recorded can be reported on: ``regdev agent``, ``regdev eval``, ``regdev serve``'s
  clients, a ``replay``. Records are grouped by their proposer (``provider:model``, ``mcp:NAME
  VERSION``, ``replay:FILE``); a record without one is grouped under ``unknown``.
* A call is a *retry* when the call before it in the same loop (by step) was refused; a call
  outside a loop is always a first try. *First-try validity* is the share of first tries that
  parse and validate accepted (a later refusal by policy or the device does not count against
  the model's schema adherence).
* *Retry recovery*: each run of refused calls in a loop that begins with a retryable refusal
  (one the model can fix: not a policy denial or a device error) is one episode; it is
  recovered on retry k when the k-th call after the first refusal was accepted, and not
  recovered when the loop went on no further or stopped.
* *Loops* counts the loops the proposer ran, those that stopped before any call included.
* Nothing here writes: it reads records that :func:`~regdev.read_audit` returned.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .._version import __version__
from ..core._observation import Refusal
from ..core._text import escape_text
from ._log import AuditRecord

__all__ = ["ModelReport", "Verdict", "adherence", "format_report", "loop_figures", "plot_format",
           "plot_report"]

#: The stages whose refusals are the model's schema mistakes (first-try validity counts them).
SCHEMA_STAGES = frozenset({"parse", "validate"})
UNKNOWN = "unknown"


@dataclass(slots=True)
class ModelReport:
    """Adherence figures for one proposer.

    Attributes:
        proposer: ``provider:model`` (or ``unknown``).
        calls: call records.
        accepted: calls accepted (executed, or replayed from an idempotency key).
        first_tries: calls that were not retries.
        first_try_valid: first tries accepted by parse and validate.
        stages: refusals by stage.
        codes: refusals by verdict code.
        episodes: runs of refused calls in a loop.
        recovered: episodes recovered, by the retry that recovered them (1 = first retry).
        stops: loops' stop reasons, counted.
        loops: loops seen.
        map_name: with ``by_map``, the register map the calls were made on (None: the default
            map, or records from before maps were recorded).
        by_map: True when the report is split by map as well as by proposer.
    """

    proposer: str
    calls: int = 0
    accepted: int = 0
    first_tries: int = 0
    first_try_valid: int = 0
    stages: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    episodes: int = 0
    recovered: Counter[int] = field(default_factory=Counter)
    stops: Counter[str] = field(default_factory=Counter)
    loops: int = 0
    map_name: str | None = None
    by_map: bool = False

    @property
    def label(self) -> str:
        """The row's name: the proposer, and with ``by_map`` the map (``openai:m on
        sensor``; ``on the default map``)."""
        if not self.by_map:
            return self.proposer
        return f"{self.proposer} on {self.map_name or 'the default map'}"

    @property
    def first_try_validity(self) -> float | None:
        """first_try_valid / first_tries, 0..1; None without first tries."""
        return self.first_try_valid / self.first_tries if self.first_tries else None

    @property
    def proposals_per_accepted(self) -> float | None:
        """calls / accepted; None when nothing was accepted."""
        return self.calls / self.accepted if self.accepted else None

    @property
    def recovery_rate(self) -> float | None:
        """Episodes recovered (on any retry) / episodes, 0..1; None without episodes."""
        return sum(self.recovered.values()) / self.episodes if self.episodes else None

    def to_dict(self) -> dict[str, Any]:
        """The figures as one JSON object (rates as fractions, None where undefined)."""
        head: dict[str, Any] = {"proposer": self.proposer}
        if self.by_map:
            head["map"] = self.map_name
        return {
            **head, "calls": self.calls, "accepted": self.accepted,
            "refused": self.calls - self.accepted, "first_tries": self.first_tries,
            "first_try_valid": self.first_try_valid,
            "first_try_validity": self.first_try_validity,
            "stages": dict(sorted(self.stages.items())),
            "codes": dict(sorted(self.codes.items())),
            "episodes": self.episodes,
            "recovered_on_retry": {str(k): v for k, v in sorted(self.recovered.items())},
            "recovery_rate": self.recovery_rate,
            "proposals_per_accepted": self.proposals_per_accepted,
            "loops": self.loops, "stops": dict(sorted(self.stops.items())),
        }


def adherence(records: Iterable[AuditRecord], *, by_map: bool = False) -> list[ModelReport]:
    """Adherence per proposer, from audit records in append order.

    Args:
        records: call and stop records (as :func:`~regdev.read_audit` returns them, oldest
            first); filter them first (by time, session, device, proposer).
        by_map: split each proposer's figures by the register map its calls were made on
            (a loop's stop goes with its loop's calls).

    Returns:
        One :class:`ModelReport` per proposer (and map), ordered by proposer name (then map).
    """
    reports: dict[Any, ModelReport] = {}
    loops: dict[tuple[Any, str], list[AuditRecord]] = defaultdict(list)
    loop_ids: dict[Any, set[str]] = defaultdict(set)
    loop_maps: dict[str | None, str | None] = {}  # a loop's map, from its calls
    records = list(records)
    if by_map:
        for record in records:
            if record.event == "call" and record.loop_id is not None:
                loop_maps.setdefault(record.loop_id, record.map_name)
    for record in records:
        proposer = getattr(record, "proposer", None) or UNKNOWN
        map_name = (record.map_name if record.event == "call"
                    else loop_maps.get(record.loop_id)) if by_map else None
        name = (proposer, map_name) if by_map else proposer
        report = reports.get(name) or reports.setdefault(
            name, ModelReport(proposer, map_name=map_name, by_map=by_map))
        if record.loop_id is not None:
            loop_ids[name].add(record.loop_id)
        if record.event == "stop":
            report.stops[record.code or "?"] += 1
            continue
        if record.event != "call":
            continue
        report.calls += 1
        report.accepted += record.ok
        if not record.ok:
            report.stages[record.stage or "?"] += 1
            report.codes[record.code or "?"] += 1
        if record.loop_id is None:
            report.first_tries += 1
            report.first_try_valid += record.ok or record.stage not in SCHEMA_STAGES
        else:
            loops[(name, record.loop_id)].append(record)
    for (name, _), calls in loops.items():
        ordered: list[AuditRecord] = sorted(calls, key=lambda r: (r.step or 0, r.id))
        loop_figures(reports[name], ordered)
    for name, ids in loop_ids.items():
        reports[name].loops = len(ids)
    return sorted(reports.values(), key=lambda r: (r.proposer, r.map_name or ""))


class Verdict(Protocol):
    """What :func:`loop_figures` reads of a call: an audit record, or a call of a results
    file's transcript."""

    @property
    def ok(self) -> bool: ...
    @property
    def stage(self) -> str | None: ...
    @property
    def code(self) -> str | None: ...


def loop_figures(report: ModelReport, calls: Sequence[Verdict]) -> None:
    """Count one loop's first tries and its refusal episodes into ``report`` (``calls`` in
    step order)."""
    refused_run = 0
    for record in calls:
        if refused_run == 0:
            report.first_tries += 1
            report.first_try_valid += record.ok or record.stage not in SCHEMA_STAGES
        if record.ok:
            if refused_run:
                report.recovered[refused_run] += 1
            refused_run = 0
        elif refused_run:
            refused_run += 1
        elif Refusal(record.stage or "internal", record.code or "", "").retryable:  # type: ignore[arg-type]
            report.episodes += 1
            refused_run = 1


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def format_report(reports: list[ModelReport]) -> str:
    """The report as a text table (one row per proposer), then each proposer's refusals by
    code and its stop reasons. Proposer names are shown escaped by the caller's choice of
    names: they come from the audit log."""
    if not reports:
        return "no calls in the audit log match"
    head = (f"{'proposer':<32} {'calls':>6} {'ok':>6} {'1st-try valid':>13} "
            f"{'recovered':>9} {'calls/ok':>8} {'loops':>5}")
    lines = [head, "-" * len(head)]
    for r in reports:
        per = "-" if r.proposals_per_accepted is None else f"{r.proposals_per_accepted:.2f}"
        lines.append(f"{escape_text(r.label, 32):<32} {r.calls:>6} {r.accepted:>6} "
                     f"{_percent(r.first_try_validity):>13} {_percent(r.recovery_rate):>9} "
                     f"{per:>8} {r.loops:>5}")
    for r in reports:
        lines.append("")
        lines.append(f"{escape_text(r.label, 60)}:")
        if r.codes:
            refused = r.calls - r.accepted
            lines.append("  refusals: " + ", ".join(
                f"{escape_text(code, 40)} {n} ({100 * n / r.calls:.0f}% of calls)"
                for code, n in r.codes.most_common()) + f"; {refused} in all")
            lines.append("  by stage: " + ", ".join(f"{stage} {n}" for stage, n
                                                    in sorted(r.stages.items())))
        else:
            lines.append("  refusals: none")
        if r.episodes:
            lines.append(f"  refusal episodes: {r.episodes}; recovered on retry " + (", ".join(
                f"{k}: {n}" for k, n in sorted(r.recovered.items())) or "-")
                + f"; not recovered: {r.episodes - sum(r.recovered.values())}")
        if r.stops:
            lines.append("  loop stops: " + ", ".join(f"{escape_text(stop, 30)} {n}"
                                                      for stop, n in r.stops.most_common()))
    lines.append("")
    lines.append(f"regdev {__version__}: first-try valid = accepted by parse and validate on "
                 "the first try (policy and device refusals do not count against it)")
    return "\n".join(lines)


#: The install command named when matplotlib is missing.
PLOT_INSTALL = ("in a clone of regdev: .venv/bin/pip install -e '.[report]' (scripts/test "
                "installs it)")


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display needed).

    Raises:
        ImportError: matplotlib is not installed (the message names the install command).
    """
    try:
        import matplotlib  # noqa: PLC0415 - optional extra

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise ImportError(f"--plot needs matplotlib: {PLOT_INSTALL}") from None
    return plt


def plot_format(path: str) -> str:
    """The format a chart written to ``path`` takes: its extension's, lower case (``png``,
    ``svg``, ``pdf``... any matplotlib writes), or ``png`` when the name has none (the file is
    then written under that exact name, no extension added). Checked before any work.

    Raises:
        ImportError: matplotlib is not installed (the message names the install command).
        ValueError: ``path`` is a directory, its directory does not exist, or matplotlib
            cannot write its extension's format (the message names the formats it can).
    """
    plt = _pyplot()
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"--plot {path} is a directory: name the chart's file "
                         f"(e.g. {target / 'report.png'})")
    if not target.parent.is_dir():
        raise ValueError(f"--plot {path}: the directory {target.parent} does not exist")
    extension = target.suffix[1:].lower()
    if not extension:
        return "png"
    supported = plt.figure().canvas.get_supported_filetypes()
    plt.close("all")
    if extension not in supported:
        raise ValueError(f"--plot {path}: matplotlib cannot write .{extension} files; "
                         f"use one of {', '.join(sorted(supported))}")
    return extension


def plot_report(reports: list[ModelReport], path: str,
                tasks: dict[str, dict[str, Any]] | None = None) -> None:
    """Draw the report as a chart at ``path``, in the format :func:`plot_format` names (PNG
    by default): per proposer, first-try validity, retry recovery and (with ``tasks``,
    regdev eval's pass^k per proposer) the share of tasks passed in every trial (left), and
    each verdict code's share of its calls (right, stacked). The file is ``path`` exactly.

    Raises:
        ImportError: matplotlib is not installed (the message names the install command).
        ValueError: ``path`` cannot take a chart (see :func:`plot_format`).
        OSError: the file cannot be written.
    """
    chart_format = plot_format(path)
    plt = _pyplot()
    names = [escape_text(r.label, 40) for r in reports]
    rows = range(len(reports))
    height = max(2.5, 0.6 * len(reports) + 1.5)
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, height + 0.6), layout="constrained")
    series = [([r.first_try_validity for r in reports], "first-try valid", "#2a7"),
              ([r.recovery_rate for r in reports], "refusals recovered on retry", "#38c")]
    if tasks is not None:
        passed = []
        for r in reports:
            entry = tasks.get(r.proposer)
            passed.append(entry["tasks_passed_every_trial"] / entry["tasks"]
                          if entry and entry["tasks"] else None)
        k = min((e["k"] for e in tasks.values()), default=1)
        series.append((passed, f"tasks passed in every trial (pass^{k})", "#c73"))
    width = 0.8 / len(series)
    for index, (values, label, colour) in enumerate(series):
        offset = (index - (len(series) - 1) / 2) * width
        left.barh([y + offset for y in rows], [100 * (v or 0) for v in values], width,
                  label=label, color=colour)
        for y, value in enumerate(values):  # None: nothing to measure (no refusal to recover)
            text = "n/a" if value is None else f"{100 * value:.0f}%"
            left.text(100 * (value or 0) + 1, y + offset, text, va="center", fontsize=8)
    left.set_yticks(list(rows), names)
    left.set_xlim(0, 110)
    left.set_xlabel("percent")
    left.set_title("Schema adherence")
    left.legend(loc="upper left", bbox_to_anchor=(0, -0.18), fontsize=8, ncols=2)
    left.invert_yaxis()
    codes = sorted({code for r in reports for code in r.codes},
                   key=lambda c: -sum(r.codes[c] for r in reports))
    start = [0.0] * len(reports)
    colours = [plt.get_cmap("tab20")(i / 20) for i in range(20)]
    for index, code in enumerate(codes):
        share = [100 * r.codes[code] / r.calls if r.calls else 0 for r in reports]
        right.barh(list(rows), share, left=start, label=escape_text(code, 30),
                   color=colours[index % len(colours)])
        start = [a + b for a, b in zip(start, share, strict=True)]
    right.set_yticks(list(rows), names)
    right.set_xlim(0, 100)
    right.set_xlabel("percent of calls refused, by verdict code")
    right.set_title("Refusals")
    if codes:
        right.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7, title="code")
    right.invert_yaxis()
    figure.suptitle(f"regdev report: {sum(r.calls for r in reports)} calls, "
                    f"{len(reports)} proposer(s)")
    try:
        figure.savefig(path, dpi=110, format=chart_format)
    finally:
        plt.close(figure)
