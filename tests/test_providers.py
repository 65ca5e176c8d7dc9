"""Provider formats: tool definitions from the one registry, results in each provider's shape,
and whole assistant turns answered call by call."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, CountingDevice
from regdev import (
    READ_REGISTER,
    REGISTER_TOOLS,
    WRITE_REGISTER,
    AuditLog,
    Gate,
    Observation,
    Policy,
    RegisterFile,
    SchemaError,
    Session,
    Tool,
    ToolSet,
    anthropic_result,
    anthropic_tool_results,
    mcp_result,
    openai_result,
    openai_tool_results,
    read_audit,
    tool_definitions,
)
from regdev.cli._main import main

# --- definitions ------------------------------------------------------------------------------


def test_mcp_definitions_carry_schema_and_honest_annotations() -> None:
    """MCP entries: inputSchema from the registry; read-only read, destructive idempotent write."""
    write, read = tool_definitions("mcp")
    assert write["name"] == "write_register"
    assert write["inputSchema"] == WRITE_REGISTER.input_schema
    assert write["annotations"] == {"readOnlyHint": False, "destructiveHint": True,
                                    "idempotentHint": True, "openWorldHint": False}
    assert read["name"] == "read_register"
    assert read["inputSchema"] == READ_REGISTER.input_schema
    assert read["annotations"] == {"readOnlyHint": True, "destructiveHint": False,
                                   "idempotentHint": True, "openWorldHint": False}
    assert write["outputSchema"]["properties"]["tool"] == {"const": "write_register"}
    assert read["outputSchema"]["properties"]["tool"] == {"const": "read_register"}


def test_results_and_refusals_fit_the_output_schema() -> None:
    """Every observation the gate gives a call fits the tool's outputSchema (checked with
    jsonschema's Draft 2020-12 validator, as the SDK's client checks it); a result missing
    its tool, a refusal missing its code, or one saying both do not."""
    from jsonschema import Draft202012Validator  # noqa: PLC0415

    gate = Gate(policy=Policy.from_dict({"registers": {"read_only": [0]}}))
    for tool in tool_definitions("mcp"):
        Draft202012Validator.check_schema(tool["outputSchema"])
    write, read = (Draft202012Validator(tool["outputSchema"]) for tool in tool_definitions("mcp"))
    for raw in ('{"tool": "write_register", "arguments": {"addr": 3, "data": 7}, "id": "a"}',
                '{"tool": "write_register", "arguments": {"addr": 16, "data": 7}}',
                '{"tool": "write_register", "arguments": {"addr": 0, "data": 7}}',
                '{"tool": "write_register"', '{"tool": "nope", "arguments": {}}'):
        observation = gate.handle(raw).to_dict()
        assert not list(write.iter_errors(observation)), observation
    assert not list(read.iter_errors(gate.handle(
        '{"tool": "read_register", "arguments": {"addr": 3}}').to_dict()))
    for wrong in ({"ok": True, "result": {}}, {"ok": False, "stage": "parse", "message": "m",
                                               "retryable": True},
                  {"ok": True, "tool": "write_register", "result": {}, "code": "x"},
                  {"ok": True, "tool": "read_register", "result": {}}):
        assert list(write.iter_errors(wrong)), wrong


def test_openai_definitions_are_strict_chat_completions_tools() -> None:
    """OpenAI: type function, strict, every property required, no additional properties."""
    write, read = tool_definitions("openai")
    assert set(write) == {"type", "function"} and write["type"] == "function"
    function = write["function"]
    assert set(function) == {"name", "description", "parameters", "strict"}
    assert function["name"] == "write_register" and function["strict"] is True
    assert function["description"] == WRITE_REGISTER.description
    assert function["parameters"] == {
        "type": "object",
        "properties": {
            "addr": {"type": "integer", "minimum": 0, "maximum": 15,
                     "description": "Register address, 0..15."},
            "data": {"type": "integer", "minimum": 0, "maximum": 255,
                     "description": "Value to store, 0..255 (one unsigned byte)."},
        },
        "required": ["addr", "data"],
        "additionalProperties": False,
    }
    assert read["function"]["parameters"]["required"] == ["addr"]


def test_anthropic_definitions_use_input_schema() -> None:
    """Anthropic: name, description, input_schema, nothing else."""
    write, read = tool_definitions("anthropic")
    assert write == {"name": "write_register", "description": WRITE_REGISTER.description,
                     "input_schema": dict(WRITE_REGISTER.input_schema)}
    assert read["input_schema"] == READ_REGISTER.input_schema


@pytest.mark.parametrize("fmt", ["mcp", "openai", "anthropic"])
def test_definitions_are_copies(fmt: str) -> None:
    """Changing a returned definition leaves the registry's schema (and the validator) alone."""
    definitions = tool_definitions(fmt)
    text = json.dumps(definitions)
    for entry in definitions:
        schema = (entry.get("inputSchema") or entry.get("input_schema")
                  or entry["function"]["parameters"])
        schema["properties"]["addr"]["maximum"] = 99
    assert WRITE_REGISTER.input_schema["properties"]["addr"]["maximum"] == 15
    assert json.dumps(tool_definitions(fmt)) == text


