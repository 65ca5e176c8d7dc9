"""Several processes on one PostgreSQL store behind nginx: 3 ``regdev serve --http
--stateless`` processes, round-robin, a Modbus TCP device they share; one is killed with
SIGKILL mid-run. Sized to fit CI; benchmarks/postgres_processes.py measures the rates."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

import nginxserver
import pgserver
from httpserver import MCP_HEADERS, REGDEV, TOKENS, answer, policy_text, server_env
from loadgen_http import request_body
from modbus_servers import modbus_sim_process
from regdev import read_audit

CLIENTS, CALLS, RETRIES = 6, 40, 12


@contextmanager
def backend(folder: Path, policy: Path, dsn: str, device: str) -> Iterator[
        tuple[subprocess.Popen[bytes], int]]:
    """One `regdev serve --http --stateless` process; yields it and its port."""
    process = subprocess.Popen(
        [REGDEV, "serve", "--http", "127.0.0.1:0", "--stateless", "--policy", str(policy),
         "--audit", dsn, "--port", device, "--log-level", "info"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env=server_env(folder))
    assert process.stderr is not None
    lines = []
    port = None
    for raw in process.stderr:
        line = raw.decode("utf-8", "replace")
        lines.append(line)
        if "serving MCP over HTTP at " in line:
            port = int(line.split("serving MCP over HTTP at ")[1].split()[0]
                       .rsplit(":", 1)[1].split("/")[0])
            break
    assert port is not None, "".join(lines)
    drain = threading.Thread(target=lambda: [None for _ in process.stderr or ()], daemon=True)
    drain.start()
    try:
        yield process, port
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def keyed_write(client: int, index: int) -> str:
    return json.dumps({"name": "write_register",
                       "arguments": {"addr": 1 + (client * 7 + index) % 15,
                                     "data": (client * 31 + index * 13) % 256},
                       "id": f"c{client}-{index}",
                       "_meta": {"idempotency_key": f"k{client}-{index}"}})


def test_a_process_killed_mid_run_loses_no_acknowledged_write_and_runs_none_twice(
        tmp_path: Path, postgres: pgserver.Server) -> None:
    """3 processes behind nginx on one store and one Modbus TCP device; keyed writes retried
    (landing on other processes) while one process is SIGKILLed: every acknowledged write has
    its record, and no keyed write ran twice."""
    dsn = postgres.fresh_dsn()
    with ExitStack() as stack:
        try:
            device = stack.enter_context(modbus_sim_process("--modbus-tcp", "127.0.0.1:0"))
        except AssertionError as error:
            pytest.skip(f"the Modbus simulator did not start: {error}")
        ports: list[int] = []
        processes = []
        policy = tmp_path / "policy.toml"
        nginx_port = pgserver.free_port()
        for at in range(3):
            home = tmp_path / f"home{at}"
            home.mkdir()
            if at == 0:
                policy.write_text(policy_text().replace(
                    "[http]\n", f'[http]\nallowed_hosts = ["127.0.0.1:{nginx_port}"]\n', 1))
            process, port = stack.enter_context(backend(home, policy, dsn, device))
            processes.append(process)
            ports.append(port)
        try:
            url = stack.enter_context(nginxserver.started(ports, nginx_port)) + "/mcp"
        except pgserver.Missing as error:
            if pgserver.in_ci():
                pytest.fail(f"{error} (CI installs it: .ci/run)")
            pytest.skip(str(error))
        acknowledged: list[tuple[str, dict[str, Any]]] = []
        lock = threading.Lock()
        done = Counter[str]()
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {TOKENS['alice'][0]}"}

        def client(number: int) -> None:
            with httpx2.Client(timeout=60, headers=headers) as http:
                for index in range(CALLS):
                    params = keyed_write(number, index)
                    for _ in range(RETRIES):
                        try:
                            response = http.post(url, content=request_body(index, params))
                        except httpx2.HTTPError:
                            continue
                        if response.status_code != 200:
                            continue
                        result = answer(response)["result"]["structuredContent"]
                        if result.get("ok"):
                            with lock:
                                acknowledged.append((f"k{number}-{index}", result))
                            break
                        if result.get("code") not in ("idempotency-in-progress",
                                                      "audit-error"):
                            break
                    with lock:
                        done["calls"] += 1

        pool = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for thread in pool:
            thread.start()
        while done["calls"] < CLIENTS * CALLS // 3 and any(t.is_alive() for t in pool):
            threading.Event().wait(0.05)
        processes[1].send_signal(signal.SIGKILL)  # mid-run, calls in flight
        for thread in pool:
            thread.join(600)
    records = read_audit(dsn)
    calls = [r for r in records if r.event == "call"]
    recorded = {r.idempotency_key for r in calls if r.ok}
    assert len(acknowledged) >= CLIENTS * CALLS // 2, len(acknowledged)
    missing = [key for key, _ in acknowledged if key not in recorded]
    assert missing == [], missing
    executed = Counter(r.idempotency_key for r in calls if r.ok and not r.replay)
    assert [key for key, times in executed.items() if times > 1] == []
