"""``regdev shell``, and how the command line shows observations and registers as text.

The shell is a prompt for engineers. Each command is a tool call through the gate, as a
model's would be, and its verdict is shown as the model would see it. Besides the register
tools, the shell's tool set has three for engineers, never offered to models:
``identify_device``, ``dump_registers`` and ``reset_device``. The policy and the audit log
treat them as any other tool (a session that is not offered one gets ``unknown-tool``).

:func:`describe` and :func:`format_registers` are the text display that ``regdev demo`` and
``regdev replay`` share with the shell.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

import msgspec

from ..core._json import MAX_INT_DIGITS
from ..core._observation import Observation
from ..core._text import display_text, escape_text
from ..devices._device import Device
from ..devices._regmap import Register, RegisterMap
from ..gate._gate import Gate
from ..gate._policy import Session
from ..gate._providers import offered_tools
from ..gate._tools import REGISTER_TOOLS, Handler, Tool, ToolSet

__all__ = ["NOT_READ", "SHELL_HELP", "SHELL_MAP_HELP", "describe", "format_registers",
           "register_rows", "run_shell", "shell_call", "shell_tools"]


#: A result's Decimal numbers as the JSON numbers they are, never as strings.
_encode_json = msgspec.json.Encoder(decimal_format="number").encode


#: What the registers' display shows for a register a snapshot did not read (None).
NOT_READ = "not read: reading clears it"


def format_registers(values: Sequence[int | None], regmap: RegisterMap | None = None) -> str:
    """The registers as text: for the default map, a table of hex bytes (an address row and
    a data row per 8); for a map with names, one line per register: address, name, value and
    its fields by name. A register not read (None) shows :data:`NOT_READ` (``----`` in the
    default map's table), never a value.

    Args:
        values: one value per register of the map, in its address order (as
            :meth:`Device.snapshot` returns them: None for a register not read).
        regmap: the map; None for the default map.
    """
    regmap = regmap if regmap is not None else RegisterMap.default()
    if regmap.is_default:
        lines = []
        for start in range(0, len(values), 8):
            row = range(start, min(start + 8, len(values)))
            lines.append("  addr " + " ".join(f"{a:>4}" for a in row))
            lines.append("  data " + " ".join(_byte_text(values[a]) for a in row))
        return "\n".join(lines)
    width = max(len(r.name or "") for r in regmap.registers)
    lines = []
    for register, value in zip(regmap.registers, values, strict=True):
        if value is None:
            lines.append(display_text(f"  0x{register.addr:02X} {register.name or '-':<{width}}"
                                      f"  {NOT_READ}"))
            continue
        fields = "  ".join(f"{name}={_field_text(shown)}"
                           for name, shown in register.decode(value).items())
        lines.append(display_text(f"  0x{register.addr:02X} {register.name or '-':<{width}}  "
                                  f"0x{value:02x}" + (f"  {fields}" if fields else "")))
    return "\n".join(lines)


def register_rows(values: Sequence[int | None], regmap: RegisterMap | None = None
                  ) -> list[dict[str, int | str | None]]:
    """The registers as JSON rows, one per register of the map in its address order:
    ``{"addr": 3, "name": "CTRL", "data": 200}`` (``name`` only when the map names the
    register; ``data`` null for a register not read, as reading would clear it). A map with
    gaps in its addresses keeps them: the address is given, never left to a value's
    position. What ``--json`` prints after ``replay``, ``demo`` and ``agent``.

    Args:
        values: one value per register of the map, in its address order (as
            :meth:`Device.snapshot` returns them: None for a register not read).
        regmap: the map; None for the default map (addresses 0..15, no names).
    """
    regmap = regmap if regmap is not None else RegisterMap.default()
    rows: list[dict[str, int | str | None]] = []
    for register, value in zip(regmap.registers, values, strict=True):
        row: dict[str, int | str | None] = {"addr": register.addr}
        if register.name:
            row["name"] = register.name
        row["data"] = value
        rows.append(row)
    return rows


def _byte_text(value: int | None) -> str:
    """A register's value in the default map's table: ``0x1f``, or ``----`` not read."""
    return "----" if value is None else f"0x{value:02x}"


def _field_text(value: object) -> str:
    """A field's value for display: a name as it is, a number above 9 in hex too."""
    return f"0x{value:02x}" if type(value) is int and value > 9 else str(value)


def describe(observation: Observation) -> str:
    """One observation as one line: ``accepted  TOOL: ...`` or ``refused   STAGE/CODE ...``,
    shown through :func:`~regdev.core._text.display_text` (a result or a message holds no
    line break or control character as it is)."""
    return display_text(_describe(observation))


def _describe(observation: Observation) -> str:
    replayed = "; replayed (not executed now)" if observation.replay else ""
    if observation.ok:
        result = observation.result or {}
        if set(result) == {"addr", "data"} and type(result["data"]) is list:
            values = " ".join(f"0x{v:02x}" for v in result["data"])
            last = result["addr"] + len(result["data"]) - 1
            return (f"accepted  {observation.tool}: registers {result['addr']}..{last} = "
                    f"{values}{replayed}")
        if set(result) == {"addr", "data"}:
            return (f"accepted  {observation.tool}: register {result['addr']} = "
                    f"0x{result['data']:02x} ({result['data']}){replayed}")
        if {"addr", "data", "register"} <= set(result) and type(result["data"]) is int:
            field = (f"{result['field']} = {result['value']}; "
                     if "field" in result else "")
            fields = "".join(f" {name}={_field_text(value)}"
                             for name, value in (result.get("fields") or {}).items())
            return (f"accepted  {observation.tool}: {field}register {result['register']} "
                    f"(0x{result['addr']:02X}) = 0x{result['data']:02x}{fields}{replayed}")
        if {"name", "value", "raw"} <= set(result):  # a typed value, in its unit
            unit = f" {result['unit']}" if "unit" in result else ""
            raw = " ".join(f"0x{v:02x}" for v in result["raw"])
            shown = (_encode_json(result["value"]).decode() if type(result["value"]) is str
                     else str(result["value"]).lower() if type(result["value"]) is bool
                     else str(result["value"]))
            return (f"accepted  {observation.tool}: {result['name']} = {shown}{unit} (raw "
                    f"{raw}){replayed}")
        return f"accepted  {observation.tool}: {_encode_json(result).decode()}{replayed}"
    retry = "retryable" if observation.refusal and observation.refusal.retryable else "final"
    return (f"refused   {observation.stage}/{observation.code} ({retry}): "
            f"{observation.message}{replayed}")


def _engineer_tool(name: str, description: str, handler: Handler, *,
                   read_only: bool = True) -> Tool:
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    return Tool(name, description, schema, read_only=read_only, handler=handler)


def shell_tools(reset: Callable[[Device], None] = Device.reset,
                tools: ToolSet = REGISTER_TOOLS) -> ToolSet:
    """The shell's tools: the register tools (of the device's map), and three for engineers
    (never offered to models).

    Args:
        reset: what ``reset_device`` calls with the device its handler is given; pass the
            gate's :meth:`~regdev.Gate.reset_device`, which records the reset in the audit
            log, so that no idempotency key stored before the reset is replayed after it.
        tools: the register tools to offer (:func:`regdev.map_tools` of the device's map).
    """
    def reset_device(device: Device, arguments: object) -> dict[str, bool | str]:
        reset(device)
        left = device.reset_leaves()  # a bridge's reset leaves the chip's flags as they are
        return {"reset": True} if left is None else {"reset": True, "not_reset": left}

    return ToolSet([
        *tools.values(),
        _engineer_tool("identify_device", "The device's identity line.",
                       lambda device, _: {"identity": device.identify()}),
        _engineer_tool("dump_registers", "Every register, in address order, without the "
                                         "side effects of a read.",
                       lambda device, _: {"registers": device.snapshot()}),
        _engineer_tool("reset_device", "Set every register to its reset value (through a "
                                       "bridge, every writable one).", reset_device,
                       read_only=False),
    ])

SHELL_HELP = """\
commands (numbers in ASCII decimal or 0x hex: 3, 0x1f):
  read ADDR         read_register: one register, ADDR 0..15
  write ADDR DATA   write_register: DATA 0..255 to register ADDR
  dump              all 16 registers
  readblock ADDR COUNT
                    read_registers: COUNT registers from ADDR up
  writeblock ADDR DATA...
                    write_registers: the DATA values from ADDR up, all or nothing
  identify          the device's identity line
  reset             every register to its reset value
  help              this text
  quit              leave (or Ctrl-D)
every command is a tool call through the gate; its verdict is shown as the model would see it.
"""

#: The help with a register map: registers and fields by name.
SHELL_MAP_HELP = """\
commands (numbers in ASCII decimal or 0x hex: 3, 0x1f; names as in `regdev map`):
  read REG               read_fields (by name) or read_register (ADDR): one register
  read NAME              read_value: a typed value in its unit (1234.5 W), with its raw
                         registers
  write NAME VALUE       write_value: a typed value, VALUE in its unit (21.5), true/false
                         or text
  write REG DATA         write_register: DATA to register REG (a name or an ADDR), as wide
                         as the register: 0..255 (8 bits), 0..65535 (16 bits), ...
  write REG.FIELD VALUE  write_field: one field, by enumerated name or number
                         (a register named in another table than holding is read and
                         written in its table; an ADDR is a holding register's)
  readblock REG COUNT    read_registers: COUNT registers from REG (a name or an ADDR) up
  writeblock REG DATA... write_registers: the DATA values from REG up, all or nothing
  dump                   every register, with its fields
  identify               the device's identity line
  reset                  every register to its reset value
  help                   this text
  quit                   leave (or Ctrl-D)
every command is a tool call through the gate; its verdict is shown as the model would see it.
"""

#: command -> (the tool it calls, the names of its numeric arguments)
_COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "read": ("read_register", ("ADDR",)),
    "write": ("write_register", ("ADDR", "DATA")),
    "readblock": ("read_registers", ("ADDR", "COUNT")),
    "writeblock": ("write_registers", ("ADDR", "DATA...")),
    "dump": ("dump_registers", ()),
    "identify": ("identify_device", ()),
    "reset": ("reset_device", ()),
}