def test_unknown_format_is_a_value_error() -> None:
    """A format outside PROVIDER_FORMATS names the allowed ones."""
    with pytest.raises(ValueError, match="mcp, openai, anthropic"):
        tool_definitions("gemini")


def _tool(schema: dict[str, Any], name: str = "configure") -> ToolSet:
    return ToolSet([Tool(name=name, description="d", input_schema=schema)])


def test_openai_strict_moves_lengths_to_the_description_and_const_to_enum() -> None:
    """minLength/maxLength become words in the description; const becomes a one-value enum."""
    tools = _tool({
        "type": "object",
        "properties": {
            "label": {"type": "string", "minLength": 1, "maxLength": 4, "description": "Name.",
                      "default": "a"},
            "version": {"const": 2},
            "limits": {"type": "object", "properties": {"low": {"type": "integer"}},
                       "required": ["low"]},
        },
        "required": ["label", "version", "limits"],
        "additionalProperties": False,
    })
    (entry,) = tool_definitions("openai", tools)
    properties = entry["function"]["parameters"]["properties"]
    assert properties["label"] == {"type": "string",
                                   "description": "Name. (at least 1 characters, at most 4 "
                                                  "characters)"}
    assert properties["version"] == {"enum": [2]}
    assert properties["limits"] == {"type": "object", "properties": {"low": {"type": "integer"}},
                                    "required": ["low"], "additionalProperties": False}


def test_openai_strict_carries_arrays() -> None:
    """Arrays keep items (made strict), minItems, maxItems and multipleOf; uniqueItems and the
    counts of properties move into the description."""
    tools = _tool({
        "type": "object",
        "properties": {
            "data": {"type": "array", "minItems": 1, "maxItems": 16, "uniqueItems": True,
                     "items": {"type": "integer", "minimum": 0, "maximum": 255,
                               "multipleOf": 2}},
            "points": {"type": "array", "items": {
                "type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"],
                "maxProperties": 1}},
        },
        "required": ["data", "points"],
        "additionalProperties": False,
    })
    (entry,) = tool_definitions("openai", tools)
    properties = entry["function"]["parameters"]["properties"]
    assert properties["data"] == {
        "type": "array", "minItems": 1, "maxItems": 16, "description": "(unique items)",
        "items": {"type": "integer", "minimum": 0, "maximum": 255, "multipleOf": 2}}
    assert properties["points"] == {"type": "array", "items": {
        "type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"],
        "additionalProperties": False, "description": "(at most 1 properties)"}}


