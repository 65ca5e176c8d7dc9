"""Hypothesis strategies shared by the property tests: JSON values and calls biased to edges."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import msgspec
from hypothesis import strategies as st

from regdev.devices import _protocol as wire

#: Any JSON scalar, including exact big integers and Decimal numbers as the parser makes them.
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)

#: Any JSON value (nested arrays and objects of scalars).
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=12,
)

#: Values for an integer argument, biased to the edges of 0..15 and 0..255.
edge_numbers = st.one_of(
    st.sampled_from([-1, 0, 1, 14, 15, 16, 254, 255, 256, 2**63, 2**64 + 1, -(2**64)]),
    st.integers(min_value=-300, max_value=300),
    st.sampled_from([Decimal("3.0"), Decimal("1E+2"), Decimal("15.5"), Decimal("-0.0"),
                     Decimal("255.0000000000000000001"), Decimal("1E+400"), 3.0, 15.0, 16.0,
                     0.5, 255.0]),
    st.sampled_from([True, False, None, "3", "", [], {}]),
)

argument_names = st.sampled_from(["addr", "data", "value", "register", "Addr", "addr "])

#: Argument objects mixing the declared names, near misses and edge values.
arguments = st.dictionaries(argument_names, edge_numbers, max_size=3)

tool_names = st.sampled_from(
    ["write_register", "read_register", "erase_chip", "Write_register", " read_register", ""]
)


@st.composite
def canonical_calls(draw: st.DrawFn) -> Any:
    """Canonical calls, mostly well shaped, sometimes with a wrong shape."""
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return draw(json_values)
    call: dict[str, Any] = {}
    if shape != 1:
        call["tool"] = draw(st.one_of(tool_names, json_scalars) if shape == 2 else tool_names)
    if shape != 3:
        call["arguments"] = draw(json_values if shape == 4 else arguments)
    return call


_encoder = msgspec.json.Encoder(decimal_format="number")


def to_json(value: Any) -> str:
    """Encode a value drawn from these strategies as JSON text (Decimal as a JSON number)."""
    return _encoder.encode(value).decode()


#: JSON number literals at the edges of what a decoder can hold, as text.
number_literals = st.sampled_from([
    "0", "-0", "-0.0", "3.0", "1e2", "2.55e2", "25500e-2", "15.999999999999999999999",
    "1.0000000000000000000000001", "1e999999", "1e-999999", "0e999999",
    "1e9999999999999999999", "0e9999999999999999999", "-1e-9999999999999999999",
    "18446744073709551617", "1" * 4301, "1E400", "-1E400",
])

#: Correlation ids: absent, short, at the cap, over it, or not strings.
ids = st.one_of(st.none(), st.text(max_size=10), st.sampled_from(["x" * 256, "x" * 257, "9" * 300]),
                st.integers())


@st.composite
def raw_register_calls(draw: st.DrawFn) -> str:
    """Raw canonical calls whose numbers are literal text at the edges, with or without ids."""
    addr, data = draw(number_literals), draw(number_literals)
    tool = draw(st.sampled_from(["write_register", "read_register"]))
    args = f'"addr": {addr}, "data": {data}' if tool == "write_register" else f'"addr": {addr}'
    call_id = draw(ids)
    extra = "" if call_id is None else f', "id": {to_json(call_id)}'
    return f'{{"tool": "{tool}", "arguments": {{{args}}}{extra}}}'


# --- the serial wire protocol (regdev.devices._protocol) --------------------------------------

wire_bytes = st.integers(min_value=0, max_value=255)
#: Sequence numbers a host uses (0 is reserved for a device's unattributed error replies).
wire_seqs = st.integers(min_value=1, max_value=255)
identify_texts = st.text(
    alphabet=st.sampled_from([chr(c) for c in range(0x20, 0x7F) if chr(c) not in "$*"]),
    min_size=1, max_size=wire.MAX_TEXT)
error_codes = st.one_of(
    st.sampled_from(wire.ERROR_CODES),
    st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=8))

#: Every request frame.
wire_requests = st.one_of(
    st.builds(wire.IdentifyRequest, wire_seqs),
    st.builds(wire.ReadRequest, wire_seqs, wire_bytes),
    st.builds(wire.WriteRequest, wire_seqs, wire_bytes, wire_bytes),
    st.builds(wire.ResetRequest, wire_seqs),
    st.builds(wire.DumpRequest, wire_seqs, wire_bytes),
    st.builds(wire.ReadBlockRequest, wire_seqs, wire_bytes,
              st.integers(min_value=1, max_value=wire.MAX_BLOCK)),
    st.builds(wire.WriteBlockRequest, wire_seqs, wire_bytes, wire_blocks := st.lists(
        wire_bytes, min_size=1, max_size=wire.MAX_BLOCK).map(tuple)),
    st.builds(wire.MaskedWriteRequest, wire_seqs, wire_bytes, wire_bytes, wire_bytes),
)
#: Every reply frame (an error reply may carry sequence number 0).
wire_replies = st.one_of(
    st.builds(wire.IdentifyReply, wire_seqs, identify_texts),
    st.builds(wire.ReadReply, wire_seqs, wire_bytes, wire_bytes),
    st.builds(wire.WriteReply, wire_seqs, wire_bytes, wire_bytes),
    st.builds(wire.ResetReply, wire_seqs),
    st.builds(wire.DumpReply, wire_seqs,
              st.lists(wire_bytes, min_size=16, max_size=16).map(tuple), wire_bytes),
    st.builds(wire.ReadBlockReply, wire_seqs, wire_bytes, wire_blocks),
    st.builds(wire.WriteBlockReply, wire_seqs, wire_bytes, wire_blocks),
    st.builds(wire.MaskedWriteReply, wire_seqs, wire_bytes, wire_bytes),
    st.builds(wire.ErrorReply, st.integers(min_value=0, max_value=255), error_codes),
)
wire_frames = st.one_of(wire_requests, wire_replies)

#: Line noise biased to what confuses a receiver: start bytes, LF, CR, hex, pieces of frames.
wire_noise = st.lists(
    st.one_of(
        st.binary(max_size=12),
        st.sampled_from([b"$", b"\n", b"\r\n", b"*", b" ", b"$01 R", b"*FF\n", b"$05 w 03 FF",
                         b"\x00", b"\xff", b"A" * 70]),
        wire_frames.map(lambda frame: wire.encode(frame)[:-1]),  # a frame without its LF
    ),
    max_size=12,
).map(b"".join)
# --- calls to the register tools, biased to every edge ---------------------------------------

#: Values for an integer argument at and around each bound, in every numeric form.
register_values = st.one_of(
    edge_numbers,
    st.sampled_from([-0.0, 0.0, 15.000000000000002, 2.0**53, 2.0**64, -(2.0**64), 1e300,
                     Decimal("15"), Decimal("16"), Decimal("-1"), Decimal("15.0000"),
                     Decimal("1.5E+1"), Decimal("1.6E+1"), Decimal("2.55E+2"), Decimal("2.56E+2"),
                     Decimal("-1E-400"), Decimal("1E-400"), Decimal("0E+400"),
                     Decimal("-1E+400"), 2**64 - 1, 2**64, -(2**64) - 1, 10**400, -(10**400)]),
    st.decimals(min_value=-300, max_value=300, places=1),
    st.floats(min_value=-300, max_value=300).map(float.__floor__).map(float),
)

#: In-range or nearly in-range values, in every numeric form the parser or a caller makes.
register_numbers = st.one_of(
    st.integers(-2, 17),
    st.integers(250, 260),
    st.sampled_from([3.0, 15.0, 255.0, Decimal("3.0"), Decimal("1E+1"), Decimal("2.55E+2")]),
)


@st.composite
def register_arguments(draw: st.DrawFn, tool: str) -> dict[str, Any]:
    """Arguments for ``tool``: its own fields mostly, with edge values, sometimes a miss."""
    names = ["addr", "data"] if tool != "read_register" else ["addr"]
    values = st.one_of(register_numbers, register_numbers, register_values)
    out = {name: draw(values) for name in names}
    change = draw(st.integers(0, 9))
    if change == 0:
        del out[draw(st.sampled_from(names))]
    elif change == 1:
        out[draw(st.sampled_from(["value", "Addr", "addr ", "", "data"]))] = draw(values)
    elif change == 2:
        return draw(arguments)
    return out


@st.composite
def register_calls(draw: st.DrawFn) -> Any:
    """Calls to the register tools: well shaped with edge values, or with one thing wrong."""
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return draw(canonical_calls())
    tool = draw(st.sampled_from(["write_register"] * 3 + ["read_register"] * 2) if kind > 4
                else tool_names)
    call: dict[str, Any] = {"tool": tool, "arguments": draw(register_arguments(tool))}
    if kind == 1:
        call["id"] = draw(st.text(max_size=4))
    if kind == 2:
        call["tool"] = draw(st.one_of(st.none(), st.booleans(), st.integers(), st.lists(st.none())))
    if kind == 3:
        call["arguments"] = draw(st.one_of(st.none(), st.text(max_size=4), st.lists(st.none()),
                                           st.integers()))
    if kind == 4:
        del call[draw(st.sampled_from(["tool", "arguments"]))]
    return call


tool_choices = st.one_of(st.none(), st.none(), st.none(), tool_names)


@st.composite
def block_calls(draw: st.DrawFn) -> Any:
    """``write_registers(addr, data)`` calls: data of 0 to 17 values at the edges of 0..255
    in every numeric form, sometimes not a list, a missing or an extra argument."""
    data: Any = draw(st.lists(st.one_of(register_numbers, register_values), max_size=17))
    if draw(st.integers(0, 9)) == 0:
        data = draw(st.one_of(register_values, st.text(max_size=3), st.just({"0": 1})))
    arguments: dict[str, Any] = {"addr": draw(st.one_of(register_numbers, register_values)),
                                 "data": data}
    change = draw(st.integers(0, 9))
    if change == 0:
        del arguments[draw(st.sampled_from(["addr", "data"]))]
    elif change == 1:
        arguments["count"] = 1
    return {"tool": "write_registers", "arguments": arguments}


# --- random schemas from the supported subset, and instances biased to them ------------------

#: Property names, including ones that would break naive code generation.
property_names = st.sampled_from(
    ["a", "b", "c", "addr", "x.y", "x", "y", "", " ", "'", '"', "\\", "\n", "__proto__", "v0",
     "a-b", "_MISSING", "\u00e9", "\U0001f600", "'); import os; ('", "tool"])

#: Numbers as a schema holds them: int, Decimal (decoded from JSON text) and sometimes float.
schema_numbers = st.one_of(
    st.integers(-20, 20),
    st.decimals(min_value=-20, max_value=20, places=1),
    st.sampled_from([Decimal("2.0"), Decimal("1E+1"), Decimal("-0.5"), 2**64, -(2**64),
                     Decimal("1E+400"), 1.5, 3.0, -2.5]),
)

#: Length limits past any string's length (len() is below 2**63), in every form a schema
#: may hold them: float, Decimal (as decoded from 1e18 or 1E+400 in JSON text), big int.
huge_lengths = st.sampled_from([1e18, 1e19, 1e20, Decimal("1E+18"), Decimal("1E+19"),
                                Decimal("1E+400"), 2**63 - 1, 2**63, 2**70])

json_values_small = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(
        [Decimal("1.0"), Decimal("0.5"), 1.0, "a", "", "b"])),
    lambda inner: st.one_of(st.lists(inner, max_size=2),
                            st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2)),
    max_leaves=4,
)

#: Type names, weighted to the numeric and string types that have bounds to get wrong.
type_names = st.sampled_from(["null", "boolean", "object", "array", "number", "string",
                              "integer", "integer", "integer", "number", "string"])


@st.composite
def leaf_schemas(draw: st.DrawFn) -> Any:
    """A property schema without nested properties: a boolean, or keywords of the subset."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.booleans())
    schema: dict[str, Any] = {}
    if draw(st.integers(0, 3)):
        if draw(st.booleans()):
            schema["type"] = draw(type_names)
        else:
            schema["type"] = draw(st.lists(type_names, min_size=1, max_size=3, unique=True))
    elif draw(st.booleans()):
        schema["type"] = "integer"
    for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if draw(st.integers(0, 3)) == 0:
            schema[keyword] = draw(schema_numbers)
    for keyword in ("minLength", "maxLength"):
        if draw(st.integers(0, 4)) == 0:
            schema[keyword] = draw(st.one_of(st.integers(0, 4), st.sampled_from(
                [Decimal("2.0"), 1.0]), huge_lengths))
    if draw(st.integers(0, 5)) == 0:
        schema["multipleOf"] = draw(divisors)
    if draw(st.integers(0, 4)) == 0:
        schema["enum"] = draw(st.lists(st.one_of(json_values_small, schema_numbers,
                                                 st.text(max_size=2)), max_size=4))
    if draw(st.integers(0, 6)) == 0:
        schema["const"] = draw(st.one_of(json_values_small, schema_numbers))
    if draw(st.integers(0, 5)) == 0:
        schema["description"] = draw(st.sampled_from(['"""', "'''\nimport os", "x"]))
    return schema


