"""regdev bench: the report, every peer's verdicts and the agreement check (never a time).

The tests that run the bench give it a :class:`FakeStopwatch`: each contender's call "takes"
a fixed number of nanoseconds and nothing is timed, so the figures, the ratios and the
table's shape are the same on an idle machine and on a loaded one.
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import regdev.gate._bench as bench
from regdev.cli._main import main
from regdev.core._observation import Refusal
from regdev.gate._bench import (
    BENCH_TOOLS,
    CASES,
    INSTALL_HINT,
    Contender,
    Stopwatch,
    all_agree,
    contenders,
    floor_valid,
    format_ratio,
    format_table,
    run_bench,
)
from regdev.gate._parse import parse
from regdev.gate._validate import ReferenceValidator
from strategies import block_calls, register_calls

CALL_KEYS = ["regdev-compiled", "regdev-explain", "regdev-reference", "floor", "pydantic",
             "fastjsonschema", "jsonschema", "msgspec-convert"]
RAW_KEYS = ["regdev-gate", "pydantic-json", "msgspec-decode"]
TITLES = ["write", "read", "type", "range", "missing", "extra arg", "bad tool", "block write",
          "block range", "long arg", "padded"]


#: ns per call of each contender in the fake stopwatch, on the first case (each later case
#: costs 1 ns more per column); the empty loop costs 1 ns per iteration.
COSTS = {"regdev-compiled": 201, "regdev-explain": 301, "regdev-reference": 901, "floor": 101,
         "pydantic": 501, "fastjsonschema": 251, "jsonschema": 5001, "msgspec-convert": 151,
         "regdev-gate": 1001, "pydantic-json": 1501, "msgspec-decode": 401,
         "yes-man": 51, "raw-yes-man": 2001}


def fake_stopwatch(rows: list[Contender]) -> Stopwatch:
    """Batches of ``rows`` that take COSTS[key] + case index ns per call, timing nothing."""
    row_of_run = {id(row.run): row for row in rows}
    case_of_value: dict[tuple[bool, int], int] = {}
    for index, case in enumerate(CASES):  # a raw-only case may share its call object
        case_of_value.setdefault((False, id(case.call)), index)
        case_of_value[True, id(case.raw)] = index

    def batch(run: Callable[[Any], Any], value: Any, number: int) -> int:
        row = row_of_run[id(run)]
        return (COSTS[row.key] + case_of_value[row.raw, id(value)]) * number

    return Stopwatch(batch=batch, empty=lambda number: number)


def expected_ns(key: str, title: str) -> float:
    """What the fake stopwatch makes of a cell: its cost less the empty loop's 1 ns."""
    return COSTS[key] + [case.title for case in CASES].index(title) - 1.0


def _accept_all(key: str, raw: bool) -> Contender:
    """A peer that says valid to everything (so it disagrees on every refusal)."""
    return Contender(key, f"{key} 9.9 (accepts anything)", raw=raw, on_refusal="bool",
                     run=lambda value: None, valid=lambda value: True, version="9.9")


