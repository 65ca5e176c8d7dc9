"""``regdev eval``: a model runs the task suite k times; pass^k per task, and its adherence."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import ipaddress
import sys
import urllib.parse
from pathlib import Path
from typing import Any, TextIO

from .._files import DataFileError, example
from .._version import __version__
from ..agents._eval import (
    FORMAT,
    EvalFileError,
    EvalStopped,
    Trial,
    load_suite,
    pass_at_k,
    record_variant,
    run_eval,
)
from ..agents._models import Endpoint
from ..agents._wording import VARIANTS, WORDINGS, Wording, wording
from ..audit._log import read_audit
from ..audit._report import adherence, format_report
from ..core._errors import AuditError, SchemaError
from ..core._text import display_text, escape_text
from ._agent import endpoint_from, model_options
from ._common import (
    UsageError,
    add_gate_options,
    json_line,
    open_audit,
    read_map,
    register_map,
    write_line,
)
from ._report import format_sensitivity

#: The shipped suites and the map of tasks that name none, among the installed examples
#: (``regdev map --examples``): the small suite without --suite, the benchmark with it.
DEFAULT_TASKS = "eval-tasks.jsonl"
DEFAULT_SUITE = "eval-suite.jsonl"
DEFAULT_MAP = "sensor.rdl"


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    if args.k < 1:
        raise UsageError(f"-k must be at least 1, got {args.k}")
    try:
        if args.map is None:
            args.map = str(example(DEFAULT_MAP))
        tasks_path = Path(args.suite) if args.suite else example(DEFAULT_TASKS)
        if args.suite == SHIPPED:
            tasks_path = example(DEFAULT_SUITE)
    except DataFileError as error:
        raise UsageError(str(error)) from None
    regmap = register_map(args)
    try:
        suite = load_suite(tasks_path, regmap, read_map)
    except EvalFileError as error:
        raise UsageError(str(error)) from None
    tasks = suite.tasks
    if args.format_sensitivity and (args.wording is not None or args.strict is not None):
        raise UsageError("--format-sensitivity runs every wording with strict on and off: "
                         "leave out --wording, --strict and --no-strict")
    endpoint = endpoint_from(args)
    variants = (VARIANTS if args.format_sensitivity else
                ((args.wording or "original", endpoint.strict),))
    audit = None if args.no_audit else open_audit(args)
    results = None
    if args.output is not None:
        try:
            results = Path(args.output).open("a", encoding="utf-8")  # noqa: SIM115
        except OSError as error:
            raise UsageError(f"cannot write {args.output}: {error.strerror or error}") from None
    total = len(tasks) * args.k * len(variants)
    progress = _Progress(total, enabled=not args.quiet)
    try:
        with contextlib.ExitStack() as stack:
            if results is not None:
                stack.enter_context(results)

            def ended(trial: Trial) -> None:
                if results is not None:
                    results.write(_line(trial))
                    results.flush()
                progress.step(trial)

            trials: list[Trial] = []
            pins: list[dict[str, Any]] = []
            try:
                for name, strict in variants:
                    endpoint.strict = strict
                    run = run_pin(args, endpoint, suite.hash, wording(name))
                    pins.append(run)
                    trials += run_eval(endpoint, tasks, regmap, k=args.k, audit=audit,
                                       max_steps=args.max_steps, retries=args.retries,
                                       on_trial=ended, run=run, wording=wording(name))
            except SchemaError as error:
                raise UsageError(f"the tools cannot be declared to {args.provider}: "
                                 f"{error}") from None
            except EvalStopped as stopped:
                progress.close()
                print(display_text(f"regdev eval: {stopped}"), file=sys.stderr)
                return 1
    finally:
        progress.close()
        if audit is not None:
            audit.close()
    records = [trial.to_dict() for trial in trials]
    figures = pass_at_k(records)[endpoint.proposer]
    summary = {key: value for key, value in figures.items() if key != "formats"}
    report = None
    if audit is not None:
        loops = {trial.result.loop_id for trial in trials}
        try:
            mine = [r for r in read_audit(audit.path, proposer=endpoint.proposer)
                    if r.loop_id in loops]
        except AuditError as error:
            raise UsageError(str(error)) from None
        report = adherence(mine)
    if args.json:
        json_line({"proposer": endpoint.proposer, "k": args.k, "run": pins[0], "runs": pins,
                   "summary": summary, "formats": figures["formats"],
                   "tasks": _per_task(records),
                   "adherence": [r.to_dict() for r in report] if report else None}, out)
    else:
        reference = [r for r in records if record_variant(r) == figures["variant"]]
        text = _format(endpoint.proposer, args.k, reference, summary)
        if len(variants) > 1:
            text += "\n\n" + format_sensitivity({endpoint.proposer: figures})
        if report:
            text += "\n\n" + format_report(report)
        if args.output is not None:
            text += (f"\n\ntrials appended to {args.output} (regdev report --eval "
                     f"{args.output} reads them)")
        for line in text.split("\n"):  # the names in it escaped already
            write_line(out, line)
    # every trial of every variant: the reference's summary alone would hide the others
    return 0 if all(record["passed"] is True for record in records) else 1


#: The value of a bare ``--suite``: the shipped benchmark.
SHIPPED = "shipped"


def base_url_kind(url: str | None) -> str:
    """Where a base URL points, without naming it: ``provider`` (the SDK's own, no
    --base-url), ``loopback`` (127.0.0.0/8, ::1, localhost), ``private`` (a private or
    link-local address), or ``remote`` (any other address or host name)."""
    if url is None:
        return "provider"
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return "loopback"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "remote"
    return ("loopback" if address.is_loopback else
            "private" if address.is_private or address.is_link_local else "remote")


def run_pin(args: argparse.Namespace, endpoint: Endpoint, suite: str,
            words: Wording) -> dict[str, Any]:
    """What a run was: model, provider, base URL's host kind, date (UTC), temperature, tool
    format and strict mode, the tools' wording and its hash, regdev version, suite hash and
    task format, k, budget, retries."""
    return {"proposer": endpoint.proposer, "model": args.model, "provider": args.provider,
            "base_url": base_url_kind(args.base_url),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "temperature": args.temperature if args.temperature is not None else (
                0.0 if args.provider == "openai" else None),
            "tool_format": args.provider, "strict": endpoint.strict,
            "wording": words.name, "wording_hash": words.hash, "regdev": __version__,
            "suite": suite, "format": FORMAT, "k": args.k, "max_steps": args.max_steps,
            "retries": args.retries}


def _line(trial: Trial) -> str:
    import msgspec  # noqa: PLC0415

    return msgspec.json.encode(trial.to_dict()).decode() + "\n"


def _per_task(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per task: trials scored, passed, errored (not scored), the failures and errors."""
    tasks: dict[str, dict[str, Any]] = {}
    for record in records:
        entry = tasks.setdefault(record["task"], {"passed": 0, "trials": 0, "errored": 0,
                                                  "failures": [], "errors": [], "labels": []})
        if record["passed"] is None:
            entry["errored"] += 1
            entry["errors"].append(record["error"])
            continue
        entry["trials"] += 1
        entry["passed"] += record["passed"]
        entry["failures"] += record["failures"]
        entry["labels"] += [record["label"]] if record.get("label") else []
    return tasks