@pytest.mark.parametrize(
    ("schema", "pointer", "words"),
    [
        ({"type": "object", "properties": {"a": {"type": "integer"}}},
         "/tools/0/inputSchema/required", "`a` is optional"),
        ({"type": "object", "properties": {"a": {"type": "array", "items": True}},
          "required": ["a"]}, "/tools/0/inputSchema/properties/a/items", "not true or false"),
        ({"type": "object", "properties": {"a": {"type": "array", "prefixItems": [{}]}},
          "required": ["a"]}, "/tools/0/inputSchema/properties/a/prefixItems", "prefixItems"),
        ({"type": "object", "properties": {"a": {"type": "array", "items": {
            "type": "object", "properties": {"x": {}}}}}, "required": ["a"]},
         "/tools/0/inputSchema/properties/a/items/required", "`x` is optional"),
        ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": True},
         "/tools/0/inputSchema/additionalProperties", "additionalProperties"),
        ({"type": "object", "properties": {"a": True}, "required": ["a"]},
         "/tools/0/inputSchema/properties/a", "not true or false"),
        ({"type": "object", "properties": {"n": {"type": "object", "properties": {
            "x": {"type": "string"}}}}, "required": ["n"]},
         "/tools/0/inputSchema/properties/n/required", "`x` is optional"),
    ],
)
def test_openai_strict_refuses_what_it_cannot_carry(schema: dict[str, Any], pointer: str,
                                                    words: str) -> None:
    """A schema strict mode would have to weaken is refused with a pointer, not rewritten."""
    with pytest.raises(SchemaError, match=words) as info:
        tool_definitions("openai", _tool(schema))
    assert info.value.pointer == pointer


@pytest.mark.parametrize(("fmt", "limit"), [("openai", 64), ("anthropic", 128)])
def test_provider_tool_names_are_checked(fmt: str, limit: int) -> None:
    """OpenAI names: ^[a-zA-Z0-9_-]{1,64}$; Anthropic: {1,128}; MCP passes any name on."""
    empty = {"type": "object", "properties": {}, "required": []}
    for bad in ("default_api:x", "x" * (limit + 1)):
        with pytest.raises(SchemaError, match=f"must match .*{limit}") as info:
            tool_definitions(fmt, _tool(empty, name=bad))
        assert info.value.pointer == "/tools/0/name"
        assert tool_definitions("mcp", _tool(empty, name=bad))[0]["name"] == bad
    (entry,) = tool_definitions(fmt, _tool(empty, name="x" * limit))
    assert entry.get("name", entry.get("function", {}).get("name")) == "x" * limit


def test_mcp_definitions_round_trip_through_the_tool_set() -> None:
    """ToolSet.from_definitions reads back every annotation the MCP form states."""
    tools = ToolSet.from_definitions(tool_definitions("mcp"))
    for name in ("write_register", "read_register"):
        original, copy = REGISTER_TOOLS[name], tools[name]
        assert (copy.read_only, copy.idempotent, copy.destructive, copy.open_world) == (
            original.read_only, original.idempotent, original.destructive, original.open_world)


# --- result shapes ----------------------------------------------------------------------------

OK = Observation.success("write_register", {"addr": 3, "data": 255})
REFUSED = Gate().handle('{"tool": "write_register", "arguments": {"addr": 16, "data": 1}}')


def test_mcp_result_shape() -> None:
    """CallToolResult: the observation as text and as structured content, isError = not ok."""
    assert mcp_result(OK) == {
        "content": [{"type": "text",
                     "text": '{"ok":true,"tool":"write_register","result":{"addr":3,"data":255}}'}],
        "structuredContent": {"ok": True, "tool": "write_register",
                              "result": {"addr": 3, "data": 255}},
        "isError": False,
    }
    refused = mcp_result(REFUSED)
    assert refused["isError"] is True
    assert refused["structuredContent"]["code"] == "range-addr"
    assert json.loads(refused["content"][0]["text"]) == refused["structuredContent"]


def test_openai_and_anthropic_result_shapes() -> None:
    """role tool with tool_call_id; tool_result with tool_use_id and is_error."""
    assert openai_result(REFUSED, "call_1") == {"role": "tool", "tool_call_id": "call_1",
                                                "content": REFUSED.to_json()}
    assert anthropic_result(OK, "toolu_1") == {"type": "tool_result", "tool_use_id": "toolu_1",
                                               "content": OK.to_json(), "is_error": False}
    assert anthropic_result(REFUSED, "toolu_2")["is_error"] is True


# --- whole turns ------------------------------------------------------------------------------


def _openai_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


