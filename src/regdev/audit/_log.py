"""The audit log: every call, accepted or refused, appended to a SQLite database (WAL mode).

One file per part, and this module the one place their public names are taken from:

* :mod:`regdev.audit._record`: the ``calls`` table (schema, columns, migrations), one record
  as read back (:class:`AuditRecord`), the JSON in its columns, where the database lives, and
  the one mapping of the storage backend's errors to :class:`~regdev.AuditError`.
* :mod:`regdev.audit._writer`: :class:`AuditLog`, which appends records by group commit,
  with the background flusher and its checkpoints (durability, failing closed).
* :mod:`regdev.audit._reader`: the queries (:func:`read_audit`, :func:`find_loop`), read-only.
* :mod:`regdev.audit._lock`: the writer's lock, one writer a database.

Each file's docstring gives its rules.
"""

from __future__ import annotations

from ._lock import lock_path
from ._reader import find_loop, read_audit
from ._record import (
    AuditRecord,
    audit_target,
    default_audit_path,
    default_audit_root,
    encode_json,
    shown_dsn,
)
from ._writer import (
    BACKSTOP_CHECKPOINT_FRAMES,
    CHECKPOINT_FRAMES,
    DEFAULT_FLUSH_INTERVAL,
    DEFAULT_MAX_RAW_BYTES,
    MAX_PENDING,
    MAX_ROWS_PER_INSERT,
    AuditLog,
    Durability,
    Row,
    insert_statement,
)

__all__ = [
    "BACKSTOP_CHECKPOINT_FRAMES",
    "CHECKPOINT_FRAMES",
    "DEFAULT_FLUSH_INTERVAL",
    "DEFAULT_MAX_RAW_BYTES",
    "MAX_PENDING",
    "MAX_ROWS_PER_INSERT",
    "AuditLog",
    "AuditRecord",
    "Durability",
    "Row",
    "audit_target",
    "default_audit_path",
    "default_audit_root",
    "encode_json",
    "find_loop",
    "insert_statement",
    "lock_path",
    "read_audit",
    "shown_dsn",
]
