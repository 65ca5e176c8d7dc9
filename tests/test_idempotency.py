"""Idempotency keys: a write sent again with its key runs once; keys survive a restart."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, CountingDevice
from regdev import (
    DeviceBusy,
    DeviceIdentity,
    DeviceRefused,
    DeviceTimeout,
    Gate,
    Observation,
    Policy,
    Refusal,
    RegisterFile,
    RegisterPolicy,
    TransportError,
    open_audit,
    parse,
    read_audit,
)
from regdev.devices._rdl import load_map
from regdev.devices._transaction import UNKNOWN


def keyed_write(key: object, addr: int = 3, data: int = 7, **extra: object) -> str:
    return json.dumps({"tool": "write_register", "arguments": {"addr": addr, "data": data},
                       "idempotency_key": key, **extra})


@pytest.fixture
def audited(store: Path | str) -> Iterator[Gate]:
    """A gate with an audit log (which holds the keys) over a counting device, on each
    store (SQLite, PostgreSQL)."""
    with Gate(CountingDevice(), audit=open_audit(store)) as gate:
        yield gate


def accesses(gate: Gate) -> int:
    device = gate.device
    assert isinstance(device, CountingDevice)
    return device.accesses


def test_second_call_with_the_key_is_a_replay_and_does_not_run(audited: Gate) -> None:
    """Same key, same arguments: the first observation comes back marked, nothing runs."""
    first = audited.handle(keyed_write("k1", id="a"))
    second = audited.handle(keyed_write("k1", id="b"))
    assert first.to_dict() == {"ok": True, "tool": "write_register",
                               "result": {"addr": 3, "data": 7}, "id": "a"}
    assert second.to_dict() == {"ok": True, "tool": "write_register",
                                "result": {"addr": 3, "data": 7}, "id": "b", "replay": True}
    assert accesses(audited) == 1


def test_same_key_with_other_arguments_is_refused(audited: Gate) -> None:
    """A key reused for a different call is idempotency-conflict, final, and never runs."""
    audited.handle(keyed_write("k1", data=7))
    obs = audited.handle(keyed_write("k1", data=8))
    assert (obs.stage, obs.code) == ("authorize", "idempotency-conflict")
    assert obs.refusal is not None and obs.refusal.retryable is False
    assert obs.message == ('idempotency key "k1" was already used for a different call; '
                           "send each distinct call with a new key")
    assert accesses(audited) == 1 and audited.device.snapshot()[3] == 7


def test_equal_arguments_in_another_form_are_the_same_call(audited: Gate) -> None:
    """Fingerprints use the validated arguments: 7.0 and key order do not matter."""
    audited.handle(keyed_write("k1", data=7))
    raw = '{"tool": "write_register", "arguments": {"data": 7.0, "addr": 3}, ' \
          '"idempotency_key": "k1"}'
    assert audited.handle(raw).replay is True
    assert accesses(audited) == 1


MCP_CALL = ('{"name": "write_register", "arguments": {"addr": 3, "data": 7}, '
            '"_meta": {"idempotency_key": "m1"}}')
OPENAI_CALL = ('{"id": "call_abc", "type": "function", "function": {"name": '
               '"write_register", "arguments": "{\\"addr\\": 3, \\"data\\": 7}"}}')
ANTHROPIC_CALL = ('{"type": "tool_use", "id": "toolu_01", "name": "write_register", '
                  '"input": {"addr": 3, "data": 7}}')
OPT_IN = Policy(tool_call_ids_as_keys=True)


def test_mcp_carries_an_explicit_key(audited: Gate) -> None:
    """MCP: _meta.idempotency_key."""
    assert audited.handle(MCP_CALL, dialect="mcp").replay is False
    assert audited.handle(MCP_CALL, dialect="mcp").replay is True
    assert accesses(audited) == 1


@pytest.mark.parametrize(("dialect", "raw", "key"), [("openai", OPENAI_CALL, "openai:call_abc"),
                                                     ("anthropic", ANTHROPIC_CALL,
                                                      "anthropic:toolu_01")])
def test_tool_call_ids_are_keys_only_when_the_policy_says_so(
        tmp_path: Path, dialect: str, raw: str, key: str) -> None:
    """OpenAI and Anthropic ids are keys only with tool_call_ids_as_keys, prefixed with the
    dialect; without it each call runs."""
    with Gate(CountingDevice(), audit=open_audit(tmp_path / "off.db")) as plain:
        assert [plain.handle(raw, dialect=dialect).replay for _ in range(2)] == [False, False]
        assert accesses(plain) == 2
    with Gate(CountingDevice(), audit=open_audit(tmp_path / "on.db"), policy=OPT_IN) as opted:
        assert [opted.handle(raw, dialect=dialect).replay for _ in range(2)] == [False, True]
        assert accesses(opted) == 1
    assert [r.idempotency_key for r in read_audit(tmp_path / "on.db")] == [key, key]


def test_a_derived_key_never_meets_an_explicit_one(store: Path | str) -> None:
    """An explicit key may not take a provider prefix, so "openai:call_abc" sent by hand can
    neither replay nor conflict with the OpenAI call whose id is call_abc."""
    with Gate(CountingDevice(), audit=open_audit(store), policy=OPT_IN) as gate:
        assert gate.handle(OPENAI_CALL, dialect="openai").ok
        forged = gate.handle(keyed_write("openai:call_abc"))
        assert (forged.stage, forged.code) == ("validate", "bad-idempotency-key")
        assert "may not start with openai: or anthropic:" in (forged.message or "")
        mcp = MCP_CALL.replace('"m1"', '"anthropic:x"')
        assert gate.handle(mcp, dialect="mcp").code == "bad-idempotency-key"
        assert accesses(gate) == 1


def test_parse_extracts_the_key_per_dialect() -> None:
    """The key is read from each dialect's envelope, never from the arguments."""
    canonical = parse('{"tool": "t", "arguments": {"idempotency_key": "x"}}')
    mcp = parse('{"name": "t", "arguments": {}, "_meta": {"idempotency_key": "m"}}', "mcp")
    openai = parse('{"id": "call_1", "type": "function", "function": {"name": "t", '
                   '"arguments": "{}"}}', "openai")
    assert [getattr(p, "idempotency_key", "?") for p in (canonical, mcp, openai)] == [
        None, "m", "call_1"]


