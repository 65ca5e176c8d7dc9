"""``regdev serve``: the MCP server on stdio, or over Streamable HTTP (``--http``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from ..core._errors import LineElsewhere, PolicyError, RegdevError
from ..devices._open import line_name, open_device
from ..devices._transaction import SharedLine
from ..gate._gate import Gate
from ..gate._providers import offered_tools
from ..server._access import Policy
from ..server._address import is_loopback, parse_address
from ._common import (
    STDOUT_CLOSED,
    UsageError,
    add_gate_options,
    device_call,
    device_options,
    load_policy,
    open_audit,
    open_gate,
    port_device,
    read_map,
)
from ._output import LogFormatter, output_failed

if TYPE_CHECKING:
    from ..server._http_limits import HttpLimits

#: How to get the ``mcp`` extra: installed as a tool, or in a clone.
MCP_INSTALL = ("pip install 'regdev[mcp]' (pipx install 'regdev[mcp]' for the command); in a "
               "clone of regdev, scripts/serve installs it into .venv and runs the server")


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


#: The options of ``regdev serve --http``'s limits (``HttpLimits``'s fields), with the help
#: each gets and its default (stated in ``HttpLimits``; checked by a test).
LIMIT_OPTIONS: dict[str, tuple[str, type, str]] = {
    "header_seconds": (
        "SECONDS", float, "seconds a connection has to send a request's headers, from its "
        "opening or from the first byte of a later request (408 after; default 5)"),
    "max_connections": (
        "N", int, "connections open at once; a request on one more gets 503 (default 512)"),
    "max_unauthenticated": (
        "N", int, "connections open at once on which no request has presented a valid "
        "token yet; one more closes the oldest, so they never fill --max-connections "
        "(default 64)"),
    "max_sessions": ("N", int, "MCP sessions open at once in all (503 beyond; default 512)"),
    "max_caller_sessions": (
        "N", int, "MCP sessions open at once per caller (429 beyond; default 8)"),
    "session_idle_seconds": (
        "SECONDS", float, "a session with no request for this long ends, and its id gets "
        "404 (default 300)"),
    "initialize_rate": (
        "N", int, "sessions one caller may open a minute (429 beyond; default 30)"),
}


def _limit_flags(args: argparse.Namespace) -> list[str]:
    """The limit options given on the command line."""
    return ["--" + name.replace("_", "-") for name in LIMIT_OPTIONS
            if getattr(args, name, None) is not None]


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    if args.http is None and (args.stateless or args.state_key_file is not None
                              or _limit_flags(args) or args.fleet is not None):
        flag = ("--stateless" if args.stateless else "--state-key-file"
                if args.state_key_file is not None else "--fleet"
                if args.fleet is not None else _limit_flags(args)[0])
        raise UsageError(f"{flag} goes with --http [HOST:]PORT")
    if args.fleet is not None and (args.port is not None or args.map is not None
                                   or args.baud is not None):
        raise UsageError("--fleet names each device's port (its line speed in the URL: "
                         "?baud=N) and map; give no --port, --baud or --map with it")
    if args.http is None and sys.stdout is None:  # fd 1 closed: nowhere to answer the client
        raise UsageError(f"cannot write the output: {STDOUT_CLOSED}")
    stderr = logging.StreamHandler(sys.stderr)  # each record one line, text escaped
    stderr.setFormatter(LogFormatter("regdev serve: %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[stderr])
    log = logging.getLogger("regdev")
    log.setLevel(args.log_level.upper())
    # Stop signals are caught from the start: importing the SDK alone takes a second or two,
    # and a client may give up and send SIGTERM meanwhile. One ignored when the process
    # started stays ignored (nohup's SIGHUP). Only the main thread may set handlers.
    caught = [number for number in STOP_SIGNALS if signal.getsignal(number) != signal.SIG_IGN
              ] if threading.current_thread() is threading.main_thread() else []
    previous = {number: signal.signal(number, _stop_now) for number in caught}
    try:
        failure = _serve(args, log, caught)
    except KeyboardInterrupt as stop:  # a stop signal, or Ctrl-C where the loop cannot catch it
        if isinstance(stop, _Stopped):
            log.info("stopping on %s", stop)
        failure = None
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if failure is not None:  # after the gate closed: the calls that ran are recorded
        return output_failed(failure, "serve")
    log.info("stopped")
    return 0


def _serve(args: argparse.Namespace, log: logging.Logger,
           stop_signals: list[signal.Signals]) -> OSError | None:
    """Serve until stopped; the OSError that stopped the stdio server writing its answers,
    if one did (the gate closed, its audit log committed, by then)."""
    if args.http is not None:
        _serve_http(args, log, stop_signals)
        return None
    try:
        # the optional `mcp` extra, imported lazily
        from ..server._approval import approvals_for  # noqa: PLC0415
        from ..server._mcp import serve_stdio  # noqa: PLC0415
    except ImportError as error:
        if (error.name or "").split(".")[0] not in ("mcp", "anyio"):
            raise
        raise UsageError(f"the MCP server needs the `mcp` package: {MCP_INSTALL}") from None
    with contextlib.closing(port_device(args)) as device:
        identity = device_call(args, device.identify)  # a silent device fails here, at once
        policy = load_policy(args)
        approve = approvals_for(policy, device) if policy is not None else None
        gate, session = open_gate(args, device, policy=policy, approve=approve)
        with gate:  # closing it commits the last audit records
            log.info("serving MCP on stdio: tools %s on %s, session %s, audit log %s",
                     ", ".join(t.name for t in offered_tools(gate.tools, session)), identity,
                     session.name,
                     gate.audit.name if gate.audit is not None else "off")
            try:
                serve_stdio(gate, session, stop_signals=stop_signals, approvals=approve,
                            proposer=args.proposer)
            except OSError as error:  # stdout failed: no client left to answer
                failure: OSError | None = error
            else:
                failure = None
            for number in stop_signals:  # a second signal must not cut the audit flush short
                signal.signal(number, signal.SIG_IGN)
    return failure


def _serve_http(args: argparse.Namespace, log: logging.Logger,
                stop_signals: list[signal.Signals]) -> None:
    try:
        host, port = parse_address(args.http)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.session != "default":
        raise UsageError("--session is for stdio: over HTTP each bearer token's scopes choose "
                         "its session (the policy's http.scopes)")
    limits = _limits(args)
    policy = load_policy(args)
    if policy is None or policy.http is None:
        raise UsageError("--http needs --policy FILE with an [http] table: the bearer tokens "
                         "(or the OAuth server) of the callers it serves, and the sessions "
                         "their scopes choose (see docs/agents.md)")
    state_key = _state_key(args.state_key_file)
    try:
        # the optional `mcp` extra, imported lazily
        from ..server._approval import approvals_for  # noqa: PLC0415
        from ..server._http import serve_http  # noqa: PLC0415
    except ImportError as error:
        if (error.name or "").split(".")[0] not in ("mcp", "anyio", "jwt", "uvicorn",
                                                    "starlette", "h11"):
            raise
        raise UsageError(f"the MCP server needs the `mcp` extra: {MCP_INSTALL}") from None
    if args.fleet is not None:
        _serve_fleet(args, log, stop_signals, policy=policy, state_key=state_key,
                     limits=limits, host=host, port=port)
        return
    with contextlib.closing(port_device(args)) as device:
        identity = device_call(args, device.identify)  # a silent device fails here, at once
        approvals = approvals_for(policy, device, state_key)
        gate, _ = open_gate(args, device, policy=policy, approve=approvals)
        if gate.audit is not None:  # a store shared by several processes shares questions
            approvals.shared = gate.audit.shared_questions()
        with gate:  # closing it commits the last audit records
            assert isinstance(gate.policy, Policy)  # load_policy's, with the approver

            def ready(url: str) -> None:
                log.info("serving MCP over HTTP at %s (%s): tools %s on %s, audit log %s",
                         url, "stateless" if args.stateless else "sessions",
                         ", ".join(gate.tools), identity,
                         gate.audit.name if gate.audit is not None else "off")
                if not is_loopback(host):
                    log.warning("listening on %s, beyond this machine, in plain HTTP: put a "
                                "reverse proxy with TLS in front (docs/agents.md)", host)

            try:
                serve_http(gate, gate.policy, approvals, host=host, port=port,
                           stateless=args.stateless, stop_signals=stop_signals, ready=ready,
                           limits=limits, proposer=args.proposer)
            except OSError as error:
                raise UsageError(f"cannot listen on {args.http}: "
                                 f"{error.strerror or error}") from None
            for number in stop_signals:  # a second signal must not cut the audit flush short
                signal.signal(number, signal.SIG_IGN)


def _serve_fleet(args: argparse.Namespace, log: logging.Logger,
                 stop_signals: list[signal.Signals], *, policy: Policy,
                 state_key: bytes | None, limits: HttpLimits | None, host: str,
                 port: int) -> None:
    """``serve --http --fleet FILE``: every device of the fleet file, each at /mcp/NAME, with
    one audit log; nothing is served unless every device opens and answers."""
    from ..server._approval import approvals_for  # noqa: PLC0415  (the `mcp` extra)
    from ..server._fleet import FleetError, lease_guard, load_fleet  # noqa: PLC0415
    from ..server._http import serve_http  # noqa: PLC0415

    try:
        fleet = load_fleet(args.fleet)
    except FleetError as error:
        raise UsageError(str(error)) from None
    with contextlib.ExitStack() as stack:
        audit = None if args.no_audit else open_audit(args)
        if audit is not None:
            stack.callback(audit.close)
        # a shared store leases the serial lines (given up after the ports are closed)
        leases = (audit.line_leases(fleet.lease_seconds, fleet.renew_seconds)
                  if audit is not None else None)
        if leases is not None:
            stack.callback(leases.close)
        lines: dict[str, SharedLine] = {}
        devices = []
        for member in fleet.devices:
            if member.session is not None:
                try:
                    policy.session_policy(member.session)
                except PolicyError as error:
                    raise UsageError(f"{args.fleet}:{member.line}: {error}") from None
            try:
                regmap = read_map(member.map) if member.map is not None else None
                device = stack.enter_context(contextlib.closing(
                    open_device(member.port, regmap=regmap, timeout=args.timeout,
                                lines=lines)))
            except (RegdevError, ValueError) as error:
                raise UsageError(f"{args.fleet}:{member.line}: device {member.name}: "
                                 f"{error}") from None
            devices.append(device)
        elsewhere = set()
        for name, line in lines.items():  # a port that does not open fails here, at start
            if leases is not None and "://" not in name:  # a port of this host's, not a URL
                line.guard = lease_guard(leases)
            try:
                with line.lock:
                    line.check()
                    line.opened()
            except LineElsewhere as error:
                log.info("%s", error)  # its owner serves its devices
                elsewhere.add(name)
            except RegdevError as error:
                first = next(m for m in fleet.devices if line_name(m.port) == name)
                raise UsageError(f"{args.fleet}:{first.line}: device {first.name}: "
                                 f"{error}") from None
        for member, device in zip(fleet.devices, devices, strict=True):
            if line_name(member.port) not in elsewhere:
                device_call(args, device.identify)  # a silent device fails here, at once
        served = []
        for member, device in zip(fleet.devices, devices, strict=True):
            approvals = approvals_for(policy, device, state_key)
            if audit is not None:
                approvals.shared = audit.shared_questions()
            gate = Gate(device, policy=policy.model_copy(update={"approve": approvals}),
                        audit=audit)
            gate.warn = log.warning
            served.append((member.name, gate, approvals, member.session))

        def ready(url: str) -> None:
            log.info("serving MCP over HTTP at %s (%s): the devices %s at /mcp/NAME, audit "
                     "log %s", url.rsplit("/mcp/", 1)[0] + "/mcp", "stateless" if args.stateless
                     else "sessions", ", ".join(member.name for member in fleet.devices),
                     audit.name if audit is not None else "off")

        try:
            serve_http(served[0][1], policy, served[0][2], host=host, port=port,
                       stateless=args.stateless, stop_signals=stop_signals, ready=ready,
                       limits=limits, fleet=served)
        except OSError as error:
            raise UsageError(f"cannot listen on {args.http}: {error.strerror or error}") \
                from None
        for number in stop_signals:  # a second signal must not cut the audit flush short
            signal.signal(number, signal.SIG_IGN)


def _limits(args: argparse.Namespace) -> HttpLimits | None:
    """The ``HttpLimits`` of the options given (the defaults for the others); a value out of
    its range is a usage error naming the option."""
    try:
        from ..server._http_limits import HttpLimits  # noqa: PLC0415  (the `mcp` extra)
    except ImportError:
        return None  # said once the server is imported
    given = {name: getattr(args, name) for name in LIMIT_OPTIONS
             if getattr(args, name) is not None}
    try:
        return HttpLimits(**given)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _state_key(path: str | None) -> bytes | None:
    """The secret of ``--state-key-file``: the file's bytes, surrounding whitespace cut."""
    if path is None:
        return None
    try:
        with open(path, "rb") as file:
            key = file.read(4097).strip()
    except OSError as error:
        raise UsageError(f"cannot read the state key {path}: {error.strerror or error}") \
            from None
    if not 32 <= len(key) <= 4096:
        raise UsageError(f"the state key {path} must hold 32..4096 bytes (e.g. head -c 32 "
                         f"/dev/urandom | base64 > {path}), it holds {len(key)}")
    return key


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
                    "0 and every call recorded (an approval question still open is denied: "
                    "the server is stopping). An MCP client starts it with a minimal "
                    "environment (no $REGDEV_AUDIT): name the audit log with --audit PATH in "
                    "the client's config. Needs the mcp extra: scripts/serve, in a clone, "
                    "sets it up and runs this command (see README.md).")
    http = serve.add_argument_group("over HTTP")
    http.add_argument("--http", metavar="[HOST:]PORT",
                      help="serve MCP over Streamable HTTP at http://HOST:PORT/mcp instead of "
                           "stdio (HOST 127.0.0.1 by default; port 0 picks one and logs it); "
                           "needs a --policy with an [http] table naming the callers' bearer "
                           "tokens (see docs/agents.md)")
    http.add_argument("--fleet", metavar="FILE",
                      help="with --http: serve every device of this fleet file (TOML: "
                           "[devices.NAME] tables with port, unit, map, session; [leases] "
                           "seconds and renew_seconds for its serial lines on a PostgreSQL "
                           "store), each at /mcp/NAME, instead of --port "
                           "(docs/postgresql.md)")
    http.add_argument("--stateless", action="store_true",
                      help="with --http: no sessions, so several server processes can sit "
                           "behind one load balancer (a 2026-07-28 client is served "
                           "statelessly either way)")
    http.add_argument("--state-key-file", metavar="FILE",
                      help="with --http: the secret (32 bytes or more) that seals approval "
                           "questions for a client's second request; give every process "
                           "behind one load balancer the same (default: a random one)")
    for name, (metavar, kind, text) in LIMIT_OPTIONS.items():
        http.add_argument("--" + name.replace("_", "-"), metavar=metavar, type=kind,
                          help=f"with --http: {text}")
    serve.add_argument("--proposer", metavar="LABEL", type=_proposer_label,
                       help="the proposer recorded for every call in the audit log, e.g. "
                            "pydantic-ai:gpt-5 (an MCP client does not say which model "
                            "proposes; regdev report groups calls by it); default: the "
                            "client's name, mcp:NAME VERSION")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                       default="info",
                       help="regdev's log level on stderr (default: info; debug logs "
                            "each call's verdict)")
    device_options(serve)
    add_gate_options(serve)
    serve.set_defaults(func=cmd_serve)


def _proposer_label(text: str) -> str:
    """``--proposer``'s value: 1..200 characters of printable Unicode text."""
    if not 0 < len(text) <= 200 or not text.isprintable():
        raise argparse.ArgumentTypeError(
            "expected a label of 1..200 printable characters, e.g. pydantic-ai:gpt-5")
    return text
