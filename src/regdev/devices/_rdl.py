"""Register maps from files: SystemRDL 2.0 (through systemrdl-compiler) and the compiled JSON.

:func:`load_map` reads a map from a ``.rdl`` file (SystemRDL, compiled and elaborated by
systemrdl-compiler, the ``rdl`` extra, imported only here and only when needed) or from the
compiled JSON form (any other suffix; standard library only).

What regdev takes from SystemRDL (``docs/maps.md`` has the table): the top ``addrmap`` (the
last one defined, or ``top=``), its registers (arrays unrolled: ``DATA[0]``...), their names,
addresses, ``desc``, fields with bit ranges, ``sw`` access (``r``, ``rw``, ``w``), ``reset``,
``encode`` enums (with their members' ``desc`` or ``name``), ``onwrite = woclr``,
``onread = rclr`` (``rclr``), ``regwidth`` (8, 16, 32, 64) and ``accesswidth`` (the bus word:
a register's address is its byte address over the word's bytes), and the user-defined
properties ``regdev_protected``, ``regdev_identity`` and ``regdev_table`` (the register's
Modbus table, on a register or on a ``regfile`` that holds one table's registers, whose
addresses are then counted from the regfile's). Anything it cannot honour is refused naming
the construct and its ``file:line``, never ignored: a register of another width, registers
of different ``accesswidth``, a register file without ``regdev_table``, memory or nested
``addrmap``, ``external`` blocks, counters, interrupts, other ``onwrite`` and ``onread``
behaviours, ``singlepulse``, ``sw`` access ``w1``, ``rw1`` or ``na``, a reset value given by
reference. The compiler's own errors are shown as it words them, with their
``file:line:column``.

A map file is untrusted input (a vendor's, a colleague's, an attacker's), and the compiler
is not hardened against it: a 20,000-term expression crashes its parser (SIGSEGV), deep
nesting exhausts Python's recursion, embedded Perl runs, an array of 10**8 registers fills
memory. So what a map may be is bounded before the compiler runs (:data:`MAX_MAP_BYTES`,
:data:`MAX_NESTING`, :data:`MAX_STATEMENT_TOKENS`), and the compiler runs in a child process
of its own, limited in memory (:data:`COMPILE_MEMORY`) and time (:data:`COMPILE_SECONDS`),
with no Perl to run, which hands back the compiled JSON form; the reader refuses an array of
more registers than a map may hold (:data:`MAX_REGISTERS`) before unrolling it. Each refusal
is one :class:`MapError` line, whatever happened in the child (a crash, a recursion, a
timeout).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

from ..core._errors import MapError
from ..core._text import unicode_problem
from ._regmap import TABLES, WIDTHS, Bus, Field, Register, RegisterMap
from ._values import RDL_PROPERTIES, Value, value_of_rdl

__all__ = ["BUS_PROPERTIES", "COMPILE_MEMORY", "COMPILE_SECONDS", "IDENTITY_PROPERTY",
           "MAX_MAP_BYTES", "MAX_NESTING", "MAX_REGISTERS", "MAX_STATEMENT_TOKENS",
           "PROTECTED_PROPERTY", "RDL_INSTALL", "TABLE_PROPERTY", "load_map", "read_rdl"]

#: The largest map file read, in bytes (SystemRDL or the JSON form): 1 MiB; a map of 256
#: registers with every description at its limit is about that.
MAX_MAP_BYTES = 1 << 20
#: The deepest nesting of brackets (``(``, ``[``, ``{``) in a SystemRDL file; a map nests
#: a handful (addrmap, reg, field, enum).
MAX_NESTING = 64
#: The most tokens in one SystemRDL statement (between ``;``, ``{`` and ``}``; a string is
#: one token): a property assignment or an instance takes a few dozen; the compiler's
#: parser crashes on an expression of some thousands of terms.
MAX_STATEMENT_TOKENS = 500
#: The most registers a SystemRDL map holds once its arrays are unrolled (a Modbus table's
#: 65536): counted before unrolling, so an array of 10**8 registers is refused at once.
MAX_REGISTERS = 65536
#: Seconds the compiler may take (wall clock, and CPU); then the map is refused.
COMPILE_SECONDS = 30
#: Bytes of address space the compiler's process may take (``RLIMIT_AS``, where the platform
#: has it): 2 GiB.
COMPILE_MEMORY = 2 << 30
#: How the child process says the map was refused (its one line follows on stdout).
_REFUSED = 3

#: The user-defined property that marks a register protected (writes need approval).
PROTECTED_PROPERTY = "regdev_protected"
#: The user-defined property that marks an identity register (a chip ID, read on connect).
IDENTITY_PROPERTY = "regdev_identity"
#: The user-defined property that puts a register (or a regfile's registers) in a Modbus
#: table: ``"holding"``, ``"input"``, ``"coil"`` or ``"discrete"``.
TABLE_PROPERTY = "regdev_table"
#: The user-defined properties of the top addrmap that put the chip on a bus behind the C
#: firmware's bridge (docs/maps.md, "A chip behind a bridge"), each with its type and the
#: :class:`Bus` attribute it sets.
BUS_PROPERTIES: Final = {"regdev_bus": (str, "kind"), "regdev_i2c_address": (int, "address"),
                         "regdev_bus_clock": (int, "clock"),
                         "regdev_reg_addr_width": (int, "addr_width"),
                         "regdev_auto_increment": (bool, "auto_increment"),
                         "regdev_spi_mode": (int, "mode"), "regdev_spi_cs": (str, "cs"),
                         "regdev_spi_read_mask": (int, "read_mask"),
                         "regdev_spi_write_mask": (int, "write_mask"),
                         "regdev_spi_verify": (bool, "verify")}
#: How to get systemrdl-compiler: installed as a tool, or in a clone.
RDL_INSTALL = ("pip install 'regdev[rdl]' (pipx install 'regdev[rdl]' for the command; in a "
               "clone of regdev, scripts/test, scripts/demo and scripts/serve install it)")
#: Field properties regdev refuses when set (a non-default value), and why.
_REFUSED_FIELD = {
    "counter": "counters", "intr": "interrupts", "singlepulse": "singlepulse fields",
    "sticky": "sticky interrupt bits", "stickybit": "sticky interrupt bits",
    "incrvalue": "counters", "decrvalue": "counters", "overflow": "counters",
    "swwe": "write enables", "swwel": "write enables",
}


def load_map(path: str | Path) -> RegisterMap:
    """Read a register map: SystemRDL when the name ends in ``.rdl`` (any case), else the
    compiled JSON form.

    Raises:
        MapError: the file cannot be read, the compiler reports an error, or the map holds
            something regdev does not support; one line naming the file (and the line).
    """
    path = Path(path)
    if path.suffix.lower() == ".rdl":
        return read_rdl(path)
    return RegisterMap.from_json(_read_bounded(path), str(path))


def _read_bounded(path: Path) -> bytes:
    """The bytes of a map file of at most :data:`MAX_MAP_BYTES` (more is not read).

    Raises:
        MapError: it cannot be read, or it is larger.
    """
    try:
        with path.open("rb") as file:
            data = file.read(MAX_MAP_BYTES + 1)
    except OSError as error:
        raise MapError(f"cannot read {path}: {error.strerror or error}") from None
    if len(data) > MAX_MAP_BYTES:
        raise MapError(f"{path}: the file is larger than {MAX_MAP_BYTES} bytes, more than a "
                       "register map of 256 registers can need")
    return data


def _where(ref: Any, fallback: str) -> str:
    """``file:line:column`` of a systemrdl source reference (what is known of it)."""
    if ref is None:
        return fallback
    path = getattr(ref, "path", None) or fallback
    try:
        line = ref.line
        column = ref.line_selection[0] + 1
    except (AttributeError, TypeError, ValueError, IndexError):
        return str(path)
    return f"{path}:{line}:{column}"


def read_rdl(path: str | Path, top: str | None = None) -> RegisterMap:
    """Compile a SystemRDL file and read its top ``addrmap`` as a register map.

    The file is checked against regdev's bounds first (size, nesting, statement length), then
    compiled in a child process limited in time and memory, with no Perl to run (see the
    module's docstring); whatever happens there comes back as one line.

    Args:
        path: the ``.rdl`` file.
        top: the name of the ``addrmap`` definition to elaborate; None takes the last one
            defined (systemrdl-compiler's rule).

    Raises:
        MapError: systemrdl-compiler is not installed (the message says how to install it),
            the file cannot be read or is not UTF-8 (``invalid UTF-8: byte N is 0xXX``, as a
            JSON map's), it is over a bound (:data:`MAX_MAP_BYTES`, :data:`MAX_NESTING`,
            :data:`MAX_STATEMENT_TOKENS`, :data:`MAX_REGISTERS`, naming ``file:line``), it
            embeds Perl, the compiler reports an error (its first, as ``file:line:column:
            text``), crashes, recurses too deeply, or takes more than
            :data:`COMPILE_SECONDS` or :data:`COMPILE_MEMORY`, or the map holds a construct
            regdev does not support (naming it and its ``file:line:column``).
    """
    path = Path(path)
    if importlib.util.find_spec("systemrdl") is None:
        raise MapError(f"{path}: reading SystemRDL needs the systemrdl-compiler package: "
                       f"{RDL_INSTALL}; or give the map in its compiled JSON form")
    data = _read_bounded(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:  # said as a JSON map's is, never as Python's codec
        raise MapError(f"{path}: not valid SystemRDL: {unicode_problem(error)}") from None
    problem = _over_bounds(text)
    if problem is not None:
        raise MapError(f"{path}:{problem}")
    # (from_dict, not from_json: a typed value is placed by its line in the .rdl file, where
    # the child checked it, not by its line in the child's JSON)
    return RegisterMap.from_dict(json.loads(_compile_apart(path, top)), str(path))


#: SystemRDL's tokens as far as the bounds care: comments and strings (skipped whole), a
#: preprocessor directive's line (with its continuations; it ends a statement), the brackets,
#: the statement ends, and any other token.
_TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|'
                    r"(`(?:define|undef|include|ifdef|ifndef|elsif|else|endif|line)\b"
                    r"(?:\\\n|[^\n])*)|([(\[{])|([)\]}])|(;)|[A-Za-z0-9_'`$]+|\S", re.S)


#: A macro's definition, and a macro's use.
_DEFINE = re.compile(r"`define\s+(\w+)(.*)", re.S)
_USE = re.compile(r"`(\w+)")


def _over_bounds(text: str) -> str | None:
    """``LINE: why`` when ``text`` nests brackets deeper than :data:`MAX_NESTING`, has a
    statement of more than :data:`MAX_STATEMENT_TOKENS` tokens, or a chain of ```define``
    macros (each using the one before) longer than :data:`MAX_NESTING`; else None."""
    depth = tokens = 0
    macros: dict[str, int] = {}  # how deep each macro's expansion nests
    for match in _TOKEN.finditer(text):
        directive, opening, closing, end = match.groups()
        if directive:
            define = _DEFINE.match(directive)
            if define is not None:
                nests = 1 + max((macros.get(use, 0) for use in _USE.findall(define[2])),
                                default=0)
                macros[define[1]] = nests
                if nests > MAX_NESTING:
                    return (f"{text.count(chr(10), 0, match.start()) + 1}: `define macros "
                            f"chained more than {MAX_NESTING} deep")
        elif opening:
            depth += 1
            if depth > MAX_NESTING:
                return (f"{text.count(chr(10), 0, match.start()) + 1}: brackets nested more "
                        f"than {MAX_NESTING} deep; a register map needs a handful")
        elif closing:
            depth -= 1
        if directive or opening == "{" or closing == "}" or end:
            tokens = 0
            continue
        if match.group().startswith(("//", "/*")):
            continue
        tokens += 1
        if tokens > MAX_STATEMENT_TOKENS:
            return (f"{text.count(chr(10), 0, match.start()) + 1}: a statement of more than "
                    f"{MAX_STATEMENT_TOKENS} tokens (an expression that long is not a "
                    "register map's)")
    return None


def _compile_apart(path: Path, top: str | None) -> str:
    """The compiled JSON form of the SystemRDL file ``path``, made by a child process
    (:func:`_child`) limited to :data:`COMPILE_SECONDS` and :data:`COMPILE_MEMORY`.

    Raises:
        MapError: the child refused the map (its line), crashed, or ran out of time.
    """
    env = dict(os.environ, PATH="")  # no perl: embedded Perl is refused, never run
    command = [sys.executable, "-c", _CHILD, str(Path(__file__).resolve().parents[1]),
               str(path), top or ""]
    try:
        done = subprocess.run(command, capture_output=True, env=env, check=False,
                              timeout=COMPILE_SECONDS, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise MapError(f"{path}: the SystemRDL compiler took more than {COMPILE_SECONDS} s; "
                       "a register map compiles in about one") from None
    except OSError as error:
        raise MapError(f"{path}: cannot run the SystemRDL compiler: "
                       f"{error.strerror or error}") from None
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode == 0:
        return out
    if done.returncode == _REFUSED:
        raise MapError(out.strip() or f"{path}: refused by the SystemRDL compiler")
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        if name == "SIGXCPU":  # RLIMIT_CPU
            raise MapError(f"{path}: the SystemRDL compiler took more than {COMPILE_SECONDS} "
                           "s of CPU time; a register map compiles in about one")
        raise MapError(f"{path}: the SystemRDL compiler crashed on it ({name}): an "
                       "expression or a nesting too deep, or more than "
                       f"{COMPILE_MEMORY >> 20} MiB of memory")
    raise MapError(f"{path}: the SystemRDL compiler failed (exit status {done.returncode}); "
                   "rerun with the compiled JSON form to see if the map is the cause")


#: The child's program: regdev's package directory stands for the package, so that what
#: ``regdev/__init__.py`` imports (everything) is not imported; this module and the map
#: model import only the standard library (and systemrdl).
_CHILD = ("import sys, types; package = types.ModuleType('regdev'); "
          "package.__path__ = [sys.argv.pop(1)]; sys.modules['regdev'] = package; "
          "from regdev.devices._rdl import _child; _child()")


def _child() -> None:
    """The child process of :func:`_compile_apart`: ``argv`` is the file and the top
    addrmap's name (or ""); writes the compiled JSON form (exit 0) or one line (exit 3)."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource  # noqa: PLC0415 - POSIX only (not on Windows: no limit there)

        resource.setrlimit(resource.RLIMIT_AS, (COMPILE_MEMORY, COMPILE_MEMORY))
        resource.setrlimit(resource.RLIMIT_CPU, (COMPILE_SECONDS, COMPILE_SECONDS))
    path, top = sys.argv[1], sys.argv[2] or None
    try:
        text = _compile(Path(path), top).to_json()
    except MapError as error:
        line, status = str(error), _REFUSED
    except RecursionError:
        line, status = (f"{path}: nested too deeply for the SystemRDL compiler (an expression "
                        "or a chain of `define macros)"), _REFUSED
    except MemoryError:
        line, status = (f"{path}: the SystemRDL compiler needed more than "
                        f"{COMPILE_MEMORY >> 20} MiB"), _REFUSED
    else:
        line, status = text, 0
    sys.stdout.write(line)
    sys.stdout.flush()
    os._exit(status)  # nothing more to run: skip the interpreter's teardown


def _compile(path: Path, top: str | None) -> RegisterMap:
    """Compile and read the map, in this process (the child's work)."""
    systemrdl = importlib.import_module("systemrdl")
    messages = importlib.import_module("systemrdl.messages")
    udp = importlib.import_module("systemrdl.udp")
    component = importlib.import_module("systemrdl.component")
    errors: list[str] = []

    class _Collect(messages.MessagePrinter):  # type: ignore[misc,name-defined]
        """Keeps the compiler's errors (as file:line:column: text) instead of printing."""

        def print_message(self, severity: Any, text: str, src_ref: Any) -> None:
            if severity >= messages.Severity.ERROR:
                if text.startswith("Input contains Perl preprocessor tags"):
                    text = ("embedded Perl (<% ... %>) is not supported by regdev: a map file "
                            "runs no code")
                errors.append(f"{_where(src_ref, str(path))}: {text}")

    class _Protected(udp.UDPDefinition):  # type: ignore[misc,name-defined]
        name = PROTECTED_PROPERTY
        valid_components = {component.Reg}  # noqa: RUF012 - the library reads a class attribute
        valid_type = bool

    class _Identity(udp.UDPDefinition):  # type: ignore[misc,name-defined]
        name = IDENTITY_PROPERTY
        valid_components = {component.Reg}  # noqa: RUF012 - the library reads a class attribute
        valid_type = bool

    class _Table(udp.UDPDefinition):  # type: ignore[misc,name-defined]
        name = TABLE_PROPERTY
        valid_components = {component.Reg, component.Regfile}  # noqa: RUF012 - as above
        valid_type = str

    compiler = systemrdl.RDLCompiler(message_printer=_Collect())
    compiler.register_udp(_Protected, soft=True)
    compiler.register_udp(_Identity, soft=True)
    for udp_name, udp_type in RDL_PROPERTIES.items():  # a typed value's (docs/maps.md)
        compiler.register_udp(type(udp_name, (udp.UDPDefinition,), {
            "name": udp_name, "valid_components": {component.Reg}, "valid_type": udp_type}),
            soft=True)
    compiler.register_udp(_Table, soft=True)
    for bus_name, (bus_type, _attribute) in BUS_PROPERTIES.items():
        compiler.register_udp(type(f"_Bus_{bus_name}", (udp.UDPDefinition,), {
            "name": bus_name, "valid_components": {component.Addrmap},
            "valid_type": bus_type}), soft=True)
    try:
        compiler.compile_file(str(path))
        root = compiler.elaborate(top_def_name=top)
    except systemrdl.RDLCompileError as error:
        first = errors[0] if errors else f"{path}: {error}"
        for udp_name in (PROTECTED_PROPERTY, IDENTITY_PROPERTY):
            if f"property '{udp_name}'" in first:
                first += (f" (declare it first: property {udp_name} {{ type = boolean; "
                          "component = reg; };)")
        if f"property '{TABLE_PROPERTY}'" in first:
            first += (f" (declare it first: property {TABLE_PROPERTY} {{ type = string; "
                      "component = reg | regfile; };)")
        raise MapError(first) from None
    except OSError as error:  # a file it includes
        raise MapError(f"{path}: cannot read a file it includes: {error.strerror or error}"
                       ) from None
    except UnicodeDecodeError as error:  # a file it includes
        raise MapError(f"{path}: a file it includes is not valid SystemRDL: "
                       f"{unicode_problem(error)}") from None
    return _Reader(path, systemrdl).map(root.top)


class _Reader:
    """Turns an elaborated systemrdl tree into a :class:`RegisterMap`, refusing what regdev
    does not support."""

    def __init__(self, path: Path, systemrdl: Any) -> None:
        self.path = path
        self.node = importlib.import_module("systemrdl.node")
        self.rdltypes = importlib.import_module("systemrdl.rdltypes")
        #: The map's bus word in bits (every register's ``accesswidth``), once one is read.
        self.word: int | None = None

    def refuse(self, node: Any, what: str, prop: str | None = None) -> MapError:
        ref = node.property_src_ref.get(prop, node.inst_src_ref) if prop else node.inst_src_ref
        return MapError(f"{_where(ref, str(self.path))}: {what} is not supported by regdev "
                        "(see docs/maps.md for what is)")

    def map(self, top: Any) -> RegisterMap:
        node = self.node
        count = 0
        for child in top.descendants(unroll=False):  # counted before anything is unrolled
            if isinstance(child, node.RegNode):
                size = 1
                for dimension in child.array_dimensions or ():
                    size *= dimension
                count += size
                if count > MAX_REGISTERS:
                    shape = "".join(f"[{d}]" for d in child.array_dimensions or ())
                    raise self.refuse(child, f"register {child.inst_name}{shape}, which makes "
                                             f"more than the {MAX_REGISTERS} registers a "
                                             "SystemRDL map holds,")
        registers = []
        values: list[Value] = []
        for child in top.descendants(unroll=True):
            if isinstance(child, node.RegNode):
                registers.append(self.register(child))
                value = value_of_rdl(child, registers[-1].name or "", registers[-1].addr,
                                     getattr(registers[-1], "table", "holding"),
                                     lambda n, p: _where(n.property_src_ref.get(
                                         p, n.inst_src_ref), str(self.path)))
                if value is not None:
                    values.append(value)
            elif (isinstance(child, node.RegfileNode) and child.parent.inst is top.inst
                  and child.get_property(TABLE_PROPERTY, default=None) is not None):
                continue  # one table's registers: read with them
            elif isinstance(child, (node.RegfileNode, node.AddrmapNode, node.MemNode)):
                kind = child.component_type_name
                raise self.refuse(child, f"{kind} {child.inst_name} (regdev maps are one "
                                         "addrmap of registers)")
            elif isinstance(child, node.SignalNode):
                raise self.refuse(child, f"signal {child.inst_name}")
        if top.get_property("bridge", default=False):
            raise self.refuse(top, "a bridge addrmap", "bridge")
        if not registers:
            raise MapError(f"{_where(top.inst_src_ref, str(self.path))}: addrmap "
                           f"{top.inst_name} has no registers")
        given = {attribute: top.get_property(name, default=None)
                 for name, (_type, attribute) in BUS_PROPERTIES.items()}
        given = {key: value for key, value in given.items() if value is not None}
        try:
            bus = Bus(**given) if given else None
        except TypeError:
            raise MapError(f"{_where(top.inst_src_ref, str(self.path))}: addrmap "
                           f"{top.inst_name}: a bus needs regdev_bus"
                           ) from None
        except MapError as error:
            raise MapError(f"{_where(top.inst_src_ref, str(self.path))}: {error}") from None
        try:
            return RegisterMap(registers, name=top.inst_name,
                               description=_text(top.get_property("desc", default=None)
                                                 or top.get_property("name", default="")),
                               values=values, bus=bus)
        except MapError as error:
            if values and str(error).startswith(str(self.path)):  # a value's: placed
                raise
            raise MapError(f"{_where(top.inst_src_ref, str(self.path))}: {error}") from None

    def register(self, reg: Any) -> Register:
        name = reg.inst_name + "".join(f"[{i}]" for i in (reg.current_idx or ()))
        what = f"register {name}"
        width = reg.get_property("regwidth")
        if width not in WIDTHS:
            raise self.refuse(reg, f"{what}: regwidth {width} (regdev registers are 8, 16, 32 "
                                   "or 64 bits)", "regwidth")
        word = reg.get_property("accesswidth", default=width)
        if reg.external:
            raise self.refuse(reg, f"{what}: an external register")
        if reg.get_property("ispresent", default=True) is False:  # pragma: no cover
            raise self.refuse(reg, f"{what}: ispresent = false")
        table, addr = self.place(reg, what, word)
        if table in ("coil", "discrete"):
            width = 1  # one bit, in a register of at least 8 (SystemRDL's narrowest)
        elif self.word is None:
            self.word = word
        elif word != self.word:
            raise self.refuse(reg, f"{what}: accesswidth {word}, where the registers before "
                                   f"have {self.word} (one bus word per map: set `default "
                                   f"accesswidth = {min(word, self.word)};`)", "accesswidth")
        fields = tuple(self.field(reg, name, each) for each in reg.fields())
        protected = reg.get_property(PROTECTED_PROPERTY, default=None)
        identity = reg.get_property(IDENTITY_PROPERTY, default=None)
        try:
            return Register(name=name, addr=addr,
                            description=_text(reg.get_property("desc", default=None)
                                              or reg.get_property("name", default="")),
                            fields=fields, protected=bool(protected), identity=bool(identity),
                            width=width, table=table)
        except MapError as error:
            raise MapError(f"{_where(reg.inst_src_ref, str(self.path))}: {error}") from None

    def place(self, reg: Any, what: str, word: int) -> tuple[str, int]:
        """A register's table (its ``regdev_table``, else its regfile's, else holding) and
        its address: its byte address (from its regfile's, in a regfile with a table) over
        the bus word's bytes.

        Raises:
            MapError: the table is not one of :data:`TABLES`, or the address is not a whole
                number of bus words.
        """
        table = reg.get_property(TABLE_PROPERTY, default=None)
        parent = reg.parent
        offset = 0
        if isinstance(parent, self.node.RegfileNode):
            offset = parent.absolute_address
            table = table or parent.get_property(TABLE_PROPERTY, default=None)
        table = table or "holding"
        if table not in TABLES:
            raise self.refuse(reg, f"{what}: {TABLE_PROPERTY} = {table!r} (tables are "
                                   f"{', '.join(TABLES)})", TABLE_PROPERTY)
        offset = reg.absolute_address - offset
        unit = word // 8
        if offset % unit:
            raise self.refuse(reg, f"{what}: byte address 0x{offset:X}, not a whole number "
                                   f"of {word}-bit bus words (accesswidth)")
        return table, offset // unit

    def field(self, reg: Any, register: str, field: Any) -> Field:
        types = self.rdltypes
        what = f"field {register}.{field.inst_name}"
        for prop, kind in _REFUSED_FIELD.items():
            value = field.get_property(prop, default=None)
            if value not in (None, False, 0) and not (prop == "incrvalue" and value == 1):
                raise self.refuse(field, f"{what}: {prop} ({kind})", prop)
        sw = field.get_property("sw")
        access = {types.AccessType.rw: "rw", types.AccessType.r: "r",
                  types.AccessType.w: "w"}.get(sw)
        if access is None:
            raise self.refuse(field, f"{what}: sw = {sw.name}", "sw")
        onwrite = field.get_property("onwrite", default=None)
        if onwrite is not None and onwrite != types.OnWriteType.woclr:
            raise self.refuse(field, f"{what}: onwrite = {onwrite.name}", "onwrite")
        onread = field.get_property("onread", default=None)
        if onread is not None and onread != types.OnReadType.rclr:
            raise self.refuse(field, f"{what}: onread = {onread.name}", "onread")
        reset = field.get_property("reset", default=None)
        if reset is not None and type(reset) is not int:
            raise self.refuse(field, f"{what}: a reset value by reference", "reset")
        encode = field.get_property("encode", default=None)
        pairs = tuple((member.name, member.value) for member in encode) if encode else ()
        meanings = tuple((member.name, _text(member.rdl_desc or member.rdl_name))
                         for member in encode or () if member.rdl_desc or member.rdl_name)
        try:
            return Field(name=field.inst_name, lsb=field.lsb, msb=field.msb, access=access,
                         reset=reset or 0, onwrite="woclr" if onwrite is not None else None,
                         onread="rclr" if onread is not None else None, encode=pairs,
                         description=_text(field.get_property("desc", default=None)
                                           or field.get_property("name", default="")),
                         enum_descriptions=meanings)
        except MapError as error:
            raise MapError(f"{_where(field.inst_src_ref, str(self.path))}: {error}") from None


def _text(value: object) -> str:
    """A description on one line (SystemRDL's ``desc`` may span several)."""
    return " ".join(str(value or "").split())