#: A number as the help says: ASCII decimal digits, or 0x and hex digits (not Python's other
#: forms, which ``int(word, 0)`` would take: ``1_0``, ``0b11``, ``0o7``, fullwidth digits).
_NUMBER = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]+")


def _number(word: str, name: str = "ADDR") -> int | None:
    """The value of ``word`` when it is a number as the help says, else None.

    Raises:
        ValueError: it has more digits than a call may hold (in regdev's words, naming the
            argument ``name``, never int()'s advice on its digit limit).
    """
    if _NUMBER.fullmatch(word) is None:
        return None
    hexadecimal = word[1:2] in ("x", "X")
    digits = (word[2:] if hexadecimal else word).lstrip("0") or "0"  # leading zeros are free
    if not hexadecimal:
        if len(digits) > _digit_limit():
            raise ValueError(_too_long(name))
        return int(digits)
    value = int(digits, 16)  # a power-of-two base: no digit limit, linear time
    if value >= 10 ** _digit_limit():
        raise ValueError(_too_long(name))
    return value


def _digit_limit() -> int:
    """The most decimal digits of an integer in a call: regdev's (Python's default), or a
    lower limit set in this interpreter."""
    return min(MAX_INT_DIGITS, sys.get_int_max_str_digits() or MAX_INT_DIGITS)


