"""Real models drive the device: a model endpoint proposes tool calls, the gate decides each.

Rules of this file:

* Two endpoints, each on its provider's official SDK (the ``models`` extra): OpenAI-compatible
  Chat Completions (``openai``; with ``base_url`` it reaches OpenAI, ollama, vLLM, llama.cpp's
  server, LM Studio, OpenRouter) and Anthropic Messages (``anthropic``). The SDKs are imported
  lazily; a missing one is a :class:`ModelError` naming the install command.
* Every tool call a model makes goes through :meth:`Gate.handle` in the provider's dialect,
  the same path as any raw call; its observation goes back to the model as that provider's
  tool result (ids paired; ``is_error`` for Anthropic). Calls of one turn run in order, each
  on its own. A turn cut off at the token limit is never dispatched: its calls may be partial.
* A turn with no tool call whose text holds one anyway (a ``<tool_call>`` block, a fenced or
  bare JSON object naming a tool and its arguments: :func:`call_in_text`) is no answer: the
  call was not made, and it is not run from the text either. It is a refused call, parse
  ``call-in-text``, recorded as any call and answered to the model as the user's message,
  and it takes the model's retries as any refusal does.
* The loop stops with one reason (:data:`AgentStop`): ``done`` (a turn with no tool call and
  none written into its text: the model says it has finished), ``budget`` (``max_steps`` calls
  made), ``rejected`` (a turn with a refused call, then ``retries`` more such turns in a row,
  or a refusal that is not retryable), ``truncated`` (the response hit the token limit),
  ``model-refusal`` (the model declined the task), ``provider-error`` (the API failed after
  the SDK's own retries: 401, 403, 404, 429, 5xx, a time-out, no connection; or it answered
  with a body that is not a response of its API: not JSON, an error object, a missing or
  mistyped field; the detail says which in words), ``error`` (the loop was stopped from
  outside: an interrupt, the output closed, a callback that raised; recorded, then re-raised).
  The audit log's stop record always holds the reason the loop really stopped.
* An API key is read from the environment, handed to the SDK and nothing else: never printed,
  logged, recorded or put in an error message.
* Who proposed each call is recorded: every audit record of the loop carries
  ``provider:model`` as its proposer.
* With telemetry on (``docs/observability.md``), a run is one trace: the run's span
  (``invoke_agent regdev``), a client span for each model request (``chat MODEL``) and for
  each tool call (``tools/call TOOL``), whose child is the gate's server span.
"""

from __future__ import annotations

import os
import re
import socket
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import msgspec

from ..core import _telemetry
from ..core._errors import RegdevError
from ..core._observation import Observation, Refusal, refuse
from ..core._text import escape_text
from ..gate._gate import Gate, check_loop_id
from ..gate._policy import Session
from ..gate._providers import anthropic_result, openai_result, tool_definitions
from ._loop import _interruption
from ._wording import Wording

__all__ = [
    "PROVIDERS",
    "AgentResult",
    "AgentStep",
    "AgentStop",
    "AnthropicEndpoint",
    "Endpoint",
    "ModelError",
    "OpenAIEndpoint",
    "ToolCall",
    "Turn",
    "call_in_text",
    "make_endpoint",
    "run_agent",
]

AgentStop = Literal["done", "budget", "rejected", "truncated", "model-refusal",
                    "provider-error", "error"]
#: Every stop reason of :func:`run_agent`, in the order the report lists them.
AGENT_STOPS: tuple[str, ...] = get_args(AgentStop)

Provider = Literal["openai", "anthropic"]
#: The providers :func:`make_endpoint` knows.
PROVIDERS: tuple[str, ...] = get_args(Provider)

#: The install command named when a provider's SDK is missing.
MODELS_INSTALL = ("in a clone of regdev: .venv/bin/pip install -e '.[models]' (scripts/test "
                  "installs it)")

#: What the model is told before the task: the device, the tools, when to stop.
SYSTEM_PROMPT = (
    "You drive a register device through tools. Every tool call is checked before it "
    "reaches the device; a refused call comes back as a result with ok false, a code and a "
    "message saying what was wrong and what is allowed: correct the call and try again. "
    "Call tools one step at a time. When the task is done, answer with one short sentence "
    "and no tool call."
)