@pytest.mark.parametrize(
    ("raw", "dialect", "got"),
    [
        (keyed_write(5), "canonical", "got an integer"),
        (keyed_write(""), "canonical", "got 0 characters"),
        (keyed_write("k" * 257), "canonical", "got 257 characters"),
        ('{"name": "write_register", "arguments": {"addr": 3, "data": 7}, '
         '"_meta": {"idempotency_key": ["k"]}}', "mcp", "got an array"),
        ('{"tool": "read_register", "arguments": {"addr": 3}, "idempotency_key": ""}',
         "canonical", "got 0 characters"),  # checked with the envelope, for reads too
    ],
)
def test_bad_key_is_refused_before_anything_runs(audited: Gate, raw: str, dialect: str,
                                                 got: str) -> None:
    """A key that is not a 1..256 character string is bad-idempotency-key (retryable)."""
    obs = audited.handle(raw, dialect=dialect)
    assert (obs.stage, obs.code) == ("validate", "bad-idempotency-key")
    assert got in (obs.message or "") and obs.refusal is not None and obs.refusal.retryable
    assert accesses(audited) == 0


def test_keys_belong_to_a_session(store: Path | str) -> None:
    """The same key in two sessions names two calls."""
    gate = Gate(CountingDevice(), audit=open_audit(store),
                policy=Policy.from_dict({"sessions": {"a": {}, "b": {}}}))
    assert not gate.handle(keyed_write("k"), session=gate.session("a")).replay
    assert not gate.handle(keyed_write("k"), session=gate.session("b")).replay
    assert gate.handle(keyed_write("k"), session=gate.session("a")).replay
    assert accesses(gate) == 2
    gate.close()


