"""The serial backend end to end: over a real pty to the simulator in another process, over
socket:// and rfc2217://, under faults; and its own rules (sent once, synchronised, typed)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
import serial

import regdev_firmware_sim as sim
from conftest import EXAMPLES
from regdev import (
    AuditLog,
    DeviceBusy,
    DeviceError,
    DeviceRefused,
    DeviceTimeout,
    Gate,
    RegisterRangeError,
    ReplyLost,
    TransportError,
)
from regdev.agents._replay import load_replay, run_replay
from regdev.devices import _protocol as wire
from regdev.devices._serial import (
    MAX_BAUDRATE,
    MODBUS_URL_FORMS,
    URL_FORMS,
    SerialDevice,
    map_exceptions,
    port_state_id,
)
from support.firmware import (
    CountingFirmware,
    is_sim_identity,
    rfc2217_server,
    sim_process,
    sim_pty_thread,
    sim_thread,
)

#: Host timeout for a call that is meant to time out, and how late a delay fault replies: 3x
#: beyond it, so a loaded machine cannot make the late reply look timely.
TIMEOUT = 0.25
DELAY = 0.75
#: Timeout for the calls that must succeed, set around the faulted call: a loaded machine may
#: take long to answer, and a delayed reply may still be on its way.
PATIENT = 5.0


def call(gate: Gate, tool: str, **arguments: int) -> dict[str, Any]:
    """Run one canonical call through the gate; return the observation as JSON data."""
    return gate.handle(json.dumps({"tool": tool, "arguments": arguments})).to_dict()


@contextmanager
def faulted(kind: str, *, after: int, retries: int = 3, line: str = "tcp"
            ) -> Iterator[tuple[CountingFirmware, SerialDevice]]:
    """A SerialDevice on the simulator (a thread, over TCP or a pty) whose firmware counts
    what it executes; the reply after the first ``after`` clean ones gets one fault of
    ``kind``. Over a pty the backend reads replies with ``select`` and ``os.read`` and takes
    the exact awaited reply at once; over TCP through pyserial and the codec."""
    firmware = CountingFirmware()
    faults = sim.Faults({kind: 1.0}, after=after, count=1, delay=DELAY)
    serving = sim_thread if line == "tcp" else sim_pty_thread
    with serving(firmware, faults) as url, SerialDevice(url, timeout=PATIENT,
                                                        retries=retries) as device:
        yield firmware, device


#: The two ways a reply is read: through pyserial (TCP), and the POSIX fast path (a pty).
LINES = pytest.mark.parametrize("line", ["tcp", "pty"])


def wait_for_input(device: SerialDevice) -> None:
    """Block until bytes wait in the device's port (a late reply has arrived), up to 10 s."""
    port = device._port
    assert port is not None
    deadline = time.monotonic() + 10
    while not port.in_waiting:
        assert time.monotonic() < deadline, "no late reply arrived"
        time.sleep(0.01)


# --- end to end -----------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_wild_cases_over_a_pty_match_in_process() -> None:
    """examples/wild-calls.jsonl through the serial backend: same verdicts, same registers."""
    records = load_replay(EXAMPLES / "wild-calls.jsonl")
    local = Gate()
    expected = [o.observation.to_dict() for o in run_replay(records, local)]
    with sim_process("--pty") as (port, _), SerialDevice(port, timeout=2.0) as device:
        assert port.startswith("/dev/")
        remote = Gate(device)
        got = [o.observation.to_dict() for o in run_replay(records, remote)]
        assert got == expected
        assert device.snapshot() == local.device.snapshot() == [0, 0, 0, 200] + [0] * 12
        assert device.timeouts == 0 and device.bad_frames == 0


@pytest.mark.timeout(30)
def test_every_operation_over_a_pty() -> None:
    """identify, write, read, dump and reset all work over a pty, through the gate too."""
    with sim_process("--pty") as (port, _), SerialDevice(port, timeout=2.0) as device:
        assert is_sim_identity(device.identify())
        assert device.write(15, 0xA5) == 0xA5
        assert device.read(15) == 0xA5
        gate = Gate(device)
        assert call(gate, "write_register", addr=0, data=1)["result"] == {"addr": 0, "data": 1}
        assert device.snapshot() == [1] + [0] * 14 + [0xA5]
        device.reset()
        assert device.snapshot() == [0] * 16