def _too_long(name: str) -> str:
    return (f"{name} has more than {_digit_limit()} decimal digits, the most a call may hold; "
            "use a number like 3 or 0x1f")


#: The most register names a "no register" error lists after the closest ones.
_LISTED_NAMES = 12


def _closest(name: str, names: Sequence[str]) -> list[str]:
    """The names closest to ``name``: the one equal but for case alone, else at most 3 by
    difflib's ratio on case-folded text, best first."""
    folded = {each.casefold(): each for each in reversed(names)}
    if name.casefold() in folded:  # the same name but for case: that one alone
        return [folded[name.casefold()]]
    found = difflib.get_close_matches(name.casefold(), list(folded), n=3, cutoff=0.6)
    return [folded[each] for each in found]


def _unknown(kind: str, target: str, names: Sequence[str], listed_as: str = "") -> str:
    """``no register `X`; did you mean Y?; registers: ...``: the closest names in full first,
    then the first :data:`_LISTED_NAMES` of ``names`` (under ``listed_as``, ``KINDs`` by
    default) and how many more there are; no list when ``names`` is empty."""
    text = f"no {kind} `{escape_text(target)}`"
    close = _closest(target, names)
    if close:
        text += f"; did you mean {', '.join(close[:-1]) + ' or ' if close[1:] else ''}" \
                f"{close[-1]}?"
    if not names:
        return text
    listed = ", ".join(names[:_LISTED_NAMES])
    more = len(names) - _LISTED_NAMES
    text += f"; {listed_as or kind + 's'}: {listed}" + (
        f" and {more} more (`regdev map FILE` lists them all)" if more > 0 else "")
    return text


