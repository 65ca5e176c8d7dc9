"""Who a device is and when it last started over.

A replayed idempotency key never claims a write is in effect on a device that was reset since,
whatever path the reset took: another spelling of the port's URL, another process, a power
cycle, a reset that bypassed the gate. Keys are scoped by the device's id and reset epoch,
which the device says (the identify text's ``id=ID epoch=EPOCH``, docs/protocol.md); a device
that cannot say its epoch gets no replays. Each audit record names the device the call reached.
"""

from __future__ import annotations

import json
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import regdev_firmware_sim as sim
from conftest import ROOT, CountingDevice
from regdev import (
    AuditLog,
    Device,
    DeviceBusy,
    DeviceIdentity,
    Gate,
    LocalProtocolError,
    RegisterFile,
    SerialDevice,
    TimeoutDevice,
    TransportError,
    read_audit,
)
from regdev.audit._idempotency import key_scope
from regdev.cli._main import main
from regdev.devices import _protocol as wire
from regdev.devices._device import new_epoch
from support.firmware import sim_process
from support.strategies import extended_identify_texts, identify_descriptions, wire_ids

VALUE = 0xC8


def keyed_write(key: str = "op-1", data: int = VALUE, addr: int = 3) -> str:
    return json.dumps({"tool": "write_register", "arguments": {"addr": addr, "data": data},
                       "idempotency_key": key})


# --- the identify text's extension ----------------------------------------------------------------


@given(identify_descriptions, wire_ids, wire_ids)
def test_the_extension_reads_back_what_was_written(description: str, device_id: str,
                                                   epoch: str) -> None:
    """Any description with any id and epoch: the text splits back into the three parts, and
    its frame decodes with them (when it fits in 48 bytes; otherwise it is refused)."""
    try:
        text = wire.identify_text(description, device_id, epoch)
    except LocalProtocolError as error:
        assert len(f"{description} id={device_id} epoch={epoch}") > wire.MAX_TEXT
        assert "shorten the description" in str(error)
        return
    assert wire.split_identify_text(text) == (description, device_id, epoch)
    reply = wire.decode(wire.encode(wire.IdentifyReply(9, text)))
    assert isinstance(reply, wire.IdentifyReply)
    assert (reply.text, reply.device_id, reply.epoch) == (text, device_id, epoch)


@given(extended_identify_texts())
def test_a_text_is_read_as_saying_an_epoch_only_in_the_exact_form(text: str) -> None:
    """Whatever a device sends, the parts read are exactly what identify_text would have
    written for that text, or nothing (a device that cannot say): never a guess."""
    description, device_id, epoch = wire.split_identify_text(text)
    if device_id is None:
        assert (description, epoch) == (text, None)
    else:
        assert epoch is not None
        assert wire.identify_text(description, device_id, epoch) == text


@pytest.mark.parametrize("text", [
    "regdev firmware-sim, 16 x 8-bit, protocol 1",  # a protocol 1 device: says neither
    "id=5F3A9C01 epoch=0001",  # no description before them
    "acme id=5f3a9c01 epoch=0001",  # lower case
    "acme id=5F3A9C01 epoch=",  # an empty epoch
    "acme id=ABCDEFGHIJKLMNOPQ epoch=1",  # an id of 17 characters
    "acme epoch=1 id=2",  # out of order
    "acme id=1 epoch=2 ",  # something after the epoch
    "acme id=1  epoch=2",
])
def test_a_text_without_the_exact_ending_says_no_epoch(text: str) -> None:
    """Near misses are a description only: such a device cannot say its epoch."""
    assert wire.split_identify_text(text) == (text, None, None)
    assert wire.IdentifyReply(1, text).epoch is None


def test_identify_text_refuses_what_does_not_fit_in_regdevs_words() -> None:
    """A description too long for the 48 bytes says how long it may be; a bad id names it."""
    with pytest.raises(LocalProtocolError, match=r"^identify text 'regdev firmware-sim, 16 x "
                       r"8-bit, protocol 1 id=5F3A9C01 epoch=0123456789ABCDEF' is 78 "
                       r"characters, over 48: shorten the description to at most 13 "
                       r"characters$"):
        wire.identify_text("regdev firmware-sim, 16 x 8-bit, protocol 1", "5F3A9C01",
                           "0123456789ABCDEF")
    with pytest.raises(LocalProtocolError, match=r"^the device id must be 1\.\.16 characters"):
        wire.identify_text("acme", "5f3a", "1")
    with pytest.raises(LocalProtocolError, match=r"^the epoch must be 1\.\.16 characters"):
        wire.identify_text("acme", "5F3A", "")


