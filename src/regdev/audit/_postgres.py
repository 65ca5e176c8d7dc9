"""The PostgreSQL store: the audit log, its idempotency keys and device resets in one
PostgreSQL database that several regdev processes share (``--audit postgresql://...``).

Rules of this file:

* The same records as the SQLite log (:mod:`regdev.audit._record`), column for column: the
  ``calls`` table is built here from :data:`~regdev.audit._record.COLUMNS` and
  :data:`~regdev.audit._record.ADDED_COLUMNS` (a column added there is added here, to a new
  database and to an existing one when it is opened), with the types of :data:`_TYPES`.
  Append-only as there: triggers refuse UPDATE and DELETE of records, keys and resets.
* Several writers: any number of processes open one database; each commits its own records
  by the group commit of :class:`~regdev.audit._writer.AuditLog` (the same code, over
  psycopg). Records are in ``id`` order of their insertion; two processes' records
  interleave.
* Idempotency keys are shared, not kept in memory (:class:`SharedKeys`): a call reserves its
  key by a row of ``idempotency_running`` (one per key; a reservation older than
  :data:`RESERVATION_SECONDS` is taken over: its process died), then looks for a stored key;
  the key's row is inserted and its reservation deleted in the transaction of the write's
  record. So a keyed write runs once across every process; a retry that lands on another
  process while it runs gets ``idempotency-in-progress``, after it the stored observation
  (``idempotency-unconfirmed`` on a device that cannot say its reset epoch).
  A device's reset epoch (``device_resets``) is read from the database at every keyed call.
* Serial lines are leased (:class:`LineLeases`, table ``serial_leases``): a row per line names
  the process that drives it and when its lease expires, by the server's clock
  (``clock_timestamp()``), so no two hosts' clocks are compared. The owner renews it every
  ``renew_seconds``; it counts the line its own only until ``seconds`` after it *sent* its
  last successful renewal (by its own monotonic clock), which is never later than the expiry
  the server wrote: so once another process takes an expired lease over, the old owner has
  stopped driving the line, even when it could not reach the server to hear of it. A row,
  not an advisory lock: a session's lock outlives its process for as long as the server
  takes to see the connection is dead (TCP keepalive, hours across a network), and its
  holder cannot tell when it lost it; an expiry bounds both.
* A schema version table (``regdev_schema``, one row): a database of another version is
  refused, with what to do; a database holding other tables named ``calls`` is refused.
* psycopg's errors become :class:`~regdev.AuditError` in :func:`~regdev.audit._record.mapped`
  (the one place) and a failed commit's text in :meth:`PostgresAuditLog._problem`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import select
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from ..core._errors import AuditError, LineElsewhere
from ..core._observation import Observation, Refusal
from ..core._wording import postgres_problem
from ._idempotency import (
    IdempotencyStore,
    KeyRow,
    Slot,
    conflict,
    in_progress,
    replayed,
    unconfirmed,
)
from ._pgschema import _one, _placeholders, check_version, connect
from ._record import (
    mapped,
    shown_dsn,
)
from ._writer import MAX_ROWS_PER_INSERT, AuditLog, _as_text, _Pending, _statement

logger = logging.getLogger("regdev")

#: Seconds after which a key's reservation is taken over by another call: its process died
#: (a running call holds its key for the time of its write, approval included).
RESERVATION_SECONDS = 600.0

_TAKE = """
INSERT INTO rate_buckets AS b (name, tokens, at, took)
VALUES (%(name)s, %(burst)s - 1, extract(epoch FROM clock_timestamp()), true)
ON CONFLICT (name) DO UPDATE SET
    tokens = least(%(burst)s, b.tokens + (EXCLUDED.at - b.at) * %(rate)s)
             - CASE WHEN least(%(burst)s, b.tokens + (EXCLUDED.at - b.at) * %(rate)s) >= 1
                    THEN 1 ELSE 0 END,
    took = least(%(burst)s, b.tokens + (EXCLUDED.at - b.at) * %(rate)s) >= 1,
    at = EXCLUDED.at
RETURNING took, tokens
"""

_CURRENT_EPOCH = ("coalesce((SELECT epoch FROM device_resets WHERE device = %(device)s "
                  "ORDER BY id DESC LIMIT 1), '')")
#: Reserve a key: a new row, or one whose reservation expired; the epoch it is reserved in.
_RESERVE = f"""
INSERT INTO idempotency_running AS r
    (device, session, key, fingerprint, epoch, owner, expires)
