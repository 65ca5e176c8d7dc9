"""A typed decode in front of the gate's parse, measured: why raw text -> verdict keeps its path.

The hot-path goals ask for valid raw calls near msgspec's typed decoder (at most 2x) "without
making any refusal slower than today", and suggest "a typed path that cannot fail for a well-formed
call and falls back cheaply". This script builds the best such path found, outside the
package, and times it against the gate's parse and validate stages as they are (the
``regdev-gate`` row of ``regdev bench``, which ``raw_verdict.py`` times against msgspec), on
``raw_verdict.py``'s cases; with ``--anchor msgspec`` against that script's anchor instead.

The prototype decodes with one ``msgspec.json.Decoder`` of a union of Structs, one per tool,
tagged by ``tool``, whose argument fields accept any JSON value and default to ``UNSET``
(so a wrong type, a value out of range or a missing argument does not fail the decode: the
Python check finds them), then checks the values as the compiled check does, with the same
colon count ruling out repeated keys. A valid call is answered there; a refusal it finds is
worded by the gate's compiled check from the values; anything else (an unknown tool, which
fails the tagged decode, an unknown argument or an idempotency key, which the colon count
sends back, text that is not JSON) falls back to the gate's stages as they are, after the
typed attempt. Verdicts are compared on every case before timing (a difference is not timed).

Run::

    .venv/bin/python benchmarks/typed_prototype.py [--anchor today|msgspec] [--rounds N]
        [--batch-ms MS] [--wall] [--json]
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET

from _compare import Goal, compare, options
from raw_verdict import CASES, anchor
from regdev.bench._bench import BENCH_TOOLS, Contender, contenders
from regdev.gate._compile import BIND, compile_refusals


class WriteArguments(msgspec.Struct):
    addr: Any = UNSET
    data: Any = UNSET


class ReadArguments(msgspec.Struct):
    addr: Any = UNSET


class WriteCall(msgspec.Struct, tag_field="tool", tag="write_register"):
    arguments: WriteArguments
    id: Any = UNSET


class ReadCall(msgspec.Struct, tag_field="tool", tag="read_register"):
    arguments: ReadArguments
    id: Any = UNSET


class BlockCall(msgspec.Struct, tag_field="tool", tag="write_registers"):
    arguments: WriteArguments
    id: Any = UNSET


typed_decode = msgspec.json.Decoder(WriteCall | ReadCall | BlockCall).decode
refusal = compile_refusals(BENCH_TOOLS).refusal


def prototype(today: Any) -> Any:
    """The typed path in front of ``today`` (the gate's stages): None or the Refusal."""

    def verdict(raw: str) -> Any:
        try:
            call = typed_decode(raw)
        except msgspec.DecodeError:  # a ValidationError too: not JSON, an unknown tool
            return today(raw)
        kind = type(call)
        if kind is WriteCall:
            a = call.arguments
            v0, v1 = a.addr, a.data
            if v0 is not UNSET and v1 is not UNSET:
                if call.id is not UNSET or raw.count(":") != 4:
                    return today(raw)  # an id, a repeated or unknown key: the usual path
                if (type(v0) is int and type(v1) is int and 0 <= v0 <= 15
                        and 0 <= v1 <= 255):
                    return None
                worded = refusal("write_register", {"addr": v0, "data": v1})
                return None if worded is None or worded is BIND else worded
            # a missing argument: worded by the compiled check from the others
            given = {} if v0 is UNSET else {"addr": v0}
            if v1 is not UNSET:
                given["data"] = v1
            if call.id is not UNSET or raw.count(":") != 2 + len(given):
                return today(raw)
            return refusal("write_register", given)
        elif kind is ReadCall:
            v0 = call.arguments.addr
            if v0 is not UNSET:
                if call.id is not UNSET or raw.count(":") != 3:
                    return today(raw)
                if type(v0) is int and 0 <= v0 <= 15:
                    return None
                worded = refusal("read_register", {"addr": v0})
                return None if worded is None or worded is BIND else worded
        return today(raw)  # a read without addr, the block write: the usual path

    return verdict


def main() -> None:
    args = options(__doc__.splitlines()[0], choices={"--anchor": (
        ("today", "msgspec"), "the other side: the gate's stages as they are, or msgspec's "
        "typed decoder")})
    stages = next(row for row in contenders() if row.key == "regdev-gate")
    assert stages.run is not None
    today = stages.run
    typed = prototype(today)
    ours = Contender("prototype", "a typed msgspec decode (any value, UNSET defaults), the "
                     "compiled check's values, the gate's stages behind it", raw=True,
                     on_refusal="message", run=typed, valid=lambda raw: typed(raw) is None)
    if args.anchor == "today":
        base = Contender("today", stages.name, raw=True, on_refusal="message", run=today,
                         valid=stages.valid)
        goals = {c.title: Goal(at_most=1.0) for c in CASES if c.code is not None}
        compare("The typed prototype against the gate's parse and validate as they are",
                ours, base, CASES, goals=goals, args=args)
    else:
        base = Contender("anchor", "msgspec.json.Decoder(WriteCall | ReadCall).decode (as "
                         "in raw_verdict.py)", raw=True, on_refusal="exception", run=anchor,
                         valid=anchor)
        compare("The typed prototype against msgspec's typed decoder", ours, base, CASES,
                goals={"write": Goal(at_most=2.0), "read": Goal(at_most=2.0)}, args=args)


if __name__ == "__main__":
    main()
