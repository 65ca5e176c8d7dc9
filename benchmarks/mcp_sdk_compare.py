"""One process's MCP calls per second over HTTP: `regdev serve --http` against the official
SDK's own server serving the same two tools, at 1, 4 and 16 clients, ratios in one run.

Run: ``.venv/bin/python benchmarks/mcp_sdk_compare.py [--clients 1,4,16] [--seconds S]
[--rounds N] [--json]`` (needs the mcp extra: ``scripts/serve`` or ``scripts/test`` installs it
into .venv)

Both servers are subprocesses on 127.0.0.1, on the same stack (uvicorn, Starlette, the SDK's
Streamable HTTP session manager, ``stateless``), each with a bearer token to check and an
in-process register file behind a SQLite audit log:

* regdev: ``regdev serve --http 127.0.0.1:0 --stateless`` with a policy that names one lab token
  (so the gate, its audit records, its checks before the SDK all run, as deployed).
* the SDK: ``MCPServer`` (``mcp.server.mcpserver``, what was FastMCP) with two tools written out
  below, ``write_register(addr 0..15, data 0..255)`` and ``read_register(addr 0..15)``, typed by
  pydantic ``Field`` bounds (the SDK's own validation), on a ``RegisterFile``; each call's
  record appended to regdev's ``AuditLog`` (the same store), a write's committed before it
  answers; the SDK's bearer authentication (``token_verifier``, ``AuthSettings``) with one
  token compared in constant time.

Each client is one keep-alive connection sending one 2026-07-28 ``tools/call`` after another
(writes and reads, alternating; every answer checked to be a success), for ``--seconds`` each
cell; the clients are coroutines of one asyncio loop in this process (a client costs little
beside a server). The cells run interleaved, regdev then the SDK at each client count, for
``--rounds`` rounds; each cell's figure is its median. Goal: regdev / SDK at least 1.00 at every
client count. Not a test: nothing asserts a rate; on a loaded machine the ratios move.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _script import Parser, count, need

#: The one bearer token both servers accept.
TOKEN = "bench-0123456789abcdef0123456789abcdef"
MODERN = "2026-07-28"
#: The calls each client sends in turn: (tool, arguments).
CALLS = (("write_register", {"addr": 3, "data": 170}), ("read_register", {"addr": 3}))


def policy() -> str:
    """regdev's policy: the token, its scope choosing the default session."""
    import hashlib  # noqa: PLC0415

    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    return ('[http]\n[http.scopes]\n"regdev:operate" = "default"\n\n[http.tokens.bench]\n'
            f'sha256 = "{digest}"\nscopes = ["regdev:operate"]\n')


def serve_sdk(folder: Path) -> None:
    """The SDK's server (run in its own process by ``--serve-sdk``): prints its URL on
    stdout, serves until SIGTERM."""
    import hmac  # noqa: PLC0415
    import socket  # noqa: PLC0415
    from typing import Annotated  # noqa: PLC0415

    import uvicorn  # noqa: PLC0415
    from mcp.server.auth.provider import AccessToken  # noqa: PLC0415
    from mcp.server.auth.settings import AuthSettings  # noqa: PLC0415
    from mcp.server.mcpserver import MCPServer  # noqa: PLC0415
    from pydantic import Field  # noqa: PLC0415

    from regdev import AuditLog, Observation, RegisterFile  # noqa: PLC0415

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
    device = RegisterFile()
    audit = AuditLog(folder / "audit.db")

    class Tokens:
        async def verify_token(self, token: str) -> AccessToken | None:
            if hmac.compare_digest(token.encode(), TOKEN.encode()):
                return AccessToken(token=token, client_id="bench", scopes=["regdev:operate"])
            return None

    server: MCPServer[Any] = MCPServer(
        "sdk", token_verifier=Tokens(), log_level="WARNING",
        auth=AuthSettings(issuer_url="https://auth.test.invalid/", resource_server_url=url,
                          required_scopes=["regdev:operate"]))

    def record(tool: str, arguments: dict[str, int], result: dict[str, int],
               durable: bool) -> None:
        audit.record_call(time=time.time(), session="default", dialect="mcp",
                          raw=json.dumps({"name": tool, "arguments": arguments}),
                          observation=Observation.success(tool, result), tool=tool,
                          arguments=json.dumps(arguments), caller="token:bench",
                          durable=durable)

    def write_register(addr: int, data: int) -> dict[str, int]:
        """Write one register."""
        result = {"addr": addr, "data": device.write(addr, data)}
        record("write_register", {"addr": addr, "data": data}, result, True)
        return result

    def read_register(addr: int) -> dict[str, int]:
        """Read one register."""
        result = {"addr": addr, "data": device.read(addr)}
        record("read_register", {"addr": addr}, result, False)
        return result

    # The bounds as the SDK reads them: objects, not this module's postponed annotations.
    addr_type, data_type = Annotated[int, Field(ge=0, le=15)], Annotated[int, Field(ge=0, le=255)]
    write_register.__annotations__ = {"addr": addr_type, "data": data_type,
                                      "return": dict[str, int]}
    read_register.__annotations__ = {"addr": addr_type, "return": dict[str, int]}
    server.tool()(write_register)
    server.tool()(read_register)

    app = server.streamable_http_app(stateless_http=True)
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on",
                            timeout_keep_alive=5)
    uvicorn_server = uvicorn.Server(config)
    print(url, flush=True)
    try:
        uvicorn_server.run(sockets=[listener])
    finally:
        audit.close()


