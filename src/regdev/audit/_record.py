"""The audit record: the ``calls`` table (its schema, columns and migrations), one record as
read back (:class:`AuditRecord`), and what both sides share (JSON in the columns, where the
database lives, the one mapping of the storage backend's errors).

Rules of this file:

* Append-only: records are only inserted; triggers in the database refuse UPDATE and DELETE.
* One record per call (``event = "call"``) and one per loop stop (``event = "stop"``, the stop
  reason in ``code``). The columns are described in :class:`AuditRecord`.
* Intent before a write: a call about to send a tool that changes the device first appends an
  *intent* record (``event = "intent"``, code ``outcome-unknown``), committed before the
  request leaves (:meth:`~regdev.audit._writer.AuditLog.record_intent`); its call record,
  written after, names the same intent (column ``intent``). So every write the device may have
  received has a record, even when the process is killed between the device's answer and the
  call record's commit: an intent with no call record of its own is a write whose outcome is
  unknown, and :func:`~regdev.audit._reader.read_audit` shows exactly those (an intent whose
  call record exists is left out).
* ``sqlite3.Error`` and ``OSError`` become :class:`~regdev.AuditError` in :func:`mapped` and
  nowhere else.
"""

from __future__ import annotations

import codecs
import os
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from ..core._errors import AuditError
from ..core._json import decode_json, json_problem
from ..core._observation import PIPELINE, Observation, Refusal
from ..core._wording import postgres_problem, sqlite_problem
from ._idempotency import KEYS_SCHEMA

#: 2: idempotency keys are scoped to a device (version 1's keys, unscoped, are kept aside).
#: 3: and to the device's epoch, which a reset through regdev ends (table ``device_resets``);
#: version 2's keys are kept in epoch ``''``, before any reset.
#: 4: each record names the device the call reached (``device``, ``device_epoch``), and keys
#: are scoped ``ID@EPOCH`` by the device's own reset epoch (older keys are kept, never
#: replayed: their device's epoch is not known).
#: 5: and its proposer (who proposed the call: ``provider:model``, ``mcp:CLIENT VERSION``).
SCHEMA_VERSION = 5
_MIGRATE_FROM_1 = """
DROP TRIGGER IF EXISTS idempotency_keys_append_only_update;
DROP TRIGGER IF EXISTS idempotency_keys_append_only_delete;
ALTER TABLE idempotency_keys RENAME TO idempotency_keys_v1;
CREATE TRIGGER idempotency_keys_v1_append_only_update BEFORE UPDATE ON idempotency_keys_v1
    BEGIN SELECT RAISE(ABORT, 'idempotency keys are append-only'); END;
CREATE TRIGGER idempotency_keys_v1_append_only_delete BEFORE DELETE ON idempotency_keys_v1
    BEGIN SELECT RAISE(ABORT, 'idempotency keys are append-only'); END;
"""
#: Version 2's idempotency_keys gets the epoch column in its primary key (WITHOUT ROWID): the
#: table is rebuilt. Its triggers go first: a renamed table keeps its triggers, and the new
#: table's (same names, ``IF NOT EXISTS``) would not be created.
_MIGRATE_FROM_2 = """
DROP TRIGGER IF EXISTS idempotency_keys_append_only_update;
DROP TRIGGER IF EXISTS idempotency_keys_append_only_delete;
ALTER TABLE idempotency_keys RENAME TO idempotency_keys_v2;
""" + KEYS_SCHEMA + """
INSERT INTO idempotency_keys (device, epoch, session, key, fingerprint, observation, time)
    SELECT device, '', session, key, fingerprint, observation, time FROM idempotency_keys_v2;
DROP TABLE idempotency_keys_v2;
"""
#: What brings each older schema version to this one (before the schema is created).
#: Columns added to ``calls`` since version 1 are added by :data:`ADDED_COLUMNS` instead.
MIGRATIONS = {1: _MIGRATE_FROM_1, 2: _MIGRATE_FROM_2, 3: ""}
#: Columns of ``calls`` added after its creation (at the end, as ``ALTER TABLE ... ADD
#: COLUMN`` puts them): added, NULL in the older records, to an older database that lacks
#: them when it is opened. The last ones need no schema version of their own: a regdev that
#: does not know them names the columns it writes and reads, so it leaves them NULL.
ADDED_COLUMNS = (
    ("device", "TEXT"),        # version 4: the device's id (DeviceIdentity.device)
    ("device_epoch", "TEXT"),  # version 4: its reset epoch then, NULL when it cannot say
    ("proposer", "TEXT"),      # version 5: who proposed the call
    ("caller", "TEXT"),        # who sent the call, when authenticated (regdev serve --http)
    ("approver", "TEXT"),      # who answered a protected write's approval question
    ("approval", "TEXT"),      # how it was asked: hook, elicitation, url
    ("intent", "TEXT"),        # the intent a write's records share (event 'intent', 'call')
    ("map_name", "TEXT"),      # the name of the device's register map, when it has one
    ("trace_id", "TEXT"),      # the OpenTelemetry trace the call's span is in, when traced
)

