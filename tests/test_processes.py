"""Several processes on one PostgreSQL store behind nginx: 3 ``regdev serve --http
--stateless --fleet`` processes, round-robin, serving two devices: a Modbus TCP device any of
them drives, and a serial device on a pty that the process holding its line's lease drives
(the others refuse its calls, ``line-elsewhere``, naming the owner); the owner of the serial
line is killed with SIGKILL mid-run, twice, and another takes the line over. Sized to fit CI;
benchmarks/processes_reliability.py runs it at full size, benchmarks/postgres_processes.py
measures the rates."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from regdev import read_audit
from support import nginxserver, pgserver
from support.firmware import sim_process
from support.httpserver import MCP_HEADERS, REGDEV, TOKENS, answer, policy_text, server_env
from support.loadgen_http import request_body
from support.modbus_servers import modbus_sim_process

CLIENTS, CALLS, RETRIES = 6, 40, 12
#: The serial line's lease in the run's fleet file: seconds, renewed every (seconds).
LEASE, RENEW = 3, 0.5
#: Seconds a client keeps sending a call refused line-elsewhere (its line changing owner).
LINE_PATIENCE = 120.0


@contextmanager
def backend(folder: Path, policy: Path, dsn: str, fleet: Path) -> Iterator[
        tuple[subprocess.Popen[bytes], int]]:
    """One `regdev serve --http --stateless --fleet FILE` process; yields it and its port."""
    process = subprocess.Popen(
        [REGDEV, "serve", "--http", "127.0.0.1:0", "--stateless", "--policy", str(policy),
         "--audit", dsn, "--fleet", str(fleet), "--log-level", "info"],
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
    """Client ``client``'s ``index``-th keyed write (its key names both, so each is one
    write of one device)."""
    return json.dumps({"name": "write_register",
                       "arguments": {"addr": 1 + (client * 7 + index) % 15,
                                     "data": (client * 31 + index * 13) % 256},
                       "id": f"c{client}-{index}",
                       "_meta": {"idempotency_key": f"k{client}-{index}"}})


@dataclass
class Run:
    """What a reliability run gave: the keyed writes acknowledged (device, key,
    observation), the call records of the store, the calls sent, the seconds the load took,
    the keys a client sent more than once (an attempt failed: no answer, or refused while
    running or while the serial line was elsewhere), the refusals line-elsewhere (their
    messages), the serial line's owners killed, the serial writes acknowledged after the
    last kill, and how the calls not acknowledged ended (their last code, or ``no answer``)."""

    acknowledged: list[tuple[str, str, dict[str, Any]]]
    records: list[Any]
    calls: int
    seconds: float
    retried: set[str]
    elsewhere: list[str]
    killed_owners: list[str]
    serial_after_kills: int
    unacknowledged: Counter[str]

    def unrecorded(self) -> list[str]:
        """Acknowledged writes without an accepted call record of their key."""
        recorded = {r.idempotency_key for r in self.records if r.event == "call" and r.ok}
        return [key for _, key, _ in self.acknowledged if key not in recorded]

    def executed_twice(self) -> list[str]:
        """Keys whose write ran more than once (accepted call records not replays): none may
        be. (A retry of a key stored for the Modbus device, which cannot say its reset epoch,
        is refused idempotency-unconfirmed, docs/safety.md; the serial device's is replayed.)"""
        executed = Counter(r.idempotency_key for r in self.records
                           if r.event == "call" and r.ok and not r.replay)
        return [key for key, times in executed.items() if times > 1]


def fleet_file(folder: Path, modbus: str, serial: str) -> Path:
    """The run's fleet file: ``tcp`` (the Modbus TCP device), ``serial`` (the pty)."""
    path = folder / "fleet.toml"
    path.write_text(f'[devices.tcp]\nport = "{modbus}"\n\n[devices.serial]\nport = "{serial}"'
                    f"\n\n[leases]\nseconds = {LEASE}\nrenew_seconds = {RENEW}\n")
    return path


def line_owner(dsn: str) -> str | None:
    """The process holding the serial line's lease, as the store names it, or None."""
    import psycopg  # noqa: PLC0415 - the postgresql extra

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT owner FROM serial_leases WHERE expires > clock_timestamp()"
                           ).fetchone()
    return None if row is None else str(row[0])