# --- the in-process device and the simulator keep an id and an epoch --------------------------


def test_a_register_file_begins_a_new_epoch_at_every_reset() -> None:
    """Its epoch is 16 hex digits, new at construction and at every reset, never repeated; its
    id stays; identity() and known_identity() agree; a wrapper reports the wrapped one's."""
    device = RegisterFile()
    seen = set()
    for _ in range(200):
        identity = device.identity()
        assert identity == device.known_identity() == device.identity(refresh=True)
        assert identity.device == device.state_id()
        assert identity.epoch is not None and re.fullmatch(r"[0-9A-F]{16}", identity.epoch)
        seen.add(identity.epoch)
        device.reset()
    assert len(seen) == 200 and device.identity().epoch not in seen
    assert RegisterFile().identity().epoch != RegisterFile().identity().epoch
    timed = TimeoutDevice(device, 1.0)
    assert timed.identity(refresh=True) == timed.known_identity() == device.identity()
    timed.close()


@pytest.mark.parametrize("epoch", ["", "e1", "0123456789ABCDEF0", "A@B", 7])
def test_a_register_file_refuses_an_epoch_it_could_not_say(epoch: Any) -> None:
    """An explicit epoch is 1..16 of 0-9 and A-Z (what the wire can carry)."""
    with pytest.raises(ValueError, match=r"^a reset epoch must be 1\.\.16 characters of 0-9 "):
        RegisterFile(epoch=epoch)


def test_a_device_that_does_not_track_its_resets_says_no_epoch() -> None:
    """The Device base class cannot say an epoch: its identity has None."""

    class Bare(Device):
        def read(self, addr: int) -> int:
            return 0

        def write(self, addr: int, data: int) -> int:
            return data

        def reset(self) -> None:
            pass

        def snapshot(self) -> list[int]:
            return [0] * 16

    bare = Bare()
    assert bare.identity() == bare.known_identity() == DeviceIdentity(bare.state_id(), None)


def test_the_simulator_says_its_id_and_a_new_epoch_after_each_reset() -> None:
    """Firmware answers I with its id and its registers' epoch; Z begins a new one; a plain
    firmware answers the description alone."""
    firmware = sim.Firmware(device_id="BENCH7")
    first = firmware.answer(wire.IdentifyRequest(1))
    assert isinstance(first, wire.IdentifyReply) and first.device_id == "BENCH7"
    assert first.epoch == firmware.registers.identity().epoch
    firmware.answer(wire.ResetRequest(2))
    second = firmware.answer(wire.IdentifyRequest(3))
    assert isinstance(second, wire.IdentifyReply) and second.device_id == "BENCH7"
    assert second.epoch not in (None, first.epoch)
    plain = sim.Firmware(plain=True).answer(wire.IdentifyRequest(4))
    assert plain == wire.IdentifyReply(4, sim.IDENTITY)
    assert re.fullmatch(r"[0-9A-F]{8}", sim.Firmware().device_id)


