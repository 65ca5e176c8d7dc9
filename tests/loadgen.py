"""Many threads calling one gate at once, and the checks that nothing went wrong.

Used at test size by ``tests/test_load.py`` and at full size by ``benchmarks/load.py``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from regdev import AuditLog, Gate, Observation, Policy, RegisterFile, read_audit

#: The policy of the load: register 0 is read-only, so some writes are refused at authorize.
POLICY = Policy.from_dict({"registers": {"read_only": [0]}})


class RecordingDevice(RegisterFile):
    """A register file that records each write it applies, with the calling thread, in the
    order they were applied."""

    def __init__(self) -> None:
        super().__init__()
        self._order = threading.Lock()
        self.applied: list[tuple[int, int, int]] = []  # (thread id, addr, data)

    def write(self, addr: int, data: int) -> int:
        with self._order:
            value = super().write(addr, data)
            self.applied.append((threading.get_ident(), addr, data))
            return value


def _write(addr: int, data: int, key: str | None = None) -> str:
    call: dict[str, object] = {"tool": "write_register", "arguments": {"addr": addr, "data": data}}
    if key is not None:
        call["idempotency_key"] = key
    return json.dumps(call)


def script(thread: int, calls: int) -> list[str]:
    """The raw calls of one thread: writes (some keyed, some keys sent twice), reads, and
    calls refused at validate (range) and at authorize (read-only register)."""
    out = []
    for i in range(calls):
        kind = i % 10
        addr, data = 1 + (i * 7 + thread) % 15, (i * 13 + thread * 31) % 256
        if kind == 0:
            out.append(json.dumps({"tool": "read_register", "arguments": {"addr": addr}}))
        elif kind == 1:
            out.append(_write(16, data))  # range-addr
        elif kind == 2:
            out.append(_write(0, data))  # read-only-register
        elif kind == 3:
            out.append(_write(addr, data, key=f"t{thread}-{i}"))
        elif kind == 4:
            out.append(out[-1])  # the same keyed write again: a replay
        else:
            out.append(_write(addr, data))
    return out


@dataclass
class LoadResult:
    """What a load run produced."""

    device: RecordingDevice
    audit_path: Path
    calls: dict[int, list[tuple[str, Observation]]] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    seconds: float = 0.0


def run_load(path: Path, threads: int, calls: int) -> LoadResult:
    """Run ``threads`` threads of ``calls`` calls each on one gate, with an audit log at
    ``path``; close the gate (committing every record) before returning."""
    device = RecordingDevice()
    gate = Gate(device, policy=POLICY, audit=AuditLog(path))
    result = LoadResult(device, path)
    start = threading.Barrier(threads + 1)
    lock = threading.Lock()

    def worker(index: int) -> None:
        mine: list[tuple[str, Observation]] = []
        try:
            raws = script(index, calls)
            start.wait()
            for raw in raws:
                mine.append((raw, gate.handle(raw)))
        except BaseException as error:  # any escape is a failure of the load
            with lock:
                result.errors.append(error)
        with lock:
            result.calls[threading.get_ident()] = mine

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in pool:
        thread.join()
    result.seconds = time.perf_counter() - began
    gate.close()
    return result


def check_load(result: LoadResult) -> None:
    """Assert the load stayed correct (see tests/test_load.py for the list)."""
    assert result.errors == [], result.errors
    accepted: dict[int, list[tuple[int, int]]] = {}
    codes: Counter[str | None] = Counter()
    for thread, calls in result.calls.items():
        accepted[thread] = []
        previous = ""
        for raw, obs in calls:
            call = json.loads(raw)
            codes[obs.code] += 1
            if call["tool"] == "write_register" and obs.ok and not obs.replay:
                args = call["arguments"]
                accepted[thread].append((args["addr"], args["data"]))
            if "idempotency_key" in call:  # the first send runs, the second is its replay
                assert obs.ok and obs.replay is (raw == previous), (raw, obs)
            previous = raw
    # every accepted write was applied exactly once, in its thread's order; nothing else was
    applied = result.device.applied
    for thread, writes in accepted.items():
        assert [(a, d) for t, a, d in applied if t == thread] == writes
    assert len(applied) == sum(len(w) for w in accepted.values())
    # the final registers are those of the serial order the device applied
    serial = RegisterFile()
    for _, addr, data in applied:
        serial.write(addr, data)
    assert result.device.snapshot() == serial.snapshot()
    # the audit holds exactly one record per call, with the verdict the caller got
    records = read_audit(result.audit_path)
    assert len(records) == sum(len(calls) for calls in result.calls.values())
    assert Counter(r.code for r in records) == codes
    assert sum(r.replay for r in records) == sum(
        obs.replay for calls in result.calls.values() for _, obs in calls)