def test_bench_json_has_every_row_and_column_and_all_agree(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """--json: one object, every contender x every case timed, every verdict agreeing, each
    figure the stopwatch's less the empty loop, each ratio over its section's first row."""
    rows = contenders()
    monkeypatch.setattr(bench, "contenders", lambda: rows)
    monkeypatch.setattr(bench, "STOPWATCH", fake_stopwatch(rows))
    assert main(["bench", "--json", "--rounds", "3"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert [case["title"] for case in result["cases"]] == TITLES
    assert [row["key"] for row in result["rows"]] == CALL_KEYS + RAW_KEYS
    assert result["loop_ns_subtracted"] == 1.0
    for row in result["rows"]:
        expected = set(TITLES) if row["raw"] else set(TITLES) - {"padded"}
        base = "regdev-gate" if row["raw"] else "regdev-compiled"
        assert row["note"] == "", row["name"]
        assert set(row["ns"]) == expected == set(row["agrees"]) == set(row["ratio"])
        assert row["ns"] == {title: expected_ns(row["key"], title) for title in expected}
        assert row["ratio"] == {title: expected_ns(row["key"], title) / expected_ns(base, title)
                                for title in expected}
        assert all(row["agrees"].values()) and row["disagreements"] == [], row["name"]
    for base in ("regdev-compiled", "regdev-gate"):
        ours = next(r for r in result["rows"] if r["key"] == base)
        assert set(ours["ratio"].values()) == {1.0}
    assert result["environment"]["python"] == (
        f"{platform.python_implementation()} {platform.python_version()}")
    assert result["environment"]["machine"] == platform.machine()
    assert "round 3/3" in err


def test_rows_name_library_version_and_api() -> None:
    """Each peer row names its library, its installed version and the API it calls."""
    names = {row.key: row.name for row in contenders()}
    pydantic, msgspec = metadata.version("pydantic"), metadata.version("msgspec")
    assert names["pydantic"] == f"pydantic {pydantic} (strict model, model_validate)"
    assert names["pydantic-json"] == f"pydantic {pydantic} (strict model, model_validate_json)"
    assert names["msgspec-convert"].startswith(f"msgspec {msgspec} (convert")
    assert names["msgspec-decode"].startswith(f"msgspec {msgspec} (json.Decoder")
    assert names["fastjsonschema"].startswith(
        f"fastjsonschema {metadata.version('fastjsonschema')} (compile()")
    assert names["jsonschema"].startswith(
        f"jsonschema {metadata.version('jsonschema')} (Draft202012Validator.is_valid")
    assert names["regdev-gate"].startswith(
        f"regdev {metadata.version('regdev')}: parse + compiled check + explain on refusal")
    assert names["floor"].startswith("floor: hand-written valid-or-not test")


def test_bench_table_shape() -> None:
    """The text report: environment, cases, both sections, ns and ratio lines per row, each
    cell the figure the stopwatch gave, each ratio in words."""
    rows = contenders()
    table = format_table(run_bench(rounds=1, batch_seconds=1e-5, rows=rows,
                                   stopwatch=fake_stopwatch(rows)))
    lines = table.splitlines()
    assert f"CPython {platform.python_version()} on {platform.platform()}" in lines[1]
    headers = [line.split() for line in lines if " ".join(line.split()).startswith("write read")]
    columns = ["write", "read", "type", "range", "missing", "extra", "arg", "bad", "tool",
               "block", "write", "block", "range", "long", "arg"]
    assert headers == [columns, [*columns, "padded"]]
    ns_lines = [line for line in lines if line.startswith("    ns per call")]
    ratio_lines = [line for line in lines if line.startswith("    than regdev")]
    assert len(ns_lines) == len(CALL_KEYS) + len(RAW_KEYS)
    assert len(ratio_lines) == len(CALL_KEYS) + len(RAW_KEYS) - 2  # not the two baselines
    for line in ratio_lines:
        words = line.split()[2:]
        assert len(words) in (2 * (len(TITLES) - 1), 2 * len(TITLES)), line
        assert set(words[1::2]) <= {"slower", "faster"}, line
    for line, key in zip(ns_lines, CALL_KEYS + RAW_KEYS, strict=True):
        titles = TITLES if key in RAW_KEYS else TITLES[:-1]
        assert line.split()[3:] == [f"{expected_ns(key, t):.0f}" for t in titles], key
    floor = ratio_lines[CALL_KEYS.index("floor") - 1].split()[2:]
    assert floor[:4] == ["2.00x", "faster", "1.99x", "faster"]  # 100, 101 ns against 200, 201
    jsonschema = ratio_lines[CALL_KEYS.index("jsonschema") - 1].split()[2:]
    assert jsonschema[:2] == ["25.0x", "slower"]  # 5000 ns against 200
    assert "decoded call object -> verdict (ratios against the first row)" in lines
    assert "raw JSON text -> verdict (ratios against the first row)" in lines
    assert "every contender agreed with regdev's verdict on every case" in lines
    assert table.count("on refusal: builds the refusal message") == 3  # explain, reference, gate


def test_disagreeing_peer_is_not_timed_and_is_named() -> None:
    """A peer that accepts what regdev refuses gets no time and no ratio on those cases."""
    rows = [contenders()[0], _accept_all("yes-man", raw=False),
            _accept_all("raw-yes-man", raw=True)]
    result = run_bench(rounds=1, batch_seconds=1e-5, rows=rows, stopwatch=fake_stopwatch(rows))
    peer = result.rows[1]
    refusals = [case.title for case in CASES if case.code is not None]
    agreed = ["write", "read", "block write"]
    assert peer["ns"] == {title: expected_ns("yes-man", title) for title in agreed}
    assert peer["ratio"] == {title: expected_ns("yes-man", title)
                             / expected_ns("regdev-compiled", title) for title in agreed}
    assert [title for title, ok in peer["agrees"].items() if not ok] == refusals
    assert peer["disagreements"][0] == (
        "disagrees on case 'type': regdev refuses, yes-man accepts")
    raw_peer = result.rows[2]  # the first raw row is the baseline: nothing to divide by
    assert raw_peer["ns"] == {title: expected_ns("raw-yes-man", title)
                              for title in ["write", "read", "block write", "padded"]}
    assert set(raw_peer["ratio"].values()) == {1.0}  # its own time over itself
    assert not all_agree(result)
    table = format_table(result)
    assert "! not timed, because the contender does not do the same work there:" in table
    assert ("  yes-man 9.9 (accepts anything): disagrees on case 'extra arg': regdev refuses, "
            "yes-man accepts") in table.splitlines()
    ns_line = next(line for line in table.splitlines() if line.startswith("    ns per call")
                   and "disagrees" in line)
    assert ns_line.split()[3:].count("disagrees") == len(refusals)


def test_disagreement_exits_1(monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """regdev bench exits 1 when a contender disagrees, and says which case."""
    import regdev.gate._bench as bench  # noqa: PLC0415

    monkeypatch.setattr(bench, "contenders",
                        lambda: [_accept_all("a", raw=False), _accept_all("b", raw=False)])
    assert main(["bench", "--quick"]) == 1
    assert "disagrees on case 'bad tool': regdev refuses, b accepts" in capsys.readouterr().out


def test_quick_and_rounds_together_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--quick with --rounds: one line on stderr, exit 2, nothing measured."""
    assert main(["bench", "--quick", "--rounds", "5"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("regdev bench: error: --quick and --rounds cannot be used together "
                   "(--quick is 3 rounds of 2 ms batches)\n")
    assert main(["bench", "--rounds", "0"]) == 2
    assert capsys.readouterr().err == "regdev bench: error: --rounds must be at least 1\n"


def test_missing_peer_is_reported_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer that cannot be imported is a row that says how to install it."""
    monkeypatch.setitem(sys.modules, "fastjsonschema", None)
    monkeypatch.setitem(sys.modules, "jsonschema", None)
    rows = contenders()
    result = run_bench(rounds=1, batch_seconds=1e-5, rows=rows, stopwatch=fake_stopwatch(rows))
    notes = {row["key"]: row["note"] for row in result.rows}
    assert notes["fastjsonschema"] == notes["jsonschema"] == INSTALL_HINT
    lines = format_table(result).splitlines()
    at = lines.index("  fastjsonschema (compile(), one schema per tool, picked by tool name)")
    assert lines[at + 1] == f"    {INSTALL_HINT}"


def test_cases_cover_each_verdict_kind() -> None:
    """The inputs carry regdev's own codes, and each raw text parses to its call object."""
    reference = ReferenceValidator(BENCH_TOOLS)
    assert [reference(case.call) for case in CASES] == [case.code for case in CASES]
    assert [case.code for case in CASES] == [None, None, "type-addr", "range-data",
                                             "missing-addr", "unknown-argument", "unknown-tool",
                                             None, "range-data[]", "unknown-argument", None]
    block = next(case for case in CASES if case.title == "block range")
    assert reference.check(block.call) == Refusal("validate", "range-data[]",
                                                  "data[12] 300 is outside 0..255")
    assert len(block.call["arguments"]["data"]) == 16
    for case in CASES:
        assert parse(case.raw).call == case.call, case.title  # type: ignore[union-attr]
    assert len(CASES[-1].raw) > 4000 and CASES[-1].raw_only
    assert len(CASES[-2].raw) > 4000


def test_raw_baseline_builds_the_gates_message() -> None:
    """The raw-text baseline returns the very refusal the gate words (explain), not a code."""
    gate = next(row for row in contenders() if row.key == "regdev-gate")
    assert gate.run is not None
    refusal = gate.run(CASES[3].raw)
    assert refusal.code == "range-data"
    assert refusal.message == ReferenceValidator().check(CASES[3].call).message  # type: ignore[union-attr]
    assert gate.run(CASES[0].raw) is None


@pytest.mark.parametrize(("ratio", "words"), [
    (8.3, "8.30x slower"), (0.5, "2.00x faster"), (1.0, "1.00x"), (12.25, "12.2x slower"),
    (250.0, "250x slower"), (None, "-")])
def test_ratio_words(ratio: float | None, words: str) -> None:
    """Ratios are peer time / regdev time, written with their direction."""
    assert format_ratio(ratio) == words


bench_reference = ReferenceValidator(BENCH_TOOLS)


@given(st.one_of(register_calls(), block_calls()))
def test_floor_gives_the_same_verdicts(call: object) -> None:
    """The hand-written floor says valid exactly when the reference does: the same work."""
    assert floor_valid(call) == (bench_reference(call) is None)