#: multipleOf values: integers, exact decimals, a float that is exact (0.25) and ones that are
#: not (the float nearest 0.1 is a little more than 0.1; compared by its exact value).
divisors = st.sampled_from([1, 2, 3, 7, Decimal("0.5"), Decimal("1.5"), Decimal("0.1"),
                            Decimal("1E-8"), Decimal("2E+1"), Decimal("2.0"), 0.25, 0.1, 1.5,
                            2**64])

#: Counts (minItems, maxItems, minProperties, maxProperties): small, and in other forms.
counts = st.one_of(st.integers(0, 3), st.sampled_from([Decimal("2.0"), 1.0]), huge_lengths)


@st.composite
def array_schemas(draw: st.DrawFn, depth: int = 1) -> Any:
    """An array schema: items (a leaf, an object or an array), maybe prefixItems, counts,
    uniqueItems; sometimes without ``"type": "array"`` (then it applies only to arrays)."""
    def element() -> Any:
        kind = draw(st.integers(0, 6)) if depth > 0 else 0
        if kind == 1:
            return draw(object_schemas(depth=depth - 1))
        if kind == 2:
            return draw(array_schemas(depth=depth - 1))
        return draw(leaf_schemas())

    schema: dict[str, Any] = {}
    if draw(st.integers(0, 3)):
        schema["type"] = "array" if draw(st.integers(0, 3)) else ["array", draw(
            type_names.filter(lambda name: name != "array"))]
    if draw(st.integers(0, 3)) == 0:
        schema["prefixItems"] = [element() for _ in range(draw(st.integers(1, 2)))]
    if draw(st.integers(0, 5)):
        schema["items"] = element() if draw(st.integers(0, 5)) else draw(st.booleans())
    for keyword in ("minItems", "maxItems"):
        if draw(st.integers(0, 2)) == 0:
            schema[keyword] = draw(counts)
    if draw(st.integers(0, 3)) == 0:
        schema["uniqueItems"] = draw(st.booleans())
    if draw(st.integers(0, 7)) == 0:
        schema["maximum"] = 1  # a number keyword on an array: never applies to one
    return schema