def test_openai_turn_with_one_refused_call_runs_the_others_in_order() -> None:
    """Three calls: the refused middle one does not stop the write before or the read after."""
    device = RegisterFile()
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            _openai_call("call_a", "write_register", '{"addr": 2, "data": 66}'),
            _openai_call("call_b", "write_register", '{"addr": 2, "data": 300}'),
            _openai_call("call_c", "read_register", '{"addr": 2}'),
        ],
    }
    results = openai_tool_results(message, Gate(device))
    assert [r["tool_call_id"] for r in results] == ["call_a", "call_b", "call_c"]
    assert all(r["role"] == "tool" for r in results)
    bodies = [json.loads(r["content"]) for r in results]
    assert bodies[0] == {"ok": True, "tool": "write_register",
                         "result": {"addr": 2, "data": 66}, "id": "call_a"}
    assert bodies[1]["code"] == "range-data" and bodies[1]["id"] == "call_b"
    assert bodies[2] == {"ok": True, "tool": "read_register",
                         "result": {"addr": 2, "data": 66}, "id": "call_c"}
    assert device.snapshot()[2] == 66 and device.write_count == 1


def test_openai_turn_parses_arguments_strictly_like_raw_output() -> None:
    """function.arguments is JSON text: not JSON, not a string, or "3" each get their code."""
    results = openai_tool_results({"role": "assistant", "tool_calls": [
        _openai_call("c1", "read_register", '{"addr": 1,}'),
        {"id": "c2", "type": "function", "function": {"name": "read_register",
                                                      "arguments": {"addr": 1}}},
        _openai_call("c3", "read_register", '{"addr": "3"}'),
        _openai_call("c4", "read_register", '{"addr": 3.0000000000000001}'),
    ]}, Gate())
    codes = [json.loads(r["content"])["code"] for r in results]
    assert codes == ["not-json", "bad-arguments", "type-addr", "type-addr"]


def test_openai_message_without_tool_calls_needs_no_answer() -> None:
    """A plain text reply gives an empty list."""
    assert openai_tool_results({"role": "assistant", "content": "done"}, Gate()) == []
    assert openai_tool_results({"role": "assistant", "tool_calls": None}, Gate()) == []


def test_anthropic_turn_answers_in_one_user_message_and_skips_other_blocks() -> None:
    """text and thinking blocks are skipped; every tool_use gets a tool_result, in order."""
    device = RegisterFile()
    message = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "set then check", "signature": "s"},
            {"type": "text", "text": "Writing, then reading back."},
            {"type": "tool_use", "id": "toolu_1", "name": "write_register",
             "input": {"addr": 5, "data": 7}},
            {"type": "tool_use", "id": "toolu_2", "name": "write_register",
             "input": {"addr": 5, "data": 7, "force": True}},
            {"type": "tool_use", "id": "toolu_3", "name": "read_register", "input": {"addr": 5}},
        ],
    }
    reply = anthropic_tool_results(message, Gate(device))
    assert reply is not None and reply["role"] == "user"
    blocks = reply["content"]
    assert [b["type"] for b in blocks] == ["tool_result"] * 3
    assert [b["tool_use_id"] for b in blocks] == ["toolu_1", "toolu_2", "toolu_3"]
    assert [b["is_error"] for b in blocks] == [False, True, False]
    assert json.loads(blocks[1]["content"])["code"] == "unknown-argument"
    assert json.loads(blocks[2]["content"])["result"] == {"addr": 5, "data": 7}
    assert device.write_count == 1


def test_anthropic_message_without_tool_use_needs_no_answer() -> None:
    """No tool_use block (or plain string content) gives None: there is nothing to answer."""
    assert anthropic_tool_results({"role": "assistant", "content": "hello"}, Gate()) is None
    assert anthropic_tool_results(
        {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}, Gate()) is None


def test_tool_choice_applies_to_every_call_of_the_turn() -> None:
    """With a forced tool, a call naming another gets wrong-tool; the forced one runs."""
    reply = anthropic_tool_results({"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "read_register", "input": {"addr": 0}},
        {"type": "tool_use", "id": "t2", "name": "write_register",
         "input": {"addr": 0, "data": 1}},
    ]}, Gate(), tool_choice="write_register")
    assert reply is not None
    assert [json.loads(b["content"]).get("code") for b in reply["content"]] == [
        "wrong-tool", None]


