"""``regdev audit``: show, filter and export the audit log."""

from __future__ import annotations

import argparse
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO, get_args

from ..agents._loop import StopReason
from ..agents._models import AGENT_STOPS
from ..audit._log import (
    AuditRecord,
    audit_target,
    default_audit_path,
    find_loop,
    read_audit,
    shown_dsn,
)
from ..core._errors import AuditError
from ..core._observation import FIXED_CODES, NAMED_CODES
from ..core._text import display_text
from ._common import (
    UsageError,
    count,
    tell,
)

#: The reasons a loop's stop record can hold (regdev agent's and run_loop's), in order.
STOP_REASONS: tuple[str, ...] = tuple(dict.fromkeys((*AGENT_STOPS, *get_args(StopReason))))


def check_code(code: str) -> None:
    """``--code``'s value must be one a record can hold: ``ok``, a verdict code
    (:data:`~regdev.core._observation.FIXED_CODES`, or ``missing-``, ``type-``, ``range-``
    followed by an argument's path, ``denied-`` by a tool's name), or a loop stop reason.

    Raises:
        UsageError: it is none of them (a typo would otherwise match no record, silently).
    """
    kind, dash, name = code.partition("-")
    if code == "ok" or code in FIXED_CODES or code in STOP_REASONS or (
            dash and name and kind in NAMED_CODES):
        return
    raise UsageError(f"--code {code} is not a verdict code (docs/errors.md lists them: e.g. "
                     "range-addr, approval-denied, denied-TOOL), a loop stop reason "
                     f"({', '.join(STOP_REASONS)}), or ok")


def _parse_time(text: str, option: str) -> float:
    """ISO 8601 (UTC when no offset is given) or Unix seconds, as Unix seconds."""
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise UsageError(f"{option}: expected a time, got {text!r}, which is not a finite "
                             "number of Unix seconds")
        return seconds
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{option}: expected an ISO 8601 time such as 2024-05-01T12:00 or "
                         f"2024-05-01T12:00+02:00 (UTC when no offset), or Unix seconds; got "
                         f"{text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _show_record(record: AuditRecord) -> str:
    """One record as one line of text, every field a model or a client controls (tool,
    arguments, session, key, message, ...) shown through :func:`display_text`."""
    return display_text(_record_line(record))