@st.composite
def object_schemas(draw: st.DrawFn, depth: int = 2, top: bool = False) -> dict[str, Any]:
    """An object schema: properties (leaves, arrays or nested objects), required,
    additionalProperties, and below the top the counts of properties."""
    names = draw(st.lists(property_names, max_size=4, unique=True))
    properties: dict[str, Any] = {}
    for name in names:
        kind = draw(st.integers(0, 9))
        if depth > 0 and kind < 2:
            properties[name] = draw(object_schemas(depth=depth - 1))
        elif depth > 0 and kind < 4:
            properties[name] = draw(array_schemas(depth=depth - 1))
        else:
            properties[name] = draw(leaf_schemas())
    schema: dict[str, Any] = {"type": "object"}
    if top or draw(st.integers(0, 3)):
        schema["properties"] = properties
    else:
        schema.pop("type")
        if properties:
            schema["properties"] = properties
    if names or draw(st.booleans()):
        required = draw(st.lists(st.sampled_from([*names, "z"]) if names else st.just("z"),
                                 max_size=3, unique=True))
        if required:
            schema["required"] = required
    if draw(st.booleans()):
        schema["additionalProperties"] = draw(st.booleans())
    if not top and draw(st.integers(0, 5)) == 0:
        schema["minimum"] = 0  # a numeric keyword on an object: never applies
    if not top:
        for keyword in ("minProperties", "maxProperties"):
            if draw(st.integers(0, 4)) == 0:
                schema[keyword] = draw(counts)
    elif draw(st.integers(0, 7)) == 0:
        schema["minItems"] = 1  # an array keyword on the arguments object: never applies
    return schema


