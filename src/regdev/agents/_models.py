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
* The loop stops with one reason (:data:`AgentStop`): ``done`` (a turn with no tool call: the
  model says it has finished), ``budget`` (``max_steps`` calls made), ``rejected`` (a turn
  with a refused call, then ``retries`` more such turns in a row, or a refusal that is not
  retryable), ``truncated`` (the response hit the token limit), ``model-refusal`` (the model
  declined the task), ``provider-error`` (the API failed after the SDK's own retries: 401,
  403, 404, 429, 5xx, a time-out, no connection; the detail says which in words).
* An API key is read from the environment, handed to the SDK and nothing else: never printed,
  logged, recorded or put in an error message.
* Who proposed each call is recorded: every audit record of the loop carries
  ``provider:model`` as its proposer.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import msgspec

from ..core._errors import RegdevError
from ..core._observation import Observation
from ..core._text import escape_text
from ..gate._gate import Gate, check_loop_id
from ..gate._policy import Session
from ._providers import anthropic_result, openai_result, tool_definitions

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
    "make_endpoint",
    "run_agent",
]

AgentStop = Literal["done", "budget", "rejected", "truncated", "model-refusal",
                    "provider-error"]
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
        kind: ``install``, ``api-key``, ``auth``, ``forbidden``, ``not-found``,
            ``rate-limited``, ``server``, ``timeout``, ``connection``, ``bad-request`` or
            ``api``.
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
    """

    provider: Provider
    model: str
    dialect: str

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
        """Put ``turn`` and the observations of its calls (one each, in order) in the history."""
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


def _import(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        raise ModelError(f"the `{name}` SDK is not installed: {MODELS_INSTALL}",
                         "install") from None


def _sdk_error(sdk: Any, error: Exception, provider: str) -> ModelError:
    """The SDK's exception as a :class:`ModelError` in regdev's words (never the API key,
    never the SDK's class name)."""
    name = "OpenAI" if provider == "openai" else "Anthropic"
    if isinstance(error, sdk.APITimeoutError):
        return ModelError(f"the {name} API did not answer in time", "timeout")
    if isinstance(error, sdk.APIConnectionError):
        return ModelError(f"the {name} API could not be reached", "connection")
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


def _error_detail(error: Exception) -> str:
    """The provider's own error message from the response body, escaped and cut short."""
    body = getattr(error, "body", None)
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

    Raises:
        ModelError: the SDK is not installed, or the API key is not set.
    """

    provider: Provider = "openai"
    dialect = "openai"

    def __init__(self, model: str, *, base_url: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", temperature: float = 0.0,
                 seed: int | None = None, timeout: float = 60.0, max_retries: int = 2) -> None:
        self.sdk = _import("openai")
        self.model = model
        self.temperature, self.seed = temperature, seed
        self.client = self.sdk.OpenAI(api_key=_api_key(api_key_env, base_url),
                                      base_url=base_url, timeout=timeout,
                                      max_retries=max_retries)
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []

    def start(self, task: str, tools: list[dict[str, Any]]) -> None:
        self.tools = tools
        self.messages = [{"role": "system", "content": SYSTEM_PROMPT},
                         {"role": "user", "content": task}]

    def next_turn(self) -> Turn:
        options: dict[str, Any] = {"temperature": self.temperature}
        if self.seed is not None:
            options["seed"] = self.seed
        try:
            response = self.client.chat.completions.create(
                model=self.model, messages=self.messages, tools=self.tools, **options)
        except self.sdk.OpenAIError as error:
            raise _sdk_error(self.sdk, error, "openai") from None
        if not response.choices:
            raise ModelError("the OpenAI API answered with no choice", "api")
        choice = response.choices[0]
        message = choice.message.model_dump(mode="json", exclude_none=True)
        calls = [ToolCall(call.get("id", ""), _name(call.get("function")),
                          msgspec.json.encode({"type": "function",
                                               "function": call.get("function")}))
                 for call in message.get("tool_calls") or [] if isinstance(call, dict)]
        if message.get("refusal"):
            finish: Any = "refusal"
        elif choice.finish_reason == "length":
            finish = "length"
        elif choice.finish_reason == "content_filter":
            finish = "refusal"
        else:
            finish = "tool-calls" if calls else "end"
        text = message.get("content") or message.get("refusal") or ""
        return Turn(calls, text if isinstance(text, str) else "", finish, message)

    def answer(self, turn: Turn, observations: list[Observation]) -> None:
        self.messages.append(turn.message)
        self.messages.extend(openai_result(observation, call.id)
                             for call, observation in zip(turn.calls, observations, strict=True))


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
        ModelError: the SDK is not installed, or the API key is not set.
    """

    provider: Provider = "anthropic"
    dialect = "anthropic"

    def __init__(self, model: str, *, base_url: str | None = None,
                 api_key_env: str = "ANTHROPIC_API_KEY", temperature: float | None = None,
                 max_tokens: int = 1024, strict: bool = False, timeout: float = 60.0,
                 max_retries: int = 2) -> None:
        self.sdk = _import("anthropic")
        self.model = model
        self.temperature, self.max_tokens, self.strict = temperature, max_tokens, strict
        self.client = self.sdk.Anthropic(api_key=_api_key(api_key_env, base_url),
                                         base_url=base_url, timeout=timeout,
                                         max_retries=max_retries)
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []

    def start(self, task: str, tools: list[dict[str, Any]]) -> None:
        self.tools = [{**tool, "strict": True} for tool in tools] if self.strict else tools
        self.messages = [{"role": "user", "content": task}]

    def next_turn(self) -> Turn:
        extra = {} if self.temperature is None else {"temperature": self.temperature}
        try:
            response = self.client.messages.create(
                model=self.model, max_tokens=self.max_tokens, system=SYSTEM_PROMPT,
                messages=self.messages, tools=self.tools, extra_body=extra or None)
        except self.sdk.AnthropicError as error:
            raise _sdk_error(self.sdk, error, "anthropic") from None
        blocks = [block.model_dump(mode="json", exclude_none=True) for block in response.content]
        calls = [ToolCall(block.get("id", ""), _name(block), msgspec.json.encode(block))
                 for block in blocks if block.get("type") == "tool_use"]
        text = " ".join(block["text"] for block in blocks
                        if block.get("type") == "text" and isinstance(block.get("text"), str))
        stop = response.stop_reason
        finish: Any = ("length" if stop == "max_tokens" else "refusal" if stop == "refusal"
                       else "tool-calls" if calls else "end")
        return Turn(calls, text, finish, {"role": "assistant", "content": blocks})

    def answer(self, turn: Turn, observations: list[Observation]) -> None:
        self.messages.append(turn.message)
        self.messages.append({"role": "user", "content": [
            anthropic_result(observation, call.id)
            for call, observation in zip(turn.calls, observations, strict=True)]})


def _name(entry: object) -> str:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return name if isinstance(name, str) else ""


def make_endpoint(provider: str, model: str, **options: Any) -> Endpoint:
    """The endpoint for ``provider`` (``openai`` or ``anthropic``); ``options`` go to its
    constructor (see :class:`OpenAIEndpoint`, :class:`AnthropicEndpoint`).

    Raises:
        ValueError: an unknown provider.
        ModelError: the SDK is not installed, or the API key is not set.
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
    """

    stop: AgentStop
    detail: str
    steps: list[AgentStep] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    loop_id: str = ""
    proposer: str = ""


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
    endpoint.start(task, tool_definitions(endpoint.provider, gate.tools, session=session))
    try:
        _drive(result, endpoint, gate, session, max_steps=max_steps, retries=retries,
               on_step=on_step, on_turn=on_turn)
    finally:
        gate.record_loop_stop(result.loop_id, result.stop, result.detail, len(result.steps),
                              session, proposer=endpoint.proposer)
    return result


def _drive(result: AgentResult, endpoint: Endpoint, gate: Gate, session: Session, *,
           max_steps: int, retries: int, on_step: Callable[[AgentStep], None] | None,
           on_turn: Callable[[Turn], None] | None) -> None:
    refused_turns = 0
    while len(result.steps) < max_steps:
        try:
            turn = endpoint.next_turn()
        except ModelError as error:
            result.stop, result.detail = "provider-error", str(error)
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
        if not turn.calls:
            result.stop = "done"
            result.detail = f"the model is done: {escape_text(turn.text, 160) or '(no text)'}"
            return
        observations, final = [], None
        for index, call in enumerate(turn.calls):
            if len(result.steps) >= max_steps:
                result.detail += (f"; {len(turn.calls) - index} call(s) of the last turn were "
                                  "not run")
                return
            observation = gate.handle(call.raw, dialect=endpoint.dialect, session=session,
                                      loop_id=result.loop_id, step=len(result.steps) + 1,
                                      proposer=endpoint.proposer)
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
