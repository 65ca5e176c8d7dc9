"""pytest-benchmark suite: the contenders and inputs of ``regdev bench``, one benchmark each.

Not part of the test suite (``scripts/test`` alone collects ``tests/`` only). Run it with::

    scripts/test benchmarks/bench_validators.py --benchmark-disable-gc \
        --benchmark-group-by=param:case \
        --benchmark-columns=median,iqr,ops

Each group is one input (the cases of ``regdev bench``: valid calls, refusals, large calls);
compare the rows of a group (pytest-benchmark prints them sorted, fastest first). Rows are
named by contender key (``pydantic-json``); the full name, with the library's installed
version and the API called, is in each benchmark's ``extra_info``. A contender that disagrees
with regdev's verdict on a case fails that benchmark instead of timing different work.
Every contender is called through the same small wrapper (a refusal may raise), so the
wrapper's cost is in every row alike. ``regdev bench`` gives the same comparison as one
report, with ratios.
"""

from __future__ import annotations

import sys

from _script import suite

if __name__ == "__main__":  # run as a script: say how to run the suite (before importing pytest)
    sys.exit(suite(__file__, __doc__))

from collections.abc import Callable
from typing import Any

import pytest

from regdev.bench._bench import CASES, Contender, contenders

ROWS = {row.key: row for row in contenders()}
TITLES = [case.title for case in CASES]


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
    found = CASES[TITLES.index(case)]
    value = found.raw if row.raw else found.call
    if row.valid(value) != (found.code is None):  # not the same work: no figure
        pytest.fail(f"{row.name} disagrees with regdev on {case}: regdev "
                    f"{'accepts' if found.code is None else 'refuses'}")
    benchmark.extra_info["contender"] = row.name
    benchmark(_swallow(row.run), value)


@pytest.mark.parametrize("case", [case.title for case in CASES if not case.raw_only])
@pytest.mark.parametrize("name", [key for key, row in ROWS.items() if not row.raw])
def test_call_object(benchmark: Any, name: str, case: str) -> None:
    """A decoded call object -> verdict."""
    _bench(benchmark, ROWS[name], case)


@pytest.mark.parametrize("case", TITLES)
@pytest.mark.parametrize("name", [key for key, row in ROWS.items() if row.raw])
def test_raw_text(benchmark: Any, name: str, case: str) -> None:
    """Raw JSON text -> verdict (parse and validate; regdev's row builds the refusal message)."""
    _bench(benchmark, ROWS[name], case)