def _near(schema: Any) -> list[Any]:
    """Values at and around a schema's bounds and constants."""
    out: list[Any] = []
    if not isinstance(schema, dict):
        return out
    for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if keyword in schema and abs(schema[keyword]) < 10**6:
            bound = schema[keyword]
            low, high = math.floor(bound), math.ceil(bound)
            out += [bound, bound + 1, bound - 1, Decimal(bound) + Decimal("0.5"),
                    Decimal(bound) - Decimal("0.5"), float(bound), low, high, low - 1, high + 1,
                    Decimal(low), Decimal(high) + Decimal("0.0"), float(high)]
    for keyword in ("minLength", "maxLength"):
        if keyword in schema and schema[keyword] < 100:
            n = int(schema[keyword])
            out += ["x" * n, "x" * (n + 1), "\U0001f600" * max(n - 1, 0)]
    divisor = schema.get("multipleOf")
    if divisor is not None and abs(divisor) < 10**6:
        exact = Decimal(divisor)  # the float's exact value, so these are true multiples
        out += [exact * k for k in (-2, 1, 3)] + [exact * 3 + Decimal("1E-9"), 1, 2, 6, 0.5,
                                                  float(divisor) * 3, 12391239123]
    for keyword in ("minProperties", "maxProperties"):
        if keyword in schema and schema[keyword] < 100:
            n = int(schema[keyword])
            out += [{f"k{i}": i for i in range(size)} for size in (n, n + 1, max(n - 1, 0))]
    out += list(schema.get("enum", []))
    if "const" in schema:
        out.append(schema["const"])
    return out


_OF_TYPE = {
    "null": st.none(),
    "boolean": st.booleans(),
    "integer": st.one_of(st.integers(-22, 22), st.sampled_from(
        [Decimal("2.0"), Decimal("1E+1"), -3.0, 2**64, Decimal("1E+400")])),
    "number": st.one_of(st.decimals(min_value=-22, max_value=22, places=2),
                        st.floats(min_value=-22, max_value=22)),
    "string": st.text(max_size=5),
    "array": st.lists(st.integers(0, 2), max_size=2),
    "object": st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 2), max_size=2),
}


_ARRAY_KEYWORDS = frozenset({"items", "prefixItems", "minItems", "maxItems", "uniqueItems"})


@st.composite
def instances(draw: st.DrawFn, schema: Any) -> Any:
    """A value for ``schema``: often of its type and near its bounds, sometimes any JSON value."""
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return draw(json_values)
    if isinstance(schema, dict) and ("properties" in schema or "required" in schema) and (
            choice < 6):
        return draw(object_instances(schema))
    if isinstance(schema, dict) and not _ARRAY_KEYWORDS.isdisjoint(schema) and choice < 7:
        return draw(array_instances(schema))
    near = _near(schema)
    if near and choice < 5:
        return draw(st.sampled_from(near))
    types = schema.get("type", list(_OF_TYPE)) if isinstance(schema, dict) else list(_OF_TYPE)
    return draw(_OF_TYPE[draw(st.sampled_from(types if type(types) is list else [types]))])


@st.composite
def object_instances(draw: st.DrawFn, schema: dict[str, Any]) -> dict[str, Any]:
    """An arguments object for ``schema``: required keys mostly present, sometimes extras."""
    properties = schema.get("properties", {})
    out: dict[str, Any] = {}
    for name in schema.get("required", []):
        if draw(st.integers(0, 7)):
            out[name] = draw(instances(properties.get(name, True)))
    for name, sub in properties.items():
        if name not in out and draw(st.booleans()):
            out[name] = draw(instances(sub))
    if draw(st.integers(0, 4)) == 0:
        out[draw(st.sampled_from(["extra", "A", "a ", *properties]))] = draw(json_scalars)
    return out


#: Values JSON-equal to one another in different forms, and ones that only look alike.
_LOOKALIKES = [1, 1.0, Decimal("1"), Decimal("1.00"), True, "1", [1], [True], [1.0],
               {"a": 1}, {"a": Decimal("1.0")}, {"a": True}, 0, False, None, -0.0]


