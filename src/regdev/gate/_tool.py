"""What a tool is: :class:`Tool`, declared once as the JSON Schema that models are given, and
:class:`ToolSet`, the tools offered together.

The validators and the tool definitions given to models are derived from these
declarations; nothing restates them. The tools regdev offers (the register map's, the default
map's by default) are built in ``_maptools.py``; ``_tools.py`` is the registry's front.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any

from ..core._errors import SchemaError
from ..core._json import MAX_INT_DIGITS, load_json
from ..core._observation import Refusal
from ..core._text import escape_text
from ..devices._device import Device
from ._schema import check_input_schema, is_integer

__all__ = ["Changes", "Handler", "Rules", "Tool", "ToolSet"]

#: A tool's implementation: ``(device, validated arguments) -> result object``.
Handler = Callable[[Device, dict[str, Any]], dict[str, Any]]
#: A tool's own checks after the schema's (the register map's rules): ``(bound arguments) ->
#: a validate-stage Refusal, or None``.
Rules = Callable[[dict[str, Any]], "Refusal | None"]
#: Which registers a call changes: ``(bound arguments) -> addresses``, or None for every one.
Changes = Callable[[dict[str, Any]], "tuple[int, ...] | None"]


class Tool:
    """One tool offered to models. Immutable.

    Args:
        name: the tool name models call, matched exactly.
        description: what the tool does, written for a model.
        input_schema: JSON Schema of the arguments object (the supported subset; see
            ``docs/validator.md``), in the form MCP calls ``inputSchema``. A deep copy is
            taken here: changing the object passed in, or the one :attr:`input_schema`
            returns, changes nothing in the tool, so its validators (compiled and reference)
            and :meth:`bind` always read the same schema.
        read_only: True when the tool never changes the device.
        idempotent: True when repeating a call with the same arguments has no further effect.
        destructive: True when a call may destroy state (e.g. overwrite a stored value) rather
            than only add to it. Meaningful only when ``read_only`` is False.
        open_world: True when the tool reaches an open set of external entities (the web);
            False for a closed domain such as one device's registers.
        handler: runs the call on a device; None for a tool that is only validated.
        rules: the tool's own checks, run by the gate after the schema's (after ranges,
            before authorize) on the bound arguments: a validate-stage :class:`Refusal`, or
            None. The tools of a register map check its per-register and per-field rules
            here (``no-register``, ``read-only-field``, ``reserved-bits``, ``field-value``).
        changes: which registers a call changes, for the policy's read-only and protected
            registers: ``(arguments) -> addresses``, or None for every register. When not
            given: none for a read-only tool, else ``arguments["addr"]`` when it is an
            integer, else every register.
        repeat_risk: why a call is not safe to send twice, when it is not:
            ``(arguments) -> str | None``, a few words ("it writes 1 to write-1-to-clear
            bits of STATUS (0x02)"), or None for a call that is harmless to repeat. A call
            that says a risk and loses its reply (``device-timeout``) is ``outcome-unknown``:
            its idempotency key stays taken, so a retry with it is not run (``_gate.py``).
            None (the default): every call of the tool is harmless to repeat, as a write of
            a plain read-write register is.
        result_bytes: the most bytes the JSON text of the handler's result can take, when
            the handler guarantees a bound (the register tools' results, such as
            ``{"addr":15,"data":255}``, take at most 22); None (the default) for no bound. A
            gate measures a result against its output cap only when the bound is over the
            cap (or there is none).

    The four flags default to MCP's defaults for tool annotations (MCP specification schema,
    ``ToolAnnotations``, since 2025-03-26: readOnlyHint false, destructiveHint true,
    idempotentHint false, openWorldHint true), so a flag left unstated claims nothing
    reassuring.

    Raises:
        SchemaError: ``name`` is not a non-empty string, or ``input_schema`` is outside the
            supported subset.
        ValueError: ``result_bytes`` is neither None nor a positive int.
    """

    __slots__ = ("_bind_plan", "_schema", "changes", "description", "destructive", "handler",
                 "idempotent", "name", "open_world", "read_only", "repeat_risk", "result_bytes",
                 "rules")

    name: str
    description: str
    read_only: bool
    idempotent: bool
    destructive: bool
    open_world: bool
    handler: Handler | None
    rules: Rules | None
    changes: Changes | None
    repeat_risk: Callable[[dict[str, Any]], str | None] | None
    result_bytes: int | None
    _schema: dict[str, Any]
    #: What bind() looks at: the top-level property names, and whether any property is an
    #: object schema.
    _bind_plan: tuple[tuple[str, ...], bool]

    def __init__(self, name: str, description: str, input_schema: Mapping[str, Any], *,
                 read_only: bool = False, idempotent: bool = False, destructive: bool = True,
                 open_world: bool = True, handler: Handler | None = None,
                 rules: Rules | None = None, changes: Changes | None = None,
                 result_bytes: int | None = None,
                 repeat_risk: Callable[[dict[str, Any]], str | None] | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise SchemaError("a tool name must be a non-empty string", "/name")
        if result_bytes is not None and (type(result_bytes) is not int or result_bytes <= 0):
            raise ValueError(f"result_bytes must be None or a positive int (bytes), got "
                             f"{result_bytes!r}")
        schema: dict[str, Any] = _copy_json(
            dict(input_schema) if isinstance(input_schema, Mapping) else input_schema)
        check_input_schema(schema, "/inputSchema")
        # What bind() looks at: the top-level properties that may hold an integer, and whether
        # any property is an object schema (then the slow walk handles nesting). An array of
        # ints needs nothing; any other array takes the slow walk.
        properties = schema.get("properties") or {}
        set_ = object.__setattr__
        for attribute, value in (
                ("name", name), ("description", description), ("read_only", read_only),
                ("idempotent", idempotent), ("destructive", destructive),
                ("open_world", open_world), ("handler", handler), ("rules", rules),
                ("changes", changes), ("result_bytes", result_bytes),
                ("repeat_risk", repeat_risk), ("_schema", schema),
                ("_bind_plan", (
                    tuple(key for key, sub in properties.items() if isinstance(sub, dict)),
                    any(isinstance(sub, dict)
                        and ("properties" in sub or sub.get("type") == "object")
                        for sub in properties.values())))):
            set_(self, attribute, value)

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments object: a new deep copy on every access (changing
        it changes nothing in the tool; read it once where it is read often)."""
        schema: dict[str, Any] = _copy_json(self._schema)
        return schema

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Tool is immutable: cannot set `{name}`")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Tool is immutable: cannot delete `{name}`")

    def _key(self) -> tuple[Any, ...]:
        return (self.name, self.description, self._schema, self.read_only, self.idempotent,
                self.destructive, self.open_world)

    def __eq__(self, other: object) -> bool:
        """Tools are equal when all but their handlers, rules and changes are (as the register
        tools compare)."""
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Tool)
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.name, self.description, self.read_only, self.idempotent,
                     self.destructive, self.open_world))

    def __copy__(self) -> Tool:
        return self  # immutable: a copy may be the tool itself, as for a tuple

    def __deepcopy__(self, memo: dict[int, Any]) -> Tool:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        make = functools.partial(Tool, read_only=self.read_only, idempotent=self.idempotent,
                                 destructive=self.destructive, open_world=self.open_world,
                                 handler=self.handler, rules=self.rules, changes=self.changes,
                                 result_bytes=self.result_bytes, repeat_risk=self.repeat_risk)
        return (make, (self.name, self.description, self._schema))

    def __repr__(self) -> str:
        return (f"Tool(name={self.name!r}, description={self.description!r}, "
                f"input_schema={self._schema!r}, read_only={self.read_only!r}, "
                f"idempotent={self.idempotent!r}, destructive={self.destructive!r}, "
                f"open_world={self.open_world!r})")

    def bind(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Return validated ``arguments`` with integral values of ``integer`` properties as ``int``.

        JSON Schema counts ``3.0`` and ``1e2`` as integers (draft 2020-12 Validation 6.1.1);
        they reach the device as Python ``int``, in nested objects and array elements too
        (``[3.0, 1e2]`` becomes ``[3, 100]``). An integral number of more than
        :data:`~regdev.gate._parse.MAX_INT_DIGITS` (4300) digits, such as ``1e999999999``
        where a schema sets no bound that refuses it, stays the exact ``decimal.Decimal``
        it was decoded as: the ``int`` would take gigabytes and minutes to build, and no
        JSON text regdev reads holds one. Call only on arguments that passed validation.
        The usual call, whose values are all ``int`` (or arrays of ``int``) already, is
        returned as it is (not copied); so is every object and array that needs no change.
        """
        names, nested = self._bind_plan
        if not nested:
            for name in names:
                value = arguments.get(name)
                if type(value) is not int and value is not None:
                    if type(value) is list and _all_int(value):
                        continue
                    break
            else:
                return arguments
        return _bind(arguments, self._schema)

    def definition(self) -> dict[str, Any]:
        """The tool in MCP ``tools/list`` form: ``{"name", "description", "inputSchema",
        "annotations"}``.

        ``annotations`` states all four MCP hints (``readOnlyHint``, ``destructiveHint``,
        ``idempotentHint``, ``openWorldHint``), so a client never falls back to a default.
        """
        annotations = {
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        }
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": annotations,
        }


def _copy_json(value: Any) -> Any:
    """A deep copy of a schema: new dicts and lists all the way down; strings, numbers,
    booleans and None are immutable and shared; anything else goes through ``copy.deepcopy``
    (and the schema check refuses it, where it is not allowed)."""
    kind = type(value)
    if kind is dict:
        return {key: _copy_json(item) for key, item in value.items()}
    if kind is list:
        return [_copy_json(item) for item in value]
    if kind in _IMMUTABLE:
        return value
    return copy.deepcopy(value)


_IMMUTABLE = frozenset({str, int, float, bool, type(None), Decimal})


def _all_int(items: list[Any]) -> bool:
    for item in items:  # noqa: SIM110 - a third of the cost of all() over a generator
        if type(item) is not int:
            return False
    return True


def _bind(value: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """An object's values bound by its properties' schemas; ``value`` itself if none changed."""
    properties = schema.get("properties") or {}
    out = None
    for name, sub in properties.items():
        if name in value:
            item = value[name]
            bound = _bind_value(item, sub)
            if bound is not item:
                if out is None:
                    out = dict(value)
                out[name] = bound
    return value if out is None else out


def _bind_list(items: list[Any], schema: Mapping[str, Any]) -> list[Any]:
    """An array's elements bound by ``prefixItems`` and ``items``; ``items`` itself if none
    changed."""
    prefix = schema.get("prefixItems") or []
    rest = schema.get("items", True)
    out = None
    for index, item in enumerate(items):
        bound = _bind_value(item, prefix[index] if index < len(prefix) else rest)
        if bound is not item:
            if out is None:
                out = list(items)
            out[index] = bound
    return items if out is None else out


def _bind_value(item: Any, schema: Any) -> Any:
    """One value bound by its schema: an integral non-int number of an ``integer`` schema as
    ``int``; objects and arrays walked; anything else as it is."""
    kind = type(item)
    if kind is int or kind is bool or kind is str or item is None or not isinstance(
            schema, dict):
        return item
    if kind is dict:
        return _bind(item, schema)
    if kind is list:
        return _bind_list(item, schema)
    types = schema.get("type")
    if (types == "integer" or (isinstance(types, list) and "integer" in types)) and is_integer(
            item):
        if type(item) is Decimal and not item.is_zero() and item.adjusted() >= MAX_INT_DIGITS:
            return item  # an int of 1e999999999 would take gigabytes: the exact Decimal stays
        return 0 if not item else int(item)  # 0E+999999 is 0, made at once
    return item


class ToolSet(Mapping[str, Tool]):
    """An ordered, read-only set of tools, looked up by exact name.

    Args:
        tools: the tools, in the order they are offered to models.
        standalone_rules: the tools' own rules (their ``rules`` hooks, and which registers
            they may never change) as Python source for a standalone module: standard library
            only, no import, defining ``tool_rules(name, a) -> str | None`` (the verdict code
            of a call that passed its schema, or None). :func:`~regdev.generate_source` puts
            it in the module it writes, so the module's verdicts are the gate's up to
            authorize. None (the default): the tools have no rules beyond their schemas.

    Raises:
        SchemaError: two tools share a name.
    """

    def __init__(self, tools: Iterable[Tool], *, standalone_rules: str | None = None) -> None:
        #: The tools' rules as standalone source (see the class's ``standalone_rules``).
        self.standalone_rules = standalone_rules
        self._tools: dict[str, Tool] = {}
        for index, tool in enumerate(tools):
            if tool.name in self._tools:
                raise SchemaError(f"tool `{escape_text(tool.name)}` is declared twice",
                                  f"/{index}/name")
            self._tools[tool.name] = tool

    @classmethod
    def from_definitions(cls, definitions: Iterable[Mapping[str, Any]]) -> ToolSet:
        """Build a tool set from MCP ``tools/list`` entries (``name``, ``inputSchema``, ...).

        The tools have no handler: they can be validated, not executed.

        Raises:
            SchemaError: an entry lacks ``name`` or ``inputSchema``, or its schema is outside
                the supported subset; the pointer names the entry, e.g. ``/1/inputSchema/type``.
        """
        tools = []
        for index, entry in enumerate(definitions):
            if not isinstance(entry, Mapping) or "name" not in entry or "inputSchema" not in entry:
                raise SchemaError("a tool definition needs `name` and `inputSchema`", f"/{index}")
            hints = entry.get("annotations")
            hints = hints if isinstance(hints, Mapping) else {}
            try:
                tools.append(
                    Tool(
                        name=entry["name"],
                        description=str(entry.get("description", "")),
                        input_schema=entry["inputSchema"],
                        read_only=hints.get("readOnlyHint") is True,
                        idempotent=hints.get("idempotentHint") is True,
                        destructive=hints.get("destructiveHint") is not False,
                        open_world=hints.get("openWorldHint") is not False,
                    )
                )
            except SchemaError as error:
                raise error.at(f"/{index}") from None
        return cls(tools)

    @classmethod
    def from_json(cls, text: str | bytes) -> ToolSet:
        """Build a tool set from JSON text: an array of MCP ``tools/list`` entries, or the
        ``tools/list`` result object ``{"tools": [...]}``.

        The text is decoded as strictly as a call (:func:`regdev.gate._parse.load_json`): a key
        given twice in one object is an error, never "the last one wins", and numbers are
        exact (a fraction or an exponent as ``Decimal``), so a bound of ``1.1`` means 1.1,
        not the float nearest to it.

        Raises:
            SchemaError: the text is not strict JSON, holds neither form, or a schema is outside the
                supported subset; the pointer names the place, e.g.
                ``/tools/0/inputSchema/properties/addr/pattern``.
        """
        try:
            document = load_json(text)
        except ValueError as error:
            raise SchemaError(f"the tool definitions are not JSON: {error}", "") from None
        prefix = ""
        if isinstance(document, dict) and "tools" in document:
            document, prefix = document["tools"], "/tools"
        if not isinstance(document, list):
            raise SchemaError("expected a JSON array of tool definitions (MCP tools/list "
                              'entries) or an object {"tools": [...]}', prefix)
        try:
            return cls.from_definitions(document)
        except SchemaError as error:
            raise error.at(prefix) from None

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolSet({list(self._tools)!r})"