def request(url_path: str, port: int, number: int, tool: str,
            arguments: dict[str, int]) -> bytes:
    """One HTTP/1.1 POST of a 2026-07-28 ``tools/call``, as bytes."""
    body = json.dumps({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                  "io.modelcontextprotocol/clientCapabilities": {}}}}).encode()
    head = (f"POST {url_path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\n"
            f"Mcp-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: {tool}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def read_response(reader: asyncio.StreamReader) -> bytes:
    """One HTTP/1.1 response's body (Content-Length or chunked).

    Raises:
        RuntimeError: the status is not 200.
    """
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    headers = {line.split(b":", 1)[0].strip().lower(): line.split(b":", 1)[1].strip()
               for line in head.split(b"\r\n")[1:] if b":" in line}
    if b"content-length" in headers:
        body = await reader.readexactly(int(headers[b"content-length"]))
    else:
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
            parts.append(await reader.readexactly(size + 2))
            if size == 0:
                break
        body = b"".join(part[:-2] for part in parts)
    if status != b"200":
        raise RuntimeError(f"HTTP {status.decode()}: {body[:300]!r}")
    return body


def succeeded(body: bytes) -> bool:
    """Whether a ``tools/call`` answer (JSON, or one SSE event) is a success."""
    text = body.decode()
    if text.lstrip().startswith("{"):
        message = json.loads(text)
    else:
        data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        message = json.loads(data[-1])
    result = message.get("result")
    return isinstance(result, dict) and result.get("isError") is False


async def load(url: str, clients: int, seconds: float) -> int:
    """``clients`` keep-alive connections sending calls for ``seconds``; the calls answered.

    Raises:
        RuntimeError: a call failed.
    """
    rest = url.split("//", 1)[1]
    port = int(rest.split("/", 1)[0].split(":")[1])
    path = "/" + rest.split("/", 1)[1]
    requests = [request(path, port, number, tool, arguments)
                for number, (tool, arguments) in enumerate(CALLS)]
    done = [0] * clients
    until = time.perf_counter() + seconds

    async def client(index: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            turn = index
            while time.perf_counter() < until:
                writer.write(requests[turn % len(requests)])
                body = await read_response(reader)
                if not succeeded(body):
                    raise RuntimeError(f"a call failed: {body[:300]!r}")
                done[index] += 1
                turn += 1
        finally:
            writer.close()

    await asyncio.gather(*(client(index) for index in range(clients)))
    return sum(done)


def cpu_seconds(pid: int) -> float:
    """The CPU time, user and system, a process used so far, in seconds (Linux's
    ``/proc/PID/stat``); NaN where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_sdk(folder: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, __file__, "--serve-sdk", str(folder)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    if not url.startswith("http://"):
        process.kill()
        raise SystemExit(f"the SDK's server did not start: {process.communicate()[1][-2000:]}")
    return process, url


def stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def counts(text: str) -> list[int]:
    """An argparse ``type``: client counts, comma-separated, each a whole number 1..256."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(1 <= value <= 256 for value in values):
        raise argparse.ArgumentTypeError(
            f"must be whole numbers in 1..256, comma-separated, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--serve-sdk":
        serve_sdk(Path(sys.argv[2]))
        return 0
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=counts, default=[1, 4, 16], metavar="N,N,...",
                        help="client counts, comma-separated, each 1..256 (default 1,4,16)")
    parser.add_argument("--seconds", type=count(1, 600), default=5, metavar="S",
                        help="seconds each cell sends calls: 1..600 (default 5)")
    parser.add_argument("--rounds", type=count(1, 99), default=3, metavar="N",
                        help="rounds of every cell, the median shown: 1..99 (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    need("mcp", "mcp", "anyio", "uvicorn", "starlette", "pydantic")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from support.httpserver import http_server  # noqa: PLC0415

    rates: dict[tuple[str, int], list[float]] = {}
    per_cpu: dict[tuple[str, int], list[float]] = {}  # calls per CPU second of the server
    with tempfile.TemporaryDirectory(prefix="regdev-sdk-compare-") as name:
        folder = Path(name)
        (folder / "sdk").mkdir()
        sdk, sdk_url = start_sdk(folder / "sdk")
        try:
            with http_server(folder / "regdev", policy(), "--stateless") as served:
                assert served.process is not None
                urls = {"regdev": served.url, "sdk": sdk_url}
                pids = {"regdev": served.process.pid, "sdk": sdk.pid}
                for url in urls.values():  # warm: connected, imported, caches filled
                    asyncio.run(load(url, 1, 0.5))
                for _ in range(args.rounds):
                    for clients in args.clients:
                        for side, url in urls.items():
                            used = cpu_seconds(pids[side])
                            calls = asyncio.run(load(url, clients, args.seconds))
                            used = cpu_seconds(pids[side]) - used
                            rates.setdefault((side, clients), []).append(
                                calls / args.seconds)
                            per_cpu.setdefault((side, clients), []).append(
                                calls / used if used > 0 else float("nan"))
        finally:
            stop(sdk)
    rows = []
    for clients in args.clients:
        ours = statistics.median(rates[("regdev", clients)])
        theirs = statistics.median(rates[("sdk", clients)])
        ours_cpu = statistics.median(per_cpu[("regdev", clients)])
        theirs_cpu = statistics.median(per_cpu[("sdk", clients)])
        rows.append({"clients": clients, "regdev": ours, "sdk": theirs,
                     "ratio": ours / theirs if theirs else float("inf"),
                     "regdev_per_cpu_second": ours_cpu, "sdk_per_cpu_second": theirs_cpu,
                     "cpu_ratio": ours_cpu / theirs_cpu if theirs_cpu else float("inf")})
    load_average = os.getloadavg()
    if args.json:
        print(json.dumps({"rows": rows, "goal": ">= 1.00", "seconds": args.seconds,
                          "rounds": args.rounds, "load": list(load_average),
                          "cpus": os.cpu_count()}))
        return 0
    print(f"MCP tools/call per second over HTTP, one server process each (median of "
          f"{args.rounds} rounds of {args.seconds} s)")
    print("  regdev: regdev serve --http --stateless (lab token, SQLite audit log)")
    print("  sdk:    mcp MCPServer, streamable_http_app(stateless_http=True), the same two "
          "tools on a RegisterFile, records in regdev's AuditLog")
    print(f"  {'':>7} {'calls per second':^30}   {'calls per CPU second':^30}")
    print(f"  {'clients':>7} {'regdev':>10} {'sdk':>10} {'ratio':>8}   {'regdev':>10} {'sdk':>10} "
          f"{'ratio':>8}   goal (calls per second)")
    for row in rows:
        verdict = "met" if row["ratio"] >= 1.0 else "MISSED"
        print(f"  {row['clients']:>7} {row['regdev']:>10.0f} {row['sdk']:>10.0f} "
              f"{row['ratio']:>7.2f}x   {row['regdev_per_cpu_second']:>10.0f} "
              f"{row['sdk_per_cpu_second']:>10.0f} {row['cpu_ratio']:>7.2f}x   "
              f">= 1.00x: {verdict}")
    print(f"  load average {load_average[0]:.1f} on {os.cpu_count()} CPUs (above the CPU "
          "count, calls per second follow the share of CPU each server got; calls per CPU "
          "second, its own work per call, move less)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
