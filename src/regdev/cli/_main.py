"""The ``regdev`` command line.

Exit codes: 0 success; 1 a call was refused or an expectation was not met; 2 a usage, file or
device-connection error (with a one-line message on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib.util
import io
import logging
import math
import os
import shlex
import shutil
import signal
import sys
import textwrap
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, TextIO, cast

import msgspec

from .._version import __version__
from ..agents._demo import DEMO_SCRIPT, ScriptedProposer
from ..agents._loop import Step, run_loop
from ..agents._providers import PROVIDER_FORMATS, tool_definitions
from ..agents._replay import ReplayFileError, load_replay, parse_replay, run_replay
from ..agents._shell import describe, format_registers, run_shell, shell_tools
from ..audit._log import (
    AuditLog,
    AuditRecord,
    default_audit_path,
    default_audit_root,
    find_loop,
    read_audit,
)
from ..core._errors import AuditError, AuditInUse, PolicyError, RegdevError, SchemaError
from ..devices._device import Device, RegisterFile
from ..devices._serial import MAX_BAUDRATE, SerialDevice
from ..gate._compile import generate_source
from ..gate._gate import Gate
from ..gate._parse import DIALECTS, load_json
from ..gate._policy import Policy, Session
from ..gate._tools import REGISTER_TOOLS, ToolSet

__all__ = ["main"]


class UsageError(Exception):
    """A command-line mistake: printed as one line, exit status 2."""


def _count(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural unless the number is 1: "1 call", "2 calls"."""
    return f"{number} {noun}{'s' * (number != 1)}"


def _json_line(value: Any, out: TextIO) -> None:
    out.write(msgspec.json.encode(value).decode() + "\n")


# --- commands ---------------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    with contextlib.closing(_port_device(args)) as device:
        gate, session = open_gate(args, device)
        with gate:
            return _demo(args, out, gate, session)


def _demo(args: argparse.Namespace, out: TextIO, gate: Gate, session: Session) -> int:
    notes = [note for note, _ in DEMO_SCRIPT]
    proposer = ScriptedProposer([raw for _, raw in DEMO_SCRIPT])
    if not args.json:
        identity = _device_call(args, gate.device.identify)
        where = ("the in-process register file" if args.port is None
                 else f"the device on {args.port}")
        out.write(f"regdev demo: a scripted agent drives {where} through the gate.\n")
        out.write(f"device: {identity}; tools: {', '.join(gate.tools)}; one retry after a "
                  "refusal.\n\n")

    def show(step: Step) -> None:
        index = proposer.calls
        if args.json:
            _json_line({"step": index, "retry": step.retry, "raw": step.raw,
                        "observation": step.observation.to_dict()}, out)
            return
        label = f"step {index}" + (" (retry)" if step.retry else "")
        out.write(f"{label:<16}model: {notes[index - 1]}\n")
        out.write(f"{'':<16}sends {step.raw!s}\n")
        out.write(f"{'':<16}{describe(step.observation)}\n\n")

    result = run_loop(proposer, gate, on_step=show, session=session)
    registers = _device_call(args, gate.device.snapshot)
    if args.json:
        _json_line({"stop": result.stop, "detail": result.detail}, out)
        _json_line({"registers": registers}, out)
    else:
        out.write(f"loop stopped: {result.stop} ({result.detail})\n\n")
        out.write("registers after the session:\n" + format_registers(registers) + "\n")
        _audit_note(gate, out)
    return 0


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    try:
        records = _stdin_replay() if args.file == "-" else load_replay(args.file)
    except ReplayFileError as error:
        raise UsageError(str(error)) from None
    _check_tool_choice(args.tool_choice, REGISTER_TOOLS)  # before a port is opened
    with contextlib.closing(_port_device(args)) as device:
        gate, session = open_gate(args, device)
        with gate:
            if args.reset:  # through the gate: the reset ends the device's idempotency keys
                _device_call(args, gate.reset_device)
            return _replay(args, out, records, gate, session)


def _stdin_replay() -> list[tuple[int, Any]]:
    """The replay records on standard input (``regdev replay -``), named ``<stdin>``."""
    _check_stdin()
    try:
        data = sys.stdin.buffer.read()
    except OSError as error:
        raise UsageError(f"cannot read the standard input: {error.strerror or error}") from None
    return parse_replay(data, "<stdin>")