class _SdkMessage:
    """Stands in for an SDK's pydantic message object (it has model_dump)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        assert mode == "json"
        return self.data


def test_sdk_message_objects_are_accepted_through_model_dump() -> None:
    """An object with model_dump is read as its JSON dump."""
    message = _SdkMessage({"role": "assistant", "tool_calls": [
        _openai_call("c1", "read_register", '{"addr": 0}')]})
    (result,) = openai_tool_results(message, Gate())
    assert json.loads(result["content"])["ok"] is True


def test_a_call_that_is_not_json_data_is_refused_alone() -> None:
    """A call holding a non-JSON value is refused; the next call still runs."""
    message = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "read_register", "input": {"addr": 1j}},
        {"type": "tool_use", "id": "t2", "name": "read_register", "input": {"addr": 1}},
    ]}
    reply = anthropic_tool_results(message, Gate())
    assert reply is not None
    first, second = (json.loads(b["content"]) for b in reply["content"])
    assert first["code"] == "not-json" and first["id"] == "t1"
    assert second["ok"] is True


@pytest.mark.parametrize("message", [
    {"role": "user", "content": "hi"},
    "not a message",
    {"role": "assistant", "tool_calls": {"id": "x"}},
])
def test_a_caller_passing_the_wrong_thing_gets_a_value_error(message: object) -> None:
    """Not an assistant message (a caller's mistake, not a model's) raises ValueError."""
    with pytest.raises(ValueError, match=r"assistant message|must be a list"):
        openai_tool_results(message, Gate())


@pytest.mark.parametrize("helper", [openai_tool_results, anthropic_tool_results])
def test_a_forced_tool_the_gate_does_not_offer_is_a_value_error(helper: Any) -> None:
    """tool_choice naming no offered tool is the caller's mistake, even for an empty turn."""
    with pytest.raises(ValueError, match="not one of the tools offered"):
        helper({"role": "assistant", "content": "no calls"}, Gate(), tool_choice="erase_chip")


@pytest.mark.parametrize(("helper", "message"), [
    (openai_tool_results, {"role": "assistant", "tool_calls": [
        _openai_call("c1", "write_register", '{"addr": 1, "data": 1}'),
        {"type": "function", "function": {"name": "read_register", "arguments": "{}"}}]}),
    (openai_tool_results, {"role": "assistant", "tool_calls": [
        _openai_call("c1", "write_register", '{"addr": 1, "data": 1}'),
        {"id": 5, "type": "function", "function": {"name": "read_register", "arguments": "{}"}}]}),
    (openai_tool_results, {"role": "assistant", "tool_calls": [
        _openai_call("c1", "write_register", '{"addr": 1, "data": 1}'), "not a call"]}),
    (anthropic_tool_results, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "write_register", "input": {"addr": 1, "data": 1}},
        {"type": "tool_use", "id": "", "name": "read_register", "input": {"addr": 1}}]}),
])
def test_a_call_without_a_string_id_is_a_value_error_and_nothing_runs(
        helper: Any, message: dict[str, Any]) -> None:
    """A result is addressed to its call's id: a call without one fails the turn up front."""
    device = RegisterFile()
    with pytest.raises(ValueError, match=r" 1 needs a non-empty string `id`.*no call was run"):
        helper(message, Gate(device))
    assert device.write_count == 0


def test_a_model_dump_that_fails_is_a_value_error() -> None:
    """An SDK object whose model_dump raises gives a ValueError naming the failure."""

    class Broken:
        def model_dump(self, mode: str = "python") -> dict[str, Any]:
            raise RuntimeError("boom")

    with pytest.raises(ValueError, match="model_dump\\(\\) raised RuntimeError: boom") as info:
        anthropic_tool_results(Broken(), Gate())
    assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.parametrize(("value", "words"), [
    (float("nan"), "nan at `$.input.addr` (JSON numbers are finite)"),
    (float("-inf"), "-inf at `$.input.addr` (JSON numbers are finite)"),
    (Decimal("NaN"), "NaN at `$.input.addr` (JSON numbers are finite)"),
    (b"3", "a Python bytes at `$.input.addr`"),
    ({3}, "a Python set at `$.input.addr`"),
    ({1: 3}, "a key of Python type int at `$.input.addr`"),
    ([0, datetime(2024, 1, 1)], "a Python datetime at `$.input.addr[1]`"),
])
def test_python_data_that_is_not_json_is_refused_not_converted(value: object, words: str) -> None:
    """NaN, bytes, a set, a non-string key: not-json naming the place, never a silent null or
    base64 string."""
    reply = anthropic_tool_results({"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "write_register",
         "input": {"addr": value, "data": 1}}]}, Gate())
    assert reply is not None
    body = json.loads(reply["content"][0]["content"])
    assert body["code"] == "not-json" and body["id"] == "t1"
    assert body["message"] == f"the tool call is not JSON data: {words}"