def _record_line(record: AuditRecord) -> str:
    when = datetime.fromtimestamp(record.time, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    head = f"{record.id:>6}  {when}Z  {record.session:<10}"
    loop = f"  loop {record.loop_id[:8]}" if record.loop_id else ""
    if record.event == "stop":
        by = f", proposer {record.proposer!r}" if record.proposer is not None else ""
        return (f"{head}  loop stop: {record.code} ({record.message}){loop}, "
                f"{count(record.step or 0, 'step')}{by}")
    verdict = "accepted" if record.ok else f"refused {record.stage}/{record.code}"
    if record.event == "intent":  # a write sent with no record of its outcome after it
        verdict = "intent: outcome-unknown"
    extras = []
    if record.idempotency_key is not None:
        extras.append(f"key {record.idempotency_key!r}")
    if record.replay:
        extras.append("replayed (not executed)")
    if record.loop_id:
        extras.append(f"loop {record.loop_id[:8]} step {record.step}")
    if record.proposer is not None:
        extras.append(f"proposer {record.proposer!r}")
    if record.caller is not None:
        extras.append(f"caller {record.caller!r}")
    if record.approver is not None:
        extras.append(f"approver {record.approver!r}"
                      + (f" ({record.approval})" if record.approval else ""))
    if record.device is not None:
        extras.append(f"device {record.device}")
    total = sum(t for t in (record.parse_ns, record.validate_ns, record.authorize_ns,
                            record.execute_ns, record.observe_ns) if t is not None)
    extras.append(f"{total / 1000:.0f} us")
    call = f"{record.tool or '-'} {record.arguments or ''}".strip()
    return f"{head}  {record.dialect or '-':<9}  {verdict:<28}  {call}  ({', '.join(extras)})"


#: The largest integer SQLite stores (a signed 64-bit INTEGER): the bound of --last.
MAX_SQL_INTEGER = 2**63 - 1


def cmd_audit(args: argparse.Namespace, out: TextIO) -> int:
    if args.last is not None and not 1 <= args.last <= MAX_SQL_INTEGER:  # SQLite's INTEGER
        raise UsageError(f"--last must be a number of records in 1..{MAX_SQL_INTEGER}, "
                         f"got {args.last}")
    if args.code is not None:
        check_code(args.code)
    since = _parse_time(args.since, "--since") if args.since else None
    until = _parse_time(args.until, "--until") if args.until else None
    path = args.db or default_audit_path()
    try:
        loop_id = find_loop(path, args.loop) if args.loop is not None else None
        filters: dict[str, Any] = {
            "session": args.session, "code": args.code, "since": since, "until": until,
            "loop_id": loop_id, "device": args.device, "caller": args.caller,
            "proposer": args.proposer}
        records = read_audit(path, last=args.last, **filters)
    except AuditError as error:
        raise UsageError(str(error)) from None
    unreadable = _write_records(records, args.json, out)
    if args.follow:
        return _follow(path, filters, records[-1].id if records else _last_id(path),
                       args.json, out)
    if not args.json:
        where = shown_dsn(path) if isinstance(path, str) else path
        out.write(display_text(f"{count(len(records), 'record')} in {where}") + "\n")
    return 1 if unreadable else 0


#: Seconds between two reads of ``regdev audit --follow``.
FOLLOW_SECONDS = 0.5


def _last_id(path: Path | str) -> int:
    """The id of the last record in the store (0 when none)."""
    last = read_audit(path, last=1, intents=False)
    return last[-1].id if last else 0


def _follow(path: Path | str, filters: dict[str, Any], after: int, as_json: bool,
            out: TextIO) -> int:
    """``--follow``: show the matching records as they are committed, until interrupted
    (Ctrl-C: exit 0). Intent records are left out (a write's call record follows its intent
    within the call). A store out of reach for a while is read again at the next round."""
    try:
        while True:
            out.flush()
            time.sleep(FOLLOW_SECONDS)
            try:
                records = read_audit(path, after=after, intents=False, **filters)
            except AuditError as error:
                tell("audit", "warning", f"{error}; reading again in {FOLLOW_SECONDS:g} s")
                continue
            if records:
                _write_records(records, as_json, out)
                after = records[-1].id
    except KeyboardInterrupt:
        out.flush()
        return 0


def _write_records(records: list[AuditRecord], as_json: bool, out: TextIO) -> int:
    """Write ``records``, one line each; the number that could not be shown (JSON)."""
    unreadable = 0
    for record in records:
        if as_json:
            try:
                line = record.to_json()
            except AuditError as error:  # one damaged record hides none of the others
                out.flush()
                tell("audit", "error", str(error))
                unreadable += 1
                continue
            out.write(line + "\n")
        else:
            out.write(_show_record(record) + "\n")
    return unreadable


def add_parser(sub: Any) -> None:
    """Add ``regdev audit`` to the subcommands."""
    audit = sub.add_parser(
        "audit", help="show, filter and export the audit log",
        description="Show the records of an audit log, oldest first: every call (accepted or "
                    "refused) with its session, dialect, verdict, tool, arguments, "
                    "idempotency key, proposer (the model), caller and approver (serve "
                    "--http), the device it "
                    "reached and time spent, and every loop's stop. Filters combine. "
                    "Times are shown in UTC.")
    audit.add_argument("--db", metavar="PATH", type=audit_target,
                       help="the audit database, or a postgresql:// URL (default: "
                            "$REGDEV_AUDIT, else "
                            "$XDG_STATE_HOME/regdev/audit.db, i.e. "
                            "~/.local/state/regdev/audit.db)")
    audit.add_argument("--session", metavar="NAME", help="only this session's records")
    audit.add_argument("--caller", metavar="NAME",
                       help="only the calls this caller sent: the name shown after `caller` "
                            "(token:NAME or oauth:SUBJECT, the callers of serve --http)")
    audit.add_argument("--proposer", metavar="NAME",
                       help="only the calls (and loop stops) this proposer made: the name "
                            "shown after `proposer` (provider:model for regdev agent and "
                            "eval, mcp:NAME VERSION for an MCP client, replay:FILE)")
    audit.add_argument("--code", metavar="CODE",
                       help="only this verdict code (e.g. range-addr, approval-denied; "
                            "docs/errors.md lists them), or a loop stop reason (done, "
                            "budget, rejected...); ok for accepted calls. Any other is "
                            "refused")
    audit.add_argument("--since", metavar="TIME",
                       help="only records at or after TIME: ISO 8601 (UTC unless it has an "
                            "offset) or Unix seconds")
    audit.add_argument("--until", metavar="TIME", help="only records before TIME")
    audit.add_argument("--loop", metavar="ID",
                       help="only the records of this loop: its id, or the start of it (the "
                            "8 characters shown are usually enough)")
    audit.add_argument("--device", metavar="ID",
                       help="only the calls that reached this device: the id shown after "
                            "`device` (the id a device on a port says, e.g. 5F3A9C01; "
                            "serial:PORT for one that says none; RegisterFile:... in process)")
    audit.add_argument("--last", metavar="N", type=int,
                       help="only the last N matching records (N >= 1)")
    audit.add_argument("--follow", action="store_true",
                       help="after the matching records, show each new one as it is "
                            "committed (every 0.5 s; intent records left out), until Ctrl-C")
    audit.add_argument("--json", action="store_true",
                       help="one JSON object per record (every column; arguments and "
                            "observation as JSON values, numbers exactly as recorded; a "
                            "record that cannot be read, in a database changed by other "
                            "means, is named on stderr, the others are still printed, and "
                            "the exit status is 1)")
    audit.set_defaults(func=cmd_audit)
