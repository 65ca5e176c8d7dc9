"""The MCP server: the registry's tools over MCP on stdio, every ``tools/call`` through the gate.

Rules of this file:

* Built on the official ``mcp`` SDK's low-level ``Server`` (v2), not its high-level
  ``MCPServer`` (FastMCP): that one validates arguments with pydantic before the tool runs,
  turning ``"3"`` into 3 and dropping undeclared arguments, which would hide the model's
  mistakes from the gate. The low-level server checks only the MCP envelope (``name`` a
  string, ``arguments`` an object or null) and never a tool's ``inputSchema`` (in SDK 2.x its
  ``get_tool_input_schema`` hook serves only ``Mcp-Param`` header checks on streamable HTTP,
  which this server does not use).
* Each ``tools/call`` hands the request's ``arguments`` exactly as sent to
  :meth:`Gate.handle_call`; a refusal comes back as a ``CallToolResult`` with ``isError``
  true and the same code and message as in process (:func:`regdev.mcp_result`). An unknown
  tool is a refusal like any other, so the model sees it and can correct itself.
* Numbers stay exact. The SDK decodes every message with pydantic, which turns a JSON number
  with a fraction or exponent into a float64, so ``3.0000000000000001`` would arrive as
  ``3.0`` and pass as the integer 3. :class:`ExactArguments` therefore also decodes each line
  read from stdin with the gate's own strict decoder (fractions as ``Decimal``) and keeps a
  ``tools/call``'s arguments under its request id when they hold such a number; the handler
  takes those instead of the SDK's copy. Integers need no help (pydantic keeps them exact).
* An idempotency key travels in the ``tools/call`` params' ``_meta.idempotency_key`` (see
  ``docs/safety.md``) and goes to the gate with the call, in the server's session.
* Device calls run one at a time in a worker thread: a slow device never stalls the protocol
  loop, and two concurrent calls never interleave on the device.
* stdout carries protocol messages only (the SDK points fd 1 at stderr while it serves);
  logs go to stderr.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator
from decimal import Decimal
from functools import partial
from typing import Any, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import mcp_types as types
import msgspec
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

from . import __version__
from ._gate import Gate
from ._policy import Session
from ._providers import mcp_result, tool_definitions

__all__ = ["ExactArguments", "build_server", "read_lines", "serve_stdio"]

logger = logging.getLogger("regdev")

_decoder = msgspec.json.Decoder(float_hook=Decimal)


def _has_fraction(value: object) -> bool:
    """True when a decoded JSON value holds a number written with a fraction or exponent."""
    if type(value) is Decimal:
        return True
    if type(value) is dict:
        return any(_has_fraction(item) for item in value.values())
    if type(value) is list:
        return any(_has_fraction(item) for item in value)
    return False


def _request_key(value: object) -> int | str | None:
    """A JSON-RPC request id usable as a key (a string or an integer, not a boolean)."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


class ExactArguments:
    """``tools/call`` arguments as sent, by JSON-RPC request id, for those the SDK would round.

    :meth:`record` sees every line the server reads. For a ``tools/call`` request whose
    arguments object holds a number with a fraction or exponent it keeps the tool name and
    the arguments decoded exactly (see the module docstring); for any other ``tools/call`` it
    forgets what it held under that id, so a stale record can never be taken for a later
    request that reuses the id. :meth:`take` hands a record over only when the request's name
    and argument names match it. At most ``limit`` records are kept (the oldest goes first),
    so requests that never reach the handler cannot grow the table.

    Args:
        limit: how many records to keep at most.
    """

    def __init__(self, *, limit: int = 256) -> None:
        self._limit = limit
        self._table: dict[int | str, tuple[object, dict[str, Any]]] = {}

    def record(self, line: bytes) -> None:
        """Note (or forget) the exact arguments of ``line`` if it is a ``tools/call``."""
        try:
            message = _decoder.decode(line)
        except (msgspec.DecodeError, RecursionError, ValueError):
            return  # the SDK answers (or drops) what it cannot parse either
        if type(message) is not dict or message.get("method") != "tools/call":
            return
        request_id = _request_key(message.get("id"))
        if request_id is None:
            return
        self._table.pop(request_id, None)
        params = message.get("params")
        arguments = params.get("arguments") if type(params) is dict else None
        if type(arguments) is dict and _has_fraction(arguments):
            assert type(params) is dict
            if len(self._table) >= self._limit:
                del self._table[next(iter(self._table))]
            self._table[request_id] = (params.get("name"), arguments)

    def take(self, request_id: object, name: object,
             arguments: object) -> dict[str, Any] | None:
        """The exact arguments recorded for this request (removed), or None.

        Args:
            request_id: the JSON-RPC id of the request being handled.
            name: its tool name, as the SDK decoded it.
            arguments: its arguments, as the SDK decoded them (floats for fractions).
        """
        key = _request_key(request_id)
        recorded = self._table.pop(key, None) if key is not None else None
        if recorded is None:
            return None
        recorded_name, exact = recorded
        if recorded_name != name or not isinstance(arguments, dict) or (
                exact.keys() != arguments.keys()):
            return None
        return exact