def _format(proposer: str, k: int, records: list[dict[str, Any]],
            summary: dict[str, Any]) -> str:
    lines = [f"regdev eval: {escape_text(proposer, 80)}, {summary['tasks']} tasks x {k} "
             "trials", f"{'task':<22} {'passed':>7}  first failure"]
    for name, entry in _per_task(records).items():
        # the failures and errors are messages, escaped already where they quote a model
        why = (display_text(f"[{entry['labels'][0]}] {entry['failures'][0]}", 70)
               if entry["failures"] else
               display_text(f"errored: {entry['errors'][0]}", 70) if entry["errors"] else "")
        lines.append(f"{escape_text(name, 22):<22} {entry['passed']:>3}/{entry['trials']:<3}  "
                     f"{why}")
    errored = (f"; {summary['errored']} trial(s) errored (provider-error: not scored, not in "
               "pass^k)" if summary["errored"] else "")
    lines.append(f"trials passed: {summary['passed']}/{summary['trials']}; "
                 f"pass^{k}: {summary['tasks_passed_every_trial']}/{summary['tasks']} tasks "
                 f"passed every trial{errored}")
    return "\n".join(lines)


class _Progress:
    """A progress bar on stderr (tqdm, from the models extra), one update per trial; none
    when stderr is not a terminal (no ``\\r`` redraws in a log file or a pipe)."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        self.bar: Any = None
        if enabled and _is_terminal(sys.stderr):
            from tqdm import tqdm  # noqa: PLC0415 - the models extra

            self.bar = tqdm(total=total, unit="trial", file=sys.stderr, dynamic_ncols=True,
                            desc="regdev eval")

    def step(self, trial: Trial) -> None:
        if self.bar is not None:
            verdict = "ERROR" if trial.passed is None else "pass" if trial.passed else "FAIL"
            self.bar.set_postfix_str(f"{escape_text(trial.task, 24)} {verdict}")
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or closed
        return False


def add_parser(sub: Any) -> None:
    """Add ``regdev eval`` to the subcommands."""
    evaluate = sub.add_parser(
        "eval", help="run the task suite k times with a model: pass^k per task, and its "
                     "schema adherence",
        description="Each task of the suite (--suite: 162 tasks in 8 categories on three maps; "
                    "without it, 21 tasks on examples/sensor.rdl) runs -k times, each on a "
                    "fresh in-process device, through the gate and the audit log. A trial "
                    "passes when the registers end as expected (and no other register changed), "
                    "the registers it must read were read, its answer says what it must, no "
                    "call was made where none was wanted, and its budget was not spent; a "
                    "failed trial gets one label (docs/models.md). A task passes pass^k when "
                    "every trial passed. --output keeps every trial's transcript and the run's "
                    "pin. Prints a table per task and the adherence report of the run "
                    "(docs/models.md). Needs the models extra.")
    model_options(evaluate, max_steps=12)
    evaluate.add_argument("-k", type=int, default=3, metavar="N",
                          help="trials per task (default 3); pass^k counts the tasks passed "
                               "in every trial")
    evaluate.add_argument("--suite", "--tasks", nargs="?", const=SHIPPED, metavar="FILE",
                          help="the task suite, JSON Lines in task format 1 (docs/models.md). "
                               "--suite alone: the shipped benchmark, examples/eval-suite.jsonl "
                               "(162 tasks in 8 categories on the default map, "
                               "examples/sensor.rdl and examples/thermostat.rdl); --suite FILE: "
                               "your own. Without it: the small suite examples/eval-tasks.jsonl "
                               "(21 tasks). Every result carries the suite's hash")
    evaluate.add_argument("--wording", choices=tuple(WORDINGS),
                          help="the wording of the tools' descriptions: original (regdev's "
                               "own, the default) or reworded (the same facts in other words, "
                               "a versioned table in the package; docs/models.md); pinned in "
                               "every result with its hash")
    evaluate.add_argument("--format-sensitivity", action="store_true",
                          help="run every task in each of four variants: the original and "
                               "the reworded wording, each with --strict and --no-strict (4 x k "
                               "trials a task); regdev report --eval shows pass^k per variant "
                               "and its difference from original/strict-on")
    evaluate.add_argument("--map", metavar="FILE",
                          help="the register map of tasks that name none (default: "
                               "examples/sensor.rdl; a task's own `map` wins)")
    evaluate.add_argument("--output", metavar="FILE",
                          help="append one JSON line per trial to FILE (regdev report --eval "
                               "FILE reads them)")
    evaluate.add_argument("--json", action="store_true",
                          help="print the result as one JSON object")
    evaluate.add_argument("--quiet", action="store_true", help="no progress bar")
    add_gate_options(evaluate, policy=False)  # each trial on a fresh device, unprivileged
    evaluate.set_defaults(func=cmd_eval)
