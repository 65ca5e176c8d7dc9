"""What the commands share: the usage error, the options every command that runs calls takes
(device, dialect, policy and audit), opening the gate on them, and small output helpers."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import msgspec

from ..audit._log import (
    AuditLog,
    audit_target,
    default_audit_path,
    default_audit_root,
)
from ..audit._log import open_audit as open_store
from ..core._errors import AuditError, AuditInUse, MapError, PolicyError, RegdevError
from ..core._limits import seconds_problem
from ..core._text import display_text
from ..devices._device import Device
from ..devices._open import open_device
from ..devices._rdl import load_map
from ..devices._regmap import MapNotJSON, RegisterMap
from ..devices._serial import MAX_BAUDRATE
from ..gate._gate import Gate
from ..gate._maptools import map_tools
from ..gate._parse import DIALECTS
from ..gate._policy import Approver, Session
from ..gate._tools import ToolSet
from ..server._access import Policy


class UsageError(Exception):
    """A command-line mistake: printed as one line, exit status 2."""


def count(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural unless the number is 1: "1 call", "2 calls"."""
    return f"{number} {noun}{'s' * (number != 1)}"


#: Decimal numbers (a call's exact numbers) as JSON numbers, never as strings.
_encode_json = msgspec.json.Encoder(decimal_format="number").encode


def json_line(value: Any, out: TextIO) -> None:
    out.write(_encode_json(value).decode() + "\n")


def write_line(out: TextIO, text: str = "") -> None:
    """Write ``text`` for a person as one line: through :func:`display_text`, so nothing a
    model, a client or a device sent can break the line or act on the terminal."""
    out.write(display_text(text) + "\n")


def tell(command: str, kind: str, text: str) -> None:
    """One line on stderr, ``regdev COMMAND: KIND: TEXT``, shown through :func:`display_text`
    (``kind``: error, warning, hint)."""
    print(display_text(f"regdev {command}: {kind}: {text}"), file=sys.stderr)


