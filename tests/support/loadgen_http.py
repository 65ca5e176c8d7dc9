"""Many HTTP clients calling one `regdev serve --http` at once, and the checks that nothing went
wrong; the same calls over stdio for the latency beside it.

Used at test size by ``tests/test_http_load.py`` and at full size by
``benchmarks/http_load.py``. The calls are ``tests/support/loadgen.py``'s scripts (reads, writes,
keyed writes sent twice, refusals at validate and at authorize) as MCP ``tools/call`` params.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from regdev import read_audit
from support.httpserver import MCP_HEADERS, answer
from support.loadgen import script

#: The load's policy additions: register 0 read-only (so some writes are refused at authorize).
LOAD_POLICY = "[registers]\nread_only = [0]\n\n"


#: The protocol era a load speaks: the 2025 one (``initialize``; over a --stateless server, no
#: handshake at all) or 2026-07-28 (every request carries its envelope in ``_meta``).
MODERN = "2026-07-28"
MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN,
               "io.modelcontextprotocol/clientCapabilities": {}}


def mcp_params(raw: str, *, modern: bool = False) -> str:
    """A canonical call of ``loadgen.script`` as MCP ``tools/call`` params: ``name``,
    ``arguments``, the correlation ``id``, and the idempotency key in ``_meta`` (with the
    2026-07-28 envelope when ``modern``)."""
    call = json.loads(raw)
    params: dict[str, Any] = {"name": call["tool"], "arguments": call["arguments"],
                              "id": call["id"]}
    meta = dict(MODERN_META) if modern else {}
    if "idempotency_key" in call:
        meta["idempotency_key"] = call["idempotency_key"]
    if meta:
        params["_meta"] = meta
    return json.dumps(params)


def request_body(request_id: int, params: str) -> bytes:
    return (f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", '
            f'"params": {params}}}').encode()


@dataclass
class Load:
    """What a load run produced: per client, each call's params, the observation it got,
    and its latency in seconds."""

    calls: dict[int, list[tuple[str, dict[str, Any], float]]] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    seconds: float = 0.0

    def latencies(self) -> list[float]:
        return sorted(latency for calls in self.calls.values() for _, _, latency in calls)

    @property
    def total(self) -> int:
        return sum(len(calls) for calls in self.calls.values())


def run_http_load(url: str, bearer: str, clients: int, calls: int, *,
                  modern: bool = False) -> Load:
    """``clients`` threads, each its own keep-alive HTTP connection, each sending its
    ``calls`` calls one after another to a --stateless server, in the 2025 protocol era or
    (``modern``) the 2026-07-28 one."""
    load = Load()
    start = threading.Barrier(clients + 1)
    lock = threading.Lock()
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {bearer}"}

    def client(index: int) -> None:
        mine: list[tuple[str, dict[str, Any], float]] = []
        try:
            bodies = [(params, request_body(number, params), json.loads(params)["name"])
                      for number, params in enumerate(mcp_params(raw, modern=modern)
                                                      for raw in script(index, calls))]
            with httpx2.Client(timeout=60, headers=headers) as http:
                start.wait()
                for params, body, name in bodies:
                    began = time.perf_counter()
                    response = http.post(url, content=body, headers={
                        "Mcp-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
                        "Mcp-Name": name} if modern else None)
                    message = answer(response)
                    mine.append((params, message["result"]["structuredContent"],
                                 time.perf_counter() - began))
        except BaseException as error:  # any failure is a failure of the load
            with lock:
                load.errors.append(error)
        with lock:
            load.calls[index] = mine

    pool = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in pool:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in pool:
        thread.join()
    load.seconds = time.perf_counter() - began
    return load


def run_stdio_load(command: list[str], env: dict[str, str], clients: int, calls: int) -> Load:
    """The same calls as :func:`run_http_load` over `regdev serve` on stdio: one client (stdio
    has one), sending every client's calls in turn, each after the answer to the one before."""
    load = Load()
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
    assert process.stdin is not None and process.stdout is not None
    handshake = (b'{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": '
                 b'{"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": '
                 b'{"name": "load", "version": "0"}}}\n'
                 b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
    process.stdin.write(handshake)
    process.stdin.flush()
    process.stdout.readline()
    began_all = time.perf_counter()
    for index in range(clients):
        mine = []
        for number, params in enumerate(mcp_params(raw) for raw in script(index, calls)):
            began = time.perf_counter()
            process.stdin.write(request_body(number + 1, params) + b"\n")
            process.stdin.flush()
            message = json.loads(process.stdout.readline())
            mine.append((params, message["result"]["structuredContent"],
                         time.perf_counter() - began))
        load.calls[index] = mine
    load.seconds = time.perf_counter() - began_all
    process.communicate(timeout=60)
    return load


def check_load(load: Load, audit: Path) -> None:
    """Assert the load stayed correct, from the callers' view and the audit log:

    * no client failed, and every call got its observation, echoing the call's id;
    * a keyed write's first send ran and its second is a replay;
    * the audit log holds exactly one record per call, found by the call's correlation id,
      with the verdict that call got, and the params as its raw text.

    The registers are checked apart (:func:`check_registers`).
    """
    assert load.errors == [], load.errors[:3]
    sent: dict[str, tuple[str, dict[str, Any]]] = {}
    for calls in load.calls.values():
        for params, observation, _ in calls:
            call = json.loads(params)
            assert observation.get("id") == call["id"], (params, observation)
            sent[call["id"]] = (params, observation)
            if "idempotency_key" in call.get("_meta", {}):  # the first runs, the second replays
                first = int(call["id"].rsplit("-", 1)[1]) % 10 == 3
                assert observation["ok"] and bool(observation.get("replay")) is not first, (
                    params, observation)
    records = [r for r in read_audit(audit) if r.event == "call" and r.call_id in sent]
    by_id = Counter(r.call_id for r in records)
    assert set(by_id) == set(sent) and set(by_id.values()) == {1}, by_id.most_common(3)
    for record in records:
        params, observation = sent[str(record.call_id)]
        assert (record.ok, record.code, record.replay, record.raw) == (
            observation["ok"], observation.get("code"), bool(observation.get("replay")),
            params.encode()), record


def accepted_writes(load: Load) -> dict[int, list[tuple[int, int]]]:
    """Each client's accepted writes that ran (not replays), (addr, data), in its order."""
    accepted: dict[int, list[tuple[int, int]]] = {}
    for client, calls in load.calls.items():
        accepted[client] = []
        for params, observation, _ in calls:
            call = json.loads(params)
            if call["name"] == "write_register" and observation["ok"] \
                    and not observation.get("replay"):
                accepted[client].append((call["arguments"]["addr"], call["arguments"]["data"]))
    return accepted


def check_registers(load: Load, final: list[int]) -> None:
    """Assert each register's final value is one a serial order of the accepted writes can
    leave: the last accepted write to it of some client (each client sends in order), or 0
    when no client wrote it."""
    accepted = accepted_writes(load)
    for addr, value in enumerate(final):
        last = {[d for a, d in writes if a == addr][-1]
                for writes in accepted.values() if any(a == addr for a, _ in writes)}
        assert value in (last or {0}), (addr, value, last)


def percentiles(latencies: list[float]) -> tuple[float, float]:
    """(p50, p99) of sorted latencies, in milliseconds (nearest rank)."""
    def rank(p: float) -> float:
        return latencies[min(len(latencies) - 1, max(0, round(p * len(latencies)) - 1))] * 1e3
    return rank(0.50), rank(0.99)
