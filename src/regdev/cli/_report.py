"""``regdev report``: schema adherence per model, from the audit log."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from ..agents._eval import CATEGORIES, EvalFileError, eval_figures, read_results
from ..agents._evalhtml import eval_html
from ..audit._log import audit_target, default_audit_path, read_audit, shown_dsn
from ..audit._report import adherence, format_report, plot_format, plot_report
from ..core._errors import AuditError
from ..core._text import escape_text
from ._audit import _parse_time as parse_time
from ._common import UsageError, json_line, write_line


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    if args.html is not None and args.eval is None:
        raise UsageError("--html needs --eval RESULTS (the page shows the eval figures)")
    if args.plot is not None:  # before any work: a chart that cannot be written is refused
        try:
            plot_format(args.plot)
        except (ImportError, ValueError) as error:
            raise UsageError(str(error)) from None
    since = parse_time(args.since, "--since") if args.since else None
    until = parse_time(args.until, "--until") if args.until else None
    path = args.db or default_audit_path()
    if args.eval is not None and args.db is None:
        # --eval alone: every figure comes from the results file; the default log (or
        # $REGDEV_AUDIT) holds other runs, whose report would be read as this file's
        records = []
    else:
        try:
            records = read_audit(path, session=args.session, since=since, until=until,
                                 proposer=args.model, device=args.device)
        except AuditError as error:
            raise UsageError(str(error)) from None
    reports = adherence(records, by_map=args.by == "map")
    tasks = None
    if args.eval is not None:
        try:
            trials = read_results(args.eval)
        except EvalFileError as error:
            raise UsageError(str(error)) from None
        if args.k is not None and args.k < 1:
            raise UsageError(f"-k must be at least 1, got {args.k}")
        tasks = eval_figures((t for t in trials if args.model in (None, t["proposer"])),
                             args.k)
    if args.html is not None:
        try:
            assert tasks is not None  # --html needs --eval
            Path(args.html).write_text(eval_html(tasks, str(args.eval)), encoding="utf-8")
        except OSError as error:
            raise UsageError(f"cannot write {args.html}: {error.strerror or error}") from None
    if args.plot is not None:
        try:
            plot_report(reports, args.plot, tasks)
        except (ImportError, ValueError) as error:
            raise UsageError(str(error)) from None
        except OSError as error:
            raise UsageError(f"cannot write {args.plot}: {error.strerror or error}") from None
    if args.json:
        shown = shown_dsn(path) if isinstance(path, str) else str(path)
        json_line({"db": shown, "proposers": [r.to_dict() for r in reports], "eval": tasks},
                  out)
    else:
        text = ("" if tasks is not None and not records else format_report(reports)) + (
            "\n" + _format_tasks(tasks) if tasks is not None else "")
        for line in text.split("\n"):  # its names escaped already
            write_line(out, line)
        if args.plot is not None:
            write_line(out, f"chart written to {args.plot}")
        if args.html is not None:
            write_line(out, f"page written to {escape_text(str(args.html), 200)}")
    return 0


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _interval(pair: list[float] | tuple[float, float] | None) -> str:
    return "" if pair is None else f"[{100 * pair[0]:.1f}-{100 * pair[1]:.1f}]"


def _format_tasks(tasks: dict[str, dict[str, Any]]) -> str:
    """The eval figures as text: the ranking, pass^k per category, the failure labels, and
    each run's pin (names escaped)."""
    ks = sorted({entry["k"] for entry in tasks.values()})
    k = "/".join(str(n) for n in ks) or "0"
    lines = ["", f"task success (regdev eval): pass^k with k = {k} (tau-bench: the chance that "
             "k trials of a task all pass), 95% Wilson intervals over tasks",
             f"  {'rank':<4} {'proposer':<32} {'pass^k [95% CI]':<22} {'pass^1':>7} "
             f"{'1st-try':>7} {'recov':>6} {'calls/task':>10}  tasks"]
    for proposer, entry in tasks.items():
        calls = entry["calls_per_task"]
        lines.append(
            f"  {entry['rank']:<4} {escape_text(proposer, 32):<32} "
            f"{_rate(entry['pass^k']) + ' ' + _interval(entry['pass^k_ci95']):<22} "
            f"{_rate(entry['pass^1']):>7} {_rate(entry['first_try_validity']):>7} "
            f"{_rate(entry['recovery_rate']):>6} {'-' if calls is None else f'{calls:.2f}':>10}"
            f"  {entry['tasks_passed_every_trial']}/{entry['tasks']} passed every trial"
            + (f"; {entry['errored']} trial(s) errored (provider-error: not scored)"
               if entry["errored"] else ""))
    names = [c for c in CATEGORIES if any(c in e["categories"] for e in tasks.values())]
    if names:
        lines += ["", "pass^k per category (tasks):",
                  "  " + f"{'proposer':<32}" + "".join(f"{c[:12]:>13}" for c in names)]
        for proposer, entry in tasks.items():
            cells = []
            for name in names:
                cat = entry["categories"].get(name)
                cells.append(f"{_rate(cat['pass^k']) + ' (' + str(cat['tasks']) + ')':>13}"
                             if cat else f"{'-':>13}")
            lines.append(f"  {escape_text(proposer, 32):<32}" + "".join(cells))
    lines += ["", "failure labels (failed trials):"]
    for proposer, entry in tasks.items():
        labels = ", ".join(f"{escape_text(label, 40)} {count}"
                           for label, count in entry["labels"].items())
        lines.append(f"  {escape_text(proposer, 32):<32} {labels or 'none'}")
    if any(len(entry["formats"]) > 1 for entry in tasks.values()):
        lines += ["", format_sensitivity(tasks)]
    lines += ["", "runs:"]
    for proposer, entry in tasks.items():
        for run in entry["runs"] or [{}]:
            lines.append(f"  {escape_text(proposer, 32):<32} " + (", ".join(
                f"{escape_text(str(key), 20)} {escape_text(str(value), 60)}"
                for key, value in run.items() if key != "proposer") or "not recorded"))
    return "\n".join(lines)