#: What each exit status means, per command: the one source of ``regdev COMMAND --help``'s
#: epilog and of docs/cli.md (tests/test_exit_status.py checks the page against it).
EXIT_STATUS: dict[str, tuple[tuple[int, str], ...]] = {
    "demo": (
        (0, "every step got the verdict the script shows, and the loop stopped as scripted"),
        (1, "a step got another verdict (a policy denial, a device failure), so the session "
            "went otherwise than scripted; or the output could not be written"),
        (2, "a usage, policy or audit-log error, or the device cannot be opened, is not the "
            "map's (another map, another chip), or failed outside a call (identify, the "
            "register dump)"),
        (130, "interrupted (Ctrl-C)"),
    ),
    "replay": (
        (0, "every expectation was met"),
        (1, "some expectation was not met; or the output could not be written"),
        (2, "a file error (nothing run; with -, the lines before it ran), a usage, policy or "
            "audit-log error, or a device error (one not the map's included); when only the "
            "register dump after the last "
            "line failed, the results and the summary are printed first"),
        (130, "interrupted (Ctrl-C): the results so far and the summary of what ran are "
              "printed first"),
    ),
    "call": (
        (0, "the call was accepted"),
        (1, "the call was refused (the observation says why); or the output could not be "
            "written"),
        (2, "a usage, policy or audit-log error, or the device cannot be opened"),
        (130, "interrupted (Ctrl-C)"),
    ),
    "shell": (
        (0, "every command was accepted (or none was given) until quit or end of input"),
        (1, "some command was refused, failed, was interrupted or was not understood (the "
            "shell went on to the end); or the output could not be written"),
        (2, "a usage, policy or audit-log error, or the device cannot be opened or is not the "
            "map's (another map, another chip)"),
        (130, "interrupted (Ctrl-C) outside a prompt and a command"),
    ),
    "firmware-sim": (
        (0, "stopped by Ctrl-C (SIGINT) or SIGTERM (with --avr, SIGHUP too)"),
        (1, "with --avr: the firmware image stopped or crashed in simavr"),
        (2, "a usage error, or the port cannot be served (the pty, the TCP address, the "
            "link path, standard output); with --avr, the firmware cannot be built or run"),
    ),
    "map": (
        (0, "the register table or the compiled JSON form was written (with "
            "--sunspec-discover: the device's map)"),
        (1, "the output could not be written to standard output"),
        (2, "a usage error, a map that cannot be read or that regdev cannot honour (its "
            "file:line named), or -o OUT cannot be written; with --sunspec-discover, the "
            "device cannot be reached, has no SunSpec marker, or its model chain loops, "
            "overruns the address space or names a model pysunspec2 does not know (the "
            "address named; nothing written), or the sunspec extra is missing"),
        (130, "interrupted (Ctrl-C)"),
    ),
    "tools": (
        (0, "the definitions were printed"),
        (1, "the output could not be written"),
        (2, "a usage or policy error"),
        (130, "interrupted (Ctrl-C)"),
    ),
    "serve": (
        (0, "stopped by end of input (stdio), SIGINT (Ctrl-C), SIGTERM or SIGHUP, every "
            "call answered and recorded"),
        (1, "the answers could not be written to standard output (stdio: a full disk, the "
            "client gone); the calls that ran are recorded"),
        (2, "a usage, policy or audit-log error, the mcp extra missing, standard output "
            "closed (stdio), the --http address cannot be listened on, or the device cannot "
            "be opened, does not identify or is not the map's"),
    ),
    "agent": (
        (0, "the model finished (stop: done)"),
        (1, "the loop stopped for another reason (budget, rejected, truncated, "
            "model-refusal, provider-error); or the output could not be written"),
        (2, "a usage, policy or audit-log error, the models extra missing, or the device "
            "cannot be opened, is not the map's, or failed outside a call"),
        (130, "interrupted (Ctrl-C)"),
    ),
    "eval": (
        (0, "every task passed every trial (with --format-sensitivity, in every variant)"),
        (1, "some task failed a trial, or a trial errored (provider-error), or the run "
            "stopped after its first trial (the provider cannot be used); or the output "
            "could not be written"),
        (2, "a usage, map, task-file or audit-log error, the models extra missing, or "
            "--output cannot be written"),
        (130, "interrupted (Ctrl-C)"),
    ),
    "audit": (
        (0, "the records were printed (none matching is no error)"),
        (1, "with --json, a record could not be exported (the others were, each error on "
            "stderr); or the output could not be written"),
        (2, "a usage error (a --code no record can hold included), or the audit log cannot "
            "be read"),
        (130, "interrupted (Ctrl-C)"),
    ),
    "report": (
        (0, "the report was written (no record matching is no error)"),
        (1, "the output could not be written"),
        (2, "a usage error (--plot naming a directory, or a format matplotlib does not "
            "write, is refused before any work), the audit log cannot be read, the --eval "
            "file cannot be read or is not eval results, or the chart or the --html file "
            "cannot be written"),
        (130, "interrupted (Ctrl-C)"),
    ),
    "compile": (
        (0, "the validator was written"),
        (1, "the output could not be written to standard output"),
        (2, "a usage error, a tools file that cannot be read or compiled, or -o OUT cannot "
            "be written"),
        (130, "interrupted (Ctrl-C)"),
    ),
    "bench": (
        (0, "the report was printed, every contender agreeing with regdev's verdicts"),
        (1, "a contender disagreed with regdev's verdict on a case (it is named below the "
            "table); or the output could not be written"),
        (2, "a usage error"),
        (130, "interrupted (Ctrl-C)"),
    ),
}


def exit_status_epilog(command: str) -> str:
    """``regdev COMMAND --help``'s epilog: the exit statuses of :data:`EXIT_STATUS`."""
    return "Exit status: " + "; ".join(
        f"{status} {meaning}" for status, meaning in EXIT_STATUS[command]
    ) + ". (All commands: docs/cli.md.)"


STDOUT_CLOSED = "standard output is closed"


def check_stdin() -> None:
    """UsageError, before anything runs, when file descriptor 0 is closed (`<&-`): Python
    then has no ``sys.stdin`` at all (None)."""
    if sys.stdin is None:
        raise UsageError("cannot read the input: standard input is closed")


def check_tool_choice(tool_choice: str | None, tools: ToolSet) -> None:
    """``--tool-choice`` must name one of ``tools`` (the gate would raise ValueError)."""
    if tool_choice is not None and tool_choice not in tools:
        raise UsageError(f"--tool-choice {tool_choice} is not one of the tools offered: "
                         f"{', '.join(tools)}")


def map_option(p: argparse.ArgumentParser) -> None:
    """Add ``--map FILE``: the device's register map."""
    p.add_argument("--map", metavar="FILE",
                   help="the device's register map: SystemRDL (.rdl; needs the rdl extra) or "
                        "its compiled JSON form (regdev map FILE --json); it gives the "
                        "registers, the tools and the checks (docs/maps.md). Default: 16 "
                        "read-write registers, reset 0")


