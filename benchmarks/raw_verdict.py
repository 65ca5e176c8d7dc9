"""Raw text to a verdict: the gate's parse and validate stages against msgspec's typed decoder.

The hot-path table's third row: from the raw JSON text of a valid ``write_register`` call to the
verdict, regdev's parse and validate stages (the bench's ``regdev-gate`` row:
``decode_canonical`` and the gate's compiled check, or the general parse, with the refusal's
message) against the anchor written out below: ``msgspec.json.Decoder`` of a union of
Structs, one per tool, tagged by ``tool``, ``forbid_unknown_fields``, the bounds as
``Meta(ge, le)`` (goal: valid calls at most 2x the anchor). The refusals are shown beside it,
each with its message on regdev's side (the anchor raises an error with its own). Run::

    .venv/bin/python benchmarks/raw_verdict.py [--rounds N] [--batch-ms MS] [--wall] [--json]

``--show steps`` times, on the valid write only, where regdev's time goes: the row's work cut
after each of its steps (written out below, each a prefix of the row's closure and of
``Gate.handle``'s steps for a str), against the same anchor, with what each step adds.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import msgspec

from _compare import Goal, case, compare, options
from regdev.bench._bench import (
    Contender,
    contenders,
    format_spread,
    noise_line,
    noise_reasons,
    run_bench,
)
from regdev.gate._parse import DEFAULT_MAX_INPUT_BYTES, NOT_JSON, decode_json

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


# --- the steps of regdev's row, cut short (--show steps) ----------------------------------------

SHORT = DEFAULT_MAX_INPUT_BYTES >> 2  # a str this long is within the cap in UTF-8


def decoded(raw: str) -> object:
    """Step 1: msgspec's generic decode (into dicts), in a function, as the anchor's is."""
    try:
        return decode_json(raw)
    except NOT_JSON:
        return None


def shaped(raw: str) -> object:
    """Step 2: the cap, the decode, then the usual call's shape: an object holding a string
    ``tool``, object ``arguments`` and maybe an ``id``."""
    if type(raw) is str and len(raw) <= SHORT:
        try:
            doc = decode_json(raw)
        except NOT_JSON:
            return None
        if (type(doc) is dict and type(doc.get("tool")) is str
                and type(arguments := doc.get("arguments")) is dict
                and ((kept := len(doc)) == 2 or (kept == 3 and "id" in doc))):
            return arguments
    return None


def counted(raw: str) -> object:
    """Step 3: step 2, then the colon count that rules out a repeated key."""
    if type(raw) is str and len(raw) <= SHORT:
        try:
            doc = decode_json(raw)
        except NOT_JSON:
            return None
        if (type(doc) is dict and type(doc.get("tool")) is str
                and type(arguments := doc.get("arguments")) is dict
                and ((kept := len(doc)) == 2 or (kept == 3 and "id" in doc))
                and raw.count(":") == kept + len(arguments)):
            return arguments
    return None


def steps(stages: Contender, args: Any) -> None:
    """Time the steps and the whole row on the valid write, against the anchor."""
    write = CASES[0]
    always = lambda raw: True  # noqa: E731 - a step is not a verdict: nothing to compare
    rows = [Contender("anchor", "anchor", raw=True, on_refusal="bool", run=anchor,
                      valid=anchor),
            Contender("1", "1. msgspec's generic decode (into dicts)", raw=True,
                      on_refusal="bool", run=decoded, valid=always),
            Contender("2", "2. + the cap and the usual call's shape (tool, arguments, id)",
                      raw=True, on_refusal="bool", run=shaped, valid=always),
            Contender("3", "3. + the colon count (no key repeats)", raw=True,
                      on_refusal="bool", run=counted, valid=always),
            Contender("4", "4. + the compiled check and its verdict: the whole row", raw=True,
                      on_refusal="bool", run=stages.run, valid=always)]
    result = run_bench(rows=rows, cases=(write,), control=rows[0], rounds=args.rounds,
                       batch_seconds=args.batch_ms / 1000, stopwatch=args.stopwatch)
    figures = [row["ns"][write.title] for row in result.rows]
    if args.json:
        print(json.dumps({"title": "where the valid write's time goes", "unit": "ns",
                          "clock": args.stopwatch.name, "rounds": args.rounds,
                          "anchor": figures[0], "load": list(result.load),
                          "control": result.control, "noisy": result.noisy,
                          "noise_reasons": noise_reasons(result, "the anchor"),
                          "steps": [{"step": row["name"], "ns": ns,
                                     "spread": row["spread"][write.title],
                                     "anchor_ratio": ns / figures[0] if figures[0] else None}
                                    for row, ns in zip(result.rows[1:], figures[1:],
                                                       strict=True)]}))
        return
    print(f"Where the valid write's time goes: ns per call, {args.stopwatch.name}, median of "
          f"{args.rounds} interleaved batches of {args.batch_ms:g} ms")
    print(f"  {'step':<66}{'ns':>7}{'spread':>8}{'x anchor':>10}{'added':>8}")
    before = None
    for row, ns in zip(result.rows, figures, strict=True):
        title = ("anchor: msgspec's typed decoder, written out in this script"
                 if row["key"] == "anchor" else row["name"])
        added = "" if before is None else f"{ns - before:+.0f}"
        print(f"  {title:<66}{ns:>7.0f}{format_spread(row['spread'][write.title]):>8}"
              f"{ns / figures[0] if figures[0] else 0:>9.2f}x{added:>8}")
        before = None if row["key"] == "anchor" else ns
    print(noise_line(result, "the anchor"))


def main() -> None:
    args = options(__doc__.splitlines()[0],
                   choices={"--show": (("cases", "steps"), "what to time: every case against "
                                       "the anchor, or the valid write's steps")})
    stages = next(row for row in contenders() if row.key == "regdev-gate")
    assert stages.run is not None
    if args.show == "steps":
        steps(stages, args)
        return
    compare("Raw text to verdict against msgspec's typed decoder",
            Contender("regdev", stages.name, raw=True, on_refusal="message", run=stages.run,
                      valid=stages.valid),
            Contender("anchor", "msgspec.json.Decoder(WriteCall | ReadCall).decode, written out "
                      "in this script", raw=True, on_refusal="exception", run=anchor,
                      valid=anchor),
            CASES, goals=GOALS, args=args)


if __name__ == "__main__":
    main()
