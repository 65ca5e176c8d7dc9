"""Where an audited write's time goes: each piece of ``Gate(audit=AuditLog(path)).handle``.

The hot-path audit row (``benchmarks/audit_write.py``) compares a write through an audited gate
with SQLite's own insert and commit of the same kind of record. This script times the pieces
between the two, each alone, in interleaved rounds of one run, with the CPU clock of this
thread (a commit in WAL mode with ``synchronous=NORMAL`` writes the WAL into the OS's cache
and waits for no disk, so its cost is CPU time, the kernel's included), and prints the
median of each and what the pieces add up to against the whole::

    .venv/bin/python benchmarks/audit_breakdown.py [--rounds N] [--calls N] [--json]

The pieces of one audited write (a valid ``write_register`` call, durability ``crash``):

* ``sqlite``: the anchor, one autocommit INSERT of a built record (as ``audit_write.py``);
* ``gate``: the plain gate's call (no audit log): parse, validate, execute, observe;
* ``stages``: the audited path with its record not made (``AuditLog.record_call`` replaced by
  a function of its signature that does nothing), less ``gate``: the arrival time, the five
  stage times, the audit log's authorize step, the JSON of the arguments, the device's
  identity, the call to ``record_call``;
* ``record``: building the record (``AuditLog._call_row``: the SHA-256 and copy of the raw
  call, the result's JSON, the row, its NULL pattern), of which ``sha256`` and ``json`` alone;
* ``commit``: appending a built record durably (``AuditLog._append``: the pending record, two
  locks, the commit's bookkeeping, SQLite's execute), less the same execute on the same
  connection.

Not a test: nothing asserts a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _script import MAX_ROUNDS, Parser, count
from audit_write import WRITE, sqlite_insert
from regdev import AuditLog, Gate, Observation
from regdev.audit._log import encode_json, insert_statement


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=count(1, MAX_ROUNDS), default=31, metavar="N",
                        help=f"interleaved rounds, the median shown: 1..{MAX_ROUNDS} (default 31)")
    parser.add_argument("--calls", type=count(1, 100_000), default=300, metavar="N",
                        help="calls per piece per round: 1..100000 (default 300)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    clock = time.thread_time_ns
    with tempfile.TemporaryDirectory(prefix="regdev-bench-") as folder:
        connection = sqlite_insert(Path(folder) / "sqlite.db")
        audited = Gate(audit=AuditLog(Path(folder) / "audit.db"))
        unrecorded = Gate(audit=AuditLog(Path(folder) / "unrecorded.db"))
        plain = Gate()
        log = AuditLog(Path(folder) / "parts.db")
        observation = Observation.success("write_register", {"addr": 3, "data": 255})
        fields: tuple[Any, ...] = (
            time.time(), "default", "canonical", WRITE, observation, "write_register",
            '{"addr":3,"data":255}', None, None, None, (1000, 2000, 3000, 4000, 5000),
            audited.device.known_identity(), None, None, None, None)
        row, shape = log._call_row(*fields)
        params = shape.take(row)
        statement, parameters = insert_statement([row])

        def nothing(**_: object) -> None:
            """``record_call`` that records nothing."""

        unrecorded.audit.record_call = nothing  # type: ignore[method-assign,union-attr]
        raw, result = WRITE.encode(), observation.result
        pieces: dict[str, Callable[[], object]] = {
            "whole": lambda: audited.handle(WRITE),
            "sqlite": lambda: connection.execute(statement, parameters),
            "gate": lambda: plain.handle(WRITE),
            "stages+gate": lambda: unrecorded.handle(WRITE),
            "record": lambda: log._call_row(*fields),
            "sha256": lambda: hashlib.sha256(raw).digest(),
            "json": lambda: encode_json(result),
            "commit+sqlite": lambda: log._append(shape, params, None, True),
            "sqlite here": lambda: log._conn.execute(shape.one, params),
        }
        samples: dict[str, list[float]] = {name: [] for name in pieces}
        for round_ in range(args.rounds + 1):
            for name, piece in pieces.items():
                start = clock()
                for _ in range(args.calls):
                    piece()
                if round_:  # the first round warms up
                    samples[name].append((clock() - start) / args.calls / 1000)
        for gate in (audited, unrecorded):
            gate.close()
        log.close()
        connection.close()
    us = {name: statistics.median(values) for name, values in samples.items()}
    parts = {"sqlite": us["sqlite"], "gate": us["gate"],
             "stages": us["stages+gate"] - us["gate"], "record": us["record"],
             "commit": us["commit+sqlite"] - us["sqlite here"]}
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"us": us, "parts": parts, "sum": sum(parts.values()),
                          "ratio": us["sqlite"] / us["whole"], "load": load}))
        return
    print(f"An audited write, piece by piece: us per call, CPU clock of this thread, median of "
          f"{args.rounds} interleaved rounds of {args.calls} calls; load average {load:.1f}")
    for name, value in parts.items():
        print(f"  {name:<8}{value:8.2f}")
    print(f"    of the record: sha256 {us['sha256']:.2f}, the result's JSON {us['json']:.2f}")
    print(f"  {'sum':<8}{sum(parts.values()):8.2f}   the whole write, timed: {us['whole']:.2f} "
          f"(SQLite / whole: {us['sqlite'] / us['whole']:.2f} of its rate)")


if __name__ == "__main__":
    main()