def register_map(args: argparse.Namespace) -> RegisterMap:
    """The map of ``--map`` (read once per run), else the default map.

    Raises:
        UsageError: the map cannot be read or is not supported (one line, with file:line).
    """
    path = getattr(args, "map", None)
    if path is None:
        return RegisterMap.default()
    cached: RegisterMap | None = getattr(args, "_regmap", None)
    if cached is None:
        cached = args._regmap = read_map(path)
    return cached


def read_map(path: str | Path) -> RegisterMap:
    """The register map at ``path``: SystemRDL when it ends in ``.rdl``, else the compiled
    JSON form (:func:`~regdev.devices._rdl.load_map`), a file that is not JSON said in
    regdev's words (the strict decoder's) and, when it does not even start like JSON (``{``
    or ``[``), followed by what a map file is.

    Raises:
        UsageError: the map cannot be read or is not supported (one line naming the file).
    """
    try:
        return load_map(path)
    except MapNotJSON as error:
        if error.json_like:  # JSON with a fault: the fault alone says it
            raise UsageError(str(error)) from None
        raise UsageError(f"{error}; a register map is SystemRDL (a file named .rdl) or its "
                         "compiled JSON form (regdev map FILE.rdl --json)") from None
    except MapError as error:
        raise UsageError(str(error)) from None


def map_tools_of(args: argparse.Namespace) -> ToolSet:
    """The tools of ``--map`` (the two register tools without one)."""
    return map_tools(register_map(args))


def device_options(p: argparse.ArgumentParser) -> None:
    """Add ``--map``, ``--port``, ``--timeout`` and ``--baud``: the one definition of the
    device options that every command running calls takes (``call``, ``shell``, ``demo``,
    ``replay``, ``agent``, ``serve``); open the device with :func:`port_device`."""
    map_option(p)
    port_options(p)


def port_options(p: argparse.ArgumentParser) -> None:
    """Add ``--port``, ``--timeout`` and ``--baud``: the device a command runs on (with
    ``--map``: :func:`device_options`)."""
    p.add_argument("--port", metavar="URL",
                   help="run against the device on this serial port instead of in process: "
                        "/dev/ttyUSB0, COM3, socket://HOST:PORT or rfc2217://HOST:PORT "
                        "(see docs/protocol.md); or a Modbus device: "
                        "modbus+tcp://HOST:PORT?unit=1 or modbus+rtu:///dev/ttyUSB0?baud="
                        "19200&unit=1 (see docs/modbus.md); inprocess is the in-process "
                        "device, as without --port")
    p.add_argument("--timeout", metavar="SECONDS", type=float,
                   help="with --port: seconds to wait for each reply, 0.001..86400 (default "
                        "0.5)")
    p.add_argument("--baud", metavar="N", type=int,
                   help=f"with --port: line speed in baud, 1..{MAX_BAUDRATE} (default "
                        "115200, 19200 for modbus+rtu:// unless its URL says baud=N; ignored "
                        "by socket:// and modbus+tcp://)")



def dialect_options(p: argparse.ArgumentParser, default_help: str) -> None:
    """Add ``--dialect`` and ``--tool-choice``."""
    p.add_argument("--dialect", choices=DIALECTS, default="canonical",
                   help=f"shape of the raw calls (default: canonical). {default_help}")
    p.add_argument("--tool-choice", metavar="TOOL",
                   help="force this tool: a call naming any other is refused (wrong-tool)")