VALUES (%(device)s, %(session)s, %(key)s, %(print)s, {_CURRENT_EPOCH}, %(owner)s,
        clock_timestamp() + make_interval(secs => %(seconds)s))
ON CONFLICT (device, session, key) DO UPDATE
    SET fingerprint = EXCLUDED.fingerprint, epoch = EXCLUDED.epoch, owner = EXCLUDED.owner,
        expires = EXCLUDED.expires
    WHERE r.expires < clock_timestamp()
RETURNING epoch
"""
#: The key stored in the device's current epoch, and the fingerprint of a call running it.
_LOOK_UP = f"""
SELECT (SELECT fingerprint FROM idempotency_keys WHERE device = %(device)s
            AND epoch = {_CURRENT_EPOCH} AND session = %(session)s AND key = %(key)s),
       (SELECT observation FROM idempotency_keys WHERE device = %(device)s
            AND epoch = {_CURRENT_EPOCH} AND session = %(session)s AND key = %(key)s),
       (SELECT time FROM idempotency_keys WHERE device = %(device)s
            AND epoch = {_CURRENT_EPOCH} AND session = %(session)s AND key = %(key)s),
       (SELECT fingerprint FROM idempotency_running WHERE device = %(device)s
            AND session = %(session)s AND key = %(key)s)
