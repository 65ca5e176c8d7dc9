"""What ``regdev serve --http`` lets callers hold: connections, request heads, MCP sessions.

Rules of this file:

* Connections are counted where uvicorn makes them: :class:`ConnectionGuard` is handed each
  connection's protocol (uvicorn's h11 protocol, subclassed by :func:`protocol_class`) when it
  opens and when it closes. A connection is *unauthenticated* until a request on it presented
  a valid token (:func:`authenticated`, called by the front of ``/mcp``); at most
  :attr:`HttpLimits.max_unauthenticated` of them are open at once, and a new one past that
  closes the oldest. So connections that never present a token, however many, hold at most
  that budget of the :attr:`HttpLimits.max_connections` (:class:`ConnectionCap`: ``503``
  beyond, in regdev's words; uvicorn's own ``limit_concurrency`` answers in plain text): the
  rest is kept for callers that authenticate, and a caller's new connection always gets in.
* A request's head (its request line and headers) must arrive within
  :attr:`HttpLimits.header_seconds`: counted from the connection's opening for its first
  request, from the first byte of each later one (uvicorn's ``timeout_keep_alive`` closes a
  connection idle between requests). uvicorn's h11 protocol has no such deadline of its own:
  without it, a connection that sends nothing, or a byte now and then, is held for ever.
  A late head is answered ``408`` (a JSON-RPC error in regdev's words) and the connection
  closed.
* MCP sessions (:class:`SessionLimits`): open at most :attr:`HttpLimits.max_caller_sessions`
  per caller and :attr:`HttpLimits.max_sessions` in all, and at most
  :attr:`HttpLimits.initialize_rate` new ones per caller a minute; the SDK ends a session
  idle for :attr:`HttpLimits.session_idle_seconds`. A refusal names its limit.
* Everything here runs on the server's event loop (no locks): uvicorn calls the protocol
  there, and the front's checks run there between two awaits.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass, fields
from typing import ClassVar

import h11
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..core._limits import seconds_problem
from ..core._text import escape_text
from ..gate._policy import TokenBucket

__all__ = [
    "LIMIT_ERROR",
    "ConnectionCap",
    "ConnectionGuard",
    "HttpLimits",
    "LimitRefusal",
    "SessionLimits",
    "authenticated",
    "protocol_class",
]

logger = logging.getLogger("regdev")

#: The JSON-RPC error code of a refusal for a limit (a server error of JSON-RPC 2.0's
#: implementation-defined range); its ``data.limit`` names the limit by its option.
LIMIT_ERROR = -32000
#: Seconds between two warnings that connections were closed to keep the budget.
_WARN_EVERY = 60.0
#: The most callers whose ``initialize`` rate is remembered (the least recent dropped).
_MAX_BUCKETS = 4096


@dataclass(frozen=True)
class HttpLimits:
    """The limits of ``regdev serve --http`` (each has an option of the same name).

    Attributes:
        header_seconds: seconds a connection has to send a request's head (request line and
            headers), 0.001..3600; ``408`` after (``--header-seconds``, default 5).
        max_connections: connections open at once, 2..65536; a request on one more gets
            ``503`` (``--max-connections``, default 512).
        max_unauthenticated: connections open at once on which no request has presented a
            valid token yet, 1..``max_connections - 1``; one more closes the oldest
            (``--max-unauthenticated``, default 64).
        max_sessions: MCP sessions open at once in all, 1..100000; ``503`` for one more
            (``--max-sessions``, default 512).
        max_caller_sessions: MCP sessions open at once per caller, 1..``max_sessions``;
            ``429`` for one more (``--max-caller-sessions``, default 8).
        session_idle_seconds: seconds after which a session with no request in flight is
            ended (its id then gets ``404``), 0.001..86400 (``--session-idle-seconds``,
            default 300).
        initialize_rate: sessions a caller may open a minute, 1..100000 (a bucket of that
            many, refilled evenly over the minute); ``429`` beyond (``--initialize-rate``,
            default 30).

    Raises:
        ValueError: a value out of its range, naming the option and the range.
    """

    header_seconds: float = 5.0
    max_connections: int = 512
    max_unauthenticated: int = 64
    max_sessions: int = 512
    max_caller_sessions: int = 8
    session_idle_seconds: float = 300.0
    initialize_rate: int = 30

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise ValueError(problem)

    def problem(self) -> str | None:
        """The first value out of its range, said in one line; None when all are in."""
        for name, low, high in (("header_seconds", 0.001, 3600.0),
                                ("session_idle_seconds", 0.001, 86400.0)):
            wrong = seconds_problem(getattr(self, name), minimum=low, maximum=high)
            if wrong is not None:
                return f"{option(name)} {wrong}"
        for name, low, high in (("max_connections", 2, 65536),
                                ("max_unauthenticated", 1, self.max_connections - 1),
                                ("max_sessions", 1, 100000),
                                ("max_caller_sessions", 1, self.max_sessions),
                                ("initialize_rate", 1, 100000)):
            value = getattr(self, name)
            if type(value) is not int or not low <= value <= high:
                return f"{option(name)} must be an integer in {low}..{high}, got {value!r}"
        return None

    @classmethod
    def names(cls) -> list[str]:
        """The attributes' names, in order."""
        return [each.name for each in fields(cls)]


