"""Register maps from files: SystemRDL 2.0 (through systemrdl-compiler) and the compiled JSON.

:func:`load_map` reads a map from a ``.rdl`` file (SystemRDL, compiled and elaborated by
systemrdl-compiler, the ``rdl`` extra, imported only here and only when needed) or from the
compiled JSON form (any other suffix; standard library only).

What regdev takes from SystemRDL (``docs/maps.md`` has the table): the top ``addrmap`` (the
last one defined, or ``top=``), its registers (arrays unrolled: ``DATA[0]``...), their names,
addresses, ``desc``, fields with bit ranges, ``sw`` access (``r``, ``rw``, ``w``), ``reset``,
``encode`` enums, ``onwrite = woclr``, ``onread = rclr`` (``rclr``), and the user-defined
property ``regdev_protected`` on a register. Anything it cannot honour is refused naming the
construct and its ``file:line``, never ignored: a register that is not 8 bits wide, an
``accesswidth`` other than 8, a register file or memory or nested ``addrmap``, ``external``
blocks, counters, interrupts, other ``onwrite`` and ``onread`` behaviours, ``singlepulse``,
``sw`` access ``w1``, ``rw1`` or ``na``, a reset value given by reference, an address above
255. The compiler's own errors are shown as it words them, with their ``file:line:column``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from ..core._errors import MapError
from ..core._text import unicode_problem
from ._regmap import Field, Register, RegisterMap

__all__ = ["IDENTITY_PROPERTY", "PROTECTED_PROPERTY", "RDL_INSTALL", "load_map", "read_rdl"]

#: The user-defined property that marks a register protected (writes need approval).
PROTECTED_PROPERTY = "regdev_protected"
#: The user-defined property that marks an identity register (a chip ID, read on connect).
IDENTITY_PROPERTY = "regdev_identity"
#: How to get systemrdl-compiler (regdev is not on PyPI yet: from a clone).
RDL_INSTALL = ("in a clone of regdev: .venv/bin/pip install -e '.[rdl]' (scripts/test, "
               "scripts/demo and scripts/serve install it)")
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
    try:
        data = path.read_bytes()
    except OSError as error:
        raise MapError(f"cannot read {path}: {error.strerror or error}") from None
    return RegisterMap.from_json(data, str(path))


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

    Args:
        path: the ``.rdl`` file.
        top: the name of the ``addrmap`` definition to elaborate; None takes the last one
            defined (systemrdl-compiler's rule).

    Raises:
        MapError: systemrdl-compiler is not installed (the message says how to install it),
            the file cannot be read or is not UTF-8 (``invalid UTF-8: byte N is 0xXX``, as a
            JSON map's), the compiler reports an error (its first, as
            ``file:line:column: text``), or the map holds a construct regdev does not support
            (naming it and its ``file:line:column``).
    """
    path = Path(path)
    try:
        systemrdl = importlib.import_module("systemrdl")
        messages = importlib.import_module("systemrdl.messages")
        udp = importlib.import_module("systemrdl.udp")
        component = importlib.import_module("systemrdl.component")
    except ImportError:
        raise MapError(f"{path}: reading SystemRDL needs the systemrdl-compiler package: "
                       f"{RDL_INSTALL}; or give the map in its compiled JSON form") from None
    try:
        path.read_bytes().decode("utf-8")
    except OSError as error:
        raise MapError(f"cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:  # said as a JSON map's is, never as Python's codec
        raise MapError(f"{path}: not valid SystemRDL: {unicode_problem(error)}") from None

    errors: list[str] = []

    class _Collect(messages.MessagePrinter):  # type: ignore[misc,name-defined]
        """Keeps the compiler's errors (as file:line:column: text) instead of printing."""

        def print_message(self, severity: Any, text: str, src_ref: Any) -> None:
            if severity >= messages.Severity.ERROR:
                errors.append(f"{_where(src_ref, str(path))}: {text}")

    class _Protected(udp.UDPDefinition):  # type: ignore[misc,name-defined]
        name = PROTECTED_PROPERTY
        valid_components = {component.Reg}  # noqa: RUF012 - the library reads a class attribute
        valid_type = bool

    class _Identity(udp.UDPDefinition):  # type: ignore[misc,name-defined]
        name = IDENTITY_PROPERTY
        valid_components = {component.Reg}  # noqa: RUF012 - the library reads a class attribute
        valid_type = bool

    compiler = systemrdl.RDLCompiler(message_printer=_Collect())
    compiler.register_udp(_Protected, soft=True)
    compiler.register_udp(_Identity, soft=True)
    try:
        compiler.compile_file(str(path))
        root = compiler.elaborate(top_def_name=top)
    except systemrdl.RDLCompileError as error:
        first = errors[0] if errors else f"{path}: {error}"
        for udp_name in (PROTECTED_PROPERTY, IDENTITY_PROPERTY):
            if f"property '{udp_name}'" in first:
                first += (f" (declare it first: property {udp_name} {{ type = boolean; "
                          "component = reg; };)")
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

    def refuse(self, node: Any, what: str, prop: str | None = None) -> MapError:
        ref = node.property_src_ref.get(prop, node.inst_src_ref) if prop else node.inst_src_ref
        return MapError(f"{_where(ref, str(self.path))}: {what} is not supported by regdev "
                        "(see docs/maps.md for what is)")

    def map(self, top: Any) -> RegisterMap:
        node = self.node
        registers = []
        for child in top.descendants(unroll=True):
            if isinstance(child, node.RegNode):
                registers.append(self.register(child))
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
        try:
            return RegisterMap(registers, name=top.inst_name,
                               description=_text(top.get_property("desc", default=None)
                                                 or top.get_property("name", default="")))
        except MapError as error:
            raise MapError(f"{_where(top.inst_src_ref, str(self.path))}: {error}") from None

    def register(self, reg: Any) -> Register:
        name = reg.inst_name + "".join(f"[{i}]" for i in (reg.current_idx or ()))
        what = f"register {name}"
        width = reg.get_property("regwidth")
        if width != 8:
            raise self.refuse(reg, f"{what}: regwidth {width} (regdev registers are 8 bits: "
                                   "set `default regwidth = 8;`)",
                              "regwidth")
        if reg.get_property("accesswidth", default=8) != 8:
            raise self.refuse(reg, f"{what}: accesswidth "
                                   f"{reg.get_property('accesswidth')}", "accesswidth")
        if reg.external:
            raise self.refuse(reg, f"{what}: an external register")
        if reg.get_property("ispresent", default=True) is False:  # pragma: no cover
            raise self.refuse(reg, f"{what}: ispresent = false")
        addr = reg.absolute_address
        if addr > 255:
            raise self.refuse(reg, f"{what}: address 0x{addr:X} (addresses are 0..0xFF)")
        fields = tuple(self.field(reg, name, each) for each in reg.fields())
        protected = reg.get_property(PROTECTED_PROPERTY, default=None)
        identity = reg.get_property(IDENTITY_PROPERTY, default=None)
        try:
            return Register(name=name, addr=addr,
                            description=_text(reg.get_property("desc", default=None)
                                              or reg.get_property("name", default="")),
                            fields=fields, protected=bool(protected), identity=bool(identity))
        except MapError as error:
            raise MapError(f"{_where(reg.inst_src_ref, str(self.path))}: {error}") from None

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
        try:
            return Field(name=field.inst_name, lsb=field.lsb, msb=field.msb, access=access,
                         reset=reset or 0, onwrite="woclr" if onwrite is not None else None,
                         onread="rclr" if onread is not None else None, encode=pairs,
                         description=_text(field.get_property("desc", default=None)
                                           or field.get_property("name", default="")))
        except MapError as error:
            raise MapError(f"{_where(field.inst_src_ref, str(self.path))}: {error}") from None


def _text(value: object) -> str:
    """A description on one line (SystemRDL's ``desc`` may span several)."""
    return " ".join(str(value or "").split())