def add_gate_options(p: argparse.ArgumentParser, *, policy: bool = True) -> None:
    """Add ``--policy`` and ``--session`` (unless ``policy`` is False: a command that runs
    without one, such as ``eval``, gets their defaults), ``--audit``, ``--no-audit`` and
    ``--durability``."""
    group = p.add_argument_group("policy and audit" if policy else "audit")
    if policy:
        group.add_argument("--policy", metavar="FILE",
                           help="a policy file, TOML (.toml) or JSON (.json): sessions, "
                                "read-only and protected registers, rate limits, timeout; see "
                                "docs/safety.md")
        group.add_argument("--session", metavar="NAME", default="default",
                           help="run the calls as this session of the policy (default: "
                                "default)")
    else:
        p.set_defaults(policy=None, session="default")
    where = group.add_mutually_exclusive_group()
    where.add_argument("--audit", metavar="PATH", type=audit_target,
                       help="record every call in this SQLite audit log, or in the "
                            "PostgreSQL store at a postgresql:// URL, shared by several "
                            "processes (docs/postgresql.md) (default: "
                            "$REGDEV_AUDIT, else $XDG_STATE_HOME/regdev/audit.db, i.e. "
                            "~/.local/state/regdev/audit.db; when that default cannot be "
                            "created, a warning and no audit log; one process writes a "
                            "database at a time)")
    where.add_argument("--no-audit", action="store_true",
                       help="record nothing (idempotency keys are then ignored too: the first "
                            "call that carries one is followed by a warning on stderr)")
    group.add_argument("--durability", choices=("crash", "power-loss"), default="crash",
                       help="crash: a recorded write survives the process being killed "
                            "(default); power-loss: it survives power loss too (slower: one "
                            "fsync per write)")


#: Said once when ``regdev serve`` starts on stdio under a policy whose approval is by URL.
STDIO_URL_APPROVAL = ("the policy's approval is by URL (approval.via = \"url\"), which needs "
                      "the pages of regdev serve --http: on stdio every write to a protected "
                      "register ({}) is refused approval-denied; use approval.via = "
                      "\"elicitation\" for stdio")


def open_gate(args: argparse.Namespace, device: Device | None = None,
              tools: ToolSet | None = None, *, policy: Policy | None = None,
              approve: Approver | None = None) -> tuple[Gate, Session]:
    """The gate (on ``device``, else an in-process one of ``--map``; offering ``tools``, else
    the map's) and the session that the options of :func:`add_gate_options` ask for. Close
    the gate when done: that commits the audit log.

    Args:
        args: the parsed options.
        device: the device; a fresh in-process register file of ``--map`` when None.
        tools: the tools offered; the map's when None.
        policy: the policy, when the caller loaded it already (:func:`load_policy`); else
            the one ``--policy`` names.
        approve: the approval hook the policy gets (a policy file cannot declare one).

    Raises:
        UsageError: the policy file is invalid, the session is not declared, or the audit log
            the user named (``--audit``, ``$REGDEV_AUDIT``) cannot be opened (the default one
            failing is a warning on stderr, see :func:`open_audit`).
    """
    policy = policy if policy is not None else load_policy(args)
    if approve is not None and policy is not None:
        policy = policy.model_copy(update={"approve": approve})
    if device is None:
        device = open_device(None, regmap=register_map(args))
    audit = None if args.no_audit else open_audit(args)
    try:
        gate = Gate(device, tools, policy=policy, audit=audit)
        if args.command != "serve":  # serve's warnings go to its log, as every other line
            gate.warn = lambda text: tell(args.command, "warning", text)
        elif (getattr(args, "http", None) is None and policy is not None
              and policy.approval.via == "url" and gate.protected_registers):
            gate.warn(STDIO_URL_APPROVAL.format(", ".join(
                str(addr) for addr in sorted(gate.protected_registers))))
        return gate, gate.session(args.session)
    except PolicyError as error:  # the policy names a session or a tool that is not there
        if audit is not None:
            audit.close()
        raise UsageError(f"{args.policy}: {error}" if args.policy else str(error)) from None
    except BaseException:
        if audit is not None:
            audit.close()
        raise


def load_policy(args: argparse.Namespace) -> Policy | None:
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