def _points(value: float) -> str:
    return f"{100 * value:+.1f}"


def format_sensitivity(tasks: dict[str, dict[str, Any]]) -> str:
    """The format-sensitivity table: per proposer run in more than one variant, pass^k per
    variant and its difference from the reference variant in percentage points, with
    Newcombe's 95% interval, and the variant's failure labels (names escaped)."""
    lines = ["format sensitivity: pass^k per variant (wording/strict mode); the difference "
             "from the first, in points, with its 95% Newcombe interval",
             f"  {'proposer':<32} {'variant':<20} {'pass^k [95% CI]':<22} "
             f"{'difference [95% CI]':<24} labels"]
    for proposer, entry in tasks.items():
        if len(entry["formats"]) < 2:  # a sweep has more than one variant
            continue
        shown = escape_text(proposer, 32)
        for name, row in entry["formats"].items():
            interval = row["difference_ci95"]
            difference = ("(reference)" if name == entry["variant"] else
                          "-" if row["difference"] is None else
                          f"{_points(row['difference'])} "
                          f"[{_points(interval[0])}, {_points(interval[1])}]")
            labels = ", ".join(f"{escape_text(label, 40)} {count}"
                               for label, count in row["labels"].items()) or "none"
            lines.append(f"  {shown:<32} {escape_text(name, 20):<20} "
                         f"{_rate(row['pass^k']) + ' ' + _interval(row['pass^k_ci95']):<22} "
                         f"{difference:<24} {labels}")
            shown = ""
    return "\n".join(lines)


def add_parser(sub: Any) -> None:
    """Add ``regdev report`` to the subcommands."""
    report = sub.add_parser(
        "report", help="schema adherence per model, from the audit log",
        description="For each proposer in the audit log (provider:model for regdev agent and "
                    "eval, mcp:CLIENT VERSION for serve's clients, replay:FILE for replay): "
                    "calls, accepted calls, first-try validity (the share of first tries that "
                    "parse and validate accepted), each verdict code's and stage's share, "
                    "retry recovery (refusal episodes recovered on retry k), proposals per "
                    "accepted call, and loop stop reasons. Filters combine. docs/models.md "
                    "explains how to read it.")
    report.add_argument("--db", metavar="PATH", type=audit_target,
                        help="the audit database, or a postgresql:// URL (default: "
                             "$REGDEV_AUDIT, else "
                             "~/.local/state/regdev/audit.db)")
    report.add_argument("--model", metavar="PROPOSER",
                        help="only this proposer's records, e.g. openai:gpt-4.1-mini")
    report.add_argument("--session", metavar="NAME", help="only this session's records")
    report.add_argument("--device", metavar="ID",
                        help="only calls to this device (its id, as regdev audit shows it)")
    report.add_argument("--since", metavar="TIME",
                        help="only records at or after TIME: ISO 8601 or Unix seconds")
    report.add_argument("--until", metavar="TIME", help="only records before TIME")
    report.add_argument("--eval", metavar="RESULTS",
                        help="the task success of regdev eval's results file (JSON Lines), "
                             "from that file alone (with --db, below the audit log's "
                             "report): the proposers ranked by pass^k "
                             "(tau-bench's, k stated, 95%% Wilson interval over tasks), pass^1, "
                             "first-try validity, retry recovery and calls per task; pass^k per "
                             "category; failure labels; for a model run with eval "
                             "--format-sensitivity, pass^k per wording and strict mode and its "
                             "difference from the reference (95%% Newcombe interval); each "
                             "run's pin")
    report.add_argument("-k", type=int, metavar="N",
                        help="with --eval: the k of pass^k (default: the fewest trials any "
                             "task had; at most that)")
    report.add_argument("--by", choices=("proposer", "map"), default="proposer",
                        help="one row per proposer (default), or per proposer and register "
                             "map (map: the map's name the calls were made on; `the default "
                             "map` without --map)")
    report.add_argument("--json", action="store_true", help="one JSON object")
    report.add_argument("--plot", metavar="FILE.png",
                        help="also draw the report as a chart in FILE, in the format its "
                             "extension names (png, svg, pdf, or another matplotlib writes; "
                             "PNG when it has none); needs matplotlib: the report extra")
    report.add_argument("--html", metavar="FILE",
                        help="with --eval: also write the eval figures as one self-contained "
                             "HTML page (tables and inline SVG charts side by side, several "
                             "models in one page; no script, nothing fetched)")
    report.set_defaults(func=cmd_report)