def test_reads_ignore_keys(audited: Gate) -> None:
    """A read runs every time: it has no effect to repeat, and must see fresh values."""
    raw = '{"tool": "read_register", "arguments": {"addr": 3}, "idempotency_key": "r"}'
    assert audited.handle(raw).result == {"addr": 3, "data": 0}
    audited.handle(keyed_write("w", data=9))
    again = audited.handle(raw)
    assert again.result == {"addr": 3, "data": 9} and again.replay is False


def test_without_an_audit_log_keys_are_ignored() -> None:
    """Keys live in the audit database: a gate without one runs every call."""
    device = CountingDevice()
    gate = Gate(device)
    gate.handle(keyed_write("k"))
    assert gate.handle(keyed_write("k")).replay is False
    assert device.accesses == 2


def test_a_refused_call_does_not_spend_its_key(store: Path | str) -> None:
    """Refused before the device (approval): the key stays free for the corrected attempt."""
    approve = {"answer": False}
    policy = Policy(registers=RegisterPolicy(protected=frozenset({15})),
                    approve=lambda request: approve["answer"])
    gate = Gate(CountingDevice(), audit=open_audit(store), policy=policy)
    assert gate.handle(keyed_write("k", addr=15)).code == "approval-denied"
    approve["answer"] = True
    retried = gate.handle(keyed_write("k", addr=15))
    assert retried.ok and not retried.replay and accesses(gate) == 1
    gate.close()


class FlakyDevice(RegisterFile):
    """Fails the next write with a chosen error, then works."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_next: Exception | None = None

    def write(self, addr: int, data: int) -> int:
        error, self.fail_next = self.fail_next, None
        if error is not None:
            raise error
        return super().write(addr, data)


def test_timeout_frees_the_key_and_device_error_is_stored(store: Path | str) -> None:
    """device-timeout has no definite outcome: retry runs. device-error is kept and replayed."""
    device = FlakyDevice()
    gate = Gate(device, audit=open_audit(store))
    device.fail_next = DeviceTimeout("no answer after 0.1 s")
    assert gate.handle(keyed_write("t")).code == "device-timeout"
    assert gate.handle(keyed_write("t")).ok
    device.fail_next = DeviceRefused("ERR BUSY", code="BUSY")
    first = gate.handle(keyed_write("e"))
    again = gate.handle(keyed_write("e"))
    assert (first.code, again.code, again.replay) == ("device-error", "device-error", True)
    assert device.write_count == 1
    gate.close()


def test_keys_survive_a_restart(store: Path | str) -> None:
    """A new gate on the same audit database and the same registers (the same id, in the
    same reset epoch) replays the keys of the old one."""
    path = store
    with Gate(CountingDevice(state_id="bench-1", epoch="E1"), audit=open_audit(path)) as first:
        first.handle(keyed_write("k1", data=1))
        first.handle(keyed_write("k2", data=2))
    with Gate(CountingDevice(state_id="bench-1", epoch="E1"), audit=open_audit(path)) as second:
        assert second.handle(keyed_write("k1", data=1)).replay is True
        assert second.handle(keyed_write("k2", data=3)).code == "idempotency-conflict"
        assert accesses(second) == 0
        assert len(second.audit.idempotency) == 2  # type: ignore[union-attr]


def test_a_key_is_never_replayed_to_a_device_that_did_not_see_the_write(
        store: Path | str) -> None:
    """A fresh in-process register file is other registers: the keyed write runs on it, and
    its key there is new (the bug: a replay reported a write the device never received)."""
    path = store
    with Gate(CountingDevice(), audit=open_audit(path)) as first:
        assert first.handle(keyed_write("k1", data=9)).ok
    fresh = CountingDevice()
    with Gate(fresh, audit=open_audit(path)) as second:
        again = second.handle(keyed_write("k1", data=9))
        other = second.handle(keyed_write("k1", data=9))
    assert (again.ok, again.replay, other.replay) == (True, False, True)
    assert fresh.accesses == 1 and fresh.snapshot()[3] == 9
    assert CountingDevice().state_id() != fresh.state_id()


class GatedDevice(RegisterFile):
    """Writes wait for a signal, so a call can be caught running."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.go = threading.Event()

    def write(self, addr: int, data: int) -> int:
        self.entered.set()
        self.go.wait(10)
        return super().write(addr, data)