@pytest.mark.timeout(30)
def test_tcp_socket_url_works_unchanged() -> None:
    """The same backend runs over socket://HOST:PORT to the simulator's TCP server."""
    with sim_process("--tcp", "127.0.0.1:0") as (url, _), SerialDevice(url) as device:
        assert url.startswith("socket://127.0.0.1:")
        assert device.write(2, 7) == 7
        assert Gate(device).handle(
            '{"tool": "read_register", "arguments": {"addr": 2}}').result == {"addr": 2, "data": 7}


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore:set(Daemon|Name)\\(\\) is deprecated:DeprecationWarning")
def test_rfc2217_url_works_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """rfc2217:// through an RFC 2217 server in front of the simulator: every operation, a
    timeout and its recovery, and the port never renegotiated per transaction."""
    firmware = CountingFirmware()
    faults = sim.Faults({"drop": 1.0}, after=2, count=1)  # the first read's reply is lost
    with (sim_thread(firmware, faults) as backend, rfc2217_server(backend) as url,
          SerialDevice(url, timeout=1.0, retries=0) as device):
        assert is_sim_identity(device.identify())
        port = device._port
        assert port is not None and port.write_timeout is None  # pyserial's RFC 2217 has none
        settings = []
        monkeypatch.setattr(type(port), "_reconfigure_port",
                            lambda self, *args: settings.append(args))
        assert device.write(6, 0x66) == 0x66
        with pytest.raises(DeviceTimeout, match=r"^no valid reply within 1 s"):
            device.read(6)
        assert device.read(6) == 0x66
        device.reset()
        assert device.snapshot() == [0] * 16
        assert settings == []  # no renegotiation (pyserial's takes 50 ms sleeps) per call
    # the second identify asks the device its new reset epoch after the reset
    assert firmware.executed == {"I": 2, "W": 1, "R": 2, "Z": 1, "D": 1}


# --- faults ---------------------------------------------------------------------------------------

#: fault kind -> (the faulted write's verdict code, or None for success; register 5 after it)
FAULT_OUTCOMES = {
    "drop": ("device-timeout", 0x5A),
    "corrupt": ("device-timeout", 0x5A),
    "delay": ("device-timeout", 0x5A),
    "garbage": (None, 0x5A),
    "disconnect": ("device-timeout", 0x5A),  # sent, then the port failed: outcome unknown
    "busy": ("device-busy", 0),  # refused for now: not executed, retryable
}


def fault_args(kind: str, tmp_path: Path, *extra: str) -> list[str]:
    where = ["--pty", "--link", str(tmp_path / "port")]
    return [*where, "--fault", f"{kind}=1", "--delay", str(DELAY), "--seed", "3", *extra]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", list(FAULT_OUTCOMES))
def test_faulted_write_is_never_a_success_and_the_next_call_succeeds(
        kind: str, tmp_path: Path) -> None:
    """One faulted write: a typed failure (or success for garbage), then the link recovers."""
    code, after = FAULT_OUTCOMES[kind]
    # Replies: 1 the identify that synchronises the line, 2 the read, 3 the faulted write.
    args = fault_args(kind, tmp_path, "--fault-after", "2", "--fault-count", "1")
    with sim_process(*args) as (port, _), SerialDevice(port, timeout=PATIENT,
                                                       retries=0) as device:
        gate = Gate(device)
        assert call(gate, "read_register", addr=5) == {
            "ok": True, "tool": "read_register", "result": {"addr": 5, "data": 0}}
        device.timeout = TIMEOUT
        faulted = call(gate, "write_register", addr=5, data=0x5A)
        if code is None:
            assert faulted["ok"] is True and faulted["result"] == {"addr": 5, "data": 0x5A}
        else:
            assert faulted["ok"] is False
            assert (faulted["stage"], faulted["code"]) == ("execute", code)
        if kind in ("drop", "corrupt", "delay"):
            assert re.fullmatch(
                r"the device did not answer in time: no valid reply within 0\.25 s"
                r"( \(1 bad frame dropped\))?; the write may or may not have happened: "
                r"read the register back", faulted["message"]), faulted["message"]
        device.timeout = PATIENT  # outwait a delayed reply still on its way
        following = call(gate, "read_register", addr=5)
        assert following == {"ok": True, "tool": "read_register",
                             "result": {"addr": 5, "data": after}}