@st.composite
def array_instances(draw: st.DrawFn, schema: dict[str, Any]) -> list[Any]:
    """An array for ``schema``: its length near minItems and maxItems, elements drawn for
    prefixItems and items, sometimes a repeated element or a JSON-equal look-alike."""
    lengths = [0, 1, 2, 3]
    for keyword in ("minItems", "maxItems"):
        if keyword in schema and schema[keyword] < 8:
            n = int(schema[keyword])
            lengths += [n, n + 1, max(n - 1, 0)]
    size = draw(st.sampled_from(lengths))
    prefix = schema.get("prefixItems", [])
    out = [draw(instances(prefix[i] if i < len(prefix) else schema.get("items", True)))
           for i in range(size)]
    if out and draw(st.integers(0, 3)) == 0:
        out.append(out[draw(st.integers(0, len(out) - 1))])  # a repeat
    elif draw(st.integers(0, 5)) == 0:
        out += draw(st.lists(st.sampled_from(_LOOKALIKES), min_size=1, max_size=3))
    return out


@st.composite
def array_tool_calls(draw: st.DrawFn) -> tuple[list[dict[str, Any]], Any, str | None]:
    """One tool whose arguments are arrays (of leaves, objects and arrays, two levels deep),
    all required and closed, and a call whose arrays are drawn for them: the element checks
    are reached far more often than through :func:`schemas_and_calls`."""
    names = draw(st.lists(st.sampled_from(["data", "a", "b", "x.y", "'"]), min_size=1,
                          max_size=2, unique=True))
    properties = {name: draw(array_schemas(depth=2)) for name in names}
    schema = {"type": "object", "properties": properties, "required": names,
              "additionalProperties": False}
    arguments = {name: draw(array_instances(sub)) if draw(st.integers(0, 9)) else draw(
        instances(sub)) for name, sub in properties.items()}
    return [{"name": "t0", "inputSchema": schema}], {"tool": "t0", "arguments": arguments}, None


@st.composite
def schemas_and_calls(draw: st.DrawFn) -> tuple[list[dict[str, Any]], Any, str | None]:
    """One or two tools with random input schemas, a call to one of them, and a tool choice."""
    count = draw(st.integers(1, 2))
    tools = [{"name": f"t{i}", "inputSchema": draw(object_schemas(top=True))}
             for i in range(count)]
    index = draw(st.integers(0, count - 1))
    arguments = draw(object_instances(tools[index]["inputSchema"]))
    name = f"t{index}"
    if draw(st.integers(0, 9)) == 0:
        name = draw(st.sampled_from(["t0", "t1", "T0", "zz"]))
    call: Any = {"tool": name, "arguments": arguments}
    if draw(st.integers(0, 19)) == 0:
        call = draw(st.one_of(json_values, st.just({"tool": name}),
                              st.just({"arguments": arguments})))
    choice = draw(st.sampled_from([None] * 8 + ["t0", "t1"]))
    return tools, call, choice


#: Python values that are not JSON data (and some that are), as a caller of ``handle_call`` or
#: of the provider helpers might pass: keys that are not strings, NaN and infinities, tuples,
#: bytes, sets, integers too long for ``str()``, objects, nested among valid arguments.
python_scalars = st.one_of(
    json_scalars,
    st.sampled_from([math.nan, math.inf, -math.inf, Decimal("NaN"), Decimal("-Infinity"),
                     b"\x00\xff", bytearray(b"3"), 3 + 4j,
                     frozenset({1}), object(), Ellipsis, int, "\x00\u2028\ud800"]),
    st.floats(),
    st.binary(max_size=4),
    st.sampled_from([1, -1]).map(lambda sign: sign * 10**5000),  # made here: no repr to show
)
python_keys = st.one_of(st.sampled_from(["addr", "data", "tool", "arguments", "k\ud800"]),
                        st.text(max_size=4), st.integers(), st.none(), st.booleans(),
                        st.floats(), st.tuples(st.integers()), st.binary(max_size=2),
                        st.just(frozenset({"addr"})))
python_values = st.recursive(
    python_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.sets(st.one_of(st.integers(), st.text(max_size=3)), max_size=3),
        st.dictionaries(python_keys, inner, max_size=3),
    ),
    max_leaves=8,
)


@st.composite
def python_calls(draw: st.DrawFn) -> Any:
    """Register tool calls carrying Python values that JSON cannot hold, mostly in the shape
    of a valid call (so that only that value should stop it), sometimes anything at all."""
    if draw(st.integers(0, 4)) == 0:
        return draw(python_values)
    arguments: dict[Any, Any] = {"addr": draw(st.one_of(st.just(3), python_values)),
                                 "data": draw(st.one_of(st.just(1), python_values))}
    arguments.update(draw(st.dictionaries(python_keys, python_values, max_size=2)))
    call: dict[Any, Any] = {"tool": draw(st.sampled_from(["write_register", "read_register"])),
                            "arguments": arguments}
    call.update(draw(st.dictionaries(python_keys, python_values, max_size=1)))
    return call


# --- the identify text's extension (docs/protocol.md): who a device is, and its reset epoch ---

