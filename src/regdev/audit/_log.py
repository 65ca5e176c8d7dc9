"""The audit log: every call, accepted or refused, appended to a SQLite database (WAL mode).

Rules of this file:

* Append-only: records are only inserted; triggers in the database refuse UPDATE and DELETE.
* One record per call (``event = "call"``) and one per loop stop (``event = "stop"``, the stop
  reason in ``code``). The columns are described in :class:`AuditRecord`.
* Intent before a write: a call about to send a tool that changes the device first appends an
  *intent* record (``event = "intent"``, code ``outcome-unknown``), committed before the
  request leaves (:meth:`AuditLog.record_intent`); its call record, written after, names the
  same intent (column ``intent``). So every write the device may have received has a record,
  even when the process is killed between the device's answer and the call record's commit:
  an intent with no call record of its own is a write whose outcome is unknown, and
  :func:`read_audit` shows exactly those (an intent whose call record exists is left out).
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
* ``sqlite3.Error`` and ``OSError`` become :class:`~regdev.AuditError` here and nowhere else.
* One writer a database: each :class:`AuditLog` indexes the idempotency keys in memory when it
  opens the database, so a second writer would not see the first's keys nor its device resets,
  and would replay a stale key. An AuditLog holds an exclusive advisory lock
  (``flock(LOCK_EX | LOCK_NB)``) on the file ``<database>.lock`` beside it from its opening to
  :meth:`AuditLog.close`; a second AuditLog, in another process or in this one (the lock
  belongs to an open file description, not to a process), gets :class:`~regdev.AuditInUse`.
  The operating system releases the lock when the holder dies, however it dies. A path that
  cannot hold an audit log is refused without a lock file of this writer's making left beside
  it (:func:`_check_database_file` before the lock; the lock file removed, still locked, after).
  Readers (:func:`read_audit`) take no lock, and read where they cannot write
  (:func:`_connect_read_only`). Where ``fcntl`` does not exist (Windows), there is no
  lock: one writer a database is then up to the user.
"""

from __future__ import annotations

import atexit
import codecs
import hashlib
import logging
import math
import os
import sqlite3
import stat
import sys
import threading
import time as _time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from decimal import Decimal
from functools import lru_cache
from operator import itemgetter
from pathlib import Path
from typing import Any, Literal

import msgspec

from ..core._errors import AuditError, AuditInUse
from ..core._limits import seconds_problem
from ..core._observation import PIPELINE, Observation, Refusal
from ..core._text import is_text, text_bytes
from ..core._json import json_problem
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

__all__ = [
    "DEFAULT_FLUSH_INTERVAL",
    "DEFAULT_MAX_RAW_BYTES",
    "AuditLog",
    "AuditRecord",
    "Durability",
    "default_audit_path",
    "default_audit_root",
    "find_loop",
    "insert_statement",
    "read_audit",
]

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
#: 2: idempotency keys are scoped to a device (version 1's keys, unscoped, are kept aside).
#: 3: and to the device's epoch, which a reset through regdev ends (table ``device_resets``);
#: version 2's keys are kept in epoch ``''``, before any reset.
#: 4: each record names the device the call reached (``device``, ``device_epoch``), and keys
#: are scoped ``ID@EPOCH`` by the device's own reset epoch (older keys are kept, never
#: replayed: their device's epoch is not known).
#: 5: and its proposer (who proposed the call: ``provider:model``, ``mcp:CLIENT VERSION``).
_SCHEMA_VERSION = 5
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
#: Columns added to ``calls`` since version 1 are added by :data:`_ADDED_COLUMNS` instead.
_MIGRATIONS = {1: _MIGRATE_FROM_1, 2: _MIGRATE_FROM_2, 3: ""}
#: Columns of ``calls`` added after its creation (at the end, as ``ALTER TABLE ... ADD
#: COLUMN`` puts them): added, NULL in the older records, to an older database that lacks
#: them when it is opened. The last three need no schema version of their own: a regdev that
#: does not know them names the columns it writes and reads, so it leaves them NULL.
_ADDED_COLUMNS = (
    ("device", "TEXT"),        # version 4: the device's id (DeviceIdentity.device)
    ("device_epoch", "TEXT"),  # version 4: its reset epoch then, NULL when it cannot say
    ("proposer", "TEXT"),      # version 5: who proposed the call
    ("caller", "TEXT"),        # who sent the call, when authenticated (regdev serve --http)
    ("approver", "TEXT"),      # who answered a protected write's approval question
    ("approval", "TEXT"),      # how it was asked: hook, elicitation, url
    ("intent", "TEXT"),        # the intent a write's records share (event 'intent', 'call')
)

