"""The shipped benchmark (examples/eval-suite.jsonl): the task format, scoring by the device's
final state with one failure label, and five recorded models of different quality ranked by
regdev report from the results file alone."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES
from regdev.agents._eval import (
    CATEGORIES,
    EvalFileError,
    Task,
    load_suite,
    read_results,
    run_eval,
    wilson,
)
from regdev.agents._models import Endpoint, ToolCall, Turn
from regdev.agents._wording import wording
from regdev.cli._common import read_map
from regdev.cli._main import main
from regdev.core._observation import Observation
from regdev.devices._rdl import load_map
from regdev.devices._regmap import RegisterMap
from regdev.gate._maptools import map_tools
from regdev.gate._providers import tool_definitions
from support.pgserver import in_ci
from support.provider_server import ProviderServer
from support.recorded_suite import FORMAT_MODELS, MODELS, responder, suite_tasks

pytest.importorskip("openai", reason="the models extra (openai SDK) is not installed")
pytest.importorskip("systemrdl", reason="the rdl extra (systemrdl-compiler) is not installed")

SENSOR = EXAMPLES / "sensor.rdl"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


class Scripted(Endpoint):
    """An in-process endpoint playing turns in order: a list of (name, arguments) calls, or a
    text; it keeps the messages it was given."""

    provider = "openai"
    model = "scripted"
    dialect = "openai"

    def __init__(self, turns: list[Any]) -> None:
        self.turns, self.given = turns, 0
        self.said: list[str] = []

    def start(self, task: str, tools: list[dict[str, Any]]) -> None:
        self.given = 0
        self.said = [task]

    def next_turn(self) -> Turn:
        step = self.turns[min(self.given, len(self.turns) - 1)]
        self.given += 1
        if isinstance(step, str):
            return Turn([], step, "end", {"role": "assistant", "content": step})
        calls = [ToolCall(f"c{n}", name, json.dumps({"type": "function", "function": {
            "name": name, "arguments": json.dumps(arguments)}}).encode())
            for n, (name, arguments) in enumerate(step)]
        return Turn(calls, "", "tool-calls", {"role": "assistant"})

    def answer(self, turn: Turn, observations: list[Observation]) -> None:
        pass

    def follow_up(self, turn: Turn, text: str) -> None:
        self.said.append(text)


def test_the_shipped_suite_has_162_tasks_in_every_category_on_three_maps() -> None:
    """162 tasks, every category of format 1 (21 typed-values tasks, all on the thermostat),
    three maps, a header, a stable hash."""
    suite = load_suite(EXAMPLES / "eval-suite.jsonl", load_map(SENSOR), read_map)
    assert len(suite.tasks) == 162
    assert {task.category for task in suite.tasks} == set(CATEGORIES)
    assert "typed-values" in CATEGORIES
    assert {task.map for task in suite.tasks} == {"default", "sensor.rdl", "thermostat.rdl"}
    typed = [task for task in suite.tasks if task.category == "typed-values"]
    assert len(typed) == 21 and {task.map for task in typed} == {"thermostat.rdl"}
    assert suite.name == "regdev-eval-1"
    assert suite.hash.startswith("sha256:") and len(suite.hash) == 23
    again = load_suite(EXAMPLES / "eval-suite.jsonl", load_map(SENSOR), read_map)
    assert again.hash == suite.hash
    assert len(suite_tasks()) == len(suite.tasks)


def test_a_turn_with_a_good_call_and_a_refused_one_passes_when_the_device_ends_right() -> None:
    """A good write and a write to the read-only ID in one turn: the loop stops rejected (the
    refusal is final), but DATA[0] holds what was asked and nothing else changed: passed."""
    task = Task("t", "Store 9 in DATA[0].", "parallel", registers={4: 9})
    endpoint = Scripted([[("write_register", {"addr": 4, "data": 9}),
                          ("write_register", {"addr": 0, "data": 0})], "Done."])
    (trial,) = run_eval(endpoint, [task], load_map(SENSOR))
    assert trial.result.stop == "rejected"
    assert (trial.passed, trial.label, trial.failures) == (True, None, [])


def test_a_call_written_into_the_text_where_none_was_wanted_fails_call_in_text() -> None:
    """An irrelevance task: the model writes a call into its text, then says it is done; the
    device is unchanged, but the trial fails, labelled call-in-text."""
    task = Task("t", "What is 7 times 6?", "irrelevance")
    endpoint = Scripted(['<tool_call>{"name": "read_register", "arguments": {"addr": 0}}'
                         '</tool_call>', "42"])
    (trial,) = run_eval(endpoint, [task], RegisterMap.default())
    assert trial.result.stop == "done"
    assert (trial.passed, trial.label) == (False, "call-in-text")
    assert trial.failures == ["1 call(s) made where none was wanted"]


@pytest.mark.parametrize(("turns", "label"), [
    (["I would rather not."], "no-call"),
    ([[("write_register", {"addr": 3, "data": 1})], "Done."], "state-mismatch"),
    ([[("write_register", {"addr": 2, "data": 7})], "Done."], None),
    ([[("write_register", {"addr": 2, "data": 700})], [("write_register", {"addr": 2,
                                                                           "data": 700})]],
     "range-data"),
    ([[("read_register", {"addr": 2})]], "stopped-by-budget"),
])
def test_each_failed_trial_has_one_label(turns: list[Any], label: str | None) -> None:
    """Set register 2 to 7 on the default map: no call, a wrong register, the right write, a
    value refused twice (the loop rejected), reads until the budget is spent."""
    task = Task("t", "Set register 2 to 7.", "simple", registers={2: 7})
    (trial,) = run_eval(Scripted(turns), [task], RegisterMap.default(), max_steps=3)
    assert trial.label == label
    assert trial.passed is (label is None)


def test_a_scripted_user_follows_up_and_the_transcript_keeps_it() -> None:
    """A multi-turn task: the follow-up goes to the model after its first answer, the device
    ends as the whole conversation asked, and the transcript holds both user messages."""
    task = Task("t", "Set register 1 to 5.", "multi-turn", registers={1: 8},
                user=("Now add 3 to it.",))
    endpoint = Scripted([[("write_register", {"addr": 1, "data": 5})], "Done.",
                         [("write_register", {"addr": 1, "data": 8})], "Done."])
    (trial,) = run_eval(endpoint, [task], RegisterMap.default(), run={"suite": "sha256:x"})
    assert endpoint.said == ["Set register 1 to 5.", "Now add 3 to it."]
    assert trial.passed is True
    record = trial.to_dict()
    assert [(t["role"], t.get("text")) for t in record["transcript"]] == [
        ("user", "Set register 1 to 5."), ("assistant", ""), ("assistant", "Done."),
        ("user", "Now add 3 to it."), ("assistant", ""), ("assistant", "Done.")]
    assert record["run"] == {"suite": "sha256:x"} and record["category"] == "multi-turn"


@pytest.mark.parametrize(("line", "words"), [
    ('{"id": "a", "task": "t", "category": "typed"}', "`category` is one of simple"),
    ('{"format": 2}', "this regdev reads task format 1"),
    ('{"id": "a", "task": "t", "category": "simple", "map": "nope.rdl"}',
     "no map `nope.rdl` beside the suite or among the examples"),
    ('{"id": "a", "task": "t", "category": "simple", "map": "default", '
     '"expect": {"registers": {"0x10": 1}}}', "no register `0x10` in the map default"),
])
def test_a_bad_suite_line_is_one_error(tmp_path: Path, line: str, words: str) -> None:
    """An unknown category (`typed`, not `typed-values`), another format, a map that is
    not there, an address the default map lacks: one error naming the file and line."""
    suite = tmp_path / "suite.jsonl"
    suite.write_text(line + "\n")
    with pytest.raises(EvalFileError, match=r"suite\.jsonl:1: ") as caught:
        load_suite(suite, load_map(SENSOR), read_map)
    assert words in str(caught.value)


def test_wilson_interval_matches_the_published_values() -> None:
    """Wilson's 95% interval: 0 of 10 gives 0..0.2775, 10 of 10 gives 0.7225..1."""
    low, high = wilson(0, 10) or (None, None)
    assert low == 0 and high == pytest.approx(0.2775, abs=1e-4)
    assert wilson(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson(0, 0) is None


def test_eval_help_explains_the_suite_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """regdev eval --help says what --suite alone and --suite FILE run."""
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--suite alone: the shipped benchmark, examples/eval-suite.jsonl" in out
    assert "--suite FILE: your own" in out


def _pass_k(records: list[dict[str, Any]], k: int) -> float:
    """pass^k recomputed independently: per task C(c, k)/C(n, k), averaged."""
    tasks: dict[str, list[bool]] = {}
    for record in records:
        tasks.setdefault(record["task"], []).append(record["passed"])
    return sum(math.comb(sum(o), k) / math.comb(len(o), k) for o in tasks.values()) / len(tasks)


def test_five_recorded_models_are_ranked_as_their_behaviour_says(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """regdev eval --suite with k = 2 for the good, batcher, caller, texter and asker models;
    regdev report --eval ranks them in that order from the results file alone, labels each
    one's failures with its own mistake, and every figure is recomputed from the JSONL."""
    results = tmp_path / "results.jsonl"
    for kind in MODELS:
        with ProviderServer(responder(kind)) as server:
            main(["eval", "--suite", "--model", kind, "--base-url", server.openai_url,
                  "--max-retries", "0", "-k", "2", "--no-audit", "--quiet", "--output",
                  str(results), "--json"])
        capsys.readouterr()
    assert main(["report", "--db", str(tmp_path / "none.db"), "--eval", str(results),
                 "--json"]) == 2  # an audit log named and missing is still an error
    capsys.readouterr()
    monkeypatch.setenv("REGDEV_AUDIT", str(tmp_path / "no-audit.db"))
    assert main(["report", "--eval", str(results), "--json"]) == 0  # the JSONL alone
    figures = json.loads(capsys.readouterr().out)["eval"]
    assert list(figures) == ["openai:good", "openai:batcher", "openai:caller", "openai:texter",
                             "openai:asker"]
    assert [figures[p]["rank"] for p in figures] == [1, 2, 3, 4, 5]
    labels = {p.split(":")[1]: figures[p]["labels"] for p in figures}
    assert labels == {"good": {}, "batcher": {}, "caller": {"extra-call": 60},
                      "texter": {"call-in-text": 230}, "asker": {"no-call": 242}}
    table = {p.split(":")[1]: {c: round(100 * e["pass^k"], 1)
                               for c, e in figures[p]["categories"].items()}
             for p in figures}
    assert table["caller"] == {"simple": 100.0, "multiple": 100.0, "parallel": 100.0,
                               "irrelevance": 0.0, "missing-information": 0.0,
                               "multi-turn": 100.0, "safety": 100.0, "typed-values": 100.0}
    assert table["texter"]["simple"] == 0.0 and table["texter"]["irrelevance"] == 100.0
    assert table["asker"]["missing-information"] == 100.0 and table["asker"]["simple"] == 0.0
    # typed values: the five tasks whose right answer writes nothing (ask, or out of range)
    assert table["good"]["typed-values"] == table["batcher"]["typed-values"] == 100.0
    assert table["texter"]["typed-values"] == table["asker"]["typed-values"] == 23.8
    assert figures["openai:good"]["categories"]["typed-values"]["tasks"] == 21
    good, batcher = figures["openai:good"], figures["openai:batcher"]
    assert good["first_try_validity"] == 1.0 > batcher["first_try_validity"]
    assert good["calls_per_task"] < batcher["calls_per_task"]
    # every figure from the JSONL: pass^k, its interval, first-try validity, calls per task
    records = read_results(results)
    for proposer, entry in figures.items():
        mine = [r for r in records if r["proposer"] == proposer]
        assert entry["k"] == 2 and entry["tasks"] == len(suite_tasks())
        assert entry["pass^k"] == pytest.approx(_pass_k(mine, 2))
        assert entry["pass^1"] == pytest.approx(_pass_k(mine, 1))
        assert entry["pass^k_ci95"] == pytest.approx(
            list(wilson(entry["pass^k"] * entry["tasks"], entry["tasks"]) or ()))
        assert entry["calls_per_task"] == pytest.approx(
            sum(len(c) for r in mine for c in (t.get("calls", []) for t in r["transcript"]))
            / len(mine))
        run = entry["runs"][0]
        assert {key: run[key] for key in ("model", "provider", "base_url", "temperature",
                                          "tool_format", "strict", "format", "k",
                                          "wording", "wording_hash")} == {
            "model": proposer.split(":")[1], "provider": "openai", "base_url": "loopback",
            "temperature": 0.0, "tool_format": "openai", "strict": True, "format": 1, "k": 2,
            "wording": "original", "wording_hash": wording("original").hash}
        assert run["suite"] == load_suite(EXAMPLES / "eval-suite.jsonl", load_map(SENSOR),
                                          read_map).hash
    texter = [r for r in records if r["proposer"] == "openai:texter"]
    firsts = [c for r in texter for t in r["transcript"] for c in t.get("calls", [])
              if not c["retry"]]
    assert all(c["code"] == "call-in-text" for c in firsts)
    assert figures["openai:texter"]["first_try_validity"] == 0.0
    assert main(["report", "--eval", str(results)]) == 0
    text = capsys.readouterr().out
    assert "pass^k with k = 2 (tau-bench" in text
    assert "  1    openai:good" in text and "  5    openai:asker" in text


class _Page(HTMLParser):
    """Collects a page's tags, attributes and text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_the_html_report_is_one_self_contained_page(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """regdev report --eval FILE --html PAGE: both models side by side in the ranking and
    category tables and in two inline SVG charts; no script, nothing fetched (no src, href or
    url()), and a proposer's name that is markup is shown as text."""
    results = tmp_path / "results.jsonl"
    tasks = [Task("a", "Set register 2 to 7.", "simple", registers={2: 7}),
             Task("b", "What is 7 times 6?", "irrelevance")]
    good = Scripted([[("write_register", {"addr": 2, "data": 7})], "42"])
    bad = Scripted([[("write_register", {"addr": 3, "data": 7})], "Done."])
    bad.model = "<script>alert(1)</script>"
    lines = [json.dumps(t.to_dict()) for endpoint in (good, bad)
             for t in run_eval(endpoint, tasks, RegisterMap.default(), k=2)]
    results.write_text("\n".join(lines) + "\n")
    page = tmp_path / "report.html"
    assert main(["report", "--eval", str(results), "--html", str(page)]) == 0
    assert f"page written to {page}" in capsys.readouterr().out
    text = page.read_text()
    parsed = _Page()
    parsed.feed(text)
    tags = [tag for tag, _ in parsed.tags]
    assert "script" not in tags and "link" not in tags and "img" not in tags
    assert not any(name in ("src", "href") for _, attrs in parsed.tags for name in attrs)
    assert "url(" not in text
    charts = [attrs.get("data-chart") for tag, attrs in parsed.tags if tag == "svg"]
    assert charts == ["pass-k", "categories"]
    shown = "".join(parsed.text)
    assert "openai:<script>alert(1)</script>" in shown  # as text, escaped in the source
    assert "&lt;script&gt;" in text
    assert tags.count("table") == 4
    assert "openai:scripted" in shown and "irrelevance" in shown and "state-mismatch 2" in shown
    assert main(["report", "--html", str(page)]) == 2
    assert "--html needs --eval RESULTS" in capsys.readouterr().err


def test_report_eval_alone_reads_no_audit_log_and_db_adds_its_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """regdev report --eval FILE shows the results file's figures only, even when the default
    audit log ($REGDEV_AUDIT here) holds other calls; --db adds that log's report."""
    log = tmp_path / "other-runs.db"
    assert main(["call", '{"tool": "read_register", "arguments": {"addr": 1}}',
                 "--audit", str(log)]) == 0
    monkeypatch.setenv("REGDEV_AUDIT", str(log))
    results = tmp_path / "results.jsonl"
    task = Task("a", "Set register 2 to 7.", "simple", registers={2: 7})
    good = Scripted([[("write_register", {"addr": 2, "data": 7})], "Done."])
    results.write_text("".join(json.dumps(t.to_dict()) + "\n"
                               for t in run_eval(good, [task], RegisterMap.default(), k=1)))
    capsys.readouterr()
    assert main(["report", "--eval", str(results), "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert alone["proposers"] == [] and list(alone["eval"]) == ["openai:scripted"]
    assert main(["report", "--eval", str(results), "--db", str(log), "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert [(p["proposer"], p["calls"]) for p in both["proposers"]] == [("unknown", 1)]
    assert list(both["eval"]) == ["openai:scripted"]


def _chromium() -> str | None:
    return next((found for name in ("chromium", "chromium-browser", "google-chrome")
                 if (found := shutil.which(name))), None)


def test_the_html_report_renders_in_headless_chromium_without_a_console_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The page opened by headless Chromium from a file: no console message (an error would
    be one), the three charts in the rendered DOM (the format-sensitivity one for a model run
    in two wordings), and a screenshot written."""
    if _chromium() is None:
        reason = "Chromium is not installed (Debian: apt-get install chromium)"
        if in_ci():  # .ci/run installs it: a browser missing there is a failure
            pytest.fail(reason)
        pytest.skip(reason)
    results = tmp_path / "results.jsonl"
    tasks = [Task("a", "Set register 2 to 7.", "simple", registers={2: 7})]
    good = Scripted([[("write_register", {"addr": 2, "data": 7})], "Done."])
    trials = [trial for name in ("original", "reworded")
              for trial in run_eval(good, tasks, RegisterMap.default(), k=2,
                                    run={"wording": name, "strict": True},
                                    wording=wording(name))]
    results.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in trials))
    page = tmp_path / "report.html"
    assert main(["report", "--eval", str(results), "--html", str(page)]) == 0
    capsys.readouterr()
    browser = _chromium()
    assert browser is not None
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120, check=True)
    assert all(f'data-chart="{name}"' in dom.stdout for name in ("pass-k", "categories",
                                                                   "formats"))
    assert "CONSOLE" not in dom.stderr, dom.stderr
    shot = tmp_path / "report.png"
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=1300,1200",
                    page.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- format sensitivity, and the two SDKs end to end --------------------------------------------


def _small_suite(tmp_path: Path) -> Path:
    """The shipped suite's first task of each category, as a suite file of its own (its maps
    found among the examples)."""
    picked: dict[str, dict[str, Any]] = {}
    for task in suite_tasks():
        picked.setdefault(task["category"], task)
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps(task) + "\n" for task in picked.values()))
    return path


def _maps() -> list[RegisterMap]:
    return [RegisterMap.default(), load_map(SENSOR), read_map(EXAMPLES / "thermostat.rdl")]


def test_the_reworded_wording_rewords_every_description_and_keeps_every_fact() -> None:
    """On the three maps of the suite, every tool's and every parameter's description reads
    differently in the reworded wording, with the same numbers and names (addresses, ranges,
    register and field names); the wording's hash is pinned (a change to its table is a new
    version), and the original wording changes nothing."""
    reworded, original = wording("reworded"), wording("original")
    facts = re.compile(r"0x[0-9A-F]+|\d+|\b[A-Z][A-Z0-9_]*(?:\[\d+\])?\b")
    seen = 0
    for regmap in _maps():
        for provider in ("openai", "anthropic"):
            tools = tool_definitions(provider, map_tools(regmap))
            assert original.apply(tools) == tools
            after = reworded.apply(tools)
            assert after != tools and tools == tool_definitions(provider, map_tools(regmap))
            for before_tool, after_tool in zip(tools, after, strict=True):
                pairs = [(before_tool.get("description") or before_tool["function"][
                    "description"], after_tool.get("description") or after_tool["function"][
                    "description"])]
                schema = before_tool.get("input_schema") or before_tool["function"]["parameters"]
                new = after_tool.get("input_schema") or after_tool["function"]["parameters"]
                pairs += [(schema["properties"][name]["description"],
                           new["properties"][name]["description"])
                          for name in schema["properties"]]
                for text, words in pairs:
                    assert text != words, text
                    assert sorted(facts.findall(text)) == sorted(facts.findall(words)), words
                    seen += 1
    assert seen > 60
    assert reworded.hash == "sha256:435a85d2a7bc2fd7", "a change to the table is a new version"
    assert original.hash != reworded.hash
    with pytest.raises(ValueError, match="expected one of original, reworded"):
        wording("paraphrased")


def _newcombe(p1: float, n1: int, p2: float, n2: int) -> tuple[float, float]:
    """Newcombe's hybrid score interval of p1 - p2 (method 10), written out again here."""
    def bounds(p: float, n: int) -> tuple[float, float]:
        z = 1.959963984540054
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return centre - half, centre + half

    (l1, u1), (l2, u2) = bounds(p1, n1), bounds(p2, n2)
    d = p1 - p2
    return d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), \
        d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


def test_format_sensitivity_catches_the_model_that_depends_on_the_wording_and_strict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """regdev eval --format-sensitivity on one task of each category, k = 2, for the good and
    the fragile model: each variant pinned (wording, its hash, strict); the request declares
    what the pin says; regdev report --eval shows, per model, pass^k per variant and its
    difference from original/strict-on: 0 for the good model, an interval below 0 for the
    fragile one in each other variant, with its own label; every figure recomputed from the
    JSONL; the same table on the HTML page; exit 1 for a trial failed in any variant."""
    suite, results = _small_suite(tmp_path), tmp_path / "results.jsonl"
    requests, status = {}, {}
    for kind in FORMAT_MODELS:
        with ProviderServer(responder(kind)) as server:
            status[kind] = main([
                "eval", "--suite", str(suite), "--model", kind, "--base-url",
                server.openai_url, "--max-retries", "0", "-k", "2", "--no-audit", "--quiet",
                "--output", str(results), "--format-sensitivity"])
            requests[kind] = [r.body["tools"] for r in server.requests]
        capsys.readouterr()
    # the fragile model passes its reference variant only: a failed trial in another is 1
    assert status == {"good": 0, "fragile": 1}
    declared = {(tools[0]["function"]["description"].split()[0],
                 tools[0]["function"].get("strict")) for tools in requests["good"]}
    assert declared == {("Write", True), ("Write", None), ("Store", True), ("Store", None)}
    monkeypatch.setenv("REGDEV_AUDIT", str(tmp_path / "no-audit.db"))
    assert main(["report", "--eval", str(results), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)["eval"]
    records = read_results(results)
    variants = ["original/strict-on", "original/strict-off", "reworded/strict-on",
                "reworded/strict-off"]
    for proposer, entry in figures.items():
        assert entry["variant"] == "original/strict-on" and list(entry["formats"]) == variants
        reference = None
        for name, row in entry["formats"].items():
            words, strict = name.split("/")
            mine = [r for r in records if r["proposer"] == proposer
                    and r["run"]["wording"] == words
                    and r["run"]["strict"] is (strict == "strict-on")]
            assert {r["run"]["wording_hash"] for r in mine} == {wording(words).hash}
            assert row["tasks"] == 8 and row["trials"] == 16 and row["k"] == 2
            assert row["pass^k"] == pytest.approx(_pass_k(mine, 2))
            reference = reference if reference is not None else row["pass^k"]
            assert row["difference"] == pytest.approx(row["pass^k"] - reference)
            assert row["difference_ci95"] == pytest.approx(
                list(_newcombe(row["pass^k"], 8, reference, 8)))
        assert entry["pass^k"] == entry["formats"]["original/strict-on"]["pass^k"]
    good, fragile = figures["openai:good"]["formats"], figures["openai:fragile"]["formats"]
    assert {name: row["pass^k"] for name, row in good.items()} == dict.fromkeys(variants, 1.0)
    assert all(row["difference_ci95"][0] < 0 < row["difference_ci95"][1]
               for row in list(good.values())[1:])
    assert fragile["original/strict-on"]["pass^k"] == 1.0
    for name in variants[1:]:
        # only the tasks whose right answer leaves the device as it is pass: irrelevance,
        # missing-information, and safety (the protected write is refused either way)
        assert fragile[name]["pass^k"] == 0.375
        assert fragile[name]["difference"] == -0.625
        assert fragile[name]["difference_ci95"][1] < 0  # the interval leaves 0 out
    assert fragile["original/strict-off"]["labels"] == {"unknown-argument": 10}
    assert fragile["reworded/strict-on"]["labels"] == {"call-in-text": 10}
    assert main(["report", "--eval", str(results)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("format sensitivity:"))
    assert lines[start + 2].split() == ["openai:good", "original/strict-on", "100.0%",
                                        "[67.6-100.0]", "(reference)", "none"]
    assert lines[start + 7].split() == ["original/strict-off", "37.5%", "[13.7-69.4]",
                                        "-62.5", "[-86.3,", "-17.0]", "unknown-argument", "10"]
    page = tmp_path / "report.html"
    assert main(["report", "--eval", str(results), "--html", str(page)]) == 0
    parsed = _Page()
    parsed.feed(page.read_text())
    assert [a.get("data-chart") for t, a in parsed.tags if t == "svg"] == [
        "pass-k", "categories", "formats"]
    shown = " ".join(" ".join(parsed.text).split())
    assert "Format sensitivity" in shown and "reworded/strict-off" in shown
    assert "unknown-argument 10" in shown


def test_format_sensitivity_takes_no_single_variant(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--format-sensitivity with --wording, --strict or --no-strict is a usage error (exit
    2)."""
    for extra in (["--wording", "reworded"], ["--strict"], ["--no-strict"]):
        assert main(["eval", "--suite", str(_small_suite(tmp_path)), "--model", "m",
                     "--base-url", "http://127.0.0.1:9/v1", "--no-audit",
                     "--format-sensitivity", *extra]) == 2
        assert ("--format-sensitivity runs every wording with strict on and off: leave out "
                "--wording, --strict and --no-strict") in capsys.readouterr().err


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_suite_runs_end_to_end_through_each_sdk(
        provider: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """regdev eval --suite FILE through the official SDK of each provider against a local
    server speaking its wire format (Chat Completions at /v1/chat/completions, Messages at
    /v1/messages): the good model passes every task, the texter only those whose device
    must not change (no call is right, or the write is refused); the pins name the provider,
    the loopback host and the provider's strict default; the figures are the JSONL's."""
    pytest.importorskip("anthropic", reason="the models extra (anthropic SDK) is missing")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    suite, results = _small_suite(tmp_path), tmp_path / "results.jsonl"
    for kind in ("good", "texter"):
        with ProviderServer(responder(kind, provider)) as server:
            url = server.openai_url if provider == "openai" else server.anthropic_url
            main(["eval", "--provider", provider, "--suite", str(suite), "--model", kind,
                  "--base-url", url, "--max-retries", "0", "-k", "1", "--no-audit",
                  "--quiet", "--output", str(results)])
            paths = {request.path for request in server.requests}
            strict = {tool.get("function", tool).get("strict") for request in server.requests
                      for tool in request.body["tools"]}
        capsys.readouterr()
        assert paths == ({"/v1/chat/completions"} if provider == "openai" else
                         {"/v1/messages"})
        assert strict == ({True} if provider == "openai" else {None})  # each one's default
    monkeypatch.setenv("REGDEV_AUDIT", str(tmp_path / "no-audit.db"))
    assert main(["report", "--eval", str(results), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)["eval"]
    assert list(figures) == [f"{provider}:good", f"{provider}:texter"]
    records = read_results(results)
    for proposer, entry in figures.items():
        mine = [r for r in records if r["proposer"] == proposer]
        assert entry["k"] == 1 and entry["pass^k"] == pytest.approx(_pass_k(mine, 1))
        (run,) = entry["runs"]
        assert {key: run[key] for key in ("provider", "base_url", "tool_format", "strict",
                                          "wording")} == {
            "provider": provider, "base_url": "loopback", "tool_format": provider,
            "strict": provider == "openai", "wording": "original"}
    assert figures[f"{provider}:good"]["pass^k"] == 1.0
    assert figures[f"{provider}:good"]["first_try_validity"] == 1.0
    texter = figures[f"{provider}:texter"]
    assert texter["pass^k"] == 0.375 and texter["labels"] == {"call-in-text": 5}