@pytest.mark.timeout(30)
def test_disconnect_after_the_write_was_sent_is_an_unknown_outcome() -> None:
    """A TCP link cut after the write went out: ReplyLost (a timeout: it may have run, and it
    did), never a refusal; the next transaction reconnects and reads the written value."""
    with faulted("disconnect", after=1) as (firmware, device):  # after the synchronising identify
        with pytest.raises(ReplyLost) as info:
            device.write(1, 9)
        assert str(info.value) == (
            "the write may or may not have happened: read the register back; port "
            f"{device.url} failed after it was sent: the other end closed the connection")
        assert isinstance(info.value, DeviceTimeout)
        failed = call(Gate(device), "read_register", addr=1)
        assert failed == {"ok": True, "tool": "read_register", "result": {"addr": 1, "data": 9}}
    assert firmware.executed["W"] == 1


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("operation", "what"), [("read", "read"), ("snapshot", "dump")])
def test_a_sent_read_stays_unknown_when_its_retry_cannot_be_sent(operation: str,
                                                                 what: str) -> None:
    """Sent, the link cut, then the retry's synchronising identify cut too: ReplyLost (the
    first attempt's outcome is unknown), never TransportError "the dump was not sent"."""
    firmware = CountingFirmware()
    # Replies: 1 the first synchronising identify (clean); 2 the request's, 3 the retry's
    # identify: both cut the link.
    faults = sim.Faults({"disconnect": 1.0}, after=1, count=2)
    with sim_thread(firmware, faults) as url, SerialDevice(url, timeout=PATIENT,
                                                           retries=1) as device:
        device.identify()
        with pytest.raises(ReplyLost) as info:
            getattr(device, operation)(*((3,) if operation == "read" else ()))
    message = str(info.value)
    assert message.startswith(f"port {url} failed after the {what} was sent: the other end "
                              f"closed the connection; the retry failed: the {what} was not "
                              "sent: "), message
    assert message.endswith(" s in all)") and "(2 attempts, " in message
    assert firmware.executed == {"I": 2, what[0].upper(): 1}


@pytest.mark.timeout(30)
def test_disconnect_is_a_timeout_observation_over_tcp() -> None:
    """Through the gate, the cut link after a write is device-timeout, not a refusal."""
    args = ["--tcp", "127.0.0.1:0", "--fault", "disconnect=1", "--fault-after", "1",
            "--fault-count", "1"]
    with sim_process(*args) as (url, _), SerialDevice(url, timeout=PATIENT) as device:
        gate = Gate(device)
        failed = call(gate, "write_register", addr=1, data=9)
        assert (failed["ok"], failed["code"]) == (False, "device-timeout")
        assert failed["message"].startswith(
            "the link failed before the device's answer came: the write may or may not have "
            f"happened: read the register back; port {url} failed after it was sen")
        assert call(gate, "read_register", addr=1)["result"] == {"addr": 1, "data": 9}


@pytest.mark.timeout(30)
def test_port_failure_before_the_write_is_sent_is_a_transport_error() -> None:
    """The device gone before the write: TransportError saying it was not sent (and it was not)."""
    with sim_process("--pty") as (port, process), SerialDevice(port, timeout=PATIENT) as device:
        assert device.read(0) == 0
        process.terminate()
        process.wait(timeout=5)
        with pytest.raises(TransportError) as info:
            device.write(0, 1)
        assert str(info.value) == f"the write was not sent: port {port} failed: Input/output error"
        assert not isinstance(info.value, DeviceError)
        reopening = f"^the read was not sent: cannot open port {port}"
        with pytest.raises(TransportError, match=reopening):
            device.read(0)  # the pty is gone: reopening fails, and nothing is sent


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("kind", "timeout", "retries"),
                         [("drop", 1.0, 1), ("corrupt", 1.0, 1), ("busy", PATIENT, 1),
                          ("delay", TIMEOUT, 8)])
def test_reads_are_retried_after_a_fault(kind: str, timeout: float, retries: int,
                                         tmp_path: Path) -> None:
    """A read survives one faulted reply by being sent again; the retry gets the right value.

    A delayed reply holds the device up for 3 timeouts, so that read takes more attempts (and
    has spare ones for a loaded machine); the others have a second one, with time to spare."""
    # Replies: 1 the synchronising identify, 2 the write, 3 the faulted read.
    args = fault_args(kind, tmp_path, "--fault-after", "2", "--fault-count", "1")
    with sim_process(*args) as (port, _), SerialDevice(port, timeout=PATIENT,
                                                       retries=retries) as device:
        assert device.write(4, 44) == 44
        device.timeout = timeout
        assert device.read(4) == 44
        assert (device.timeouts == 0) == (kind == "busy")