def test_a_key_still_running_is_idempotency_in_progress(store: Path | str) -> None:
    """While the first call with a key runs, a second is told to come back, and is not run."""
    device = GatedDevice()
    gate = Gate(device, audit=open_audit(store))
    results = []
    worker = threading.Thread(target=lambda: results.append(gate.handle(keyed_write("k"))))
    worker.start()
    assert device.entered.wait(10)
    second = gate.handle(keyed_write("k"))
    device.go.set()
    worker.join()
    assert (second.stage, second.code) == ("authorize", "idempotency-in-progress")
    assert second.refusal is not None and second.refusal.retryable
    assert results[0].ok and device.write_count == 1
    assert gate.handle(keyed_write("k")).replay is True
    gate.close()


def test_handle_call_takes_a_key_and_checks_it(audited: Gate) -> None:
    """Decoded calls (the MCP server's path) carry their key beside the call."""
    call = {"tool": "write_register", "arguments": {"addr": 3, "data": 7}}
    assert audited.handle_call(call, idempotency_key="h").replay is False
    assert audited.handle_call(call, idempotency_key="h", call_id="c2").to_dict() == {
        "ok": True, "tool": "write_register", "result": {"addr": 3, "data": 7}, "id": "c2",
        "replay": True}
    bad = audited.handle_call(call, idempotency_key=5)
    assert (bad.stage, bad.code) == ("validate", "bad-idempotency-key")
    assert Gate().handle_call(call, idempotency_key="").code == "bad-idempotency-key"
    assert accesses(audited) == 1


def test_a_reset_through_the_gate_ends_the_keys(store: Path | str) -> None:
    """After reset_device, a key used before it runs the write again (the device holds the
    value, not its reset value); the key of that new run is replayed as usual."""
    gate = Gate(CountingDevice(state_id="bench-1"), audit=open_audit(store))
    assert gate.handle(keyed_write("k", data=7)).ok
    gate.reset_device()
    assert gate.device.snapshot()[3] == 0
    again = gate.handle(keyed_write("k", data=7))
    assert (again.ok, again.replay, again.result) == (True, False, {"addr": 3, "data": 7})
    assert gate.device.snapshot()[3] == 7 and accesses(gate) == 2
    assert gate.handle(keyed_write("k", data=7)).replay is True and accesses(gate) == 2
    gate.close()


def test_a_reset_ends_the_keys_after_a_restart(tmp_path: Path) -> None:
    """After a reset the device is in a new epoch: a new process on the same registers runs
    the old key again, and replays the key stored after the reset. The reset is in the
    database too, ending the old epoch's keys on the host's side."""
    path = tmp_path / "a.db"
    with Gate(CountingDevice(state_id="serial:bench", epoch="E1"),
              audit=open_audit(path)) as first:
        assert first.handle(keyed_write("k", data=9)).ok
        first.reset_device()
        after = first.device.identity().epoch
    assert after is not None and after != "E1"
    device = CountingDevice(state_id="serial:bench", epoch=after)  # after the reset: all 0
    with Gate(device, audit=open_audit(path)) as second:
        assert second.audit is not None and len(second.audit.idempotency) == 0
        again = second.handle(keyed_write("k", data=9))
    assert (again.ok, again.replay) == (True, False) and device.snapshot()[3] == 9
    with Gate(CountingDevice(state_id="serial:bench", epoch=after),
              audit=open_audit(path)) as third:
        assert third.handle(keyed_write("k", data=9)).replay is True and accesses(third) == 0
    conn = sqlite3.connect(path)
    keys = conn.execute("SELECT device, epoch FROM idempotency_keys ORDER BY time").fetchall()
    resets = conn.execute("SELECT device, epoch FROM device_resets").fetchall()
    conn.close()
    assert keys == [("serial:bench@E1", ""), (f"serial:bench@{after}", "")]
    assert [device for device, _ in resets] == ["serial:bench@E1"]
    assert len(resets[0][1]) == 32