def _register_of(target: str, regmap: RegisterMap) -> Register:
    """The register named ``target``.

    Raises:
        ValueError: no register has that name (the closest register and value names said
            first).
    """
    register = regmap.named(target)
    if register is None:
        if "." in target:
            holder = regmap.named(target.partition(".")[0])
            if holder is not None:
                raise ValueError(f"`{escape_text(target)}` is a field; name its register "
                                 f"`{holder.name}` here")
        names = [r.name for r in regmap.registers if r.name]
        if regmap.values:  # the name may be a typed value's, misspelt: those are said too
            raise ValueError(_unknown("register or value", target,
                                      list(dict.fromkeys([v.name for v in regmap.values] + names)),
                                      "values and registers"))
        raise ValueError(_unknown("register", target, names))
    return register


def _check_field(target: str, regmap: RegisterMap) -> None:
    """Nothing when ``target`` (``REG.FIELD``) is a field of the map.

    Raises:
        ValueError: it is not (the closest field and value names said first).
    """
    if regmap.find_field(target) is not None:
        return
    paths = [f"{r.name}.{f.name}" for r in regmap.registers if r.name for f in r.fields]
    if regmap.values:  # the name may be a typed value's, misspelt: those are said too
        raise ValueError(_unknown("field or value", target,
                                  list(dict.fromkeys([v.name for v in regmap.values] + paths)),
                                  "values and fields"))
    raise ValueError(_unknown("field", target, paths))


def _named_call(words: Sequence[str], regmap: RegisterMap) -> str | None:
    """The call for ``read NAME``, ``write NAME DATA``, ``write REG.FIELD VALUE``,
    ``readblock NAME COUNT`` or ``writeblock NAME DATA...`` with a map; None when the words are
    the default form (numbers), left to :func:`shell_call`."""
    command, *rest = words
    usage = {"read": "usage: read REG", "readblock": "usage: readblock REG COUNT",
             "write": "usage: write REG DATA, or write REG.FIELD VALUE",
             "writeblock": "usage: writeblock REG DATA..."}
    if command in usage and not rest:
        raise ValueError(usage[command])
    if command not in usage or _number(rest[0]) is not None:
        return None
    target = rest[0]
    codec = regmap.value(target) if command in ("read", "write") else None
    if codec is not None:
        shown = escape_text(target)
        if command == "write" and not codec.value.writable:
            raise ValueError(f"{shown} is a read-only value (the device sets it): `read "
                             f"{shown}` reads it")
        if command == "read" and not codec.value.readable:
            raise ValueError(f"{shown} is a write-only value: `write {shown} VALUE` writes "
                             "it")
        return _value_call(command, rest)
    if command == "write" and "." in target and regmap.named(target) is None:
        if len(rest) != 2:
            raise ValueError("usage: write REG.FIELD VALUE")
        _check_field(target, regmap)
        number = _number(rest[1], "VALUE")
        value: int | str = number if number is not None else rest[1]
        return msgspec.json.encode({"tool": "write_field", "arguments": {
            "field": target, "value": value}}).decode()
    if command == "read" and "." in target and regmap.named(target) is None:
        holder = regmap.named(target.partition(".")[0])
        if holder is not None:  # a field: its register is read whole, fields shown
            raise ValueError(f"read takes a register, not a field: `read {holder.name}` "
                             "shows its fields")
    register = _register_of(target, regmap)
    if command == "read":
        if len(rest) != 1:
            raise ValueError(usage["read"])
        if register.fields and register.table == "holding":
            return msgspec.json.encode({"tool": "read_fields",
                                        "arguments": {"register": target}}).decode()
        return _in_table(shell_call(["read", str(register.addr)]), register.table, regmap)
    if command == "write" and len(rest) != 2:
        raise ValueError("usage: write REG DATA")
    return _in_table(shell_call([command, str(register.addr), *rest[1:]]), register.table,
                     regmap)