#: A device id or a reset epoch as the wire carries them: 1..16 of 0-9 and A-Z.
wire_ids = st.text(alphabet="0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=16)
#: The bytes an identify text may hold: printable ASCII but `$` and `*`.
_TEXT_ALPHABET = [chr(c) for c in range(0x20, 0x7F) if chr(c) not in "$*"]
#: An identify text's description, including ones that look like the extension themselves.
identify_descriptions = st.one_of(
    st.text(alphabet=_TEXT_ALPHABET, min_size=1, max_size=20),
    st.sampled_from(["x id=AB epoch=CD", " ", "id=", "a epoch=1", "regdev sim"]),
)


@st.composite
def extended_identify_texts(draw: st.DrawFn) -> str:
    """Any identify text a device may send: printable, at most 48 bytes, often ending with
    something close to `` id=ID epoch=EPOCH`` (right, lower-case, too long, out of order)."""
    head = draw(st.text(alphabet=_TEXT_ALPHABET, max_size=16))
    ending = draw(st.sampled_from([
        "", " id={} epoch={}", "id={} epoch={}", " epoch={} id={}", " id={}  epoch={}",
        " id={} epoch={} ", " ID={} EPOCH={}",
    ])).format(draw(wire_ids), draw(st.one_of(wire_ids, st.just("ABCDEFGHIJKLMNOPQ"))))
    if draw(st.booleans()):
        ending = ending.lower()
    text = (head + ending)[:wire.MAX_TEXT]
    return text or "x"


# --- register maps (regdev.devices._regmap) ----------------------------------------------------


@st.composite
def registers_with_fields(draw: st.DrawFn) -> Any:
    """One register at address 0 with random non-overlapping fields of every kind (and
    reserved bits between them)."""
    from regdev.devices._regmap import Field, Register  # noqa: PLC0415

    fields = []
    bit = draw(st.integers(min_value=0, max_value=2))
    index = 0
    while bit < 8:
        width = draw(st.integers(min_value=1, max_value=8 - bit))
        access = draw(st.sampled_from(["rw", "r", "w"]))
        onwrite = draw(st.sampled_from([None, "woclr"])) if access != "r" else None
        onread = draw(st.sampled_from([None, "rclr"])) if access != "w" else None
        reset = draw(st.integers(min_value=0, max_value=(1 << width) - 1))
        fields.append(Field(f"F{index}", bit, bit + width - 1, access, reset, onwrite, onread))
        index += 1
        bit += width + draw(st.integers(min_value=0, max_value=2))
    return Register("R", 0, fields=tuple(fields))


# --- a key repeated anywhere in a document; numbers past any float in the audit ------------

#: Keys as JSON text: plain, with a colon, with an escape, and non-ASCII.
_plain_keys = st.sampled_from(["tool", "arguments", "addr", "a", "k:1", "é", "\U0001f600", ""])


def _spellings(key: str) -> list[str]:
    """Ways to write ``key`` as a JSON string that all decode to it: plain, every character as
    a ``\\u`` escape (UTF-16 pairs above U+FFFF), and the first character escaped."""
    def escaped(char: str) -> str:
        code = ord(char)
        if code > 0xFFFF:
            code -= 0x10000
            return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04X}"
        return f"\\u{code:04x}"

    plain = to_json(key)
    every = '"' + "".join(escaped(char) for char in key) + '"'
    first = '"' + (escaped(key[0]) + to_json(key[1:])[1:-1] if key else "") + '"'
    return [plain, every, first]


@st.composite
def repeated_key_documents(draw: st.DrawFn) -> tuple[str, str]:
    """One JSON document, as text, in which one object holds one key twice, at any depth, in
    arrays and objects, the document itself often an array (``[{"tool": .., "tool": ..}]``);
    each occurrence spelled its own way (plain or ``\\u`` escapes, so only decoding shows them
    equal). Returns ``(text, key)``: every parser must refuse it as not-json naming ``key``."""
    key = draw(_plain_keys)
    first, second = draw(st.sampled_from(_spellings(key))), draw(st.sampled_from(_spellings(key)))
    others = draw(st.dictionaries(_plain_keys.filter(lambda other: other != key), json_values,
                                  max_size=3))
    pairs = [f"{first}: {to_json(draw(json_values))}", f"{second}: {to_json(draw(json_values))}",
             *(f"{to_json(name)}: {to_json(value)}" for name, value in others.items())]
    order = draw(st.permutations(range(len(pairs))))
    text = "{" + ", ".join(pairs[index] for index in order) + "}"
    # Wrap it: an array (the item 8 case first), or an object, each with siblings around it.
    for _ in range(draw(st.integers(0, 4))):
        siblings = draw(st.lists(json_values, max_size=2))
        at = draw(st.integers(0, len(siblings)))
        if draw(st.integers(0, 2)):
            items = [to_json(value) for value in siblings]
            items.insert(at, text)
            text = "[" + ", ".join(items) + "]"
        else:
            names = draw(st.lists(_plain_keys, min_size=len(siblings) + 1,
                                  max_size=len(siblings) + 1, unique=True))
            items = [f"{to_json(name)}: {to_json(value)}"
                     for name, value in zip(names, siblings, strict=False)]
            items.insert(at, f"{to_json(names[-1])}: {text}")
            text = "{" + ", ".join(items) + "}"
    if draw(st.booleans()) and not text.startswith("["):
        text = f"[{text}]"
    return text, key


