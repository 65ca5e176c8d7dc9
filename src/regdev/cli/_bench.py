"""``regdev bench``: the validator timed against its peers."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from ..bench._noise import (
    MAX_ROUNDS,
    NOISE_CELL_SPREAD,
    NOISE_MIN_ROUNDS,
    NOISE_RATIO,
    NOISE_SPREAD,
    format_spread,
)
from ._common import (
    UsageError,
    json_line,
)


def cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    from ..bench._bench import (  # noqa: PLC0415 - imports the peers
        CPU_STOPWATCH,
        all_agree,
        format_table,
        run_bench,
    )

    if args.quick and args.rounds is not None:
        raise UsageError("--quick and --rounds cannot be used together (--quick is 3 rounds "
                         "of 2 ms batches)")
    if args.quick:
        rounds, batch = 3, 0.002
    else:
        rounds, batch = 25 if args.rounds is None else args.rounds, 0.01
    if not 1 <= rounds <= MAX_ROUNDS:
        raise UsageError(f"--rounds must be 1..{MAX_ROUNDS}, got {rounds}")
    result = run_bench(rounds=rounds, batch_seconds=batch, progress=sys.stderr,
                       stopwatch=CPU_STOPWATCH if args.cpu_time else None)
    if args.json:
        json_line(result.to_dict(), out)
    else:
        out.write(format_table(result) + "\n")
    return 0 if all_agree(result) else 1


def add_parser(sub: Any) -> None:
    """Add ``regdev bench`` to the subcommands."""
    bench = sub.add_parser(
        "bench", help="time the compiled validator against the reference, a hand-written "
                      "floor and the peers (pydantic, fastjsonschema, jsonschema, msgspec)",
        description="Print one report measured in one run: ns per call (median of batches "
                    "interleaved round by round, with the spread of the batches) of regdev's "
                    "validator and of each peer, on decoded call objects and on raw JSON "
                    "text, and of the whole gate (Gate.handle, raw text to observation) "
                    "against a minimal hand-written pipeline, for 11 cases (valid write and "
                    "read, wrong type, out of range, missing field, unknown argument, unknown "
                    "tool, a block write of 16 values valid and with one value out of range, "
                    "a long unknown argument, a call padded with whitespace). Each row "
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