#: The columns of stage times, one per stage of the pipeline (``parse_ns`` ...).
STAGE_TIMES = tuple(f"{stage}_ns" for stage in PIPELINE)
STAGE_COLUMNS = ",\n".join(f"    {name} INTEGER" for name in STAGE_TIMES)
SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    id              INTEGER PRIMARY KEY,  -- append order
    time            REAL NOT NULL,        -- Unix time, seconds, when the call arrived
    event           TEXT NOT NULL,        -- 'call', or 'stop' for a loop's stop
    session         TEXT NOT NULL,
    dialect         TEXT,
    loop_id         TEXT,
    step            INTEGER,              -- the step in the loop; for a stop, the step count
    raw             BLOB,                 -- the first max_raw_bytes bytes of the raw call
    raw_bytes       INTEGER,              -- the raw call's full size, bytes
    raw_sha256      BLOB,                 -- SHA-256 of the full raw call (32 bytes)
    ok              INTEGER NOT NULL,     -- 1 accepted, 0 refused
    stage           TEXT,                 -- the refusing stage
    code            TEXT,                 -- the verdict code; for a stop, the stop reason
    message         TEXT,                 -- the refusal's message; for a stop, its detail
    tool            TEXT,
    arguments       TEXT,                 -- JSON
    result          TEXT,                 -- JSON: the accepted call's result object
    call_id         TEXT,                 -- the correlation id echoed in the observation
    idempotency_key TEXT,
    replay          INTEGER NOT NULL,     -- 1 when a stored observation was returned
    -- then <stage>_ns INTEGER for each stage of the pipeline: the time spent in it, ns
