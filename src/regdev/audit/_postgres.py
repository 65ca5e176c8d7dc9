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
  process while it runs gets ``idempotency-in-progress``, after it the stored observation.
  A device's reset epoch (``device_resets``) is read from the database at every keyed call.
* A schema version table (``regdev_schema``, one row): a database of another version is
  refused, with what to do; a database holding other tables named ``calls`` is refused.
* psycopg's errors become :class:`~regdev.AuditError` in :func:`~regdev.audit._record.mapped`
  (the one place) and a failed commit's text in :meth:`PostgresAuditLog._problem`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg

from ..core._errors import AuditError
from ..core._observation import Observation, Refusal
from ..core._wording import postgres_problem
from ._idempotency import IdempotencyStore, KeyRow, Slot, conflict, in_progress, replayed
from ._record import (
    ADDED_COLUMNS,
    COLUMNS,
    INDEXES,
    STAGE_TIMES,
    UNSETTLED,
    mapped,
    shown_dsn,
)
from ._writer import MAX_ROWS_PER_INSERT, AuditLog, _as_text, _Pending, _statement

logger = logging.getLogger("regdev")

#: This regdev's version of the PostgreSQL schema (table ``regdev_schema``).
POSTGRES_SCHEMA_VERSION = 1
#: Seconds after which a key's reservation is taken over by another call: its process died
#: (a running call holds its key for the time of its write, approval included).
RESERVATION_SECONDS = 600.0

#: The PostgreSQL type of SQLite's types (REAL is float8: SQLite's REAL is 64-bit).
_KINDS = {"TEXT": "TEXT", "INTEGER": "BIGINT", "REAL": "DOUBLE PRECISION", "BLOB": "BYTEA"}
#: The types of the columns ``calls`` was created with (the added ones: ADDED_COLUMNS).
_TYPES = {
    "time": "DOUBLE PRECISION NOT NULL", "event": "TEXT NOT NULL", "session": "TEXT NOT NULL",
    "dialect": "TEXT", "loop_id": "TEXT", "step": "BIGINT", "raw": "BYTEA",
    "raw_bytes": "BIGINT", "raw_sha256": "BYTEA", "ok": "INTEGER NOT NULL", "stage": "TEXT",
    "code": "TEXT", "message": "TEXT", "tool": "TEXT", "arguments": "TEXT", "result": "TEXT",
    "call_id": "TEXT", "idempotency_key": "TEXT", "replay": "INTEGER NOT NULL",
    **{name: "BIGINT" for name in STAGE_TIMES},
    **{name: _KINDS[kind] for name, kind in ADDED_COLUMNS},
}


def _calls_table() -> str:
    columns = ",\n".join(f"    {name} {_TYPES[name]}" for name in COLUMNS)
    return ("CREATE TABLE calls (\n    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n"
            f"{columns}\n);\n")


_APPEND_ONLY = """
CREATE FUNCTION regdev_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION '% is append-only', TG_TABLE_NAME; END $$;
"""
_SCHEMA = _APPEND_ONLY + _calls_table() + """
CREATE TABLE idempotency_keys (
    device      TEXT NOT NULL,
    epoch       TEXT NOT NULL,
    session     TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint BYTEA NOT NULL,
    observation TEXT NOT NULL,
    time        DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (device, epoch, session, key)
);
CREATE TABLE device_resets (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    device      TEXT NOT NULL,
    epoch       TEXT NOT NULL,
    time        DOUBLE PRECISION NOT NULL
);
CREATE INDEX device_resets_by_device ON device_resets (device, id);
CREATE TABLE idempotency_running (
    device      TEXT NOT NULL,
    session     TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint BYTEA NOT NULL,
    epoch       TEXT NOT NULL,
    owner       TEXT NOT NULL,
    expires     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (device, session, key)
);
""" + "".join(
    f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
    "FOR EACH ROW EXECUTE FUNCTION regdev_append_only();\n"
    for table in ("calls", "idempotency_keys", "device_resets"))

