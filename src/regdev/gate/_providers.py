"""Provider formats: the registry's tools and the gate's observations as MCP, OpenAI and
Anthropic carry them.

Rules of this file:

* Every tool definition is derived from the one registry (:class:`~regdev.ToolSet`); no schema
  is restated here. A schema that a format cannot carry faithfully is refused with a
  :class:`~regdev.SchemaError` naming the place, never silently weakened.
* Every tool call in a provider's assistant message goes through :meth:`Gate.handle` with that
  provider's dialect, the same path as raw model output: the decoded call is encoded to JSON
  text again and parsed strictly, so a number means the same whichever way it arrived and the
  byte cap applies. Each call is gated on its own: a refused call does not stop the others,
  results keep the calls' order, and each result echoes its call's id.
* Nothing here raises for a model's mistake. Only a caller's mistake raises ``ValueError``:
  passing something that is not an assistant message, or a tool call without the string id
  its provider assigns (its result could not be addressed). Those are checked before any
  call runs, so a turn either runs call by call or not at all.
* A tool call given as Python data must be JSON data: dicts with string keys, lists,
  strings, integers, finite floats and decimals, booleans and None. Anything else (NaN, bytes,
  a set, a datetime) is refused as ``not-json``, never converted into something the model did
  not send.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Literal, get_args

from ..core._errors import SchemaError
from ..core._observation import PIPELINE, Observation
from ..core._text import display_text, escape_text, is_text
from ._gate import Gate, check_loop_id
from ._parse import encode_json_data
from ._policy import Session
from ._tools import REGISTER_TOOLS, Tool, ToolSet

__all__ = [
    "OBSERVATION_STAGES",
    "PROVIDER_FORMATS",
    "ProviderFormat",
    "anthropic_result",
    "anthropic_tool_results",
    "mcp_result",
    "observation_schema",
    "offered_tools",
    "openai_result",
    "openai_tool_results",
    "tool_definitions",
]

ProviderFormat = Literal["mcp", "openai", "anthropic"]
#: The tool-definition formats :func:`tool_definitions` (and ``regdev tools``) can produce.
PROVIDER_FORMATS: tuple[str, ...] = get_args(ProviderFormat)

# Tool name rules in the APIs' references: OpenAI function names ^[a-zA-Z0-9_-]{1,64}$,
# Anthropic tool names ^[a-zA-Z0-9_-]{1,128}$.
_NAME_LIMITS = {"OpenAI": 64, "Anthropic": 128}
_PROVIDER_NAME = re.compile(r"[A-Za-z0-9_-]+")
# Annotation keywords OpenAI's strict mode does not accept (it refuses e.g. `default`); they
# carry no constraint (draft 2020-12 Meta-Data vocabulary), so leaving them out loses nothing.
_STRICT_DROPPED_ANNOTATIONS = frozenset(
    {"$schema", "$comment", "default", "examples", "deprecated", "readOnly", "writeOnly"}
)


# --- tool definitions -------------------------------------------------------------------------


def tool_definitions(format: str, tools: ToolSet | Gate = REGISTER_TOOLS, *,
                     session: Session | None = None) -> list[dict[str, Any]]:
    """The tools as one provider declares them to a model, in the tool set's order.

    With a ``session``, only the tools it may call (:func:`offered_tools`): a tool the gate
    would answer ``unknown-tool`` (not offered to it) or ``denied-<tool>`` (its scopes do not
    cover it: a write tool for a read-only session) for is not declared. Given a
    :class:`Gate`, its tools (its device's map's, or those it was made with) in the session
    given, else the gate's default session: what that gate will run.

    Formats:

    * ``mcp``: MCP ``tools/list`` entries ``{"name", "description", "inputSchema",
      "annotations", "outputSchema"}`` (see :meth:`Tool.definition`;
      ``outputSchema`` is :func:`observation_schema`: results and refusals both fit it).
    * ``openai``: Chat Completions tools in strict mode, ``{"type": "function", "function":
      {"name", "description", "parameters", "strict": true}}``. Strict mode constrains the
      model's decoding to the schema, and only accepts a subset of JSON Schema: every object
      lists all its properties in ``required`` and sets ``additionalProperties`` to false.
      The bounds ``minimum``/``maximum`` (and the exclusive forms) are kept: strict mode
      supports them for OpenAI's base models (not for fine-tuned models, which refuse them);
      the register tools state their bounds in each property's ``description`` as well.
      ``multipleOf``, ``minItems`` and ``maxItems`` are kept too (in strict mode's list), and
      an array's ``items`` schema is made strict like a property's. ``minLength``,
      ``maxLength``, ``uniqueItems``, ``minProperties`` and ``maxProperties`` are not in
      strict mode's supported list: they are moved into the schema's description.
      ``const`` becomes the equivalent one-value ``enum``.
      Annotation keywords other than ``title`` and ``description`` are left out. The gate
      still checks every call against the registry's own schema.
    * ``anthropic``: Messages API tools ``{"name", "description", "input_schema"}``.

    Args:
        format: one of :data:`PROVIDER_FORMATS`.
        tools: the tools to declare, or a gate whose tools to declare; the register tools
            by default.
        session: declare only the tools this session may call; None declares them all (or,
            given a gate, those its default session may call).

    Returns:
        A new list of new JSON-ready dicts (changing them does not change the registry).

    Raises:
        ValueError: ``format`` is not one of :data:`PROVIDER_FORMATS`.
        SchemaError: the format cannot carry a tool faithfully: a tool name outside
            ``^[a-zA-Z0-9_-]{1,64}$`` for OpenAI or ``^[a-zA-Z0-9_-]{1,128}$`` for
            Anthropic, or, for OpenAI strict mode, an optional
            property, ``additionalProperties: true``, a ``true``/``false`` subschema (a
            property's or an array's ``items``), or ``prefixItems``. The
            pointer names the place, e.g. ``/tools/0/inputSchema/required``.
    """
    if isinstance(tools, Gate):
        session = session or tools.default_session
        tools = tools.tools
    offered = offered_tools(tools, session)
    if format == "mcp":
        return [{**tool.definition(), "outputSchema": observation_schema(tool)}
                for tool in offered]
    if format == "openai":
        return [_openai_tool(tool, index) for index, tool in enumerate(offered)]
    if format == "anthropic":
        return [_anthropic_tool(tool, index) for index, tool in enumerate(offered)]
    raise ValueError(f"unknown format {format!r}; expected one of {', '.join(PROVIDER_FORMATS)}")


def offered_tools(tools: ToolSet, session: Session | None = None) -> list[Tool]:
    """The tools of ``tools`` that ``session`` may call, in the session's order (its
    ``tools``, else the tool set's): those it is offered (:meth:`Session.offers`) whose scope
    it holds (:meth:`Session.check_scope`: a read-only session gets no write tool). None:
    every tool."""
    if session is None:
        return list(tools.values())
    names = tools if session.tools is None else [n for n in session.tools if n in tools]
    return [tools[name] for name in names if session.check_scope(tools[name]) is None]


#: The stages a refusal can name: the pipeline's, and ``internal``.
OBSERVATION_STAGES: tuple[str, ...] = (*PIPELINE, "internal")


def observation_schema(tool: Tool) -> dict[str, Any]:
    """The JSON Schema of the observation a call of ``tool`` gets back (MCP ``outputSchema``:
    the ``structuredContent`` of every ``CallToolResult``, a result or a refusal).

    ``{"ok": true, "tool": NAME, "result": {...}}`` or ``{"ok": false, "stage", "code",
    "message", "retryable"}``, either with an optional ``id`` (string) and ``replay`` (true).
    The result object's members are the tool's own (the registry does not declare them).
    """
    return {
        "type": "object",
        "description": "The observation: the tool's result when ok is true; else the refusal, "
                       "naming one stage and one code, with a message saying what is allowed.",
        "properties": {
            "ok": {"type": "boolean"},
            "tool": {"const": tool.name},
            "result": {"type": "object"},
            "stage": {"enum": list(OBSERVATION_STAGES)},
            "code": {"type": "string"},
            "message": {"type": "string"},
            "retryable": {"type": "boolean"},
            "id": {"type": "string"},
            "replay": {"const": True},
        },
        "required": ["ok"],
        "additionalProperties": False,
        "oneOf": [
            {"properties": {"ok": {"const": True}, "stage": False, "code": False,
                            "message": False, "retryable": False},
             "required": ["tool", "result"]},
            {"properties": {"ok": {"const": False}, "tool": False, "result": False},
             "required": ["stage", "code", "message", "retryable"]},
        ],
    }


def _check_name(tool: Tool, index: int, provider: str) -> None:
    limit = _NAME_LIMITS[provider]
    if not _PROVIDER_NAME.fullmatch(tool.name) or len(tool.name) > limit:
        raise SchemaError(
            f"{provider} tool names must match ^[a-zA-Z0-9_-]{{1,{limit}}}$, "
            f"got `{escape_text(tool.name)}`",
            f"/tools/{index}/name",
        )


def _anthropic_tool(tool: Tool, index: int) -> dict[str, Any]:
    _check_name(tool, index, "Anthropic")
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": copy.deepcopy(dict(tool.input_schema)),
    }


def _openai_tool(tool: Tool, index: int) -> dict[str, Any]:
    _check_name(tool, index, "OpenAI")
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": _strict(tool.input_schema, f"/tools/{index}/inputSchema"),
            "strict": True,
        },
    }


def _is_object_schema(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    return "properties" in schema or kind == "object" or (
        type(kind) is list and "object" in kind
    )


def _strict(schema: object, pointer: str) -> dict[str, Any]:
    """One (sub)schema in OpenAI strict form; see :func:`tool_definitions`."""
    if not isinstance(schema, Mapping):
        raise SchemaError("OpenAI strict mode needs a schema object here, not true or false",
                          pointer)
    out: dict[str, Any] = {}
    notes = []
    for keyword, value in schema.items():
        if keyword in _STRICT_DROPPED_ANNOTATIONS:
            continue
        if keyword == "minLength":
            notes.append(f"at least {value} characters")
        elif keyword == "maxLength":
            notes.append(f"at most {value} characters")
        elif keyword == "uniqueItems":
            if value is True:
                notes.append("unique items")
        elif keyword == "minProperties":
            notes.append(f"at least {value} properties")
        elif keyword == "maxProperties":
            notes.append(f"at most {value} properties")
        elif keyword == "items":
            out[keyword] = _strict(value, f"{pointer}/items")
        elif keyword == "prefixItems":
            raise SchemaError("OpenAI strict mode does not support `prefixItems` (an array "
                              "whose items differ by position)", f"{pointer}/prefixItems")
        elif keyword == "const":
            out["enum"] = [copy.deepcopy(value)]
        elif keyword == "properties":
            out[keyword] = {
                name: _strict(sub, f"{pointer}/properties/{name}") for name, sub in value.items()
            }
        else:
            out[keyword] = copy.deepcopy(value)
    if _is_object_schema(schema):
        properties = schema.get("properties") or {}
        required = schema.get("required") or []
        optional = [name for name in properties if name not in required]
        if optional:
            raise SchemaError(
                "OpenAI strict mode needs every property in `required`; "
                f"`{escape_text(optional[0])}` is optional",
                f"{pointer}/required",
            )
        if schema.get("additionalProperties", False) is not False:
            raise SchemaError("OpenAI strict mode needs `additionalProperties` false",
                              f"{pointer}/additionalProperties")
        out.setdefault("properties", {})
        out.setdefault("required", [])
        out["additionalProperties"] = False
    if notes:
        described = str(schema.get("description", "")).strip()
        out["description"] = f"{described} ({', '.join(notes)})".strip()
    return out


# --- observations in each provider's result shape ---------------------------------------------


def mcp_result(observation: Observation) -> dict[str, Any]:
    """The observation as an MCP ``CallToolResult``.

    Returns:
        ``{"content": [{"type": "text", "text": <observation JSON>}], "structuredContent":
        <observation object>, "isError": <not ok>}``: the text for clients that show text,
        the same object as structured content for clients that read it.
    """
    return {
        "content": [{"type": "text", "text": observation.to_json()}],
        "structuredContent": observation.to_dict(),
        "isError": not observation.ok,
    }


def openai_result(observation: Observation, tool_call_id: str) -> dict[str, Any]:
    """The observation as an OpenAI Chat Completions tool message.

    Args:
        observation: what the gate answered.
        tool_call_id: the ``id`` of the assistant's tool call this answers.

    Returns:
        ``{"role": "tool", "tool_call_id": ..., "content": <observation JSON>}``. The format
        has no error flag: the observation's ``ok`` says whether the call ran.
    """
    return {"role": "tool", "tool_call_id": tool_call_id, "content": observation.to_json()}


def anthropic_result(observation: Observation, tool_use_id: str) -> dict[str, Any]:
    """The observation as an Anthropic ``tool_result`` content block.

    Args:
        observation: what the gate answered.
        tool_use_id: the ``id`` of the ``tool_use`` block this answers.

    Returns:
        ``{"type": "tool_result", "tool_use_id": ..., "content": <observation JSON>,
        "is_error": <not ok>}``.
    """
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": observation.to_json(),
        "is_error": not observation.ok,
    }


# --- a whole assistant turn -------------------------------------------------------------------


def openai_tool_results(
    message: object, gate: Gate, *, tool_choice: str | None = None,
    conversation: str | None = None,
) -> list[dict[str, Any]]:
    """Run every tool call of an OpenAI assistant message through ``gate``; answer each.

    Args:
        message: a Chat Completions assistant message, ``{"role": "assistant", "content": ...,
            "tool_calls": [{"id": ..., "type": "function", "function": {"name": ...,
            "arguments": "<JSON text>"}}, ...]}``, as a dict or as the ``openai`` SDK's object
            (anything with pydantic's ``model_dump``).
        gate: the gate the calls run through, in order, each on its own.
        tool_choice: when set, every call must name this tool (others get ``wrong-tool``).
        conversation: the conversation's id (a string of Unicode text), the same for every
            turn of it, a restart included: recorded as each call's ``loop_id``, and with the
            policy's ``tool_call_ids_as_keys`` it scopes the keys made from the tool call ids
            to this conversation, so that ids another conversation repeats (open-weight
            stacks do, docs/safety.md) are never taken for its calls.

    Returns:
        One ``role: tool`` message per tool call, in the calls' order (see
        :func:`openai_result`); an empty list when the message makes no tool call. Append
        them after the assistant message.

    Raises:
        ValueError: ``message`` is not an assistant message (or its ``model_dump`` fails), its
            ``tool_calls`` is not a list, a tool call is not an object with a non-empty
            string ``id``, ``tool_choice`` is not one of the gate's tools, or
            ``conversation`` is not a string of Unicode text. Checked before any call runs.
    """
    gate.check_options("openai", tool_choice)
    if conversation is not None:
        check_loop_id(conversation)
    data = _assistant_message(message, "OpenAI")
    calls = data.get("tool_calls")
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise ValueError(f"`tool_calls` must be a list, got {type(calls).__name__}")
    ids = _call_ids(calls, "OpenAI", "tool_calls")
    return [
        openai_result(_gate_one(gate, call, call_id, "openai", tool_choice,
                                conversation=conversation),
                      call_id)
        for call, call_id in zip(calls, ids, strict=True)
    ]


def anthropic_tool_results(
    message: object, gate: Gate, *, tool_choice: str | None = None,
    conversation: str | None = None,
) -> dict[str, Any] | None:
    """Run every ``tool_use`` block of an Anthropic assistant message through ``gate``.

    Args:
        message: a Messages API assistant message, ``{"role": "assistant", "content": [
            {"type": "text", ...}, {"type": "tool_use", "id": ..., "name": ..., "input":
            {...}}, ...]}``, as a dict or as the ``anthropic`` SDK's object (anything with
            pydantic's ``model_dump``). Blocks other than ``tool_use`` are skipped.
        gate: the gate the calls run through, in order, each on its own.
        tool_choice: when set, every call must name this tool (others get ``wrong-tool``).
        conversation: the conversation's id (a string of Unicode text), the same for every
            turn of it, a restart included: recorded as each call's ``loop_id``, and with the
            policy's ``tool_call_ids_as_keys`` it scopes the keys made from the tool call ids
            to this conversation, so that ids another conversation repeats (open-weight
            stacks do, docs/safety.md) are never taken for its calls.

    Returns:
        The one user message that answers the turn, ``{"role": "user", "content":
        [tool_result, ...]}``, one block per ``tool_use`` in order (see
        :func:`anthropic_result`); None when the message has no ``tool_use`` block.

    Raises:
        ValueError: ``message`` is not an assistant message (or its ``model_dump`` fails), a
            ``tool_use`` block has no non-empty string ``id``, ``tool_choice`` is not one
            of the gate's tools, or ``conversation`` is not a string of Unicode text. Checked
            before any call runs.
    """
    gate.check_options("anthropic", tool_choice)
    if conversation is not None:
        check_loop_id(conversation)
    data = _assistant_message(message, "Anthropic")
    content = data.get("content")
    blocks = [
        block for block in (content if isinstance(content, list) else [])
        if isinstance(block, Mapping) and block.get("type") == "tool_use"
    ]
    if not blocks:
        return None
    ids = _call_ids(blocks, "Anthropic", "tool_use block")
    return {
        "role": "user",
        "content": [
            anthropic_result(_gate_one(gate, block, block_id, "anthropic", tool_choice,
                                       conversation=conversation), block_id)
            for block, block_id in zip(blocks, ids, strict=True)
        ],
    }


def _assistant_message(message: object, provider: str) -> Mapping[str, Any]:
    if not isinstance(message, Mapping):
        dump = getattr(message, "model_dump", None)
        if not callable(dump):
            raise ValueError(f"expected an {provider} assistant message as a dict, got "
                             f"{type(message).__name__}")
        try:
            message = dump(mode="json")
        except Exception as error:
            raise ValueError(f"could not read the {provider} assistant message: its "
                             f"model_dump() raised {type(error).__name__}: "
                             f"{escape_text(str(error), 120)}") from error
        if not isinstance(message, Mapping):
            raise ValueError(f"expected an {provider} assistant message; its model_dump() "
                             f"gave {type(message).__name__}")
    role = message.get("role", "assistant")
    if role != "assistant":
        raise ValueError(f"expected an {provider} assistant message, got role {role!r}")
    return message


def _call_ids(calls: list[Any], provider: str, what: str) -> list[str]:
    """Each call's id: the provider assigns one to every call, and its result is addressed
    to it. ValueError for a call that is not an object or lacks a non-empty string id of
    Unicode text (one with a lone surrogate cannot be sent back)."""
    ids = []
    for index, call in enumerate(calls):
        call_id = call.get("id") if isinstance(call, Mapping) else None
        if type(call_id) is not str or not call_id or not is_text(call_id):
            got = (f"a {type(call).__name__}" if not isinstance(call, Mapping)
                   else "no id" if call_id is None else f"id {display_text(repr(call_id), 40)}")
            raise ValueError(f"{provider} {what} {index} needs a non-empty string `id` (its "
                             f"result is addressed to it), got {got}; no call was run")
        ids.append(call_id)
    return ids


def _gate_one(gate: Gate, call: object, call_id: str, dialect: str,
              tool_choice: str | None, *, conversation: str | None) -> Observation:
    raw = encode_json_data(call, gate.max_input_bytes)
    if isinstance(raw, str):  # not JSON data: handle_call refuses it by the same check, and
        # records it in the audit log (without its text; as a canonical call, having none)
        return gate.handle_call(call, call_id=call_id, tool_choice=tool_choice,
                                loop_id=conversation)
    return gate.handle(raw, dialect=dialect, tool_choice=tool_choice, loop_id=conversation)