#: Numbers past what a float holds: huge and tiny exponents (to Decimal's own range, past
#: the decimal context's), long fractions, integers up to 4300 digits, zeros with exponents,
#: both signs. As the parser decodes them: Decimal for a fraction or an exponent, else int.
huge_numbers = st.one_of(
    st.sampled_from([Decimal("1E+999"), Decimal("-1E+309"), Decimal("2E+308"), Decimal("1E-400"),
                     Decimal("0.1000000000000000000000000000000000000001"),
                     Decimal("1E+1000000"), Decimal("-1E+999999999"), Decimal("1E-999999999"),
                     Decimal("0E+999999"), Decimal("-0E-999999"), Decimal("-0.0"),
                     Decimal("4.9E-324"), Decimal("2.4703282292062328E-324"),
                     Decimal("1.7976931348623159E+308"), 10**4299, -(10**400), 2**64]),
    st.builds(lambda sign, digits, exponent: Decimal((sign, tuple(digits), exponent)),
              st.integers(0, 1), st.lists(st.integers(0, 9), min_size=1, max_size=60),
              st.one_of(st.integers(-(10**12), 10**12), st.integers(-400, 400))),
    st.integers(min_value=-(10**600), max_value=10**600),
)

#: JSON values holding those numbers, nested in arrays and objects.
huge_number_values = st.recursive(
    huge_numbers,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(["x", "addr", "n", "é"]), inner,
                                            max_size=3)),
    max_leaves=6,
)


#: Text meant to forge what a person reads: a second line that looks like a record or a
#: verdict, a carriage return and terminal escapes that redraw the line (CSI, OSC, the C1
#: CSI), a bidirectional override, the Unicode line separators, NUL, backspace and DEL, a
#: zero-width space, a tab.
HOSTILE_TEXTS = (
    "x\n     2  2026-01-01 00:00:00.000Z  default     canonical  accepted  write_register "
    '{"addr":3,"data":255}  (5 us)\x1b[2K',
    "y\r\x1b[2Kaccepted  write_register: register 3 = 0xff (255)",
    "\x1b]0;owned\x07\x1b[1A\x1b[31mrefused",
    "\x9b2J\x9bHaccepted",
    "abc\u202edcba\u2066x\u2069",
    "one\u2028two\u2029three\x85four",
    "nul\x00bs\x08del\x7f",
    "zero\u200bwidth\ufeff",
    "tab\there\x0bvt\x0cff",
    "line 1\nline    2  met      accepted  write_register: register 0 = 0x00 (0)",
)

#: Untrusted text in any form: the samples above, or characters from the classes that can act
#: on a terminal or a line (controls, formats, separators), mixed with ordinary ones.
hostile_text = st.one_of(
    st.sampled_from(HOSTILE_TEXTS),
    st.text(st.one_of(
        st.characters(categories=["Cc", "Cf", "Zl", "Zp", "Zs", "Mn", "Co"]),
        st.sampled_from("\n\r\x1b[]0;\x07\x9bmaccepted\\`\"'"),
        st.characters(),
    ), min_size=1, max_size=30),
)


# --- raw calls for the gate's two paths (tests/test_gate.py) ---------------------------------

#: Number texts, mostly plain small integers, sometimes at the edges of what decoders hold.
_number_texts = st.one_of(st.integers(-2, 300).map(str), st.integers(-2, 300).map(str),
                          number_literals)
#: Value texts an argument may hold: numbers, wrong types, arrays and objects, repeated keys
#: inside them, strings holding colons, escapes and lone surrogates.
_argument_texts = st.one_of(
    _number_texts,
    st.sampled_from(['"3"', "true", "null", "[]", "{}", "[1, 2, 300]", "[0, 17, 255]", "[3.0]",
                     '{"x": 1}', '{"x": 1, "x": 2}', '[{"a": 1, "a": 2}]', '"a:b"', '"\\u003a"',
                     '{"deep": {"x": 1.0}}', '"\\ud800"', '"caf\\u00e9"', '"\u00e9"']),
    json_values_small.map(to_json),
)
#: Key texts, as written in the JSON text: plain, escaped, or near a known name.
_key_texts = st.sampled_from(['"addr"', '"data"', '"note"', '"Addr"', '"\\u0061ddr"', '"n"',
                              '"v"', '"s"', '"o"', '"a:b"'])
_spaces = st.sampled_from(["", " ", " ", "\n  ", "\t"])


