"""Hypothesis strategies shared by the property tests: JSON values and calls biased to edges."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec
from hypothesis import strategies as st

from regdev import _protocol as wire

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


# --- the serial wire protocol (regdev._protocol) --------------------------------------------------

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
    st.builds(wire.DumpRequest, wire_seqs),
)
#: Every reply frame (an error reply may carry sequence number 0).
wire_replies = st.one_of(
    st.builds(wire.IdentifyReply, wire_seqs, identify_texts),
    st.builds(wire.ReadReply, wire_seqs, wire_bytes, wire_bytes),
    st.builds(wire.WriteReply, wire_seqs, wire_bytes, wire_bytes),
    st.builds(wire.ResetReply, wire_seqs),
    st.builds(wire.DumpReply, wire_seqs,
              st.lists(wire_bytes, min_size=16, max_size=16).map(tuple)),
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
