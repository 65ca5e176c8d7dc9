"""The MCP server: the registry's tools over MCP on stdio, every ``tools/call`` through the gate.

Rules of this file:

* Built on the official ``mcp`` SDK's low-level ``Server`` (v2), not its high-level
  ``MCPServer`` (FastMCP): that one validates arguments with pydantic before the tool runs,
  turning ``"3"`` into 3 and dropping undeclared arguments, which would hide the model's
  mistakes from the gate. The low-level server checks only the MCP envelope (``name`` a
  string, ``arguments`` an object or null).
* The gate's strict parser decides what each line from the client is. The SDK's stdio
  transport would decode each line with pydantic, which keeps the last of two repeated keys,
  reads ``NaN``, rounds ``3.0000000000000001`` to 3.0, and drops a line it cannot read
  without an answer. So :class:`MessageReader` reads stdin instead: each line is decoded by
  :func:`regdev.gate._parse.parse` (I-JSON: no repeated key, no NaN, exact numbers, bounded
  nesting) and only a line it accepts reaches the SDK, as the message validated from that
  exact decoding. The SDK's ``stdio_server`` still writes stdout (and points file descriptor
  1 at stderr meanwhile, so a stray ``print`` cannot corrupt the protocol); it reads nothing.
* A ``tools/call`` carries to its handler the text the gate runs (:class:`Received`, as the
  SDK's per-message ``request_context``): its params exactly as received. The handler runs
  ``Gate.handle(text, dialect="mcp")``, so the byte cap, repeated keys, exact numbers,
  ``_meta.idempotency_key`` and the audit record (dialect ``mcp``, the raw text as received)
  are what they are in process. The SDK's own decoding of the params serves only its
  envelope check.
* Every request gets an answer (the table in ``docs/agents.md``). A line that is not strict
  JSON runs nothing: a ``tools/call`` whose id can still be read gets a ``CallToolResult``
  with ``isError`` and the gate's parse-stage observation (``not-json``, or ``too-large``
  over the byte cap), recorded in the audit log with the whole line as its raw text (the
  params cannot be cut out of text that does not parse), provided the line has no
  top-level ``name`` or ``arguments`` for the gate to run; any other request gets JSON-RPC
  error -32700 with its id; without a readable id, -32700 with id null (JSON-RPC 2.0,
  section 5.1). Strict JSON that is not a JSON-RPC message gets -32600. Notifications and
  responses are never answered (JSON-RPC 2.0, sections 4.1 and 5); one that cannot be read
  is logged and dropped.
* Work per line is bounded and nothing recurses over a message: a line is at most
  ``max_line_bytes`` (longer ones are cut there and refused), msgspec refuses deep nesting,
  and the lenient reading of a refused line's id (:func:`read_envelope`) is a flat scan.
  Nothing in the reader raises: a failure costs one line an error answer, never the server.
* Device calls run one at a time in a worker thread: a slow device never stalls the protocol
  loop, and two concurrent calls never interleave on the device.
* The stop signals the caller names (``regdev serve``: SIGINT, SIGTERM and SIGHUP) stop the
  server as end of file does, except that queued calls do not run: nothing more is read,
  the call running on the device finishes, every call that ran is answered, each
  ``tools/call`` not yet started is answered with JSON-RPC error :data:`SERVER_STOPPING`
  without running, and :func:`serve_stdio` returns once those answers are written, so that
  the caller closes the gate (committing the audit log). Later stop signals are ignored.
  A stop or end of file denies every approval question still open at once (its answer can
  no longer come): the call is answered and recorded ``approval-denied``, "the server is
  stopping", as over HTTP.
  The SDK's stdio client itself sends SIGTERM to a server that has not exited 2 s after it
  closed stdin.
* A request sent before the handshake gets the SDK's -32602, with a message that says to
  send ``initialize`` first; a ``tools/call`` whose params fail the SDK's envelope check
  (params null or absent, no string ``name``, ``arguments`` a string or an array) gets its
  -32602 with a message naming the cause (server middleware, :func:`_explain_the_sdk`).
* stdout carries protocol messages only; logs go to stderr.
* With telemetry on (``docs/observability.md``), a ``tools/call``'s span continues the trace
  context its ``params._meta`` carries (``traceparent``, ``tracestate``; over HTTP, the
  request's headers when ``_meta`` has none) and names its JSON-RPC id and MCP session
  (:func:`incoming_of`). That span is the gate's: the SDK's own server span (its
  ``OpenTelemetryMiddleware``, on by default, recording once a tracer provider is set) is kept
  for every other method but left out for ``tools/call`` (:func:`gate_spans_tool_calls`), so
  that each call is one span, with regdev's attributes, as the MCP conventions ask.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import signal
import threading
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple, cast

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import msgspec
from anyio.streams.memory import MemoryObjectSendStream
from mcp import types
from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from pydantic import ValidationError

from .._version import __version__
from ..core import _telemetry
from ..core._json import lenient_members, strict_value
from ..core._observation import Observation, Refusal, refuse
from ..gate._gate import Gate
from ..gate._parse import parse
from ..gate._policy import Session
from ..gate._providers import mcp_result, tool_definitions
from ..gate._schema import a_json_type
from ._approval import ASKING, Approvals, Asking

__all__ = [
    "ENVELOPE_BYTES",
    "SERVER_STOPPING",
    "Envelope",
    "MessageReader",
    "Received",
    "build_server",
    "read_envelope",
    "serve_stdio",
]

logger = logging.getLogger("regdev")

#: Bytes a line may hold beyond the gate's byte cap: the JSON-RPC envelope around a
#: ``tools/call``'s params, and requests other than ``tools/call`` (1 MiB).
ENVELOPE_BYTES = 1024 * 1024

#: The JSON-RPC error code of a ``tools/call`` that a stop signal kept from running (in the
#: band -32000..-32019 that MCP leaves to implementations; the SDK uses -32000 and -32001).
SERVER_STOPPING = -32010

#: Its message: the call did not reach the gate, the device or the audit log.
SERVER_STOPPING_MESSAGE = ("Server stopping: the server was told to stop before this call "
                           "ran; it did not reach the device and is not in the audit log")

# The top-level members of a message that the strict parser accepted, each as its exact text.
_decode_members = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


@dataclass(frozen=True, slots=True)
class Received:
    """What the transport read for one ``tools/call``: the text the gate runs.

    Attributes:
        text: the request's ``params`` exactly as received (UTF-8 bytes), or, for a line that
            is not strict JSON (or is over the line cap), the line itself (or its first
            ``max_line_bytes`` bytes), which the gate refuses at the parse stage.
    """

    text: bytes


# --- reading a line that is not strict JSON, leniently ----------------------------------------

class Envelope(NamedTuple):
    """What a lenient reading of a message's top level found.

    Attributes:
        has_id: the message has an ``id`` member (so it is not a notification).
        id: the request id when exactly one ``id`` member holds a strict JSON string or
            integer, else None.
        method: the method when exactly one ``method`` member holds a strict JSON string,
            else None.
        names_a_call: the top level has a ``name`` or an ``arguments`` member (a stand-in
            for the gate would then not be sure to be refused, see :class:`MessageReader`).
        meta: the ``params`` object's ``_meta`` when it is one strict JSON object (in the
            2026-07-28 protocol era every request carries its envelope there), else None.
    """

    has_id: bool
    id: int | str | None
    method: str | None
    names_a_call: bool
    meta: dict[str, Any] | None = None


def _request_id(value: object) -> int | str | None:
    """``value`` when it is an MCP request id (a string or an integer: never null, unlike
    plain JSON-RPC), else None."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def read_envelope(text: bytes) -> Envelope:
    """Read a message's ``id`` and ``method`` leniently, for a line the strict parser refused.

    The top level is scanned flat (strings and brackets matched by regular expressions, no
    recursion: :func:`regdev.core._json.lenient_members`), so a repeated key, a NaN or an
    over-long integer inside ``params``, bytes that are not JSON before or inside a value (a
    no-break space, a BOM: they stay inside the value), or text cut short after the ``id``,
    still lets the request be answered under its own id, and an ``id`` inside ``params`` is
    never taken for it. The ``id`` and ``method`` values themselves must be strict JSON.
    Never raises.

    Args:
        text: the line as read (UTF-8 bytes, possibly invalid or cut short).

    Returns:
        The :class:`Envelope`.
    """
    members = lenient_members(text)
    ids = members.get("id", [])
    request_id = _request_id(strict_value(ids[0])) if len(ids) == 1 else None
    methods = members.get("method", [])
    method = strict_value(methods[0]) if len(methods) == 1 else None
    params = members.get("params", [])
    metas = lenient_members(params[0]).get("_meta", []) if len(params) == 1 else []
    meta = strict_value(metas[0]) if len(metas) == 1 else None
    return Envelope(
        has_id=bool(ids),
        id=request_id,
        method=method if type(method) is str else None,
        names_a_call="name" in members or "arguments" in members,
        meta=meta if type(meta) is dict else None,
    )