@pytest.mark.timeout(60)
def test_random_faults_never_report_an_unacknowledged_write() -> None:
    """Seeded mixed faults: every observation is a success that is true, or a typed failure."""
    args = ["--pty", "--fault", "drop=0.1,corrupt=0.1,garbage=0.2,busy=0.1,delay=0.05",
            "--delay", str(DELAY), "--seed", "11", "--fault-count", "10"]
    # What each register may hold: one value when known, several after a failed write.
    possible: list[set[int]] = [{0} for _ in range(16)]
    failures = successes = 0
    with sim_process(*args) as (port, _), SerialDevice(port, timeout=TIMEOUT,
                                                       retries=0) as device:
        gate = Gate(device)
        for step in range(30):
            addr = step % 4
            if step % 2:
                obs = call(gate, "read_register", addr=addr)
                if obs["ok"]:
                    assert obs["result"]["data"] in possible[addr]
                    possible[addr] = {obs["result"]["data"]}
            else:
                obs = call(gate, "write_register", addr=addr, data=step)
                if obs["ok"]:
                    assert obs["result"] == {"addr": addr, "data": step}
                    possible[addr] = {step}
                else:
                    possible[addr].add(step)
            if obs["ok"]:
                successes += 1
            else:
                failures += 1
                assert obs["code"] in ("device-timeout", "device-busy", "device-error")
        assert failures >= 3 and successes >= 10
        device.timeout = PATIENT
        final = device.snapshot()
    assert all(final[addr] in possible[addr] for addr in range(16))


# --- sent once: writes and resets are never repeated; reads are ---------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["drop", "delay"])
@LINES
def test_a_write_is_sent_exactly_once_even_with_retries(kind: str, line: str) -> None:
    """With retries=3, a write whose acknowledgement is lost reaches the device once."""
    with faulted(kind, after=1, line=line) as (firmware, device):
        device.timeout = TIMEOUT
        with pytest.raises(DeviceTimeout, match="the write may or may not have happened"):
            device.write(2, 0x22)
        device.timeout = PATIENT
        assert device.read(2) == 0x22  # the device answers in order: every W is in by now
    assert firmware.executed["W"] == 1


@pytest.mark.timeout(30)
@LINES
def test_a_reset_is_sent_exactly_once_even_with_retries(line: str) -> None:
    """With retries=3, a reset whose acknowledgement is lost reaches the device once."""
    with faulted("drop", after=2, line=line) as (firmware, device):
        assert device.write(3, 3) == 3
        device.timeout = TIMEOUT
        with pytest.raises(DeviceTimeout, match="the reset may or may not have happened"):
            device.reset()
        device.timeout = PATIENT
        assert device.snapshot() == [0] * 16
    assert firmware.executed["Z"] == 1


@pytest.mark.timeout(30)
@LINES
def test_a_read_is_sent_again_after_a_lost_reply(line: str) -> None:
    """With retries=3, a read whose reply is lost is sent a second time, and no more."""
    with faulted("drop", after=1, line=line) as (firmware, device):
        device.timeout = 1.0  # the lost reply's wait; the second attempt has as long
        assert device.read(7) == 0
        assert device.timeouts == 1
    assert firmware.executed["R"] == 2


@pytest.mark.timeout(30)
def test_failure_after_retries_says_the_real_time_spent() -> None:
    """A read that fails on every attempt says how many and how long they took in all."""
    with SerialDevice("loop://", timeout=0.05, retries=2) as device, pytest.raises(
            TransportError) as info:
        device.read(1)
    message = str(info.value)
    assert re.fullmatch(r"the read was not sent: no valid reply within 0\.05 s to the identify "
                        r"that synchronises the line \(1 bad frame dropped\) \(3 attempts, "
                        r"\d+\.\d\d s in all\)", message), message
    assert "Request" not in message and "`" not in message


# --- stale replies: flushed after a timeout, and never taken across processes -------------------


@pytest.mark.timeout(30)
@LINES
def test_late_reply_is_flushed_before_the_next_request(line: str) -> None:
    """After a timeout the input is flushed: a late reply already in is never even decoded."""
    with faulted("delay", after=1, retries=0, line=line) as (_, device):
        device.timeout = TIMEOUT
        with pytest.raises(DeviceTimeout):
            device.read(3)
        wait_for_input(device)  # the late reply is in the port's input
        device.timeout = PATIENT
        assert device.read(3) == 0
        assert device.stale_replies == 0


@pytest.mark.timeout(30)
def test_a_new_process_never_takes_the_late_reply_of_the_one_before(tmp_path: Path) -> None:
    """Two SerialDevices in a row on one pty, with the same sequence numbers: the second never
    takes the first's late reply for its own (it synchronises the line first)."""
    # Reply 1 answers the first device's identify; reply 2, to its write, is late.
    args = ["--pty", "--fault", "delay=1", "--fault-after", "1", "--fault-count", "1",
            "--delay", str(DELAY)]
    with sim_process(*args) as (port, _):
        with SerialDevice(port, timeout=PATIENT, first_seq=7) as first:
            assert is_sim_identity(first.identify())  # seq 7, which synchronises the line
            first.timeout = TIMEOUT
            with pytest.raises(DeviceTimeout):
                first.write(7, 0x42)  # seq 8, answered late with "w 07 42"
        # Without synchronising, this device's write would be seq 8, and take that reply.
        with SerialDevice(port, timeout=PATIENT, first_seq=8) as second:
            assert second.write(7, 0x55) == 0x55
            assert second.read(7) == 0x55