class ModelError(RegdevError):
    """The model endpoint failed: the SDK is missing, the API key is not set, or the API
    answered with an error after the SDK's own retries.

    Attributes:
        kind: ``install``, ``api-key``, ``base-url`` (not an http:// or https:// URL),
            ``auth``, ``forbidden``, ``not-found``, ``rate-limited``, ``server``, ``timeout``,
            ``connection``, ``bad-request``, ``api`` (another status, or an error object in
            a 200) or ``malformed`` (an answer that is not the API's: not JSON, or JSON
            without the fields a turn needs).
        status: the HTTP status, when the API answered one.
    """

    def __init__(self, message: str, kind: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call in a model's turn.

    Attributes:
        id: the provider's id for the call (its result is addressed to it).
        name: the tool name the model wrote (untrusted text).
        raw: the call as JSON text in the provider's dialect, exactly what the gate parses.
    """

    id: str
    name: str
    raw: bytes


@dataclass(frozen=True, slots=True)
class Turn:
    """One answer of the model.

    Attributes:
        calls: the tool calls, in the model's order.
        text: the model's text beside them (untrusted), "" when none.
        finish: ``tool-calls``, ``end`` (no call: the model has finished), ``length`` (cut
            off at the token limit) or ``refusal`` (the model declined).
        message: the assistant message as the provider's API takes it back in the history.
    """

    calls: list[ToolCall]
    text: str
    finish: Literal["tool-calls", "end", "length", "refusal"]
    message: dict[str, Any]


class Endpoint:
    """A model behind a provider's API, keeping the conversation.

    Attributes:
        provider: ``openai`` or ``anthropic``.
        model: the model name sent to the API.
        dialect: the gate dialect of its tool calls (the provider's name).
        strict: whether the tools are declared with the provider's strict flag.
    """

    provider: Provider
    model: str
    dialect: str
    #: Whether the tools are declared with the provider's strict flag (``strict: true``).
    strict: bool = False

    def start(self, task: str, tools: list[dict[str, Any]]) -> None:
        """Begin a conversation: the system prompt, the task, and ``tools`` (the provider's
        tool definitions)."""
        raise NotImplementedError

    def next_turn(self) -> Turn:
        """Ask the model for its next turn.

        Raises:
            ModelError: the API failed (after the SDK's retries).
        """
        raise NotImplementedError

    def answer(self, turn: Turn, observations: list[Observation]) -> None:
        """Put ``turn`` and the observations of its calls (one each, in order) in the history.
        A turn without calls has one observation, the refusal of the call written into its
        text (``call-in-text``): it goes back as the user's message."""
        raise NotImplementedError

    def follow_up(self, turn: Turn, text: str) -> None:
        """Put ``turn`` (the model's answer without a call) and the user's next message
        ``text`` in the history (a scripted user's follow-up, :func:`run_agent`)."""
        raise NotImplementedError

    @property
    def proposer(self) -> str:
        """``provider:model``, as the audit log records who proposed a call."""
        return f"{self.provider}:{self.model}"


def _api_key(env: str, base_url: str | None) -> str:
    key = os.environ.get(env, "")
    if key:
        return key
    if base_url is not None:  # a local server (ollama, vLLM, llama.cpp) needs none
        return "unused"
    raise ModelError(f"the API key is not set: put it in the environment variable {env} (or "
                     "name another with --api-key-env; a local server given with --base-url "
                     "needs none)", "api-key")


def check_base_url(url: str | None) -> None:
    """Refuse a base URL that is not ``http://`` or ``https://`` with a host.

    Raises:
        ModelError: kind ``base-url``, saying the form expected.
    """
    if url is None:
        return
    try:
        parts = urllib.parse.urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - a port out of 0..65535 raises ValueError
    except ValueError:
        ok = False
    if not ok:
        raise ModelError("expected an http:// or https:// URL such as "
                         f"http://127.0.0.1:11434/v1, got `{escape_text(url, 80)}`", "base-url")


def _import(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        raise ModelError(f"the `{name}` SDK is not installed: {MODELS_INSTALL}",
                         "install") from None


def _sdk_error(sdk: Any, error: Exception, provider: str, base_url: object = None
               ) -> ModelError:
    """The SDK's exception as a :class:`ModelError` in regdev's words (never the API key,
    never the SDK's class name); a failed connection names the URL and the cause."""
    name = "OpenAI" if provider == "openai" else "Anthropic"
    where = f" at {escape_text(str(base_url).rstrip('/'), 120)}" if base_url else ""
    if isinstance(error, sdk.APITimeoutError):
        return ModelError(f"the {name} API{where} did not answer in time", "timeout")
    if isinstance(error, sdk.APIConnectionError):
        cause = _connection_cause(error)
        return ModelError(f"the {name} API{where} could not be reached"
                          f"{': ' + cause if cause else ''}", "connection")
    status = getattr(error, "status_code", None)
    kinds = {401: ("auth", "refused the API key (401)"),
             403: ("forbidden", "refused access to this model (403)"),
             404: ("not-found", "does not know this model or path (404)"),
             429: ("rate-limited", "is rate limiting or out of quota (429), after retries"),
             400: ("bad-request", "refused the request (400)")}
    if isinstance(status, int):
        kind, words = kinds.get(status, ("server", f"failed ({status}), after retries")
                                if status >= 500 else ("api", f"answered {status}"))
        detail = _error_detail(error)
        return ModelError(f"the {name} API {words}{': ' + detail if detail else ''}", kind,
                          status)
    return ModelError(f"the {name} API call failed", "api")


def _connection_cause(error: BaseException) -> str:
    """Why a connection failed, in words, from the exceptions under the SDK's: the name not
    resolved, refused, timed out, or the system's own words (escaped); "" when none says."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, socket.gaierror):
            return "the host name was not resolved"
        if isinstance(current, ConnectionRefusedError):
            return "connection refused"
        if isinstance(current, (TimeoutError, socket.timeout)):
            return "timed out"
        if isinstance(current, OSError) and current.strerror:
            return escape_text(current.strerror.lower(), 80)
        current = current.__cause__ or current.__context__
    text = str(error.__cause__ or "")  # httpx words it when no OSError is kept
    lowered = text.lower()
    for words, cause in (("name or service not known", "the host name was not resolved"),
                         ("nodename nor servname", "the host name was not resolved"),
                         ("temporary failure in name resolution",
                          "the host name was not resolved"),
                         ("connection refused", "connection refused"),
                         ("timed out", "timed out")):
        if words in lowered:
            return cause
    return escape_text(text, 120) if text else ""


def _answer(sdk: Any, provider: str, base_url: object, create: Callable[[], Any]
            ) -> dict[str, Any]:
    """Call the API (``create`` returns the SDK's raw response) and read its body: a JSON
    object, with the ``null`` members dropped (as the SDK's models drop them).

    Raises:
        ModelError: the SDK raised (:func:`_sdk_error`), or it raised something else on the
            answer, or the body is not JSON, not an object, or an error object.
    """
    name = "OpenAI" if provider == "openai" else "Anthropic"
    base: type[Exception] = sdk.OpenAIError if provider == "openai" else sdk.AnthropicError
    try:
        raw = create()
        status, body = raw.http_response.status_code, raw.http_response.content
        kind = raw.http_response.headers.get("content-type", "")
    except base as error:
        raise _sdk_error(sdk, error, provider, base_url) from None
    except Exception as error:  # the SDK failed on the answer: not a traceback, a stop
        text = str(error)
        raise ModelError(f"the {name} API's answer could not be read"
                         f"{': ' + escape_text(text, 120) if text else ''}", "malformed") \
            from None
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError:
        shown = escape_text(body[:200].decode("utf-8", "replace").strip(), 60)
        raise ModelError(f"the {name} API answered {status} with a body that is not JSON "
                         f"({escape_text(kind.split(';')[0].strip(), 40) or 'no content type'}"
                         f"{': ' + shown if shown else ''}); is --base-url the API's?",
                         "malformed") from None
    if not isinstance(doc, dict):
        raise _malformed(name, "is not a JSON object")
    if doc.get("error") is not None and (doc.get("type") == "error" or "choices" not in doc):
        detail = _error_detail(doc)
        raise ModelError(f"the {name} API answered {status} with an error"
                         f"{': ' + detail if detail else ''}", "api", status)
    dropped = _drop_nulls(doc)
    assert isinstance(dropped, dict)
    return dropped


@contextmanager
def _strict_hint(strict: bool) -> Iterator[None]:
    """A 400 that names ``strict`` to a request whose tools were declared strict says how to
    leave it off (a server or model without strict mode refuses the flag with a 400 naming it,
    e.g. ``tools.0.function.strict: Extra inputs are not permitted``)."""
    try:
        yield
    except ModelError as error:
        if error.kind != "bad-request" or not strict or "strict" not in str(error).lower():
            raise
        raise ModelError(f"{error} (the tools were declared strict: true; a server or model "
                         "without strict mode refuses it: --no-strict declares them without)",
                         error.kind, error.status) from None


def _drop_nulls(value: object) -> object:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _malformed(name: str, what: str) -> ModelError:
    """An answer in JSON that is not the API's shape."""
    api = "Chat Completions" if name == "OpenAI" else "Messages"
    return ModelError(f"the {name} API's answer is not a {api} response: it {what}", "malformed")


def _error_detail(error: object) -> str:
    """The provider's own error message from the response body, escaped and cut short."""
    body = error if isinstance(error, Mapping) else getattr(error, "body", None)
    message = None
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else None
    return escape_text(message, 160) if isinstance(message, str) else ""


class OpenAIEndpoint(Endpoint):
    """OpenAI-compatible Chat Completions, through the official ``openai`` SDK.

    Args:
        model: the model name, e.g. ``gpt-4.1-mini`` or ``qwen3:8b`` on ollama.
        base_url: the API's base URL (``http://127.0.0.1:11434/v1`` for ollama); None for
            OpenAI's.
        api_key_env: the environment variable holding the key (default ``OPENAI_API_KEY``).
        temperature: sampling temperature, 0..2 (default 0).
        seed: sent as ``seed`` where the provider honours it; None sends none.
        timeout: seconds to wait for one response (default 60).
        max_retries: the SDK's retries of 408/429/5xx and connection errors, with its
            backoff (default 2).
        strict: declare the tools with ``strict: true`` (OpenAI's strict mode: the arguments
            are constrained to the schema while decoding); on by default. Off, the same
            schemas are declared without the flag (for a server that refuses it, or to measure
            what it changes); the gate checks every call either way.

    Raises:
        ModelError: the base URL is not http:// or https://, the SDK is not installed, or
            the API key is not set.
    """

    provider: Provider = "openai"
    dialect = "openai"

    def __init__(self, model: str, *, base_url: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", temperature: float = 0.0,
                 seed: int | None = None, timeout: float = 60.0, max_retries: int = 2,
                 strict: bool = True) -> None:
        check_base_url(base_url)
        self.sdk = _import("openai")
        self.model = model
        self.temperature, self.seed, self.strict = temperature, seed, strict
        self.client = self.sdk.OpenAI(api_key=_api_key(api_key_env, base_url),
                                      base_url=base_url, timeout=timeout,
                                      max_retries=max_retries)
        self.base_url = base_url or str(self.client.base_url)  # named when unreachable
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []

    def start(self, task: str, tools: list[dict[str, Any]]) -> None:
        self.tools = tools if self.strict else [
            {**tool, "function": {k: v for k, v in tool["function"].items() if k != "strict"}}
            for tool in tools]
        self.messages = [{"role": "system", "content": SYSTEM_PROMPT},
                         {"role": "user", "content": task}]

    def next_turn(self) -> Turn:
        options: dict[str, Any] = {"temperature": self.temperature}
        if self.seed is not None:
            options["seed"] = self.seed
        with _strict_hint(self.strict):
            doc = _answer(self.sdk, "openai", self.base_url,
                          lambda: self.client.chat.completions.with_raw_response.create(
                              model=self.model, messages=self.messages, tools=self.tools,
                              **options))
        choices = doc.get("choices")
        if not isinstance(choices, list):
            raise _malformed("OpenAI", "has no `choices` list")
        if not choices:
            raise ModelError("the OpenAI API answered with no choice", "api")
        choice = choices[0]
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise _malformed("OpenAI", "has a choice without a `message` object")
        calls_in = message.get("tool_calls") or []
        if not isinstance(calls_in, list):
            raise _malformed("OpenAI", "has `tool_calls` that is not a list")
        calls = [ToolCall(_text(call.get("id")), _name(call.get("function")),
                          msgspec.json.encode({"type": "function",
                                               "function": call.get("function")}))
                 for call in calls_in if isinstance(call, dict)]
        finish_reason = choice.get("finish_reason")
        if message.get("refusal"):
            finish: Any = "refusal"
        elif finish_reason == "length":
            finish = "length"
        elif finish_reason == "content_filter":
            finish = "refusal"
        else:
            finish = "tool-calls" if calls else "end"
        text = message.get("content") or message.get("refusal") or ""
        return Turn(calls, text if isinstance(text, str) else "", finish, message)

    def answer(self, turn: Turn, observations: list[Observation]) -> None:
        self.messages.append(turn.message)
        if not turn.calls:  # a call written into the text: no id to answer to
            self.messages.extend({"role": "user", "content": observation.to_json()}
                                 for observation in observations)
            return
        self.messages.extend(openai_result(observation, call.id)
                             for call, observation in zip(turn.calls, observations, strict=True))

    def follow_up(self, turn: Turn, text: str) -> None:
        self.messages += [turn.message, {"role": "user", "content": text}]


class AnthropicEndpoint(Endpoint):
    """Anthropic Messages, through the official ``anthropic`` SDK.

    Args:
        model: the model name, e.g. ``claude-sonnet-4-5``.
        base_url: the API's base URL; None for Anthropic's.
        api_key_env: the environment variable holding the key (default ``ANTHROPIC_API_KEY``).
        temperature: sampling temperature, 0..1; None (the default) sends none and the model's
            own default applies (the SDK no longer takes it as a parameter: it is sent in the
            request body, and models that refuse it answer 400).
        max_tokens: the most tokens one response may use (default 1024).
        strict: declare the tools with ``strict: true`` (Anthropic's strict tool use: the
            arguments are constrained to the schema while decoding; support varies by model,
            and the gate checks every call either way). Off by default.
        timeout: seconds to wait for one response (default 60).
        max_retries: the SDK's retries, with its backoff (default 2).

    Raises:
        ModelError: the base URL is not http:// or https://, the SDK is not installed, or
            the API key is not set.
    """

    provider: Provider = "anthropic"
    dialect = "anthropic"

    def __init__(self, model: str, *, base_url: str | None = None,
                 api_key_env: str = "ANTHROPIC_API_KEY", temperature: float | None = None,
                 max_tokens: int = 1024, strict: bool = False, timeout: float = 60.0,
                 max_retries: int = 2) -> None:
        check_base_url(base_url)
        self.sdk = _import("anthropic")
        self.model = model
        self.temperature, self.max_tokens, self.strict = temperature, max_tokens, strict
        self.client = self.sdk.Anthropic(api_key=_api_key(api_key_env, base_url),
                                         base_url=base_url, timeout=timeout,
                                         max_retries=max_retries)
        self.base_url = base_url or str(self.client.base_url)  # named when unreachable
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []

    def start(self, task: str, tools: list[dict[str, Any]]) -> None:
        self.tools = [{**tool, "strict": True} for tool in tools] if self.strict else tools
        self.messages = [{"role": "user", "content": task}]

    def next_turn(self) -> Turn:
        extra = {} if self.temperature is None else {"temperature": self.temperature}
        with _strict_hint(self.strict):
            doc = _answer(self.sdk, "anthropic", self.base_url,
                          lambda: self.client.messages.with_raw_response.create(
                              model=self.model, max_tokens=self.max_tokens,
                              system=SYSTEM_PROMPT, messages=self.messages, tools=self.tools,
                              extra_body=extra or None))
        blocks = doc.get("content")
        if not isinstance(blocks, list) or not all(
                isinstance(b, dict) and isinstance(b.get("type"), str) for b in blocks):
            raise _malformed("Anthropic", "has no `content` list of typed blocks")
        calls = [ToolCall(_text(block.get("id")), _name(block), msgspec.json.encode(block))
                 for block in blocks if block.get("type") == "tool_use"]
        text = " ".join(block["text"] for block in blocks
                        if block.get("type") == "text" and isinstance(block.get("text"), str))
        stop = doc.get("stop_reason")
        finish: Any = ("length" if stop == "max_tokens" else "refusal" if stop == "refusal"
                       else "tool-calls" if calls else "end")
        return Turn(calls, text, finish, {"role": "assistant", "content": blocks})

    def answer(self, turn: Turn, observations: list[Observation]) -> None:
        self.messages.append(turn.message)
        if not turn.calls:  # a call written into the text: no tool_use to answer to
            self.messages.append({"role": "user", "content": [
                {"type": "text", "text": observation.to_json()} for observation in observations]})
            return
        self.messages.append({"role": "user", "content": [
            anthropic_result(observation, call.id)
            for call, observation in zip(turn.calls, observations, strict=True)]})

    def follow_up(self, turn: Turn, text: str) -> None:
        self.messages += [turn.message, {"role": "user", "content": text}]


def _name(entry: object) -> str:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return name if isinstance(name, str) else ""


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


#: The markers models write a call after when it is not parsed as one, matched in any case:
#: ``<tool_call>`` (Hermes, Qwen and others), ``[TOOL_CALLS]`` (Mistral), ``<|python_tag|>``
#: and ``<function=NAME>`` (Llama 3.1).
_MARKER = re.compile(r"<tool_call>|\[TOOL_CALLS\]|<\|python_tag\|>|<function=", re.IGNORECASE)
#: A fenced code block (Markdown: backticks or tildes), any info string (```json, ```); its
#: text may start on the fence's line.
_FENCED = re.compile(r"(```|~~~)[^\n`~{\[]*(.*?)\1", re.DOTALL)
#: The keys a call written as JSON names its tool and its arguments with, in the dialects
#: models imitate (canonical, MCP, OpenAI's function, Anthropic's tool_use, and variants).
_NAME_KEYS = ("tool", "name", "tool_name", "function")
_ARGUMENT_KEYS = ("arguments", "parameters", "input", "args")
#: The lines of a reply's text looked at for a call after words (``Calling it: {...}``).
_MAX_CALL_LINES = 32


def call_in_text(text: str) -> str | None:
    """How a reply's text holds a tool call the model wrote instead of making it, in words
    for the model (``a <tool_call> block``, ``a fenced JSON block naming a tool``); None when
    it holds none.

    A marker (``<tool_call>``, ``[TOOL_CALLS]``, ``<|python_tag|>``, ``<function=``, in any
    case) counts whatever follows it. A fenced code block, the whole text, or the text from a
    line (or from the first ``{`` or ``[`` of a line, after words) to the end, counts when it
    is JSON that names a call: one object that names a tool (``tool``, ``name``,
    ``tool_name`` or ``function``, a string or an object with a string ``name``) and gives its
    arguments (``arguments``, ``parameters``, ``input`` or ``args``), or an array of such
    objects (parallel calls). JSON that shows data (a register dump) is no call; only the
    first 32 lines are looked at. The text is the model's (untrusted); nothing here runs it.
    """
    marker = _MARKER.search(text)
    if marker:
        found = marker.group(0)  # ASCII: the pattern's own characters
        return "a <tool_call> block" if found.lower() == "<tool_call>" else f"a call after {found}"
    for _, block in _FENCED.findall(text):
        if _names_a_call(block):
            return "a fenced JSON block naming a tool"
    if _names_a_call(text):
        return "a JSON object naming a tool"
    offset = 0
    for line in text.splitlines(keepends=True)[:_MAX_CALL_LINES]:
        starts = [i for i in (line.find("{"), line.find("[")) if i >= 0]
        if starts and _names_a_call(text[offset + min(starts):]):
            return "a JSON object naming a tool"
        offset += len(line)
    return None


def _names_a_call(text: str) -> bool:
    """Whether ``text`` is one JSON object naming a tool and its arguments, or a non-empty
    array of them."""
    text = text.strip()
    if not text.startswith(("{", "[")) or len(text) > MAX_TEXT_CALL:
        return False
    try:
        doc = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return False
    calls = doc if isinstance(doc, list) else [doc]
    return bool(calls) and all(_is_call(item) for item in calls)


def _is_call(doc: object) -> bool:
    """Whether a decoded JSON value is an object naming a tool and its arguments."""
    if not isinstance(doc, dict):
        return False
    if isinstance(doc.get("function"), dict):  # OpenAI's shape: the name and arguments in it
        doc = {**doc, **doc["function"]}
    named = any(isinstance(doc.get(key), str) and doc[key] for key in _NAME_KEYS)
    return named and any(key in doc for key in _ARGUMENT_KEYS)


#: The longest JSON text :func:`call_in_text` decodes to see whether it is a call (bytes):
#: the gate's default input cap.
MAX_TEXT_CALL = 65536


def text_call_refusal(where: str) -> Refusal:
    """The parse ``call-in-text`` refusal of a call written into a reply's text (``where``:
    :func:`call_in_text`'s words)."""
    return refuse("call-in-text",
                  f"your reply's text holds a tool call ({where}); it was not run: make it "
                  "as a tool call of the API with one of the tools offered, or answer "
                  "without a call when the task is done")


def make_endpoint(provider: str, model: str, **options: Any) -> Endpoint:
    """The endpoint for ``provider`` (``openai`` or ``anthropic``); ``options`` go to its
    constructor (see :class:`OpenAIEndpoint`, :class:`AnthropicEndpoint`).

    Raises:
        ValueError: an unknown provider.
        ModelError: the base URL is not http:// or https://, the SDK is not installed, or
            the API key is not set.
    """
    if provider == "openai":
        return OpenAIEndpoint(model, **options)
    if provider == "anthropic":
        options.pop("seed", None)  # the Messages API has no seed
        return AnthropicEndpoint(model, **options)
    raise ValueError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}")


@dataclass(frozen=True, slots=True)
class AgentStep:
    """One tool call the model made, and what the gate answered.

    Attributes:
        turn: the model's turn it came in, from 1.
        call: the call (its id, name and raw JSON text).
        observation: the gate's observation, as sent back to the model.
        retry: True when the call came in the turn after a turn with a refused call.
    """

    turn: int
    call: ToolCall
    observation: Observation
    retry: bool


@dataclass(slots=True)
class AgentResult:
    """How a model-driven loop went.

    Attributes:
        stop: one of :data:`AGENT_STOPS`.
        detail: one line for a person saying why.
        steps: every call in order.
        turns: the model's answers, in order (the last one's text is its final word).
        loop_id: the loop's id in the audit log.
        proposer: ``provider:model``.
        error_kind: with ``provider-error``, the :class:`ModelError`'s kind (``endpoint``
            for an endpoint that raised something else); else None.
    """

    stop: AgentStop
    detail: str
    steps: list[AgentStep] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    loop_id: str = ""
    proposer: str = ""
    error_kind: str | None = None


def run_agent(
    endpoint: Endpoint,
    gate: Gate,
    task: str,
    *,
    session: Session | None = None,
    max_steps: int = 16,
    retries: int = 1,
    on_step: Callable[[AgentStep], None] | None = None,
    on_turn: Callable[[Turn], None] | None = None,
    loop_id: str | None = None,
    follow_ups: Sequence[str] = (),
    wording: Wording | None = None,
) -> AgentResult:
    """Let the model behind ``endpoint`` work on ``task`` through ``gate`` until it stops.

    Args:
        endpoint: the model (see :func:`make_endpoint`).
        gate: every tool call goes through it, in the endpoint's dialect.
        task: the task in words, sent as the user's message.
        session: the session the calls are made in (and whose tools the model is offered);
            the gate's default when None.
        max_steps: the call budget (retries included), >= 1.
        retries: turns with a refused call allowed in a row after the first, >= 0 (default 1:
            the model gets one retry after a refusal).
        on_step: called with each call's step as it completes (progress output).
        on_turn: called with each turn of the model when it arrives.
        loop_id: the loop's id in the audit log; a random one when None.
        follow_ups: a scripted user's next messages, in order: each time the model answers
            without a call (``done``) while one is left, it is sent as the user's message and
            the loop goes on (the call budget and the retries run across them).
        wording: the wording the tools' descriptions are declared in
            (:mod:`regdev.agents._wording`); None: regdev's own.

    Returns:
        An :class:`AgentResult`; provider failures stop the loop (``provider-error``) and are
        not raised.

    Raises:
        ValueError: ``max_steps`` < 1 or ``retries`` < 0, or a bad ``loop_id``.
        SchemaError: a tool the provider's format cannot carry (see
            :func:`regdev.tool_definitions`).
    """
    if max_steps < 1 or retries < 0:
        raise ValueError(f"need max_steps >= 1 and retries >= 0, got {max_steps}, {retries}")
    if loop_id is not None:
        check_loop_id(loop_id)
    session = session or gate.default_session
    result = AgentResult(stop="budget", detail=f"the step budget of {max_steps} calls is spent",
                         loop_id=loop_id or uuid.uuid4().hex, proposer=endpoint.proposer)
    telemetry = _telemetry.from_environment()
    run: AbstractContextManager[Any] = nullcontext() if telemetry is None else \
        telemetry.agent_run(provider=endpoint.provider, model=endpoint.model,
                            loop_id=result.loop_id)
    with run as span:
        tools = tool_definitions(endpoint.provider, gate.tools, session=session)
        endpoint.start(task, wording.apply(tools) if wording is not None else tools)
        try:
            _drive(result, endpoint, gate, session, max_steps=max_steps, retries=retries,
                   on_step=on_step, on_turn=on_turn, follow_ups=list(follow_ups))
        except BaseException as error:  # a callback raised, or an interrupt: recorded, raised
            result.stop, result.detail = "error", _interruption(error)
            raise
        finally:
            gate.record_loop_stop(result.loop_id, result.stop, result.detail,
                                  len(result.steps), session, proposer=endpoint.proposer)
            if span is not None:
                span.set_attribute("regdev.stop", result.stop)
    return result


def _next_turn(endpoint: Endpoint) -> Turn:
    """The model's next turn, in a client span of its own when telemetry is on."""
    telemetry = _telemetry.current
    if telemetry is None:
        return endpoint.next_turn()
    with telemetry.model_request(provider=endpoint.provider, model=endpoint.model) as span:
        turn = endpoint.next_turn()
        span.set_attribute("regdev.finish", turn.finish)
        return turn


def _run_call(gate: Gate, call: ToolCall, endpoint: Endpoint, *, session: Session,
              loop_id: str, step: int) -> Observation:
    """One tool call of the model through the gate, in a client span of its own when
    telemetry is on (the gate's server span is its child)."""
    telemetry = _telemetry.current
    if telemetry is None:
        return gate.handle(call.raw, dialect=endpoint.dialect, session=session,
                           loop_id=loop_id, step=step, proposer=endpoint.proposer)
    with telemetry.tool_call(tool=call.name, known=call.name in gate.tools,
                             call_id=call.id) as done:
        observation = gate.handle(call.raw, dialect=endpoint.dialect, session=session,
                                  loop_id=loop_id, step=step, proposer=endpoint.proposer)
        done(observation.code, observation.message)
        return observation


def _drive(result: AgentResult, endpoint: Endpoint, gate: Gate, session: Session, *,
           max_steps: int, retries: int, on_step: Callable[[AgentStep], None] | None,
           on_turn: Callable[[Turn], None] | None, follow_ups: list[str]) -> None:
    refused_turns = 0
    while len(result.steps) < max_steps:
        try:
            turn = _next_turn(endpoint)
        except ModelError as error:
            result.stop, result.detail = "provider-error", str(error)
            result.error_kind = error.kind
            return
        except Exception as error:  # an endpoint of one's own that raised: still a stop
            text = str(error)
            result.stop, result.error_kind = "provider-error", "endpoint"
            result.detail = (f"the model endpoint failed: {escape_text(text, 200)}" if text
                             else "the model endpoint failed")
            return
        result.turns.append(turn)
        if on_turn is not None:
            on_turn(turn)
        if turn.finish == "length":
            result.stop = "truncated"
            result.detail = ("the response was cut off at the token limit; its "
                             f"{len(turn.calls)} tool call(s) were not run (they may be partial)")
            return
        if turn.finish == "refusal":
            result.stop = "model-refusal"
            result.detail = f"the model declined: {escape_text(turn.text, 160) or '(no reason)'}"
            return
        written = None if turn.calls else call_in_text(turn.text)
        if not turn.calls and written is None and follow_ups:  # the scripted user goes on
            endpoint.follow_up(turn, follow_ups.pop(0))
            refused_turns = 0
            continue
        if not turn.calls and written is None:
            result.stop = "done"
            result.detail = f"the model is done: {escape_text(turn.text, 160) or '(no text)'}"
            return
        observations, final = [], None
        if written is not None:  # a call in the text: refused, answered, the model retries
            raw = turn.text.encode("utf-8", "replace")
            observation = gate.refuse(raw, text_call_refusal(written), dialect=endpoint.dialect,
                                      session=session, loop_id=result.loop_id,
                                      step=len(result.steps) + 1, proposer=endpoint.proposer)
            step = AgentStep(len(result.turns), ToolCall("", "", raw), observation,
                             refused_turns > 0)
            result.steps.append(step)
            observations.append(observation)
            if on_step is not None:
                on_step(step)
        for index, call in enumerate(turn.calls):
            if len(result.steps) >= max_steps:
                result.detail += (f"; {len(turn.calls) - index} call(s) of the last turn were "
                                  "not run")
                return
            observation = _run_call(gate, call, endpoint, session=session,
                                    loop_id=result.loop_id, step=len(result.steps) + 1)
            step = AgentStep(len(result.turns), call, observation, refused_turns > 0)
            result.steps.append(step)
            observations.append(observation)
            if on_step is not None:
                on_step(step)
            if (final is None and observation.refusal is not None
                    and not observation.refusal.retryable):
                final = observation
        endpoint.answer(turn, observations)
        refused = [o for o in observations if not o.ok]
        if final is not None:
            result.stop = "rejected"
            result.detail = f"{final.code}: the refusal is final (not retryable)"
            return
        refused_turns = refused_turns + 1 if refused else 0
        if refused_turns > retries:
            result.stop = "rejected"
            result.detail = (f"{refused[0].code}: the model's calls were refused in "
                             f"{refused_turns} turns in a row (retries allowed: {retries})")
            return