#: Tables that are state, not record (changed in place): rate-limit buckets, approval questions.
_STATE_SCHEMA = """
CREATE TABLE IF NOT EXISTS rate_buckets (
    name        TEXT PRIMARY KEY,
    tokens      DOUBLE PRECISION NOT NULL,
    at          DOUBLE PRECISION NOT NULL,
    took        BOOLEAN NOT NULL
);
CREATE TABLE IF NOT EXISTS approval_questions (
    id          TEXT PRIMARY KEY,
    page        TEXT NOT NULL,
    caller      TEXT,
    deadline    DOUBLE PRECISION NOT NULL,
    approved    BOOLEAN,
    approver    TEXT,
    reason      TEXT,
    used        BOOLEAN NOT NULL DEFAULT false
);
"""
#: Take a token from a bucket (made full when new), by the database's clock.
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
       (SELECT fingerprint FROM idempotency_running WHERE device = %(device)s
            AND session = %(session)s AND key = %(key)s)
"""
_RELEASE = ("DELETE FROM idempotency_running WHERE device = %s AND session = %s AND key = %s "
            "AND owner = %s")
_INSERT_KEY = (f"INSERT INTO idempotency_keys ({', '.join(KeyRow._fields)}) "
               f"VALUES ({', '.join(['%s'] * len(KeyRow._fields))}) ON CONFLICT DO NOTHING")
_INSERT_RESET = "INSERT INTO device_resets (device, epoch, time) VALUES (%s, %s, %s)"


def _one(cursor: psycopg.Cursor[Any]) -> tuple[Any, ...]:
    """The one row a query that always gives one row gave."""
    row = cursor.fetchone()
    assert row is not None
    return tuple(row)


def _placeholders(statement: str) -> str:
    """A statement of :mod:`regdev.audit._writer` (``?`` placeholders) in psycopg's
    (``%s``); the statements hold no other ``?`` nor ``%``."""
    return statement.replace("?", "%s")


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
        """The connection, made again when the last one broke (the server restarted); the
        lock held.

        Raises:
            psycopg.Error: the server cannot be reached.
        """
        if self._conn.broken or self._conn.closed:
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
            row = self._live().execute(_RESERVE, params).fetchone()
            stored_print, observation, running = _one(self._live().execute(_LOOK_UP, params))
            reserved = row is not None
            if stored_print is not None and not (not replay and stored_print == print_):
                if reserved:  # stored already: the reservation was not needed
                    self._live().execute(_RELEASE, (*slot, self._owner))
                if bytes(stored_print) != print_:
                    return conflict(slot[2])
                return replayed(observation)
            if row is not None:
                self._running[slot] = (print_, row[0])
                return None
        if running is not None and bytes(running) == print_:
            return in_progress(slot[2])
        return conflict(slot[2])

    def complete(self, slot: Slot, print_: bytes, observation: str) -> None:
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


def connect(dsn: str, what: str) -> psycopg.Connection[Any]:
    """A connection to the store at ``dsn`` (autocommit), or AuditError saying ``what`` failed
    and why, in one line (a wrong URL, the server down, a password refused)."""
    with mapped(f"{what} {shown_dsn(dsn)}"):
        return psycopg.connect(dsn, autocommit=True, connect_timeout=10)


def check_version(conn: psycopg.Connection[Any], name: str, *, create: bool) -> None:
    """Check (``create``: make, when missing) the store's schema, in one transaction that
    other processes opening it wait for.

    Raises:
        AuditError: the database holds another version of the schema, or a table ``calls``
            that is not regdev's; (not ``create``) it holds no audit log.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('regdev audit schema'))")
        version_table, calls = _one(conn.execute(
            "SELECT to_regclass('regdev_schema'), to_regclass('calls')"))
        if version_table is not None:
            row = conn.execute("SELECT version FROM regdev_schema").fetchone()
            version = row[0] if row else None
            if version != POSTGRES_SCHEMA_VERSION:
                raise AuditError(
                    f"the audit database {name} has regdev's PostgreSQL schema version "
                    f"{version}; this regdev uses version {POSTGRES_SCHEMA_VERSION}: open it "
                    "with the regdev that wrote it, or give this one a new database (or "
                    "schema)")
        elif calls is not None:
            raise AuditError(f"the database {name} has a table calls that is not a regdev "
                             "audit log; give regdev a database (or schema) of its own")
        elif not create:
            raise AuditError(f"no audit log in the database {name}")
        else:
            conn.execute(_SCHEMA)
            conn.execute("CREATE TABLE regdev_schema (version INTEGER NOT NULL)")
            conn.execute("INSERT INTO regdev_schema VALUES (%s)", (POSTGRES_SCHEMA_VERSION,))
        if create:  # columns added to the record since the database was made
            conn.execute(_STATE_SCHEMA)
            have = {row[0] for row in conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'calls' AND table_schema = current_schema()")}
            for column, kind in ADDED_COLUMNS:
                if column not in have:
                    conn.execute(f"ALTER TABLE calls ADD COLUMN {column} {_KINDS[kind]}")
            conn.execute(INDEXES)


def query(dsn: str, statement: str, params: list[object]) -> list[tuple[Any, ...]]:
    """Run one query of :mod:`regdev.audit._reader` (``?`` placeholders, ``{columns}`` and
    ``{name}`` of an added column) on the store at ``dsn``, read-only.

    Raises:
        AuditError: the store cannot be reached, holds no audit log, or another version.
    """
    name = shown_dsn(dsn)
    statement = statement.replace("{columns}", ", ".join(COLUMNS))
    statement = statement.replace("{unsettled}", UNSETTLED)
    statement = statement.replace("{calls_by_time}", "calls")
    for column, _ in ADDED_COLUMNS:
        statement = statement.replace(f"{{{column}}}", column)
    conn = connect(dsn, "cannot read the audit database")
    try:
        with mapped(f"cannot read the audit database {name}"):
            check_version(conn, name, create=False)
            conn.read_only = True
            return conn.execute(_placeholders(statement), params).fetchall()
    finally:
        conn.close()


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
        self._rows_per_insert = MAX_ROWS_PER_INSERT

    def shared_questions(self) -> SharedQuestions:
        """The approval questions of the store, shared by every process
        (:class:`SharedQuestions`)."""
        assert isinstance(self.idempotency, SharedKeys)
        return SharedQuestions(self.idempotency)

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

    def _live(self) -> psycopg.Connection[Any]:
        """The writing connection, made again when the last one broke (the server
        restarted: the records a failed commit lost are logged, and calls that change a
        device were refused meanwhile); the commit lock held.

        Raises:
            psycopg.Error: the server cannot be reached.
        """
        if self._pg.broken or self._pg.closed:
            self._pg = psycopg.connect(str(self.path), autocommit=True, connect_timeout=10)
        return self._pg

    def _insert_reset(self, device: str, epoch: str, time: float) -> None:
        self._live().execute(_INSERT_RESET, (device, epoch, time))

    def _insert(self, batch: list[_Pending], keys: list[KeyRow]) -> None:
        conn, step = self._live(), self._rows_per_insert
        if not keys and len(batch) == 1:  # a write's record alone: autocommit
            conn.execute(_placeholders(batch[0].shape.one), batch[0].params)
            return
        with conn.transaction():
            for start in range(0, len(batch), step):
                statement, params = _statement(batch[start:start + step])
                conn.execute(_placeholders(statement), params)
            if keys:
                cursor = conn.cursor()
                cursor.executemany(_INSERT_KEY, keys)
                cursor.executemany(_RELEASE, [(key.device, key.session, key.key,
                                               self.idempotency._owner)  # type: ignore[attr-defined]
                                              for key in keys])

    def _disconnect(self) -> None:
        try:
            with mapped(f"cannot close the audit database {self.name}"):
                self._pg.close()
        finally:
            keys = self.idempotency
            if isinstance(keys, SharedKeys):
                keys.close()