def _in_table(call: str, table: str, regmap: RegisterMap) -> str:
    """``call`` with ``"table"`` after ``"addr"`` when the map has tables other than holding
    (its register tools then take one); as it is otherwise."""
    if regmap.tables == ("holding",):
        return call
    document = msgspec.json.decode(call)
    arguments = document["arguments"]
    document["arguments"] = {"addr": arguments.pop("addr"), "table": table, **arguments}
    return msgspec.json.encode(document).decode()


#: A JSON number, as the shell passes a value's number on: its text, exactly.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _value_call(command: str, rest: Sequence[str]) -> str:
    """``read NAME`` (read_value) or ``write NAME VALUE`` (write_value) of a typed value:
    VALUE a number (passed on as written, exactly), ``true``/``false``, or text."""
    name = rest[0]
    if command == "read":
        if len(rest) != 1:
            raise ValueError("usage: read NAME")
        return msgspec.json.encode({"tool": "read_value", "arguments": {"name": name}}
                                   ).decode()
    if len(rest) != 2:
        raise ValueError("usage: write NAME VALUE (a number in its unit, true/false, or text)")
    word = rest[1]
    value = (word if _JSON_NUMBER.fullmatch(word) or word in ("true", "false")
             else msgspec.json.encode(word).decode())
    return (f'{{"tool":"write_value","arguments":{{"name":'
            f'{msgspec.json.encode(name).decode()},"value":{value}}}}}')


def shell_call(words: Sequence[str], regmap: RegisterMap | None = None) -> str:
    """The canonical call (JSON text) for one shell line split into words.

    With a register map, registers and fields may be named: ``read STATUS``, ``write CTRL
    0x03``, ``write CTRL.MODE FAST``, ``readblock DATA[0] 4`` (see :data:`SHELL_MAP_HELP`);
    a name that is none of the map's is refused with the closest names (``did you mean
    CTRL.MODE?``: case and small typos).

    Raises:
        ValueError: an unknown command or register, the wrong number of arguments, or an
            argument that is not a number; the message is meant for the prompt.
    """
    command, *rest = words
    if command not in _COMMANDS:
        raise ValueError(f"unknown command `{escape_text(command)}`; type help")
    if regmap is not None and not regmap.is_default:
        named = _named_call(words, regmap)
        if named is not None:
            return named
    tool, names = _COMMANDS[command]
    if command == "writeblock" and len(rest) >= 2:  # DATA...: one or more values
        names = ("ADDR", *("DATA" for _ in rest[1:]))
    if len(rest) != len(names):
        raise ValueError(f"usage: {' '.join([command, *names])}")
    values = []
    for name, word in zip(names, rest, strict=True):
        value = _number(word, name)
        if value is None:
            raise ValueError(f"{name} must be a number like 3 or 0x1f, got "
                             f"`{escape_text(word)}`")
        values.append(value)
    arguments: dict[str, int | list[int]]
    if command == "readblock":
        arguments = {"addr": values[0], "count": values[1]}
    elif command == "writeblock":
        arguments = {"addr": values[0], "data": values[1:]}
    else:
        arguments = dict(zip(("addr", "data"), values, strict=False))
    call = msgspec.json.encode({"tool": tool, "arguments": arguments}).decode()
    if regmap is not None and "addr" in arguments:  # a number: a holding register
        return _in_table(call, "holding", regmap)
    return call