""" + STAGE_COLUMNS + """,
    device          TEXT,                 -- the id of the device the call reached
    device_epoch    TEXT,                 -- its reset epoch then (NULL: it cannot say)
    proposer        TEXT,                 -- who proposed the call: provider:model, mcp:NAME ...
    caller          TEXT,                 -- who sent it: token:NAME, oauth:SUBJECT (HTTP)
    approver        TEXT,                 -- who answered the approval question
    approval        TEXT,                 -- how it was asked: hook, elicitation, url
    intent          TEXT,                 -- a write's intent id: its intent and call records
    map_name        TEXT,                 -- the device's register map, by its name
    trace_id        TEXT                  -- its OpenTelemetry trace id (32 hex digits)
);
CREATE TRIGGER IF NOT EXISTS calls_append_only_update BEFORE UPDATE ON calls
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS calls_append_only_delete BEFORE DELETE ON calls
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
"""

#: The indexes of ``calls`` (both stores): a filter of :func:`~regdev.audit._reader.read_audit`
#: by code, session, device, caller, proposer, loop or time costs in proportion to the records
#: it matches, not to the log's size; and an intent's call record is found by its intent. A
#: column that is NULL in most records is indexed where it is not (a partial index).
INDEXES = """
CREATE INDEX IF NOT EXISTS calls_by_code ON calls (code) WHERE code IS NOT NULL;
CREATE INDEX IF NOT EXISTS calls_by_session ON calls (session);
CREATE INDEX IF NOT EXISTS calls_by_device ON calls (device) WHERE device IS NOT NULL;
CREATE INDEX IF NOT EXISTS calls_by_caller ON calls (caller) WHERE caller IS NOT NULL;
CREATE INDEX IF NOT EXISTS calls_by_proposer ON calls (proposer) WHERE proposer IS NOT NULL;
CREATE INDEX IF NOT EXISTS calls_by_loop ON calls (loop_id) WHERE loop_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS calls_by_time ON calls (time);
CREATE INDEX IF NOT EXISTS calls_by_intent ON calls (intent) WHERE intent IS NOT NULL;
"""

#: An intent record whose call record was not written (its outcome unknown): what
#: :func:`~regdev.audit._reader.read_audit` shows of intents (found by ``calls_by_intent``).
UNSETTLED = ("NOT (event = 'intent' AND EXISTS (SELECT 1 FROM calls AS settled "
             "WHERE settled.intent = calls.intent AND settled.event = 'call'))")

COLUMNS = (
    "time", "event", "session", "dialect", "loop_id", "step", "raw", "raw_bytes", "raw_sha256",
    "ok", "stage", "code", "message", "tool", "arguments", "result", "call_id",
    "idempotency_key", "replay", *STAGE_TIMES, *(name for name, _ in ADDED_COLUMNS),
)
INSERT_INTO = f"INSERT INTO calls ({', '.join(COLUMNS)}) VALUES "

_encode_json = msgspec.json.Encoder(decimal_format="number").encode


def audit_target(text: str) -> Path | str:
    """The store ``text`` names: a PostgreSQL URL (``postgresql://...``) as it is, else the
    path of a SQLite database file."""
    return text if is_dsn(text) else Path(text)


def default_audit_path() -> Path | str:
    """Where the CLI keeps its audit log unless told otherwise.

    ``$REGDEV_AUDIT`` when set (a file, or a ``postgresql://`` URL); else
    ``$XDG_STATE_HOME/regdev/audit.db``, where
    ``$XDG_STATE_HOME`` defaults to ``~/.local/state``, and a relative one is ignored (XDG
    Base Directory Specification 0.8: "If an implementation encounters a relative path in any
    of these variables it should consider the path invalid and ignore it").
    """
    explicit = os.environ.get("REGDEV_AUDIT")
    if explicit:
        return audit_target(explicit)
    state = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "regdev" / "audit.db"


def default_audit_root() -> Path:
    """The folder the default audit path (without ``$REGDEV_AUDIT``) is under:
    ``$XDG_STATE_HOME`` when set (and absolute), else the home directory. The command line
    makes the missing folders below it, and a missing ``$XDG_STATE_HOME`` (XDG Base Directory
    Specification 0.8), each 0700; a missing home directory is never made."""
    state = os.environ.get("XDG_STATE_HOME", "")
    return Path(state if os.path.isabs(state) else os.path.expanduser("~"))


#: The URL schemes of a PostgreSQL store (libpq's, "Connection URIs").
DSN_SCHEMES = ("postgresql://", "postgres://")


def is_dsn(target: object) -> bool:
    """Whether ``target`` names a PostgreSQL store (a ``postgresql://`` URL) rather than a
    SQLite database file."""
    return isinstance(target, str) and target.startswith(DSN_SCHEMES)


def shown_dsn(dsn: str) -> str:
    """The URL ``dsn`` as messages show it: its password replaced by ``***``, whether in the
    user part (``postgresql://me:PASSWORD@host/db``) or a query parameter
    (``?password=PASSWORD``, libpq's "Connection URIs")."""
    scheme, _, rest = dsn.partition("://")
    authority, slash, tail = rest.partition("/")
    user, at, host = authority.rpartition("@")
    if at and ":" in user:
        authority = f"{user.partition(':')[0]}:***@{host}"
    shown = f"{scheme}://{authority}{slash}{tail}"
    head, question, query = shown.partition("?")
    if question:
        query = "&".join("password=***" if part.startswith("password=") else part
                         for part in query.split("&"))
    return f"{head}{question}{query}"


@contextmanager
def mapped(what: str) -> Iterator[None]:
    """Map the storage backend's exceptions to :class:`AuditError` (the one place): SQLite's,
    the OS's and, when it is in use, psycopg's (PostgreSQL)."""
    try:
        yield
    except UnicodeEncodeError:  # a filter or path holding a lone surrogate (bytes not UTF-8)
        raise AuditError(f"{what}: a filter holds text that is not Unicode (a lone surrogate, "
                         "as bytes that are not UTF-8 become)") from None
    except IsADirectoryError as error:
        raise AuditError(f"{what}: {error.filename} is a directory") from None
    except OSError as error:  # the OS's words, without errno number or file name repeated
        reason = str(error.strerror or error)
        raise AuditError(f"{what}: {reason}", reason) from None
    except sqlite3.Error as error:  # regdev's words for SQLite's result code
        reason = sqlite_problem(error)
        raise AuditError(f"{what}: {reason}", reason) from None
    except Exception as error:
        psycopg = sys.modules.get("psycopg")  # imported by the PostgreSQL store alone
        if psycopg is not None and isinstance(error, psycopg.Error):
            reason = postgres_problem(error)
            raise AuditError(f"{what}: {reason}", reason) from None
        raise


def _is_utf8(data: bytes, cut: bool) -> bool:
    """Whether ``data`` is UTF-8 (when ``cut``, its last character may be incomplete)."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=not cut)
    except UnicodeDecodeError:
        return False
    return True


def encode_json(value: object) -> str | None:
    """``value`` as compact JSON text, or None when it is not JSON-encodable."""
    try:
        return _encode_json(value).decode("utf-8")
    except (TypeError, ValueError, UnicodeDecodeError, RecursionError):  # a cycle too
        return None


class AuditRecord(msgspec.Struct, frozen=True):
    """One record of the audit log (see the module docstring for when each is written).

    Attributes:
        id: append order, from 1.
        time: Unix time in seconds when the call arrived (or the loop stopped).
        event: ``"call"``, ``"stop"`` for a loop's stop, or ``"intent"`` for a write about to
            be sent whose call record never followed (its outcome is unknown: code
            ``outcome-unknown``; see :meth:`AuditLog.record_intent`).
        session: the session's name.
        dialect: the dialect the call was declared in (None for a stop).
        loop_id: the loop the call belongs to (``run_loop``), else None.
        step: the step number in that loop, from 1; for a stop, the number of steps.
        raw: the first ``max_raw_bytes`` bytes of the raw call, exactly as received (UTF-8
            text, or whatever bytes were sent); None for a stop.
        raw_bytes: the raw call's full size, in bytes.
        raw_sha256: the SHA-256 of the full raw call (32 bytes).
        ok: True when the call was accepted.
        stage: the refusing stage, or None.
        code: the verdict code, or None when accepted; for a stop, the stop reason.
        message: the refusal's one-line message; for a stop, the stop's detail.
        tool: the tool name the call gave (when it gave a string), else None.
        arguments: the arguments as JSON text (validated and bound when the call got that far).
        result: the accepted call's result object as JSON text, else None.
        call_id: the correlation id echoed in the observation, else None.
        idempotency_key: the call's idempotency key, or None.
        replay: True when the stored observation of an earlier call was returned.
        parse_ns, validate_ns, authorize_ns, execute_ns, observe_ns: time spent in each stage,
            in nanoseconds; None for a stage the call did not reach.
        device: the id of the device the call reached (:class:`~regdev.DeviceIdentity`),
            as known when it was recorded: the device's own id over a serial line (when it
            says one), ``serial:PORT`` (when it does not), ``RegisterFile:...`` in process;
            None for a stop, a record written before version 4, or a device not yet heard.
        device_epoch: the device's reset epoch then, or None (it cannot say, or as above).
        proposer: who proposed the call (``provider:model`` for ``regdev agent``,
            ``mcp:NAME VERSION`` for an MCP client, ``replay:FILE``), or None when unknown.
        caller: who sent the call, when the transport authenticated it (``regdev serve
            --http``: ``token:NAME`` for a lab token, ``oauth:SUBJECT`` for an OAuth access
            token); never the token itself. None in process and over stdio.
        approver: who answered the approval question of a write to a protected register
            (``token:NAME``, ``oauth:SUBJECT``), when known; None otherwise.
        approval: how that question was asked: ``hook`` (a Python approval hook),
            ``elicitation`` (the caller's MCP client asked its user), ``url`` (a page the
            server serves); None when no question was asked (or the hook said only
            True/False).
        intent: for a call that sent a write, and for its intent record, the id they share
            (16 hex digits); None otherwise, and in records written before intents were.
        map_name: the name of the device's register map (``sensor``; ``regdev map FILE``
            shows it), or None (the default map, a map without a name, a stop, an older
            record).
        trace_id: the OpenTelemetry trace id (32 lowercase hex digits) of the call's span,
            when telemetry is on (``docs/observability.md``); None otherwise, for a stop, and
            in older records.
    """

    id: int
    time: float
    event: str
    session: str
    dialect: str | None
    loop_id: str | None
    step: int | None
    raw: bytes | None
    raw_bytes: int | None
    raw_sha256: bytes | None
    ok: bool
    stage: str | None
    code: str | None
    message: str | None
    tool: str | None
    arguments: str | None
    result: str | None
    call_id: str | None
    idempotency_key: str | None
    replay: bool
    parse_ns: int | None
    validate_ns: int | None
    authorize_ns: int | None
    execute_ns: int | None
    observe_ns: int | None
    device: str | None = None
    device_epoch: str | None = None
    proposer: str | None = None
    caller: str | None = None
    approver: str | None = None
    approval: str | None = None
    intent: str | None = None
    map_name: str | None = None
    trace_id: str | None = None

    @property
    def timings(self) -> dict[str, int]:
        """Nanoseconds spent in each stage the call reached, by stage name, in pipeline order
        (``{"parse": 5200, "validate": 1100, ...}``); empty for a stop."""
        times = (getattr(self, name) for name in STAGE_TIMES)
        return {stage: ns for stage, ns in zip(PIPELINE, times, strict=True) if ns is not None}

    def observation(self) -> Observation | None:
        """The observation the caller got (None for a stop record); numbers in its result
        as :meth:`to_dict` gives them (exact).

        Raises:
            AuditError: the ``result`` column is not JSON text (regdev never writes such a
                record: the database was changed by other means).
        """
        if self.event != "call":
            return None
        if self.ok:
            result = self._column("result")
            return Observation(self.tool, result, id=self.call_id, replay=self.replay)
        refusal = Refusal(self.stage, self.code or "", self.message or "")  # type: ignore[arg-type]
        return Observation(refusal=refusal, id=self.call_id, replay=self.replay)

    def _column(self, name: str) -> Any:
        """The JSON column ``name`` decoded exactly, None when NULL."""
        text = getattr(self, name)
        if text is None:
            return None
        try:
            # decoded as the gate decodes a call (a fraction as the exact Decimal of its
            # text); the columns are regdev's own JSON: no repeated key to look for
            return decode_json(text)
        except (msgspec.DecodeError, ValueError, ArithmeticError) as error:
            raise AuditError(f"record {self.id}: its {name} column is not JSON text "
                             f"({json_problem(error, text)})",
                             "a column is not JSON text") from None

    def to_dict(self) -> dict[str, Any]:
        """The record as one JSON object, every value exactly as recorded.

        ``raw`` is text (a character cut by ``max_raw_bytes`` left out); when the bytes
        received were not UTF-8, it shows U+FFFD for each bad byte, and ``raw_hex`` holds the
        bytes exactly (that key, after ``raw_sha256``, is there only then). ``raw_sha256`` is
        in hex. ``arguments`` and ``result`` are JSON values decoded as the gate decodes a
        call: integers as ``int``, numbers with a fraction or an exponent as exact
        ``decimal.Decimal`` (``1E-400`` and ``1E+999`` as recorded, never rounded through
        float; :meth:`to_json` writes them as JSON numbers, as ``regdev audit --json`` does).
        ``observation`` is the observation the caller got, rebuilt from the columns.

        Raises:
            AuditError: ``arguments`` or ``result`` is not JSON text (see
                :meth:`observation`); the message names the record.
        """
        out = msgspec.structs.asdict(self)
        raw_hex = None
        if self.raw is not None:
            # A raw call kept in part may end inside a character: that is no bad byte.
            cut = self.raw_bytes is not None and self.raw_bytes > len(self.raw)
            out["raw"] = codecs.getincrementaldecoder("utf-8")("replace").decode(
                self.raw, final=not cut)
            if not _is_utf8(self.raw, cut):
                raw_hex = self.raw.hex()
        if self.raw_sha256 is not None:
            out["raw_sha256"] = self.raw_sha256.hex()
        if raw_hex is not None:  # beside the other raw columns, after raw_sha256
            items = list(out.items())
            at = list(out).index("raw_sha256") + 1
            out = dict([*items[:at], ("raw_hex", raw_hex), *items[at:]])
        for name in ("arguments", "result"):
            out[name] = self._column(name)
        observation = self.observation()
        out["observation"] = observation.to_dict() if observation is not None else None
        return out

    def to_json(self) -> str:
        """:meth:`to_dict` as one line of JSON text, numbers written exactly (what
        ``regdev audit --json`` prints for each record).

        Raises:
            AuditError: as :meth:`to_dict`.
        """
        return _encode_json(self.to_dict()).decode()


def add_columns(conn: sqlite3.Connection) -> str:
    """The ``ALTER TABLE`` statements that add the :data:`ADDED_COLUMNS` an existing
    ``calls`` table lacks (none for a new database: its table is created with them)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(calls)")}
    if not have:
        return ""
    return "".join(f"ALTER TABLE calls ADD COLUMN {name} {kind};"
                   for name, kind in ADDED_COLUMNS if name not in have)

