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


#: A child whose device writes register 3, says so on stdout, and then never answers: the
#: kill lands after the device was written and before the call's record could be committed.
STUCK_CHILD = """
import sys, threading
from regdev import AuditLog, Gate, RegisterFile
class Stuck(RegisterFile):
    def write(self, addr, data):
        super().write(addr, data)
        sys.stdout.write("written\\n")
        sys.stdout.flush()
        threading.Event().wait()  # the answer never comes back
gate = Gate(Stuck(), audit=AuditLog(sys.argv[1]))
gate.handle(sys.argv[2])
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
@pytest.mark.parametrize("raw", [
    '{"tool": "write_register", "arguments": {"addr": 3, "data": 7}}',  # the audited path
    '{"tool": "write_register", "arguments": {"addr": 3, "data": 7}, "idempotency_key": "k"}',
])
def test_a_write_killed_before_its_record_leaves_an_intent_marked_unknown(
        tmp_path: Path, raw: str) -> None:
    """SIGKILL after the device took the write and before its record was committed: the log
    holds the write's intent, code outcome-unknown, with its tool and arguments."""
    path = tmp_path / "audit.db"
    child = subprocess.Popen([sys.executable, "-c", STUCK_CHILD, str(path), raw],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline() == "written\n"
    child.send_signal(signal.SIGKILL)
    child.wait()
    (record,) = read_audit(path)
    assert (record.event, record.ok, record.stage, record.code, record.tool,
            json.loads(record.arguments or "null")) == (
        "intent", False, "execute", "outcome-unknown", "write_register",
        {"addr": 3, "data": 7})
    assert record.idempotency_key == ("k" if "idempotency_key" in raw else None)
    assert record.intent is not None and record.message is not None
    assert "may or may not have run" in record.message


def test_a_written_call_shows_its_record_not_its_intent(tmp_path: Path) -> None:
    """A write that completed: read_audit gives its call record only, naming the intent that
    was committed before it was sent; a read leaves no intent."""
    path = tmp_path / "audit.db"
    with Gate(audit=AuditLog(path)) as gate:
        assert gate.handle('{"tool": "write_register", "arguments": {"addr": 3, "data": 7}}').ok
        assert gate.handle('{"tool": "read_register", "arguments": {"addr": 3}}').ok
    written, read = read_audit(path)
    assert (written.event, written.ok, read.event, read.intent) == ("call", True, "call", None)
    assert written.intent is not None and len(written.intent) == 16
    import sqlite3  # noqa: PLC0415

    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT event, intent FROM calls ORDER BY id").fetchall()
    assert rows == [("intent", written.intent), ("call", written.intent), ("call", None)]