@pytest.mark.timeout(30)
def test_sequence_numbers_start_at_random() -> None:
    """Each SerialDevice starts its sequence numbers at a random value in 1..255."""
    firsts = set()
    for _ in range(8):
        device = SerialDevice("loop://", timeout=0.05)
        firsts.add(device._link.new_seq())
        device.close()
    assert len(firsts) > 1 and all(1 <= seq <= 255 for seq in firsts)


# --- the backend's own rules ----------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_the_port_timeout_is_never_set_per_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """No transaction reconfigures the port (tcsetattr on POSIX): not a read, a write, nor a
    timeout and the flush after it."""
    # Replies: 1 the synchronising identify, 2 a write, 3 a read: lost, and sent again.
    args = ["--pty", "--fault", "drop=1", "--fault-after", "2", "--fault-count", "1"]
    with sim_process(*args) as (port, _), SerialDevice(port, timeout=1.0, retries=1) as device:
        opened = device._port
        assert opened is not None and opened.timeout == pytest.approx(0.01)
        settings: list[object] = []
        monkeypatch.setattr(type(opened), "_reconfigure_port",
                            lambda self, *args: settings.append(args))
        for value in range(20):
            assert device.write(value % 16, value) == value
            assert device.read(value % 16) == value
        assert device.timeouts == 1 and settings == []


@pytest.mark.timeout(20)
def test_write_acknowledged_with_another_value_is_an_error() -> None:
    """A device that stores other bits than written: the write is a device-error, not a success."""

    class LowNibble(sim.Firmware):
        def answer(self, request: wire.Request) -> wire.Reply:
            if isinstance(request, wire.WriteRequest):
                request = wire.WriteRequest(request.seq, request.addr, request.data & 0x0F)
            return super().answer(request)

    with sim_thread(LowNibble()) as url, SerialDevice(url) as device:
        with pytest.raises(DeviceError, match="acknowledged register 3 = 0x0f, not the 0xff"):
            device.write(3, 0xFF)
        obs = call(Gate(device), "write_register", addr=3, data=0x12)
        assert (obs["ok"], obs["code"]) == (False, "device-error")


@pytest.mark.timeout(20)
@LINES
def test_device_refusal_is_typed_and_not_retried(line: str) -> None:
    """An `e ADDR` answer is DeviceRefused with its code, and sent once despite retries."""

    class Refusing(CountingFirmware):
        def answer(self, request: wire.Request) -> wire.Reply:
            super().answer(request)
            return wire.ErrorReply(request.seq, "ADDR")

    firmware = Refusing()
    with (sim_thread if line == "tcp" else sim_pty_thread)(firmware) as url, SerialDevice(
            url, retries=3) as device:
        with pytest.raises(DeviceRefused, match=r"^no such register address \(ADDR\)$") as info:
            device.read(9)
        assert info.value.code == "ADDR" and not isinstance(info.value, DeviceBusy)
    assert firmware.executed["R"] == 1


@pytest.mark.timeout(20)
@LINES
def test_busy_is_device_busy(line: str) -> None:
    """`e BUSY` to a write is DeviceBusy, not a refusal: not executed, worth sending again."""
    with faulted("busy", after=1, line=line) as (firmware, device):
        with pytest.raises(DeviceBusy) as info:
            device.write(4, 4)
        assert info.value.code == "BUSY" and not isinstance(info.value, DeviceRefused)
        assert str(info.value) == "the device is busy; the request was not executed (BUSY)"
        assert device.read(4) == 0
    assert firmware.executed["W"] == 0


def test_out_of_range_access_never_reaches_the_line() -> None:
    """addr 16 or data 256 is refused before anything is sent (defence in depth)."""
    with SerialDevice("loop://", timeout=0.05) as device:
        with pytest.raises(RegisterRangeError):
            device.read(16)
        with pytest.raises(RegisterRangeError):
            device.write(0, 256)
        assert device._port is not None and device._port.in_waiting == 0


@pytest.mark.timeout(10)
def test_an_echoing_line_never_gets_past_synchronising() -> None:
    """On loop:// the host hears its own identify: dropped as an echo, and nothing else sent."""
    with SerialDevice("loop://", timeout=0.05, retries=1) as device:
        with pytest.raises(TransportError, match=r"^the write was not sent: no valid reply within "
                                                r"0\.05 s to the identify that synchronises the "
                                                r"line \(1 bad frame dropped\)$"):
            device.write(1, 1)
        assert device.timeouts == 1 and device.bad_frames == 1
        obs = call(Gate(device), "write_register", addr=1, data=1)
        assert (obs["code"], obs["retryable"]) == ("device-unavailable", True)
        assert obs["message"].startswith("the device is unavailable: the write was not sent")