def test_decimals_are_exact_numbers() -> None:
    """A Decimal is the number it holds: 3 is the integer 3, 3.5 is not an integer."""
    gate = Gate()
    results = openai_tool_results({"role": "assistant", "tool_calls": []}, gate)
    assert results == []
    reply = anthropic_tool_results({"role": "assistant", "content": [
        {"type": "tool_use", "id": f"t{n}", "name": "write_register",
         "input": {"addr": addr, "data": 7}}
        for n, addr in enumerate([Decimal("3"), Decimal("3.5"), Decimal("1E+1")])]}, gate)
    assert reply is not None
    bodies = [json.loads(block["content"]) for block in reply["content"]]
    assert bodies[0]["result"] == {"addr": 3, "data": 7}
    assert bodies[1]["code"] == "type-addr" and "3.5" in bodies[1]["message"]
    assert bodies[2]["result"] == {"addr": 10, "data": 7}


# --- definitions for one session --------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["mcp", "openai", "anthropic"])
def test_definitions_for_a_session_list_only_the_tools_it_is_offered(fmt: str) -> None:
    """A session offered read_register only is told of read_register only, in each format;
    so is a read-only session (the write tool is not offered to one that cannot call it)."""
    policy = Policy.from_file(EXAMPLES / "policy.toml")
    (only,) = tool_definitions(fmt, session=policy.session("reader"))
    assert only == tool_definitions(fmt)[1]
    assert tool_definitions(fmt, session=policy.session("viewer")) == [only]
    assert tool_definitions(fmt, session=policy.session("default")) == tool_definitions(fmt)
    assert tool_definitions(fmt, session=Session(tools=["read_register", "write_register"])) == [
        *reversed(tool_definitions(fmt))]  # in the session's order


def test_regdev_tools_takes_a_policy_and_session(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    """`regdev tools --policy F --session S` prints what `serve` lists to that session: for a
    read-only session, the read tools only."""
    policy = str(EXAMPLES / "policy.toml")
    assert main(["tools", "--policy", policy, "--session", "reader"]) == 0
    assert [t["name"] for t in json.loads(capsys.readouterr().out)] == ["read_register"]
    viewer = tmp_path / "viewer.toml"
    viewer.write_text('[sessions.viewer]\nscopes = ["read"]\n')
    for fmt in ("mcp", "openai"):  # read-only: no write tool (the gate would deny it)
        assert main(["tools", "--format", fmt, "--policy", str(viewer), "--map",
                     str(EXAMPLES / "sensor.rdl"), "--session", "viewer"]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert [t.get("name") or t["function"]["name"] for t in listed] == [
            "read_register", "read_registers", "read_fields"]
    assert main(["tools", "--format", "openai", "--policy", policy, "--session", "nobody"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    assert captured.err.startswith("regdev tools: error: ") and "nobody" in captured.err
    assert main(["tools", "--session", "reader"]) == 2  # no policy: only "default" exists
    assert "--session reader needs --policy FILE" in capsys.readouterr().err


def test_provider_calls_that_are_not_json_data_are_recorded_in_the_audit_log(
        tmp_path: Path) -> None:
    """A turn's call holding non-JSON data is refused (not-json) and, like every call, has
    its record; the turn's other calls run and are recorded too."""
    device = CountingDevice()
    with Gate(device, audit=AuditLog(tmp_path / "a.db")) as gate:
        reply = anthropic_tool_results({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "read_register", "input": {"addr": 1}},
            {"type": "tool_use", "id": "t2", "name": "read_register",
             "input": {"addr": 10**5000}},
        ]}, gate)
    assert reply is not None
    assert [block["is_error"] for block in reply["content"]] == [False, True]
    assert [record.code for record in read_audit(tmp_path / "a.db")] == [None, "not-json"]
    assert device.accesses == 1
