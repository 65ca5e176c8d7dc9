"""The larger load test: many threads calling one gate at once, audit and policy on.

Run: ``.venv/bin/python benchmarks/load.py [--threads N] [--calls M]``

The same workload and checks as ``tests/test_load.py`` (``tests/support/loadgen.py``), at full size:
every accepted write applied exactly once, in its thread's order, nothing refused or replayed
applied, each register ending with the last write to it of some thread, one audit record per
call (matched by the call's correlation id, with its verdict), no exception escaping. Prints
the throughput; exits 1 when a check fails.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _script import Parser, count
from support.loadgen import check_load, run_load


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=count(1, 1024), default=32, metavar="N",
                        help="concurrent callers: 1..1024 (default 32)")
    parser.add_argument("--calls", type=count(1, 100_000), default=2000, metavar="N",
                        help="calls per thread: 1..100000 (default 2000)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="regdev-load-") as folder:
        result = run_load(Path(folder) / "audit.db", args.threads, args.calls)
        total = sum(len(calls) for calls in result.calls.values())
        try:
            check_load(result)
        except AssertionError as error:
            print(f"FAILED after {total} calls: {error!r}"[:2000])
            return 1
    print(f"{args.threads} threads x {args.calls} calls = {total} calls in "
          f"{result.seconds:.2f} s ({total / result.seconds:.0f} calls/s); "
          f"{len(result.device.applied)} writes applied; every check passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
