"""regdev bench: the table's shape and every peer's verdicts (never a time)."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given

from regdev._bench import CASES, INSTALL_HINT, floor_check, format_table, run_bench
from regdev._cli import main
from regdev._validate import ReferenceValidator
from strategies import register_calls, tool_choices

CALL_ROWS = ["regdev compiled", "regdev reference", "hand-written floor", "pydantic v2 strict",
             "fastjsonschema", "jsonschema (is_valid)", "msgspec convert"]
RAW_ROWS = ["regdev parse + compiled", "pydantic model_validate_json", "msgspec typed decoder"]
TITLES = ["valid", "missing", "type", "range", "unknown tool", "unknown argument"]


def test_bench_json_has_every_row_and_column_and_all_agree(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--json: one object, every contender x every case timed, every verdict agreeing."""
    assert main(["bench", "--json", "--rounds", "1"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert result["cases"] == TITLES
    assert [row["name"] for row in result["rows"]] == CALL_ROWS + RAW_ROWS
    for row in result["rows"]:
        assert row["note"] == "", row["name"]
        assert set(row["ns"]) == set(TITLES) == set(row["agrees"])
        assert all(ns >= 0 for ns in row["ns"].values())
        assert all(row["agrees"].values()), row["name"]
    ours = next(r for r in result["rows"] if r["name"] == "regdev compiled")
    assert set(ours["ratio"].values()) == {1.0}
    assert "round 1/1" in err


def test_bench_table_shape() -> None:
    """The text table has a header, both sections, one line per contender, and the verdict."""
    table = format_table(run_bench(rounds=1, batch_seconds=1e-5))
    lines = table.splitlines()
    header = next(line for line in lines if line.strip().startswith("valid"))
    assert header.split() == ["valid", "missing", "type", "range", "unknown", "tool", "unknown",
                              "argument"]
    for name in CALL_ROWS + RAW_ROWS:
        row = next(line for line in lines if line.strip().startswith(name))
        assert row.count("x)") == len(TITLES), row
    assert "call object (decoded JSON) -> verdict" in lines
    assert "raw JSON text -> verdict" in lines
    assert "every contender agreed with regdev's verdict on every input" in lines


def test_missing_peer_is_reported_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer that cannot be imported is a row that says how to install it."""
    monkeypatch.setitem(sys.modules, "fastjsonschema", None)
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    result = run_bench(rounds=1, batch_seconds=1e-5)
    notes = {row["name"]: row["note"] for row in result.rows}
    assert notes["fastjsonschema"] == notes["jsonschema (is_valid)"] == INSTALL_HINT
    assert f"fastjsonschema{' ' * 10}" in format_table(result)
    assert INSTALL_HINT in format_table(result)


def test_cases_are_one_per_verdict_kind() -> None:
    """The inputs are a valid call and one of each refusal kind, with our codes."""
    reference = ReferenceValidator()
    assert [reference(call) for _, call, _ in CASES] == [code for _, _, code in CASES]
    assert [code for _, _, code in CASES] == [None, "missing-addr", "type-addr", "range-data",
                                              "unknown-tool", "unknown-argument"]


@given(register_calls(), tool_choices)
def test_floor_is_the_same_rules(call: object, choice: str | None) -> None:
    """The hand-written floor gives the reference's code, so the comparison is like for like."""
    assert floor_check(call, choice) == ReferenceValidator()(call, choice)
