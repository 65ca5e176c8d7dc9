"""regdev bench on a user's own tools: generated and given cases, peers built from schemas,
jsonschema-rs, the case table, --json, --plot, --map, and the library with its regression
check (never a time: batches come from a stopwatch that times nothing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import regdev
import regdev.bench._bench as bench
from conftest import ROOT
from regdev import Gate, ReferenceValidator, ToolSet, compile_validator
from regdev.bench._api import compare, measure
from regdev.bench._bench import (
    Stopwatch,
    all_agree,
    contenders,
    format_case_table,
    run_bench,
    tools_gate,
)
from regdev.bench._cases import generate_cases
from regdev.cli._main import main

MOTOR = ROOT / "examples" / "motor-tools.json"
SENSOR = ROOT / "examples" / "sensor.rdl"
TOOLS = ToolSet.from_json(MOTOR.read_bytes())

#: A stopwatch whose every call "takes" 100 ns and whose empty loop takes 1 ns per call.
STEADY = Stopwatch(batch=lambda run, value, number: 100 * number,
                   empty=lambda number: number)


def _generated() -> dict[str, Any]:
    made = generate_cases(TOOLS, compile_validator(TOOLS))
    assert made.skipped == []
    return {case.title: case for case in made.cases}


def test_motor_tools_are_five_or_more_with_arrays_enums_nesting_and_multiple_of() -> None:
    """The example tool file has at least five tools and uses arrays, enums, nested objects
    and multipleOf (what the speed goal is measured on)."""
    text = MOTOR.read_text()
    assert len(TOOLS) >= 5
    for keyword in ('"array"', '"enum"', '"multipleOf"', '"uniqueItems"'):
        assert keyword in text
    assert TOOLS["configure_pid"].input_schema["properties"]["gains"]["type"] == "object"


def test_generated_cases_are_named_by_what_they_break() -> None:
    """A valid call per tool, then one mutation per keyword, each named by what it breaks and
    expecting regdev's code for it."""
    cases = _generated()
    expected = {
        "set_speed: valid": None,
        "set_speed: wrong type rpm": "type-rpm",
        "set_speed: out of range rpm": "range-rpm",
        "set_speed: missing required rpm": "missing-rpm",
        "set_speed: unknown argument extra_arg": "unknown-argument",
        "set_speed: not a multiple ramp": "range-ramp",
        "set_mode: bad enum mode": "range-mode",
        "set_mode: too long reason": "range-reason",
        "write_block: array too long data": "range-data",
        "write_block: bad element data[0] (out of range)": "range-data[]",
        "configure_pid: out of range gains.kp": "range-gains.kp",
        "configure_pid: missing required gains.kp": "missing-gains.kp",
        "run_profile: bad element steps[0] (out of range)": "range-steps[].rpm",
        "set_leds: bad element colours[0] (wrong type)": "type-colours[]",
    }
    for title, code in expected.items():
        assert cases[title].code == code, title
    assert [t for t in cases if t.endswith(": valid")] == [f"{name}: valid" for name in TOOLS]


def test_generated_cases_get_one_verdict_from_text_and_from_floats() -> None:
    """Every generated case's expected code is the reference's on the decoded call and the
    gate's on its raw text (the gate decodes numbers exactly; the call holds floats)."""
    reference = ReferenceValidator(TOOLS)
    gate = tools_gate(TOOLS)
    for case in _generated().values():
        assert reference(case.call) == case.code, case.title
        observation = gate.handle(case.raw)
        assert (None if observation.ok else observation.code) == case.code, case.title


def test_peers_on_a_tool_file_agree_and_say_what_they_cannot_express() -> None:
    """On the motor tools every peer agrees with regdev where it runs; pydantic and msgspec,
    built from the schemas, cannot express uniqueItems, so set_leds is listed, not timed."""
    rows = contenders(TOOLS)
    keys = [row.key for row in rows]
    assert keys[:3] == ["regdev-compiled", "regdev-refusal", "regdev-reference"]
    for key in ("jsonschema-rs", "jsonschema-rs-message", "fastjsonschema", "jsonschema",
                "jsonschema-message", "pydantic", "pydantic-message", "msgspec-convert",
                "pydantic-json", "msgspec-decode", "regdev-gate", "regdev-handle"):
        assert key in keys
    assert "floor" not in keys and "minimal" not in keys  # hand-written for the bench tools
    cases = tuple(_generated().values())
    result = run_bench(rounds=1, batch_seconds=0.001, rows=rows, cases=cases,
                       control=rows[0], stopwatch=STEADY)
    assert all_agree(result)
    leds = [c.title for c in cases if c.tool == "set_leds"]
    for record in result.rows:
        if record["key"] in ("pydantic", "pydantic-message", "msgspec-convert",
                             "pydantic-json", "msgspec-decode"):
            assert set(record["cannot"]) == set(leds)
            assert record["cannot"][leds[0]] == (
                "cannot express `uniqueItems` (at #/properties/colours/uniqueItems)")
            assert not set(record["ns"]) & set(leds)
        else:
            assert record["cannot"] == {}
        timed = len(record["ns"]) + len(record["cannot"])
        assert timed == len(cases), record["key"]
        assert set(record["ns"].values()) == {99.0}  # 100 ns less the empty loop's 1
    table = format_case_table(result)
    assert "- pydantic cannot judge 'set_leds': cannot express `uniqueItems`" in table
    assert "set_leds: valid" in table and "cannot" in table
    assert "every contender that ran agreed with regdev's verdict" in table


