"""The HTTP load test at full size: many clients on one `regdev serve --http`, and the same
calls over stdio for the latency beside it.

Run: ``.venv/bin/python benchmarks/http_load.py [--clients 16] [--calls 1000]`` (needs the mcp
extra: ``scripts/serve`` or ``scripts/test`` installs it into .venv)

Starts ``regdev serve --http 127.0.0.1:0 --stateless`` (a subprocess, as deployed) with the
audit log on, and runs ``--clients`` HTTP clients at once, each its own keep-alive connection
sending its ``--calls`` calls one after another (``tests/support/loadgen.py``'s mix as MCP
``tools/call``: reads, writes, keyed writes sent twice, refusals at validate and authorize).
Checks, as ``tests/test_http_load.py`` does at test size: every call answered under its own id,
exactly one audit record per call with the verdict its client got, keyed writes run once and
replay once, and each register ending with the last accepted write to it of some client (a
serial order of the accepted writes). Then the same calls over ``regdev serve`` on stdio (one
client: stdio has one), and over HTTP by one client in each protocol era, for the latencies. The
load speaks the 2026-07-28 era (each request stands alone, as behind a load balancer); a
2025-era request on a --stateless server costs more (the SDK makes a transport and a server task
for each). Prints p50 and p99 per call for each, and the throughput; exits 1 when a check fails.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _script import Parser, count, need


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=count(1, 256), default=16, metavar="N",
                        help="concurrent HTTP clients: 1..256 (default 16)")
    parser.add_argument("--calls", type=count(1, 100_000), default=1000, metavar="N",
                        help="calls per client: 1..100000 (default 1000)")
    args = parser.parse_args(argv)
    # the server and its clients need the mcp extra: checked here, so that --help needs none
    need("mcp", "mcp", "anyio", "uvicorn", "starlette", "jwt", "cryptography", "httpx2")
    from support.httpserver import (  # noqa: PLC0415
        REGDEV,
        answer,
        http_server,
        policy_text,
        post,
        server_env,
        token,
    )
    from support.loadgen_http import (  # noqa: PLC0415
        LOAD_POLICY,
        check_load,
        check_registers,
        percentiles,
        run_http_load,
        run_stdio_load,
    )

    policy = LOAD_POLICY + policy_text().replace(
        "[registers]\nread_only = [0]\nprotected = [15]\n", "")
    rows = []
    with tempfile.TemporaryDirectory(prefix="regdev-http-load-") as name:
        folder = Path(name)
        with http_server(folder / "http", policy, "--stateless") as served:
            load = run_http_load(served.url, token("alice"), args.clients, args.calls,
                                 modern=True)
            final = []
            for addr in range(16):
                body = ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
                        f'{{"name": "read_register", "arguments": {{"addr": {addr}}}}}}}')
                message = answer(post(served.url, body, bearer=token("alice")))
                final.append(message["result"]["structuredContent"]["result"]["data"])
            try:
                check_load(load, served.audit)
                check_registers(load, final)
            except AssertionError as error:
                print(f"FAILED after {load.total} calls: {error!r}"[:2000])
                return 1
            rows.append((f"HTTP 2026-07-28, {args.clients} clients at once", load))
            for label, modern in (("HTTP 2026-07-28, 1 client", True),
                                  ("HTTP 2025-11-25, 1 client", False)):
                rows.append((label, run_http_load(served.url, token("alice"), 1, args.calls,
                                                  modern=modern)))
        (folder / "stdio").mkdir()
        (folder / "stdio" / "policy.toml").write_text(policy)
        stdio = run_stdio_load([REGDEV, "serve", "--log-level", "warning", "--policy",
                                str(folder / "stdio" / "policy.toml"), "--audit",
                                str(folder / "stdio" / "audit.db")],
                               server_env(folder / "stdio"), args.clients, args.calls)
        check_load(stdio, folder / "stdio" / "audit.db")
        rows.append(("stdio, 1 client (the same calls)", stdio))
    print(f"{args.clients} clients x {args.calls} calls = {load.total} calls over HTTP; every "
          "check passed")
    print(f"{'transport':<40} {'calls':>7} {'p50 ms':>8} {'p99 ms':>8} {'calls/s':>8}")
    for label, run in rows:
        p50, p99 = percentiles(run.latencies())
        print(f"{label:<40} {run.total:>7} {p50:>8.2f} {p99:>8.2f} "
              f"{run.total / run.seconds:>8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
