"""A crash mid-burst: every write acknowledged before SIGKILL is in the audit log and in the
idempotency store, and sending the burst again with the same keys runs nothing twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import CountingDevice
from regdev import AuditLog, Gate, read_audit

BURST = 20000  # far more than the child gets through before it is killed
KILL_AFTER = 300  # acknowledgements read before the SIGKILL

#: The registers the child and the restarted gate share (a device whose state outlives the
#: process, as a serial device's does, not reset meanwhile): keys are scoped to its id and
#: reset epoch.
STATE_ID = "crash-test-device"
EPOCH = "C0FFEE"

CHILD = """
import sys
from regdev import AuditLog, Gate, RegisterFile
from test_crash import EPOCH, STATE_ID, burst
gate = Gate(RegisterFile(state_id=STATE_ID, epoch=EPOCH), audit=AuditLog(sys.argv[1]))
for key, raw in burst():
    if gate.handle(raw).ok:
        sys.stdout.write(key + "\\n")
        sys.stdout.flush()  # the acknowledgement reaches the caller only now
"""


def burst() -> list[tuple[str, str]]:
    """The burst: ``BURST`` keyed writes, as ``(key, raw call)``."""
    return [(f"w{i}", json.dumps({"tool": "write_register",
                                  "arguments": {"addr": i % 16, "data": i % 256},
                                  "idempotency_key": f"w{i}"}))
            for i in range(BURST)]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_acknowledged_writes_survive_sigkill(tmp_path: Path) -> None:
    """Kill -9 mid-burst, restart, check the log and the keys, and replay the burst."""
    path = tmp_path / "audit.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE,
                             text=True, env=env)
    assert child.stdout is not None
    acked = [child.stdout.readline().strip() for _ in range(KILL_AFTER)]
    child.send_signal(signal.SIGKILL)
    acked += [line.strip() for line in child.stdout]  # acknowledged before the kill landed
    child.wait()
    assert child.returncode == -signal.SIGKILL
    assert "" not in acked and len(acked) < BURST, "the child was not killed mid-burst"

    # after the restart: every acknowledged write is recorded, and its key is stored
    audit = AuditLog(path)
    recorded = {r.idempotency_key for r in read_audit(path, code="ok") if not r.replay}
    assert set(acked) <= recorded
    for key in acked:
        assert audit.idempotency.get((f"{STATE_ID}@{EPOCH}", "default", key)) is not None, key

    # the same burst again: the acknowledged keys are replays, and nothing runs twice
    device = CountingDevice(state_id=STATE_ID, epoch=EPOCH)
    with Gate(device, audit=audit) as gate:
        answers = {key: gate.handle(raw) for key, raw in burst()[: len(acked) + 100]}
    assert all(answers[key].replay for key in acked)
    assert device.accesses == sum(not obs.replay for obs in answers.values())
    runs = Counter(r.idempotency_key for r in read_audit(path, code="ok") if not r.replay)
    assert set(runs.values()) == {1}, "a key ran twice"
    assert set(runs) == set(answers) | recorded
