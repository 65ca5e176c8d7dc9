"""Audited writes per second on one PostgreSQL store: 3 processes against 1.

Each process runs a gate over its own in-process device with its audit log on the same
PostgreSQL store (``open_audit("postgresql://...")``), and ``--threads`` threads calling
``Gate.handle`` with valid writes, each write's records committed before it returns. First one
process alone for ``--seconds``, then three at once for as long; the writes each completed are
counted (every one checked accepted), and the script prints both rates and their ratio. The
goal: 3 processes give at least 2x the audited writes per second of one. It also prints the CPU
a write cost, its process's and its two server backends' (Linux's ``/proc``; a server on
another machine is not counted), and the rate the machine's CPUs would carry at that cost: one
process that already takes half of them cannot be doubled. Run::

    .venv/bin/python benchmarks/postgres_processes.py [--dsn URL] [--seconds S] [--threads N]
        [--json]

Without ``--dsn``, the script starts a PostgreSQL server of its own on 127.0.0.1, as the
tests do (``tests/support/pgserver.py``). Not a test: nothing asserts a rate; on a machine
with fewer cores than processes (or a load average above its CPU count) the ratio says little.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any

from _script import Parser, count, need
from postgres_write import fresh_schema, server

WRITE = '{"tool": "write_register", "arguments": {"addr": 3, "data": 255}}'


def cpu_seconds(pid: int) -> float:
    """The CPU time, user and system, process ``pid`` used so far, in seconds (Linux's
    ``/proc/PID/stat``); NaN where it cannot be read (another machine's server)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker(dsn: str, threads: int, start: Any, seconds: float, done: Any) -> None:
    """One process: ``threads`` threads writing through one audited gate for ``seconds``
    after ``start`` is set; puts the number of accepted writes in ``done``, with the CPU
    seconds this process and its store's server processes (its connections' backends) used
    meanwhile."""
    from regdev import Gate, open_audit  # noqa: PLC0415 - in the child

    counts = [0] * threads
    audit = open_audit(dsn)
    backends = [audit._pg.info.backend_pid,  # type: ignore[attr-defined]
                audit.idempotency._conn.info.backend_pid]  # type: ignore[attr-defined]
    with Gate(audit=audit) as gate:
        gate.handle(WRITE)  # connected and warm before the clock starts
        start.wait()
        used = time.process_time() + sum(cpu_seconds(pid) for pid in backends)
        until = time.monotonic() + seconds

        def run(at: int) -> None:
            while time.monotonic() < until:
                if not gate.handle(WRITE).ok:
                    raise SystemExit("a write was refused")
                counts[at] += 1

        pool = [threading.Thread(target=run, args=(at,)) for at in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        used = time.process_time() + sum(cpu_seconds(pid) for pid in backends) - used
    done.put((sum(counts), used))


def rate(dsn: str, processes: int, threads: int, seconds: float) -> tuple[float, float]:
    """Audited writes per second of ``processes`` processes at once, and the CPU seconds a
    write cost (its process and its server backends)."""
    context = multiprocessing.get_context("spawn")
    start, done = context.Event(), context.Queue()
    pool = [context.Process(target=worker, args=(dsn, threads, start, seconds, done))
            for _ in range(processes)]
    for process in pool:
        process.start()
    time.sleep(3.0)  # each connects and warms up before the clock starts
    start.set()
    results = [done.get(timeout=seconds + 120) for _ in pool]
    for process in pool:
        process.join(timeout=60)
    total, used = sum(count for count, _ in results), sum(cpu for _, cpu in results)
    return total / seconds, used / total if total else float("nan")


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", metavar="URL", help="a PostgreSQL server's URL (default: "
                        "start one on 127.0.0.1 for this run)")
    parser.add_argument("--seconds", type=count(1, 3600), default=10, metavar="S",
                        help="seconds each configuration writes (default 10)")
    parser.add_argument("--threads", type=count(1, 64), default=4, metavar="N",
                        help="threads per process (default 4)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    need("postgresql", "psycopg")
    with server(args.dsn) as dsn:
        one, one_cpu = rate(fresh_schema(dsn, "regdev_bench_one"), 1, args.threads,
                            args.seconds)
        three, three_cpu = rate(fresh_schema(dsn, "regdev_bench_three"), 3, args.threads,
                                args.seconds)
    ratio = three / one if one else float("inf")
    load = os.getloadavg()
    cpus = os.cpu_count() or 1
    ceiling = cpus / three_cpu if math.isfinite(three_cpu) and three_cpu > 0 else math.nan
    if args.json:
        print(json.dumps({"one_process": one, "three_processes": three, "ratio": ratio,
                          "goal": ">= 2.00", "met": ratio >= 2.0, "threads": args.threads,
                          "cpu_us_per_write": {"one": one_cpu * 1e6, "three": three_cpu * 1e6},
                          "cpu_ceiling": ceiling, "seconds": args.seconds, "load": list(load),
                          "cpus": cpus}))
        return
    print(f"Audited writes per second on one PostgreSQL store, {args.threads} threads a "
          f"process, {args.seconds} s each")
    print(f"  1 process:   {one:8.0f} writes/s   {one_cpu * 1e6:6.0f} us of CPU a write "
          "(the writer and its server backends)")
    print(f"  3 processes: {three:8.0f} writes/s   {three_cpu * 1e6:6.0f} us of CPU a write")
    print(f"  ratio {ratio:.2f}x   goal >= 2.00x: {'met' if ratio >= 2.0 else 'MISSED'}")
    print(f"  at that CPU a write, {cpus} CPUs given wholly to it would carry about "
          f"{ceiling:.0f} writes/s: 1 process reached {one / ceiling:.0%} of that, 3 "
          f"{three / ceiling:.0%}" if math.isfinite(ceiling) else "  (CPU not measured)")
    print(f"  load average {load[0]:.1f} on {cpus} CPUs")


if __name__ == "__main__":
    main()