def test_other_devices_keep_their_keys_across_a_reset(store: Path | str) -> None:
    """A reset ends only the keys of the device reset."""
    audit = open_audit(store)
    audit.record_reset("serial:other")
    with Gate(CountingDevice(state_id="bench-1"), audit=audit) as gate:
        assert gate.handle(keyed_write("k")).ok
        audit.record_reset("serial:other")
        assert gate.handle(keyed_write("k")).replay is True and accesses(gate) == 1


def test_a_key_completed_after_a_reset_is_not_stored(tmp_path: Path) -> None:
    """A write reserved before a reset and done after it is not replayed: the reset may have
    landed before or after it, so its outcome does not describe the registers now."""
    path = tmp_path / "a.db"
    device = GatedDevice()
    gate = Gate(device, audit=open_audit(path))
    results = []
    worker = threading.Thread(target=lambda: results.append(gate.handle(keyed_write("k"))))
    worker.start()
    assert device.entered.wait(10)
    gate.record_reset()
    device.go.set()
    worker.join()
    assert results[0].ok and gate.audit is not None and len(gate.audit.idempotency) == 0
    again = gate.handle(keyed_write("k"))
    assert (again.ok, again.replay, device.write_count) == (True, False, 2)
    gate.close()
    same = RegisterFile(state_id=device.state_id(), epoch=device.identity().epoch)
    with Gate(same, audit=open_audit(path)) as reopened:
        assert reopened.audit is not None and len(reopened.audit.idempotency) == 1
        assert reopened.handle(keyed_write("k")).replay is True


class ResetFailing(RegisterFile):
    """reset() raises a chosen error, after resetting the registers or not."""

    def __init__(self, error: Exception, *, runs: bool) -> None:
        super().__init__(state_id="serial:flaky")
        self.error, self.runs = error, runs

    def reset(self) -> None:
        if self.runs:
            super().reset()
        raise self.error


@pytest.mark.parametrize(("error", "runs", "ended"), [
    (DeviceTimeout("no answer after 0.5 s"), True, True),
    (DeviceRefused("ERR RESET", code="RESET"), False, False),
    (DeviceBusy("ERR BUSY", code="BUSY"), False, False),
    (TransportError("port closed"), False, False),
])
def test_a_reset_with_an_unknown_outcome_ends_the_keys(
        store: Path | str, error: Exception, runs: bool, ended: bool) -> None:
    """A timed-out reset may have run: the keys end. One surely not executed keeps them."""
    device = ResetFailing(error, runs=runs)
    with Gate(device, audit=open_audit(store)) as gate:
        assert gate.handle(keyed_write("k", data=5)).ok
        with pytest.raises(type(error)):
            gate.reset_device()
        again = gate.handle(keyed_write("k", data=5))
        assert again.replay is not ended and device.snapshot()[3] == 5
        assert device.write_count == (2 if ended else 1)


def test_a_read_in_a_new_epoch_ends_the_loading_of_the_old_epochs_keys(tmp_path: Path) -> None:
    """A device restarted since its keyed writes, heard from since only by calls without a
    key (a read, a plain write): its new epoch is in the log, so reopening the audit log
    loads none of the old epoch's keys, which can never match again."""
    path = tmp_path / "a.db"
    with Gate(CountingDevice(state_id="bench-1", epoch="E1"), audit=open_audit(path)) as first:
        assert first.handle(keyed_write("old", data=1)).ok
    with Gate(CountingDevice(state_id="bench-1", epoch="E2"), audit=open_audit(path)) as second:
        assert second.handle('{"tool": "read_register", "arguments": {"addr": 3}}').ok
    with open_audit(path) as audit:
        assert audit.idempotency.get(("bench-1@E1", "default", "old")) is None
        assert len(audit.idempotency) == 0