def option(name: str) -> str:
    """The command-line option of the limit ``name`` (``max_sessions``: ``--max-sessions``)."""
    return "--" + name.replace("_", "-")


class LimitRefusal(Exception):
    """A request refused for a limit.

    Attributes:
        status: the HTTP status (429 for a caller's own limit, 503 for the server's).
        limit: the limit's option (``--max-caller-sessions``).
        message: one line saying which limit and what to do.
        retry_after: whole seconds after which to try again, or None.
    """

    def __init__(self, status: int, limit: str, message: str,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.limit = limit
        self.message = message
        self.retry_after = retry_after

    def body(self) -> bytes:
        """The JSON-RPC error object (id null) of the refusal."""
        return json.dumps({"jsonrpc": "2.0", "id": None, "error": {
            "code": LIMIT_ERROR, "message": self.message,
            "data": {"limit": self.limit}}}).encode()

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


# --- connections ------------------------------------------------------------------------------

#: The connection whose request the current task serves (set while uvicorn makes the task).
_CONNECTION: contextvars.ContextVar[GuardedProtocol | None] = contextvars.ContextVar(
    "regdev_connection", default=None)


def authenticated() -> None:
    """Count the connection of the request being served as authenticated: it leaves the
    budget of unauthenticated connections for as long as it is open. Call it from the
    request's own task once its token is found valid; outside one it does nothing."""
    connection = _CONNECTION.get()
    if connection is not None:
        connection.guard.proven(connection)


class ConnectionGuard:
    """The open connections that have not presented a valid token yet, oldest first.

    Args:
        limits: the limits (``max_unauthenticated``, ``header_seconds``).
    """

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self._unproven: OrderedDict[GuardedProtocol, None] = OrderedDict()
        self._warned = -_WARN_EVERY
        self._open = 0

    @property
    def open(self) -> int:
        """The number of open connections."""
        return self._open

    @property
    def unauthenticated(self) -> int:
        """The number of open connections without a valid token yet."""
        return len(self._unproven)

    def opened(self, connection: GuardedProtocol) -> None:
        """A connection opened: it joins the budget, closing the oldest past it."""
        self._open += 1
        self._unproven[connection] = None
        while len(self._unproven) > self.limits.max_unauthenticated:
            oldest, _ = self._unproven.popitem(last=False)
            oldest.close_now()
            now = time.monotonic()
            if now - self._warned >= _WARN_EVERY:  # once a minute at most
                self._warned = now
                logger.warning("%d connections are open on which no valid token was presented, "
                               "the most kept (--max-unauthenticated): closing the oldest "
                               "(a flood of connections?)", self.limits.max_unauthenticated)

    def proven(self, connection: GuardedProtocol) -> None:
        """A request on ``connection`` presented a valid token."""
        self._unproven.pop(connection, None)

    def closed(self, connection: GuardedProtocol) -> None:
        """A connection closed."""
        self._open -= 1
        self._unproven.pop(connection, None)


class ConnectionCap:
    """The ASGI app in front of ``app`` that answers a request ``503`` (a JSON-RPC error
    naming ``--max-connections``, ``Retry-After: 1``, and the connection closed) while more
    than :attr:`HttpLimits.max_connections` connections are open, its own included.

    Args:
        app: the app served.
        guard: the guard that counts the connections.
    """

    def __init__(self, app: ASGIApp, guard: ConnectionGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        most = self.guard.limits.max_connections
        if scope["type"] == "http" and self.guard.open > most:
            refusal = LimitRefusal(
                503, option("max_connections"),
                f"Service Unavailable: {self.guard.open} connections are open, more than the "
                f"server keeps ({option('max_connections')} {most}); try again shortly",
                retry_after=1)
            logger.warning("refused a request: %d connections are open (--max-connections "
                           "%d)", self.guard.open, most)
            response = Response(refusal.body(), status_code=503, media_type="application/json",
                                headers={**refusal.headers(), "Connection": "close"})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's head, counted by a
    :class:`ConnectionGuard` (:func:`protocol_class` gives the class of one guard)."""

    guard: ClassVar[ConnectionGuard]
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()
        self.guard.opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        self.guard.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_head_timer()  # the first bytes of a later request
        super().data_received(data)

    def handle_events(self) -> None:
        # The task uvicorn makes for a request copies this context: the front finds the
        # connection through it (authenticated()).
        reset = _CONNECTION.set(self)
        try:
            super().handle_events()
        finally:
            _CONNECTION.reset(reset)
        if self.conn.their_state is not h11.IDLE:  # the head is in
            self._disarm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._head_timer is None and self.conn.their_state is h11.IDLE \
                and self.conn.trailing_data[0] and not self.transport.is_closing():
            self._arm_head_timer()  # part of a later request came with this one (pipelined)

    def close_now(self) -> None:
        """Close the connection (to keep the budget); its request, if any, is abandoned."""
        self._disarm_head_timer()
        if not self.transport.is_closing():
            self.transport.close()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.guard.limits.header_seconds,
                                                self._head_too_late)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        seconds = self.guard.limits.header_seconds
        logger.debug("closed a connection whose request headers did not arrive within %g s",
                     seconds)
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
            "code": -32600, "message": f"Invalid Request: the request's headers did not "
                                       f"arrive within {seconds:g} s (--header-seconds)"}}
                          ).encode()
        try:
            for event in (h11.Response(status_code=408, reason=b"Request Timeout",
                                       headers=[(b"content-type", b"application/json"),
                                                (b"content-length", b"%d" % len(body)),
                                                (b"connection", b"close")]),
                          h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event) or b"")
        except h11.LocalProtocolError:  # not in a state to answer: closed without one
            pass
        self.transport.close()


def protocol_class(guard: ConnectionGuard) -> type[GuardedProtocol]:
    """The protocol class, for ``uvicorn.Config(http=...)``, of connections counted by
    ``guard``."""
    return type("RegdevH11Protocol", (GuardedProtocol,), {"guard": guard})


# --- MCP sessions ---------------------------------------------------------------------------


class SessionLimits:
    """Who holds which MCP session, and the ``initialize`` rate of each caller.

    Args:
        limits: the limits (``max_sessions``, ``max_caller_sessions``, ``initialize_rate``,
            ``session_idle_seconds`` for the messages).
        live: the ids of the sessions the SDK holds now (one ends on ``DELETE``, idleness,
            or failure: what is not in it is not counted).
        clock: a monotonic clock in seconds (for tests).
    """

    def __init__(self, limits: HttpLimits, live: Callable[[], Collection[str]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._live = live
        self._clock = clock
        self._owner: dict[str, Hashable] = {}  # session id -> caller
        self._opening: dict[Hashable, int] = {}  # caller -> sessions being opened now
        self._buckets: OrderedDict[Hashable, TokenBucket] = OrderedDict()

    def held(self, caller: Hashable) -> int:
        """Sessions open or being opened by ``caller``."""
        self._forget_ended()
        return sum(1 for owner in self._owner.values() if owner == caller) \
            + self._opening.get(caller, 0)

    def admit(self, caller: Hashable, name: str | None = None) -> None:
        """Admit a request of ``caller`` that opens a session (``initialize``): call
        :meth:`opened` when it is answered.

        Args:
            caller: who asks, as the limits count callers (the caller's full identity, so
                that two subjects whose shown names agree are two callers).
            name: the caller's name as refusals show it (``str(caller)`` when None).

        Raises:
            LimitRefusal: the caller holds ``max_caller_sessions`` sessions (429), the server
                holds ``max_sessions`` (503), or the caller opened ``initialize_rate`` in
                the last minute (429, with the seconds to wait).
        """
        limits = self.limits
        held = self.held(caller)
        idle = f"a session left idle ends after {limits.session_idle_seconds:g} s"
        shown = f"`{escape_text(str(caller) if name is None else name, 80)}`"
        if held >= limits.max_caller_sessions:
            raise LimitRefusal(
                429, option("max_caller_sessions"),
                f"Too many sessions: {shown} has {held} open, the most one caller may have "
                f"({option('max_caller_sessions')} {limits.max_caller_sessions}); end one "
                f"(DELETE with its Mcp-Session-Id) or use one you have ({idle})")
        total = len(self._owner) + sum(self._opening.values())
        if total >= limits.max_sessions:
            raise LimitRefusal(
                503, option("max_sessions"),
                f"Too many sessions: the server has {total} open, the most it keeps "
                f"({option('max_sessions')} {limits.max_sessions}); try again when one "
                f"ends ({idle})", retry_after=1)
        wait = self._bucket(caller).take()
        if wait > 0:
            seconds = max(1, int(wait + 0.999))
            raise LimitRefusal(
                429, option("initialize_rate"),
                f"Too many new sessions: {shown} may open {limits.initialize_rate} a "
                f"minute ({option('initialize_rate')} {limits.initialize_rate}); try again "
                f"in {seconds} s, or use a session you have", retry_after=seconds)
        self._opening[caller] = self._opening.get(caller, 0) + 1

    def opened(self, caller: Hashable, session_id: str | None) -> None:
        """The request admitted for ``caller`` was answered: ``session_id`` is the session it
        opened, or None when it opened none."""
        left = self._opening.get(caller, 0) - 1
        if left > 0:
            self._opening[caller] = left
        else:
            self._opening.pop(caller, None)
        if session_id is not None and session_id in self._live():
            self._owner[session_id] = caller

    def _forget_ended(self) -> None:
        live = self._live()
        for session_id in [s for s in self._owner if s not in live]:
            del self._owner[session_id]

    def _bucket(self, caller: Hashable) -> TokenBucket:
        found = self._buckets.get(caller)
        if found is None:
            rate = self.limits.initialize_rate
            found = self._buckets[caller] = TokenBucket(rate / 60.0, rate, self._clock)
            while len(self._buckets) > _MAX_BUCKETS:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(caller)
        return found

