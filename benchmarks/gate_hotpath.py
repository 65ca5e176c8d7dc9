"""The plain gate's per-call path: ``Gate().handle`` on a write, a read and a refusal.

Not a test. Prints, for each kind of call, the best of 5 rounds of the mean time per call, in
microseconds. To compare two checkouts in one window (the machine's load changes between
runs), run it alternately with each one's ``src`` first on the path::

    for round in 1 2 3; do
        for tree in /path/to/main /path/to/branch; do
            PYTHONPATH=$tree/src .venv/bin/python benchmarks/gate_hotpath.py --label $tree
        done
    done
"""

from __future__ import annotations

import time

from _script import Parser, count
from regdev import Gate
from regdev.core._text import display_text

CALLS = {
    "write": '{"tool": "write_register", "arguments": {"addr": 3, "data": 255}}',
    "read": '{"tool": "read_register", "arguments": {"addr": 3}}',
    "refusal": '{"tool": "write_register", "arguments": {"addr": 16, "data": 1}}',
}


def best_of(gate: Gate, raw: str, calls: int, rounds: int = 5) -> float:
    """The best round's mean seconds per ``gate.handle(raw)``."""
    handle = gate.handle
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            handle(raw)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=count(1, 10_000_000), default=50_000, metavar="N",
                        help="calls per round: 1..10000000 (default 50000)")
    parser.add_argument("--label", default="", help="printed before the figures")
    args = parser.parse_args()
    gate = Gate()
    for raw in CALLS.values():  # warm up
        best_of(gate, raw, 1000, 1)
    figures = "  ".join(f"{name} {best_of(gate, raw, args.calls) * 1e6:.3f} us"
                        for name, raw in CALLS.items())
    print(f"{display_text(args.label)}  {figures}".strip())


if __name__ == "__main__":
    main()
