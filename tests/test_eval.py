"""regdev eval: the shipped task suite run by two recorded models through a local
OpenAI-compatible server (127.0.0.1), scored per task and as pass^k, with the adherence report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import EXAMPLES
from regdev import AuditLog
from regdev.agents._eval import EvalFileError, load_tasks, pass_at_k
from regdev.cli._main import main
from regdev.devices._rdl import load_map
from support.provider_server import ProviderServer, Reply, error_reply, raw_reply
from support.recorded_models import CLEAN, MISTAKES, _task_ids, responder

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
    keys = ("trials", "passed", "errored", "tasks", "tasks_passed_every_trial", "k")
    assert {key: clean["summary"][key] for key in keys} == {
        "trials": 42, "passed": 42, "errored": 0, "tasks": 21, "tasks_passed_every_trial": 21,
        "k": 2}
    # id-is-read-only: the refused write changed nothing, so the device is as it should be
    assert {key: sloppy["summary"][key] for key in keys} == {
        "trials": 42, "passed": 40, "errored": 0, "tasks": 21, "tasks_passed_every_trial": 20,
        "k": 2}
    assert sloppy["summary"]["labels"] == {"type-addr": 2}
    failed = {name: entry["failures"][:1] for name, entry in sloppy["tasks"].items()
              if entry["passed"] < entry["trials"]}
    assert failed == {"increment": ["register 0x05 holds 0x29, expected 0x2A"]}
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
    assert report["eval"]["openai:sloppy"]["tasks_passed_every_trial"] == 20
    assert {p["proposer"] for p in report["proposers"]} == {"openai:clean", "openai:sloppy"}
    assert main(["report", "--db", str(db), "--eval", str(results)]) == 0
    text = capsys.readouterr().out
    assert "pass^k with k = 2" in text
    assert re.search(r"2 +openai:sloppy +95\.2% \[77\.3-99\.2\] +95\.2% .* 20/21 passed every "
                     "trial", text)


def test_eval_text_output_names_each_tasks_first_failure(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The table lists every task with trials passed and the first failure in words."""
    with ProviderServer(responder(sloppy=True)) as server:
        status = main(["eval", "--model", "sloppy", "--base-url", server.openai_url,
                       "--max-retries", "0", "-k", "1", "--no-audit", "--quiet"])
    out = capsys.readouterr().out
    assert status == 1
    assert "increment                1/1  " not in out
    assert ("increment                0/1    [type-addr] register 0x05 holds 0x29, expected "
            "0x2A") in out
    assert "trials passed: 20/21; pass^1: 20/21 tasks passed every trial" in out