def test_the_simulator_refuses_a_description_too_long_for_the_frame(tmp_path: Path) -> None:
    """--identity with the old 43-character text no longer fits with the id and epoch: one
    line, exit 2, saying how long it may be (or use --plain-identify)."""
    done = subprocess.run([sys.executable, str(sim.__file__), "--tcp", "127.0.0.1:0",
                           "--identity", "regdev firmware-sim, 16 x 8-bit, protocol 1"],
                          capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines()[-1].endswith(
        "is 78 characters, over 48: shorten the description to at most 13 characters")


# --- in process: a reset that bypasses the gate -------------------------------------------------


def test_a_reset_that_bypasses_the_gate_ends_the_keys(tmp_path: Path) -> None:
    """device.reset() called directly (not through the gate): a key sent again runs again
    and the register holds the value; the gate never said replay while it held 0."""
    device = CountingDevice()
    with Gate(device, audit=AuditLog(tmp_path / "a.db")) as gate:
        assert gate.handle(keyed_write()).ok
        device.reset()
        assert device.snapshot()[3] == 0
        again = gate.handle(keyed_write())
        assert (again.ok, again.replay, again.result) == (True, False, {"addr": 3, "data": VALUE})
        assert device.snapshot()[3] == VALUE and device.write_count == 2
        assert gate.handle(keyed_write()).replay is True and device.write_count == 2


class ResetOnWrite(RegisterFile):
    """A reset by another path lands between the gate reading the epoch and the write."""

    reset_next = False

    def write(self, addr: int, data: int) -> int:
        if self.reset_next:
            self.reset_next = False
            self.reset()
        return super().write(addr, data)


def test_a_reset_just_before_the_write_is_never_taken_for_no_reset(tmp_path: Path) -> None:
    """The key is stored in the epoch read before the write; the write landed in the next one.
    Sent again, it is not replayed (the epochs differ): it runs again, harmlessly."""
    device = ResetOnWrite()
    with Gate(device, audit=AuditLog(tmp_path / "a.db")) as gate:
        device.reset_next = True
        assert gate.handle(keyed_write()).ok
        again = gate.handle(keyed_write())
        assert (again.ok, again.replay, device.write_count) == (True, False, 2)
        assert gate.handle(keyed_write()).replay is True


class Watched(RegisterFile):
    """Counts the identity questions that ask the device (``refresh``)."""

    def __init__(self) -> None:
        super().__init__()
        self.refreshes = 0
        self.fail: Exception | None = None

    def identity(self, *, refresh: bool = False) -> DeviceIdentity:
        if refresh:
            self.refreshes += 1
            if self.fail is not None:
                raise self.fail
        return super().identity()


def test_the_device_is_asked_again_only_before_a_replay(tmp_path: Path) -> None:
    """New keys and calls without keys ask nothing more of the device; each replay asks once
    (an identify round trip on a serial device)."""
    device = Watched()
    with Gate(device, audit=AuditLog(tmp_path / "a.db")) as gate:
        for key in ("a", "b", "c"):
            assert gate.handle(keyed_write(key)).replay is False
        gate.handle('{"tool": "read_register", "arguments": {"addr": 3}}')
        assert device.refreshes == 0
        for key in ("a", "b"):
            assert gate.handle(keyed_write(key)).replay is True
        assert device.refreshes == 2


@pytest.mark.parametrize(("error", "code"), [
    (TransportError("port /dev/ttyUSB0 failed: unplugged"), "device-unavailable"),
    (DeviceBusy("the device is busy", code="BUSY"), "device-busy"),
])
def test_a_replay_the_device_cannot_confirm_is_refused_and_nothing_runs(
        tmp_path: Path, error: Exception, code: str) -> None:
    """No answer to "are you in the same epoch?": not a replay, and nothing sent either; the
    key stays, and is replayed once the device answers again."""
    device = Watched()
    with Gate(device, audit=AuditLog(tmp_path / "a.db")) as gate:
        assert gate.handle(keyed_write()).ok
        device.fail = error
        refused = gate.handle(keyed_write())
        assert (refused.ok, refused.replay, refused.stage, refused.code) == (
            False, False, "authorize", code)
        assert refused.refusal is not None and refused.refusal.message.startswith(
            "the call was not sent: the device did not say its reset epoch, which its "
            "idempotency key is checked against: ")
        assert refused.refusal.retryable and device.write_count == 1
        device.fail = None
        assert gate.handle(keyed_write()).replay is True and device.write_count == 1


class NoEpoch(Device):
    """A device that cannot say its reset epoch (the Device default), over a register file."""

    def __init__(self) -> None:
        self.registers = RegisterFile()

    def read(self, addr: int) -> int:
        return self.registers.read(addr)

    def write(self, addr: int, data: int) -> int:
        return self.registers.write(addr, data)

    def reset(self) -> None:
        self.registers.reset()

    def snapshot(self) -> list[int]:
        return self.registers.snapshot()


def test_a_device_that_cannot_say_its_epoch_gets_no_replay(tmp_path: Path) -> None:
    """Nothing tells whether it was reset since: the call sent again is neither run again nor
    a claimed replay but idempotency-unconfirmed, saying what the record says of the first
    attempt, also after a restart; the key still refuses another call; the record names the
    device, no epoch."""
    device = NoEpoch()
    path = tmp_path / "a.db"
    with Gate(device, audit=AuditLog(path)) as gate:
        first, again = gate.handle(keyed_write()), gate.handle(keyed_write())
        assert first.ok and not first.replay
        assert (again.code, again.replay, again.to_dict()["retryable"]) == (
            "idempotency-unconfirmed", False, False)
        assert re.fullmatch(
            r'idempotency key "op-1" was used for this call at \d{4}-\d\d-\d\d '
            r"\d\d:\d\d:\d\d UTC, and the record says its first attempt ran and the device "
            r"acknowledged it; this device cannot say whether it was reset since, so the call "
            r"is neither run again nor answered from the record: read the register back, then "
            r"send the call with a new key if it must run", again.message or ""), again.message
        assert device.registers.write_count == 1
        assert gate.handle(keyed_write(data=1)).code == "idempotency-conflict"
    with Gate(device, audit=AuditLog(path)) as gate:  # the key is in the log: after a restart
        assert gate.handle(keyed_write()).code == "idempotency-unconfirmed"
        assert device.registers.write_count == 1
    records = read_audit(path)
    assert {(r.device, r.device_epoch) for r in records} == {(device.state_id(), None)}


# --- over a serial line: every path a reset can take ----------------------------------------------


def replay(capsys: pytest.CaptureFixture[str], path: Path, url: str,
           *extra: str) -> tuple[dict[str, Any], list[int]]:
    """``regdev replay PATH --json --port URL``: the first line's outcome and the registers."""
    status = main(["replay", str(path), "--json", "--port", url, "--timeout", "2", *extra])
    out, err = capsys.readouterr()
    assert status == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    return lines[0], [row["data"] for row in lines[-1]["registers"]]


@pytest.fixture
def calls(tmp_path: Path) -> dict[str, Path]:
    """Replay files: one keyed write, and one read (to reset the device with --reset)."""
    write, read = tmp_path / "write.jsonl", tmp_path / "read.jsonl"
    write.write_text(json.dumps({"raw": keyed_write()}) + "\n")
    read.write_text(json.dumps({"raw": '{"tool": "read_register", "arguments": {"addr": 3}}'})
                    + "\n")
    return {"write": write, "read": read}


def assert_ran_again(outcome: dict[str, Any], registers: list[int]) -> None:
    """The keyed write was executed now, not answered from the store, and took effect."""
    assert (outcome["ok"], outcome["replay"], outcome["result"]) == (
        True, False, {"addr": 3, "data": VALUE})
    assert registers[3] == VALUE


#: Three spellings of one TCP port: where the write is sent, the reset, and the write again.
SPELLINGS = [
    ("socket://127.0.0.1:{p}", "socket://127.0.0.1:{p}/", "socket://127.0.0.1:{p}"),
    ("socket://127.0.0.1:{p}/", "socket://localhost:{p}", "socket://127.0.0.1:{p}/"),
    ("socket://localhost:{p}", "socket://127.0.0.1:0{p}", "socket://LOCALHOST:{p}"),
    ("socket://127.0.0.1:{p}?logging=warning", "socket://127.0.0.1:00{p}/",
     "socket://localhost:{p}/?logging=warning"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spellings", SPELLINGS,
                         ids=["slash", "localhost", "leading-zeros", "query"])
def test_a_reset_through_another_spelling_of_the_url_ends_the_keys(
        capsys: pytest.CaptureFixture[str], calls: dict[str, Path],
        spellings: tuple[str, str, str]) -> None:
    """The bug: a reset through one spelling, then the keyed write through another, answered
    replay while the register held 0. Now the key runs again; sent again with no reset in
    between, through yet another spelling, it is a replay (keys follow the device)."""
    with sim_process("--tcp", "127.0.0.1:0") as (url, _):
        p = url.rsplit(":", 1)[1]
        write_at, reset_at, again_at = (spelling.format(p=p) for spelling in spellings)
        outcome, registers = replay(capsys, calls["write"], write_at)
        assert (outcome["replay"], registers[3]) == (False, VALUE)
        _, registers = replay(capsys, calls["read"], reset_at, "--reset")
        assert registers == [0] * 16
        assert_ran_again(*replay(capsys, calls["write"], again_at))
        outcome, _ = replay(capsys, calls["write"], reset_at)
        assert outcome["replay"] is True


RESET_ELSEWHERE = """
import sys
from regdev import SerialDevice
with SerialDevice(sys.argv[1]) as device:
    device.reset()
"""


@pytest.mark.timeout(60)
def test_a_reset_by_another_process_ends_the_keys(capsys: pytest.CaptureFixture[str],
                                                  calls: dict[str, Path]) -> None:
    """Another program resets the device without the audit log knowing: the device's new
    epoch tells, and the keyed write runs again."""
    with sim_process("--tcp", "127.0.0.1:0") as (url, _):
        assert replay(capsys, calls["write"], url)[0]["replay"] is False
        subprocess.run([sys.executable, "-c", RESET_ELSEWHERE, url], check=True, timeout=30)
        assert_ran_again(*replay(capsys, calls["write"], url))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.timeout(60)
def test_a_power_cycled_device_ends_the_keys(capsys: pytest.CaptureFixture[str],
                                             calls: dict[str, Path], audit_path: Path) -> None:
    """The simulator stopped and started again at the same port with the same id (a device
    power-cycled: same serial number, registers back to 0): the keyed write runs again."""
    where = f"127.0.0.1:{free_port()}"
    with sim_process("--tcp", where, "--device-id", "BENCH1") as (url, _):
        assert replay(capsys, calls["write"], url)[0]["replay"] is False
        assert replay(capsys, calls["write"], url)[0]["replay"] is True  # the same epoch
    with sim_process("--tcp", where, "--device-id", "BENCH1") as (again, _):
        assert again == url
        assert_ran_again(*replay(capsys, calls["write"], url))
    devices = {(r.device, r.device_epoch) for r in read_audit(audit_path)}
    assert {device for device, _ in devices} == {"BENCH1"} and len(devices) == 2


@pytest.mark.timeout(60)
def test_a_device_that_says_no_epoch_never_gets_a_replay_over_the_wire(
        capsys: pytest.CaptureFixture[str], calls: dict[str, Path], audit_path: Path) -> None:
    """A protocol 1 device (--plain-identify): regdev cannot see a reset by another path, so
    the keyed write sent again is never replayed nor run again but idempotency-unconfirmed,
    through any spelling; the records name it by the port: one name for a trailing slash,
    leading zeros or options (a host name is not looked up: localhost is another name, where
    the key is new, docs/safety.md)."""
    with sim_process("--tcp", "127.0.0.1:0", "--plain-identify") as (url, _):
        p = url.rsplit(":", 1)[1]
        assert_ran_again(*replay(capsys, calls["write"], url))
        for spelling in (f"socket://127.0.0.1:{p}/", f"socket://127.0.0.1:0{p}",
                         f"socket://127.0.0.1:{p}?logging=warning"):
            outcome, registers = replay(capsys, calls["write"], spelling)
            assert (outcome["ok"], outcome["code"]) == (False, "idempotency-unconfirmed")
            assert "its first attempt ran and the device acknowledged it" in outcome["message"]
            assert registers[3] == VALUE
        assert_ran_again(*replay(capsys, calls["write"], f"socket://localhost:{p}"))
    assert [(r.device, r.device_epoch) for r in read_audit(audit_path)] == [
        (f"serial:socket://127.0.0.1:{p}", None)] * 4 + [(f"serial:socket://localhost:{p}", None)]


@pytest.mark.timeout(60)
def test_serial_device_learns_its_identity_from_the_line(tmp_path: Path) -> None:
    """identity() answers from the identify that synchronised the line (no extra round trip),
    learns the new epoch right after a reset it sent, and asks again once the port was closed
    (another process may have reset the device meanwhile)."""
    with (sim_process("--tcp", "127.0.0.1:0", "--device-id", "LINE1") as (url, _),
          SerialDevice(url) as device):
        assert device.known_identity() is None
        assert device.read(3) == 0  # synchronises the line with an identify
        known = device.known_identity()
        assert known is not None and known.device == "LINE1" and known.epoch is not None
        assert device.identity() == known
        device.reset()
        after = device.known_identity()
        assert after is not None and after.epoch != known.epoch
        assert device.identity() == after  # the reset's identify said it: not asked
        device.close()
        subprocess.run([sys.executable, "-c", RESET_ELSEWHERE, url], check=True,
                       timeout=30)
        assert device.known_identity() == after  # what was said last
        fresh = device.identity()  # the port was closed since: asked again
        assert fresh.device == "LINE1" and fresh.epoch not in (after.epoch, known.epoch)
        assert device.identity(refresh=True) == fresh


# --- the audit log names the device ---------------------------------------------------------------


@pytest.mark.timeout(60)
def test_audit_records_name_the_device_and_can_be_filtered_by_it(
        capsys: pytest.CaptureFixture[str], calls: dict[str, Path], audit_path: Path) -> None:
    """Runs on the in-process device and on a port are told apart: each record names its
    device (text and JSON), and --device selects one."""
    assert main(["replay", str(calls["write"])]) == 0
    capsys.readouterr()
    with sim_process("--tcp", "127.0.0.1:0", "--device-id", "AUDIT1") as (url, _):
        replay(capsys, calls["write"], url)
    records = read_audit(audit_path)
    local = records[0].device
    assert local is not None and local.startswith("RegisterFile:")
    assert [r.device for r in records] == [local, "AUDIT1"]
    assert all(re.fullmatch(r"[0-9A-F]{16}", r.device_epoch or "") for r in records)
    assert main(["audit", "--device", "AUDIT1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "device AUDIT1" in out[0] and out[1].startswith("1 record in")
    assert main(["audit", "--device", local, "--json"]) == 0
    exported = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["device"], r["device_epoch"]) for r in exported] == [
        (local, records[0].device_epoch)]
    assert main(["audit", "--device", "NOSUCH"]) == 0
    assert capsys.readouterr().out.startswith("0 records in")


def test_a_version_3_database_gains_the_device_columns(tmp_path: Path) -> None:
    """Opened by this regdev, a version 3 log gets the two columns: its old records read back
    with no device, new ones with theirs."""
    path = tmp_path / "a.db"
    with Gate(audit=AuditLog(path)) as gate:
        gate.handle('{"tool": "read_register", "arguments": {"addr": 1}}')
    conn = sqlite3.connect(path)  # as version 3 wrote it
    conn.executescript("DROP INDEX calls_by_device; ALTER TABLE calls DROP COLUMN device_epoch; "
                       "ALTER TABLE calls DROP COLUMN device; PRAGMA user_version = 3;")
    conn.close()
    device = RegisterFile()
    with Gate(device, audit=AuditLog(path)) as gate:
        gate.handle('{"tool": "read_register", "arguments": {"addr": 2}}')
    assert [(r.device, r.device_epoch) for r in read_audit(path)] == [
        (None, None), tuple(device.identity())]
    assert read_audit(path, device=device.state_id())[0].arguments == '{"addr":2}'
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
    conn.close()


def test_the_key_scope_splits_at_the_last_at_sign() -> None:
    """A scope is ID@EPOCH; a device that cannot say has ID@ (an epoch holds no @)."""
    epoch = new_epoch()
    assert key_scope("serial:socket://a@b:1", epoch).rpartition("@") == (
        "serial:socket://a@b:1", "@", epoch)
    assert key_scope("BENCH1", None) == "BENCH1@"


def test_concurrent_replays_each_ask_the_device(tmp_path: Path) -> None:
    """Replays from several threads each confirm the epoch; none is answered from a stale
    one when a reset lands among them."""
    device = Watched()
    with Gate(device, audit=AuditLog(tmp_path / "a.db")) as gate:
        assert gate.handle(keyed_write()).ok
        results: list[bool] = []
        lock = threading.Lock()

        def send() -> None:
            outcome = gate.handle(keyed_write())
            with lock:
                results.append(bool(outcome.replay))

        threads = [threading.Thread(target=send) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == [True] * 8 and device.refreshes == 8
        device.reset()
        assert gate.handle(keyed_write()).replay is False


@given(st.lists(st.sampled_from(["write", "reset", "direct-reset"]), max_size=12))
def test_no_replay_ever_claims_a_value_the_register_does_not_hold(ops: list[str]) -> None:
    """Any sequence of keyed writes (one key, one value) and resets, through the gate or
    around it: every replay answered is true of the register at that moment."""
    device = RegisterFile()
    with tempfile.TemporaryDirectory() as folder, Gate(
            device, audit=AuditLog(Path(folder) / "a.db")) as gate:
        for op in ops:
            if op == "write":
                outcome = gate.handle(keyed_write())
                assert outcome.ok
                if outcome.replay:
                    assert device.snapshot()[3] == VALUE
            elif op == "reset":
                gate.reset_device()
            else:
                device.reset()


def test_the_protocol_doc_shows_the_extension_byte_for_byte() -> None:
    """The extension's example frame in docs/protocol.md says its id and epoch, its checked
    bytes and CRC are as the text says, and the byte dump is that frame."""
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    found = re.search(r"`(\$01 i regdev sim id=5F3A9C01 epoch=00A1B2C3D4E5F607\*([0-9A-F]{2}))`",
                      text)
    assert found is not None
    reply = wire.decode(found[1].encode("ascii"))
    assert isinstance(reply, wire.IdentifyReply)
    assert (reply.device_id, reply.epoch) == ("5F3A9C01", "00A1B2C3D4E5F607")
    payload = found[1].encode("ascii")[1:-3]
    assert (len(payload), wire.crc8(payload), found[2]) == (50, 0x11, "11")
    dumps = re.findall(r"^((?:[0-9a-f]{2} )+[0-9a-f]{2})$", text, re.MULTILINE)
    assert bytes.fromhex(dumps[1]) == wire.encode(reply) and len(wire.encode(reply)) == 55