# --- the reader: bytes from the client -> messages for the SDK, or answers --------------------


def _error(request_id: int | str | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id,
                              error=types.ErrorData(code=code, message=message))


#: What the reader makes of one line: a message for the SDK (with its metadata), or an
#: answer for the client.
Verdict = SessionMessage | types.JSONRPCError


class MessageReader:
    """Turn the bytes a client writes into MCP messages (sans-IO: bytes in, verdicts out).

    Lines end with ``\\n``. Each line is judged on its own (see the module docstring): a
    :class:`~mcp.shared.message.SessionMessage` is for the SDK's server, a
    ``JSONRPCError`` is the answer to send the client; a blank line, a response the SDK
    cannot read, or a notification that cannot be read gives nothing (the latter two are
    logged).

    Args:
        max_line_bytes: the longest line read, in bytes; a longer one is judged on its first
            ``max_line_bytes`` bytes (refused: ``too-large`` for a ``tools/call``) and the
            rest of it is dropped unread, so memory stays bounded.
    """

    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self._pending = bytearray()
        self._skipping = False  # dropping the rest of an over-long line

    def feed(self, data: bytes) -> list[Verdict]:
        """Judge every line that ``data`` completes; keep the rest for the next call."""
        verdicts: list[Verdict] = []
        start, cap = 0, self.max_line_bytes
        while (end := data.find(b"\n", start)) >= 0:
            if self._skipping:
                self._skipping = False
            else:
                self._pending += data[start:end]
                self._judge_into(verdicts, bytes(self._pending[: cap + 1]))
            self._pending.clear()
            start = end + 1
        if not self._skipping:
            self._pending += data[start:]
            if len(self._pending) > cap:
                self._judge_into(verdicts, bytes(self._pending[: cap + 1]))
                self._pending.clear()
                self._skipping = True
        return verdicts

    def close(self) -> list[Verdict]:
        """Judge the last line when the input did not end with a newline (end of file)."""
        verdicts: list[Verdict] = []
        if self._pending and not self._skipping:
            self._judge_into(verdicts, bytes(self._pending))
        self._pending.clear()
        return verdicts

    def _judge_into(self, verdicts: list[Verdict], line: bytes) -> None:
        try:
            verdict = self.judge(line)
        except Exception:  # a bug here costs this line an answer, never the server
            logger.exception("regdev: failed to read a message")
            verdict = _error(None, types.INTERNAL_ERROR, "Internal error: the server failed "
                                                         "to read this message")
        if verdict is not None:
            verdicts.append(verdict)

    def judge(self, line: bytes) -> Verdict | None:
        """Judge one line (without its newline); over ``max_line_bytes`` when cut there."""
        if not line.strip():
            return None
        if len(line) > self.max_line_bytes:
            line = line[: self.max_line_bytes]
            reason = f"the message is over the cap of {self.max_line_bytes} bytes"
            code = types.INVALID_REQUEST
        else:
            try:
                parsed = parse(line, max_bytes=self.max_line_bytes)
            except Exception:  # a defect in the parser: the line is refused, never run
                logger.exception("regdev: the parser failed on a message")
                parsed = refuse("not-json", "the message could not be decoded")
            if not isinstance(parsed, Refusal):
                return self._message(parsed.call, line)
            reason, code = parsed.message, types.PARSE_ERROR
        return self._refused(line, reason, code)

    def _message(self, doc: object, line: bytes) -> Verdict | None:
        """A strict JSON document: the SDK's message, or the -32600 answer."""
        if type(doc) is not dict:
            return _error(None, types.INVALID_REQUEST,
                          "Invalid Request: a message is one JSON-RPC object")
        response = "method" not in doc and ("result" in doc or "error" in doc)
        if "id" in doc and _request_id(doc["id"]) is None and not response:
            return _error(None, types.INVALID_REQUEST,
                          "Invalid Request: an id is a string or an integer")
        try:
            message = types.jsonrpc_message_adapter.validate_python(doc, by_name=False)
        except ValidationError:
            if response or ("id" not in doc and "method" in doc):  # never answered
                logger.warning("regdev: dropped a %s that is not JSON-RPC 2.0",
                               "response" if response else "notification")
                return None
            return _error(doc.get("id"), types.INVALID_REQUEST,
                          "Invalid Request: not a JSON-RPC 2.0 request, notification or response")
        if isinstance(message, types.JSONRPCRequest) and message.method == "tools/call":
            params = _decode_members(line).get("params")
            text = bytes(params) if params is not None else b""
            return SessionMessage(message, ServerMessageMetadata(request_context=Received(text)))
        return SessionMessage(message)

    def _refused(self, line: bytes, reason: str, code: int) -> Verdict | None:
        """A line the strict parser refused (or over the cap): answer it under its id."""
        envelope = read_envelope(line)
        if envelope.id is None:
            if not envelope.has_id and envelope.method is not None:
                logger.warning("regdev: dropped a notification: %s", reason)
                return None
            return _error(None, code, _protocol_message(code, reason))
        if envelope.method == "tools/call" and not envelope.names_a_call:
            # A stand-in request under the same id: the handler has the gate refuse the line
            # (no top-level name or arguments, so the gate cannot run anything from it), and
            # the answer takes the SDK's path like any other call. The SDK sees a tool name
            # of "" only for its envelope check, and the request's _meta when it is readable.
            stand_in: dict[str, Any] = {"name": ""}
            if envelope.meta is not None:  # the protocol envelope of the 2026-07-28 era
                stand_in["_meta"] = envelope.meta
            request = types.JSONRPCRequest(jsonrpc="2.0", id=envelope.id, method="tools/call",
                                           params=stand_in)
            return SessionMessage(request, ServerMessageMetadata(request_context=Received(line)))
        return _error(envelope.id, code, _protocol_message(code, reason))