async def read_lines(fd: int, exact: ExactArguments) -> AsyncIterator[str]:
    """The lines of file descriptor ``fd`` (UTF-8, invalid bytes replaced), each recorded in
    ``exact`` first.

    A daemon thread does the blocking reads with ``os.read``, so Ctrl-C ends the server at
    once instead of waiting for the client's next line (the SDK's own reader blocks in a
    worker thread that the interpreter waits for), and no Python lock is held at exit.
    Ends at end of file.
    """
    send, receive = anyio.create_memory_object_stream[bytes](16)
    token = anyio.lowlevel.current_token()

    def pump() -> None:
        pending = bytearray()
        try:
            while chunk := os.read(fd, 65536):
                pending += chunk
                while (end := pending.find(b"\n")) >= 0:
                    line = bytes(pending[: end + 1])
                    del pending[: end + 1]
                    anyio.from_thread.run(send.send, line, token=token)
            if pending:
                anyio.from_thread.run(send.send, bytes(pending), token=token)
        except (OSError, RuntimeError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the fd failed, or the loop has ended: nobody is left to read
        finally:
            with contextlib.suppress(RuntimeError):
                anyio.from_thread.run_sync(send.close, token=token)

    threading.Thread(target=pump, name="regdev stdin", daemon=True).start()
    async with receive:
        async for line in receive:
            exact.record(line)
            yield line.decode("utf-8", "replace")


_INSTRUCTIONS = (
    "regdev offers a register device to you as tools. Every call is validated before it "
    "reaches the device; a refused call comes back with isError and a JSON observation "
    "naming one stage, one code and a message saying what is allowed: fix that and call "
    "again."
)


def build_server(gate: Gate, exact: ExactArguments | None = None,
                 session: Session | None = None) -> Server[Any]:
    """An MCP server (low-level SDK ``Server``) offering ``gate.tools``, calls through ``gate``.

    Args:
        gate: the gate every ``tools/call`` goes through; its device is used one call at a time.
        exact: where the transport records arguments exactly as sent; without it the
            arguments are the SDK's decoding (fractions as float64).
        session: the session every call is made in; the gate's default when None.

    Returns:
        The server, ready for ``server.run(read_stream, write_stream, options)`` on any SDK
        transport.
    """
    listing = types.ListToolsResult(
        tools=[types.Tool.model_validate(d) for d in tool_definitions("mcp", gate.tools)]
    )
    one_at_a_time = anyio.CapacityLimiter(1)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listing

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # The wire params as decoded JSON (the SDK checked only the envelope): a model's
        # "3" stays a string and an extra argument stays present for the gate to judge.
        wire = ctx.params if ctx.params is not None else {}
        call: dict[str, Any] = {"tool": wire.get("name", params.name)}
        exact_arguments = (exact.take(ctx.request_id, call["tool"], wire.get("arguments"))
                           if exact is not None else None)
        if exact_arguments is not None:
            call["arguments"] = exact_arguments
        elif "arguments" in wire:
            call["arguments"] = wire["arguments"]
        meta = wire.get("_meta")
        key = meta.get("idempotency_key") if isinstance(meta, dict) else None
        observation = await anyio.to_thread.run_sync(
            partial(gate.handle_call, call, session=session, idempotency_key=key),
            limiter=one_at_a_time,
        )
        logger.debug("tools/call %s: %s", params.name,
                     "ok" if observation.ok else observation.code)
        return types.CallToolResult.model_validate(mcp_result(observation))

    return Server(
        "regdev",
        version=__version__,
        instructions=_INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def serve_stdio(gate: Gate, session: Session | None = None) -> None:
    """Serve ``gate`` over MCP on this process's stdin and stdout until stdin ends.

    Blocks. Returns when the client closes stdin (end of file); a ``KeyboardInterrupt``
    (Ctrl-C) propagates to the caller, which ends quietly.

    Args:
        gate: the gate (and device) to serve.
        session: the session of the client's calls; the gate's default when None.
    """
    exact = ExactArguments()
    server = build_server(gate, exact, session)

    async def run() -> None:
        # stdio_server only iterates its stdin's lines; it still guards stdout (fd 1 points
        # at stderr while it serves, so a stray print cannot corrupt the protocol).
        lines = cast("anyio.AsyncFile[str]", read_lines(0, exact))
        async with stdio_server(stdin=lines) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(run)
