"""The shared real-world cases (examples/wild-calls.jsonl), line by line, in process."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import EXAMPLES, SHARED, shared_missing
from regdev import Gate
from regdev.agents._replay import load_replay, run_replay

CASES = EXAMPLES / "wild-calls.jsonl"
SHARED_CASES = SHARED / "cases" / "wild-calls.jsonl"


def test_every_wild_case_gets_its_verdict() -> None:
    """Each line's expected code (or ok and result) is what the gate answers, in order."""
    gate = Gate()
    outcomes = run_replay(load_replay(CASES), gate)
    assert len(outcomes) == 18
    wrong = [(o.line, o.record.expect, o.observation.code) for o in outcomes
             if o.expect_met is not True]
    assert wrong == []
    assert gate.device.snapshot() == [0, 0, 0, 200] + [0] * 12


@pytest.mark.skipif(not SHARED_CASES.exists(), reason=shared_missing(SHARED_CASES))
def test_examples_copy_matches_shared_cases() -> None:
    """The copy under examples/ is the shared file, unchanged."""
    assert Path(CASES).read_bytes() == SHARED_CASES.read_bytes()
