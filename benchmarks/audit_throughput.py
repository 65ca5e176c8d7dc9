"""The audit log's cost: gate throughput with the audit on vs off, beside SQLite's own rate.

Run: ``.venv/bin/python benchmarks/audit_throughput.py [--calls N] [--rounds R] [--json]``

Every figure comes from one run, measured in interleaved rounds (each round runs every
configuration once, on the same machine state), and the median round is reported:

* sequential: one thread calls the gate ``--calls`` times, for writes, reads and refusals
  (``range-addr``), with the audit off (a plain ``Gate``) and on (``AuditLog``, durability
  ``crash``: WAL, ``synchronous=NORMAL``);
* concurrent: 8 threads share one gate and make ``--calls`` calls between them;
* SQLite: one thread inserts a pre-built audit record per commit (autocommit ``INSERT``) into a
  database with the same schema and the same pragmas: the rate SQLite itself allows for one
  durable record per write, the floor under any audit that commits each write before answering.

Targets (raised by the hot-path work): sequential writes with the audit on reach >= 85% of the
SQLite rate (``benchmarks/audit_write.py`` times that row alone); with 8 concurrent callers
the audit costs < 2x (group commit); reads and refusals cost < 2x in both.
With ``--durability power-loss`` both the audit and the SQLite baseline use
``synchronous=FULL``.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from _script import MAX_ROUNDS, Parser, count
from regdev import AuditLog, Gate, Observation
from regdev.audit._record import SCHEMA
from regdev.audit._writer import _SYNCHRONOUS, insert_statement

CALLS = {
    "write": '{"tool": "write_register", "arguments": {"addr": 3, "data": 255}}',
    "read": '{"tool": "read_register", "arguments": {"addr": 3}}',
    "refusal": '{"tool": "write_register", "arguments": {"addr": 16, "data": 1}}',
}
THREADS = 8


def sequential(gate: Gate, raw: str, calls: int) -> float:
    """Seconds for ``calls`` calls from one thread."""
    handle = gate.handle
    start = time.perf_counter()
    for _ in range(calls):
        handle(raw)
    return time.perf_counter() - start


def concurrent(gate: Gate, raw: str, calls: int, threads: int = THREADS) -> float:
    """Seconds for ``calls`` calls shared by ``threads`` threads, from a common start."""
    each = calls // threads
    barrier = threading.Barrier(threads + 1)

    def worker() -> None:
        handle = gate.handle
        barrier.wait()
        for _ in range(each):
            handle(raw)
        barrier.wait()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    barrier.wait()
    elapsed = time.perf_counter() - start
    for thread in pool:
        thread.join()
    return elapsed * calls / (each * threads)


def sqlite_inserts(path: Path, durability: str, calls: int) -> Callable[[], float]:
    """A function timing ``calls`` single-insert commits of one audit record."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={_SYNCHRONOUS[durability]}")
    conn.executescript(SCHEMA)
    with AuditLog(path.with_suffix(".rowsource.db")) as source:  # the same record the gate writes
        row = source.row(time=time.time(), session="default", dialect="canonical",
                         raw=CALLS["write"].encode(),
                         observation=Observation.success("write_register",
                                                         {"addr": 3, "data": 255}),
                         tool="write_register", arguments='{"addr":3,"data":255}',
                         timings={"parse": 1000, "validate": 2000, "authorize": 3000,
                                  "execute": 4000, "observe": 5000})

    statement, params = insert_statement([row])  # the statement the audit log commits a write by

    def run() -> float:
        execute = conn.execute
        start = time.perf_counter()
        for _ in range(calls):
            execute(statement, params)
        return time.perf_counter() - start

    return run


def measure(calls: int, rounds: int, durability: str, folder: Path) -> dict[str, float]:
    """Median seconds per call of every configuration, over ``rounds`` interleaved rounds."""
    plain = Gate()
    audited = Gate(audit=AuditLog(folder / "audit.db", durability=durability))  # type: ignore[arg-type]
    baseline = sqlite_inserts(folder / "sqlite.db", durability, calls)
    samples: dict[str, list[float]] = {}
    jobs: dict[str, Callable[[], float]] = {"sqlite insert+commit": baseline}
    for kind, raw in CALLS.items():
        for mode, runner in (("sequential", sequential), ("8 threads", concurrent)):
            for audit, gate in (("off", plain), ("on", audited)):
                jobs[f"{mode} {kind} audit {audit}"] = (
                    lambda runner=runner, gate=gate, raw=raw: runner(gate, raw, calls))
    for job in jobs.values():  # warm up: caches, statement cache, thread start
        job()
    for _ in range(rounds):
        for name, job in jobs.items():
            samples.setdefault(name, []).append(job() / calls)
    audited.close()
    return {name: statistics.median(values) for name, values in samples.items()}


def report(per_call: dict[str, float]) -> dict[str, float]:
    """The ratios the targets are stated in."""
    sqlite = per_call["sqlite insert+commit"]
    ratios = {"sequential writes, audit on, rate vs SQLite": sqlite / per_call[
        "sequential write audit on"]}
    for mode in ("sequential", "8 threads"):
        for kind in CALLS:
            ratios[f"{mode} {kind}: cost of the audit (on/off)"] = (
                per_call[f"{mode} {kind} audit on"] / per_call[f"{mode} {kind} audit off"])
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=count(1, 100_000), default=4000, metavar="N",
                        help="calls per measurement: 1..100000 (default 4000)")
    parser.add_argument("--rounds", type=count(1, MAX_ROUNDS), default=7, metavar="N",
                        help=f"interleaved rounds, the median shown: 1..{MAX_ROUNDS} (default 7)")
    parser.add_argument("--durability", choices=("crash", "power-loss"), default="crash")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="regdev-bench-") as folder:
        per_call = measure(args.calls, args.rounds, args.durability, Path(folder))
    ratios = report(per_call)
    if args.json:
        print(json.dumps({"us_per_call": {k: v * 1e6 for k, v in per_call.items()},
                          "ratios": ratios}, indent=2))
        return 0
    print(f"{args.calls} calls per measurement, median of {args.rounds} interleaved rounds, "
          f"durability {args.durability}, Python {sys.version.split()[0]}, "
          f"SQLite {sqlite3.sqlite_version}")
    print(f"\n{'configuration':<36} {'us/call':>9} {'calls/s':>10}")
    for name, seconds in per_call.items():
        print(f"{name:<36} {seconds * 1e6:>9.1f} {1 / seconds:>10.0f}")
    print(f"\n{'ratio':<52} {'value':>6}  target")
    for name, value in ratios.items():
        target = ">= 0.85" if "vs SQLite" in name else ("< 2.00" if "8 threads" in name
                                                          or "write" not in name else "-")
        print(f"{name:<52} {value:>6.2f}  {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
