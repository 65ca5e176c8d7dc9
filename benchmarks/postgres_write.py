"""A write through a gate audited on PostgreSQL against psycopg's own inserts and commits of the
same records.

The PostgreSQL store's hot path: ``Gate.handle`` of a valid write on a gate whose audit log
is a PostgreSQL store (``open_audit("postgresql://...")``), one call after another. Such a write
commits twice, by rule: its intent before the device is written (a write never runs without a
durable trace), then its record before the call returns (no acknowledged write lacks its
record); each commit is one statement, one round trip. Two anchors, written out below, insert
the very rows the gate wrote for a write (read back from its store) with psycopg 3 in
autocommit, on another connection to the same server:

* ``write, 1 commit``: the goal's anchor, the write's record alone (one insert, one commit).
  The goal: within 1.3x. Two commits cannot be within 1.3x of one where a commit costs a round
  trip: this row stays missed by design.
* ``write, 2 commits``: the honest anchor, the same two commits the gate makes (the intent row,
  then the record row); goal within 1.3x too.

Run::

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
from collections.abc import Iterator
from pathlib import Path

from _compare import Goal, case, compare, options
from _script import need
from regdev import Gate, open_audit
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

    from regdev.audit._record import COLUMNS  # noqa: PLC0415

    insert = (f"INSERT INTO calls ({', '.join(COLUMNS)}) "
              f"VALUES ({', '.join(['%s'] * len(COLUMNS))})")
    with server(parser_args.dsn) as dsn:
        audited = fresh_schema(dsn, "regdev_bench_audit")
        anchor_dsn = fresh_schema(dsn, "regdev_bench_anchor")
        open_audit(anchor_dsn).close()  # the anchor's table: the store's own schema
        connection = psycopg.connect(anchor_dsn, autocommit=True)
        execute = connection.execute
        try:
            with Gate(audit=open_audit(audited)) as gate:
                handle = gate.handle
                if not handle(WRITE).ok:
                    raise SystemExit("the write was refused")
                with psycopg.connect(audited) as reader:  # the rows the gate wrote for it
                    intent, record = reader.execute(
                        f"SELECT {', '.join(COLUMNS)} FROM calls ORDER BY id").fetchall()
                if (intent[1], record[1]) != ("intent", "call"):
                    raise SystemExit(f"unexpected records: {intent[1]}, {record[1]}")

                def anchor(commits: str) -> object:
                    if commits == "2":
                        execute(insert, intent)
                    return execute(insert, record)

                compare("A write through a gate audited on PostgreSQL against psycopg's inserts "
                        "and commits of its rows", Contender(
                            "regdev", 'Gate(audit=open_audit("postgresql://...")).handle, a '
                            "valid write (its intent, then its record: 2 commits)", raw=True,
                            on_refusal="observation", run=lambda commits: handle(WRITE),
                            valid=lambda commits: handle(WRITE).ok),
                        Contender("anchor", "psycopg 3: INSERT of the gate's rows, autocommit, "
                                  "one commit each (1: the record; 2: the intent, then the "
                                  "record), written out in this script", raw=True,
                                  on_refusal="bool", run=anchor,
                                  valid=lambda commits: anchor(commits) is not None),
                        (case("write, 1 commit", "1", True),
                         case("write, 2 commits", "2", True)),
                        goals={"write, 1 commit": Goal(at_most=1.3),
                               "write, 2 commits": Goal(at_most=1.3)},
                        args=parser_args, unit="us", scale=1000)
        finally:
            connection.close()


if __name__ == "__main__":
    main()
