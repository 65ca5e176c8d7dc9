"""A write through an audited gate against SQLite's own rate of one durable insert a commit.

The hot-path table's audit row: ``Gate.handle`` of a valid write on a gate with an audit log
(``AuditLog``, durability ``crash``: WAL, ``synchronous=NORMAL``; the write's record committed
before the call returns), one call after another, against the anchor written out below: one
thread inserting the same pre-built audit record per autocommit ``INSERT``, with the very
statement the audit log commits a write by, into a database of the same schema and pragmas.
That is the floor under any audit that commits each write before answering. The goal is a
rate at least 0.85 of the anchor's (anchor time / regdev time). Run::

    .venv/bin/python benchmarks/audit_write.py [--rounds N] [--batch-ms MS] [--json]

Both sides are timed in the same run, batches interleaved, with the wall clock (a commit
waits for the disk; the CPU clock would not see it). ``benchmarks/audit_throughput.py`` gives
the other configurations (reads, refusals, 8 threads).
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path

from _compare import Goal, case, compare, options
from regdev import AuditLog, Gate, Observation
from regdev.audit._record import SCHEMA
from regdev.audit._writer import _SYNCHRONOUS, insert_statement
from regdev.bench._bench import Contender

WRITE = '{"tool": "write_register", "arguments": {"addr": 3, "data": 255}}'


def sqlite_insert(path: Path) -> sqlite3.Connection:
    """The anchor's database: the audit log's schema and pragmas (durability ``crash``)."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute(f"PRAGMA synchronous={_SYNCHRONOUS['crash']}")
    connection.executescript(SCHEMA)
    return connection


def main() -> None:
    args = options(__doc__.splitlines()[0], rounds=15, batch_ms=20, cpu=False)
    with tempfile.TemporaryDirectory(prefix="regdev-bench-") as folder:
        connection = sqlite_insert(Path(folder) / "sqlite.db")
        with AuditLog(Path(folder) / "row.db") as source:  # the record the gate writes
            row = source.row(time=time.time(), session="default", dialect="canonical",
                             raw=WRITE.encode(),
                             observation=Observation.success("write_register",
                                                             {"addr": 3, "data": 255}),
                             tool="write_register", arguments='{"addr":3,"data":255}',
                             timings={"parse": 1000, "validate": 2000, "authorize": 3000,
                                      "execute": 4000, "observe": 5000})
        statement, parameters = insert_statement([row])
        execute = connection.execute
        with Gate(audit=AuditLog(Path(folder) / "audit.db")) as gate:
            handle = gate.handle
            compare("A write through an audited gate against SQLite's insert per commit",
                    Contender("regdev", "Gate(audit=AuditLog(path)).handle, a valid write",
                              raw=True, on_refusal="observation", run=handle,
                              valid=lambda raw: handle(raw).ok),
                    Contender("anchor", "sqlite3: the audit log's INSERT of one record, "
                              "autocommit, written out in this script", raw=True,
                              on_refusal="bool", run=lambda raw: execute(statement, parameters),
                              valid=lambda raw: execute(statement, parameters) is not None),
                    (case("write", WRITE, True),), goals={"write": Goal(at_least=0.85)}, args=args,
                    unit="us", scale=1000, figure=lambda times: times)
        connection.close()


if __name__ == "__main__":
    main()