#: The columns of stage times, one per stage of the pipeline (``parse_ns`` ...).
_STAGE_TIMES = tuple(f"{stage}_ns" for stage in PIPELINE)
_STAGE_COLUMNS = ",\n".join(f"    {name} INTEGER" for name in _STAGE_TIMES)
_SCHEMA = """
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
""" + _STAGE_COLUMNS + """,
    device          TEXT,                 -- the id of the device the call reached
    device_epoch    TEXT,                 -- its reset epoch then (NULL: it cannot say)
    proposer        TEXT,                 -- who proposed the call: provider:model, mcp:NAME ...
    caller          TEXT,                 -- who sent it: token:NAME, oauth:SUBJECT (HTTP)
    approver        TEXT,                 -- who answered the approval question
    approval        TEXT,                 -- how it was asked: hook, elicitation, url
    intent          TEXT                  -- a write's intent id: its intent and call records
);
CREATE TRIGGER IF NOT EXISTS calls_append_only_update BEFORE UPDATE ON calls
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS calls_append_only_delete BEFORE DELETE ON calls
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
"""

_COLUMNS = (
    "time", "event", "session", "dialect", "loop_id", "step", "raw", "raw_bytes", "raw_sha256",
    "ok", "stage", "code", "message", "tool", "arguments", "result", "call_id",
    "idempotency_key", "replay", *_STAGE_TIMES, *(name for name, _ in _ADDED_COLUMNS),
)
_INSERT_INTO = f"INSERT INTO calls ({', '.join(_COLUMNS)}) VALUES "
#: What an intent record says (:meth:`AuditLog.record_intent`) until its call's record follows.
_INTENT = Observation(refusal=Refusal(
    "execute", "outcome-unknown",
    "the write was sent to the device and no outcome was recorded after it (the process "
    "stopped first): it may or may not have run; read the register back"))
#: The stage times of a record that has none.
_NOT_TIMED = (None,) * len(_STAGE_TIMES)
#: A record's stage times and device when it has none (a loop's stop; the proposer follows,
#: then :data:`_NO_CALLER`).
_NO_TIMES = (None,) * (len(_STAGE_TIMES) + 2)
#: A loop stop's caller, approver, approval and intent: none.
_NO_CALLER = (None,) * 4
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
        self.one = _INSERT_INTO + self.values
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
    return (_INSERT_INTO + ", ".join([record.shape.values for record in records]),
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

if sys.platform != "win32":
    import fcntl


def lock_path(path: Path) -> Path:
    """The writer's lock file of the audit database at ``path``: ``<path>.lock``, beside the
    file ``path`` resolves to, so that two names of one database (a symlink) take one lock.
    (A hard link is not seen: give every writer the same name.)"""
    real = Path(os.path.realpath(path))
    return real.with_name(real.name + ".lock")


def _lock(path: Path) -> tuple[int | None, bool]:
    """Take the writer's lock of the audit database at ``path`` (its folder exists).

    Returns:
        The lock file's descriptor (closing it releases the lock), or None where there is no
        ``fcntl`` (no lock); and whether this call created the lock file (then
        :func:`_unlock` removes it again for a database that is refused).

    Raises:
        AuditInUse: another writer holds it; the message names its pid and command line.
        OSError: the lock file cannot be opened or written.
    """
    if sys.platform == "win32":
        return None, False
    where = lock_path(path)
    while True:
        try:
            fd = os.open(where, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            created = True
        except FileExistsError:
            try:
                fd = os.open(where, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:  # removed meanwhile by a writer that was refused
                continue
            created = False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
            os.close(fd)
            pid, _, command = holder.partition(" ")
            if pid == str(os.getpid()):
                who = f"another AuditLog in this process (pid {pid}: {command})"
            elif pid:
                who = f"another regdev process (pid {pid}: {command})"
            else:
                who = "another regdev process"
            raise AuditInUse(f"the audit database {path} is in use by {who}", holder) from None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, where):
            break
        # A writer that was refused removed the file while holding its lock, after this one
        # opened it: a lock on that file would lock nothing. Take the new one.
        os.close(fd)
    try:
        command = " ".join([os.path.basename(sys.argv[0] or sys.executable), *sys.argv[1:]])
        text = f"{os.getpid()} {command[:200]}\n".encode("utf-8", "replace")
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)
    except BaseException:
        _unlock(fd, where if created else None)
        raise
    return fd, created


def _same_file(fd: int, where: Path) -> bool:
    """Whether the open file ``fd`` is still the file at ``where``."""
    try:
        now = os.stat(where)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def _unlock(fd: int | None, remove: Path | None = None) -> None:
    """Release the writer's lock taken by :func:`_lock` (its holder line is cleared first);
    with ``remove``, the lock file this writer created is removed first, while it still holds
    the lock (a writer that opened it meanwhile sees it gone and takes a new one)."""
    if fd is not None:
        if remove is not None:
            with suppress(OSError):
                os.unlink(remove)
        with suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)


