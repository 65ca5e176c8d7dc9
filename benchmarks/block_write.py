"""The block write: regdev's compiled check against a hand-written floor and its peers.

Not a test. Times, in one run with interleaved rounds (``regdev bench``'s machinery), the
check of one ``write_registers(addr, data)`` call with 16 values (valid), and the same call
with one value out of range (``data[12] = 300``, refused as ``range-data[]``), by:

* regdev's compiled validator (``compile_validator(BENCH_TOOLS)``, a verdict code, no message);
* the hand-written floor (``regdev.bench._bench.floor_valid``: valid or not, nothing more);
* pydantic v2, a strict model (``model_validate``), and fastjsonschema (``compile()``), set up
  as in ``regdev bench``.

It prints the table (each figure, and each as a ratio to regdev's), the machine's load, and
the two targets: the compiled check within 1.15x of the floor, and at least 5x faster than
each peer. Usage::

    .venv/bin/python benchmarks/block_write.py [--rounds N] [--batch-ms MS] [--json]

Every contender's verdict is checked against regdev's before anything is timed; one that
disagrees gets no figure and the script exits 1.
"""

from __future__ import annotations

import json
import os
import sys

from _script import BATCH_MS, MAX_ROUNDS, Parser, count, span
from regdev.bench._bench import CASES, all_agree, contenders, format_table, run_bench

ROWS = ("regdev-compiled", "floor", "pydantic", "fastjsonschema")
TITLES = ("block write", "block range")
FLOOR_TARGET = 1.15  # compiled / floor at most this
PEER_TARGET = 5.0  # peer / compiled at least this


def targets(result: dict[str, object]) -> list[str]:
    """One line per case: the figures and whether each target is met."""
    rows = {row["key"]: row for row in result["rows"]}  # type: ignore[attr-defined]
    lines = []
    for title in TITLES:
        ours = rows["regdev-compiled"]["ns"].get(title)
        floor = rows["floor"]["ns"].get(title)
        if not ours or not floor:
            lines.append(f"{title}: no figure (a contender disagreed or did not run)")
            continue
        slower = ours / floor
        parts = [f"{title}: compiled {ours:.0f} ns, floor {floor:.0f} ns: {slower:.2f}x the "
                 f"floor (target <= {FLOOR_TARGET}x: "
                 f"{'met' if slower <= FLOOR_TARGET else 'missed'})"]
        for key in ("pydantic", "fastjsonschema"):
            theirs = rows[key]["ns"].get(title)
            if theirs is None:
                parts.append(f"{key}: no figure ({rows[key]['note'] or 'disagrees'})")
                continue
            faster = theirs / ours
            parts.append(f"{key} {theirs:.0f} ns: regdev {faster:.1f}x faster (target >= "
                         f"{PEER_TARGET:.0f}x: {'met' if faster >= PEER_TARGET else 'missed'})")
        lines.append("; ".join(parts))
    return lines


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=count(1, MAX_ROUNDS), default=25, metavar="N",
                        help=f"interleaved rounds per cell, the median shown: 1..{MAX_ROUNDS} "
                             "(default 25)")
    parser.add_argument("--batch-ms", type=span(*BATCH_MS), default=10.0, metavar="MS",
                        help=f"the length of one batch in ms: {BATCH_MS[0]:g}..{BATCH_MS[1]:g} "
                             "(default 10; on a loaded machine 1 ms batches are less often "
                             "cut by another process)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    everyone = {row.key: row for row in contenders()}
    cases = tuple(case for case in CASES if case.title in TITLES)
    load = os.getloadavg()
    result = run_bench(rounds=args.rounds, batch_seconds=args.batch_ms / 1000,
                       rows=[everyone[key] for key in ROWS], cases=cases, progress=sys.stderr)
    report = result.to_dict()
    report["load_average_before"] = [round(x, 2) for x in load]
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    report["targets"] = targets(report)
    if args.json:
        print(json.dumps(report))
    else:
        print(format_table(result))
        print(f"load average (1, 5, 15 min) before: {report['load_average_before']}, "
              f"after: {report['load_average_after']} on {os.cpu_count()} CPUs")
        print("\n".join(report["targets"]))
    return 0 if all_agree(result) else 1


if __name__ == "__main__":
    sys.exit(main())
