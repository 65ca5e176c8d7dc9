"""Real model endpoints: the official openai and anthropic SDK clients against a local server
that plays back recorded provider responses (127.0.0.1 only; no traffic leaves the machine)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import default_rows
from regdev import AuditLog, Gate, RegisterFile, read_audit
from regdev.agents._models import (
    AnthropicEndpoint,
    ModelError,
    OpenAIEndpoint,
    call_in_text,
    make_endpoint,
    run_agent,
)
from regdev.audit._report import adherence
from support.provider_server import (
    MALFORMED,
    ProviderServer,
    Reply,
    anthropic_turn,
    error_reply,
    openai_turn,
    raw_reply,
    tool_use,
)

pytest.importorskip("openai", reason="the models extra (openai SDK) is not installed")
pytest.importorskip("anthropic", reason="the models extra (anthropic SDK) is not installed")

WILD = Path(__file__).resolve().parent.parent / "examples" / "wild-calls.jsonl"
SECRET = "sk-test-SECRET-never-shown-0123456789"


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)


def openai(server: ProviderServer, **options: Any) -> OpenAIEndpoint:
    options.setdefault("max_retries", 0)
    return OpenAIEndpoint("recorded-model", base_url=server.openai_url, **options)


def anthropic(server: ProviderServer, **options: Any) -> AnthropicEndpoint:
    options.setdefault("max_retries", 0)
    return AnthropicEndpoint("recorded-claude", base_url=server.anthropic_url, **options)


def test_openai_clean_run_pairs_each_result_with_its_call_id() -> None:
    """A write, a read, then a final answer: done, with each tool message paired to its id."""
    replies = [openai_turn([("call_a", "write_register", '{"addr": 3, "data": 200}')]),
               openai_turn([("call_b", "read_register", '{"addr": 3}')]),
               openai_turn(content="Register 3 now holds 200.")]
    device = RegisterFile()
    with ProviderServer(replies) as server, Gate(device) as gate:
        result = run_agent(openai(server), gate, "Set register 3 to 200 and read it back.")
        sent = [request.body for request in server.requests]
    assert (result.stop, result.proposer) == ("done", "openai:recorded-model")
    assert result.detail == "the model is done: Register 3 now holds 200."
    assert device.snapshot()[3] == 200
    assert [step.observation.to_dict() for step in result.steps] == [
        {"ok": True, "tool": "write_register", "result": {"addr": 3, "data": 200}},
        {"ok": True, "tool": "read_register", "result": {"addr": 3, "data": 200}}]
    assert [request.path for request in server.requests] == ["/v1/chat/completions"] * 3
    first = sent[0]
    assert first["model"] == "recorded-model" and first["temperature"] == 0
    assert [t["function"]["name"] for t in first["tools"]] == ["write_register", "read_register"]
    assert all(t["function"]["strict"] is True for t in first["tools"])
    assert first["messages"][1] == {"role": "user",
                                    "content": "Set register 3 to 200 and read it back."}
    tool_message = sent[1]["messages"][-1]
    assert tool_message == {"role": "tool", "tool_call_id": "call_a", "content":
                            '{"ok":true,"tool":"write_register","result":{"addr":3,"data":200}}'}
    assert sent[2]["messages"][-1]["tool_call_id"] == "call_b"


def test_openai_refusal_is_sent_back_and_the_retry_runs() -> None:
    """A refused call's observation reaches the model as its tool message; the retry runs."""
    replies = [openai_turn([("c1", "write_register", '{"addr": "3", "data": 200}')]),
               openai_turn([("c2", "write_register", '{"addr": 3, "data": 200}')]),
               openai_turn(content="done")]
    with ProviderServer(replies) as server, Gate() as gate:
        result = run_agent(openai(server), gate, "write 200 to register 3")
        refusal = json.loads(server.requests[1].body["messages"][-1]["content"])
    assert refusal == {"ok": False, "stage": "validate", "code": "type-addr",
                       "message": 'addr must be an integer 0..15, got string "3"',
                       "retryable": True}
    assert [(s.observation.code, s.retry) for s in result.steps] == [("type-addr", False),
                                                                     (None, True)]
    assert result.stop == "done"