def _replay(args: argparse.Namespace, out: TextIO, records: list[tuple[int, Any]], gate: Gate,
            session: Session) -> int:
    outcomes = run_replay(records, gate, dialect=args.dialect, tool_choice=args.tool_choice,
                          session=session)
    failed = 0
    if not args.json:
        out.write(f"{'line':<9}  {'expect':<7}  verdict\n")
    for outcome in outcomes:
        failed += outcome.expect_met is False
        if args.json:
            _json_line(outcome.to_dict(), out)
            continue
        mark = {True: "met", False: "NOT MET", None: "-"}[outcome.expect_met]
        out.write(f"line {outcome.line:>4}  {mark:<7}  {describe(outcome.observation)}\n")
        if outcome.expect_met is False:
            want = outcome.record.expect or "ok"
            if outcome.record.result is not None:
                want += f" with result {msgspec.json.encode(outcome.record.result).decode()}"
            out.write(f"{'':<20}expected {want}\n")
    try:  # every line ran: a failed dump must not lose their results
        registers, unread = _device_call(args, gate.device.snapshot), None
    except UsageError as error:
        registers, unread = None, f"the registers could not be read after the replay: {error}"
    if args.json:
        _json_line({"registers": registers} if unread is None
                   else {"registers": None, "error": unread}, out)
    else:
        checked = sum(o.expect_met is not None for o in outcomes)
        out.write(f"\n{_count(len(outcomes), 'call')}, {checked} with expectations, {failed} "
                  "not met\n")
        if registers is not None:
            out.write("registers after the replay:\n" + format_registers(registers) + "\n")
        _audit_note(gate, out)
    if unread is not None:
        out.flush()  # the results first, then the error
        print(f"regdev replay: error: {unread}", file=sys.stderr)
        return 2
    return 1 if failed else 0


def cmd_call(args: argparse.Namespace, out: TextIO) -> int:
    _check_tool_choice(args.tool_choice, REGISTER_TOOLS)
    if args.raw == "-":
        _check_stdin()
    gate, session = open_gate(args)
    with gate:
        # stdin is read as bytes, at most one byte over the cap: the gate refuses it as too-large
        raw = sys.stdin.buffer.read(gate.max_input_bytes + 1) if args.raw == "-" else args.raw
        observation = gate.handle(raw, dialect=args.dialect, tool_choice=args.tool_choice,
                                  session=session)
    _json_line(observation.to_dict(), out)
    if observation.code == "not-json" and args.raw != "-" and _names_a_file(args.raw):
        print(f"regdev call: hint: RAW is the call's JSON text; to send a file's contents "
              f"use: regdev call - < {shlex.quote(args.raw)}", file=sys.stderr)
    return 0 if observation.ok else 1


def _names_a_file(text: str) -> bool:
    """Whether ``text`` is the name of an existing file (no error for text that cannot be one:
    too long, or holding a NUL)."""
    try:
        return Path(text).is_file()
    except (OSError, ValueError):
        return False


def _check_tool_choice(tool_choice: str | None, tools: ToolSet) -> None:
    """``--tool-choice`` must name one of ``tools`` (the gate would raise ValueError)."""
    if tool_choice is not None and tool_choice not in tools:
        raise UsageError(f"--tool-choice {tool_choice} is not one of the tools offered: "
                         f"{', '.join(tools)}")


# --- policy and audit (shared by every command that runs calls) -------------------------------


def add_gate_options(p: argparse.ArgumentParser) -> None:
    """Add ``--policy``, ``--session``, ``--audit``, ``--no-audit`` and ``--durability``."""
    group = p.add_argument_group("policy and audit")
    group.add_argument("--policy", metavar="FILE",
                       help="a policy file (TOML, or JSON for other suffixes): sessions, "
                            "read-only and protected registers, rate limits, timeout; see "
                            "docs/safety.md")
    group.add_argument("--session", metavar="NAME", default="default",
                       help="run the calls as this session of the policy (default: default)")
    where = group.add_mutually_exclusive_group()
    where.add_argument("--audit", metavar="PATH", type=Path,
                       help="record every call in this SQLite audit log (default: "
                            "$REGDEV_AUDIT, else $XDG_STATE_HOME/regdev/audit.db, i.e. "
                            "~/.local/state/regdev/audit.db; when that default cannot be "
                            "created, a warning and no audit log; one process writes a "
                            "database at a time)")
    where.add_argument("--no-audit", action="store_true",
                       help="record nothing (idempotency keys are then ignored too)")
    group.add_argument("--durability", choices=("crash", "power-loss"), default="crash",
                       help="crash: a recorded write survives the process being killed "
                            "(default); power-loss: it survives power loss too (slower: one "
                            "fsync per write)")


def open_gate(args: argparse.Namespace, device: Device | None = None,
              tools: ToolSet = REGISTER_TOOLS) -> tuple[Gate, Session]:
    """The gate (on ``device``, offering ``tools``) and the session that the options of
    :func:`add_gate_options` ask for. Close the gate when done: that commits the audit log.

    Raises:
        UsageError: the policy file is invalid, the session is not declared, or the audit log
            the user named (``--audit``, ``$REGDEV_AUDIT``) cannot be opened (the default one
            failing is a warning on stderr, see :func:`_open_audit`).
    """
    policy = _load_policy(args)
    audit = None if args.no_audit else _open_audit(args)
    try:
        gate = Gate(device, tools, policy=policy, audit=audit)
        return gate, gate.session(args.session)
    except PolicyError as error:  # the policy names a session or a tool that is not there
        if audit is not None:
            audit.close()
        raise UsageError(f"{args.policy}: {error}" if args.policy else str(error)) from None
    except BaseException:
        if audit is not None:
            audit.close()
        raise


