"""The audit reader: queries of an audit database (:func:`read_audit`, :func:`find_loop`).

Readers take no lock (:mod:`regdev.audit._lock`), open the database read-only, and read where
they cannot write (:func:`_connect_read_only`); a database not yet upgraded to this schema is
read with NULL in the columns it lacks.
"""

from __future__ import annotations

import contextvars
import math
import os
import sqlite3
from pathlib import Path
from typing import Any

from ..core._errors import AuditError
from ._record import (
    ADDED_COLUMNS,
    COLUMNS,
    UNSETTLED,
    AuditRecord,
    is_dsn,
    mapped,
    shown_dsn,
)


def read_audit(path: str | Path, *, session: str | None = None, code: str | None = None,
                 since: float | None = None, until: float | None = None,
                 loop_id: str | None = None, last: int | None = None,
                 device: str | None = None, proposer: str | None = None,
                 caller: str | None = None, after: int | None = None,
                 intents: bool = True) -> list[AuditRecord]:
    """Read records of an audit database, oldest first, opened read-only.

    Args:
        path: the database file, or a PostgreSQL store's ``postgresql://`` URL.
        session: only this session's records.
        code: only records with this verdict code (a stop reason for stops); ``"ok"`` selects
            accepted calls.
        since: only records at or after this Unix time (seconds, finite).
        until: only records before this Unix time (seconds, finite).
        loop_id: only the records of this loop (its full id; see :func:`find_loop`).
        last: only the last ``last`` matching records, 0..2**63-1 (SQLite's largest
            INTEGER).
        device: only the records of calls that reached this device (its id, as in
            :attr:`AuditRecord.device`).
        proposer: only the records of calls (and loop stops) this proposer made.
        caller: only the records of calls this caller sent (``token:NAME``,
            ``oauth:SUBJECT``: the authenticated callers of ``regdev serve --http``).
        after: only the records after this id (``regdev audit --follow`` reads on from the
            last record it showed).
        intents: False leaves out every intent record (an intent whose call record was
            written is always left out; one without is shown, as ``outcome-unknown``).

    Each filter but ``code="ok"`` is answered through an index of its column
    (:data:`~regdev.audit._record.INDEXES`): in time proportional to the records it
    matches, not to the log's size.

    Returns:
        The matching records in append order.

    Raises:
        AuditError: no database at ``path``, not a regdev audit log, or unreadable.
        ValueError: ``since`` or ``until`` is not a finite number, or ``last`` is out of
            range.
    """
    for name, bound in (("since", since), ("until", until)):
        if bound is not None and not math.isfinite(bound):
            raise ValueError(f"{name} must be a finite Unix time in seconds, got {bound!r}")
    if last is not None and not 0 <= last <= 2**63 - 1:
        raise ValueError(f"last must be in 0..{2**63 - 1}, got {last!r}")
    path = _target(path)
    where: list[str] = []
    params: list[object] = []
    for column, value in (("session", session), ("loop_id", loop_id), ("{device}", device),
                          ("{proposer}", proposer), ("{caller}", caller)):
        if value is not None:  # {added column}: NULL in a database not yet upgraded (_query)
            where.append(f"{column} = ?")
            params.append(value)
    if code == "ok":
        where.append("ok = 1 AND event = 'call'")
    elif code is not None:
        where.append("code = ?")
        params.append(code)
    if since is not None:
        where.append("time >= ?")
        params.append(since)
    if until is not None:
        where.append("time < ?")
        params.append(until)
    if after is not None:
        where.append("id > ?")
        params.append(after)
    # An intent whose call record was written is no news: only those without one are shown.
    where.append("{unsettled}" if intents else "event <> 'intent'")
    # A time range alone is read through calls_by_time: SQLite, without statistics of the
    # range, would rather scan the table in id order than sort what the index finds.
    by_time = (since is not None or until is not None) and all(
        value is None for value in (session, loop_id, device, proposer, caller, code))
    table = "{calls_by_time}" if by_time else "calls"
    query = f"SELECT id, {{columns}} FROM {table}"  # the columns this database has (_query)
    if where:
        query += " WHERE " + " AND ".join(where)
    if last is not None:
        query = f"SELECT * FROM ({query} ORDER BY id DESC LIMIT {int(last)}) AS last_ones"
    query += " ORDER BY id"
    plan = _PLAN.get()
    if plan is not None:  # explain_audit's: the plan, not the records
        plan.extend(str(row[-1]) for row in _query(
            path, ("EXPLAIN QUERY PLAN " if isinstance(path, Path) else "EXPLAIN ") + query,
            params))
        return []
    rows = _query(path, query, params)
    records = []
    for row in rows:
        values = list(row)
        values[10], values[19] = bool(values[10]), bool(values[19])  # ok, replay
        records.append(AuditRecord(*values))
    return records


#: Set by :func:`explain_audit`: where :func:`read_audit` puts its query's plan.
_PLAN: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("regdev_plan",
                                                                         default=None)


def explain_audit(path: str | Path, **filters: Any) -> list[str]:
    """How the store would answer :func:`read_audit` with ``filters``: the lines of its
    query plan (SQLite's ``EXPLAIN QUERY PLAN``, PostgreSQL's ``EXPLAIN``), to check that a
    filter is answered through its index.

    Raises:
        as :func:`read_audit`.
    """
    plan: list[str] = []
    token = _PLAN.set(plan)
    try:
        read_audit(path, **filters)
    finally:
        _PLAN.reset(token)
    return plan