def test_a_refused_retry_stops_the_loop_rejected() -> None:
    """Two turns with a refused call in a row: ``rejected``; the model is not asked again."""
    replies = [openai_turn([("c1", "write_register", '{"addr": 16, "data": 1}')]),
               openai_turn([("c2", "write_register", '{"addr": 17, "data": 1}')]),
               openai_turn(content="never asked")]
    with ProviderServer(replies) as server, Gate() as gate:
        result = run_agent(openai(server), gate, "task")
        asked = len(server.requests)
    assert result.stop == "rejected"
    assert result.detail == ("range-addr: the model's calls were refused in 2 turns in a row "
                             "(retries allowed: 1)")
    assert asked == 2


def test_parallel_calls_run_in_order_each_answered_under_its_id() -> None:
    """Three calls in one turn run in the model's order; one refusal does not stop the others."""
    replies = [openai_turn([("p1", "write_register", '{"addr": 1, "data": 10}'),
                            ("p2", "write_register", '{"addr": 99, "data": 10}'),
                            ("p3", "read_register", '{"addr": 1}')]),
               openai_turn(content="ok")]
    with ProviderServer(replies) as server, Gate() as gate:
        result = run_agent(openai(server), gate, "task")
        answers = server.requests[1].body["messages"][-3:]
    assert [a["tool_call_id"] for a in answers] == ["p1", "p2", "p3"]
    assert [json.loads(a["content"]).get("code") for a in answers] == [None, "range-addr", None]
    assert json.loads(answers[2]["content"])["result"] == {"addr": 1, "data": 10}
    assert result.stop == "done"


def test_anthropic_run_answers_one_user_message_with_is_error() -> None:
    """tool_use blocks are gated in order; the answer is one user message of tool_result blocks,
    ``is_error`` set on the refusal."""
    replies = [anthropic_turn([{"type": "text", "text": "Writing."},
                               tool_use("tu_1", "write_register", {"addr": 2, "data": 7}),
                               tool_use("tu_2", "write_register", {"addr": 2, "data": 700})]),
               anthropic_turn([{"type": "text", "text": "Register 2 is 7."}])]
    device = RegisterFile()
    with ProviderServer(replies) as server, Gate(device) as gate:
        result = run_agent(anthropic(server), gate, "set register 2 to 7")
        first, second = (request.body for request in server.requests)
    assert server.requests[0].path == "/v1/messages"
    assert first["tools"][0]["name"] == "write_register" and "input_schema" in first["tools"][0]
    assert first["messages"] == [{"role": "user", "content": "set register 2 to 7"}]
    answer = second["messages"][-1]
    assert answer["role"] == "user"
    assert [(b["tool_use_id"], b["is_error"]) for b in answer["content"]] == [
        ("tu_1", False), ("tu_2", True)]
    assert json.loads(answer["content"][1]["content"])["code"] == "range-data"
    assert second["messages"][-2]["content"][1]["id"] == "tu_1"  # the assistant turn kept
    assert (result.stop, device.snapshot()[2]) == ("done", 7)


@pytest.mark.parametrize(("reply", "kind", "words"), [
    (error_reply(401, "Incorrect API key provided"), "auth",
     "the OpenAI API refused the API key (401): Incorrect API key provided"),
    (error_reply(429, "Rate limit reached"), "rate-limited",
     "the OpenAI API is rate limiting or out of quota (429), after retries: Rate limit reached"),
    (error_reply(500, "upstream failed"), "server",
     "the OpenAI API failed (500), after retries: upstream failed"),
    (error_reply(404, "The model `x` does not exist"), "not-found",
     "the OpenAI API does not know this model or path (404): The model \\x60x\\x60 does not "
     "exist"),
])
def test_provider_errors_are_stop_reasons_in_words(reply: Any, kind: str, words: str) -> None:
    """An API error stops the loop as ``provider-error`` in regdev's words, without the key."""
    with ProviderServer([reply]) as server, Gate() as gate:
        result = run_agent(openai(server), gate, "task")
    assert (result.stop, result.detail) == ("provider-error", words)
    assert SECRET not in result.detail and result.steps == []
    with ProviderServer([reply]) as server, pytest.raises(ModelError) as raised:
        openai(server).next_turn()
    assert raised.value.kind == kind


def test_the_sdk_retries_transient_errors_with_its_own_backoff() -> None:
    """With retries on, a 500 then a good answer succeeds: the SDK's retry, not ours."""
    replies = [error_reply(500, "flaky"), openai_turn(content="fine")]
    with ProviderServer(replies) as server, Gate() as gate:
        endpoint = OpenAIEndpoint("m", base_url=server.openai_url, max_retries=1)
        result = run_agent(endpoint, gate, "task")
        asked = len(server.requests)
    assert (result.stop, asked) == ("done", 2)