def open_audit(args: argparse.Namespace) -> AuditLog | None:
    """The audit log of ``--audit``, ``$REGDEV_AUDIT`` or the default path.

    A path the user gave that cannot be opened, or whose directory does not exist (it is not
    created), is an error. The default path (under ``$XDG_STATE_HOME`` or ``~/.local/state``)
    is only a convenience: its missing folders, ``$XDG_STATE_HOME`` itself included, are
    created with permission 0700 (XDG Base Directory Specification 0.8: "If, when attempting
    to write a file, the destination directory is non-existent an attempt should be made to
    create it with permission 0700"), but a missing home directory is never made; when the
    default cannot be used (a read-only or missing home, as an MCP client, a service or a
    container may give), the command warns in one line on stderr and runs without an audit
    log. Another regdev process writing the database is an error
    whichever path it is (:class:`~regdev.AuditInUse`): quietly running without an audit log,
    nor its idempotency keys, is not what the user asked for.

    Raises:
        UsageError: the path given with ``--audit`` or ``$REGDEV_AUDIT`` cannot be opened, or
            its directory does not exist; or another process writes the database.
    """
    given = args.audit is not None or bool(os.environ.get("REGDEV_AUDIT"))
    path = args.audit or default_audit_path()
    advice = "choose another file with --audit PATH, or record nothing with --no-audit"
    if isinstance(path, str):  # a PostgreSQL store: it is there, or nothing runs
        try:
            return open_store(path, durability=args.durability)
        except AuditError as error:
            raise UsageError(str(error)) from None
    if given and not path.parent.exists():  # a typo in a path is not a folder to create
        raise UsageError(f"the directory {path.parent} does not exist ({advice})")
    try:
        if not given:
            _state_folders(path.parent, default_audit_root())
        return AuditLog(path, durability=args.durability)
    except AuditInUse as error:  # the default too: running unaudited unasked would be worse
        raise UsageError(f"{error}; give this one its own with --audit PATH, or --no-audit") \
            from None
    except AuditError as error:
        if given:
            raise UsageError(f"{error} ({advice})") from None
        tell(args.command, "warning", f"{error}; going on without an audit log (--audit "
             "PATH to record one elsewhere, --no-audit to say so)")
        return None


def _state_folders(folder: Path, root: Path) -> None:
    """Make the default audit log's missing folders down to ``folder``, each with permission
    0700: ``root`` (:func:`default_audit_root`: ``$XDG_STATE_HOME``, made when missing, or the
    home directory, never made) and those below it. A folder that exists keeps its
    permissions.

    Raises:
        AuditError: the home directory does not exist, or a folder cannot be made.
    """
    if root == Path(os.path.expanduser("~")) and not root.exists():
        raise AuditError(f"the default audit log {folder / 'audit.db'} cannot be used: "
                         f"the home directory {root} does not exist")
    missing = [each for each in (folder, *folder.parents) if not each.exists()]
    for each in reversed(missing):
        try:
            each.mkdir(mode=0o700)
        except FileExistsError:  # made meanwhile by another process
            pass
        except OSError as error:
            raise AuditError(f"the default audit log {folder / 'audit.db'} cannot be used: "
                             f"cannot make the folder {each}: "
                             f"{error.strerror or error}") from None


def audit_note(gate: Gate, out: TextIO) -> None:
    if gate.audit is not None:
        write_line(out)
        write_line(out, f"recorded in the audit log {gate.audit.name} "
                        f"(regdev audit --db {gate.audit.name})")


def port_device(args: argparse.Namespace) -> Device:
    """The device the command runs on, with the register map of ``--map``: the device at
    ``--port`` (:func:`~regdev.open_device`'s table of URL schemes: a serial port, a Modbus
    device, ``inprocess``), else in process.

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
        return open_device(None, regmap=register_map(args))
    problem = None if args.timeout is None else seconds_problem(args.timeout)
    if problem is not None:
        raise UsageError(f"--timeout {problem}")
    if args.baud is not None and not 1 <= args.baud <= MAX_BAUDRATE:
        raise UsageError(f"--baud must be 1..{MAX_BAUDRATE} (baud), got {args.baud}")
    try:
        device = open_device(args.port, regmap=register_map(args), timeout=args.timeout,
                             baudrate=args.baud)
    except (RegdevError, ValueError) as error:
        raise UsageError(str(error)) from None
    check_map(args, device)
    return device


def check_map(args: argparse.Namespace, device: Device) -> None:
    """Refuse a device that is not one of the map's (:meth:`Device.map_mismatch`: the map
    digest it says, else the map's identity registers), closing it. A device that does not
    answer the check is left to the command (its calls will say what fails).

    Raises:
        UsageError: the device serves another map, or an identity register holds another
            chip's value (one line naming both).
    """
    try:
        problem = device.map_mismatch()
    except RegdevError:
        return
    if problem is None:
        return
    device.close()
    path = getattr(args, "map", None)
    ours = f"--map {display_text(path)}" if path is not None else "the default map (no --map)"
    raise UsageError(f"the device on {display_text(args.port)} is not the one {ours} "
                     f"describes: {problem}; give --map the device's own map")


def device_call(args: argparse.Namespace, action: Any) -> Any:
    """Run a device call outside the gate (identify, dump, reset); a failure is one line."""
    try:
        return action()
    except RegdevError as error:
        where = f" on {args.port}" if getattr(args, "port", None) else ""
        raise UsageError(f"the device{where} failed: {error}") from None
