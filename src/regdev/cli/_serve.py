"""``regdev serve``: the MCP server on stdio."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any, TextIO

from ._common import (
    STDOUT_CLOSED,
    UsageError,
    add_gate_options,
    device_call,
    map_option,
    open_gate,
    port_device,
    port_options,
)

#: How to get the ``mcp`` extra (regdev is not on PyPI yet: from a clone).
MCP_INSTALL = ("in a clone of regdev, scripts/serve installs it into .venv and runs the "
               "server (or: .venv/bin/pip install -e '.[mcp]')")


#: The signals that stop ``regdev serve`` as end of file does (those this platform has).
STOP_SIGNALS = tuple(signal.Signals[name] for name in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


class _Stopped(KeyboardInterrupt):
    """A stop signal before ``regdev serve`` serves (a KeyboardInterrupt, so that nothing
    in between, the event loop included, swallows it)."""


def _stop_now(number: int, frame: FrameType | None) -> None:
    for each in STOP_SIGNALS:  # a second signal must not cut the audit flush short
        if signal.getsignal(each) is _stop_now:
            signal.signal(each, signal.SIG_IGN)
    raise _Stopped(signal.Signals(number).name)


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    if sys.stdout is None:  # file descriptor 1 closed: there is nowhere to answer the client
        raise UsageError(f"cannot write the output: {STDOUT_CLOSED}")
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="regdev serve: %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("regdev")
    log.setLevel(args.log_level.upper())
    # Stop signals are caught from the start: importing the SDK alone takes a second or two,
    # and a client may give up and send SIGTERM meanwhile. One ignored when the process
    # started stays ignored (nohup's SIGHUP). Only the main thread may set handlers.
    caught = [number for number in STOP_SIGNALS if signal.getsignal(number) != signal.SIG_IGN
              ] if threading.current_thread() is threading.main_thread() else []
    previous = {number: signal.signal(number, _stop_now) for number in caught}
    try:
        _serve(args, log, caught)
    except KeyboardInterrupt as stop:  # a stop signal, or Ctrl-C where the loop cannot catch it
        if isinstance(stop, _Stopped):
            log.info("stopping on %s", stop)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    log.info("stopped")
    return 0


def _serve(args: argparse.Namespace, log: logging.Logger,
           stop_signals: list[signal.Signals]) -> None:
    try:
        # the optional `mcp` extra, imported lazily
        from ..agents._mcp import serve_stdio  # noqa: PLC0415
    except ImportError as error:
        if (error.name or "").split(".")[0] not in ("mcp", "anyio"):
            raise
        raise UsageError(f"the MCP server needs the `mcp` package: {MCP_INSTALL}") from None
    with contextlib.closing(port_device(args)) as device:
        identity = device_call(args, device.identify)  # a silent device fails here, at once
        gate, session = open_gate(args, device)
        with gate:  # closing it commits the last audit records
            log.info("serving MCP on stdio: tools %s on %s, session %s, audit log %s",
                     ", ".join(t for t in gate.tools if session.offers(t)), identity,
                     session.name,
                     gate.audit.path if gate.audit is not None else "off")
            serve_stdio(gate, session, stop_signals=stop_signals)
            for number in stop_signals:  # a second signal must not cut the audit flush short
                signal.signal(number, signal.SIG_IGN)


def add_parser(sub: Any) -> None:
    """Add ``regdev serve`` to the subcommands."""
    serve = sub.add_parser(
        "serve", help="run the MCP server on stdio (for Claude Desktop and other MCP clients)",
        description="Serve the register tools over MCP on stdin/stdout (write_register and "
                    "read_register; with --map FILE, the tools of that register map), on a "
                    "fresh in-process register file, or on the device at --port. Every "
                    "tools/call goes through the gate: "
                    "a refused call comes back as an isError result with the verdict code "
                    "and message. tools/list lists the tools the session is offered. stdout "
                    "carries protocol messages only; logs go to stderr. Ends when the client "
                    "closes stdin, or on SIGINT (Ctrl-C), SIGTERM or SIGHUP, with exit status "
                    "0 and every call recorded. An MCP client starts it with a minimal "
                    "environment (no $REGDEV_AUDIT): name the audit log with --audit PATH in "
                    "the client's config. Needs the mcp extra: scripts/serve, in a clone, "
                    "sets it up and runs this command (see README.md).")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                       default="info",
                       help="regdev's log level on stderr (default: info; debug logs "
                            "each call's verdict)")
    map_option(serve)
    port_options(serve)
    add_gate_options(serve)
    serve.set_defaults(func=cmd_serve)