def closed_tcp_port() -> int:
    """A loopback TCP port that nothing listens on (connecting is refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("url", "detail"),
    [("foo://bar", "unknown URL scheme"),
     ("/dev/regdev-no-such-port", "No such file or directory")],
)
def test_a_misnamed_port_repeats_the_accepted_forms(url: str, detail: str) -> None:
    """A port whose name is wrong is TransportError naming the port, the cause and the forms."""
    with pytest.raises(TransportError) as info:
        SerialDevice(url)
    modbus = f", or a Modbus device: {MODBUS_URL_FORMS}" if "://" in url else ""
    assert str(info.value) == (f"cannot open port {url}: {detail}; expected {URL_FORMS}"
                               f"{modbus}")


@pytest.mark.parametrize(
    ("url", "expected"),
    [("socket://localhost", "socket://HOST:PORT with a port 1..65535, e.g. socket://127.0.0.1"),
     ("socket://:7000", "socket://HOST:PORT with a port"),
     ("socket://host:99999", "socket://HOST:PORT with a port"),
     ("socket://host:0", "socket://HOST:PORT with a port"),
     ("rfc2217://host:x", "rfc2217://HOST:PORT with a port 1..65535, e.g. rfc2217://127")],
)
def test_network_urls_are_checked_up_front(url: str, expected: str) -> None:
    """socket:// and rfc2217:// need a host and a port 1..65535; said in one clear line."""
    with pytest.raises(TransportError) as info:
        SerialDevice(url)
    assert str(info.value).startswith(f"cannot open port {url}: expected {expected}")


@pytest.mark.timeout(20)
def test_a_port_that_is_fine_but_unavailable_does_not_list_the_forms() -> None:
    """Connection refused, or a port in use: the cause alone, without the list of URL forms."""
    url = f"socket://127.0.0.1:{closed_tcp_port()}"
    with pytest.raises(TransportError) as info:
        SerialDevice(url)
    assert str(info.value) == f"cannot open port {url}: Connection refused"
    with sim_process("--pty") as (port, _), SerialDevice(port), pytest.raises(
            TransportError) as info:
        SerialDevice(port)
    assert str(info.value) == (f"cannot open port {port}: it is in use (could not lock it "
                               "exclusively)")


@pytest.mark.parametrize(
    ("options", "message"),
    [({"timeout": 0}, r"timeout must be a number of seconds in 0\.001\.\.86400, got 0$"),
     ({"timeout": float("inf")}, "timeout must be"),
     ({"timeout": 5e-324}, r"timeout must be a number of seconds in 0\.001\.\.86400, got 5e-324"),
     ({"timeout": 1e300}, r"timeout must be a number of seconds in 0\.001\.\.86400, got 1e\+300"),
     ({"retries": -1}, "retries must be an int >= 0"),
     ({"baudrate": 0}, f"baudrate must be an int 1..{MAX_BAUDRATE}"),
     ({"baudrate": 4_000_000_000}, f"baudrate must be an int 1..{MAX_BAUDRATE}"),
     ({"first_seq": 0}, "first_seq must be an int 1..255"),
     ({"first_seq": 256}, "first_seq must be an int 1..255")],
)
def test_bad_settings_are_value_errors(options: dict[str, Any], message: str) -> None:
    """Settings out of range are refused before the port is opened."""
    with pytest.raises(ValueError, match=message):
        SerialDevice("loop://", **options)


@pytest.mark.timeout(20)
def test_rfc2217_errors_on_open_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """What pyserial raises on open besides its own errors (NotImplementedError for a setting
    the port type lacks, OverflowError, ValueError) is a TransportError, not a traceback."""
    for error, words in (
            (NotImplementedError("write_timeout is currently not supported"),
             "the port type does not support a setting asked for"),
            (OverflowError("signed integer is greater than maximum"),
             "a port setting is too large for the operating system"),
            (ValueError("invalid baudrate: 7"), "the port does not take this baud rate")):
        def refuse(*args: object, error: BaseException = error, **kwargs: object) -> None:
            raise error
        monkeypatch.setattr(serial, "serial_for_url", refuse)
        with pytest.raises(TransportError) as info:
            SerialDevice("rfc2217://127.0.0.1:7000")
        assert str(info.value) == f"cannot open port rfc2217://127.0.0.1:7000: {words}"