def reliability_run(folder: Path, dsn: str, *, clients: int, calls: int,
                    kills: int = 2) -> Run:
    """3 ``serve --http --stateless --fleet`` processes on the store ``dsn`` behind nginx,
    serving a Modbus TCP device and a serial device on a pty (regdev's simulators); each of
    ``clients`` threads sends ``calls`` keyed writes, to the two devices in turn, a failed
    call retried with its key (round-robin lands it on another process); ``kills`` times,
    at each ``1/(kills+1)`` of the calls, the process holding the serial line's lease is
    SIGKILLed.

    Raises:
        pgserver.Missing: nginx is not installed.
    """
    with ExitStack() as stack:
        modbus = stack.enter_context(modbus_sim_process("--modbus-tcp", "127.0.0.1:0"))
        serial, _ = stack.enter_context(sim_process("--pty"))
        fleet = fleet_file(folder, modbus, serial)
        ports: list[int] = []
        processes = []
        policy = folder / "policy.toml"
        nginx_port = pgserver.free_port()
        policy.write_text(policy_text().replace(
            "[http]\n", f'[http]\nallowed_hosts = ["127.0.0.1:{nginx_port}"]\n', 1))
        for at in range(3):
            home = folder / f"home{at}"
            home.mkdir()
            process, port = stack.enter_context(backend(home, policy, dsn, fleet))
            processes.append(process)
            ports.append(port)
        url = stack.enter_context(nginxserver.started(ports, nginx_port)) + "/mcp"
        acknowledged: list[tuple[str, str, dict[str, Any]]] = []
        retried: set[str] = set()
        elsewhere: list[str] = []
        unacknowledged = Counter[str]()
        lock = threading.Lock()
        done = Counter[str]()
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {TOKENS['alice'][0]}"}

        def send(http: httpx2.Client, device: str, number: int, index: int) -> None:
            """One keyed write, sent until answered for good."""
            key, params = f"k{number}-{index}", keyed_write(number, index)
            failures, patience = 0, time.monotonic() + LINE_PATIENCE
            last = "no answer"
            while failures <= RETRIES:
                try:
                    response = http.post(f"{url}/{device}", content=request_body(index, params))
                except httpx2.HTTPError:
                    response = None
                if response is None or response.status_code != 200:
                    failures += 1
                else:
                    result = answer(response)["result"]["structuredContent"]
                    if result.get("ok"):
                        with lock:
                            acknowledged.append((device, key, result))
                        return
                    code = last = str(result.get("code"))
                    if code == "line-elsewhere" and time.monotonic() < patience:
                        with lock:
                            elsewhere.append(result["message"])
                        threading.Event().wait(0.01)  # the client's pause between retries
                    elif code in ("idempotency-in-progress", "audit-error"):
                        failures += 1
                    else:
                        break
                with lock:
                    retried.add(key)
            with lock:
                unacknowledged[last] += 1

        def client(number: int) -> None:
            with httpx2.Client(timeout=60, headers=headers) as http:
                for index in range(calls):
                    send(http, ("tcp", "serial")[index % 2], number, index)
                    with lock:
                        done["calls"] += 1

        began = time.monotonic()
        pool = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
        for thread in pool:
            thread.start()
        pids = {process.pid: process for process in processes}
        killed_owners: list[str] = []
        marks: list[int] = []
        for kill in range(1, kills + 1):
            while done["calls"] < clients * calls * kill // (kills + 1) and any(
                    t.is_alive() for t in pool):
                threading.Event().wait(0.05)
            owner = line_owner(dsn)
            pid = int(owner.split(" pid ")[1].split()[0]) if owner else None
            victim = pids.get(pid) if pid is not None else None
            if victim is None or victim.poll() is not None:  # no live owner: any other
                victim = next(p for p in processes if p.poll() is None)
            victim.send_signal(signal.SIGKILL)  # mid-run, calls in flight
            victim.wait()
            killed_owners.append(owner or "")
            with lock:
                marks.append(len(acknowledged))
        for thread in pool:
            thread.join(1800)
        seconds = time.monotonic() - began
        after = sum(1 for device, _, _ in acknowledged[marks[-1] if marks else 0:]
                    if device == "serial")
    return Run(acknowledged, read_audit(dsn), clients * calls, seconds, retried, elsewhere,
               killed_owners, after, unacknowledged)


def test_processes_killed_mid_run_lose_no_acknowledged_write_and_run_none_twice(
        tmp_path: Path, postgres: pgserver.Server) -> None:
    """3 processes behind nginx on one store, a Modbus TCP device and a serial pty device;
    keyed writes retried (landing on other processes) while the serial line's owner is
    SIGKILLed, twice: every acknowledged write has its record, no keyed write ran twice;
    calls for the serial device that land on a process not owning its line are refused
    naming the owner; after each kill another process takes the line over."""
    try:
        run = reliability_run(tmp_path, postgres.fresh_dsn(), clients=CLIENTS, calls=CALLS)
    except pgserver.Missing as error:
        if pgserver.in_ci():
            pytest.fail(f"{error} (CI installs it: .ci/run)")
        pytest.skip(str(error))
    assert len(run.acknowledged) >= CLIENTS * CALLS // 2, (len(run.acknowledged),
                                                           run.unacknowledged)
    assert len(run.acknowledged) + sum(run.unacknowledged.values()) == run.calls
    assert run.unrecorded() == []
    assert run.executed_twice() == []
    assert run.elsewhere, "no call landed on a process not owning the serial line"
    assert all(" pid " in message and "whose lease expires at " in message
               for message in run.elsewhere), run.elsewhere[:3]
    assert all(" pid " in owner for owner in run.killed_owners), run.killed_owners
    assert len(set(run.killed_owners)) == 2
    assert run.serial_after_kills > 0  # the last process left took the line over