@st.composite
def raw_gate_calls(draw: st.DrawFn) -> str | bytes:
    """Raw text of tool calls as a model may send them, the usual canonical call most often:
    tools offered or not, arguments of every kind (numbers at the edges, wrong types, arrays,
    objects, strings with colons), ids, idempotency keys, unknown and repeated keys at each
    level (inside arrays too), escaped key names, odd whitespace; sometimes cut short, padded,
    wrapped in an array, or not JSON at all; as str or UTF-8 bytes."""
    space = draw(_spaces)
    tool = draw(st.sampled_from(["write_register", "write_register", "read_register", "echo",
                                 "blocks", "erase_chip", "Write_register"]))
    members = [(draw(_key_texts), draw(_argument_texts))
               for _ in range(draw(st.integers(0, 3)))]
    if draw(st.integers(0, 3)):  # the arguments of a valid call of the tool, and maybe more
        members = {"write_register": [('"addr"', draw(_number_texts)),
                                      ('"data"', draw(_number_texts))],
                   "read_register": [('"addr"', draw(_number_texts))],
                   "echo": [('"n"', draw(_number_texts)),
                            *([('"o"', '{"x": 2.0}')] if draw(st.booleans()) else [])],
                   "blocks": [('"v"', draw(st.sampled_from(["[1, 2]", "[3.0, 255]", "[]"])))],
                   }.get(tool, members) + members[:draw(st.sampled_from([0, 0, 0, 1]))]
        members = draw(st.permutations(members))
    arguments = "{" + f",{space}".join(f"{k}:{space}{v}" for k, v in members) + "}"
    if draw(st.integers(0, 9)) == 0:
        arguments = draw(_argument_texts)  # not an object
    top = [('"tool"', to_json(tool)), ('"arguments"', arguments)]
    if draw(st.booleans()):
        top.append(('"id"', to_json(draw(ids))))
    extra = draw(st.sampled_from([None] * 12 + ['"idempotency_key"', '"tool"', '"arguments"',
                                                '"x"', '"\\u0074ool"', '"id"']))
    if extra is not None:
        top.append((extra, draw(st.one_of(_argument_texts, st.just('"op:1"')))))
    if draw(st.integers(0, 9)) == 0:
        top.pop(draw(st.integers(0, len(top) - 1)))
    order = draw(st.permutations(top))
    text = "{" + f",{space}".join(f"{k}:{space}{v}" for k, v in order) + "}"
    shape = draw(st.integers(0, 29))
    if shape == 0:
        text = text[:draw(st.integers(0, len(text)))]  # cut short
    elif shape == 1:
        text = f"[{text}]"
    elif shape == 2:
        text = text + draw(st.sampled_from(["x", " ", "\n", "}", " " * 300]))
    elif shape == 3:
        text = draw(st.sampled_from(["", "null", "{'tool': 'write_register'}", "\ufeff{}",
                                     text.replace('"', "'")]))
    if draw(st.booleans()):
        return text.encode("utf-8", "surrogatepass")
    return text


@st.composite
def usual_reply_lines(draw: st.DrawFn, seq: int, addr: int, data: int | None) -> bytes:
    """Bytes a host may read after it sent a read of ``addr`` (``data`` None) or a write of
    ``data``, with sequence number ``seq``: the awaited reply most often (any value for a read,
    the value written or another for a write), else the same reply with another sequence
    number, address or letter, a bad checksum, an error reply (BUSY and others, to this
    request or not), a CR before the LF, bytes before or after it, two frames, a frame cut
    short, any other reply, noise; and now and then one byte changed."""
    kind = wire.ReadReply if data is None else wire.WriteReply
    value = draw(st.one_of(wire_bytes, st.just(data if data is not None else 0)))
    awaited = wire.encode(kind(seq, addr, value))
    other_kind = wire.WriteReply if data is None else wire.ReadReply
    other = wire.encode(draw(wire_replies))
    crc = int(awaited[-3:-1], 16)
    line = draw(st.sampled_from([
        awaited, awaited, awaited, awaited,
        wire.encode(kind(seq % 255 + 1, addr, value)),  # another sequence number
        wire.encode(kind(seq, (addr + 1) % 256, value)),  # another address
        wire.encode(other_kind(seq, addr, value)),  # another letter
        wire.encode(wire.MaskedWriteReply(seq, addr, value)),
        awaited[:-3] + b"%02X\n" % (crc ^ draw(st.integers(1, 255))),  # a bad checksum
        wire.encode(wire.ErrorReply(seq, draw(error_codes))),
        wire.encode(wire.ErrorReply(draw(st.integers(0, 255)), "BUSY")),
        awaited[:-1] + b"\r\n", b"\n" + awaited, awaited + b"\n", awaited + other,
        other + awaited, other, awaited.lower(), awaited[:draw(st.integers(0, 14))],
        draw(wire_noise),
    ]))
    if line and draw(st.integers(0, 4)) == 0:
        at = draw(st.integers(0, len(line) - 1))
        line = line[:at] + bytes([draw(wire_bytes)]) + line[at + 1:]
    return line


#: The types pymodbus's convert_to_registers knows, with a strategy of their values.
_VALUE_TYPES: dict[str, st.SearchStrategy[Any]] = {
    "int16": st.integers(-(1 << 15), (1 << 15) - 1),
    "uint16": st.integers(0, (1 << 16) - 1),
    "int32": st.integers(-(1 << 31), (1 << 31) - 1),
    "uint32": st.integers(0, (1 << 32) - 1),
    "int64": st.integers(-(1 << 63), (1 << 63) - 1),
    "uint64": st.integers(0, (1 << 64) - 1),
    # (NaN aside: pymodbus and regdev both pack it with struct; a round trip compares bits)
    "float32": st.floats(width=32, allow_nan=False, allow_subnormal=True),
    "float64": st.floats(allow_nan=False, allow_subnormal=True),
    # non-ASCII text, no NUL (the padding), an even number of UTF-8 bytes up to 16 registers
    "string": st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1,
                      max_size=12).filter(lambda t: len(t.encode()) % 2 == 0
                                          and len(t.encode()) <= 32),
}


@st.composite
def typed_value_cases(draw: st.DrawFn) -> tuple[str, Any, str, str]:
    """``(type, value, word_order, byte_order)``: a typed value of every type pymodbus
    converts, with -0.0, subnormals and the extremes among the floats, non-ASCII among the
    strings."""
    kind = draw(st.sampled_from(sorted(_VALUE_TYPES)))
    value = draw(_VALUE_TYPES[kind])
    return kind, value, draw(st.sampled_from(("big", "little"))), draw(
        st.sampled_from(("big", "little")))