def _protocol_message(code: int, reason: str) -> str:
    kind = "Parse error" if code == types.PARSE_ERROR else "Invalid Request"
    return f"{kind}: {reason}"


# --- the server -------------------------------------------------------------------------------

_INSTRUCTIONS = (
    "regdev offers a register device to you as tools. Every call is validated before it "
    "reaches the device; a refused call comes back with isError and a JSON observation "
    "naming one stage, one code and a message saying what is allowed: fix that and call "
    "again."
)


def incoming_of(ctx: Any, params: Any, transport: str,
                headers: Mapping[str, str] | None = None) -> _telemetry.Incoming | None:
    """What a ``tools/call``'s span is told of its request (:class:`regdev.core._telemetry.
    Incoming`): the trace context of ``params._meta`` (SEP-414), else of the HTTP
    ``headers``; the JSON-RPC id; the MCP session id and protocol version the headers give.
    None when telemetry is off (nothing is read then). Never raises.

    Args:
        ctx: the SDK's request context.
        params: the request's ``CallToolRequestParams``.
        transport: ``pipe`` (stdio) or ``tcp`` (HTTP).
        headers: the HTTP request's headers by lowercase name, or None.
    """
    if _telemetry.current is None:
        return None
    meta = getattr(params, "meta", None)
    request_id = getattr(ctx, "request_id", None)
    headers = headers or {}
    return _telemetry.Incoming(
        carrier=_telemetry.carrier_of(meta, headers),
        request_id=None if request_id is None else str(request_id),
        session_id=headers.get("mcp-session-id"),
        transport=transport,
        protocol_version=getattr(ctx, "protocol_version", None)
        or headers.get("mcp-protocol-version"))