@pytest.mark.timeout(20)
def test_simulator_gone_is_device_unavailable_not_a_crash() -> None:
    """When the device side dies, calls fail as device-unavailable (nothing was sent, so the
    model may retry) and no pyserial error leaks."""
    with sim_process("--pty") as (port, process), SerialDevice(port, timeout=PATIENT) as device:
        gate = Gate(device)
        assert call(gate, "read_register", addr=0)["ok"] is True
        process.terminate()
        process.wait(timeout=5)
        obs = call(gate, "read_register", addr=0)
        assert (obs["ok"], obs["code"], obs["retryable"]) == (False, "device-unavailable", True)
        with pytest.raises(TransportError):
            device.read(0)


@pytest.mark.timeout(20)
def test_one_transaction_at_a_time_across_threads() -> None:
    """Threads sharing one SerialDevice each get their own reply (one lock per port)."""
    errors: list[BaseException] = []
    with sim_process("--pty") as (port, _), SerialDevice(port, timeout=2.0) as device:
        for addr in range(4):
            device.write(addr, addr * 11)

        def worker(addr: int) -> None:
            try:
                for _ in range(50):
                    assert device.read(addr) == addr * 11
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)

        threads = [threading.Thread(target=worker, args=(a,)) for a in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=15)
    assert errors == []


def test_map_exceptions_maps_backend_errors() -> None:
    """pyserial and OS errors become TransportError; a ValueError passes unless opening."""
    cases: list[tuple[BaseException, str]] = [
        (serial.SerialTimeoutException("Write timeout"),
         "port /dev/x failed: writing timed out (is the line blocked by flow control?)"),
        (serial.SerialException("socket disconnected"),
         "port /dev/x failed: the other end closed the connection"),
        (OSError(5, "Input/output error"), "port /dev/x failed: Input/output error"),
    ]
    for raised, message in cases:
        with pytest.raises(TransportError) as info, map_exceptions("/dev/x"):
            raise raised
        assert info.value.__cause__ is raised and str(info.value) == message
    with pytest.raises(ValueError), map_exceptions("/dev/x"):
        raise ValueError("a bug, not a port")
    with pytest.raises(TransportError) as opening, map_exceptions("/dev/x", opening=True):
        raise ValueError("bad baud")
    assert str(opening.value) == ("cannot open port /dev/x: the port does not take the settings "
                                  "asked for")


def test_close_is_idempotent_and_the_next_call_reopens() -> None:
    """close() twice is fine; a later transaction opens the port again."""
    device = SerialDevice("loop://", timeout=0.05, retries=0)
    device.close()
    device.close()
    with pytest.raises(DeviceTimeout):  # loop:// echoes: no reply, but the port was reopened
        device.identify()
    assert device._port is not None
    device.close()


def test_state_id_names_the_port() -> None:
    """Keys used over a port are scoped to the port's URL, stable across processes."""
    with sim_thread() as url, SerialDevice(url) as device:
        assert url.startswith("socket://127.0.0.1:")
        assert device.state_id() == "serial:" + url


@pytest.mark.parametrize(("url", "state_id"), [
    ("socket://127.0.0.1:7000", "serial:socket://127.0.0.1:7000"),
    ("SOCKET://LocalHost:7000", "serial:socket://localhost:7000"),
    ("RFC2217://Bench-1.LAN:7000?ign_set_control", "serial:rfc2217://bench-1.lan:7000"),
    ("socket://127.0.0.1:7000/", "serial:socket://127.0.0.1:7000"),
    ("socket://127.0.0.1:07000", "serial:socket://127.0.0.1:7000"),
    ("socket://127.0.0.1:7000/?logging=debug", "serial:socket://127.0.0.1:7000"),
    ("socket://[::1]:7000", "serial:socket://[::1]:7000"),
    ("Loop://?logging=Debug", "serial:loop://?logging=Debug"),  # only the scheme: no host
])
def test_state_id_of_a_url_is_one_name_for_every_spelling(url: str, state_id: str) -> None:
    """A network URL names the device by scheme, host and port: case, leading zeros, a
    trailing slash and options do not make another device; other URLs as typed but for the
    scheme's case."""
    assert port_state_id(url) == state_id