"""
_RELEASE = ("DELETE FROM idempotency_running WHERE device = %s AND session = %s AND key = %s "
            "AND owner = %s")
_INSERT_KEY = (f"INSERT INTO idempotency_keys ({', '.join(KeyRow._fields)}) "
               f"VALUES ({', '.join(['%s'] * len(KeyRow._fields))}) ON CONFLICT DO NOTHING")
#: A key's values in :func:`_with_keys` (``?`` placeholders, as the writer's statements).
_KEY_VALUES = "(" + ", ".join("?" * len(KeyRow._fields)) + ")"


def _with_keys(statement: str, params: list[Any], keys: list[KeyRow],
               owner: str) -> tuple[str, list[Any]]:
    """The INSERT of records ``statement`` (the writer's, ``?`` placeholders) made one
    statement with the storing of ``keys`` and the deletion of their reservations (by
    ``owner``): data-modifying common table expressions, so that records, keys and
    reservations commit together in one statement, one round trip (PostgreSQL, "WITH
    Queries", "Data-Modifying Statements in WITH")."""
    stored = (f"INSERT INTO idempotency_keys ({', '.join(KeyRow._fields)}) VALUES "
              + ", ".join([_KEY_VALUES] * len(keys)) + " ON CONFLICT DO NOTHING")
    released = ("DELETE FROM idempotency_running WHERE owner = ? AND (device, session, key) IN ("
                + ", ".join(["(?, ?, ?)"] * len(keys)) + ")")
    return (f"WITH stored AS ({stored}), released AS ({released}) {statement}",
            [*(value for key in keys for value in key), owner,
             *(value for key in keys for value in (key.device, key.session, key.key)),
             *params])


@functools.lru_cache(maxsize=256)
def _converted(statement: str) -> str:
    """A record's INSERT (the same string object each time, hashed once) in psycopg's
    placeholders."""
    return _placeholders(statement)
_INSERT_RESET = "INSERT INTO device_resets (device, epoch, time) VALUES (%s, %s, %s)"


def _cut(conn: psycopg.Connection[Any]) -> bool:
    """Whether ``conn`` is broken, or was closed by the server while idle (a restart sends
    each session a FATAL message and closes it): found before a statement is sent, so that
    none is sent into a closed connection and the call refused for it. An idle connection in
    autocommit is sent nothing unasked for here (no LISTEN, no asynchronous notices expected),
    so anything waiting on its socket means the server is done with it; at worst a live one
    is made again. One poll of the socket, without waiting."""
    if conn.broken or conn.closed:
        return True
    try:
        return bool(select.select([conn.fileno()], [], [], 0)[0])
    except (OSError, ValueError):  # its socket is gone
        return True


class SharedKeys(IdempotencyStore):
    """The idempotency keys of a PostgreSQL store, in the database (see the module
    docstring); the calls this process runs are remembered by their epoch. Thread-safe (one
    connection, one statement at a time).

    Raises (each method):
        AuditError: the database cannot be reached (nothing is reserved then).
    """

    def __init__(self, conn: psycopg.Connection[Any], name: str, dsn: str) -> None:
        super().__init__()
        self._conn = conn
        self._name = name
        self._dsn = dsn
        self._owner = uuid.uuid4().hex
        self._lock = threading.Lock()

    def _live(self) -> psycopg.Connection[Any]:
        """The connection, made again when the last one broke or was closed by the server
        while idle (:func:`_cut`: the server restarted); the
        lock held.

        Raises:
            psycopg.Error: the server cannot be reached.
        """
        if _cut(self._conn):
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=10)
        return self._conn

    def _params(self, slot: Slot, print_: bytes = b"") -> dict[str, Any]:
        return {"device": slot[0], "session": slot[1], "key": slot[2], "print": print_,
                "owner": self._owner, "seconds": RESERVATION_SECONDS}

    def begin(self, slot: Slot, print_: bytes, *,
              replay: bool = True) -> Observation | Refusal | None:
        """As :meth:`IdempotencyStore.begin`, across every process of the database."""
        params = self._params(slot, print_)
        with self._lock, mapped(f"cannot reach the audit database {self._name}"):
            conn = self._live()
            # Both sent at once: one round trip, each statement its own snapshot, in order
            # (psycopg's pipeline mode: libpq 14 or later, as the binary build bundles).
            with conn.pipeline():
                reserving = conn.execute(_RESERVE, params)
                looking = conn.execute(_LOOK_UP, params)
            row = reserving.fetchone()
            stored_print, observation, stored_at, running = _one(looking)
            reserved = row is not None
            if stored_print is not None:
                if reserved:  # stored already: the reservation was not needed
                    self._live().execute(_RELEASE, (*slot, self._owner))
                if bytes(stored_print) != print_:
                    return conflict(slot[2])
                if not replay:
                    return unconfirmed(slot[2], observation, float(stored_at))
                return replayed(observation)
            if row is not None:
                self._running[slot] = (print_, row[0])
                return None
        if running is not None and bytes(running) == print_:
            return in_progress(slot[2])
        return conflict(slot[2])

    def complete(self, slot: Slot, print_: bytes, observation: str,
                 time: float | None = None) -> None:
        """The key's row was committed with its record (and its reservation deleted)."""
        self._running.pop(slot, None)

    def release(self, slot: Slot) -> None:
        """Drop this process's reservation of the key in ``slot``: the key can be used again
        (a failure to reach the database leaves it to expire)."""
        self._running.pop(slot, None)
        with self._lock, contextlib.suppress(psycopg.Error):
            self._live().execute(_RELEASE, (*slot, self._owner))

    def end_epoch(self, device: str) -> str:
        """A new epoch for ``device``'s keys; it begins once its row of ``device_resets`` is
        committed (:meth:`PostgresAuditLog.record_reset`)."""
        return uuid.uuid4().hex

    def get(self, slot: Slot) -> str | None:
        """The stored observation JSON for the key in ``slot`` (the current epoch), or None."""
        with self._lock, mapped(f"cannot reach the audit database {self._name}"):
            found: str | None = _one(self._live().execute(_LOOK_UP, self._params(slot)))[1]
            return found

    def __len__(self) -> int:
        """The number of stored keys (of every epoch)."""
        with self._lock, mapped(f"cannot reach the audit database {self._name}"):
            return int(_one(self._live().execute("SELECT count(*) FROM idempotency_keys"))[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


_TAKE_LEASE = """
INSERT INTO serial_leases AS l (line, owner, expires)
VALUES (%(line)s, %(owner)s, clock_timestamp() + make_interval(secs => %(seconds)s))
ON CONFLICT (line) DO UPDATE SET owner = EXCLUDED.owner, expires = EXCLUDED.expires
    WHERE l.owner = EXCLUDED.owner OR l.expires < clock_timestamp()
RETURNING owner
"""
_LEASE_HOLDER = ("SELECT owner, to_char(expires AT TIME ZONE 'UTC', "
                 "'YYYY-MM-DD HH24:MI:SS.MS') FROM serial_leases WHERE line = %s")
_RENEW_LEASES = ("UPDATE serial_leases SET expires = clock_timestamp() + "
                 "make_interval(secs => %s) WHERE owner = %s RETURNING line")
_DROP_LEASES = "DELETE FROM serial_leases WHERE owner = %s"


class LineLeases:
    """The leases of serial lines in the store (see the module docstring): :meth:`hold`
    before every transaction on a line; renewed by a thread every ``renew_seconds``; given
    up by :meth:`close`. A process killed (SIGKILL) keeps its leases until they expire:
    ``seconds`` after its last renewal at most. Thread-safe.

    Args:
        dsn: the store's URL.
        name: the store's name in messages (password hidden).
        seconds: how long a lease lasts unless renewed, > ``renew_seconds``.
        renew_seconds: how often the owner renews its leases, > 0.

    Attributes:
        owner: this process as leases name it: ``HOST pid PID (NONCE)``.
    """

    def __init__(self, dsn: str, name: str, seconds: float, renew_seconds: float) -> None:
        if not 0 < renew_seconds < seconds:
            raise ValueError(f"a lease of {seconds:g} s renewed every {renew_seconds:g} s: "
                             "renew it more often than it lasts (0 < renew_seconds < seconds)")
        self._dsn = dsn
        self._name = name
        self.seconds = float(seconds)
        self.renew_seconds = float(renew_seconds)
        self.owner = f"{socket.gethostname()} pid {os.getpid()} ({uuid.uuid4().hex[:8]})"
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        #: The lines held: until when (time.monotonic()) each is this process's.
        self._held: dict[str, float] = {}
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def _live(self) -> psycopg.Connection[Any]:
        """The connection (the lock held), made when there is none or it broke.

        Raises:
            psycopg.Error: the server cannot be reached.
        """
        if self._conn is None or _cut(self._conn):
            if self._conn is not None:
                with contextlib.suppress(psycopg.Error):
                    self._conn.close()
            self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=5)
        return self._conn

    def hold(self, line: str) -> bool:
        """Make sure this process holds the lease of ``line`` for ``renew_seconds`` more at
        least: taken when free or expired, renewed when due; no round trip while it is.

        Returns:
            True when the lease was taken anew (the line may have been driven by another
            process since this one last did: synchronise it again); False when it was held.

        Raises:
            LineElsewhere: another process holds it (the message names it and when its lease
                expires, UTC), or the store cannot be reached to take or renew it.
        """
        now = time.monotonic()
        until = self._held.get(line)
        if until is not None and until - now > self.renew_seconds:
            return False
        sent = time.monotonic()
        try:
            with self._lock:
                conn = self._live()
                taken = conn.execute(_TAKE_LEASE, {"line": line, "owner": self.owner,
                                                   "seconds": self.seconds}).fetchone()
                holder = (None if taken is not None
                          else conn.execute(_LEASE_HOLDER, (line,)).fetchone())
                if taken is not None:
                    self._held[line] = sent + self.seconds
                else:
                    self._held.pop(line, None)
        except psycopg.Error as error:
            with self._lock:
                self._held.pop(line, None)
            raise LineElsewhere(
                f"the serial line {line} was not driven: its lease could not be taken or "
                f"renewed, the audit database {self._name} is out of reach "
                f"({postgres_problem(error)}); nothing was sent") from None
        if taken is None:
            owner, expires = holder if holder is not None else ("another process", "now")
            raise LineElsewhere(
                f"the serial line {line} is driven by another regdev process of the fleet, "
                f"{owner}, whose lease expires at {expires} UTC unless renewed (its owner "
                f"renews it while it runs); nothing was sent: send the call to that process "
                "(behind a load balancer, send it again until it lands there), or again after "
                "that time if it stopped")
        self._start_renewing()
        return until is None or until <= now

    def _start_renewing(self) -> None:
        if self._renewer is None:
            self._renewer = threading.Thread(target=self._renew, daemon=True,
                                             name="regdev line leases")
            self._renewer.start()

    def _renew(self) -> None:
        """Renew this process's leases every ``renew_seconds`` until :meth:`close`; a lease
        not renewed lapses here as it does in the store."""
        while not self._stop.wait(self.renew_seconds):
            sent = time.monotonic()
            try:
                with self._lock:
                    rows = self._live().execute(_RENEW_LEASES,
                                                (self.seconds, self.owner)).fetchall()
                    kept = {row[0] for row in rows}
                    for line in list(self._held):
                        if line in kept:
                            self._held[line] = sent + self.seconds
                        else:
                            del self._held[line]
            except psycopg.Error as error:
                logger.warning("the leases of serial lines were not renewed: the audit "
                               "database cannot be reached: %s", postgres_problem(error))

    def close(self) -> None:
        """Stop renewing and give the leases up (another process may take the lines at
        once); a store out of reach lets them expire."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(self.renew_seconds + 10)
        with self._lock:
            self._held.clear()
            with contextlib.suppress(psycopg.Error):
                self._live().execute(_DROP_LEASES, (self.owner,))
            if self._conn is not None:
                self._conn.close()


class SharedBucket:
    """A rate limit's token bucket kept in the store (table ``rate_buckets``), shared by
    every process: ``rate`` tokens a second, ``burst`` at most, refilled by the database's
    clock. When the database cannot be reached, the call is not limited (logged): the calls
    that change a device are refused then anyway (their records cannot be written).
    """

    def __init__(self, keys: SharedKeys, name: str, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._keys = keys
        self._name = name

    def take(self) -> float:
        """Take one token; 0.0 when taken, else the seconds until one is available."""
        try:
            with self._keys._lock:
                took, tokens = _one(self._keys._live().execute(_TAKE, {
                    "name": self._name, "rate": self.rate, "burst": self.burst}))
        except psycopg.Error as error:
            logger.warning("the rate limit %s was not applied: the audit database cannot be "
                           "reached: %s", self._name, postgres_problem(error))
            return 0.0
        return 0.0 if took else (1.0 - float(tokens)) / self.rate


class SharedQuestions:
    """Approval questions kept in the store (table ``approval_questions``), so that a
    question opened by one process is answered through any: its page is served, and its
    answer taken, by whichever process the approver's request reaches, and the process that
    asked sees the answer (it polls). Also the 2026-07-28 questions answered once across
    every process (:meth:`use`).

    Raises (each method but :meth:`answer_of`):
        AuditError: the database cannot be reached.
    """

    def __init__(self, keys: SharedKeys) -> None:
        self._keys = keys

    def _run(self, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._keys._lock, mapped(f"cannot reach the audit database {self._keys._name}"):
            cursor = self._keys._live().execute(statement, params)
            return cursor.fetchall() if cursor.description is not None else []

    def open(self, question_id: str, text: str, caller: str | None, deadline: float) -> None:
        """Open a question (``text``: the question in words; ``deadline``: Unix seconds)."""
        self._run("INSERT INTO approval_questions (id, page, caller, deadline) "
                  "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                  (question_id, text, caller, deadline))

    def get(self, question_id: str) -> tuple[str, str | None, float, bool] | None:
        """An open question's text, caller, deadline and whether it has its answer; None
        when there is no such question."""
        rows = self._run("SELECT page, caller, deadline, approved IS NOT NULL "
                         "FROM approval_questions WHERE id = %s", (question_id,))
        return (rows[0][0], rows[0][1], float(rows[0][2]), bool(rows[0][3])) if rows else None

    def answer(self, question_id: str, approved: bool, approver: str,
               reason: str | None) -> bool:
        """Record the answer; False when the question had one already or expired."""
        return bool(self._run(
            "UPDATE approval_questions SET approved = %s, approver = %s, reason = %s "
            "WHERE id = %s AND approved IS NULL "
            "AND deadline >= extract(epoch FROM clock_timestamp()) RETURNING id",
            (approved, approver, reason, question_id)))

    def answer_of(self, question_id: str) -> tuple[bool, str | None, str | None] | None:
        """The answer recorded (approved, approver, reason), or None (none yet, or the
        database out of reach: asked again at the next poll)."""
        try:
            rows = self._run("SELECT approved, approver, reason FROM approval_questions "
                             "WHERE id = %s AND approved IS NOT NULL", (question_id,))
        except AuditError:
            return None
        return (bool(rows[0][0]), rows[0][1], rows[0][2]) if rows else None

    def use(self, question_id: str, deadline: float) -> bool:
        """Mark a 2026-07-28 elicitation question answered; False when it was already, in
        any process."""
        return bool(self._run(
            "INSERT INTO approval_questions (id, page, deadline, approved, used) "
            "VALUES (%s, '', %s, true, true) ON CONFLICT DO NOTHING RETURNING id",
            (question_id, deadline)))


class PostgresAuditLog(AuditLog):
    """The audit log in a PostgreSQL database, shared by every process that opens it (see
    the module docstring). Made by :class:`AuditLog` for a ``postgresql://`` URL; takes the
    same arguments. ``durability`` is the server's: a commit returns once PostgreSQL says it
    is durable (``synchronous_commit`` as the server sets it).

    Raises:
        AuditError: the URL is wrong, the server cannot be reached, or the database holds
            another version of the schema (the message says what to do).
    """

    _unstorable_text = (UnicodeEncodeError, psycopg.DataError)
    store_kind = "postgresql"

    def _connect(self, path: str | Path) -> None:
        dsn = str(path)
        self.path = dsn
        self.name = shown_dsn(dsn)
        self._pg = connect(dsn, "cannot open the audit database")
        try:
            with mapped(f"cannot open the audit database {self.name}"):
                check_version(self._pg, self.name, create=True)
                keys_conn = connect(dsn, "cannot open the audit database")
        except BaseException:
            self._pg.close()
            raise
        self.idempotency = SharedKeys(keys_conn, self.name, dsn)
        self._cursor = self._pg.cursor()
        self._rows_per_insert = MAX_ROWS_PER_INSERT

    def shared_questions(self) -> SharedQuestions:
        """The approval questions of the store, shared by every process
        (:class:`SharedQuestions`)."""
        assert isinstance(self.idempotency, SharedKeys)
        return SharedQuestions(self.idempotency)

    def line_leases(self, seconds: float, renew_seconds: float) -> LineLeases:
        """The leases of serial lines in the store (:class:`LineLeases`); close them before
        the log.

        Raises:
            ValueError: ``renew_seconds`` is not in 0 < renew_seconds < seconds.
        """
        return LineLeases(str(self.path), self.name, seconds, renew_seconds)

    def shared_bucket(self, name: str, rate: float, burst: int) -> SharedBucket:
        """The bucket ``name`` of the store's table ``rate_buckets``, shared by every process
        (:class:`SharedBucket`)."""
        assert isinstance(self.idempotency, SharedKeys)
        return SharedBucket(self.idempotency, name, rate, burst)

    @staticmethod
    def _as_text(row: tuple[Any, ...]) -> tuple[Any, ...]:
        """``row`` with a lone surrogate escaped, and NUL too (PostgreSQL's text holds
        none): as ``\\x00``."""
        return tuple(value.replace("\x00", "\\x00") if type(value) is str else value
                     for value in _as_text(row))

    @staticmethod
    def _problem(error: BaseException) -> str:
        if isinstance(error, psycopg.Error):
            return postgres_problem(error)
        return AuditLog._problem(error)

    def _rollback(self) -> None:
        pass  # the failed transaction block rolled back on its way out

    def _live(self) -> psycopg.Cursor[Any]:
        """The writing connection's cursor (one, kept: a commit makes none), made again
        when the connection broke or the server closed it while idle (:func:`_cut`: after a
        restart, the next write is served; while the server is down, the records a failed
        commit lost are logged, and calls that change a device are refused); the commit lock
        held.

        Raises:
            psycopg.Error: the server cannot be reached.
        """
        if _cut(self._pg):
            with contextlib.suppress(psycopg.Error):
                self._pg.close()
            self._pg = psycopg.connect(str(self.path), autocommit=True, connect_timeout=10)
            self._cursor = self._pg.cursor()
        return self._cursor

    def _insert_reset(self, device: str, epoch: str, time: float) -> None:
        self._live().execute(_INSERT_RESET, (device, epoch, time))

    def _insert(self, batch: list[_Pending], keys: list[KeyRow]) -> None:
        """One statement in autocommit (one round trip, one commit) for a batch that one
        INSERT holds, its keys stored and their reservations deleted by the same statement
        (:func:`_with_keys`); a longer batch in a transaction of several."""
        cursor, step = self._live(), self._rows_per_insert
        if len(batch) == 1 and not keys:  # a write's record alone: its shape's statement
            cursor.execute(_converted(batch[0].shape.one), batch[0].params)
            return
        owner: str = self.idempotency._owner  # type: ignore[attr-defined]
        if len(batch) <= step:
            statement, params = _statement(batch)
            if keys:
                statement, params = _with_keys(statement, params, keys, owner)
            cursor.execute(_placeholders(statement), params)
            return
        conn = self._pg
        with conn.transaction():
            for start in range(0, len(batch), step):
                statement, params = _statement(batch[start:start + step])
                conn.execute(_placeholders(statement), params)
            if keys:
                cursor = conn.cursor()
                cursor.executemany(_INSERT_KEY, keys)
                cursor.executemany(_RELEASE, [(key.device, key.session, key.key, owner)
                                              for key in keys])

    def _disconnect(self) -> None:
        try:
            with mapped(f"cannot close the audit database {self.name}"):
                self._pg.close()
        finally:
            keys = self.idempotency
            if isinstance(keys, SharedKeys):
                keys.close()
