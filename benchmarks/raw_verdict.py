"""Raw text to a verdict: the gate's parse and validate stages against msgspec's typed decoder.

Issue 13's third row: from the raw JSON text of a valid ``write_register`` call to the
verdict, regdev's parse and validate stages (the bench's ``regdev-gate`` row:
``decode_canonical`` and the gate's compiled check, or the general parse, with the refusal's
message) against the anchor written out below: ``msgspec.json.Decoder`` of a union of
Structs, one per tool, tagged by ``tool``, ``forbid_unknown_fields``, the bounds as
``Meta(ge, le)`` (goal: valid calls at most 2x the anchor). The refusals are shown beside it,
each with its message on regdev's side (the anchor raises an error with its own). Run::

    .venv/bin/python benchmarks/raw_verdict.py [--rounds N] [--batch-ms MS] [--wall] [--json]
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from _compare import Goal, case, compare, options
from regdev.gate._bench import Contender, contenders

Addr = Annotated[int, msgspec.Meta(ge=0, le=15)]
Data = Annotated[int, msgspec.Meta(ge=0, le=255)]


class WriteArguments(msgspec.Struct, forbid_unknown_fields=True):
    addr: Addr
    data: Data


class ReadArguments(msgspec.Struct, forbid_unknown_fields=True):
    addr: Addr


class WriteCall(msgspec.Struct, tag_field="tool", tag="write_register",
                forbid_unknown_fields=True):
    arguments: WriteArguments


class ReadCall(msgspec.Struct, tag_field="tool", tag="read_register",
               forbid_unknown_fields=True):
    arguments: ReadArguments


decode = msgspec.json.Decoder(WriteCall | ReadCall).decode


def anchor(raw: str) -> bool:
    """The anchor: True for a valid call, False (the error built) for a refusal."""
    try:
        decode(raw)
    except msgspec.DecodeError:  # a ValidationError too
        return False
    return True


CASES = (
    case("write", '{"tool": "write_register", "arguments": {"addr": 3, "data": 255}}', True),
    case("read", '{"tool": "read_register", "arguments": {"addr": 7}}', True),
    case("type", '{"tool": "write_register", "arguments": {"addr": "3", "data": 1}}', False),
    case("range", '{"tool": "write_register", "arguments": {"addr": 3, "data": 300}}', False),
    case("missing", '{"tool": "write_register", "arguments": {"data": 1}}', False),
    case("extra arg", '{"tool": "write_register", "arguments": {"addr": 3, "data": 1, '
         '"colour": "red"}}', False),
    case("bad tool", '{"tool": "erase_chip", "arguments": {"addr": 3, "data": 1}}', False),
)
GOALS = {"write": Goal(at_most=2.0), "read": Goal(at_most=2.0)}


def main() -> None:
    args = options(__doc__.splitlines()[0])
    stages = next(row for row in contenders() if row.key == "regdev-gate")
    assert stages.run is not None
    compare("Raw text to verdict against msgspec's typed decoder",
            Contender("regdev", stages.name, raw=True, on_refusal="message", run=stages.run,
                      valid=stages.valid),
            Contender("anchor", "msgspec.json.Decoder(WriteCall | ReadCall).decode, written out "
                      "in this script", raw=True, on_refusal="exception", run=anchor,
                      valid=anchor),
            CASES, goals=GOALS, args=args)


if __name__ == "__main__":
    main()