def test_a_bad_task_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A task naming a register the map lacks: exit 2, the file and line named."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "x", "category": "simple", "task": "t", '
                     '"expect": {"registers": {"NOPE": 1}}}\n')
    assert main(["eval", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
                 "--tasks", str(tasks), "--no-audit", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"regdev eval: error: {tasks}:1: no register `NOPE` in the map")
    with pytest.raises(EvalFileError, match="appears twice"):
        tasks.write_text('{"id": "a", "category": "simple", "task": "t"}\n'
                         '{"id": "a", "category": "simple", "task": "u"}\n')
        load_tasks(tasks, load_map(EXAMPLES / "sensor.rdl"))


@pytest.mark.parametrize(("reply", "words"), [
    (None, "the OpenAI API at http://127.0.0.1:9/v1 could not be reached: connection refused"),
    (error_reply(401, "bad key"), "the OpenAI API refused the API key (401): bad key"),
    (raw_reply(b"<html>proxy</html>", "text/html"),
     "the OpenAI API answered 200 with a body that is not JSON (text/html: <html>proxy</html>);"
     " is --base-url the API's?"),
    # llama.cpp's server started without --jinja; an ollama model without tool support
    (error_reply(400, "tools param requires --jinja flag"),
     "the OpenAI API refused the request (400): tools param requires --jinja flag"),
    (error_reply(400, "registry.ollama.ai/library/gemma:2b does not support tools"),
     "the OpenAI API refused the request (400): registry.ollama.ai/library/gemma:2b does not "
     "support tools"),
    # a server that refuses OpenAI's strict flag (a pydantic model without the field)
    (error_reply(400, "tools.0.function.strict: Extra inputs are not permitted"),
     "the OpenAI API refused the request (400): tools.0.function.strict: Extra inputs are not "
     "permitted (the tools were declared strict: true; a server or model without strict mode "
     "refuses it: --no-strict declares them without)"),
])
def test_a_provider_every_trial_would_fail_on_stops_the_run_after_one_trial(
        reply: Reply | None, words: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Unreachable, key refused, not the API, the request refused (no tool support, no
    --jinja, strict not taken): one line on stderr after the first trial (no progress bar:
    stderr is not a terminal), exit 1, and --output holds that one trial as errored
    (``passed`` null, label provider-error, the error in words), not as the model's
    failure."""
    results = tmp_path / "results.jsonl"
    argv = ["eval", "--model", "m", "--max-retries", "0", "-k", "3", "--no-audit",
            "--output", str(results)]
    if reply is None:
        status = main([*argv, "--base-url", "http://127.0.0.1:9/v1"])
        asked = 0
    else:
        with ProviderServer([reply] * 3) as server:
            status = main([*argv, "--base-url", server.openai_url])
            asked = len(server.requests)
    out, err = capsys.readouterr()
    assert (status, out) == (1, "")
    assert err == ("regdev eval: stopped after the first trial, which every trial would "
                   f"repeat: {words}\n")
    (line,) = [json.loads(text) for text in results.read_text().splitlines()]
    assert (line["task"], line["trial"], line["passed"], line["failures"], line["error"],
            line["stop"], line["label"]) == ("enable", 1, None, [], words, "provider-error",
                                             "provider-error")
    assert asked == (0 if reply is None else 1)


def test_a_trial_that_errored_is_not_scored_nor_in_pass_k(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 500 in one task's trial (after the first): that trial is recorded errored and left
    out of the trials scored and of pass^k, counted apart; the run goes on; exit 1."""
    ids = {task: text for text, task in _task_ids().items()}
    clean = responder(sloppy=False)

    def answer(body: dict[str, object]) -> Reply:
        messages = body["messages"]
        assert isinstance(messages, list)
        if messages[1]["content"] == ids["increment"]:
            return error_reply(500, "upstream failed")
        return clean(body)

    results = tmp_path / "results.jsonl"
    with ProviderServer(answer) as server:
        status = main(["eval", "--model", "clean", "--base-url", server.openai_url,
                       "--max-retries", "0", "-k", "1", "--no-audit", "--output",
                       str(results)])
    out, err = capsys.readouterr()
    assert (status, err) == (1, "")
    assert ("increment                0/0    errored: the OpenAI API failed (500), after "
            "retries: upstream failed") in out.splitlines()
    assert ("trials passed: 20/20; pass^1: 20/20 tasks passed every trial; 1 trial(s) "
            "errored (provider-error: not scored, not in pass^k)") in out.splitlines()
    records = [json.loads(text) for text in results.read_text().splitlines()]
    errored = [r for r in records if r["passed"] is None]
    assert [(r["task"], r["error"]) for r in errored] == [
        ("increment", "the OpenAI API failed (500), after retries: upstream failed")]
    figures = pass_at_k(records)["openai:clean"]
    assert {key: figures[key] for key in ("trials", "passed", "errored", "tasks",
                                          "tasks_passed_every_trial", "k")} == {
        "trials": 20, "passed": 20, "errored": 1, "tasks": 20, "tasks_passed_every_trial": 20,
        "k": 1}
    assert figures["labels"] == {"provider-error": 1}
    AuditLog(tmp_path / "audit.db").close()  # an audit log with no calls beside the results
    assert main(["report", "--db", str(tmp_path / "audit.db"), "--eval", str(results)]) == 0
    assert re.search(r"1 +openai:clean +100\.0% .* 20/20 passed every trial; 1 trial\(s\) "
                     r"errored \(provider-error: not scored\)", capsys.readouterr().out)


def test_pass_k_counts_only_scored_trials() -> None:
    """pass^k over the scored trials of each task; errored ones counted apart; a task with
    none scored is not counted."""
    def record(task: str, passed: bool | None) -> dict[str, object]:
        return {"proposer": "p", "task": task, "passed": passed}

    records = [record("a", True), record("a", None), record("a", True),
               record("b", True), record("b", False), record("b", True),
               record("c", None), record("c", None), record("c", None)]
    figures = pass_at_k(records)["p"]
    assert {key: figures[key] for key in ("trials", "passed", "errored", "tasks",
                                          "tasks_passed_every_trial", "k")} == {
        "trials": 5, "passed": 4, "errored": 4, "tasks": 2, "tasks_passed_every_trial": 1,
        "k": 2}
    # tau-bench's estimator: a: C(2,2)/C(2,2) = 1; b: C(2,2)/C(3,2) = 1/3
    assert figures["pass^k"] == pytest.approx(2 / 3)
    assert figures["pass^1"] == pytest.approx((1 + 2 / 3) / 2)