def test_a_slow_response_past_the_timeout_is_a_stop_not_a_hang() -> None:
    """A response slower than ``timeout`` ends the loop with a time-out in words."""
    replies = [openai_turn(content="too late")]
    replies[0].delay = 3.0
    with ProviderServer(replies) as server, Gate() as gate:
        result = run_agent(openai(server, timeout=0.3), gate, "task")
    assert (result.stop, result.detail) == (
        "provider-error", f"the OpenAI API at {server.openai_url} did not answer in time")


def test_a_truncated_response_is_never_dispatched() -> None:
    """finish_reason length: the (possibly partial) calls are not run; stop ``truncated``."""
    replies = [openai_turn([("t1", "write_register", '{"addr": 3, "data": 2')], finish="length")]
    device = RegisterFile()
    with ProviderServer(replies) as server, Gate(device) as gate:
        result = run_agent(openai(server), gate, "task")
    assert result.stop == "truncated" and result.steps == []
    assert device.snapshot() == [0] * 16
    replies = [anthropic_turn([tool_use("t1", "write_register", {"addr": 3})], "max_tokens")]
    with ProviderServer(replies) as server, Gate(device) as gate:
        assert run_agent(anthropic(server), gate, "task").stop == "truncated"


def test_a_model_refusal_is_its_own_stop_reason() -> None:
    """The model declining (OpenAI ``refusal``, Anthropic ``stop_reason: refusal``)."""
    with ProviderServer([openai_turn(refusal="I can't help with that.")]) as server, \
            Gate() as gate:
        result = run_agent(openai(server), gate, "task")
    assert (result.stop, result.detail) == ("model-refusal",
                                            "the model declined: I can't help with that.")
    with ProviderServer([anthropic_turn([], "refusal")]) as server, Gate() as gate:
        assert run_agent(anthropic(server), gate, "task").stop == "model-refusal"


def test_the_step_budget_counts_calls() -> None:
    """``max_steps`` calls, then ``budget``; calls of the turn past it are not run."""
    replies = [openai_turn([(f"b{i}", "read_register", '{"addr": 0}') for i in range(3)])]
    with ProviderServer(replies) as server, Gate() as gate:
        result = run_agent(openai(server), gate, "task", max_steps=2)
    assert result.stop == "budget" and len(result.steps) == 2
    assert result.detail == ("the step budget of 2 calls is spent; 1 call(s) of the last turn "
                             "were not run")


