"""pytest-benchmark suite for the audit log's cost (the same measurements as
audit_throughput.py, which prints the ratios against the targets).

Run: ``.venv/bin/python -m pytest benchmarks/bench_audit.py``

Each group's table shows, in parentheses, every figure as a multiple of the group's best:
SQLite's own insert+commit beside the gate's writes, and the audit on beside off.
"""

from __future__ import annotations

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


@pytest.mark.benchmark(group="sequential write: SQLite insert+commit vs the gate")
def test_sqlite_insert_per_commit(benchmark: pytest.FixtureRequest, tmp_path: Path) -> None:
    """SQLite alone: one audit record inserted per commit (WAL, synchronous=NORMAL)."""
    run = sqlite_inserts(tmp_path / "sqlite.db", "crash", CALLS_PER_ROUND)
    benchmark.pedantic(run, rounds=15, warmup_rounds=1)  # type: ignore[attr-defined]


@pytest.mark.parametrize("audit", ["off", "on"])
@pytest.mark.benchmark(group="sequential write: SQLite insert+commit vs the gate")
def test_sequential_write(benchmark: pytest.FixtureRequest, gates: dict[str, Gate],
                          audit: str) -> None:
    """One thread, writes."""
    benchmark.pedantic(sequential, args=(gates[audit], CALLS["write"], CALLS_PER_ROUND),  # type: ignore[attr-defined]
                       rounds=15, warmup_rounds=1)


@pytest.mark.parametrize("kind", ["read", "refusal"])
@pytest.mark.parametrize("audit", ["off", "on"])
def test_sequential(benchmark: pytest.FixtureRequest, gates: dict[str, Gate], audit: str,
                    kind: str) -> None:
    """One thread, reads or refusals (range-addr)."""
    benchmark.group = f"sequential {kind}"  # type: ignore[attr-defined]
    benchmark.pedantic(sequential, args=(gates[audit], CALLS[kind], CALLS_PER_ROUND),  # type: ignore[attr-defined]
                       rounds=15, warmup_rounds=1)


@pytest.mark.parametrize("kind", ["write", "read", "refusal"])
@pytest.mark.parametrize("audit", ["off", "on"])
def test_eight_threads(benchmark: pytest.FixtureRequest, gates: dict[str, Gate], audit: str,
                       kind: str) -> None:
    """8 threads on one gate, CALLS_PER_ROUND calls between them."""
    benchmark.group = f"8 threads {kind}"  # type: ignore[attr-defined]
    benchmark.pedantic(concurrent, args=(gates[audit], CALLS[kind], CALLS_PER_ROUND),  # type: ignore[attr-defined]
                       rounds=15, warmup_rounds=1)