#: The first 16 bytes of every SQLite 3 database file ("Database File Format", sqlite.org).
_SQLITE_HEADER = b"SQLite format 3\x00"


def _check_database_file(path: Path) -> None:
    """AuditError, before any lock file is made beside it, when ``path`` exists and cannot
    be an audit database: not a regular file (a folder, ``/dev/null``, a pipe), or a file
    with content that is not a SQLite database. (An empty file becomes a new audit log.)"""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(status.st_mode):
        raise AuditError(f"{path} is a directory, not a database file")
    if not stat.S_ISREG(status.st_mode):
        raise AuditError(f"cannot open the audit database {path}: it is not a regular file "
                         "(a device, a pipe or a socket)")
    if status.st_size:
        with open(path, "rb") as file:
            header = file.read(len(_SQLITE_HEADER))
        if header != _SQLITE_HEADER:
            raise AuditError(f"cannot open the audit database {path}: it is not a SQLite "
                             "database, so not a regdev audit log")


_encode_json = msgspec.json.Encoder(decimal_format="number").encode
#: JSON text decoded as the gate decodes a call: a number with a fraction or an exponent as the
#: exact Decimal of its text, never rounded through float (the columns are regdev's own JSON,
#: so the parser's other checks, such as repeated keys, have nothing to find).
_decode_exact = msgspec.json.Decoder(float_hook=Decimal).decode


def default_audit_path() -> Path:
    """Where the CLI keeps its audit log unless told otherwise.

    ``$REGDEV_AUDIT`` when set; else ``$XDG_STATE_HOME/regdev/audit.db``, where
    ``$XDG_STATE_HOME`` defaults to ``~/.local/state``, and a relative one is ignored (XDG
    Base Directory Specification 0.8: "If an implementation encounters a relative path in any
    of these variables it should consider the path invalid and ignore it").
    """
    explicit = os.environ.get("REGDEV_AUDIT")
    if explicit:
        return Path(explicit)
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


@contextmanager
def _mapped(what: str) -> Iterator[None]:
    """Map the storage backend's exceptions to :class:`AuditError` (the one place)."""
    try:
        yield
    except UnicodeEncodeError:  # a filter or path holding a lone surrogate (bytes not UTF-8)
        raise AuditError(f"{what}: a filter holds text that is not Unicode (a lone surrogate, "
                         "as bytes that are not UTF-8 become)") from None
    except IsADirectoryError as error:
        raise AuditError(f"{what}: {error.filename} is a directory") from None
    except OSError as error:  # the OS's words, without errno number or file name repeated
        raise AuditError(f"{what}: {error.strerror or error}") from None
    except sqlite3.Error as error:  # regdev's words for SQLite's result code
        raise AuditError(f"{what}: {sqlite_problem(error)}") from None