class NoEpoch(RegisterFile):
    """A device that says its id and cannot say its reset epoch."""

    def identity(self, *, refresh: bool = False) -> DeviceIdentity:
        return DeviceIdentity("serial:plain", None)

    def known_identity(self) -> DeviceIdentity:
        return DeviceIdentity("serial:plain", None)


def test_keys_of_a_devices_earlier_epochs_are_not_loaded(tmp_path: Path) -> None:
    """A device restarted (a new epoch, as a power cycle gives) can never say its old epoch
    again: reopening the audit log loads the keys of its last epoch only, and those of
    another device and of a device that cannot say its epoch (``ID@``: still conflicts);
    the last epoch's keys replay, the old epoch's key is a new key there."""
    path = tmp_path / "a.db"
    with Gate(CountingDevice(state_id="bench-1", epoch="E1"), audit=open_audit(path)) as first:
        assert first.handle(keyed_write("old-1", data=1)).ok
        assert first.handle(keyed_write("old-2", data=2)).ok
    with Gate(CountingDevice(state_id="bench-2", epoch="F1"), audit=open_audit(path)) as other:
        assert other.handle(keyed_write("other", data=4)).ok
    with Gate(CountingDevice(state_id="bench-1", epoch="E2"), audit=open_audit(path)) as second:
        assert second.handle(keyed_write("new", data=3)).ok
    with Gate(NoEpoch(), audit=open_audit(path)) as no_epoch:
        assert no_epoch.handle(keyed_write("plain", data=5)).ok
    with open_audit(path) as audit:
        loaded = audit.idempotency
        assert len(loaded) == 3
        assert loaded.get(("bench-1@E2", "default", "new")) is not None
        assert loaded.get(("bench-2@F1", "default", "other")) is not None
        assert loaded.get(("bench-1@E1", "default", "old-1")) is None
        assert loaded.get(("serial:plain@", "default", "plain")) is not None
    device = CountingDevice(state_id="bench-1", epoch="E2")
    with Gate(device, audit=open_audit(path)) as third:
        assert third.handle(keyed_write("new", data=3)).replay is True
        assert third.handle(keyed_write("old-1", data=9)).replay is False  # runs: a new key
        assert device.snapshot()[3] == 9 and device.accesses == 1


class LostReply(RegisterFile):
    """The sensor map's registers; every write is applied, then its reply is lost."""

    def __init__(self) -> None:
        super().__init__(regmap=load_map(EXAMPLES / "sensor.rdl"))
        self.writes = 0

    def _lost(self, what: str) -> DeviceTimeout:
        """The timeout a wire device raises (the transaction engine's words and advice)."""
        self.writes += 1
        return DeviceTimeout(f"no answer after 0.5 s; {UNKNOWN[what]}")

    def write(self, addr: int, data: int) -> int:
        super().write(addr, data)
        raise self._lost("write")

    def write_masked(self, addr: int, mask: int, data: int) -> int:
        super().write_masked(addr, mask, data)
        raise self._lost("masked write")

    def write_block(self, addr: int, data: Any) -> list[int]:
        super().write_block(addr, data)
        raise self._lost("block write")


def _keyed(tool: str, arguments: dict[str, Any], key: str = "k") -> str:
    return json.dumps({"tool": tool, "arguments": arguments, "idempotency_key": key})