def _load_policy(args: argparse.Namespace) -> Policy | None:
    """The policy of ``--policy`` (None without one); ``--session`` must be declared in it.

    Raises:
        UsageError: the policy file is invalid or does not declare the session, or a session
            other than ``default`` is asked for without a policy.
    """
    if args.policy is None:
        if args.session != "default":
            raise UsageError(f"--session {args.session} needs --policy FILE, a policy that "
                             "declares it (without a policy the only session is default)")
        return None
    try:
        policy = Policy.from_file(args.policy)
    except PolicyError as error:
        raise UsageError(str(error)) from None
    try:
        policy.session_policy(args.session)
    except PolicyError as error:
        raise UsageError(f"{args.policy}: {error}") from None
    return policy


def _open_audit(args: argparse.Namespace) -> AuditLog | None:
    """The audit log of ``--audit``, ``$REGDEV_AUDIT`` or the default path.

    A path the user gave that cannot be opened, or whose directory does not exist (it is not
    created), is an error. The default path (under ``$XDG_STATE_HOME`` or ``~/.local/state``)
    is only a convenience: its folders are created only when ``$XDG_STATE_HOME`` (when set) or
    the home directory exists; when it cannot be used (a read-only or missing home, as an MCP
    client, a service or a container may give), the command warns in one line on stderr and
    runs without an audit log. Another regdev process writing the database is an error
    whichever path it is (:class:`~regdev.AuditInUse`): quietly running without an audit log,
    nor its idempotency keys, is not what the user asked for.

    Raises:
        UsageError: the path given with ``--audit`` or ``$REGDEV_AUDIT`` cannot be opened, or
            its directory does not exist; or another process writes the database.
    """
    given = args.audit is not None or bool(os.environ.get("REGDEV_AUDIT"))
    path = args.audit or default_audit_path()
    advice = "choose another file with --audit PATH, or record nothing with --no-audit"
    if given and not path.parent.exists():  # a typo in a path is not a folder to create
        raise UsageError(f"the directory {path.parent} does not exist ({advice})")
    root = default_audit_root()
    try:
        if not given and not root.exists():  # a missing home is not made: no log, a warning
            home = "the home directory" if root == Path.home() else "$XDG_STATE_HOME"
            raise AuditError(f"the default audit log {path} cannot be used: {home} {root} "
                             "does not exist")
        return AuditLog(path, durability=args.durability)
    except AuditInUse as error:  # the default too: running unaudited unasked would be worse
        raise UsageError(f"{error}; give this one its own with --audit PATH, or --no-audit") \
            from None
    except AuditError as error:
        if given:
            raise UsageError(f"{error} ({advice})") from None
        print(f"regdev {args.command}: warning: {error}; going on without an audit log "
              "(--audit PATH to record one elsewhere, --no-audit to say so)", file=sys.stderr)
        return None


def _audit_note(gate: Gate, out: TextIO) -> None:
    if gate.audit is not None:
        out.write(f"\nrecorded in the audit log {gate.audit.path} "
                  f"(regdev audit --db {gate.audit.path})\n")


# --- regdev audit -----------------------------------------------------------------------------


