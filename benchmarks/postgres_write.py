"""A write through a gate audited on PostgreSQL against psycopg's own insert and commit of the
same record.

The PostgreSQL store's hot path: ``Gate.handle`` of a valid write on a gate whose audit log
is a PostgreSQL store (``open_audit("postgresql://...")``: the write's record committed before
the call returns), one call after another, against the anchor written out below: psycopg 3
executing the very INSERT the store commits a write by, of the same pre-built record, in
autocommit (one insert, one commit), on another connection to the same server. The goal: an
audited write within 1.3x of the anchor's time (a rate at least 0.77 of its rate). Run::

    .venv/bin/python benchmarks/postgres_write.py [--dsn URL] [--rounds N] [--batch-ms MS]
        [--json]

Without ``--dsn``, the script starts a PostgreSQL server of its own on 127.0.0.1, as the
tests do (``tests/support/pgserver.py``: Debian's binaries; ``fsync`` off there, which both sides
share). Both sides are timed in the same run, batches interleaved, with the wall clock (a
commit waits for the server).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from _compare import Goal, case, compare, options
from _script import need
from regdev import Gate, Observation, open_audit
from regdev.bench._bench import Contender

WRITE = '{"tool": "write_register", "arguments": {"addr": 3, "data": 255}}'


@contextlib.contextmanager
def server(dsn: str | None) -> Iterator[str]:
    """The DSN given, or that of a PostgreSQL server started for this run (stopped after)."""
    if dsn is not None:
        yield dsn
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from support import pgserver  # noqa: PLC0415 - the tests' harness

    try:
        with pgserver.started() as started:
            yield started.dsn
    except pgserver.Missing as error:
        print(f"{Path(sys.argv[0]).name}: {error}", file=sys.stderr)
        sys.exit(2)


def fresh_schema(dsn: str, name: str) -> str:
    """``dsn`` with a new schema ``name`` (dropped first when there) as its search path."""
    import psycopg  # noqa: PLC0415 - the postgresql extra

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        conn.execute(f"CREATE SCHEMA {name}")
    separator = "&" if "?" in dsn else "?"
    return f"{dsn}{separator}options=-csearch_path%3D{name}"


def main() -> None:
    parser_args = options(__doc__.splitlines()[0], rounds=15, batch_ms=20, cpu=False,
                          dsn=True)
    need("postgresql", "psycopg")
    import psycopg  # noqa: PLC0415 - the postgresql extra

    from regdev.audit._pgschema import _placeholders  # noqa: PLC0415
    from regdev.audit._writer import insert_statement  # noqa: PLC0415

    with server(parser_args.dsn) as dsn:
        audited = fresh_schema(dsn, "regdev_bench_audit")
        anchor_dsn = fresh_schema(dsn, "regdev_bench_anchor")
        with open_audit(anchor_dsn) as source:  # the anchor's table: the store's own schema
            row = source.row(time=time.time(), session="default", dialect="canonical",
                             raw=WRITE.encode(),
                             observation=Observation.success("write_register",
                                                             {"addr": 3, "data": 255}),
                             tool="write_register", arguments='{"addr":3,"data":255}',
                             timings={"parse": 1000, "validate": 2000, "authorize": 3000,
                                      "execute": 4000, "observe": 5000})
        statement, parameters = insert_statement([row])
        statement = _placeholders(statement)
        connection = psycopg.connect(anchor_dsn, autocommit=True)
        execute = connection.execute
        try:
            with Gate(audit=open_audit(audited)) as gate:
                handle = gate.handle
                compare("A write through a gate audited on PostgreSQL against psycopg's insert "
                        "and commit", Contender(
                            "regdev", 'Gate(audit=open_audit("postgresql://...")).handle, a '
                            "valid write", raw=True, on_refusal="observation", run=handle,
                            valid=lambda raw: handle(raw).ok),
                        Contender("anchor", "psycopg 3: the store's INSERT of one record, "
                                  "autocommit, written out in this script", raw=True,
                                  on_refusal="bool",
                                  run=lambda raw: execute(statement, parameters),
                                  valid=lambda raw: execute(statement, parameters) is not None),
                        (case("write", WRITE, True),), goals={"write": Goal(at_most=1.3)},
                        args=parser_args, unit="us", scale=1000)
        finally:
            connection.close()


if __name__ == "__main__":
    main()