@pytest.mark.parametrize(("tool", "arguments"), [
    ("write_register", {"addr": 2, "data": 0x10}),
    ("write_field", {"field": "STATUS.POR", "value": 1}),
    ("write_registers", {"addr": 1, "data": [0, 0x10]}),
])
def test_a_lost_reply_of_a_write_1_to_clear_write_leaves_its_outcome_unknown(
        store: Path | str, tool: str, arguments: dict[str, Any]) -> None:
    """A write of 1 to STATUS's write-1-to-clear POR bit whose reply is lost: outcome-unknown
    (not retryable), its key held; a retry with the key is not run, and says what resolves
    it, once (the timeout's own advice is not repeated); the records say so; a new key runs
    it."""
    device = LostReply()
    with Gate(device, audit=open_audit(store)) as gate:
        first = gate.handle(_keyed(tool, arguments))
        again = gate.handle(_keyed(tool, arguments))
        fresh = gate.handle(_keyed(tool, arguments, key="k2"))
    assert (first.code, first.to_dict()["retryable"], again.code, again.replay) == (
        "outcome-unknown", False, "outcome-unknown", True)
    assert first.message == again.message == (
        "the device did not answer in time: no answer after 0.5 s; the write may or may not "
        "have run, and it is not safe to send twice (it writes 1 to write-1-to-clear bits of "
        "register STATUS (0x02)): read the register back to learn whether it ran; a retry "
        "with this idempotency key gets this answer again and does not run (send the call "
        "with a new key if the read-back says it must run)")
    assert fresh.code == "outcome-unknown" and device.writes == 2
    codes = [(r.idempotency_key, r.code, r.replay) for r in read_audit(store)]
    assert codes == [("k", "outcome-unknown", False), ("k", "outcome-unknown", True),
                     ("k2", "outcome-unknown", False)]


@pytest.mark.parametrize(("tool", "arguments"), [
    ("write_register", {"addr": 4, "data": 5}),  # DATA[0]: plain read-write
    ("write_register", {"addr": 2, "data": 0}),  # STATUS, no 1 written to a clear bit
    ("write_field", {"field": "CTRL.MODE", "value": "ONESHOT"}),
])
def test_a_lost_reply_of_a_plain_write_frees_its_key(
        store: Path | str, tool: str, arguments: dict[str, Any]) -> None:
    """A write harmless to repeat keeps today's behaviour: device-timeout, and the retry with
    the same key runs."""
    device = LostReply()
    with Gate(device, audit=open_audit(store)) as gate:
        first = gate.handle(_keyed(tool, arguments))
        again = gate.handle(_keyed(tool, arguments))
    assert (first.code, again.code, again.replay, device.writes) == (
        "device-timeout", "device-timeout", False, 2)


def test_a_keyed_write_runs_once_across_two_audit_logs_of_one_postgresql_store(
        postgres: Any) -> None:
    """Two writers (processes stand-ins) on one PostgreSQL store share the keys: the second's
    retry is a replay, and a different call with the key is a conflict."""
    dsn = postgres.fresh_dsn()
    device = CountingDevice(state_id="bench-1", epoch="E1")
    with Gate(device, audit=open_audit(dsn)) as first, \
            Gate(device, audit=open_audit(dsn)) as second:
        assert first.handle(keyed_write("k1", data=5)).ok
        again = second.handle(keyed_write("k1", data=5))
        assert (again.ok, again.replay) == (True, True)
        assert second.handle(keyed_write("k1", data=6)).code == "idempotency-conflict"
        assert accesses(first) == 1


def test_a_key_running_in_one_writer_is_in_progress_in_another(postgres: Any) -> None:
    """A key reserved by one writer of a PostgreSQL store is idempotency-in-progress in
    another until its record is committed, then a replay there."""
    dsn = postgres.fresh_dsn()
    with open_audit(dsn) as one, open_audit(dsn) as other:
        slot = ("bench-1@E1", "default", "k1")
        assert one.begin_key(slot, b"p" * 32) is None
        found = other.begin_key(slot, b"p" * 32)
        assert isinstance(found, Refusal) and found.code == "idempotency-in-progress"
        found = other.begin_key(slot, b"q" * 32)
        assert isinstance(found, Refusal) and found.code == "idempotency-conflict"
        stored = '{"ok": true, "tool": "write_register", "result": {"addr": 3, "data": 7}}'
        row = one.key_row(slot, b"p" * 32, stored, 1.0)
        record = one.row(time=1.0, session="default", dialect="canonical", raw=b"{}",
                         observation=Observation("write_register", {"addr": 3, "data": 7}),
                         tool="write_register", arguments='{"addr":3,"data":7}')
        one.append(record, row, durable=True)
        one.complete_key(slot, b"p" * 32, stored)
        replayed = other.begin_key(slot, b"p" * 32)
        assert isinstance(replayed, Observation) and replayed.replay
        assert replayed.result == {"addr": 3, "data": 7}
