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


def _write(call_id: str, addr: int, data: int, key: str | None = None) -> str:
    call: dict[str, object] = {"tool": "write_register", "arguments": {"addr": addr, "data": data},
                               "id": call_id}
    if key is not None:
        call["idempotency_key"] = key
    return json.dumps(call)


def script(thread: int, calls: int) -> list[str]:
    """The raw calls of one thread: writes (some keyed, some keys sent twice), reads, and
    calls refused at validate (range) and at authorize (read-only register). Every call has
    its own correlation id, ``t<thread>-<index>``, which its audit record keeps."""
    out = []
    for i in range(calls):
        kind, call_id = i % 10, f"t{thread}-{i}"
        addr, data = 1 + (i * 7 + thread) % 15, (i * 13 + thread * 31) % 256
        if kind == 0:
            out.append(json.dumps({"tool": "read_register", "arguments": {"addr": addr},
                                   "id": call_id}))
        elif kind == 1:
            out.append(_write(call_id, 16, data))  # range-addr
        elif kind == 2:
            out.append(_write(call_id, 0, data))  # read-only-register
        elif kind == 3:
            out.append(_write(call_id, addr, data, key=f"k{thread}-{i}"))
        elif kind == 4:
            key = json.loads(out[-1])["idempotency_key"]  # the same keyed write again: a replay
            addr, data = (json.loads(out[-1])["arguments"][name] for name in ("addr", "data"))
            out.append(_write(call_id, addr, data, key=key))
        else:
            out.append(_write(call_id, addr, data))
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
    """Assert the load stayed correct:

    * no exception escaped, and every call got an observation;
    * every accepted write was applied exactly once, in its thread's order, and nothing else
      was applied (no refusal, no replay): the device's own log against the callers' view;
    * the final value of each register is one a serial order of the accepted writes can leave:
      the last accepted write to it of some thread (in that thread's program order), or its
      reset value when no thread wrote it. A write applied twice, late, or lost breaks this;
    * the audit holds exactly one record per call, found by the call's own correlation id,
      with the verdict that call got; a keyed write's first send ran and its second is a
      replay.
    """
    assert result.errors == [], result.errors
    sent: dict[str, tuple[str, Observation]] = {}
    accepted: dict[int, list[tuple[int, int]]] = {}
    for thread, calls in result.calls.items():
        accepted[thread] = []
        for raw, obs in calls:
            call = json.loads(raw)
            assert obs.id == call["id"], (raw, obs)
            sent[call["id"]] = (raw, obs)
            if call["tool"] == "write_register" and obs.ok and not obs.replay:
                args = call["arguments"]
                accepted[thread].append((args["addr"], args["data"]))
            if "idempotency_key" in call:  # the first send runs, the second is its replay
                first = int(call["id"].rsplit("-", 1)[1]) % 10 == 3
                assert obs.ok and obs.replay is not first, (raw, obs)
    # every accepted write applied exactly once, in its thread's order; nothing else
    applied = result.device.applied
    for thread, writes in accepted.items():
        assert [(a, d) for t, a, d in applied if t == thread] == writes
    assert len(applied) == sum(len(w) for w in accepted.values())
    # each final value is the last write to that register of some thread, or untouched
    final = result.device.snapshot()
    for addr in range(len(final)):
        last = {[d for a, d in writes if a == addr][-1]
                for writes in accepted.values() if any(a == addr for a, _ in writes)}
        assert final[addr] in (last or {0}), (addr, final[addr], last)
    # one record per call, matched by its correlation id, with the verdict the caller got
    records = [r for r in read_audit(result.audit_path) if r.event == "call"]
    by_id = Counter(r.call_id for r in records)
    assert set(by_id) == set(sent) and set(by_id.values()) == {1}, by_id.most_common(3)
    for record in records:
        assert record.call_id is not None
        raw, obs = sent[record.call_id]
        assert (record.ok, record.code, record.replay, record.raw) == (
            obs.ok, obs.code, obs.replay, raw.encode()), record