def client_name(ctx: Any, proposer: str | None = None) -> str:
    """Who proposes a ``tools/call``, for the audit log: ``proposer`` when the server was
    given one (``regdev serve --proposer LABEL``: an MCP client does not say which model
    proposes); else ``mcp:NAME VERSION`` from the client's ``clientInfo`` at ``initialize``,
    or ``mcp`` when it gave none (the stateless 2026-07-28 protocol has no ``initialize``).
    The text is the client's: it is stored as sent and escaped wherever it is shown."""
    if proposer is not None:
        return proposer
    params = getattr(getattr(ctx, "session", None), "client_params", None)
    info = getattr(params, "clientInfo", None) or getattr(params, "client_info", None)
    name, version = getattr(info, "name", None), getattr(info, "version", None)
    if not isinstance(name, str) or not name:
        return "mcp"
    return f"mcp:{name} {version}" if isinstance(version, str) and version else f"mcp:{name}"


def build_server(gate: Gate, session: Session | None = None, *,
                 stopping: threading.Event | None = None,
                 proposer: str | None = None) -> Server[Any]:
    """An MCP server (low-level SDK ``Server``) offering ``gate.tools``, calls through ``gate``.

    ``tools/list`` lists the tools the session is offered. Each ``tools/call`` runs
    ``gate.handle(text, dialect="mcp")`` on the text its transport received (see
    :class:`Received`); on a transport that attaches none (any other SDK transport), on the
    request's params as the SDK decoded them, encoded again (a number with a fraction is
    then already a float64).

    Args:
        gate: the gate every ``tools/call`` goes through; its device is used one call at a time.
        session: the session every call is made in, and whose tools are listed; the gate's
            default when None.
        stopping: once set, a ``tools/call`` that has not started is answered with JSON-RPC
            error :data:`SERVER_STOPPING` and does not run (it is checked when the call's turn
            on the device comes, so a call either runs whole or not at all).
        proposer: the proposer recorded for every call (:func:`client_name`); None: the
            client's name.

    Returns:
        The server, ready for ``server.run(read_stream, write_stream, options)``.
    """
    listing = types.ListToolsResult(tools=[
        types.Tool.model_validate(d)
        for d in tool_definitions("mcp", gate.tools, session=session)
    ])
    one_at_a_time = anyio.CapacityLimiter(1)

    def run_call(text: bytes, proposer: str,
                 incoming: _telemetry.Incoming | None) -> Observation | None:
        """The call's observation, or None when the server is stopping and it did not run."""
        if stopping is not None and stopping.is_set():
            return None
        return gate.handle(text, dialect="mcp", session=session, proposer=proposer,
                           incoming=incoming)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listing

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        received = ctx.request
        if isinstance(received, Received):
            text = received.text
        else:
            try:
                text = msgspec.json.encode(ctx.params)
            except (TypeError, ValueError):
                text = b""  # not JSON data: the gate refuses it as not-json
        # an approval question about a protected write is asked through this request
        asking = Asking(ctx, session.caller if session is not None else None,
                        params.input_responses, params.request_state)
        reset = ASKING.set(asking)
        try:
            observation = await anyio.to_thread.run_sync(
                partial(run_call, text, client_name(ctx, proposer),
                        incoming_of(ctx, params, "pipe")),
                limiter=one_at_a_time)
        finally:
            ASKING.reset(reset)
        if observation is None:
            raise MCPError(SERVER_STOPPING, SERVER_STOPPING_MESSAGE)
        logger.debug("tools/call %s: %s", observation.tool or params.name or "?",
                     "ok" if observation.ok else observation.code)
        if asking.ask_back is not None:  # 2026-07-28: the question, answered in a new call
            return asking.ask_back
        return types.CallToolResult.model_validate(mcp_result(observation))

    server: Server[Any] = Server(
        "regdev",
        version=__version__,
        instructions=_INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    gate_spans_tool_calls(server)
    server.middleware.append(_explain_the_sdk)
    return server


class _OtherMethods:
    """The SDK's span middleware for every method but ``tools/call`` (the gate's span)."""

    def __init__(self, inner: Callable[..., Any]) -> None:
        self.inner = inner

    async def __call__(self, ctx: ServerRequestContext[Any, Any],
                       call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call":
            return await call_next(ctx)
        return cast("HandlerResult", await self.inner(ctx, call_next))


def gate_spans_tool_calls(server: Server[Any]) -> None:
    """Leave the SDK's own span out of ``tools/call`` requests: the gate makes that one
    (see the module docstring). The SDK's middleware is found by its class name
    (``OpenTelemetryMiddleware``, provisional in the SDK's 2.x); an SDK without it is left as
    it is."""
    server.middleware[:] = [_OtherMethods(each) if type(each).__name__ ==
                            "OpenTelemetryMiddleware" else each for each in server.middleware]


#: What a request sent before the handshake is told (the SDK says only "Invalid request
#: parameters", the error it has always given there).
NOT_INITIALIZED = ("Invalid request parameters: the session is not initialized; send "
                   "`initialize` and then the `notifications/initialized` notification first "
                   "(or open with `server/discover`, the 2026-07-28 protocol)")


def _call_params_problem(params: object) -> str:
    """What is wrong with the params of a ``tools/call`` the SDK's envelope check refused."""
    if type(params) is not dict or type(params.get("name")) is not str:
        return "tools/call needs params with name and arguments (an object)"
    arguments = params.get("arguments")
    if arguments is None or type(arguments) is dict:  # the rest of the envelope (`_meta`)
        return "tools/call params do not match the MCP CallToolRequest schema"
    got = a_json_type(arguments)
    hint = " (a string holding JSON is still a string)" if got == "a string" else ""
    return f"tools/call arguments must be an object, got {got}{hint}"


async def _explain_the_sdk(ctx: ServerRequestContext[Any, Any],
                           call_next: CallNext) -> HandlerResult:
    """Server middleware: the SDK's -32602 "Invalid request parameters" says why.

    The SDK answers a request before ``initialize`` with it, as an ``MCPError`` raised before
    the params are validated; a params validation failure reaches middleware as a pydantic
    ``ValidationError``, which the SDK answers the same way, with empty data. Both keep the
    code -32602 and the SDK's message, with the cause after it.
    """
    try:
        return await call_next(ctx)
    except ValidationError:
        if ctx.method != "tools/call":
            raise
        raise MCPError(types.INVALID_PARAMS, "Invalid request parameters: "
                       + _call_params_problem(ctx.params), "") from None
    except MCPError as error:
        data = error.error
        if (data.code, data.message, data.data) == (
                types.INVALID_PARAMS, "Invalid request parameters", "") and \
                ctx.method != "initialize":
            raise MCPError(types.INVALID_PARAMS, NOT_INITIALIZED, "") from None
        raise


class _NoInput:
    """``stdio_server``'s stdin: no line at all, until the server is done (the reader reads)."""

    def __init__(self, done: anyio.Event) -> None:
        self._done = done

    def __aiter__(self) -> _NoInput:
        return self

    async def __anext__(self) -> str:
        await self._done.wait()
        raise StopAsyncIteration


class _Transport:
    """The event loop's side of the stdio transport: routes the reader's verdicts, and keeps
    count of the requests handed to the SDK that have no answer yet, so that end of file
    waits for their answers (a client that writes its requests and closes stdin, as
    ``printf ... | regdev serve`` does, still gets every answer). A request the client
    cancels (``notifications/cancelled``) is not waited for: it gets no answer.

    Args:
        to_server: the SDK server's read stream, sending side.
        to_client: the stdio transport's write stream (the SDK serializes what it is sent).
        on_end: called at end of file or on a stop, before waiting for the answers due
            (``regdev serve``: deny the open approval questions, whose answers can no longer
            come).
    """

    def __init__(self, to_server: MemoryObjectSendStream[SessionMessage | Exception],
                 to_client: Any, on_end: Callable[[], None] | None = None) -> None:
        self._to_server = to_server
        self._to_client = to_client
        self._on_end = on_end
        self._unanswered: Counter[int | str] = Counter()
        self._answered = anyio.Event()
        self._answered.set()
        self._stopped = False

    async def deliver(self, verdict: Verdict) -> None:
        """Hand a message to the SDK, or an answer to the client (nothing once stopped)."""
        if self._stopped:
            return
        if not isinstance(verdict, SessionMessage):
            await self._to_client.send(SessionMessage(verdict))
            return
        message = verdict.message
        if isinstance(message, types.JSONRPCRequest):
            if not self._unanswered:
                self._answered = anyio.Event()
            self._unanswered[message.id] += 1
        elif isinstance(message, types.JSONRPCNotification) and (
                message.method == "notifications/cancelled"):
            self._settle((message.params or {}).get("requestId"))
        await self._to_server.send(verdict)

    async def end(self) -> None:
        """End of file: wait for the answers still due, then end the SDK's input."""
        if self._on_end is not None:
            self._on_end()
        await self._answered.wait()
        self._to_server.close()

    async def stop(self) -> None:
        """A stop signal: read nothing more, then end as at end of file."""
        self._stopped = True
        await self.end()

    def _settle(self, request_id: object) -> None:
        key = _request_id(request_id)
        if key is not None and key in self._unanswered:
            self._unanswered[key] -= 1
            if self._unanswered[key] == 0:
                del self._unanswered[key]
            if not self._unanswered:
                self._answered.set()

    # the write stream handed to the SDK's server: every answer passes here

    async def send(self, item: SessionMessage) -> None:
        await self._to_client.send(item)
        if isinstance(item.message, types.JSONRPCResponse | types.JSONRPCError):
            self._settle(item.message.id)

    async def aclose(self) -> None:
        await self._to_client.aclose()

    async def __aenter__(self) -> _Transport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _pump(fd: int, reader: MessageReader, transport: _Transport,
          token: anyio.lowlevel.EventLoopToken, stopped: threading.Event) -> None:
    """Read ``fd`` until end of file in this thread; hand each verdict to the event loop.

    Once ``stopped`` is set (a stop signal, or the server has ended), nothing more is handed
    over: the event loop may be closing, and work handed to it then would never run.

    A daemon thread does the blocking reads with ``os.read``, so a signal ends the server at
    once instead of waiting for the client's next line, and no Python lock is held at exit.
    Nothing escapes this thread: the fd failing or the event loop ending (or cancelling
    what the thread handed it) ends the reading quietly, and anything else is logged in one
    line (with its traceback only at ``--log-level debug``).
    """
    def hand_over(verdicts: list[Verdict]) -> bool:
        for verdict in verdicts:
            if stopped.is_set():
                return False
            anyio.from_thread.run(transport.deliver, verdict, token=token)
        return not stopped.is_set()

    try:
        while chunk := os.read(fd, 65536):
            if not hand_over(reader.feed(chunk)):
                return
        hand_over(reader.close())
    except _LOOP_GONE:
        pass  # the fd failed, or the loop has ended: nobody is left to read
    except Exception as error:  # a defect: the server goes on answering what it has read
        logger.error("regdev: stopped reading stdin after an internal error (%s)",
                     type(error).__name__, exc_info=logger.isEnabledFor(logging.DEBUG))
    finally:
        if not stopped.is_set():
            with contextlib.suppress(*_LOOP_GONE):
                anyio.from_thread.run(transport.end, token=token)


#: What the stdin thread meets when the fd fails or the event loop has ended, or cancelled
#: the work the thread handed it (a stop): no one is left to read for.
_LOOP_GONE = (OSError, RuntimeError, concurrent.futures.CancelledError,
              anyio.BrokenResourceError, anyio.ClosedResourceError)


async def _stop_on_signals(stop: anyio.Event, stop_signals: Collection[signal.Signals], *,
                           task_status: anyio.abc.TaskStatus[None]) -> None:
    """The first stop signal sets ``stop`` (the server answers what ran, then ends); later
    ones are ignored, so that nothing cuts the answers or the audit log's commit short."""
    # A signal ignored when the process started stays ignored (nohup's SIGHUP, SIGINT in a
    # shell's background job), as POSIX programs do.
    wanted = [number for number in stop_signals if signal.getsignal(number) != signal.SIG_IGN]
    if not wanted:
        task_status.started()
        return
    with contextlib.ExitStack() as stack:
        try:
            signals = stack.enter_context(anyio.open_signal_receiver(*wanted))
        except (NotImplementedError, RuntimeError):  # Windows, or not the main thread: no
            task_status.started()  # handlers (Ctrl-C still raises KeyboardInterrupt there)
            return
        task_status.started()
        async for number in signals:
            if not stop.is_set():
                logger.info("stopping on %s", signal.Signals(number).name)
                stop.set()


def serve_stdio(gate: Gate, session: Session | None = None, *,
                stop_signals: Collection[signal.Signals] = (),
                approvals: Approvals | None = None, proposer: str | None = None) -> None:
    """Serve ``gate`` over MCP on this process's stdin and stdout until stdin ends.

    Blocks. Returns when the client closes stdin (end of file) and every request read is
    answered, or on one of ``stop_signals`` that is not ignored: then nothing more is read,
    the call running on the device finishes, the calls that ran are answered, a
    ``tools/call`` not yet started is answered with :data:`SERVER_STOPPING` without running,
    and it returns once those answers are written (later stop signals are ignored). The
    caller then closes the gate, which commits the audit log. Where the event loop
    cannot handle signals (Windows, or not the main thread), they are not caught here, and
    Ctrl-C raises ``KeyboardInterrupt`` to the caller instead.

    Args:
        gate: the gate (and device) to serve; a line may be up to ``gate.max_input_bytes +``
            :data:`ENVELOPE_BYTES` bytes long.
        session: the session of the client's calls; the gate's default when None.
        stop_signals: signal numbers that end the server as end of file does (``regdev
            serve`` passes SIGINT, SIGTERM and SIGHUP); a signal ignored when the process
            started stays ignored.
        approvals: the gate's approval hook, if it has one: at end of file or on a stop
            signal, every approval question still open (and any asked later) is denied at
            once (``approval-denied``, "the server is stopping"), so that a call waiting for
            a person's answer is answered and recorded without waiting out the timeout.

    Raises:
        OSError: an answer could not be written to stdout (a full disk: ENOSPC; the client
            gone: EPIPE); the server has stopped, and the calls that ran are in the gate's
            audit log once the caller closes the gate.
    """
    stopping = threading.Event()  # the handlers' view of a stop: start no more calls
    server = build_server(gate, session, stopping=stopping, proposer=proposer)
    reader = MessageReader(gate.max_input_bytes + ENVELOPE_BYTES)

    async def serve(stop: anyio.Event) -> None:
        done = anyio.Event()
        stdin = cast("anyio.AsyncFile[str]", _NoInput(done))
        async with stdio_server(stdin=stdin) as (_, to_client):
            to_server, from_client = anyio.create_memory_object_stream[
                SessionMessage | Exception](0)
            transport = _Transport(to_server, to_client,
                                   approvals.stop if approvals is not None else None)
            token = anyio.lowlevel.current_token()
            threading.Thread(target=_pump, args=(0, reader, transport, token, stopping),
                             name="regdev stdin", daemon=True).start()

            async def drain_on_stop() -> None:
                await stop.wait()
                stopping.set()
                await transport.stop()

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(drain_on_stop)
                try:
                    await server.run(from_client, transport,
                                     server.create_initialization_options())
                finally:
                    stopping.set()  # the stdin thread hands nothing more to this loop
                    done.set()
                    tasks.cancel_scope.cancel()

    async def run() -> None:
        stop = anyio.Event()
        async with anyio.create_task_group() as group:
            await group.start(_stop_on_signals, stop, stop_signals)
            await serve(stop)
            group.cancel_scope.cancel()

    try:
        anyio.run(run)
    except BaseExceptionGroup as group:  # the SDK's stdout writer failed (ENOSPC, EPIPE)
        failed = _output_failure(group)
        if failed is None:
            raise
        stopping.set()  # the stdin thread hands nothing more over
        raise failed from None


def _output_failure(group: BaseExceptionGroup[BaseException]) -> OSError | None:
    """The OSError that ended the server: the only thing in the event loop that raises one is
    the SDK's write of an answer to stdout (a full disk, a reader gone). None if none did."""
    matched, _ = group.split(OSError)
    while matched is not None:
        first = matched.exceptions[0]
        if isinstance(first, OSError):
            return first
        matched = first if isinstance(first, BaseExceptionGroup) else None
    return None
