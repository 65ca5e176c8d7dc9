"""The benchmark suites run in one process: scripts/test passes ``-n auto``, and pytest-benchmark
turns itself off on pytest-xdist workers."""

from __future__ import annotations

import pytest


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """No pytest-xdist workers for ``-n auto`` (``-n N`` still asks for N)."""
    return 0
