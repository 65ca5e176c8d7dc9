"""pytest-benchmark suite: the contenders and inputs of ``regdev bench``, one benchmark each.

Not part of the test suite (``scripts/test`` collects ``tests/`` only). Run it with::

    .venv/bin/python -m pytest benchmarks/bench_validators.py --benchmark-disable-gc \
        --benchmark-group-by=param:case \
        --benchmark-columns=median,iqr,ops

Each group is one input (a valid ``write_register`` call, or one refusal kind); compare the
rows of a group (pytest-benchmark prints them sorted, fastest first). Every contender is
called through the same small wrapper (a refusal may raise), so the wrapper's cost is in
every row alike. ``regdev bench`` gives the same comparison as one table, with ratios.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from regdev._bench import CASES, Contender, contenders

ROWS = {row.name: row for row in contenders()}
TITLES = [title for title, _, _ in CASES]


def _swallow(run: Callable[[Any], Any]) -> Callable[[Any], None]:
    def call(value: Any) -> None:
        try:  # noqa: SIM105 - contextlib.suppress would cost more than a refusal
            run(value)
        except Exception:
            pass
    return call


def _bench(benchmark: Any, row: Contender, case: str) -> None:
    if row.run is None or row.valid is None:
        pytest.skip(row.note)
    _, call, code = CASES[TITLES.index(case)]
    value = msgspec.json.encode(call).decode() if row.raw else call
    assert row.valid(value) == (code is None), f"{row.name} disagrees on {case}"
    benchmark(_swallow(row.run), value)


@pytest.mark.parametrize("case", TITLES)
@pytest.mark.parametrize("name", [name for name, row in ROWS.items() if not row.raw])
def test_call_object(benchmark: Any, name: str, case: str) -> None:
    """A decoded call object -> verdict."""
    _bench(benchmark, ROWS[name], case)


@pytest.mark.parametrize("case", TITLES)
@pytest.mark.parametrize("name", [name for name, row in ROWS.items() if row.raw])
def test_raw_text(benchmark: Any, name: str, case: str) -> None:
    """Raw JSON text -> verdict (parse and validate)."""
    _bench(benchmark, ROWS[name], case)
