"""``regdev bench``: the validator timed against its peers."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, TextIO

from ..bench._noise import (
    MAX_ROUNDS,
    NOISE_CELL_SPREAD,
    NOISE_MIN_ROUNDS,
    NOISE_RATIO,
    NOISE_SPREAD,
    format_spread,
)
from ..core._text import display_text
from ..devices._open import open_device
from ..gate._tool import ToolSet
from ._common import (
    UsageError,
    json_line,
    map_option,
    map_tools_of,
    register_map,
)
from ._compile import _load_tools

if TYPE_CHECKING:
    from ..bench._bench import Case


def _bench_cases(path: str, tools: ToolSet) -> list[Case]:
    """The cases of ``--cases FILE.jsonl``: replay records (``raw`` and ``expect``), each
    canonical and with the verdict it must get (UsageError naming the line otherwise)."""
    from ..agents._replay import LineTooLong, ReplayFileError, load_replay  # noqa: PLC0415
    from ..bench._cases import case_of  # noqa: PLC0415

    try:
        items = load_replay(path, tools)
    except ReplayFileError as error:
        raise UsageError(str(error)) from None
    cases = []
    for number, record in items:
        where = f"{path}:{number}"
        if isinstance(record, LineTooLong):
            raise UsageError(f"{where}: the line is too long to be a call")
        if record.dialect not in (None, "canonical"):
            raise UsageError(f"{where}: regdev bench takes canonical calls "
                             '({"tool": ..., "arguments": {...}}); this line is '
                             f"{record.dialect}")
        if record.expect is None:
            raise UsageError(f'{where}: each case needs "expect": "ok" or the verdict code '
                             "the call must get")
        title = f"{number}: {record.why}" if record.why else f"line {number}"
        try:
            cases.append(case_of(display_text(title[:60]), display_text(record.raw[:90]),
                                 record.raw, None if record.expect == "ok" else record.expect))
        except ValueError:
            raise UsageError(f"{where}: raw is not JSON text; regdev bench times calls that "
                             "every peer can decode") from None
    return cases


def cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    from ..bench._api import measure  # noqa: PLC0415 - imports the peers
    from ..bench._bench import (  # noqa: PLC0415
        BENCH_TOOLS,
        all_agree,
        format_case_table,
        format_table,
    )

    if args.quick and args.rounds is not None:
        raise UsageError("--quick and --rounds cannot be used together (--quick is 3 rounds "
                         "of 2 ms batches)")
    if args.map is not None and args.tools is not None:
        raise UsageError("give --map FILE or --tools FILE, not both")
    if args.quick:
        rounds, batch = 3, 0.002
    else:
        rounds, batch = 25 if args.rounds is None else args.rounds, 0.01
    if not 1 <= rounds <= MAX_ROUNDS:
        raise UsageError(f"--rounds must be 1..{MAX_ROUNDS}, got {rounds}")
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401, PLC0415
        except ImportError:
            from ..bench._plot import PLOT_HINT  # noqa: PLC0415
            raise UsageError(PLOT_HINT) from None
    device = None
    if args.map is not None:
        tools: ToolSet | None = map_tools_of(args)
        device = open_device(None, regmap=register_map(args))
    elif args.tools is not None:
        tools = _load_tools(args.tools)
    else:
        tools = None
    cases = None
    if args.cases is not None:
        cases = _bench_cases(args.cases, tools if tools is not None else BENCH_TOOLS)
        if tools is None:
            tools = BENCH_TOOLS
    try:
        result = measure(tools, cases=cases, device=device, rounds=rounds,
                         batch_seconds=batch, cpu_time=args.cpu_time, progress=sys.stderr)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.plot is not None:
        from ..bench._plot import plot  # noqa: PLC0415

        try:
            plot(result, args.plot)
        except OSError as error:
            raise UsageError(f"cannot write {args.plot}: {error.strerror or error}") from None
        print(display_text(f"regdev bench: wrote {args.plot}"), file=sys.stderr)
    if args.json:
        json_line(result.to_dict(), out)
    elif tools is None:
        out.write(format_table(result) + "\n")
    else:
        out.write(format_case_table(result) + "\n")
    return 0 if all_agree(result) else 1


def add_parser(sub: Any) -> None:
    """Add ``regdev bench`` to the subcommands."""
    bench = sub.add_parser(
        "bench", help="time the compiled validator against the reference, a hand-written "
                      "floor and the peers (pydantic, fastjsonschema, jsonschema, "
                      "jsonschema-rs, msgspec), on the register tools or your own",
        description="Print one report measured in one run: ns per call (median of batches "
                    "interleaved round by round, with the spread of the batches) of regdev's "
                    "validator and of each peer, on decoded call objects and on raw JSON "
                    "text, and of the whole gate (Gate.handle, raw text to observation) "
                    "against a minimal hand-written pipeline, by default for 11 cases (valid "
                    "write and read, wrong type, out of range, missing field, unknown "
                    "argument, unknown tool, a block write of 16 values valid and with one "
                    "value out of range, a long unknown argument, a call padded with "
                    "whitespace). With --tools FILE or --map FILE, on those tools instead: "
                    "the cases of --cases FILE.jsonl, or else generated from the schemas (a "
                    "valid call per tool, then one mutation per keyword, named by what it "
                    "breaks: wrong type, out of range, missing required, unknown argument, "
                    "bad enum, too long, array too long, bad element, not a multiple); "
                    "pydantic (strict) and msgspec run on types built from each schema, and a"
                    " tool whose schema they cannot express is listed as such for them, not "
                    "timed. Peers that can say why a call is refused are timed twice: the "
                    "verdict alone and with the message. Each row "
                    "names the library, its installed version, the API called and what it "
                    "builds on a refusal. Ratios are peer time / regdev time, written as "
                    "'8.3x slower' or '2.0x faster' than regdev. Before timing, every "
                    "contender's verdict (valid or refused) is checked against regdev's on "
                    "every case; a case it disagrees on is not timed and is named below the "
                    "table. The last line says how noisy the run was (the floor timed "
                    "twice, the typical and the widest spread, the rounds, the load "
                    f"average), and starts with '!' saying the figures mean nothing when "
                    f"there were fewer than {NOISE_MIN_ROUNDS} rounds (so always with "
                    f"--quick), the cells' typical spread is over "
                    f"{format_spread(NOISE_SPREAD)} or any cell's over "
                    f"{format_spread(NOISE_CELL_SPREAD)}, the floor timed twice came out more "
                    f"than {NOISE_RATIO:.2f}x apart, or the load average before or after the "
                    "run is above the CPU count. Peers that are not installed are listed as "
                    "such (scripts/test "
                    "installs them; or, in a clone, .venv/bin/pip install -e '.[bench]'). "
                    "Progress goes to stderr.")
    bench.add_argument("--tools", metavar="FILE",
                       help="time on these tools: a JSON file of MCP tool definitions, as "
                            "regdev compile --tools takes (not with --map)")
    map_option(bench)
    bench.add_argument("--cases", metavar="FILE.jsonl",
                       help="time on these calls: one JSON object a line, as regdev replay "
                            'reads, {"raw": "<canonical call as JSON text>", "expect": "ok" or '
                            'the verdict code, "why": "its title"}; regdev must give each '
                            "its expected verdict (default: generated from the schemas)")
    bench.add_argument("--plot", metavar="FILE.png",
                       help="also draw ns per call by case and contender (regdev "
                            "highlighted, the noise line under it) into a PNG file; needs "
                            "matplotlib (the bench extra)")
    bench.add_argument("--json", action="store_true", help="print the result as one JSON object")
    bench.add_argument("--cpu-time", action="store_true",
                       help="time each batch with this thread's CPU clock instead of the wall "
                            "clock: steadier on a shared machine (it does not see the time "
                            "the thread waits for the CPU)")
    bench.add_argument("--quick", action="store_true",
                       help="a short run for a first look or CI: 3 rounds of 2 ms batches per "
                            "cell (about 1-2 s), to see that every contender runs and agrees; "
                            "too few rounds for the figures to mean anything, and the last "
                            "line says so. Not with --rounds")
    bench.add_argument("--rounds", type=int, metavar="N",
                       help=f"N rounds of 10 ms batches per cell, the median shown: "
                            f"1..{MAX_ROUNDS} (default 25, 10-20 s; fewer than "
                            f"{NOISE_MIN_ROUNDS} and the last line says the figures mean "
                            "nothing). Not with --quick")
    bench.set_defaults(func=cmd_bench)