def test_a_missing_api_key_is_one_line_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No key in the environment: ModelError naming the variable; a local server needs none."""
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ModelError, match="environment variable OPENAI_API_KEY"):
        make_endpoint("openai", "m")
    assert make_endpoint("openai", "m", base_url="http://127.0.0.1:9/v1").model == "m"
    with pytest.raises(ValueError, match="unknown provider 'gemini'"):
        make_endpoint("gemini", "m")


def _wrap_openai(raw: str) -> list[tuple[str, str]]:
    """A wild call as the tool call(s) an OpenAI-compatible server would send: (name,
    arguments text). A JSON array of calls is parallel calls; text that is not JSON keeps
    its arguments text as it was."""
    try:
        doc = json.loads(raw)
    except ValueError:
        name = re.search(r"""["']name["']: ["']([^"']*)""", raw)
        start = re.search(r"""["']arguments["']: """, raw)
        assert name and start
        tail = raw[start.end():]
        return [(name.group(1), tail[:-1] if tail.endswith("}") else tail)]
    calls = doc if isinstance(doc, list) else [doc]
    return [(call["name"], json.dumps(call["arguments"])) for call in calls]


def test_wild_calls_wrapped_as_openai_sends_them_get_the_in_process_verdicts() -> None:
    """Each wild call, wrapped as an OpenAI tool call and played back by the local server,
    gets exactly the observation the gate gives the same wrapped call in process."""
    records = [json.loads(line) for line in WILD.read_text().splitlines() if line.strip()]
    turns, expected = [], []
    reference = Gate()
    for index, record in enumerate(records):
        calls = [(f"w{index}_{n}", name, args)
                 for n, (name, args) in enumerate(_wrap_openai(record["raw"]))]
        turns.append(openai_turn(calls))
        for _, name, args in calls:
            raw = json.dumps({"type": "function", "function": {"name": name, "arguments": args}})
            expected.append(reference.handle(raw, dialect="openai").to_dict())
    turns.append(openai_turn(content="done"))
    with ProviderServer(turns) as server, Gate() as gate:
        result = run_agent(openai(server), gate, "replay", max_steps=100, retries=100)
    got = [step.observation.to_dict() for step in result.steps]
    assert got == expected
    codes = [o.get("code", "ok") for o in got]
    wild = [r["expect"] for r in records]
    parallel = [i for i, r in enumerate(records) if r["raw"].startswith("[")]
    assert parallel and codes.count("ok") == wild.count("ok") + 2  # the array: 2 parallel reads
    assert [c for c in codes if c != "ok"] == [c for c in wild if c not in ("ok", "not-an-object")]


def test_regdev_agent_shows_progress_and_exits_by_its_stop(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`regdev agent` prints each call and verdict as it goes; exit 0 only when done; the API
    key appears nowhere in its output."""
    from regdev.cli._main import main  # noqa: PLC0415

    replies = [openai_turn([("c1", "write_register", '{"addr": 5, "data": 300}')],
                           content="Trying\x1b[31m red"),
               openai_turn([("c2", "write_register", '{"addr": 5, "data": 30}')]),
               openai_turn(content="Register 5 is 30.")]
    with ProviderServer(replies) as server:
        status = main(["agent", "--model", "recorded", "--base-url", server.openai_url,
                       "--max-retries", "0", "--no-audit", "Set register 5 to 30."])
    out, err = capsys.readouterr()
    assert status == 0 and err == ""
    assert "turn 1          calls write_register " in out
    assert "refused   validate/range-data (retryable): data 300 is outside 0..255" in out
    assert "turn 2 (retry)  calls write_register" in out
    assert "model says: Trying\\x1b[31m red" in out and "\x1b" not in out
    assert "loop stopped: done (the model is done: Register 5 is 30.)" in out
    assert SECRET not in out
    with ProviderServer([error_reply(401, "bad key")]) as server:
        status = main(["agent", "--model", "m", "--base-url", server.openai_url, "--json",
                       "--max-retries", "0", "--no-audit", "task"])
    out, _ = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert status == 1
    assert lines[0]["stop"] == "provider-error"
    assert lines[0]["detail"] == "the OpenAI API refused the API key (401): bad key"
    assert lines[1] == {"registers": default_rows([0] * 16)}


def test_anthropic_temperature_and_strict_are_sent_only_when_asked() -> None:
    """No temperature by default (the model's own); ``strict`` on each tool when asked."""
    with ProviderServer([anthropic_turn([]), anthropic_turn([])]) as server, Gate() as gate:
        run_agent(anthropic(server), gate, "t")
        run_agent(anthropic(server, temperature=0.0, strict=True), gate, "t")
        plain, tuned = (request.body for request in server.requests)
    assert "temperature" not in plain and "strict" not in plain["tools"][0]
    assert tuned["temperature"] == 0.0 and tuned["tools"][0]["strict"] is True


@pytest.mark.parametrize(("provider", "flag", "declared"), [
    ("openai", [], True), ("openai", ["--no-strict"], None), ("openai", ["--strict"], True),
    ("anthropic", [], None), ("anthropic", ["--strict"], True),
    ("anthropic", ["--no-strict"], None)])
def test_agent_strict_or_no_strict_is_what_each_tool_declares(
        provider: str, flag: list[str], declared: bool | None,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``--strict`` or ``--no-strict`` (before the task) sets the provider's ``strict`` on
    every tool; without either, OpenAI's tools are strict and Anthropic's are not."""
    from regdev.cli._main import main  # noqa: PLC0415

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    reply = openai_turn(content="Done.") if provider == "openai" else anthropic_turn(
        [{"type": "text", "text": "Done."}])
    with ProviderServer([reply]) as server:
        url = server.openai_url if provider == "openai" else server.anthropic_url
        assert main(["agent", "--provider", provider, "--model", "m", "--base-url", url,
                     "--max-retries", "0", "--no-audit", *flag, "task"]) == 0
        (request,) = server.requests
    capsys.readouterr()
    tools = [tool.get("function", tool) for tool in request.body["tools"]]
    assert tools and {tool.get("strict") for tool in tools} == {declared}


#: What each malformed body of provider_server.MALFORMED is called, by provider.
MALFORMED_WORDS = {
    "html-page": ("the {name} API answered 200 with a body that is not JSON (text/html: "
                  "<html>proxy</html>); is --base-url the API's?"),
    "html-as-json": ("the {name} API answered 200 with a body that is not JSON "
                     "(application/json: <html>proxy</html>); is --base-url the API's?"),
    "cut-off-json": ("the {name} API answered 200 with a body that is not JSON "
                     "(application/json: {{\"choices\": [{{\"message\":); is --base-url "
                     "the API's?"),
    "sse-stream": ("the {name} API answered 200 with a body that is not JSON "
                   "(text/event-stream: data: {{\"choices\": []}}\\n\\ndata: [DONE]); is "
                   "--base-url the API's?"),
    "json-array": "the {name} API's answer is not a {api} response: it is not a JSON object",
    "json-string": "the {name} API's answer is not a {api} response: it is not a JSON object",
    "error-object": "the {name} API answered 200 with an error: upstream overloaded",
}
SHAPE_WORDS = {
    "openai": {"empty-object": "it has no `choices` list",
               "choices-not-a-list": "it has no `choices` list",
               "choice-without-message": "it has a choice without a `message` object",
               "message-not-an-object": "it has a choice without a `message` object",
               "content-not-a-list": "it has a choice without a `message` object"},
    "anthropic": {name: "it has no `content` list of typed blocks" for name in (
        "empty-object", "choices-not-a-list", "choice-without-message",
        "message-not-an-object", "content-not-a-list")},
}


def _malformed_words(provider: str, case: str) -> str:
    name, api = ("OpenAI", "Chat Completions") if provider == "openai" else (
        "Anthropic", "Messages")
    if case in MALFORMED_WORDS:
        return MALFORMED_WORDS[case].format(name=name, api=api)
    return f"the {name} API's answer is not a {api} response: {SHAPE_WORDS[provider][case]}"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize(("case", "reply"), MALFORMED, ids=[case for case, _ in MALFORMED])
def test_an_answer_that_is_not_the_apis_is_a_provider_error_in_words(
        provider: str, case: str, reply: Reply, tmp_path: Path) -> None:
    """A 200 whose body is not a turn (a proxy's page, an SSE stream, cut-off JSON, JSON of
    another shape, an error object) stops the loop ``provider-error`` in regdev's words, and
    the audit log's stop record says so (not ``budget``)."""
    with ProviderServer([reply]) as server, Gate(audit=AuditLog(tmp_path / "a.db")) as gate:
        endpoint = openai(server) if provider == "openai" else anthropic(server)
        result = run_agent(endpoint, gate, "task")
    words = _malformed_words(provider, case)
    assert (result.stop, result.detail, result.steps) == ("provider-error", words, [])
    stops = [(r.code, r.message, r.step) for r in read_audit(tmp_path / "a.db")
             if r.event == "stop"]
    assert stops == [("provider-error", words, 0)]
    with ProviderServer([reply]) as server, pytest.raises(ModelError) as raised:
        (openai(server) if provider == "openai" else anthropic(server)).next_turn()
    assert raised.value.kind == ("api" if case == "error-object" else "malformed")


class _Broken:
    """An endpoint of one's own whose next turn raises something that is not a ModelError."""

    provider, model, dialect, proposer = "openai", "broken", "openai", "openai:broken"

    def start(self, task: str, tools: list[dict[str, Any]]) -> None:
        pass

    def next_turn(self) -> Any:
        raise KeyError("choices")


def test_any_endpoint_failure_is_a_provider_error_and_an_interrupt_is_recorded_as_such(
        tmp_path: Path) -> None:
    """An endpoint raising any exception stops ``provider-error``; a callback that raises
    ends the loop with ``error`` in the audit log (the true reason), and propagates."""
    with Gate(audit=AuditLog(tmp_path / "a.db")) as gate:
        result = run_agent(_Broken(), gate, "task")  # type: ignore[arg-type]
    assert (result.stop, result.detail) == ("provider-error",
                                            "the model endpoint failed: 'choices'")

    def closed(step: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    replies = [openai_turn([("c1", "read_register", '{"addr": 1}')])]
    with ProviderServer(replies) as server, Gate(audit=AuditLog(tmp_path / "b.db")) as gate, \
            pytest.raises(BrokenPipeError):
        run_agent(openai(server), gate, "task", on_step=closed)
    stops = [(r.code, r.message, r.step) for r in read_audit(tmp_path / "b.db")
             if r.event == "stop"]
    assert stops == [("error", "the output was closed", 1)]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_regdev_agent_on_a_proxy_page_prints_one_line_and_records_the_true_stop(
        provider: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`regdev agent` against a server answering 200 with HTML: no traceback, the stop line
    in words, exit 1, and the audit log's stop is ``provider-error`` (as `regdev audit` shows
    it)."""
    from regdev.cli._main import main  # noqa: PLC0415

    db = tmp_path / "audit.db"
    with ProviderServer([raw_reply(b"<html>proxy</html>", "text/html")]) as server:
        url = server.openai_url if provider == "openai" else server.anthropic_url
        status = main(["agent", "--provider", provider, "--base-url", url, "--model", "nope",
                       "--max-retries", "0", "--audit", str(db), "task"])
    out, err = capsys.readouterr()
    words = _malformed_words(provider, "html-page")
    assert (status, err) == (1, "")
    assert f"loop stopped: provider-error ({words})" in out.splitlines()
    assert "Traceback" not in out
    assert main(["audit", "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert f"loop stop: provider-error ({words})" in shown and "budget" not in shown


@pytest.mark.parametrize("url", ["foo", "127.0.0.1:11434/v1", "ftp://host/v1", "http://",
                                 "http://host:99999/v1", "file:///tmp/x"])
def test_a_base_url_that_is_not_http_is_a_usage_error(
        url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--base-url` without http:// or https:// and a host: exit 2, naming the flag and the
    form expected (nothing is sent anywhere)."""
    from regdev.cli._main import main  # noqa: PLC0415

    assert main(["agent", "--base-url", url, "--model", "m", "--no-audit", "x"]) == 2
    err = capsys.readouterr().err
    assert err == (f"regdev agent: error: --base-url: expected an http:// or https:// URL such as "
                   f"http://127.0.0.1:11434/v1, got `{url}`\n")


def test_an_unreachable_server_is_named_with_the_cause() -> None:
    """A connection refused names the URL and the cause; so does a name that does not
    resolve (``.invalid`` never does, RFC 6761)."""
    with Gate() as gate:
        result = run_agent(OpenAIEndpoint("m", base_url="http://127.0.0.1:9/v1",
                                          max_retries=0), gate, "task")
    assert (result.stop, result.detail) == (
        "provider-error",
        "the OpenAI API at http://127.0.0.1:9/v1 could not be reached: connection refused")


def test_the_agent_shows_json_and_the_stop_detail_escaped_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The `calls` line shows the call's JSON text as it is (escaped once: `\\"` stays one
    backslash), and the stop line shows the model's escaped words once."""
    from regdev.cli._main import main  # noqa: PLC0415

    replies = [openai_turn([("c1", "write_register", '{"addr": 3, "data": 7}')]),
               openai_turn(content="done \x1b[1mbold\u202e")]
    with ProviderServer(replies) as server:
        status = main(["agent", "--model", "recorded", "--base-url", server.openai_url,
                       "--max-retries", "0", "--no-audit", "task"])
    out = capsys.readouterr().out.splitlines()
    assert status == 0
    assert ('turn 1          calls write_register {"type":"function","function":{"name":'
            '"write_register","arguments":"{\\"addr\\": 3, \\"data\\": 7}"}}') in out
    assert "loop stopped: done (the model is done: done \\x1b[1mbold\\u202e)" in out


TEXT_CALLS = [
    ("tagged", '<tool_call>{"name": "write_register", "arguments": {"addr": 3, "data": 9}}'
               '</tool_call>'),
    ("fenced", 'I will write it:\n```json\n{"name": "write_register", "arguments": '
               '{"addr": 3, "data": 9}}\n```'),
    ("bare", '{"tool": "write_register", "arguments": {"addr": 3, "data": 9}}'),
    ("upper-tag", '<TOOL_CALL>{"name": "write_register", "arguments": {"addr": 3, "data": 9}}'
                  '</TOOL_CALL>'),
    ("array", '[{"name": "write_register", "arguments": {"addr": 3, "data": 9}}]'),
    ("mistral", '[TOOL_CALLS] [{"name": "write_register", '
                '"arguments": {"addr": 3, "data": 9}}]'),
    ("llama", '<function=write_register>{"addr": 3, "data": 9}</function>'),
    ("python-tag", '<|python_tag|>{"name": "write_register", '
                   '"parameters": {"addr": 3, "data": 9}}'),
    ("after-words", 'Calling it now: {"name": "write_register", '
                    '"arguments": {"addr": 3, "data": 9}}'),
    ("tilde-fence", '~~~json\n{"name": "write_register", '
                    '"arguments": {"addr": 3, "data": 9}}\n~~~'),
    ("fence-one-line", '```json {"name": "write_register", '
                       '"arguments": {"addr": 3, "data": 9}}```'),
]


@pytest.mark.parametrize("text", [text for _, text in TEXT_CALLS],
                         ids=[name for name, _ in TEXT_CALLS])
def test_a_call_written_into_the_text_is_refused_answered_and_retried(
        tmp_path: Path, text: str) -> None:
    """A turn with no tool call whose text holds one is not `done`: it is a refused call,
    parse/call-in-text, in the loop, the audit log and the report; the model is told and
    its retry runs. Nothing runs from the text."""
    replies = [openai_turn(content=text),
               openai_turn([("c2", "write_register", '{"addr": 3, "data": 9}')]),
               openai_turn(content="Register 3 is 9.")]
    device = RegisterFile()
    with ProviderServer(replies) as server, \
            Gate(device, audit=AuditLog(tmp_path / "a.db")) as gate:
        result = run_agent(openai(server), gate, "write 9 to register 3")
        told = server.requests[1].body["messages"][-2:]
    assert result.stop == "done"
    assert [(s.observation.code, s.retry) for s in result.steps] == [("call-in-text", False),
                                                                     (None, True)]
    assert told[0]["role"] == "assistant" and told[0]["content"] == text
    refusal = json.loads(told[1]["content"])
    assert told[1]["role"] == "user"
    assert (refusal["stage"], refusal["code"], refusal["retryable"]) == (
        "parse", "call-in-text", True)
    assert refusal["message"].startswith("your reply's text holds a tool call (")
    records = [r for r in read_audit(tmp_path / "a.db") if r.event == "call"]
    assert [(r.stage, r.code, r.step) for r in records] == [("parse", "call-in-text", 1),
                                                            (None, None, 2)]
    assert records[0].raw == text.encode() and records[0].proposer == "openai:recorded-model"
    report = adherence(read_audit(tmp_path / "a.db"))[0].to_dict()
    assert report["codes"] == {"call-in-text": 1}
    assert (report["first_tries"], report["first_try_valid"]) == (1, 0)
    assert device.snapshot()[3] == 9  # written once, by the real call


def test_a_call_in_the_text_twice_stops_rejected_without_running() -> None:
    """Two turns writing the call into the text: rejected as any refused retry; the device
    is untouched."""
    text = "<tool_call>" + TEXT_CALLS[2][1] + "</tool_call>"
    replies = [anthropic_turn([{"type": "text", "text": text}]),
               anthropic_turn([{"type": "text", "text": text}])]
    device = RegisterFile()
    with ProviderServer(replies) as server, Gate(device) as gate:
        result = run_agent(anthropic(server), gate, "task")
        told = server.requests[1].body["messages"][-1]
    assert result.stop == "rejected"
    assert result.detail.startswith("call-in-text: the model's calls were refused in 2 turns")
    assert told["role"] == "user"
    assert json.loads(told["content"][0]["text"])["code"] == "call-in-text"
    assert device.snapshot()[3] == 0


@pytest.mark.parametrize("text", [
    "Done: register 3 holds 9.",
    'The registers are:\n```json\n{"addr": 3, "data": 9}\n```',
    '{"name": "CTRL", "value": 4}',
    "I used <tool_calls> wisely",
    '[{"addr": 3, "data": 9}]',
    "[]",
])
def test_text_without_a_call_is_still_done(text: str) -> None:
    """JSON that shows data, or words, in a final answer: done, as before."""
    assert call_in_text(text) is None or "<tool_call>" not in text
    with ProviderServer([openai_turn(content=text)]) as server, Gate() as gate:
        result = run_agent(openai(server), gate, "task")
    assert (result.stop, result.steps) == ("done", [])
