"""The audit log: every call, accepted or refused, appended to a SQLite database (WAL mode).

One file per part, and this module the one place their public names are taken from:

* :mod:`regdev.audit._record`: the ``calls`` table (schema, columns, migrations), one record
  as read back (:class:`AuditRecord`), the JSON in its columns, where the database lives, and
  the one mapping of the storage backend's errors to :class:`~regdev.AuditError`.
* :mod:`regdev.audit._writer`: :class:`AuditLog`, which appends records by group commit,
  with the background flusher and its checkpoints (durability, failing closed).
* :mod:`regdev.audit._reader`: the queries (:func:`read_audit`, :func:`find_loop`), read-only.
* :mod:`regdev.audit._lock`: the writer's lock, one writer a database.
* :mod:`regdev.audit._postgres` (with :mod:`regdev.audit._pgschema`): the PostgreSQL store,
  an :class:`AuditLog` several processes share; :func:`open_audit` opens either store.

Each file's docstring gives its rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core._errors import AuditError
from ._lock import lock_path
from ._reader import find_loop, read_audit
from ._record import (
    AuditRecord,
    audit_target,
    default_audit_path,
    default_audit_root,
    encode_json,
    is_dsn,
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
    "open_audit",
    "read_audit",
    "shown_dsn",
]


def open_audit(target: str | Path, **options: Any) -> AuditLog:
    """Open the audit log at ``target``: a SQLite database file (a path), or a PostgreSQL
    store (a ``postgresql://`` or ``postgres://`` URL; the ``postgresql`` extra), which
    several regdev processes share (docs/postgresql.md).

    Args:
        target: the database file's path, or the store's URL.
        options: as :class:`AuditLog` takes them (``durability``, ``flush_interval``,
            ``max_raw_bytes``).

    Returns:
        The open :class:`AuditLog` (for a URL, its PostgreSQL form,
        :class:`~regdev.audit._postgres.PostgresAuditLog`).

    Raises:
        AuditError: the store cannot be opened (a wrong URL, the server down, another schema
            version: one line saying which), or psycopg is not installed for a URL.
        AuditInUse, ValueError: as :class:`AuditLog` raises them.
    """
    if is_dsn(target):
        try:
            from ._postgres import PostgresAuditLog  # noqa: PLC0415 - the optional extra's
        except ModuleNotFoundError as error:
            raise AuditError(f"a PostgreSQL store needs {error.name}, which is not installed: "
                             "pip install 'regdev[postgresql]'") from None
        return PostgresAuditLog(str(target), **options)
    return AuditLog(target, **options)