@pytest.mark.skipif(os.name != "posix", reason="symbolic links and realpath: POSIX")
def test_state_id_of_a_path_is_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A symbolic link, a relative path and the file they reach name one device."""
    target = tmp_path / "ttyUSB0"
    target.touch()
    (tmp_path / "by-id").mkdir()
    link = tmp_path / "by-id" / "usb-FTDI_FT232R-if00-port0"
    link.symlink_to("../ttyUSB0")
    monkeypatch.chdir(tmp_path / "by-id")
    resolved = "serial:" + os.path.realpath(target)
    assert port_state_id(str(link)) == port_state_id("../ttyUSB0") == resolved
    assert port_state_id(str(target)) == resolved


@pytest.mark.timeout(30)
@pytest.mark.skipif(os.name != "posix", reason="needs a pty")
def test_a_reset_through_the_pty_ends_the_keys_of_its_link(tmp_path: Path) -> None:
    """The breaker's case: a key stored through a symlink to a pty is not replayed after a reset
    through the pty's own name, and the write runs again."""
    link = tmp_path / "devlink"
    raw = json.dumps({"tool": "write_register", "arguments": {"addr": 3, "data": 7},
                      "idempotency_key": "op-1"})
    db = tmp_path / "audit.db"
    with sim_process("--pty", "--link", str(link)) as (port, _):
        assert port == str(link) and link.is_symlink()
        pty = os.path.realpath(link)
        with SerialDevice(port, timeout=2.0) as device, Gate(device, audit=AuditLog(db)) as gate:
            assert device.state_id() == f"serial:{pty}"
            assert gate.handle(raw).to_dict()["ok"] is True
        with SerialDevice(pty, timeout=2.0) as device, Gate(device, audit=AuditLog(db)) as gate:
            assert device.state_id() == f"serial:{pty}"
            gate.reset_device()
            assert device.read(3) == 0
        with SerialDevice(port, timeout=2.0) as device, Gate(device, audit=AuditLog(db)) as gate:
            again = gate.handle(raw).to_dict()
            assert again == {"ok": True, "tool": "write_register",
                             "result": {"addr": 3, "data": 7}}  # run, not "replay": true
            assert device.read(3) == 7


# --- the POSIX fast path: select and os.read up to the line feed ----------------------------------


class _Duplicating:
    """A hand-made device of the serial protocol on 127.0.0.1 (the simulator's firmware
    answers) that can send its next reply twice (``duplicate_next``) and ignore requests
    (``deaf``)."""

    def __init__(self, firmware: sim.Firmware) -> None:
        self.firmware = firmware
        self.duplicate_next = False
        self.deaf = False
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"socket://127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            client, _ = self._server.accept()
            with client, client.makefile("rb") as lines:
                for line in lines:
                    request = cast(wire.Request, wire.decode(line.rstrip(b"\n")))
                    if self.deaf:
                        continue
                    reply = wire.encode(self.firmware.answer(request))
                    if self.duplicate_next:
                        self.duplicate_next = False
                        reply += reply
                    client.sendall(reply)

    def close(self) -> None:
        self._server.close()


@pytest.mark.timeout(60)
def test_a_duplicated_reply_is_never_taken_for_a_later_requests() -> None:
    """The serial protocol has no window for a reply sent twice: the copy carries the old
    sequence number, so a later read gets what the device holds and a later write the device
    never executed is a timeout, never done."""
    firmware = sim.Firmware()
    firmware.registers.write(3, 251)
    fake = _Duplicating(firmware)
    try:
        with SerialDevice(fake.url, timeout=TIMEOUT) as device:
            assert device.read(5) == 0  # (after the synchronising identify)
            fake.duplicate_next = True
            assert device.read(0) == 0
            assert device.read(3) == 251
            fake.duplicate_next = True
            assert device.write(2, 7) == 7
            fake.deaf = True
            with pytest.raises(DeviceTimeout, match="may or may not have happened"):
                device.write(2, 7)
            assert device.stale_replies == 2
    finally:
        fake.close()


@pytest.mark.timeout(30)
def test_a_usual_reply_is_read_by_its_size() -> None:
    """A read's and a write's reply (15 bytes) is asked of pyserial by its size, then by
    what is left of it: never byte by byte (an error reply of another size:
    test_device_refusal_is_typed_and_not_retried)."""
    with sim_process("--pty") as (port, _), SerialDevice(port, timeout=2.0) as device:
        device.read(0)  # the line synchronised (an identify, of a text of any length)
        line = device._port
        assert line is not None
        asked: list[tuple[int, int]] = []
        read = line.read

        def counting_read(size: int = 1) -> bytes:
            data: bytes = read(size)
            asked.append((size, len(data)))
            return data

        line.read = counting_read  # type: ignore[method-assign]
        for call in (lambda: device.read(3), lambda: device.write(4, 90)):
            asked.clear()
            call()
            assert asked[0][0] == 15
            got = 0
            for size, count in asked:
                assert size == 15 - got
                got += count
            assert got == 15