def _as_text(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """``row`` with each str that is not Unicode text (a lone surrogate) backslash-escaped, so
    that SQLite can store it as UTF-8."""
    return tuple(value.encode("utf-8", "backslashreplace").decode("utf-8")
                 if type(value) is str and not is_text(value) else value for value in row)


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

    @property
    def timings(self) -> dict[str, int]:
        """Nanoseconds spent in each stage the call reached, by stage name, in pipeline order
        (``{"parse": 5200, "validate": 1100, ...}``); empty for a stop."""
        times = (getattr(self, name) for name in _STAGE_TIMES)
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
            return _decode_exact(text)
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
        if durability not in _SYNCHRONOUS:
            raise ValueError(f"durability must be one of {', '.join(_SYNCHRONOUS)}, "
                             f"got {durability!r}")
        problem = seconds_problem(flush_interval)  # 5e-324 s would have the flusher spin
        if problem is not None:
            raise ValueError(f"flush_interval {problem}")
        if type(max_raw_bytes) is not int or max_raw_bytes < 0:
            raise ValueError(f"max_raw_bytes must be an int >= 0, got {max_raw_bytes!r}")
        self.path = Path(path)
        self.durability = durability
        self.flush_interval = flush_interval
        self.max_raw_bytes = max_raw_bytes
        self.failure: str | None = None
        with _mapped(f"cannot open the audit database {self.path}"):
            _check_database_file(self.path)  # (raises for a name too long, a folder not ours)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd, created = _lock(self.path)
        # A database refused below leaves no lock file of this writer's making beside it.
        made = lock_path(self.path) if created else None
        try:
            self._conn = self._open()
            try:
                with _mapped(f"cannot open the audit database {self.path}"):
                    self._conn.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_CHECKPOINT_FRAMES}")
            except AuditError:
                self._conn.close()
                raise
        except BaseException:
            _unlock(self._lock_fd, made)
            raise
        self._frames = 0  # WAL frames written (at least), counted by commits, since a checkpoint
        self._pending: list[_Pending] = []
        self._pending_lock = threading.Lock()  # guards _pending and _closed
        self._commit_lock = threading.Lock()   # one commit at a time; guards the connection
        self._closed = False
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                         name=f"regdev-audit-flush {self.path.name}")
        self._flusher.start()
        atexit.register(self.close)

    def _open(self) -> sqlite3.Connection:
        conn = None
        with _mapped(f"cannot open the audit database {self.path}"):
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=10.0)
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if mode != "wal":
                    raise AuditError(f"the audit database {self.path} cannot use WAL mode "
                                     f"(journal mode {mode})")
                conn.execute(f"PRAGMA synchronous={_SYNCHRONOUS[self.durability]}")
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version not in (0, *_MIGRATIONS, _SCHEMA_VERSION):
                    raise AuditError(f"{self.path} has audit schema version {version}; this "
                                     f"regdev reads version {_SCHEMA_VERSION}")
                if version == 0:
                    tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
                    if tables:
                        raise AuditError(f"{self.path} is a SQLite database but not a regdev "
                                         "audit log")
                migrate = _MIGRATIONS.get(version, "") + _add_columns(conn)
                conn.executescript(f"BEGIN IMMEDIATE; {migrate} {_SCHEMA} {KEYS_SCHEMA} "
                                   f"PRAGMA user_version = {_SCHEMA_VERSION}; COMMIT;")
                keys = conn.execute(SELECT_CURRENT_KEYS).fetchall()
                epochs = dict(conn.execute(SELECT_EPOCHS).fetchall())
            except BaseException:
                conn.close()
                raise
        self.idempotency = IdempotencyStore(keys, epochs)
        limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        self._rows_per_insert = max(1, min(MAX_ROWS_PER_INSERT, limit // len(_COLUMNS)))
        return conn

    # --- writing --------------------------------------------------------------------------

    def row(self, *, time: float, session: str, dialect: str | None, raw: object,
            observation: Observation, tool: str | None, arguments: str | None,
            loop_id: str | None = None, step: int | None = None,
            idempotency_key: str | None = None,
            timings: Mapping[str, int] | None = None,
            device: tuple[str, str | None] | None = None, proposer: str | None = None,
            caller: str | None = None, approver: str | None = None,
            approval: str | None = None, intent: str | None = None) -> Row:
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
        """
        stage_ns = tuple(map(timings.get, PIPELINE)) if timings else _NOT_TIMED
        return self._call_row(time, session, dialect, raw, observation, tool, arguments,
                              loop_id, step, idempotency_key, stage_ns, device, proposer,
                              caller, approver, approval, intent)[0]

    def record_call(self, *, time: float, session: str, dialect: str | None, raw: object,
                    observation: Observation, tool: str | None, arguments: str | None,
                    loop_id: str | None = None, step: int | None = None,
                    idempotency_key: str | None = None,
                    stage_ns: tuple[int | None, ...] = _NOT_TIMED,
                    device: tuple[str, str | None] | None = None, proposer: str | None = None,
                    caller: str | None = None, approver: str | None = None,
                    approval: str | None = None, key_row: KeyRow | None = None,
                    durable: bool = False, intent: str | None = None) -> None:
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
                                    caller, approver, approval, intent)
        self._append(shape, shape.take(row), key_row, durable)

    def record_intent(self, *, time: float, session: str, dialect: str | None,
                      tool: str, arguments: str | None, loop_id: str | None = None,
                      step: int | None = None, idempotency_key: str | None = None,
                      call_id: str | None = None,
                      device: tuple[str, str | None] | None = None,
                      proposer: str | None = None, caller: str | None = None,
                      approver: str | None = None, approval: str | None = None) -> str:
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
                                    proposer, caller, approver, approval, intent)
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
            approval: str | None, intent: str | None = None) -> tuple[Row, _Shape]:
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
               device_id, epoch, proposer, caller, approver, approval, intent)
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
                        approver is None, approval is None, intent is None))
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
                raise AuditError(f"the audit log {self.path} is closed",
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
            raise AuditError(f"could not commit to the audit database {self.path}: {outcome}",
                             str(outcome))

    # --- idempotency keys (see ``_idempotency.py``) -----------------------------------------

    def begin_key(self, slot: Slot, print_: bytes, *,
                  replay: bool = True) -> Observation | Refusal | None:
        """Look up the key in ``slot`` for a call with fingerprint ``print_``, reserving it
        when new: None (reserved: store it with :meth:`key_row` and :meth:`complete_key`, or
        :meth:`release_key` it), the stored observation marked as a replay, or a refusal
        (``idempotency-conflict``, ``idempotency-in-progress``). Without ``replay``, a key
        stored for the same call is reserved again instead (the call runs again)."""
        return self.idempotency.begin(slot, print_, replay=replay)

    def key_row(self, slot: Slot, print_: bytes, observation: str, time: float) -> KeyRow:
        """The row that stores the key reserved in ``slot`` (in the epoch of its device when
        it was reserved), for :meth:`append`.

        Raises:
            KeyError: the key in ``slot`` is not reserved.
        """
        return self.idempotency.key_row(slot, print_, observation, time)

    def complete_key(self, slot: Slot, print_: bytes, observation: str) -> None:
        """Keep the reserved key's observation JSON in memory (once its row is committed)."""
        self.idempotency.complete(slot, print_, observation)

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
                raise AuditError(f"the audit log {self.path} is closed",
                                 "the audit log is closed")
            self._commit()  # the records pending before the reset go first (or are lost)
            outcome: object = True
            try:  # autocommit: committed when execute() returns
                self._conn.execute(INSERT_RESET, (device, epoch, _time.time()))
                self.failure = None
            except sqlite3.Error as error:
                outcome = self.failure = sqlite_problem(error)
                logger.error("the reset of %s was not recorded: could not commit to the "
                             "audit database %s: %s", device, self.path, outcome)
        if outcome is not True:
            raise AuditError(f"could not commit to the audit database {self.path}: {outcome}",
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
        outcome: object = True
        conn = self._conn
        keys = [pending.key_row for pending in batch if pending.key_row is not None]
        try:
            try:
                self._insert(batch, keys)
            except UnicodeEncodeError:  # a lone surrogate got this far: keep the records,
                if conn.in_transaction:  # with that text backslash-escaped
                    conn.execute("ROLLBACK")
                self._insert([_Pending(pending.shape, _as_text(pending.params), None)
                              for pending in batch], [KeyRow(*_as_text(key)) for key in keys])
            self.failure = None
        except Exception as error:  # sqlite3.Error, or a value SQLite cannot bind: never
            outcome = self.failure = sqlite_problem(error)  # nothing here kills the flusher
            logger.error("%d audit record(s) lost: could not commit to the audit database "
                         "%s: %s", len(batch), self.path, outcome)
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
        for pending in batch:
            pending.outcome = outcome
        return outcome

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
                conn = sqlite3.connect(self.path, isolation_level=None,
                                       check_same_thread=False)
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as error:
            logger.warning("could not checkpoint the audit database %s: %s", self.path, error)
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
            raise AuditError(f"could not commit to the audit database {self.path}: {outcome}",
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
            try:
                with _mapped(f"cannot close the audit database {self.path}"):
                    self._conn.close()
            finally:
                _unlock(self._lock_fd)  # the last: no commit can follow
        atexit.unregister(self.close)

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
        return f"AuditLog({str(self.path)!r}, durability={self.durability!r})"


def read_audit(path: str | Path, *, session: str | None = None, code: str | None = None,
                 since: float | None = None, until: float | None = None,
                 loop_id: str | None = None, last: int | None = None,
                 device: str | None = None, proposer: str | None = None,
                 caller: str | None = None) -> list[AuditRecord]:
    """Read records of an audit database, oldest first, opened read-only.

    Args:
        path: the database file.
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
    path = Path(path)
    _check_exists(path)
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
    # An intent whose call record was written is no news: only those without one are shown.
    where.append("NOT (event = 'intent' AND {intent} IN (SELECT {intent} FROM calls "
                 "WHERE event = 'call' AND {intent} IS NOT NULL))")
    query = "SELECT id, {columns} FROM calls"  # the columns this database has (_query)
    if where:
        query += " WHERE " + " AND ".join(where)
    if last is not None:
        query = f"SELECT * FROM ({query} ORDER BY id DESC LIMIT {int(last)})"
    query += " ORDER BY id"
    rows = _query(path, query, params)
    records = []
    for row in rows:
        values = list(row)
        values[10], values[19] = bool(values[10]), bool(values[19])  # ok, replay
        records.append(AuditRecord(*values))
    return records


def find_loop(path: str | Path, prefix: str) -> str:
    """The full id of the one loop in an audit database whose id starts with ``prefix`` (the
    text view of ``regdev audit`` shows the first 8 characters).

    Raises:
        AuditError: no database at ``path``, not a regdev audit log, or no loop or more than
            one loop id starts with ``prefix`` (the message lists up to 5 of them).
    """
    path = Path(path)
    _check_exists(path)
    rows = _query(path, "SELECT DISTINCT loop_id FROM calls WHERE substr(loop_id, 1, ?) = ? "
                        "ORDER BY loop_id LIMIT 6", [len(prefix), prefix])
    if len(rows) == 1:
        return str(rows[0][0])
    if not rows:
        raise AuditError(f"no loop id in {path} starts with {prefix!r}")
    shown = ", ".join(str(row[0]) for row in rows[:5]) + (", ..." if len(rows) > 5 else "")
    raise AuditError(f"{len(rows) if len(rows) <= 5 else 'more than 5'} loop ids in {path} "
                     f"start with {prefix!r} ({shown}); give more of the id")


def _add_columns(conn: sqlite3.Connection) -> str:
    """The ``ALTER TABLE`` statements that add the :data:`_ADDED_COLUMNS` an existing
    ``calls`` table lacks (none for a new database: its table is created with them)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(calls)")}
    if not have:
        return ""
    return "".join(f"ALTER TABLE calls ADD COLUMN {name} {kind};"
                   for name, kind in _ADDED_COLUMNS if name not in have)


def _check_exists(path: Path) -> None:
    """AuditError unless ``path`` is a file (the reading functions never create one)."""
    with _mapped(f"cannot read the audit database {path}"):
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
        sqlite3.Error, OSError: the database cannot be opened (for :func:`_mapped`).
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


def _query(path: Path, query: str, params: list[object]) -> list[tuple[Any, ...]]:
    """Run one query on the audit database at ``path``, opened read-only (see
    :func:`_connect_read_only`)."""
    with _mapped(f"cannot read the audit database {path}"):
        conn = _connect_read_only(path)
        try:
            has_calls = conn.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'table' "
                                     "AND name = 'calls'").fetchone()[0]
            if not has_calls:
                raise AuditError(f"{path} is not a regdev audit log")
            if "{columns}" in query:  # an added column a database not yet upgraded lacks: NULL
                have = {row[1] for row in conn.execute("PRAGMA table_info(calls)")}
                query = query.replace("{columns}", ", ".join(
                    name if name in have else f"NULL AS {name}" for name in _COLUMNS))
                for name, _ in _ADDED_COLUMNS:  # and in a filter, {name}
                    query = query.replace(f"{{{name}}}", name if name in have else "NULL")
            rows: list[tuple[Any, ...]] = conn.execute(query, params).fetchall()
        finally:
            conn.close()
    return rows