def _show(observation: Observation, regmap: RegisterMap | None = None) -> str:
    result = observation.result or {}
    if observation.ok and "registers" in result:
        return "accepted  dump_registers\n" + format_registers(result["registers"], regmap)
    if observation.ok and "identity" in result:  # the device's words: shown escaped
        return display_text(f"accepted  identify_device: {result['identity']}")
    if observation.ok and "not_reset" in result:  # a bridge: what its reset could not do
        return display_text(f"accepted  reset_device: {result['not_reset']}")
    if observation.ok and "reset" in result:
        return "accepted  reset_device: every register holds its reset value"
    return describe(observation)


def run_shell(gate: Gate, session: Session, out: TextIO, *, where: str,
              interactive: bool) -> int:
    """Read commands until ``quit`` or end of input; run each through ``gate``.

    The greeting identifies the device when the session may call ``identify_device``, and
    otherwise names the tools the session may call. An empty line (or one of blanks) is
    skipped: only ``quit``, ``exit`` or the end of input (Ctrl-D) leave.

    Args:
        gate: a gate offering :func:`shell_tools`.
        session: the session every command runs in.
        out: where the verdicts go; each line is shown through
            :func:`~regdev.core._text.display_text`.
        where: the device's name for the greeting (a port, or the in-process register file).
        interactive: read with ``input()`` (line editing; Ctrl-C at the prompt clears the
            line) rather than from ``sys.stdin`` line by line.

    Returns:
        The exit status: 0 when every command was accepted (or none was given), 1 when some
        command was refused, failed, was interrupted or was not understood.
    """
    regmap = gate.regmap
    out.write(display_text(f"regdev shell on {where}. Type help for the commands, quit to "
                           "leave.") + "\n")
    out.flush()  # before the device is asked who it is, which may take --timeout seconds
    callable_ = [tool.name for tool in offered_tools(gate.tools, session)]
    if "identify_device" in callable_:
        out.write(_show(gate.handle(shell_call(["identify"]), session=session)) + "\n")
    else:  # a greeting the session would be refused is no greeting
        out.write(display_text(f"session {session.name} may call "
                               f"{', '.join(callable_) or 'no tool'}; other commands are "
                               "refused") + "\n")
    status = 0
    while True:
        out.flush()  # what was shown is seen before the shell waits (a pipe buffers it)
        try:
            line = input("regdev> ") if interactive else sys.stdin.readline()
        except KeyboardInterrupt:
            out.write("\n")
            continue
        except EOFError:  # Ctrl-D at the prompt
            out.write("\n")
            return status
        if not interactive and not line:  # end of input (an empty line is "\n")
            return status
        words = line.split()
        if not words:  # an empty line: the prompt again
            continue
        if words[0] in ("quit", "exit"):
            return status
        if words[0] == "help":
            out.write(SHELL_HELP if regmap.is_default else SHELL_MAP_HELP)
            continue
        try:
            raw = shell_call(words, regmap)
        except ValueError as error:
            out.write(display_text(f"error: {error}") + "\n")
            status = 1
            continue
        try:
            observation = gate.handle(raw, session=session)
            shown = _show(observation, regmap)
            status |= not observation.ok
        except KeyboardInterrupt:  # Ctrl-C cancels the command, as at the prompt
            shown = ("interrupted" + (" (the write or reset may or may not have happened: "
                                      "read back)" if words[0] in ("write", "reset") else ""))
            status = 1
        out.write(shown + "\n")
