"""The MCP server over Streamable HTTP: ``regdev serve --http``, with bearer tokens.

Rules of this file:

* Every request to ``/mcp`` passes :class:`McpFront` before the SDK sees it, in this order,
  and the first check that fails answers it: the ``Host`` header (DNS rebinding, 421), the
  ``Origin`` header (403), the bearer token (401 with ``WWW-Authenticate: Bearer ...
  resource_metadata=...``; a token whose scopes choose no session, 403), the method, then for
  a POST its ``Content-Type`` (``application/json``, UTF-8: 415 otherwise), then the body: its
  declared size against the cap before any of it is read (413), read in
  full within :data:`BODY_SECONDS` (408), and judged by the same strict reader as stdio
  (``_mcp.py``'s :class:`~regdev.server._mcp.MessageReader`): the same bytes get the same
  answer, and a ``tools/call`` the same verdict and audit record, over both transports. So
  nothing unauthenticated reaches the gate, and nothing the strict parser refuses reaches
  the SDK but as the stand-in that has the gate refuse it, as on stdio.
* What callers may hold is bounded (``_http_limits.py``): a request's headers arrive within
  seconds, connections that have presented no valid token have a budget of their own, and a
  request that opens an MCP session (``initialize``) is admitted only within the caller's and
  the server's session caps and the caller's ``initialize`` rate; the front counts a
  connection as authenticated once its token is found valid.
* The SDK's session manager serves what passes: stateful sessions (``Mcp-Session-Id``, bound
  to the token that opened them), or ``stateless`` (no session: any of several server
  processes behind a load balancer can take any request); a request in the 2026-07-28 era is
  stateless either way. Only bodies the strict reader accepted reach it, byte for byte.
* A token's scopes choose its session (``server/_access.py``); each caller gets its own live
  :class:`~regdev.Session` (its own rate-limit bucket), named in the audit log's ``caller``
  column. ``tools/list`` lists the tools of the caller's session.
* Calls run concurrently, each in a worker thread (the gate and the devices are
  thread-safe; a device takes one request at a time under its own lock). Nothing waits for
  a client while holding the device: a body is read whole before the gate sees it, an
  answer is written after the gate is done, and an approval question is asked without any
  lock held (``_approval.py``), with a deadline.
* Answers in regdev's words: a refusal before the SDK is a JSON-RPC error object (id null)
  with the HTTP status, or an OAuth error (RFC 6750) for 401 and 403; nothing here answers
  500 with a traceback (an unexpected failure is logged and answered -32603).
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import anyio.to_thread
import msgspec
import uvicorn
from mcp import types
from mcp.server import Server
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.inbound import MCP_NAME_HEADER, MCP_PROTOCOL_VERSION_HEADER, decode_header_value
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._version import __version__
from ..core import _telemetry
from ..core._errors import AuditError
from ..core._limits import seconds_problem
from ..core._observation import Observation, refuse
from ..core._text import escape_text
from ..gate._gate import Gate
from ..gate._policy import Session
from ..gate._providers import mcp_result, tool_definitions
from ._access import HttpAccess, Policy
from ._address import is_loopback
from ._approval import ASKING, Approvals, Asking
from ._auth import Caller, Identity, TokenCheck
from ._http_limits import (
    ConnectionCap,
    ConnectionGuard,
    HttpLimits,
    LimitRefusal,
    SessionLimits,
    authenticated,
    protocol_class,
)
from ._mcp import (
    _INSTRUCTIONS,
    ENVELOPE_BYTES,
    MessageReader,
    Received,
    _explain_the_sdk,
    client_name,
    gate_spans_tool_calls,
    incoming_of,
)

__all__ = [
    "BODY_SECONDS",
    "MAX_CALLER_SESSIONS",
    "MCP_PATH",
    "CallerSessions",
    "HttpLimits",
    "HttpServer",
    "McpFront",
    "build_http_app",
    "build_http_server",
    "record_too_large",
    "serve_http",
]

logger = logging.getLogger("regdev")

#: Where the MCP endpoint is served.
MCP_PATH = "/mcp"
#: The prefix of a token scope that names a device of a fleet (``device:bench1``).
DEVICE_SCOPE = "device:"
#: Where the approval pages are served (``/approve/<question id>``).
APPROVE_PATH = "/approve/"
#: Seconds a client has to send a request's whole body once its headers are in; a slower
#: client gets 408 and its connection is closed.
BODY_SECONDS = 10.0
#: The most callers' sessions ``regdev serve --http`` keeps (:class:`CallerSessions`, least
#: recently used dropped first): about 1 KB each.
MAX_CALLER_SESSIONS = 4096
#: Most bytes of an approval page's form (a token and a decision).
PAGE_FORM_BYTES = 32 * 1024
#: Calls running at once beyond the approval questions that may be open (worker threads).
WORKERS = 16
#: The scope keys the front leaves for the handlers.
CALLER_KEY = "regdev.caller"
RECEIVED_KEY = "regdev.received"
#: The scope key of an ``anyio.Event`` set once a POST's HTTP exchange is over (its answer
#: sent, or its client gone): a call still running then has nobody to answer.
ENDED_KEY = "regdev.ended"

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# --- answers made before the SDK ------------------------------------------------------------


def _json_rpc_error(status: int, code: int, message: str, *,
                    headers: dict[str, str] | None = None) -> Response:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return Response(json.dumps(body), status_code=status, media_type="application/json",
                    headers=headers)


def _oauth_error(status: int, error: str | None, description: str,
                 challenge: str) -> Response:
    body = {"error": error or "invalid_token", "error_description": description}
    return Response(json.dumps(body), status_code=status, media_type="application/json",
                    headers={"WWW-Authenticate": challenge})


class _Refused(Exception):
    """A request refused before the SDK: the response says why."""

    def __init__(self, response: Response) -> None:
        self.response = response


@dataclass(frozen=True)
class Guard:
    """The ``Host`` and ``Origin`` checks (MCP Streamable HTTP: servers must validate
    ``Origin``, against DNS rebinding).

    Attributes:
        hosts: the ``Host`` values accepted (``host:port``, lowercase); empty accepts any.
        origins: the ``Origin`` values accepted besides the request's own (``scheme://host
            [:port]``, lowercase).
    """

    hosts: frozenset[str]
    origins: frozenset[str]

    @classmethod
    def for_server(cls, access: HttpAccess, host: str, port: int) -> Guard:
        hosts = {value.lower() for value in access.allowed_hosts}
        if is_loopback(host):  # a DNS-rebinding page would send its own name as Host
            hosts.update(f"{name}:{port}" for name in _LOOPBACK_NAMES)
        return cls(frozenset(hosts), frozenset(o.lower() for o in access.allowed_origins))

    def check(self, scope: Scope) -> Response | None:
        """None when the request may go on, else the refusal."""
        for name in (b"host", b"origin"):
            if len(_one_header(scope, name)) > 1:
                return _json_rpc_error(400, types.INVALID_REQUEST,
                                       f"the {name.decode().title()} header is given twice")
        headers = _headers(scope)
        host = headers.get("host")
        if self.hosts and (host is None or host.lower() not in self.hosts):
            return _json_rpc_error(421, types.INVALID_REQUEST,
                                   f"this server does not answer for the host "
                                   f"{_shown(host)}")
        origin = headers.get("origin")
        if origin is None:
            return None  # not a browser's request (or a same-origin GET)
        lowered = origin.lower()
        own = self.hosts and host is not None and lowered in (f"http://{host.lower()}",
                                                              f"https://{host.lower()}")
        if lowered in self.origins or own:
            return None
        logger.warning("refused a request from the origin %s", _shown(origin))
        return _json_rpc_error(403, types.INVALID_REQUEST,
                               f"requests from the origin {_shown(origin)} are not allowed "
                               "(the policy's http.allowed_origins)")


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lowercase name (the last one of a name sent twice)."""
    return {name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", ())}


def _one_header(scope: Scope, name: bytes) -> list[str]:
    """Every value of header ``name`` (lowercase), in order."""
    return [value.decode("latin-1") for key, value in scope.get("headers", ())
            if key.lower() == name]


#: ``Content-Type`` values taken without the MIME parser (which gives them the same verdict).
_PLAIN_JSON = frozenset({"application/json", "application/json; charset=utf-8",
                         "application/json;charset=utf-8"})


def _media_type_problem(scope: Scope) -> Response | None:
    """None when a POST's ``Content-Type`` is ``application/json`` (any case, other parameters
    ignored) with no ``charset`` or ``charset=utf-8`` (RFC 8259 section 8.1: JSON between
    systems is UTF-8); else the refusal: ``415`` for no media type, another one, more than
    one, one that cannot be parsed, or another charset; ``400`` for the header given twice.
    Parsed by the standard library's MIME header parser (``email.headerregistry``); the
    front then hands the SDK ``application/json`` as such (its own check is case-sensitive)."""
    values = _one_header(scope, b"content-type")
    if len(values) == 1 and values[0].lower() in _PLAIN_JSON:  # what clients send, read as is
        return None
    if len(values) > 1:
        return _json_rpc_error(400, types.INVALID_REQUEST,
                               "Invalid Request: the Content-Type header is given twice")
    wanted = "send the body as `Content-Type: application/json` (UTF-8)"
    if not values or not values[0].strip():
        return _json_rpc_error(415, types.INVALID_REQUEST,
                               f"Unsupported Media Type: the request has no Content-Type; "
                               f"{wanted}")
    parsed = EmailMessage()
    parsed["content-type"] = values[0]
    header = parsed["content-type"]
    if header.defects or header.content_type != "application/json":
        return _json_rpc_error(415, types.INVALID_REQUEST,
                               f"Unsupported Media Type: Content-Type {_shown(values[0])} is "
                               f"not JSON; {wanted}")
    charset = header.params.get("charset")
    if charset is not None and charset.lower() != "utf-8":
        return _json_rpc_error(415, types.INVALID_REQUEST,
                               f"Unsupported Media Type: the charset {_shown(charset)} is not "
                               f"served; JSON is read as UTF-8 only; {wanted}")
    return None


def _shown(text: str | None) -> str:
    """A header's value inside a message: escaped once, in backticks (a backtick in it is
    escaped too, so the quote cannot end early)."""
    if text is None:
        return "(none)"
    return f"`{escape_text(text, 80)}`"


# --- the front of /mcp ------------------------------------------------------------------------


class McpFront:
    """The ASGI app of ``/mcp``: the checks of the module docstring, then the SDK.

    Args:
        inner: the SDK's Streamable HTTP app.
        tokens: the bearer tokens accepted.
        guard: the Host and Origin checks.
        metadata_url: the protected-resource metadata's URL (RFC 9728), for
            ``WWW-Authenticate``.
        max_body_bytes: the body cap (the stdio line cap: the gate's byte cap + 1 MiB).
        body_seconds: seconds a client has to send a body.
        too_large: called (in a worker thread) with the caller, the body's first
            ``max_body_bytes`` bytes (None when the declared ``Content-Length`` was refused
            before any was read) and the declared
            size (None without one) when a body over the cap is refused 413: it records the
            refusal in the audit log (:func:`build_http_app`).
        sessions: the session limits a request that opens a session must pass; None when
            the SDK keeps no sessions (``stateless``).
    """

    def __init__(self, inner: ASGIApp, *, tokens: TokenCheck, guard: Guard,
                 metadata_url: str, max_body_bytes: int,
                 body_seconds: float = BODY_SECONDS,
                 too_large: Callable[[Caller, bytes | None, int | None], None] | None = None,
                 sessions: SessionLimits | None = None, device: str | None = None,
                 device_session: str | None = None) -> None:
        self.device = device
        self.device_session = device_session
        self.too_large = too_large
        self.sessions = sessions
        self.inner = AuthContextMiddleware(inner)
        self.tokens = tokens
        self.guard = guard
        self.metadata_url = metadata_url
        self.max_body_bytes = max_body_bytes
        self.body_seconds = body_seconds
        self.reader = MessageReader(max_body_bytes)
        self._scopes = " ".join(tokens.access.scopes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._serve(scope, receive, tracked)
        except _Refused as refused:
            if not started:
                await refused.response(scope, receive, send)
        except Exception:  # a defect here: logged, answered without a traceback
            logger.exception("regdev: failed to serve an HTTP request")
            if not started:
                await _json_rpc_error(500, types.INTERNAL_ERROR, "Internal error: the server "
                                      "failed to handle this request")(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = self.guard.check(scope)
        if refused is not None:
            raise _Refused(refused)
        caller = await self._authenticate(scope)
        scope[CALLER_KEY] = caller
        method = scope.get("method", "")
        if method in ("GET", "DELETE"):
            await self.inner(scope, receive, send)
            return
        if method != "POST":
            raise _Refused(_json_rpc_error(405, types.INVALID_REQUEST,
                                           f"{method} is not served here: POST a JSON-RPC "
                                           "message (GET opens a stream, DELETE ends a session)",
                                           headers={"Allow": "GET, POST, DELETE"}))
        refused = _media_type_problem(scope)
        if refused is not None:
            raise _Refused(refused)
        scope["headers"] = [(name, b"application/json" if name.lower() == b"content-type"
                             else value) for name, value in scope.get("headers", ())]
        body = await self._read_body(scope, receive)
        forwarded, method = self._judge(scope, body)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": forwarded, "more_body": False}
            return await receive()

        ended = anyio.Event()
        if self._in_session(scope):  # elsewhere the SDK cancels a call whose POST is over
            scope[ENDED_KEY] = ended
        try:
            if method == "initialize" and self._opens_session(scope):
                await self._open_session(scope, caller, replay, send)
            else:
                await self.inner(scope, replay, send)
        finally:  # the answer was sent, or the client went away: none can be sent now
            ended.set()

    def _in_session(self, scope: Scope) -> bool:
        """Whether the SDK may serve this POST in a session's own task (which outlives the
        POST): it keeps sessions and the request is of the 2025 era (no
        ``MCP-Protocol-Version``, or one of the handshake versions, as the SDK routes it)."""
        if self.sessions is None:
            return False
        version = _headers(scope).get(MCP_PROTOCOL_VERSION_HEADER)
        return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS

    def _opens_session(self, scope: Scope) -> bool:
        """Whether the SDK would open a session for this POST: it keeps sessions, the request
        names none, and it is of the 2025 era (no ``MCP-Protocol-Version``, or one of the
        handshake versions: a later one is served without a session)."""
        headers = _headers(scope)
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        return (self.sessions is not None and "mcp-session-id" not in headers
                and (version is None or version in HANDSHAKE_PROTOCOL_VERSIONS))

    async def _open_session(self, scope: Scope, caller: Caller, receive: Receive,
                            send: Send) -> None:
        """Hand the SDK an ``initialize`` that opens a session, within the session limits
        (:class:`~regdev.server._http_limits.SessionLimits`), and count the session it
        opens for ``caller``."""
        assert self.sessions is not None
        try:
            self.sessions.admit(caller.identity, caller.name)
        except LimitRefusal as refusal:
            logger.warning("refused a new session for %s: %s", caller.name, refusal.limit)
            raise _Refused(Response(refusal.body(), status_code=refusal.status,
                                    media_type="application/json",
                                    headers=refusal.headers())) from None
        opened: list[str] = []

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                opened.extend(value.decode("latin-1") for name, value
                              in message.get("headers", ()) if name.lower() == b"mcp-session-id")
            await send(message)

        try:
            await self.inner(scope, receive, watched)
        finally:
            self.sessions.opened(caller.identity, opened[0] if opened else None)

    async def _authenticate(self, scope: Scope) -> Caller:
        values = _one_header(scope, b"authorization")
        challenge = f'Bearer resource_metadata="{self.metadata_url}", scope="{self._scopes}"'
        if not values:
            raise _Refused(_oauth_error(401, None, "this server needs a bearer token "
                                        "(Authorization: Bearer TOKEN)", challenge))
        scheme, _, token = values[0].partition(" ")
        access = None
        if len(values) == 1 and scheme.lower() == "bearer":
            access = await self.tokens.verify_token(token.strip())
        if access is None:
            raise _Refused(_oauth_error(
                401, "invalid_token", "the bearer token is not valid here (unknown, expired, "
                "or issued for another server)",
                f'Bearer error="invalid_token", resource_metadata="{self.metadata_url}"'))
        caller = self.tokens.caller(access)
        if caller.session is None:
            logger.warning("refused %s: its scopes choose no session", caller.name)
            raise _Refused(_oauth_error(
                403, "insufficient_scope", "the token holds none of the scopes this server "
                f"serves ({self._scopes})",
                f'Bearer error="insufficient_scope", scope="{self._scopes}", '
                f'resource_metadata="{self.metadata_url}"'))
        refusal = self._device_refusal(caller, access.scopes)
        if refusal is not None:
            logger.warning("refused %s on device %s: %s", caller.name, self.device, refusal)
            raise _Refused(_oauth_error(
                403, "insufficient_scope", refusal,
                f'Bearer error="insufficient_scope", resource_metadata="{self.metadata_url}"'))
        user = AuthenticatedUser(access)
        scope["user"], scope["auth"] = user, AuthCredentials(access.scopes)
        authenticated()  # this connection no longer counts against the unauthenticated budget
        return caller

    def _device_refusal(self, caller: Caller, scopes: Collection[str]) -> str | None:
        """Why ``caller`` may not reach this endpoint's device of a fleet, or None: a token
        whose scopes name devices (``device:NAME``) reaches those only; a device served to
        one policy session only (the fleet file's ``session``) to callers of that session."""
        if self.device is None:
            return None
        named = {scope.removeprefix(DEVICE_SCOPE) for scope in scopes
                 if scope.startswith(DEVICE_SCOPE)}
        if named and self.device not in named:
            return (f"the token's scopes name other devices than {self.device} "
                    f"({DEVICE_SCOPE}NAME)")
        if self.device_session is not None and caller.session != self.device_session:
            return (f"the device {self.device} is served to the session "
                    f"{self.device_session} only")
        return None

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        cap = self.max_body_bytes

        def too_large() -> Response:
            return _json_rpc_error(413, types.INVALID_REQUEST,
                                   f"Invalid Request: the body is over the cap of {cap} bytes")

        lengths = _one_header(scope, b"content-length")
        if lengths and _one_header(scope, b"transfer-encoding"):  # RFC 9112 6.3: may refuse
            raise _Refused(_json_rpc_error(400, types.INVALID_REQUEST,
                                           "Invalid Request: Content-Length and "
                                           "Transfer-Encoding together",
                                           headers={"Connection": "close"}))
        if len(lengths) > 1 or (lengths and not lengths[0].strip().isdigit()):
            raise _Refused(_json_rpc_error(400, types.INVALID_REQUEST,
                                           "Invalid Request: Content-Length is not one number"))
        if lengths and int(lengths[0]) > cap:
            await self._record_too_large(scope, None, int(lengths[0]))
            raise _Refused(too_large())
        body = bytearray()
        with anyio.move_on_after(self.body_seconds) as deadline:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise _Refused(Response(status_code=400))  # nobody reads it
                body += message.get("body", b"")
                if len(body) > cap:
                    declared = int(lengths[0]) if lengths else None
                    await self._record_too_large(scope, bytes(body[:cap]), declared)
                    raise _Refused(too_large())
                if not message.get("more_body", False):
                    break
        if deadline.cancelled_caught:
            raise _Refused(_json_rpc_error(408, types.INVALID_REQUEST,
                                           f"Invalid Request: the body did not arrive within "
                                           f"{self.body_seconds:g} s",
                                           headers={"Connection": "close"}))
        return bytes(body)

    async def _record_too_large(self, scope: Scope, body: bytes | None,
                                declared: int | None) -> None:
        """Have :attr:`too_large` record a body refused 413 (in a worker thread: a commit
        may wait for the disk)."""
        caller = scope.get(CALLER_KEY)
        if self.too_large is not None and isinstance(caller, Caller):
            await anyio.to_thread.run_sync(self.too_large, caller, body, declared)

    def _judge(self, scope: Scope, body: bytes) -> tuple[bytes, str | None]:
        """The strict reader's verdict on the body: the bytes the SDK gets and the request's
        method (None for a notification or a response), or a refusal."""
        if not body.strip():
            raise _Refused(_json_rpc_error(400, types.PARSE_ERROR,
                                           "Parse error: the body is empty; POST one JSON-RPC "
                                           "message"))
        verdict = self.reader.judge(body)
        if verdict is None:  # a notification or response that cannot be read
            raise _Refused(_json_rpc_error(400, types.INVALID_REQUEST,
                                           "Invalid Request: not a JSON-RPC 2.0 notification "
                                           "or response"))
        if not isinstance(verdict, SessionMessage):
            error = verdict.error
            payload = verdict.model_dump(mode="json", by_alias=True, exclude_none=True)
            payload["id"] = verdict.id
            logger.debug("refused a body before the SDK: %s", error.message)
            raise _Refused(Response(json.dumps(payload), status_code=400,
                                    media_type="application/json"))
        metadata = verdict.metadata
        method = verdict.message.method if isinstance(verdict.message, types.JSONRPCRequest) \
            else None
        received = metadata.request_context if isinstance(metadata, ServerMessageMetadata) \
            else None
        if not isinstance(received, Received):
            return body, method  # strict JSON: the SDK reads the very bytes the reader accepted
        scope[RECEIVED_KEY] = received
        if received.text != body:
            return body, method  # a tools/call the reader accepted: its params are in Received
        # The stand-in of a tools/call the strict parser refused (see _mcp.py): the SDK gets
        # it instead, under the request's id, and the handler has the gate refuse the body.
        message = verdict.message
        assert isinstance(message, types.JSONRPCRequest)
        params = dict(message.params or {})
        if _headers(scope).get(MCP_PROTOCOL_VERSION_HEADER) in MODERN_PROTOCOL_VERSIONS:
            name = _headers(scope).get(MCP_NAME_HEADER)  # 2026-07-28 checks it against the body
            decoded = decode_header_value(name) if name is not None else None
            params["name"] = decoded if isinstance(decoded, str) else ""
        message = message.model_copy(update={"params": params})
        return message.model_dump_json(by_alias=True, exclude_none=True).encode(), method


# --- the MCP server ---------------------------------------------------------------------------


class CallerSessions:
    """One live :class:`~regdev.Session` per caller and policy session (each with its own
    rate-limit bucket), and the tool list of each policy session. Thread-safe.

    The callers are bounded by the token issuer, not by the policy (an OAuth issuer can name
    any number of subjects), so at most ``cap`` sessions are kept, the least recently used
    dropped first (an LRU). A dropped caller's next request gets a new session, with a full
    rate-limit bucket: a caller regains at most one ``burst`` that way, and only after
    ``cap`` other callers were served since its last request.

    Args:
        gate: the gate (its tools are listed).
        policy: the policy whose sessions the callers get.
        cap: the most sessions kept, >= 1 (:data:`MAX_CALLER_SESSIONS`).
    """

    def __init__(self, gate: Gate, policy: Policy, cap: int = MAX_CALLER_SESSIONS) -> None:
        if type(cap) is not int or cap < 1:
            raise ValueError(f"cap must be an int >= 1 (sessions), got {cap!r}")
        self.gate = gate
        self.policy = policy
        self.cap = cap
        self._sessions: OrderedDict[tuple[Identity | None, str], Session] = OrderedDict()
        self._lock = threading.Lock()
        self._listings: dict[str, types.ListToolsResult] = {}

    def session(self, caller: Caller) -> Session:
        """The live session of ``caller`` (made on its first request, or after it was
        dropped), now the most recently used."""
        assert caller.session is not None
        key = (caller.identity, caller.session)
        with self._lock:
            found = self._sessions.get(key)
            if found is not None:
                self._sessions.move_to_end(key)
                return found
            audit = self.gate.audit
            found = self._sessions[key] = self.policy.session(
                caller.session, caller=caller.name,
                shared=audit.shared_bucket if audit is not None else None)
            while len(self._sessions) > self.cap:
                self._sessions.popitem(last=False)
            return found

    def __len__(self) -> int:
        """The number of sessions kept."""
        return len(self._sessions)

    def listing(self, session: Session) -> types.ListToolsResult:
        found = self._listings.get(session.name)
        if found is None:
            found = self._listings.setdefault(session.name, types.ListToolsResult(tools=[
                types.Tool.model_validate(d)
                for d in tool_definitions("mcp", self.gate.tools, session=session)]))
        return found


def _scope_of(ctx: ServerRequestContext[Any, Any]) -> Scope:
    request = ctx.request
    return request.scope if isinstance(request, Request) else {}


def build_http_server(gate: Gate, sessions: CallerSessions,
                      limiter: anyio.CapacityLimiter,
                      approvals: Approvals | None = None,
                      proposer: str | None = None) -> Server[Any]:
    """The low-level SDK ``Server`` behind :class:`McpFront`: ``tools/list`` of the caller's
    session, and ``tools/call`` through the gate in the caller's session, on the text the
    front received (``Received``), with the request named for approval questions. When the
    caller goes away while the call waits for a person (the request is cancelled, or the POST
    that carried it is over: :func:`_run_call`), its question is withdrawn
    (:meth:`Approvals.withdraw`): the write does not run."""

    def caller_of(ctx: ServerRequestContext[Any, Any]) -> Caller:
        caller = _scope_of(ctx).get(CALLER_KEY)
        if not isinstance(caller, Caller):  # only McpFront serves this server
            raise RuntimeError("a request reached the MCP server without its caller")
        return caller

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return sessions.listing(sessions.session(caller_of(ctx)))

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
                        ) -> types.CallToolResult | types.InputRequiredResult:
        caller = caller_of(ctx)
        session = sessions.session(caller)
        received = _scope_of(ctx).get(RECEIVED_KEY)
        text = received.text if isinstance(received, Received) else msgspec.json.encode(
            ctx.params)
        asking = Asking(ctx, caller.name, input_responses=params.input_responses,
                        request_state=params.request_state)
        reset = ASKING.set(asking)
        try:
            ended = _scope_of(ctx).get(ENDED_KEY)
            observation = await _run_call(
                partial(gate.handle, text, dialect="mcp", session=session,
                        proposer=client_name(ctx, proposer),
                        incoming=None if _telemetry.current is None else incoming_of(
                            ctx, params, "tcp", _headers(_scope_of(ctx)))),
                limiter, asking, approvals if gate.asks_approval else None,
                ended if isinstance(ended, anyio.Event) else None)
        finally:
            ASKING.reset(reset)
        logger.debug("tools/call %s by %s: %s", observation.tool or params.name or "?",
                     caller.name, "ok" if observation.ok else observation.code)
        if asking.ask_back is not None:
            return asking.ask_back
        return types.CallToolResult.model_validate(mcp_result(observation))

    server: Server[Any] = Server(
        "regdev", version=__version__, instructions=_INSTRUCTIONS,
        on_list_tools=list_tools, on_call_tool=call_tool,
        get_tool_input_schema=lambda name: None)  # no tool declares x-mcp-header
    gate_spans_tool_calls(server)
    server.middleware.append(_explain_the_sdk)
    return server


async def _run_call(call: Callable[[], Observation], limiter: anyio.CapacityLimiter,
                    asking: Asking, approvals: Approvals | None,
                    ended: anyio.Event | None = None) -> Observation:
    """Run ``call`` in a worker thread. The thread always runs to its end (the gate records
    what it did). When the caller goes away meanwhile, its approval question is withdrawn
    first (:meth:`Approvals.withdraw`), so that the thread ends on a denial at once. Two
    signs of a caller gone:

    * this request is cancelled: ``--stateless`` and the 2026-07-28 era, where the SDK ends
      the request's task with its HTTP exchange;
    * ``ended`` is set (the front sets it once the POST that carried the call is over) while
      the call still runs: in a session, the SDK runs the request in the session's own task
      and does not cancel it when the POST's response stream closes, as the stream of a
      resumable session may be taken up again (``Last-Event-ID``); regdev keeps no event
      store, so no answer can reach the caller after its POST is over.

    Without ``approvals`` (the gate asks none) nothing is to be withdrawn: the call's thread
    is simply awaited (a cancelled request still waits for its end).
    """
    if approvals is None:
        return await anyio.to_thread.run_sync(call, limiter=limiter)
    done: list[Observation] = []
    failed: list[Exception] = []
    finished = anyio.Event()
    watching = anyio.CancelScope()

    async def run() -> None:
        try:
            done.append(await anyio.to_thread.run_sync(call, limiter=limiter))
        except Exception as error:  # raised in the request's own task below
            failed.append(error)
        finally:
            finished.set()

    async def watch(ended: anyio.Event, approvals: Approvals) -> None:
        with watching:
            await ended.wait()
            approvals.withdraw(asking)

    watched = False  # (only in a session)
    async with anyio.create_task_group() as group:
        group.start_soon(run)
        if ended is not None and approvals is not None:
            watched = True
            group.start_soon(watch, ended, approvals)
        try:
            await finished.wait()
        except anyio.get_cancelled_exc_class():
            if approvals is not None:
                approvals.withdraw(asking)
            raise
        finally:
            if watched:
                watching.cancel()
    if failed:
        raise failed[0]
    return done[0]


@dataclass
class HttpServer:
    """The ASGI app of ``regdev serve --http`` and what it holds.

    Attributes:
        app: the Starlette app (``/mcp``, the protected-resource metadata, the approval
            pages).
        url: the MCP endpoint's URL.
        approvals: the approval hook (also the gate's ``policy.approve``).
        routes: the app's routes (a fleet's app joins its endpoints').
        manager: the SDK's session manager the app runs (None for a fleet's app).
    """

    app: Starlette
    url: str
    approvals: Approvals
    routes: list[Any] = field(default_factory=list)
    manager: StreamableHTTPSessionManager | None = None


def record_too_large(gate: Gate, caller: Caller, body: bytes | None,
                     declared: int | None) -> None:
    """Record in the gate's audit log (when it has one) a request body refused 413 for being
    over the cap, as stdio records a line over its cap: a parse-stage ``too-large`` refusal,
    dialect ``mcp``, in the caller's session and with its name, no tool, no id (the body was
    not read as JSON: its id cannot be known), and as raw text the body's first ``cap`` bytes
    (as stdio keeps a line cut at its cap; none when ``Content-Length`` was over the cap:
    nothing was read). A failure to record is logged, never raised: the caller gets its 413
    either way.

    Args:
        gate: the gate the server serves.
        caller: who sent the body (authenticated: the body is read only after the token).
        body: the body's first ``cap`` bytes; None when none were read.
        declared: the ``Content-Length`` given, in bytes, or None.
    """
    audit = gate.audit
    if audit is None:
        return
    cap = gate.max_input_bytes + ENVELOPE_BYTES
    size = f" (Content-Length {declared})" if declared is not None else ""
    refusal = refuse("too-large",
                     f"the request body is over the cap of {cap} bytes{size}: a call of at "
                     f"most {gate.max_input_bytes} bytes and its JSON-RPC envelope; send one "
                     f"call of at most {gate.max_input_bytes} bytes")
    try:
        audit.append(audit.row(time=time.time(), session=caller.session or "default",
                               dialect="mcp", raw=body, observation=Observation.refused(refusal),
                               tool=None, arguments=None,
                               device=gate.device.known_identity(), caller=caller.name))
    except AuditError as error:
        logger.error("a body refused as too large was not recorded in the audit log: %s",
                     error)


def build_http_app(gate: Gate, policy: Policy, approvals: Approvals, *, host: str, port: int,
                   stateless: bool = False, body_seconds: float = BODY_SECONDS,
                   limits: HttpLimits | None = None, device: str | None = None,
                   device_session: str | None = None,
                   proposer: str | None = None) -> HttpServer:
    """The app serving ``gate`` at ``http://HOST:PORT/mcp`` under ``policy.http``.

    Args:
        gate: the gate every call goes through (its policy's ``approve`` should be
            ``approvals``, for protected registers).
        policy: the policy (its ``http`` table must be set).
        approvals: the approval hook and pages.
        host, port: where the server listens (the port it actually got, for the URLs).
        stateless: no sessions (see the module docstring).
        body_seconds: seconds a client has to send a body, 0.001..86400.
        limits: the session limits (``max_sessions``, ``max_caller_sessions``,
            ``initialize_rate``, ``session_idle_seconds``); default :class:`HttpLimits`'s.
        device: the device's name in a fleet: the endpoint is ``/mcp/NAME`` and its approval
            pages ``/approve/NAME/...``; a token whose scopes name devices
            (``device:NAME``) reaches only those.
        device_session: a fleet device served to this policy session only.

    Raises:
        ValueError: the policy has no ``[http]`` table, or ``body_seconds`` is out of range.
    """
    problem = seconds_problem(body_seconds)
    if problem is not None:
        raise ValueError(f"body_seconds {problem}")
    access = policy.http
    if access is None:
        raise ValueError("the policy has no [http] table: no caller could be named")
    base = f"http://{_url_host(host)}:{port}"
    path = MCP_PATH if device is None else f"{MCP_PATH}/{device}"
    approve_path = APPROVE_PATH if device is None else f"{APPROVE_PATH}{device}/"
    url = f"{base}{path}"
    if access.resource_url:
        url = access.resource_url if device is None else \
            f"{access.resource_url.rstrip('/')}/{device}"
    metadata_url = str(build_resource_metadata_url(AnyHttpUrl(url)))
    tokens = TokenCheck(access)
    limits = limits if limits is not None else HttpLimits()
    sessions = CallerSessions(gate, policy)
    limiter = anyio.CapacityLimiter(WORKERS + policy.approval.max_pending)
    server = build_http_server(gate, sessions, limiter, approvals, proposer)
    manager = StreamableHTTPSessionManager(app=server, stateless=stateless,
                                           max_request_body_size=gate.max_input_bytes
                                           + ENVELOPE_BYTES,
                                           session_idle_timeout=limits.session_idle_seconds,
                                           max_sessions=limits.max_sessions)
    front = McpFront(manager.handle_request, tokens=tokens,
                     guard=Guard.for_server(access, host, port), metadata_url=metadata_url,
                     max_body_bytes=gate.max_input_bytes + ENVELOPE_BYTES,
                     body_seconds=body_seconds, too_large=partial(record_too_large, gate),
                     sessions=None if stateless else SessionLimits(
                         limits, partial(_live_sessions, manager)),
                     device=device, device_session=device_session)
    guard = front.guard

    async def verify_approver(token: str) -> tuple[str, frozenset[str]] | None:
        found = await tokens.verify_token(token)
        if found is None:
            return None
        return found.client_id, frozenset(found.scopes)

    approvals.verify_approver = verify_approver
    approvals.page_url = f"{url.removesuffix(path)}{approve_path}"

    async def approval_page(request: Request) -> Response:
        refused = guard.check(request.scope)
        if refused is not None:
            return refused
        question_id = request.path_params["question"]
        headers = {"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                   "Content-Security-Policy": "default-src 'none'; form-action 'self'",
                   "Referrer-Policy": "no-referrer"}
        if request.method == "GET":
            status, page = approvals.page(question_id)
            return HTMLResponse(page, status_code=status, headers=headers)
        body = bytearray()
        with anyio.move_on_after(body_seconds):
            async for chunk in request.stream():
                body += chunk
                if len(body) > PAGE_FORM_BYTES:
                    return HTMLResponse("<p>Too large.</p>", status_code=413, headers=headers)
        status, page = await approvals.answer_page(question_id, bytes(body))
        return HTMLResponse(page, status_code=status, headers=headers)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    metadata: dict[str, Any] = {  # RFC 9728 (authorization_servers: only with OAuth)
        "resource": url, "scopes_supported": list(access.scopes),
        "bearer_methods_supported": ["header"], "resource_name": "regdev"}
    if access.oauth is not None:
        metadata["authorization_servers"] = [access.oauth.issuer]

    async def resource_metadata(request: Request) -> Response:
        return Response(json.dumps(metadata), media_type="application/json",
                        headers={"Cache-Control": "public, max-age=3600"})

    routes: list[Any] = [
        Route(path, endpoint=front),
        Route(approve_path + "{question}", endpoint=approval_page, methods=["GET", "POST"]),
        Route(urlsplit(metadata_url).path, endpoint=resource_metadata, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    return HttpServer(app, url, approvals, routes, manager)


def build_fleet_app(endpoints: Sequence[HttpServer]) -> HttpServer:
    """One app serving every endpoint of a fleet (each built by :func:`build_http_app` with
    its ``device``): their routes side by side, their session managers run together. Its
    ``url`` is the first endpoint's; its ``approvals``, the first's (each endpoint keeps
    its own)."""
    managers = [endpoint.manager for endpoint in endpoints if endpoint.manager is not None]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for manager in managers:
                await stack.enter_async_context(manager.run())
            yield

    routes = [route for endpoint in endpoints for route in endpoint.routes]
    return HttpServer(Starlette(routes=routes, lifespan=lifespan), endpoints[0].url,
                      endpoints[0].approvals, routes, None)


def _live_sessions(manager: StreamableHTTPSessionManager) -> Collection[str]:
    """The ids of the sessions ``manager`` holds now. The SDK offers no public view of them:
    this reads its table, which it keeps exact (a session leaves it on ``DELETE``, on its idle
    timeout and on failure); ``tests/test_http.py`` checks that it does."""
    live: Collection[str] = manager._server_instances.keys()
    return live


# --- running it ------------------------------------------------------------------------------


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port``. Made with ``IPPROTO_TCP`` named, so that
    asyncio sets ``TCP_NODELAY`` on every connection it accepts (it does so only for sockets
    whose protocol says TCP): without it, an answer written in two parts (its headers, then
    its body) waits for the client's delayed ACK, about 40 ms a request."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP,
                               flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    listener = socket.socket(family, kind, proto)
    try:
        if sys.platform != "win32":
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(256)
    except BaseException:
        listener.close()
        raise
    return listener


class _Server(uvicorn.Server):
    """uvicorn's server without its own signal handlers: the caller stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


def serve_http(gate: Gate, policy: Policy, approvals: Approvals, *, host: str, port: int,
               stateless: bool = False, stop_signals: Collection[signal.Signals] = (),
               ready: Callable[[str], None] | None = None,
               stop: threading.Event | None = None,
               body_seconds: float = BODY_SECONDS, limits: HttpLimits | None = None,
               proposer: str | None = None,
               fleet: Sequence[tuple[str, Gate, Approvals, str | None]] = ()) -> None:
    """Serve ``gate`` over MCP Streamable HTTP at ``http://HOST:PORT/mcp`` until a stop signal.

    Blocks. Returns on one of ``stop_signals`` (open approval questions are denied, running
    calls finish, connections get a few seconds to close); the caller then closes the gate.

    Args:
        gate: the gate and device to serve; its policy must be ``policy``, with ``approvals``
            as its approval hook.
        policy: the policy, with its ``[http]`` table (who may call).
        approvals: the approval hook (:func:`~regdev.server._approval.approvals_for`); its
            pages are served here.
        host: the address to listen on (``127.0.0.1``, ``::1``, ``0.0.0.0``...).
        port: the TCP port; 0 picks a free one (``ready`` is told which).
        stateless: serve without sessions (several processes behind one load balancer).
        stop_signals: signals that stop the server (only the main thread can catch them).
        ready: called with the endpoint's URL once the server listens.
        stop: setting it stops the server as a stop signal does (from any thread).
        body_seconds: seconds a client has to send a request's body (408 after).
        limits: what callers may hold: connections, the time to send a request's headers,
            sessions (:class:`HttpLimits`; its defaults when None).
        fleet: several devices instead of ``gate``: ``(name, gate, approvals, session)``
            each, served at ``/mcp/NAME`` (:func:`build_http_app`'s ``device`` and
            ``device_session``); ``gate`` and ``approvals`` are then not served.

    Raises:
        OSError: the address cannot be listened on.
        ValueError: the policy has no ``[http]`` table.
    """
    listener = _listen(host, port)
    try:
        actual_port = listener.getsockname()[1]
        limits = limits if limits is not None else HttpLimits()
        if fleet:
            served = build_fleet_app([
                build_http_app(each, policy, asks, host=host, port=actual_port,
                               stateless=stateless, body_seconds=body_seconds, limits=limits,
                               device=name, device_session=session,
                               proposer=proposer)
                for name, each, asks, session in fleet])
            every = [asks for _, _, asks, _ in fleet]
        else:
            served = build_http_app(gate, policy, approvals, host=host, port=actual_port,
                                    stateless=stateless, body_seconds=body_seconds,
                                    limits=limits, proposer=proposer)
            every = [approvals]
        guard = ConnectionGuard(limits)
        config = uvicorn.Config(ConnectionCap(served.app, guard), log_config=None,
                                access_log=False, lifespan="on", timeout_keep_alive=5,
                                timeout_graceful_shutdown=5, http=protocol_class(guard),
                                h11_max_incomplete_event_size=16 * 1024)
        server = _Server(config)

        async def stop_on_signals(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            wanted = [s for s in stop_signals if signal.getsignal(s) != signal.SIG_IGN]
            try:
                receiver = anyio.open_signal_receiver(*wanted) if wanted else None
            except (NotImplementedError, RuntimeError):
                receiver = None
            if receiver is None:
                task_status.started()
                return
            with receiver as signals:
                task_status.started()
                async for number in signals:
                    logger.info("stopping on %s", signal.Signals(number).name)
                    for asks in every:
                        asks.stop()
                    server.should_exit = True
                    return

        async def stop_on_event(event: threading.Event) -> None:
            await anyio.to_thread.run_sync(event.wait, abandon_on_cancel=True)
            logger.info("stopping")
            for asks in every:
                asks.stop()
            server.should_exit = True

        async def run() -> None:
            async with anyio.create_task_group() as group:
                await group.start(stop_on_signals)
                if stop is not None:
                    group.start_soon(stop_on_event, stop)
                if ready is not None:
                    ready(served.url)
                await server.serve(sockets=[listener])
                group.cancel_scope.cancel()

        anyio.run(run)
    finally:
        listener.close()
