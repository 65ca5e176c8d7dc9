"""The PostgreSQL store's schema and its connections: what the writer
(:mod:`regdev.audit._postgres`) and the reader (:mod:`regdev.audit._reader`) share.

Rules of this file: the tables are built from the record's columns
(:data:`~regdev.audit._record.COLUMNS`, :data:`~regdev.audit._record.ADDED_COLUMNS`); psycopg's
errors become :class:`~regdev.AuditError` through :func:`~regdev.audit._record.mapped`. It
imports neither the writer nor the reader (each imports it).
"""

from __future__ import annotations

from typing import Any

import psycopg

from ..core._errors import AuditError
from ._record import ADDED_COLUMNS, COLUMNS, INDEXES, STAGE_TIMES, UNSETTLED, mapped, shown_dsn

#: This regdev's version of the PostgreSQL schema (table ``regdev_schema``). Version 2 added
#: the table ``serial_leases``; a version 1 store is upgraded when a writer opens it (the
#: table added: nothing of version 1 changes), and read as it is.
POSTGRES_SCHEMA_VERSION = 2
#: The versions this regdev reads (and a writer upgrades to :data:`POSTGRES_SCHEMA_VERSION`).
_READABLE = (1, POSTGRES_SCHEMA_VERSION)
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
CREATE TABLE IF NOT EXISTS serial_leases (
    line        TEXT PRIMARY KEY,      -- the serial line, as regdev names it (serial:/dev/...)
    owner       TEXT NOT NULL,         -- the process that drives it: host, pid and a nonce
    expires     TIMESTAMPTZ NOT NULL   -- by the server's clock; renewed while the owner lives
);
"""
#: Take a token from a bucket (made full when new), by the database's clock.
def _one(cursor: psycopg.Cursor[Any]) -> tuple[Any, ...]:
    """The one row a query that always gives one row gave."""
    row = cursor.fetchone()
    assert row is not None
    return tuple(row)


def _placeholders(statement: str) -> str:
    """A statement of :mod:`regdev.audit._writer` (``?`` placeholders) in psycopg's
    (``%s``); the statements hold no other ``?`` nor ``%``."""
    return statement.replace("?", "%s")


def connect(dsn: str, what: str) -> psycopg.Connection[Any]:
    """A connection to the store at ``dsn`` (autocommit), or AuditError saying ``what`` failed
    and why, in one line (a wrong URL, the server down, a password refused); the password
    is never in it, not even where libpq quotes a URL it cannot parse whole."""
    shown = shown_dsn(dsn)
    try:
        with mapped(f"{what} {shown}"):
            return psycopg.connect(dsn, autocommit=True, connect_timeout=10)
    except AuditError as error:
        if shown == dsn:
            raise
        raise AuditError(str(error).replace(dsn, shown),
                         error.reason.replace(dsn, shown)) from None


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
            if version not in _READABLE:
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
            conn.execute("UPDATE regdev_schema SET version = %s", (POSTGRES_SCHEMA_VERSION,))
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


