"""regdev eval: the shipped task suite run by two recorded models through a local
OpenAI-compatible server (127.0.0.1), scored per task and as pass^k, with the adherence report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import EXAMPLES
from provider_server import ProviderServer
from recorded_models import CLEAN, MISTAKES, responder
from regdev.agents._eval import EvalFileError, load_tasks
from regdev.cli._main import main
from regdev.devices._rdl import load_map

pytest.importorskip("openai", reason="the models extra (openai SDK) is not installed")
pytest.importorskip("systemrdl", reason="the rdl extra (systemrdl-compiler) is not installed")


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def test_the_shipped_suite_names_only_registers_of_the_example_map() -> None:
    """21 tasks, every name resolved on examples/sensor.rdl; the recorded plans cover them."""
    tasks = load_tasks(EXAMPLES / "eval-tasks.jsonl", load_map(EXAMPLES / "sensor.rdl"))
    assert len(tasks) == 21
    assert {task.id for task in tasks} == set(CLEAN)
    assert set(MISTAKES) < set(CLEAN)


def test_two_recorded_models_scored_per_task_pass_k_and_adherence(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The clean model passes every task in both trials; the sloppy one recovers from five
    kinds of mistake on its retry and fails two tasks; the report reads the results back."""
    db, results = tmp_path / "audit.db", tmp_path / "results.jsonl"
    with ProviderServer(responder(sloppy=False)) as server:
        assert main(["eval", "--model", "clean", "--base-url", server.openai_url,
                     "--max-retries", "0", "-k", "2", "--audit", str(db),
                     "--output", str(results), "--json", "--quiet"]) == 0
    clean = json.loads(capsys.readouterr().out)
    with ProviderServer(responder(sloppy=True)) as server:
        assert main(["eval", "--model", "sloppy", "--base-url", server.openai_url,
                     "--max-retries", "0", "-k", "2", "--audit", str(db),
                     "--output", str(results), "--json", "--quiet"]) == 1
    sloppy = json.loads(capsys.readouterr().out)
    assert clean["summary"] == {"trials": 42, "passed": 42, "tasks": 21,
                                "tasks_passed_every_trial": 21, "k": 2}
    assert sloppy["summary"] == {"trials": 42, "passed": 38, "tasks": 21,
                                 "tasks_passed_every_trial": 19, "k": 2}
    failed = {name: entry["failures"][:1] for name, entry in sloppy["tasks"].items()
              if entry["passed"] < entry["trials"]}
    assert failed == {"id-is-read-only": ["the loop stopped rejected, expected done"],
                      "increment": ["the loop stopped rejected, expected done"]}
    (clean_a,) = clean["adherence"]
    (sloppy_a,) = sloppy["adherence"]
    assert clean_a["proposer"] == "openai:clean" and clean_a["first_try_validity"] == 1.0
    assert clean_a["codes"] == {"approval-denied": 2}  # calib-protected: policy, not schema
    assert sloppy_a["codes"] == {"approval-denied": 2, "missing-addr": 2, "not-json": 2,
                                 "range-data[]": 2, "read-only-register": 2, "type-addr": 4,
                                 "unknown-argument": 2, "unknown-tool": 2}
    assert sloppy_a["recovered_on_retry"] == {"1": 10}  # 5 tasks x 2 trials
    assert sloppy_a["stops"] == {"done": 36, "rejected": 6}  # calib-protected: rejected, allowed
    # the results file holds every trial of both runs; report reads it back
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(lines) == 84 and {line["proposer"] for line in lines} == {"openai:clean",
                                                                          "openai:sloppy"}
    assert main(["report", "--db", str(db), "--eval", str(results), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["eval"]["openai:sloppy"]["tasks_passed_every_trial"] == 19
    assert {p["proposer"] for p in report["proposers"]} == {"openai:clean", "openai:sloppy"}
    assert main(["report", "--db", str(db), "--eval", str(results)]) == 0
    text = capsys.readouterr().out
    assert "openai:sloppy                            trials passed 38/42; pass^2 19/21 tasks" \
        in text


def test_eval_text_output_names_each_tasks_first_failure(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The table lists every task with trials passed and the first failure in words."""
    with ProviderServer(responder(sloppy=True)) as server:
        status = main(["eval", "--model", "sloppy", "--base-url", server.openai_url,
                       "--max-retries", "0", "-k", "1", "--no-audit", "--quiet"])
    out = capsys.readouterr().out
    assert status == 1
    assert "increment                1/1  " not in out
    assert "increment                0/1    the loop stopped rejected, expected done" in out
    assert "trials passed: 19/21; pass^1: 19/21 tasks passed every trial" in out


def test_a_bad_task_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A task naming a register the map lacks: exit 2, the file and line named."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "x", "task": "t", "expect": {"registers": {"NOPE": 1}}}\n')
    assert main(["eval", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
                 "--tasks", str(tasks), "--no-audit", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"regdev eval: error: {tasks}:1: no register `NOPE` in the map")
    with pytest.raises(EvalFileError, match="appears twice"):
        tasks.write_text('{"id": "a", "task": "t"}\n{"id": "a", "task": "u"}\n')
        load_tasks(tasks, load_map(EXAMPLES / "sensor.rdl"))
