"""``regdev report``: schema adherence per model, from the audit log."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..agents._eval import EvalFileError, pass_at_k, read_results
from ..audit._log import audit_target, default_audit_path, read_audit, shown_dsn
from ..audit._report import adherence, format_report, plot_format, plot_report
from ..core._errors import AuditError
from ..core._text import escape_text
from ._audit import _parse_time as parse_time
from ._common import UsageError, json_line, write_line


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    if args.plot is not None:  # before any work: a chart that cannot be written is refused
        try:
            plot_format(args.plot)
        except (ImportError, ValueError) as error:
            raise UsageError(str(error)) from None
    since = parse_time(args.since, "--since") if args.since else None
    until = parse_time(args.until, "--until") if args.until else None
    path = args.db or default_audit_path()
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
        tasks = pass_at_k(t for t in trials if args.model in (None, t["proposer"]))
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
        text = format_report(reports) + ("\n" + _format_tasks(tasks) if tasks is not None else "")
        for line in text.split("\n"):  # its names escaped already
            write_line(out, line)
        if args.plot is not None:
            write_line(out, f"chart written to {args.plot}")
    return 0


def _format_tasks(tasks: dict[str, dict[str, Any]]) -> str:
    lines = ["", "task success (regdev eval):"]
    for proposer, entry in sorted(tasks.items()):
        lines.append(f"  {escape_text(proposer, 40):<40} trials passed {entry['passed']}/"
                     f"{entry['trials']}; pass^{entry['k']} {entry['tasks_passed_every_trial']}/"
                     f"{entry['tasks']} tasks"
                     + (f"; {entry['errored']} trial(s) errored (provider-error: not scored, "
                        "not in pass^k)" if entry.get("errored") else ""))
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
                        help="also the task success of regdev eval's results file (JSON "
                             "Lines): trials passed and pass^k per proposer")
    report.add_argument("--by", choices=("proposer", "map"), default="proposer",
                        help="one row per proposer (default), or per proposer and register "
                             "map (map: the map's name the calls were made on; `the default "
                             "map` without --map)")
    report.add_argument("--json", action="store_true", help="one JSON object")
    report.add_argument("--plot", metavar="FILE.png",
                        help="also draw the report as a chart in FILE, in the format its "
                             "extension names (png, svg, pdf, or another matplotlib writes; "
                             "PNG when it has none); needs matplotlib: the report extra")
    report.set_defaults(func=cmd_report)