def find_loop(path: str | Path, prefix: str) -> str:
    """The full id of the one loop in an audit database whose id starts with ``prefix`` (the
    text view of ``regdev audit`` shows the first 8 characters).

    Raises:
        AuditError: no database at ``path``, not a regdev audit log, or no loop or more than
            one loop id starts with ``prefix`` (the message lists up to 5 of them).
    """
    path = _target(path)
    rows = _query(path, "SELECT DISTINCT loop_id FROM calls WHERE substr(loop_id, 1, ?) = ? "
                        "ORDER BY loop_id LIMIT 6", [len(prefix), prefix])
    if len(rows) == 1:
        return str(rows[0][0])
    where = shown_dsn(path) if isinstance(path, str) else path
    if not rows:
        raise AuditError(f"no loop id in {where} starts with {prefix!r}")
    shown = ", ".join(str(row[0]) for row in rows[:5]) + (", ..." if len(rows) > 5 else "")
    raise AuditError(f"{len(rows) if len(rows) <= 5 else 'more than 5'} loop ids in {where} "
                     f"start with {prefix!r} ({shown}); give more of the id")


def _target(path: str | Path) -> Path | str:
    """The store at ``path``: a PostgreSQL URL as given, or a database file that exists."""
    if is_dsn(path):
        return str(path)
    path = Path(path)
    _check_exists(path)
    return path


def _check_exists(path: Path) -> None:
    """AuditError unless ``path`` is a file (the reading functions never create one)."""
    with mapped(f"cannot read the audit database {path}"):
        if path.is_dir():
            raise AuditError(f"{path} is a directory, not an audit database")
        if not path.is_file():
            raise AuditError(f"no audit database at {path}")


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """Open the database at ``path`` read-only, where it lies, whatever the place allows.

    SQLite's ``mode=ro`` reads a database in WAL mode only when its WAL index (``-shm``)
    exists or can be made beside it. On a read-only filesystem, or in a folder this user may
    not write (a log kept by another user), a database closed cleanly has neither ``-wal`` nor
    ``-shm`` and cannot be opened so; it is then opened ``immutable=1``, which reads the file
    alone, as a snapshot: right, because every committed record is in the file once its WAL
    is gone ("Write-Ahead Logging", "Read-Only Databases", sqlite.org). A ``-wal`` that holds
    records without its ``-shm`` beside it cannot be read in such a place: an AuditError says
    so (the file alone would silently miss those records).

    Raises:
        sqlite3.Error, OSError: the database cannot be opened (for :func:`mapped`).
        AuditError: the records in its WAL cannot be read where it lies.
    """
    uri = path.resolve().as_uri()
    conn = sqlite3.connect(uri + "?mode=ro", uri=True)
    try:
        conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()  # opens the file
        return conn
    except sqlite3.OperationalError:
        conn.close()
        folder = path.resolve().parent
        if os.access(folder, os.W_OK) and not os.statvfs(folder).f_flag & os.ST_RDONLY:
            raise  # not the place: the error is the database's own
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size:
        raise AuditError(f"cannot read the audit database {path}: its write-ahead log {wal} "
                         "holds records, which SQLite reads only with the WAL index "
                         f"{path.name}-shm beside it, and {folder} cannot be written; copy "
                         f"{path.name} and {wal.name} to a folder you can write and read the "
                         "copy")
    return sqlite3.connect(uri + "?immutable=1", uri=True)


def _query(path: Path | str, query: str, params: list[object]) -> list[tuple[Any, ...]]:
    """Run one query on the audit database at ``path``, opened read-only (see
    :func:`_connect_read_only`); a PostgreSQL store's through
    :func:`regdev.audit._pgschema.query`."""
    if isinstance(path, str):
        from ._pgschema import query as postgres_query  # noqa: PLC0415 - optional extra

        return postgres_query(path, query, params)
    with mapped(f"cannot read the audit database {path}"):
        conn = _connect_read_only(path)
        try:
            has_calls = conn.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'table' "
                                     "AND name = 'calls'").fetchone()[0]
            if not has_calls:
                raise AuditError(f"{path} is not a regdev audit log")
            if "{columns}" in query:  # an added column a database not yet upgraded lacks: NULL
                have = {row[1] for row in conn.execute("PRAGMA table_info(calls)")}
                query = query.replace("{columns}", ", ".join(
                    name if name in have else f"NULL AS {name}" for name in COLUMNS))
                query = query.replace("{unsettled}", UNSETTLED if "intent" in have else "1 = 1")
                indexed = conn.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'index' "
                                       "AND name = 'calls_by_time'").fetchone()[0]
                query = query.replace("{calls_by_time}", "calls INDEXED BY calls_by_time"
                                      if indexed else "calls")
                for name, _ in ADDED_COLUMNS:  # and in a filter, {name}
                    query = query.replace(f"{{{name}}}", name if name in have else "NULL")
            rows: list[tuple[Any, ...]] = conn.execute(query, params).fetchall()
        finally:
            conn.close()
    return rows
