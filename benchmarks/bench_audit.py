"""pytest-benchmark suite for the audit log's cost (the same measurements as
audit_throughput.py, which prints the ratios against the targets).

Run: ``scripts/test benchmarks/bench_audit.py``

Each group's table shows, in parentheses, every figure as a multiple of the group's best:
SQLite's own insert+commit beside the gate's writes, and the audit on beside off.
"""

from __future__ import annotations

import sys

from _script import suite

if __name__ == "__main__":  # run as a script: say how to run the suite (before importing pytest)
    sys.exit(suite(__file__, __doc__))

from collections.abc import Iterator
from pathlib import Path

import pytest

from audit_throughput import CALLS, concurrent, sequential, sqlite_inserts
from regdev import AuditLog, Gate

CALLS_PER_ROUND = 500


@pytest.fixture(scope="module")
def gates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Gate]]:
    folder = tmp_path_factory.mktemp("audit-bench")
    audited = Gate(audit=AuditLog(folder / "audit.db"))
    yield {"off": Gate(), "on": audited}
    audited.close()


SQLITE_GROUP = "sequential write (beside SQLite insert+commit)"
RUNNERS = {"sequential": sequential, "8 threads": concurrent}


@pytest.mark.benchmark(group=SQLITE_GROUP)
def test_sqlite_insert_per_commit(benchmark: pytest.FixtureRequest, tmp_path: Path) -> None:
    """SQLite alone: one audit record inserted per commit (WAL, synchronous=NORMAL)."""
    run = sqlite_inserts(tmp_path / "sqlite.db", "crash", CALLS_PER_ROUND)
    benchmark.pedantic(run, rounds=15, warmup_rounds=1)  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", list(RUNNERS))
@pytest.mark.parametrize("kind", list(CALLS))
@pytest.mark.parametrize("audit", ["off", "on"])
def test_gate(benchmark: pytest.FixtureRequest, gates: dict[str, Gate], audit: str, kind: str,
              mode: str) -> None:
    """CALLS_PER_ROUND calls of one kind (write, read, refusal), from one thread or 8."""
    group = f"{mode} {kind}"
    benchmark.group = SQLITE_GROUP if group == "sequential write" else group  # type: ignore[attr-defined]
    benchmark.pedantic(RUNNERS[mode], args=(gates[audit], CALLS[kind], CALLS_PER_ROUND),  # type: ignore[attr-defined]
                       rounds=15, warmup_rounds=1)