def _parse_time(text: str, option: str) -> float:
    """ISO 8601 (UTC when no offset is given) or Unix seconds, as Unix seconds."""
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise UsageError(f"{option}: expected a time, got {text!r}, which is not a finite "
                             "number of Unix seconds")
        return seconds
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{option}: expected an ISO 8601 time such as 2024-05-01T12:00 or "
                         f"2024-05-01T12:00+02:00 (UTC when no offset), or Unix seconds; got "
                         f"{text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _show_record(record: AuditRecord) -> str:
    when = datetime.fromtimestamp(record.time, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    head = f"{record.id:>6}  {when}Z  {record.session:<10}"
    loop = f"  loop {record.loop_id[:8]}" if record.loop_id else ""
    if record.event == "stop":
        return (f"{head}  loop stop: {record.code} ({record.message}){loop}, "
                f"{_count(record.step or 0, 'step')}")
    verdict = "accepted" if record.ok else f"refused {record.stage}/{record.code}"
    extras = []
    if record.idempotency_key is not None:
        extras.append(f"key {record.idempotency_key!r}")
    if record.replay:
        extras.append("replayed (not executed)")
    if record.loop_id:
        extras.append(f"loop {record.loop_id[:8]} step {record.step}")
    total = sum(t for t in (record.parse_ns, record.validate_ns, record.authorize_ns,
                            record.execute_ns, record.observe_ns) if t is not None)
    extras.append(f"{total / 1000:.0f} us")
    call = f"{record.tool or '-'} {record.arguments or ''}".strip()
    return f"{head}  {record.dialect or '-':<9}  {verdict:<28}  {call}  ({', '.join(extras)})"


#: The largest integer SQLite stores (a signed 64-bit INTEGER): the bound of --last.
MAX_SQL_INTEGER = 2**63 - 1


def cmd_audit(args: argparse.Namespace, out: TextIO) -> int:
    if args.last is not None and not 1 <= args.last <= MAX_SQL_INTEGER:  # SQLite's INTEGER
        raise UsageError(f"--last must be a number of records in 1..{MAX_SQL_INTEGER}, "
                         f"got {args.last}")
    since = _parse_time(args.since, "--since") if args.since else None
    until = _parse_time(args.until, "--until") if args.until else None
    path = args.db or default_audit_path()
    try:
        loop_id = find_loop(path, args.loop) if args.loop is not None else None
        records = read_audit(path, session=args.session, code=args.code, since=since,
                             until=until, loop_id=loop_id, last=args.last)
    except AuditError as error:
        raise UsageError(str(error)) from None
    for record in records:
        if args.json:
            _json_line(record.to_dict(), out)
        else:
            out.write(_show_record(record) + "\n")
    if not args.json:
        out.write(f"{_count(len(records), 'record')} in {path}\n")
    return 0


# --- serial port: the device behind --port, the shell, the firmware simulator -----------------


def _port_device(args: argparse.Namespace) -> Device:
    """The device the command runs on: the serial device at ``--port``, else in process.

    Raises:
        UsageError: ``--timeout``, ``--baud`` or ``--reset`` without ``--port``, or out of
            range; or the port cannot be opened.
    """
    if args.port is None:
        given = [option for option, value in (("--timeout", args.timeout), ("--baud", args.baud))
                 if value is not None]
        if getattr(args, "reset", False):  # replay's
            given.append("--reset")
        if given:
            raise UsageError(f"{' and '.join(given)} go{'es' * (len(given) == 1)} with "
                             "--port URL (without --port the device is in process)")
        return RegisterFile()
    timeout = 0.5 if args.timeout is None else args.timeout
    baudrate = 115200 if args.baud is None else args.baud
    if not math.isfinite(timeout) or timeout <= 0:
        raise UsageError(f"--timeout must be a number of seconds > 0, got {timeout:g}")
    if not 1 <= baudrate <= MAX_BAUDRATE:
        raise UsageError(f"--baud must be 1..{MAX_BAUDRATE} (baud), got {baudrate}")
    try:
        return SerialDevice(args.port, baudrate=baudrate, timeout=timeout)
    except (RegdevError, ValueError) as error:
        raise UsageError(str(error)) from None


def _device_call(args: argparse.Namespace, action: Any) -> Any:
    """Run a device call outside the gate (identify, dump, reset); a failure is one line."""
    try:
        return action()
    except RegdevError as error:
        where = f" on {args.port}" if getattr(args, "port", None) else ""
        raise UsageError(f"the device{where} failed: {error}") from None


def cmd_shell(args: argparse.Namespace, out: TextIO) -> int:
    _check_stdin()
    interactive = sys.stdin.isatty()
    if interactive:
        import readline  # noqa: F401, PLC0415 - line editing and history for input()
    with contextlib.closing(_port_device(args)) as device:
        gate: Gate

        def reset(runner: Device) -> None:  # the gate is made with the tools: looked up late
            gate.reset_device(runner)  # the reset ends the device's idempotency keys

        gate, session = open_gate(args, device, shell_tools(reset))
        with gate:
            return run_shell(gate, session, out, where=args.port or "the in-process register "
                             "file", interactive=interactive)


def _firmware_sim_module() -> ModuleType:
    """The firmware simulator, from ``firmware-sim/`` in the source tree regdev runs from."""
    if "regdev_firmware_sim" in sys.modules:
        return sys.modules["regdev_firmware_sim"]
    path = Path(__file__).resolve().parents[3] / "firmware-sim" / "regdev_firmware_sim.py"
    spec = importlib.util.spec_from_file_location("regdev_firmware_sim", path)
    if not path.is_file() or spec is None or spec.loader is None:
        raise UsageError("the firmware simulator lives in the source tree (firmware-sim/), "
                         f"not found at {path}; run regdev from a clone (pip install -e .)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


#: What each fault kind of ``--fault KIND=RATE`` does to a reply (the simulator's docstring).
FAULT_HELP = {
    "drop": "one byte of the reply is lost (the host sees a bad or short frame)",
    "corrupt": "one byte of the reply is changed (the host sees a checksum or syntax error)",
    "delay": "the reply is sent --delay SECONDS late (past the host's --timeout)",
    "garbage": "1..20 random bytes are sent before the reply, between frames",
    "disconnect": "the link is cut instead of replying (TCP: the socket is closed; pty: a "
                  "new pty replaces the old one, at --link PATH)",
    "busy": "the device answers `e BUSY` and does not run the request",
}


def cmd_firmware_sim(args: argparse.Namespace, out: TextIO) -> int:
    module = _firmware_sim_module()
    if {"-h", "--help"} & set(args.args):  # the simulator's help, with what each fault does
        parser = module.build_parser("regdev firmware-sim")
        parser.epilog = None
        width = max(shutil.get_terminal_size().columns - 2, 40)  # as argparse wraps
        out.write(parser.format_help() + "\n" + textwrap.fill(
            "fault kinds (--fault KIND=RATE): at most one fault per reply; a request runs "
            "before its reply is faulted (except busy), so a write whose reply is lost has "
            "happened.", width) + "\n")
        for kind in module.FAULT_KINDS:
            out.write(textwrap.fill(FAULT_HELP[kind], width, initial_indent=f"  {kind:<12}",
                                    subsequent_indent=" " * 14) + "\n")
        out.write("\nexample: regdev firmware-sim --pty --fault drop=0.05,corrupt=0.02 "
                  "--seed 7 -v\n")
        return 0
    status: int = module.main(args.args, prog="regdev firmware-sim")
    return status


def add_serial_commands(sub: Any, port_options: Any) -> None:
    """Add ``shell`` and ``firmware-sim`` to the subcommands."""
    shell = sub.add_parser(
        "shell", help="an interactive prompt for engineers: read, write, dump, identify, reset",
        description="Each command is a tool call through the gate, and its verdict is shown. "
                    "Without --port it drives an in-process register file.")
    port_options(shell)
    add_gate_options(shell)
    shell.set_defaults(func=cmd_shell)
    sim = sub.add_parser(
        "firmware-sim", add_help=False, prefix_chars="+",
        help="serve the simulated device on a pty or a TCP port (--help for its options)",
        description="The device side of docs/protocol.md with seeded fault injection.")
    sim.add_argument("args", nargs=argparse.REMAINDER)
    sim.set_defaults(func=cmd_firmware_sim)


def cmd_tools(args: argparse.Namespace, out: TextIO) -> int:
    session = None
    policy = _load_policy(args)
    if policy is not None:
        try:
            with Gate(policy=policy) as gate:  # checks the session and its tools as serve does
                session = gate.session(args.session)
        except PolicyError as error:  # the session names a tool that is not there
            raise UsageError(f"{args.policy}: {error}") from None
    definitions = tool_definitions(args.format, session=session)
    out.write(msgspec.json.format(msgspec.json.encode(definitions), indent=2).decode() + "\n")
    return 0


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
    with contextlib.closing(_port_device(args)) as device:
        identity = _device_call(args, device.identify)  # a silent device fails here, at once
        gate, session = open_gate(args, device)
        with gate:  # closing it commits the last audit records
            log.info("serving MCP on stdio: tools %s on %s, session %s, audit log %s",
                     ", ".join(t for t in gate.tools if session.offers(t)), identity,
                     session.name,
                     gate.audit.path if gate.audit is not None else "off")
            serve_stdio(gate, session, stop_signals=stop_signals)
            for number in stop_signals:  # a second signal must not cut the audit flush short
                signal.signal(number, signal.SIG_IGN)


def _load_tools(path: str | None) -> ToolSet:
    """The register tools, or the tool set in a JSON file (UsageError when it is unusable)."""
    if path is None:
        return REGISTER_TOOLS
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        tools = ToolSet.from_json(data)
    except SchemaError as error:
        provider = _provider_format(data)
        if provider is not None:
            raise UsageError(f"{path} looks like the {provider} format; regdev compile reads "
                             "MCP tools/list entries (regdev tools --format mcp)") from None
        raise UsageError(f"{path}: {error}") from None
    if not tools:  # a validator that refuses every call as unknown-tool: surely a mistake
        raise UsageError(f"{path} declares no tools (an array of MCP tools/list entries, or "
                         '{"tools": [...]}, with at least one)')
    return tools


def _provider_format(data: bytes) -> str | None:
    """``"OpenAI"`` or ``"Anthropic"`` when the first tool in ``data`` (JSON text: an array,
    or ``{"tools": [...]}``) has that provider's shape and not MCP's, else None."""
    try:
        doc = load_json(data)
    except ValueError:
        return None
    entries = doc.get("tools") if isinstance(doc, dict) else doc
    first = entries[0] if isinstance(entries, list) and entries else None
    if not isinstance(first, dict) or "inputSchema" in first:
        return None
    if first.get("type") == "function" or "parameters" in first:  # Chat Completions, Responses
        return "OpenAI"
    return "Anthropic" if "input_schema" in first else None


def cmd_compile(args: argparse.Namespace, out: TextIO) -> int:
    tools = _load_tools(args.tools)
    try:
        source = generate_source(tools)
    except SchemaError as error:  # pragma: no cover - the tool set was checked when loaded
        raise UsageError(str(error)) from None
    if args.output in (None, "-"):
        out.write(source)
        return 0
    try:
        Path(args.output).write_text(source, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write {args.output}: {error.strerror or error}") from None
    print(f"regdev compile: wrote {args.output} ({_count(len(tools), 'tool')}: "
          f"{', '.join(tools)}); it needs only the standard library: "
          "check(call, tool_choice=None)", file=sys.stderr)
    return 0


def cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    from ..gate._bench import all_agree, format_table, run_bench  # noqa: PLC0415 - imports the peers

    if args.quick and args.rounds is not None:
        raise UsageError("--quick and --rounds cannot be used together (--quick is 3 rounds "
                         "of 2 ms batches)")
    if args.quick:
        rounds, batch = 3, 0.002
    else:
        rounds, batch = 25 if args.rounds is None else args.rounds, 0.01
    if rounds < 1:
        raise UsageError("--rounds must be at least 1")
    result = run_bench(rounds=rounds, batch_seconds=batch, progress=sys.stderr)
    if args.json:
        _json_line(result.to_dict(), out)
    else:
        out.write(format_table(result) + "\n")
    return 0 if all_agree(result) else 1


# --- parser -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for ``regdev`` and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="regdev",
        description=(
            "A validating tool backend for a 16-register, 8-bit device driven by "
            "language-model agents. Every tool call is parsed, validated, authorized and only "
            "then executed; a refusal names one stage and one code (see docs/errors.md). "
            "Every call is recorded in an audit log (see docs/safety.md)."
        ),
        epilog="Exit status: 0 ok; 1 a call refused or an expectation not met; 2 usage, "
               "file or device-connection error.",
    )
    parser.add_argument("--version", action="version", version=f"regdev {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def port_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--port", metavar="URL",
                       help="run against the device on this serial port instead of in process: "
                            "/dev/ttyUSB0, COM3, socket://HOST:PORT or rfc2217://HOST:PORT "
                            "(see docs/protocol.md)")
        p.add_argument("--timeout", metavar="SECONDS", type=float,
                       help="with --port: seconds to wait for each reply (default 0.5)")
        p.add_argument("--baud", metavar="N", type=int,
                       help=f"with --port: line speed in baud, 1..{MAX_BAUDRATE} (default "
                            "115200; ignored by socket://)")

    def dialect_options(p: argparse.ArgumentParser, default_help: str) -> None:
        p.add_argument("--dialect", choices=DIALECTS, default="canonical",
                       help=f"shape of the raw calls (default: canonical). {default_help}")
        p.add_argument("--tool-choice", metavar="TOOL",
                       help="force this tool: a call naming any other is refused (wrong-tool)")

    demo = sub.add_parser(
        "demo", help="watch a scripted agent drive a device through the gate (in process, or "
                     "the one at --port)",
        description="A scripted agent makes accepted calls, a refused call corrected on its "
                    "retry, and a refusal whose retry is refused too; then the registers are "
                    "dumped. It drives a fresh in-process register file, or the device at "
                    "--port.")
    demo.add_argument("--json", action="store_true",
                      help="one JSON object per step, then the stop reason and the registers")
    port_options(demo)
    add_gate_options(demo)
    demo.set_defaults(func=cmd_demo)

    replay = sub.add_parser(
        "replay", help="run recorded model outputs (JSONL) and check their expectations",
        description="Each line of FILE is a JSON object with `raw` (the model's output text) "
                    "and optionally `dialect`, `expect` (`ok` or a verdict code of "
                    "docs/errors.md; anything else is a file error), `result` "
                    "(the expected result object) and `why`. Lines run in order against one "
                    "device, so writes are seen by later reads: a fresh in-process register "
                    "file, or the device at --port (add --reset to start it from its reset "
                    "values). Exit 0 when "
                    "every expectation is met, 1 when any is not, 2 for a file error.")
    replay.add_argument("file", metavar="FILE",
                        help="JSONL file of recorded calls, or - to read them from standard "
                             "input")
    dialect_options(replay, "A line's own `dialect` wins.")
    replay.add_argument("--json", action="store_true",
                        help="one JSON object per line, then {\"registers\": [16 ints]} (or "
                             "{\"registers\": null, \"error\": TEXT} when the registers "
                             "could not be read after the calls: exit 2). A file error "
                             "(exit 2, nothing run) stays one line of text on stderr, as "
                             "without --json")
    port_options(replay)
    replay.add_argument("--reset", action="store_true",
                        help="with --port: reset the device before the replay (without "
                             "--port the device is a fresh in-process one)")
    add_gate_options(replay)
    replay.set_defaults(func=cmd_replay)

    call = sub.add_parser(
        "call", help="run one raw call against a fresh in-process device",
        description="Print the observation as one line of JSON. Exit 0 when the call was "
                    "accepted, 1 when refused.")
    call.add_argument("raw", metavar="RAW", help="the call as JSON text, or - to read stdin")
    dialect_options(call, "")
    add_gate_options(call)
    call.set_defaults(func=cmd_call)
    add_serial_commands(sub, port_options)

    tools = sub.add_parser(
        "tools", help="print the tool definitions in a provider's format (JSON)",
        description="Print the tools as one provider declares them to a model, as a JSON "
                    "array: mcp (tools/list entries with inputSchema and annotations), openai "
                    "(Chat Completions tools in strict mode) or anthropic (Messages API tools "
                    "with input_schema). All three come from the one registry. With --policy "
                    "and --session, only the tools that session is offered (as `regdev serve` "
                    "lists them).")
    tools.add_argument("--format", choices=PROVIDER_FORMATS, default="mcp",
                       help="which provider's shape (default: mcp)")
    tools.add_argument("--policy", metavar="FILE",
                       help="a policy file (TOML, or JSON for other suffixes); see "
                            "docs/safety.md")
    tools.add_argument("--session", metavar="NAME", default="default",
                       help="list only the tools this session of the policy is offered "
                            "(default: default)")
    tools.set_defaults(func=cmd_tools)

    serve = sub.add_parser(
        "serve", help="run the MCP server on stdio (for Claude Desktop and other MCP clients)",
        description="Serve write_register and read_register over MCP on stdin/stdout, on a "
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
    port_options(serve)
    add_gate_options(serve)
    serve.set_defaults(func=cmd_serve)

    audit = sub.add_parser(
        "audit", help="show, filter and export the audit log",
        description="Show the records of an audit log, oldest first: every call (accepted or "
                    "refused) with its session, dialect, verdict, tool, arguments, "
                    "idempotency key and time spent, and every loop's stop. Filters combine. "
                    "Times are shown in UTC.")
    audit.add_argument("--db", metavar="PATH", type=Path,
                       help="the audit database (default: $REGDEV_AUDIT, else "
                            "$XDG_STATE_HOME/regdev/audit.db, i.e. "
                            "~/.local/state/regdev/audit.db)")
    audit.add_argument("--session", metavar="NAME", help="only this session's records")
    audit.add_argument("--code", metavar="CODE",
                       help="only this verdict code (e.g. range-addr, approval-denied), or a "
                            "loop stop reason; ok for accepted calls")
    audit.add_argument("--since", metavar="TIME",
                       help="only records at or after TIME: ISO 8601 (UTC unless it has an "
                            "offset) or Unix seconds")
    audit.add_argument("--until", metavar="TIME", help="only records before TIME")
    audit.add_argument("--loop", metavar="ID",
                       help="only the records of this loop: its id, or the start of it (the "
                            "8 characters shown are usually enough)")
    audit.add_argument("--last", metavar="N", type=int,
                       help="only the last N matching records (N >= 1)")
    audit.add_argument("--json", action="store_true",
                       help="one JSON object per record (every column; arguments and "
                            "observation as JSON values)")
    audit.set_defaults(func=cmd_audit)
    compile_ = sub.add_parser(
        "compile", help="write the compiled validator as a standalone Python module",
        description="Compile tool schemas (the built-in register tools, or --tools FILE) into "
                    "a Python module that needs only the standard library and defines "
                    "check(call, tool_choice=None): None for a valid canonical call "
                    '{"tool": NAME, "arguments": {...}}, else the verdict code. A schema '
                    "keyword outside the supported subset (docs/validator.md) is an error "
                    "naming the keyword and its JSON Pointer, exit 2.")
    compile_.add_argument("--tools", metavar="FILE",
                          help="JSON file of tool definitions: an array of MCP tools/list "
                               'entries ({"name", "inputSchema", ...}) or {"tools": [...]}, '
                               "as `regdev tools > tools.json` writes them (not the openai or "
                               "anthropic format); default: the register tools")
    compile_.add_argument("-o", "--output", metavar="OUT",
                          help="write the module to OUT (default: standard output)")
    compile_.set_defaults(func=cmd_compile)

    bench = sub.add_parser(
        "bench", help="time the compiled validator against the reference, a hand-written "
                      "floor and the peers (pydantic, fastjsonschema, jsonschema, msgspec)",
        description="Print one report measured in one run: ns per call (median of batches "
                    "interleaved round by round) of regdev's validator and of each peer, on "
                    "decoded call objects and on raw JSON text, for 9 cases (valid write and "
                    "read, wrong type, out of range, missing field, unknown argument, unknown "
                    "tool, a long unknown argument, a call padded with whitespace). Each row "
                    "names the library, its installed version, the API called and what it "
                    "builds on a refusal. Ratios are peer time / regdev time, written as "
                    "'8.3x slower' or '2.0x faster' than regdev. Before timing, every "
                    "contender's verdict (valid or refused) is checked against regdev's on "
                    "every case; a case it disagrees on is not timed and is named below the "
                    "table. Peers that are not installed are listed as such (scripts/test "
                    "installs them; or, in a clone, .venv/bin/pip install -e '.[bench]'). "
                    "Progress goes to stderr.",
        epilog="Exit status: 0 ok; 1 a contender disagreed with regdev's verdict on a case; "
               "2 usage error.")
    bench.add_argument("--json", action="store_true", help="print the result as one JSON object")
    bench.add_argument("--quick", action="store_true",
                       help="a short run for a first look or CI: 3 rounds of 2 ms batches per "
                            "cell (about 1-2 s); figures are rough. Not with --rounds")
    bench.add_argument("--rounds", type=int, metavar="N",
                       help="N rounds of 10 ms batches per cell, the median shown (default 25, "
                            "10-20 s). Not with --quick")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``regdev`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    if sys.stderr is None:  # file descriptor 2 closed (`2>&-`): errors go nowhere, not to stdout
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 -- for the life of the process
    parser = build_parser()
    out = _Output(sys.stdout)
    try:
        with contextlib.redirect_stdout(out):  # --help and --version write there, then exit 0
            args = parser.parse_args(argv)
    except SystemExit as stop:
        if stop.code != 0:  # a usage error: argparse wrote it on stderr
            raise
        with contextlib.suppress(OSError):  # argparse ignores a failed write: it is kept
            out.flush()
        if out.failure is None:
            raise
        words = sys.argv[1:] if argv is None else list(argv)
        return _output_failed(out.failure, next((w for w in words if w[:1] != "-"), None))
    try:
        status: int = args.func(args, cast(TextIO, out))
        out.flush()  # here, not at exit: a write that fails is this command's failure
    except UsageError as error:
        print(f"regdev {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"regdev {args.command}: interrupted", file=sys.stderr)
        return 130
    except OSError as error:
        if error is not out.failure:
            raise
        return _output_failed(error, args.command)
    return status


def _output_failed(error: OSError, command: str | None) -> int:
    """Report a failed write to standard output in one line (none for a closed pipe); the
    exit status, 1: the output is incomplete, never a success."""
    _drop_stdout()
    if not isinstance(error, BrokenPipeError):  # the reader went away (`| head`): silent
        name = "regdev" if command is None else f"regdev {command}"
        print(f"{name}: error: cannot write the output: {error.strerror or error}",
              file=sys.stderr)
    return 1


STDOUT_CLOSED = "standard output is closed"


def _check_stdin() -> None:
    """UsageError, before anything runs, when file descriptor 0 is closed (`<&-`): Python
    then has no ``sys.stdin`` at all (None)."""
    if sys.stdin is None:
        raise UsageError("cannot read the input: standard input is closed")


class _Output(io.TextIOBase):
    """Standard output as the commands write it, keeping the OSError a write or flush raised
    (a closed pipe, a full disk), so that :func:`main` tells it from any other. With file
    descriptor 1 closed (`>&-`) Python has no ``sys.stdout`` at all (None): the first write
    fails with EBADF, as a write to a closed descriptor does."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__()
        self.stream = stream
        self.failure: OSError | None = None

    def _open(self) -> TextIO:
        if self.stream is None:
            self.failure = OSError(errno.EBADF, STDOUT_CLOSED)
            raise self.failure
        return self.stream

    def write(self, text: str, /) -> int:
        stream = self._open()
        try:
            return stream.write(text)
        except OSError as error:
            self.failure = error
            raise

    def flush(self) -> None:
        if self.stream is None:  # nothing was written, or the write failed already
            return
        try:
            self.stream.flush()
        except OSError as error:
            self.failure = error
            raise

    def isatty(self) -> bool:
        return self.stream is not None and self.stream.isatty()

    def fileno(self) -> int:
        return self._open().fileno()


def _drop_stdout() -> None:
    """Point standard output at the null device, so that the interpreter's last flush of the
    text still buffered does not fail again (the recipe of the Python docs, "Note on
    SIGPIPE", https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    if sys.stdout is None:  # file descriptor 1 closed: no last flush to fail
        return
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file descriptor (a test's capture): nothing to do
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":
    raise SystemExit(main())
