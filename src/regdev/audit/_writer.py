"""The audit writer: :class:`AuditLog` appends records to the SQLite database (WAL mode) by
group commit, with a background flusher that also runs the checkpoints.

Rules of this file:

* A record whose call ran a tool that changes the device is *durable*: :meth:`AuditLog.append`
  returns only once it is committed, so a crash can never lose the record of an acknowledged
  write (nor its idempotency key, inserted in the same transaction). Every other record (reads,
  refusals, replays, loop stops) waits in memory until a commit takes it along: the next durable
  commit, or the background flusher's, at most ``flush_interval`` seconds (default 0.05) after
  it was appended plus the time of a commit already running and, about once every
  :data:`CHECKPOINT_FRAMES` commits, of the flusher's checkpoint (milliseconds).
  :meth:`AuditLog.close` (and interpreter exit) commits everything.
* Group commit, plainly: one commit at a time (a lock), and every commit takes every record
  pending at its start, in append order, in one transaction. A durable writer appends its
  record, takes the lock, and commits unless a commit that ran meanwhile already took its
  record along; so writers arriving while a commit runs share the next one. No writer waits
  for another's commit by design: a committer thread and a leader hand-over both measured
  slower under CPython's interpreter lock (``benchmarks/README.md``).
* When a commit fails, its records are lost (logged) and :attr:`AuditLog.failure` holds the
  error until a later commit succeeds; the gate refuses calls that would change the device
  meanwhile (fail closed). The records of those refusals are what the next commit tries.
* Durability: ``"crash"`` (the default) is WAL with ``synchronous=NORMAL``: a committed record is
  in the operating system's file cache when the commit returns and survives the process being
  killed, but the last commits can be lost if the machine loses power or the OS crashes.
  ``"power-loss"`` is ``synchronous=FULL``: each commit is flushed to stable storage (fsync)
  before it returns, which costs a disk flush per commit. (SQLite, "Write-Ahead Logging" and
  "PRAGMA synchronous", sqlite.org.)
* Checkpoints (copying the WAL into the database file, with a sync of each) run on the
  flusher's own connection once about :data:`CHECKPOINT_FRAMES` WAL frames accumulated, not
  inside a writer's commit as SQLite's automatic checkpoint would (a writer paid about 12 us a
  commit for it, averaged); the writing connection keeps an automatic checkpoint at
  :data:`BACKSTOP_CHECKPOINT_FRAMES` frames in case the flusher's fail or fall behind.
* One writer a database: each :class:`AuditLog` indexes the idempotency keys in memory when it
  opens the database, so a second writer would not see the first's keys nor its device resets,
  and would replay a stale key: it holds the writer's lock (:mod:`regdev.audit._lock`) from its
  opening to :meth:`AuditLog.close`.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import sqlite3
import threading
import time as _time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from functools import lru_cache
from operator import itemgetter
from pathlib import Path
from typing import Any, Literal

from ..core import _telemetry
from ..core._errors import AuditError
from ..core._limits import seconds_problem
from ..core._observation import PIPELINE, Observation, Refusal, refuse
from ..core._text import is_text, text_bytes
from ..core._wording import sqlite_problem
from ._idempotency import (
    INSERT_KEY,
    INSERT_RESET,
    KEYS_SCHEMA,
    SELECT_CURRENT_KEYS,
    SELECT_EPOCHS,
    IdempotencyStore,
    KeyRow,
    Slot,
)
from ._lock import check_database_file, lock_path, release_lock, take_lock
from ._reader import read_audit
from ._record import (
    COLUMNS,
    INDEXES,
    INSERT_INTO,
    MIGRATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    STAGE_TIMES,
    AuditRecord,
    add_columns,
    encode_json,
    is_dsn,
    mapped,
    shown_dsn,
)

logger = logging.getLogger("regdev")

#: Longest wait, in seconds, of a record that is not durable before the flusher commits it.
DEFAULT_FLUSH_INTERVAL = 0.05
#: Bytes of each raw call kept in the audit log (its full size and SHA-256 are kept too).
DEFAULT_MAX_RAW_BYTES = 4096
#: WAL frames (pages) a background checkpoint lets accumulate: SQLite's own default
#: ``wal_autocheckpoint``, but run by the flusher on its own connection, off the writers' path.
CHECKPOINT_FRAMES = 1000
#: The writing connection's ``wal_autocheckpoint``: the backstop should the flusher's
#: checkpoints fall behind or fail (SQLite, "Write-Ahead Logging", "Automatic Checkpoint").
BACKSTOP_CHECKPOINT_FRAMES = 10 * CHECKPOINT_FRAMES
#: Records waiting to be committed beyond which an appending caller commits them itself.
MAX_PENDING = 4096

Durability = Literal["crash", "power-loss"]
_SYNCHRONOUS: dict[str, str] = {"crash": "NORMAL", "power-loss": "FULL"}
#: What an intent record says (:meth:`AuditLog.record_intent`) until its call's record follows.
_INTENT = Observation(refusal=refuse(
    "outcome-unknown",
    "the write was sent to the device and no outcome was recorded after it (the process "
    "stopped first): it may or may not have run; read the register back"))
#: The stage times of a record that has none.
_NOT_TIMED = (None,) * len(STAGE_TIMES)
#: A record's stage times and device when it has none (a loop's stop; the proposer follows,
#: then :data:`_NO_CALLER`).
_NO_TIMES = (None,) * (len(STAGE_TIMES) + 2)
#: A loop stop's caller, approver, approval, intent, map and trace: none.
_NO_CALLER = (None,) * 6
#: Most records in one multi-row INSERT (fewer when SQLite allows fewer parameters). Python's
#: sqlite3 gives up the interpreter lock around every statement it steps, and a thread taking
#: it back can wait a whole switch interval (5 ms) behind busy threads; one statement per
#: record made a batch crawl under concurrent callers.
MAX_ROWS_PER_INSERT = 512

#: One record as inserted: the values of the columns above, in order. Rows hold only values
#: that Python's sqlite3 binds without looking for an adapter (int, float, str, bytearray) or
#: None, which :func:`insert_statement` writes as a literal NULL.
Row = tuple[Any, ...]


class _Shape:
    """Where one record's NULLs are, and what follows from it: ``values``, the record's
    ``(?, NULL, ...)`` (a column that is None is written as the literal NULL); ``one``, the
    INSERT of that record alone (the same string object each time: SQLite's statement cache
    finds it without hashing a new string); ``take``, which gives a row's bound values (those
    not None) in column order, as a tuple."""

    __slots__ = ("one", "take", "values")

    def __init__(self, nulls: tuple[bool, ...]) -> None:
        self.values = "(" + ", ".join("NULL" if null else "?" for null in nulls) + ")"
        self.one = INSERT_INTO + self.values
        bound = [at for at, null in enumerate(nulls) if not null]
        self.take: Callable[[Row], tuple[Any, ...]] = itemgetter(*bound) if len(bound) > 1 \
            else lambda row: tuple([row[at] for at in bound])


@lru_cache(maxsize=256)
def _shape(nulls: tuple[bool, ...]) -> _Shape:
    """The shape of the records whose column ``i`` is None when ``nulls[i]``: one object per
    pattern (of the last 256 patterns seen; a call record has a few dozen at most)."""
    return _Shape(nulls)


def _shape_of(row: Row) -> _Shape:
    """The shape of ``row``, found from its values (:meth:`AuditLog.record_call` tells it from
    its arguments, which costs less)."""
    return _shape(tuple([value is None for value in row]))


def insert_statement(rows: Sequence[Row]) -> tuple[str, list[Any]]:
    """One INSERT of ``rows`` (at most :data:`MAX_ROWS_PER_INSERT`) and its parameters.

    A None is written into the statement as ``NULL`` instead of being bound: Python's
    sqlite3 binds None, bool and bytes through its adapter lookup (a tuple, a dict miss, two
    attribute lookups), about 0.7 us a value on the development machine, which was most of
    what a record cost to insert. (So a row holds ints, not bools, and bytearrays, not bytes.)
    A record alone is inserted by its shape's statement, the very string object the audit log
    commits a write by.
    """
    records = []
    for row in rows:
        shape = _shape_of(row)
        records.append(_Pending(shape, shape.take(row), None))
    return _statement(records)


def _statement(records: Sequence[_Pending]) -> tuple[str, list[Any]]:
    """One INSERT of ``records`` and its parameters (a record alone: its shape's INSERT)."""
    if len(records) == 1:
        return records[0].shape.one, list(records[0].params)
    return (INSERT_INTO + ", ".join([record.shape.values for record in records]),
            [value for record in records for value in record.params])


class _Pending:
    """A record waiting for a commit: its shape, its bound values and the idempotency key
    to store with it; ``outcome`` is set by the commit that takes it: True, or the error text
    that lost it."""

    __slots__ = ("key_row", "outcome", "params", "shape")

    def __init__(self, shape: _Shape, params: tuple[Any, ...], key_row: KeyRow | None) -> None:
        self.shape = shape
        self.params = params
        self.key_row = key_row
        self.outcome: object = None

def _as_text(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """``row`` with each str that is not Unicode text (a lone surrogate) backslash-escaped, so
    that SQLite can store it as UTF-8."""
    return tuple(value.encode("utf-8", "backslashreplace").decode("utf-8")
                 if type(value) is str and not is_text(value) else value for value in row)


class AuditLog:
    """An append-only audit log in one SQLite database, with group commit.

    Args:
        path: the database file; created with its parent folders when missing.
        durability: ``"crash"`` (default: a committed record survives the process being
            killed) or ``"power-loss"`` (it survives power loss too; ``synchronous=FULL``).
        flush_interval: the longest wait, in seconds (0.001..86400), of a record that is not
            durable (a read, a refusal) before the flusher commits it.
        max_raw_bytes: bytes of each raw call kept (>= 0); its size and SHA-256 are always kept.

    Attributes:
        idempotency: the idempotency keys stored in this database.
        failure: None, or the error of the last commit when it failed (its records are lost);
            cleared by the next commit that succeeds. The gate refuses calls that would change
            the device while it is set.

    Raises:
        AuditInUse: another AuditLog, in this process or another one, has the database open
            (see the module docstring: one writer a database).
        AuditError: the database cannot be opened or created, is not a regdev audit log, or
            cannot use WAL mode.
        ValueError: an argument is out of range.
    """

    def __init__(self, path: str | Path, *, durability: Durability = "crash",
                 flush_interval: float = DEFAULT_FLUSH_INTERVAL,
                 max_raw_bytes: int = DEFAULT_MAX_RAW_BYTES) -> None:
        if type(self) is AuditLog and is_dsn(path):
            raise ValueError(f"{shown_dsn(str(path))} is a PostgreSQL store: open it with "
                             "regdev.open_audit(URL), which gives its AuditLog")
        if durability not in _SYNCHRONOUS:
            raise ValueError(f"durability must be one of {', '.join(_SYNCHRONOUS)}, "
                             f"got {durability!r}")
        problem = seconds_problem(flush_interval)  # 5e-324 s would have the flusher spin
        if problem is not None:
            raise ValueError(f"flush_interval {problem}")
        if type(max_raw_bytes) is not int or max_raw_bytes < 0:
            raise ValueError(f"max_raw_bytes must be an int >= 0, got {max_raw_bytes!r}")
        self.durability = durability
        self.flush_interval = flush_interval
        self.max_raw_bytes = max_raw_bytes
        self.failure: str | None = None
        self._connect(path)
        self._frames = 0  # WAL frames written (at least), counted by commits, since a checkpoint
        self._pending: list[_Pending] = []
        self._pending_lock = threading.Lock()  # guards _pending and _closed
        self._commit_lock = threading.Lock()   # one commit at a time; guards the connection
        self._closed = False
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                         name=f"regdev-audit-flush {self.name}")
        self._flusher.start()
        atexit.register(self.close)

    def _connect(self, path: str | Path) -> None:
        """Open the store at ``path``: set :attr:`path`, :attr:`name`, the writing
        connection and :attr:`idempotency` (SQLite: take the writer's lock, open the database,
        create or upgrade its schema).

        Raises:
            AuditInUse, AuditError: as the class says.
        """
        path = Path(path)
        #: The store: the database file, or (PostgreSQL) the URL given.
        self.path: Path | str = path
        #: The store as messages show it (a URL without its password).
        self.name = str(path)
        with mapped(f"cannot open the audit database {path}"):
            check_database_file(path)  # (raises for a name too long, a folder not ours)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd, created = take_lock(path)
        # A database refused below leaves no lock file of this writer's making beside it.
        made = lock_path(path) if created else None
        try:
            self._conn = self._open(path)
            try:
                with mapped(f"cannot open the audit database {path}"):
                    self._conn.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_CHECKPOINT_FRAMES}")
            except AuditError:
                self._conn.close()
                raise
        except BaseException:
            release_lock(self._lock_fd, made)
            raise

    def _open(self, path: Path) -> sqlite3.Connection:
        conn = None
        with mapped(f"cannot open the audit database {path}"):
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                   timeout=10.0)
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if mode != "wal":
                    raise AuditError(f"the audit database {path} cannot use WAL mode "
                                     f"(journal mode {mode})")
                conn.execute(f"PRAGMA synchronous={_SYNCHRONOUS[self.durability]}")
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version not in (0, *MIGRATIONS, SCHEMA_VERSION):
                    raise AuditError(f"{path} has audit schema version {version}; this "
                                     f"regdev reads version {SCHEMA_VERSION}")
                if version == 0:
                    tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
                    if tables:
                        raise AuditError(f"{path} is a SQLite database but not a regdev "
                                         "audit log")
                migrate = MIGRATIONS.get(version, "") + add_columns(conn)
                conn.executescript(f"BEGIN IMMEDIATE; {migrate} {SCHEMA} {INDEXES} {KEYS_SCHEMA} "
                                   f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
                keys = conn.execute(SELECT_CURRENT_KEYS).fetchall()
                epochs = dict(conn.execute(SELECT_EPOCHS).fetchall())
            except BaseException:
                conn.close()
                raise
        self.idempotency = IdempotencyStore(keys, epochs)
        limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        self._rows_per_insert = max(1, min(MAX_ROWS_PER_INSERT, limit // len(COLUMNS)))
        return conn

    # --- writing --------------------------------------------------------------------------

    def row(self, *, time: float, session: str, dialect: str | None, raw: object,
            observation: Observation, tool: str | None, arguments: str | None,
            loop_id: str | None = None, step: int | None = None,
            idempotency_key: str | None = None,
            timings: Mapping[str, int] | None = None,
            device: tuple[str, str | None] | None = None, proposer: str | None = None,
            caller: str | None = None, approver: str | None = None,
            approval: str | None = None, intent: str | None = None,
            map_name: str | None = None, trace_id: str | None = None) -> Row:
        """Build one record: the columns of :class:`AuditRecord` but ``id``.

        Args:
            time: Unix time, seconds.
            session: the session's name.
            dialect: the call's dialect.
            raw: the raw call as received: ``bytes``, or a ``str`` recorded as the bytes it
                stands for (:func:`~regdev.core._text.text_bytes`: UTF-8, and an undecodable byte
                that Python carried as a lone surrogate, as from ``sys.argv``, as that byte);
                it is cut to ``max_raw_bytes``, and its full size and SHA-256 are those of
                the bytes recorded. None for a call handed over decoded without text.
            observation: what the caller got.
            tool: the tool name, if the call gave one.
            arguments: the arguments as JSON text.
            loop_id: the loop, if any.
            step: the step in the loop.
            idempotency_key: the call's key, if any.
            timings: nanoseconds spent in each stage reached, by stage name (one of
                :data:`~regdev.core._observation.PIPELINE`).
            device: the device the call reached, ``(id, reset epoch or None)`` (a
                :class:`~regdev.DeviceIdentity`), if known.
            proposer: who proposed the call (``provider:model``, ``mcp:NAME VERSION``), or
                None.
            caller: who sent the call, when authenticated (see :class:`AuditRecord`).
            approver: who answered its approval question, if known.
            approval: how that question was asked.
            intent: the id of the write's intent record (:meth:`record_intent`), if any.
            map_name: the name of the device's register map, or None.
            trace_id: the call's OpenTelemetry trace id (32 hex digits), or None.
        """
        stage_ns = tuple(map(timings.get, PIPELINE)) if timings else _NOT_TIMED
        return self._call_row(time, session, dialect, raw, observation, tool, arguments,
                              loop_id, step, idempotency_key, stage_ns, device, proposer,
                              caller, approver, approval, intent, map_name, trace_id)[0]

    def record_call(self, *, time: float, session: str, dialect: str | None, raw: object,
                    observation: Observation, tool: str | None, arguments: str | None,
                    loop_id: str | None = None, step: int | None = None,
                    idempotency_key: str | None = None,
                    stage_ns: tuple[int | None, ...] = _NOT_TIMED,
                    device: tuple[str, str | None] | None = None, proposer: str | None = None,
                    caller: str | None = None, approver: str | None = None,
                    approval: str | None = None, key_row: KeyRow | None = None,
                    durable: bool = False, intent: str | None = None,
                    map_name: str | None = None, trace_id: str | None = None) -> None:
        """Build a call's record as :meth:`row` does and append it as :meth:`append` does, in
        one step (the record's NULLs are known from the arguments, not looked for in the row).

        Args:
            stage_ns: nanoseconds spent in each stage of
                :data:`~regdev.core._observation.PIPELINE`, in its order (5 values), None for
                a stage the call did not reach.
            key_row: an idempotency key to store in the same transaction.
            durable: commit before returning (with every record pending before it).
            the others: as for :meth:`row`.

        Raises:
            AuditError: the log is closed, or (``durable``) the commit failed.
        """
        row, shape = self._call_row(time, session, dialect, raw, observation, tool, arguments,
                                    loop_id, step, idempotency_key, stage_ns, device, proposer,
                                    caller, approver, approval, intent, map_name, trace_id)
        self._append(shape, shape.take(row), key_row, durable)

    def record_intent(self, *, time: float, session: str, dialect: str | None,
                      tool: str, arguments: str | None, loop_id: str | None = None,
                      step: int | None = None, idempotency_key: str | None = None,
                      call_id: str | None = None,
                      device: tuple[str, str | None] | None = None,
                      proposer: str | None = None, caller: str | None = None,
                      approver: str | None = None, approval: str | None = None,
                      trace_id: str | None = None) -> str:
        """Record, durably, that a call is about to send a write to the device: an ``intent``
        record (code ``outcome-unknown``), committed (with every record pending before it)
        before this returns. Pass the id it returns to the call's own record
        (:meth:`record_call`'s ``intent``) once the outcome is known; an intent left without
        one says the write may have reached the device and its outcome is unknown. The raw
        call is not kept in it (the call record keeps it).

        Args:
            the same as :meth:`record_call`'s, for the call about to run.

        Returns:
            The intent's id, 16 hex digits.

        Raises:
            AuditError: the log is closed, or the commit failed (send nothing then).
        """
        intent = os.urandom(8).hex()
        row, shape = self._call_row(time, session, dialect, None, _INTENT, tool, arguments,
                                    loop_id, step, idempotency_key, _NOT_TIMED, device,
                                    proposer, caller, approver, approval, intent,
                                    trace_id=trace_id)
        row = (time, "intent", *row[2:16], call_id, *row[17:])
        if call_id is not None:
            shape = _shape_of(row)
        self._append(shape, shape.take(row), None, True)
        return intent

    def _call_row(  # noqa: PLR0917 - positional: on every audited call's path
            self, time: float, session: str, dialect: str | None, raw: object,
            observation: Observation, tool: str | None, arguments: str | None,
            loop_id: str | None, step: int | None, idempotency_key: str | None,
            stage_ns: tuple[int | None, ...], device: tuple[str, str | None] | None,
            proposer: str | None, caller: str | None, approver: str | None,
            approval: str | None, intent: str | None = None,
            map_name: str | None = None, trace_id: str | None = None) -> tuple[Row, _Shape]:
        """A call's record (see :meth:`row`) and its shape, told from the arguments."""
        if raw is None:
            kept = raw_size = raw_sha = None
        else:
            if type(raw) is not bytes:
                raw = text_bytes(raw) if type(raw) is str \
                    else repr(raw).encode("utf-8", "replace")
            raw_size = len(raw)
            raw_sha = bytearray(hashlib.sha256(raw).digest())
            kept = bytearray(raw[: self.max_raw_bytes] if raw_size > self.max_raw_bytes else raw)
        refusal = observation.refusal
        if refusal is None:
            stage = code = message = None
            result = encode_json(observation.result)
        else:
            stage, code, message, result = refusal.stage, refusal.code, refusal.message, None
        call_id = observation.id
        parse_ns, validate_ns, authorize_ns, execute_ns, observe_ns = stage_ns
        device_id, epoch = device if device is not None else (None, None)
        row = (time, "call", session, dialect, loop_id, step, kept, raw_size, raw_sha,
               0 if refusal else 1, stage, code, message, tool, arguments, result, call_id,
               idempotency_key, 1 if observation.replay else 0,
               parse_ns, validate_ns, authorize_ns, execute_ns, observe_ns,
               device_id, epoch, proposer, caller, approver, approval, intent, map_name,
               trace_id)
        # Column for column, which values are None: time, event, ok and replay never are; a
        # refusal's stage, code and message are bound (a None among them would be too: slower
        # than a literal NULL, but stored all the same).
        no_raw, accepted = kept is None, refusal is None
        shape = _shape((False, False, session is None, dialect is None, loop_id is None,
                        step is None, no_raw, no_raw, no_raw, False,
                        accepted, accepted, accepted, tool is None,
                        arguments is None, result is None, call_id is None,
                        idempotency_key is None, False, parse_ns is None, validate_ns is None,
                        authorize_ns is None, execute_ns is None, observe_ns is None,
                        device_id is None, epoch is None, proposer is None, caller is None,
                        approver is None, approval is None, intent is None,
                        map_name is None, trace_id is None))
        return row, shape

    @staticmethod
    def stop_row(*, time: float, session: str, loop_id: str, stop: str, detail: str,
                 steps: int, proposer: str | None = None) -> Row:
        """Build the record of a loop's stop: the reason in ``code``, the detail in
        ``message``, the number of steps in ``step``; ``ok`` when the loop stopped ``done``."""
        return (time, "stop", session, None, loop_id, steps, None, None, None,
                1 if stop == "done" else 0, None, stop, detail, None, None, None, None, None, 0,
                *_NO_TIMES, proposer, *_NO_CALLER)

    def append(self, row: Row, key_row: KeyRow | None = None, *,
               durable: bool = False) -> None:
        """Append one record; with ``durable``, return only once it is committed.

        Args:
            row: the record, from :meth:`row`.
            key_row: an idempotency key to store in the same transaction.
            durable: commit before returning (with every record pending before it).

        Raises:
            AuditError: the log is closed, or (``durable``) the commit failed.
        """
        shape = _shape_of(row)
        self._append(shape, shape.take(row), key_row, durable)

    def _append(self, shape: _Shape, params: tuple[Any, ...], key_row: KeyRow | None,
                durable: bool) -> None:
        """:meth:`append` of a record of ``shape`` whose bound values are ``params``."""
        pending = _Pending(shape, params, key_row)
        with self._pending_lock:
            if self._closed:
                raise AuditError(f"the audit log {self.name} is closed",
                                 "the audit log is closed")
            self._pending.append(pending)
            backlog = len(self._pending) >= MAX_PENDING
        if not (durable or backlog):
            return
        with self._commit_lock:
            if pending.outcome is None:  # no commit took it along while this thread waited
                self._commit()
        outcome = pending.outcome
        if durable and outcome is not True:
            raise AuditError(f"could not commit to the audit database {self.name}: {outcome}",
                             str(outcome))

    def shared_questions(self) -> Any:
        """The approval questions kept in the store for every process that opens it
        (:class:`~regdev.audit._postgres.SharedQuestions`), or None where the store is this
        process's alone (SQLite: None)."""
        return None

    def line_leases(self, seconds: float, renew_seconds: float) -> Any:
        """The leases of serial lines kept in the store, so that one process of those that
        open it drives each line (:class:`~regdev.audit._postgres.LineLeases`), or None
        where the store is this process's alone (SQLite: None).

        Args:
            seconds: how long a lease lasts unless renewed (> ``renew_seconds``).
            renew_seconds: how often its owner renews it (> 0).
        """
        return None

    def shared_bucket(self, name: str, rate: float, burst: int) -> Any:
        """A rate-limit bucket kept in the store for every process that opens it, or None
        where the store is this process's alone (SQLite: None).

        Args:
            name: the bucket's name (a caller and its session).
            rate: tokens added per second (> 0).
            burst: the bucket's size (>= 1).
        """
        return None

    # --- idempotency keys (see ``_idempotency.py``) -----------------------------------------

    def begin_key(self, slot: Slot, print_: bytes, *,
                  replay: bool = True) -> Observation | Refusal | None:
        """Look up the key in ``slot`` for a call with fingerprint ``print_``, reserving it
        when new: None (reserved: store it with :meth:`key_row` and :meth:`complete_key`, or
        :meth:`release_key` it), the stored observation marked as a replay, or a refusal
        (``idempotency-conflict``, ``idempotency-in-progress``). Without ``replay`` (a device
        that cannot say its reset epoch), a key stored for the same call is refused
        ``idempotency-unconfirmed`` instead of replayed."""
        return self.idempotency.begin(slot, print_, replay=replay)

    def key_row(self, slot: Slot, print_: bytes, observation: str, time: float) -> KeyRow:
        """The row that stores the key reserved in ``slot`` (in the epoch of its device when
        it was reserved), for :meth:`append`.

        Raises:
            KeyError: the key in ``slot`` is not reserved.
        """
        return self.idempotency.key_row(slot, print_, observation, time)

    def complete_key(self, slot: Slot, print_: bytes, observation: str,
                     time: float | None = None) -> None:
        """Keep the reserved key's observation JSON in memory (once its row is committed),
        with the Unix time its call arrived (None: now)."""
        self.idempotency.complete(slot, print_, observation, time)

    def release_key(self, slot: Slot) -> None:
        """Free a reserved key whose call did not run: the next call with it runs."""
        self.idempotency.release(slot)

    def record_reset(self, device: str) -> str:
        """Record that ``device`` was (or may have been) reset: its idempotency keys stored so
        far are never replayed again, nor stored when their call is still running. The
        record is committed, with every record pending before it, before this returns.

        The keys end in memory first, so this process never replays one even when the commit
        fails; a failed commit sets :attr:`failure` (calls that change the device are refused
        until a commit succeeds), but a process that opens the database later does not see
        the reset: use fresh keys after one that raised.

        Args:
            device: the scope of the device's keys (``"ID@EPOCH"``,
                :func:`~regdev._idempotency.key_scope`).

        Returns:
            The device's new epoch (32 hex digits), stored in ``device_resets``.

        Raises:
            AuditError: the log is closed, or the commit failed.
        """
        epoch = self.idempotency.end_epoch(device)
        with self._commit_lock:
            if self._closed:  # checked under the commit lock: close() has not closed _conn
                raise AuditError(f"the audit log {self.name} is closed",
                                 "the audit log is closed")
            self._commit()  # the records pending before the reset go first (or are lost)
            outcome: object = True
            telemetry = _telemetry.current  # the commit's latency, when telemetry is on
            began = _time.perf_counter() if telemetry is not None else 0.0
            try:  # autocommit: committed when execute() returns
                self._insert_reset(device, epoch, _time.time())
                self.failure = None
            except Exception as error:  # the backend's errors
                outcome = self.failure = self._problem(error)
                logger.error("the reset of %s was not recorded: could not commit to the "
                             "audit database %s: %s", device, self.name, outcome)
            if telemetry is not None:
                telemetry.commit(_time.perf_counter() - began, self.store_kind, outcome is True)
        if outcome is not True:
            raise AuditError(f"could not commit to the audit database {self.name}: {outcome}",
                             str(outcome))
        return epoch

    def _commit(self) -> object:
        """Commit every pending record in one transaction; call with the commit lock held.

        Returns:
            True, or SQLite's error text when the commit failed (the records are lost).
        """
        with self._pending_lock:
            batch, self._pending = self._pending, []
        if not batch:
            return True
        telemetry = _telemetry.current  # the commit's latency, when telemetry is on
        began = _time.perf_counter() if telemetry is not None else 0.0
        outcome: object = True
        keys = [pending.key_row for pending in batch if pending.key_row is not None]
        try:
            try:
                self._insert(batch, keys)
            except self._unstorable_text:  # text the store cannot hold got this far: keep
                self._rollback()  # the records, with that text backslash-escaped
                self._insert([_Pending(pending.shape, self._as_text(pending.params), None)
                              for pending in batch],
                             [KeyRow(*self._as_text(key)) for key in keys])
            self.failure = None
        except Exception as error:  # the backend's error, or a value it cannot bind: never
            outcome = self.failure = self._problem(error)  # nothing here kills the flusher
            logger.error("%d audit record(s) lost: could not commit to the audit database "
                         "%s: %s", len(batch), self.name, outcome)
            self._rollback()
        for pending in batch:
            pending.outcome = outcome
        if telemetry is not None:
            telemetry.commit(_time.perf_counter() - began, self.store_kind, outcome is True)
        return outcome

    #: The store's kind, as the commit metric names it (``regdev.store``).
    store_kind = "sqlite"

    #: What :meth:`_insert` raises for text the store cannot hold (then retried through
    #: :meth:`_as_text`): SQLite, a lone surrogate.
    _unstorable_text: type[Exception] | tuple[type[Exception], ...] = UnicodeEncodeError

    @staticmethod
    def _as_text(row: tuple[Any, ...]) -> tuple[Any, ...]:
        """``row`` with the text the store cannot hold escaped (:func:`_as_text`)."""
        return _as_text(row)

    @staticmethod
    def _problem(error: BaseException) -> str:
        """The store's error in regdev's words, one line."""
        return sqlite_problem(error)

    def _rollback(self) -> None:
        """End a transaction a failed commit left open (the commit lock held)."""
        if self._conn.in_transaction:
            with suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")

    def _insert_reset(self, device: str, epoch: str, time: float) -> None:
        """Commit one row of ``device_resets`` (the commit lock held)."""
        self._conn.execute(INSERT_RESET, (device, epoch, time))

    def _insert(self, batch: list[_Pending], keys: list[KeyRow]) -> None:
        """Insert the records of ``batch`` and ``keys`` in one transaction (the commit lock
        held)."""
        conn, step = self._conn, self._rows_per_insert
        if not keys and len(batch) == 1:  # a write's record alone: one INSERT in autocommit
            conn.execute(batch[0].shape.one, batch[0].params)
        elif not keys and len(batch) <= step:  # one INSERT in autocommit: one transaction
            conn.execute(*_statement(batch))
        else:
            conn.execute("BEGIN IMMEDIATE")
            for start in range(0, len(batch), step):
                conn.execute(*_statement(batch[start:start + step]))
            if keys:
                conn.executemany(INSERT_KEY, keys)
            conn.execute("COMMIT")
        self._frames += 1 + len(batch) // 8  # a frame a commit, ~8 records a page

    def _flush_loop(self) -> None:
        checkpointer: sqlite3.Connection | None = None
        try:
            while not self._stop.wait(self.flush_interval):
                if self._pending:  # a racy read: at worst this round or the next commits it
                    with self._commit_lock:
                        self._commit()
                if self._frames >= CHECKPOINT_FRAMES:
                    checkpointer = self._checkpoint(checkpointer)
        finally:
            if checkpointer is not None:
                checkpointer.close()

    def _checkpoint(self, conn: sqlite3.Connection | None) -> sqlite3.Connection | None:
        """Copy the WAL into the database on the flusher's own connection (a ``PASSIVE``
        checkpoint: it never blocks a writer), so that no writer pays for it inside its commit.
        A failure is logged and retried later; the writing connection's backstop
        (:data:`BACKSTOP_CHECKPOINT_FRAMES`) bounds the WAL meanwhile."""
        self._frames = 0
        try:
            if conn is None:
                conn = sqlite3.connect(self.path, isolation_level=None,  # a Path here
                                       check_same_thread=False)
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as error:
            logger.warning("could not checkpoint the audit database %s: %s", self.name, error)
        return conn

    def flush(self) -> None:
        """Commit every pending record now.

        Raises:
            AuditError: the log is closed, or the commit failed (those records are lost; the
                error is logged too).
        """
        with self._commit_lock:
            outcome = self._commit()
        if outcome is not True:
            raise AuditError(f"could not commit to the audit database {self.name}: {outcome}",
                             str(outcome))

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def close(self) -> None:
        """Commit every pending record and close the database. Idempotent."""
        with self._pending_lock:
            if self._closed:
                return
            self._closed = True  # nothing can be appended any more
        self._stop.set()
        if self._flusher is not threading.current_thread():
            self._flusher.join()
        with self._commit_lock:  # the last commit: every record appended before close
            self._commit()
            self._disconnect()
        atexit.unregister(self.close)

    def _disconnect(self) -> None:
        """Close the store's connections (the last commit done, the commit lock held)."""
        try:
            with mapped(f"cannot close the audit database {self.name}"):
                self._conn.close()
        finally:
            release_lock(self._lock_fd)  # the last: no commit can follow

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- reading --------------------------------------------------------------------------

    def records(self, **filters: Any) -> list[AuditRecord]:
        """Commit what is pending, then :func:`read_audit` of this database."""
        self.flush()
        return read_audit(self.path, **filters)

    def __repr__(self) -> str:
        return f"AuditLog({self.name!r}, durability={self.durability!r})"