def test_jsonschema_rs_gives_the_verdict_alone_and_with_its_message() -> None:
    """jsonschema-rs is two rows: is_valid (False, no message) and validate (raises the
    first error with its message), both agreeing with regdev."""
    rows = {row.key: row for row in contenders(TOOLS)}
    verdict, worded = rows["jsonschema-rs"], rows["jsonschema-rs-message"]
    assert verdict.name.startswith(f"jsonschema-rs {verdict.version} (validator_for")
    assert verdict.on_refusal == "bool" and worded.on_refusal == "exception"
    bad = {"tool": "set_speed", "arguments": {"rpm": 3010, "ramp": 3.2}}
    assert verdict.valid is not None and worded.valid is not None and worded.run is not None
    assert verdict.valid(bad) is False and worded.valid(bad) is False
    with pytest.raises(Exception, match="3010"):
        worded.run(bad)
    assert verdict.valid({"tool": "set_speed", "arguments": {"rpm": 3000, "ramp": 0.3}})


def test_bench_tools_quick_json_and_plot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """`regdev bench --tools FILE --quick --json --plot FILE.png`: every generated case and
    every contender in one JSON object, a PNG written, exit 0 when all agree."""
    monkeypatch.setattr(bench, "STOPWATCH", STEADY)
    chart = tmp_path / "bench.png"
    assert main(["bench", "--tools", str(MOTOR), "--quick", "--json", "--plot",
                 str(chart)]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert result["rounds"] == 3 and result["noisy"] is True
    assert [c["title"] for c in result["cases"]] == list(_generated())
    assert {c["tool"] for c in result["cases"]} == set(TOOLS)
    assert "jsonschema-rs" in {row["key"] for row in result["rows"]}
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {chart}" in err


def test_bench_tools_table(monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    """Without --json: one line per case, a numbered column per contender, each peer's
    ratio to regdev over the cases, and the noise line."""
    monkeypatch.setattr(bench, "STOPWATCH", STEADY)
    assert main(["bench", "--tools", str(MOTOR), "--quick"]) == 0
    out = capsys.readouterr().out
    assert "decoded call object -> verdict:" in out
    assert "  [1] regdev" in out and "jsonschema-rs" in out
    assert "  [7] jsonschema-rs against [1]: median 1.00x, from 1.00x to 1.00x over 64 cases" \
        in out
    assert "set_speed: not a multiple ramp" in out
    assert out.splitlines()[-2].startswith("! these figures mean nothing: only 3 rounds")
    assert "regdev's compiled check timed twice came out 1.00x apart" in out  # no floor here


def test_bench_map_quick(monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    """`regdev bench --map FILE --quick`: the map's tools, cases generated from them, the
    gate row on the map's device, every contender agreeing."""
    pytest.importorskip("systemrdl")
    monkeypatch.setattr(bench, "STOPWATCH", STEADY)
    assert main(["bench", "--map", str(SENSOR), "--quick", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    tools = {c["tool"] for c in result["cases"]}
    assert {"write_register", "read_registers", "read_fields"} <= tools
    handle = next(r for r in result["rows"] if r["key"] == "regdev-handle")
    assert len(handle["ns"]) == len(result["cases"]) and not handle["disagreements"]
    for note in result["notes"]:  # a generated call the map's own rules refuse: left out
        assert ": regdev refuses the generated call (" in note


def test_bench_cases_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    """--cases FILE.jsonl: the user's raw calls with their verdicts, in file order; 0.3
    against multipleOf 0.1 is valid for regdev and jsonschema-rs alike, while jsonschema and
    msgspec (float division) refuse it: named, not timed there, exit 1."""
    monkeypatch.setattr(bench, "STOPWATCH", STEADY)
    lines = [
        {"raw": '{"tool": "set_speed", "arguments": {"rpm": 100, "ramp": 0.3}}',
         "expect": "ok", "why": "ramp 0.3"},
        {"raw": '{"tool": "set_speed", "arguments": {"rpm": 100, "ramp": 0.35}}',
         "expect": "range-ramp", "why": "ramp 0.35"},
        {"raw": '{"tool": "set_mode", "arguments": {"mode": "fast"}}', "expect": "range-mode"},
    ]
    path = tmp_path / "calls.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["bench", "--tools", str(MOTOR), "--cases", str(path), "--quick",
                 "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert [(c["title"], c["code"]) for c in result["cases"]] == [
        ("1: ramp 0.3", None), ("2: ramp 0.35", "range-ramp"), ("line 3", "range-mode")]
    rows = {r["key"]: r for r in result["rows"]}
    for key in ("regdev-gate", "jsonschema-rs", "pydantic", "fastjsonschema"):
        assert rows[key]["agrees"] == {"1: ramp 0.3": True, "2: ramp 0.35": True,
                                       "line 3": True}, key
    for key in ("jsonschema", "msgspec-convert", "msgspec-decode"):
        assert rows[key]["disagreements"] == [
            f"disagrees on case '1: ramp 0.3': regdev accepts, {key} refuses"]
        assert "1: ramp 0.3" not in rows[key]["ns"]


def test_bench_cases_file_with_a_wrong_expectation_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A case whose expected verdict is not regdev's stops the run with one line naming it."""
    path = tmp_path / "calls.jsonl"
    path.write_text(json.dumps({"raw": '{"tool": "set_mode", "arguments": {"mode": "off"}}',
                                "expect": "range-mode", "why": "off"}) + "\n")
    assert main(["bench", "--tools", str(MOTOR), "--cases", str(path), "--quick"]) == 2
    err = capsys.readouterr().err
    assert "1: off: regdev's verdict is valid, the case expects range-mode" in err
    assert "Traceback" not in err


def test_bench_tools_and_map_together_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--tools and --map name two tool sets: one line, exit 2."""
    assert main(["bench", "--tools", str(MOTOR), "--map", str(SENSOR), "--quick"]) == 2
    assert "give --map FILE or --tools FILE, not both" in capsys.readouterr().err


def test_library_bench_and_regression_check() -> None:
    """regdev.bench(tools, ...) returns the figures; compare() finds a cell made slower, a
    verdict changed, and nothing in a run against itself."""
    first = regdev.bench(MOTOR, quick=True, stopwatch=STEADY)
    assert isinstance(first, bench.BenchResult) and all_agree(first)
    same = compare(first, first.to_dict())
    assert same.ok and same.slower == [] and same.verdicts == []
    assert same.noisy  # 3 rounds: the figures mean nothing, and it says so
    slow = Stopwatch(batch=lambda run, value, number: 150 * number,
                     empty=lambda number: number)
    second = measure(MOTOR, quick=True, stopwatch=slow)
    found = compare(_trusted(first.to_dict()), _trusted(second.to_dict()))
    assert not found.ok
    assert {s.row for s in found.slower} == {"regdev-compiled", "regdev-refusal",
                                             "regdev-reference", "regdev-gate",
                                             "regdev-handle"}
    assert found.slower[0].before == 99.0 and found.slower[0].after == 149.0
    changed = _trusted(second.to_dict())
    changed["cases"][0] = {**changed["cases"][0], "code": "range-rpm"}
    assert "set_speed: valid: valid -> range-rpm" in compare(first, changed).verdicts
    assert "slower: regdev-compiled on set_speed: valid: 99 -> 149 ns" in found.format()


def test_library_bench_with_given_cases() -> None:
    """Cases given as (raw text, expected code) pairs are checked against regdev first."""
    result = measure(MOTOR, cases=[('{"tool": "set_mode", "arguments": {"mode": "off"}}', None),
                                   ('{"tool": "set_mode", "arguments": {}}', "missing-mode")],
                     quick=True, stopwatch=STEADY)
    assert [c.title for c in result.cases] == ["case 1", "case 2"]
    with pytest.raises(ValueError, match="case 1: regdev's verdict is valid"):
        measure(MOTOR, cases=[('{"tool": "set_mode", "arguments": {"mode": "off"}}',
                               "range-mode")], quick=True, stopwatch=STEADY)


def test_tools_gate_answers_a_handlerless_tool_with_its_arguments() -> None:
    """The gate row's gate runs a tool file's tools (no handlers) to an observation."""
    gate = tools_gate(TOOLS)
    assert isinstance(gate, Gate)
    observation = gate.handle('{"tool": "set_mode", "arguments": {"mode": "off"}}')
    assert observation.ok and observation.result == {"mode": "off"}


def _trusted(run: dict[str, Any]) -> dict[str, Any]:
    """A run's dict as if its figures could be trusted (the stopwatch is steady)."""
    return {**run, "noise_reasons": [], "noisy": False}
