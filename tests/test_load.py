"""Many threads on one gate and one device, audit and policy on (the larger run is
benchmarks/load.py)."""

from __future__ import annotations

from pathlib import Path

from support.loadgen import check_load, run_load


def test_concurrent_callers_stay_correct(tmp_path: Path) -> None:
    """8 threads x 200 mixed calls: no exception escapes; every accepted write is applied
    once, in its thread's order, and nothing refused or replayed is; each register ends with
    the last write to it of some thread; the audit holds exactly one record per call, found
    by the call's correlation id, with its verdict."""
    result = run_load(tmp_path / "audit.db", threads=8, calls=200)
    check_load(result)
    assert sum(len(calls) for calls in result.calls.values()) == 1600
    assert len(result.device.applied) == 8 * 200 * 6 // 10  # 6 kinds of 10 are applied writes


def test_load_mix_is_what_the_script_says(tmp_path: Path) -> None:
    """The mix has reads, two kinds of refusal, keyed writes and their replays."""
    result = run_load(tmp_path / "audit.db", threads=2, calls=20)
    check_load(result)
    codes = sorted({str(obs.code) for calls in result.calls.values() for _, obs in calls})
    assert codes == ["None", "range-addr", "read-only-register"]
    replays = sum(obs.replay for calls in result.calls.values() for _, obs in calls)
    assert replays == 2 * 2
