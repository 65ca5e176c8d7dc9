"""regdev bench: the report, every peer's verdicts and the agreement check (never a time).

The tests that run the bench give it a :class:`FakeStopwatch`: each contender's call "takes"
a fixed number of nanoseconds and nothing is timed, so the figures, the ratios and the
table's shape are the same on an idle machine and on a loaded one.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import regdev.bench._bench as bench
from conftest import ROOT
from regdev import ReferenceValidator, Refusal
from regdev.bench._bench import (
    BENCH_TOOLS,
    CASES,
    INSTALL_HINT,
    NOISE_CELL_SPREAD,
    NOISE_MIN_ROUNDS,
    NOISE_RATIO,
    NOISE_SPREAD,
    BenchResult,
    Contender,
    MinimalPipeline,
    Stopwatch,
    all_agree,
    bench_gate,
    contenders,
    floor_valid,
    format_ratio,
    format_spread,
    format_table,
    noise_line,
    noise_reasons,
    run_bench,
)
from regdev.cli._main import main
from regdev.gate._gate import _DERIVED_KEY_PREFIXES
from regdev.gate._parse import decode_canonical, parse
from support.strategies import (
    _argument_texts,
    _number_texts,
    block_calls,
    raw_gate_calls,
    raw_register_calls,
    register_calls,
)

CALL_KEYS = ["regdev-compiled", "regdev-refusal", "regdev-reference", "floor", "pydantic",
             "pydantic-message", "msgspec-convert", "jsonschema-rs", "jsonschema-rs-message",
             "fastjsonschema", "jsonschema", "jsonschema-message"]
RAW_KEYS = ["regdev-gate", "pydantic-json", "msgspec-decode"]
GATE_KEYS = ["regdev-handle", "minimal"]
TITLES = ["write", "read", "type", "range", "missing", "extra arg", "bad tool", "block write",
          "block range", "long arg", "padded"]


#: ns per call of each contender in the fake stopwatch, on the first case (each later case
#: costs 1 ns more per column); the empty loop costs 1 ns per iteration.
COSTS = {"regdev-compiled": 201, "regdev-refusal": 301, "regdev-reference": 901, "floor": 101,
         "pydantic": 501, "fastjsonschema": 251, "jsonschema": 5001, "msgspec-convert": 151,
         "pydantic-message": 701, "jsonschema-rs": 181, "jsonschema-rs-message": 1101,
         "jsonschema-message": 6001,
         "regdev-gate": 1001, "pydantic-json": 1501, "msgspec-decode": 401,
         "regdev-handle": 3001, "minimal": 1201,
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
    monkeypatch.setattr(bench, "_load", lambda: 0.5)  # a quiet machine, whatever this one is
    assert main(["bench", "--json", "--rounds", str(NOISE_MIN_ROUNDS)]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert [case["title"] for case in result["cases"]] == TITLES
    assert [row["key"] for row in result["rows"]] == CALL_KEYS + RAW_KEYS + GATE_KEYS
    assert [row["section"] for row in result["rows"]] == (
        ["object"] * len(CALL_KEYS) + ["text"] * len(RAW_KEYS) + ["gate"] * len(GATE_KEYS))
    assert result["loop_ns_subtracted"] == 1.0
    for row in result["rows"]:
        expected = set(TITLES) if row["raw"] else set(TITLES) - {"padded"}
        base = {"object": "regdev-compiled", "text": "regdev-gate",
                "gate": "regdev-handle"}[row["section"]]
        assert row["note"] == "", row["name"]
        assert set(row["ns"]) == expected == set(row["agrees"]) == set(row["ratio"])
        assert row["ns"] == {title: expected_ns(row["key"], title) for title in expected}
        assert row["ratio"] == {title: expected_ns(row["key"], title) / expected_ns(base, title)
                                for title in expected}
        assert row["spread"] == {title: 0.0 for title in expected}  # every round the same
        assert all(row["agrees"].values()) and row["disagreements"] == [], row["name"]
    # the control (the floor timed twice) and every cell as steady as the stopwatch
    assert result["control"] == 1.0 and result["typical_spread"] == 0.0
    assert result["widest_spread"] == 0.0 and result["widest_cell"] == "regdev-compiled on write"
    assert result["noisy"] is False and result["noise_reasons"] == []
    assert result["load"] == [0.5, 0.5]
    assert result["clock"] == "wall clock"
    for base in ("regdev-compiled", "regdev-gate", "regdev-handle"):
        ours = next(r for r in result["rows"] if r["key"] == base)
        assert set(ours["ratio"].values()) == {1.0}
    assert result["environment"]["python"] == (
        f"{platform.python_implementation()} {platform.python_version()}")
    assert result["environment"]["machine"] == platform.machine()
    assert f"round {NOISE_MIN_ROUNDS}/{NOISE_MIN_ROUNDS}" in err


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
        f"regdev {metadata.version('regdev')}: parse + the gate's compiled check")
    assert names["regdev-handle"] == (
        f"regdev {metadata.version('regdev')}: Gate.handle (regdev.bench._bench.bench_gate)")
    assert names["minimal"].startswith("minimal pipeline: msgspec decode, hand-written check")
    assert names["floor"].startswith("floor: hand-written valid-or-not test")


def test_bench_table_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """The text report: environment, cases, the three sections, ns, spread and ratio lines
    per row, each cell the figure the stopwatch gave, each ratio in words, and the noise
    line."""
    rows = contenders()
    monkeypatch.setattr(bench, "_load", lambda: 0.5)
    table = format_table(run_bench(rounds=NOISE_MIN_ROUNDS, batch_seconds=1e-5, rows=rows,
                                   stopwatch=fake_stopwatch(rows)))
    lines = table.splitlines()
    assert f"CPython {platform.python_version()} on {platform.platform()}" in lines[1]
    headers = [line.split() for line in lines if " ".join(line.split()).startswith("write read")]
    columns = ["write", "read", "type", "range", "missing", "extra", "arg", "bad", "tool",
               "block", "write", "block", "range", "long", "arg"]
    assert headers == [columns, [*columns, "padded"], [*columns, "padded"]]
    ns_lines = [line for line in lines if line.startswith("    ns per call")]
    spread_lines = [line for line in lines if line.startswith("    spread")]
    ratio_lines = [line for line in lines if line.startswith("    than regdev")]
    rows = len(CALL_KEYS) + len(RAW_KEYS) + len(GATE_KEYS)
    assert len(ns_lines) == len(spread_lines) == rows
    assert len(ratio_lines) == rows - 3  # not the three baselines
    for line in spread_lines:
        assert all(re.fullmatch(r"\u00b1\d+%", word) for word in line.split()[1:]), line
    for line in ratio_lines:
        words = line.split()[2:]
        assert len(words) in (2 * (len(TITLES) - 1), 2 * len(TITLES)), line
        assert set(words[1::2]) <= {"slower", "faster"}, line
    for line, key in zip(ns_lines, CALL_KEYS + RAW_KEYS + GATE_KEYS, strict=True):
        titles = TITLES if key not in CALL_KEYS else TITLES[:-1]
        assert line.split()[3:] == [f"{expected_ns(key, t):.0f}" for t in titles], key
    floor = ratio_lines[CALL_KEYS.index("floor") - 1].split()[2:]
    assert floor[:4] == ["2.00x", "faster", "1.99x", "faster"]  # 100, 101 ns against 200, 201
    jsonschema = ratio_lines[CALL_KEYS.index("jsonschema") - 1].split()[2:]
    assert jsonschema[:2] == ["25.0x", "slower"]  # 5000 ns against 200
    assert "decoded call object -> verdict (ratios against the first row)" in lines
    assert "raw JSON text -> verdict (ratios against the first row)" in lines
    assert ("raw JSON text -> observation, the whole gate (no policy, no audit log; an "
            "in-process register file) (ratios against the first row)") in lines
    assert "every contender agreed with regdev's verdict on every case" in lines
    assert table.count("on refusal: builds the refusal message") == 3  # refusal, reference, gate
    assert table.count("on refusal: returns the observation with its one-line message") == 2
    noise = next(line for line in lines if line.startswith("noise: "))  # steady: not noisy
    assert noise == ("noise: the floor timed twice came out 1.00x apart, cells spread "
                     "\u00b10% typically (widest \u00b10%: regdev-compiled on write), "
                     f"{NOISE_MIN_ROUNDS} rounds, load average 0.5 0.5 (before, after) on "
                     f"{os.cpu_count()} CPUs")


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
    import regdev.bench._bench as bench  # noqa: PLC0415

    monkeypatch.setattr(bench, "contenders",
                        lambda: [_accept_all("a", raw=False), _accept_all("b", raw=False)])
    assert main(["bench", "--quick"]) == 1
    assert "disagrees on case 'bad tool': regdev refuses, b accepts" in capsys.readouterr().out


def test_quick_and_rounds_together_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--quick with --rounds, or --rounds outside 1..1000: one line on stderr, exit 2,
    nothing measured."""
    assert main(["bench", "--quick", "--rounds", "5"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("regdev bench: error: --quick and --rounds cannot be used together "
                   "(--quick is 3 rounds of 2 ms batches)\n")
    for rounds in ("0", "1001", "99999999999999999999"):  # the last would run for ages
        assert main(["bench", "--rounds", rounds]) == 2
        assert capsys.readouterr() == ("", "regdev bench: error: --rounds must be 1..1000, got "
                                           f"{rounds}\n")


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
    """The raw-text baseline returns the very refusal the gate's observation carries, for
    every case, and None for the valid ones."""
    rows = {row.key: row for row in contenders()}
    stages, handle = rows["regdev-gate"].run, bench_gate().handle
    assert stages is not None
    for case in CASES:
        observation = handle(case.raw)
        assert stages(case.raw) == observation.refusal, case.title
        assert observation.ok == (case.code is None)
    refusal = stages(CASES[3].raw)
    assert refusal.code == "range-data"
    assert refusal.message == ReferenceValidator().check(CASES[3].call).message  # type: ignore[union-attr]


@st.composite
def _raw_block_writes(draw: st.DrawFn) -> str | bytes:
    """Raw block writes (write_registers, the bench's third tool): its arguments at the edges
    and beyond, maybe an id, as str or bytes."""
    members = [f'"addr": {draw(_number_texts)}', f'"data": {draw(_argument_texts)}']
    text = ('{"tool": "write_registers", "arguments": {' + ", ".join(draw(st.permutations(
        members[:draw(st.integers(1, 2))]))) + "}" + draw(st.sampled_from(
            ["", ', "id": "c:1"', ', "id": 7', ', "idempotency_key": "openai:1"',
             ', "idempotency_key": "k1"'])) + "}")
    return text.encode() if draw(st.booleans()) else text


_GENERAL = ReferenceValidator(BENCH_TOOLS)
_STAGES = next(row for row in contenders() if row.key == "regdev-gate").run
_HANDLE = bench_gate().handle


@settings(max_examples=1500)
@given(raw=st.one_of(raw_gate_calls(), raw_register_calls(), _raw_block_writes()))
def test_raw_baseline_decides_as_the_general_path_and_the_gate(raw: str | bytes) -> None:
    """The raw-text baseline (the gate's parse and validate steps for the usual call, as
    ``Gate.handle`` takes them: one decode, one colon count, the compiled check with its
    message) gives, on generated raw calls (valid, every refusal, repeated keys, colons in
    strings, nested objects, ids, idempotency keys, bytes and str), exactly the verdict of the
    general path (``parse`` and the reference validator, the oracle), and the refusal the
    gate's observation carries when the gate refuses before executing."""
    assert _STAGES is not None
    ours = _STAGES(raw)
    parsed = parse(raw)
    if isinstance(parsed, Refusal):
        expected: Refusal | None = parsed
    elif parsed.refusal is not None:
        expected = parsed.refusal
    elif parsed.idempotency_key is not None and parsed.idempotency_key.startswith(
            _DERIVED_KEY_PREFIXES):
        expected = None  # a provider's prefix: refused by the gate, checked below
        assert ours is not None and ours.code == "bad-idempotency-key"
        ours = None
    else:
        expected = _GENERAL.check(parsed.call)
    decoded = decode_canonical(raw, len(raw) * 4)
    event("usual call" if type(decoded) is tuple else "not-json in one step"
          if decoded is not None else "the general parse")
    event(f"refused {expected.code}" if expected is not None else "valid")
    assert ours == expected
    observation = _HANDLE(raw)
    if observation.refusal is None or observation.refusal.stage in ("parse", "validate"):
        assert _STAGES(raw) == observation.refusal


def test_minimal_pipeline_observes_like_the_gate() -> None:
    """The gate row's anchor does the same job: it accepts exactly what the gate accepts (the
    same result) and refuses with the gate's code, on every case."""
    minimal, handle = MinimalPipeline(), bench_gate().handle
    for case in CASES:
        theirs, ours = minimal(case.raw), handle(case.raw)
        assert theirs["ok"] == ours.ok, case.title
        if ours.ok:
            assert theirs["result"] == ours.result
        else:
            assert theirs["code"] == ours.code and "\n" not in theirs["message"]


def _judged(**figures: Any) -> BenchResult:
    """A run's result with only the figures the noise judgement reads: those of a quiet
    machine (25 rounds, the control 1.02x apart, cells ±2% typically and ±15% at most, load
    average 0.5 and 0.7 on 2 CPUs), changed by ``figures`` (``cpus``: the CPU count as the
    run records it, a string)."""
    result = BenchResult(cases=list(CASES), rounds=25,
                         environment={"python": "CPython 3.11.7", "platform": "Linux",
                                      "machine": "x86_64", "cpus": "2"},
                         load=(0.5, 0.7), control=1.02, spread=0.04,
                         widest=(0.30, "floor on missing"))
    for name, value in figures.items():
        if name == "cpus":
            result.environment["cpus"] = value
        else:
            setattr(result, name, value)
    return result


@pytest.mark.parametrize(("figures", "reason"), [
    ({"rounds": 3}, f"only 3 rounds (at least {NOISE_MIN_ROUNDS} needed)"),
    ({"rounds": 1}, f"only 1 round (at least {NOISE_MIN_ROUNDS} needed)"),
    ({"spread": NOISE_SPREAD + 0.02}, "the cells spread \u00b111% typically (limit \u00b110%)"),
    ({"widest": (4.38, "floor on missing")},
     "floor on missing spread \u00b1219% (limit \u00b150% for any cell)"),
    ({"widest": (NOISE_CELL_SPREAD + 0.02, "pydantic on read")},
     "pydantic on read spread \u00b151% (limit \u00b150% for any cell)"),
    ({"control": NOISE_RATIO + 0.5}, "the floor timed twice came out 1.60x apart (limit 1.10x)"),
    ({"load": (3.6, 3.6)}, "load average 3.6 on 2 CPUs (limit: the CPU count)"),
    ({"load": (1.0, 2.1)}, "load average 2.1 on 2 CPUs (limit: the CPU count)"),
    ({"load": (2.4, None)}, "load average 2.4 on 2 CPUs (limit: the CPU count)"),
])
def test_each_reason_alone_makes_the_figures_mean_nothing(figures: dict[str, Any],
                                                          reason: str) -> None:
    """Any one figure past its limit, the rest those of a quiet machine: the run is noisy,
    for that reason alone, and the last line starts by saying the figures mean nothing."""
    assert noise_reasons(_judged()) == [] and not _judged().noisy
    result = _judged(**figures)
    assert noise_reasons(result) == [reason]
    assert result.noisy and result.to_dict()["noise_reasons"] == [reason]
    line = format_table(result).splitlines()[-2]
    assert line.startswith(f"! these figures mean nothing: {reason}. Measured: "), line


@pytest.mark.parametrize("figures", [
    {"rounds": NOISE_MIN_ROUNDS}, {"spread": NOISE_SPREAD},
    {"widest": (NOISE_CELL_SPREAD, "floor on missing")}, {"control": NOISE_RATIO},
    {"load": (2.0, 2.0)}, {"load": (None, None)}, {"cpus": "None", "load": (3.6, 3.6)}])
def test_figures_at_their_limits_are_trusted(figures: dict[str, Any]) -> None:
    """A figure exactly at its limit, or a load average or CPU count the platform does not
    give: no reason, and the last line gives the facts."""
    result = _judged(**figures)
    assert noise_reasons(result) == [] and not result.noisy
    assert noise_line(result).startswith("noise: the floor timed twice came out ")


def test_the_trial_run_is_called_noisy() -> None:
    """The run a new user reported: ``--quick`` (3 rounds) at load average 3.6 on 2 CPUs, one
    cell spread ±219% (the floor on missing), the typical spread and the control within their
    limits. Each of the three is named, and the line says the figures mean nothing."""
    result = _judged(rounds=3, load=(3.6, 3.6), widest=(4.38, "floor on missing"),
                     spread=0.18, control=1.04)
    assert noise_line(result) == (
        "! these figures mean nothing: only 3 rounds (at least 10 needed); floor on missing "
        "spread \u00b1219% (limit \u00b150% for any cell); load average 3.6 on 2 CPUs (limit: "
        "the CPU count). Measured: the floor timed twice came out 1.04x apart, cells spread "
        "\u00b19% typically (widest \u00b1219%: floor on missing), 3 rounds, load average 3.6 "
        "3.6 (before, after) on 2 CPUs. Run again with at least 10 rounds on a machine with a "
        "load average below its CPU count")
    assert noise_line(result, "the anchor").count("the anchor timed twice came out 1.04x") == 1
    # the advice is for the reasons given: the rounds alone, or the machine alone
    assert noise_line(_judged(rounds=3)).endswith(". Run again with at least 10 rounds")
    assert noise_line(_judged(load=(3.6, 3.6))).endswith(
        " on 2 CPUs. Run again on a machine with a load average below its CPU count")
    assert noise_line(_judged(spread=0.27, load=(1.4, 1.5))).endswith(  # not loaded
        " on 2 CPUs. Run again when nothing else runs (something took the CPU or its caches "
        "during the batches)")


def test_quick_says_its_figures_mean_nothing(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``regdev bench --quick`` on a steady (fake) clock and a quiet machine: its 3 rounds
    alone make the last line say the figures mean nothing; --json says so too."""
    rows = contenders()
    monkeypatch.setattr(bench, "contenders", lambda: rows)
    monkeypatch.setattr(bench, "STOPWATCH", fake_stopwatch(rows))
    monkeypatch.setattr(bench, "_load", lambda: 0.5)
    assert main(["bench", "--quick"]) == 0
    noise = capsys.readouterr().out.splitlines()[-2]
    assert noise.startswith(f"! these figures mean nothing: only 3 rounds (at least "
                            f"{NOISE_MIN_ROUNDS} needed). Measured: "), noise
    assert main(["bench", "--quick", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["noisy"] is True
    assert result["noise_reasons"] == [f"only 3 rounds (at least {NOISE_MIN_ROUNDS} needed)"]


def test_a_cell_that_jumps_is_found_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """One cell whose batches alternate between its cost and ten times it (every other cell
    steady): run_bench finds that cell's spread, names it, and the run is noisy for it
    alone; the typical spread stays 0."""
    rows = contenders()
    steady = fake_stopwatch(rows)
    floor = next(row for row in rows if row.key == "floor")
    missing = next(case for case in CASES if case.title == "missing")
    jumps = iter(range(10**6))

    def batch(run: Callable[[Any], Any], value: Any, number: int) -> int:
        ns = steady.batch(run, value, number)
        if run is floor.run and value is missing.call and next(jumps) % 2:
            return ns * 10
        return ns

    monkeypatch.setattr(bench, "_load", lambda: 0.5)
    result = run_bench(rounds=NOISE_MIN_ROUNDS, batch_seconds=1e-5, rows=rows,
                       stopwatch=Stopwatch(batch=batch, empty=steady.empty))
    assert result.spread == 0.0 and result.control == 1.0
    assert result.widest is not None and result.widest[1] == "floor on missing"
    assert result.widest[0] > NOISE_CELL_SPREAD
    assert result.rows[CALL_KEYS.index("floor")]["spread"]["missing"] == result.widest[0]
    assert noise_reasons(result) == [
        f"floor on missing spread {format_spread(result.widest[0])} (limit \u00b150% for any "
        "cell)"]


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



@pytest.mark.parametrize("script", ["gate_pipeline.py", "raw_verdict.py", "missing_field.py",
                                    "typed_prototype.py"])
def test_hot_path_scripts_print_both_sides_and_the_ratio(script: str) -> None:
    """Each CPU-bound hot-path benchmark script runs (one tiny round), its two sides
    agree on every row's verdict, and its JSON names regdev's and the anchor's figure, the
    ratio, the goal and the noise (no time is asserted)."""
    folder = ROOT / "benchmarks"
    done = subprocess.run([sys.executable, str(folder / script), "--rounds", "1",
                           "--batch-ms", "0.05", "--json"], capture_output=True, text=True,
                          cwd=folder, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["disagreements"] == [] and result["rows"]
    assert result["clock"] == "CPU time of this thread"
    for row in result["rows"]:
        assert {"case", "regdev", "anchor", "ratio", "goal", "met"} <= set(row), row
        assert row["regdev"] >= 0 and row["anchor"] >= 0
    assert sum(row["goal"] is not None for row in result["rows"]) >= 1
    assert set(result) >= {"load", "control", "typical_spread", "noisy"}
    # regdev bench's own judgement: one round is too few, whatever the machine
    assert result["noisy"] is True
    assert result["noise_reasons"][0] == f"only 1 round (at least {NOISE_MIN_ROUNDS} needed)"


def test_raw_verdict_steps_add_up_to_the_row() -> None:
    """``raw_verdict.py --show steps``: the valid write's steps, each cut from the regdev row,
    timed against the anchor, in order, with their ratio to it (no time is asserted)."""
    folder = ROOT / "benchmarks"
    done = subprocess.run([sys.executable, str(folder / "raw_verdict.py"), "--show", "steps",
                           "--rounds", "1", "--batch-ms", "0.05", "--json"],
                          capture_output=True, text=True, cwd=folder, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [step["step"][:2] for step in result["steps"]] == ["1.", "2.", "3.", "4."]
    assert "the whole row" in result["steps"][-1]["step"]
    for step in result["steps"]:
        assert step["ns"] >= 0
        assert step["anchor_ratio"] == (step["ns"] / result["anchor"] if result["anchor"]
                                        else None)
    assert result["clock"] == "CPU time of this thread"


def test_cpu_time_option_times_with_the_threads_clock(capsys: pytest.CaptureFixture[str]) -> None:
    """--cpu-time: the batches are timed with the thread's CPU clock, and the report says so."""
    assert main(["bench", "--quick", "--cpu-time"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("regdev bench: ns per call (CPU time of this thread), median of 3 ")
