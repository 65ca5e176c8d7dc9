"""The serial backend end to end: over a real pty to the simulator in another process, faults."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import serial

import regdev_firmware_sim as sim
from conftest import EXAMPLES
from firmware import sim_process, sim_thread
from regdev import (
    DeviceError,
    DeviceRefused,
    DeviceTimeout,
    Gate,
    RegisterRangeError,
    TransportError,
)
from regdev import _protocol as wire
from regdev._replay import load_replay, run_replay
from regdev._serial import URL_FORMS, SerialDevice, map_exceptions

#: Host timeout for the fault tests, and how late a delay fault replies (beyond it).
TIMEOUT = 0.4
DELAY = 0.5


def call(gate: Gate, tool: str, **arguments: int) -> dict[str, Any]:
    """Run one canonical call through the gate; return the observation as JSON data."""
    return gate.handle(json.dumps({"tool": tool, "arguments": arguments})).to_dict()


# --- end to end over a pty ------------------------------------------------------------------------


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
        assert device.identify() == sim.IDENTITY
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


# --- faults ---------------------------------------------------------------------------------------

#: fault kind -> (the faulted write's verdict code, or None for success; register 5 after it)
FAULT_OUTCOMES = {
    "drop": ("device-timeout", 0x5A),
    "corrupt": ("device-timeout", 0x5A),
    "delay": ("device-timeout", 0x5A),
    "garbage": (None, 0x5A),
    "disconnect": ("device-error", 0x5A),
    "busy": ("device-error", 0),
}


def fault_args(kind: str, tmp_path: Path, *extra: str) -> list[str]:
    where = ["--pty", "--link", str(tmp_path / "port")]
    return [*where, "--fault", f"{kind}=1", "--delay", str(DELAY), "--seed", "3", *extra]


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind", list(FAULT_OUTCOMES))
def test_faulted_write_is_never_a_success_and_the_next_call_succeeds(
        kind: str, tmp_path: Path) -> None:
    """One faulted write: a typed failure (or success for garbage), then the link recovers."""
    code, after = FAULT_OUTCOMES[kind]
    args = fault_args(kind, tmp_path, "--fault-after", "1", "--fault-count", "1")
    with sim_process(*args) as (port, _), SerialDevice(port, timeout=TIMEOUT,
                                                       retries=0) as device:
        gate = Gate(device)
        assert call(gate, "read_register", addr=5) == {
            "ok": True, "tool": "read_register", "result": {"addr": 5, "data": 0}}
        faulted = call(gate, "write_register", addr=5, data=0x5A)
        if code is None:
            assert faulted["ok"] is True and faulted["result"] == {"addr": 5, "data": 0x5A}
        else:
            assert faulted["ok"] is False
            assert (faulted["stage"], faulted["code"]) == ("execute", code)
        if code == "device-timeout":
            assert faulted["message"] == (
                "the device did not answer in time: no valid reply within 0.4 s; the change "
                "may or may not have happened: read the register back")
        following = call(gate, "read_register", addr=5)
        assert following == {"ok": True, "tool": "read_register",
                             "result": {"addr": 5, "data": after}}


@pytest.mark.timeout(20)
def test_disconnect_over_tcp_reconnects(tmp_path: Path) -> None:
    """A cut TCP link is a device-error; the next transaction reconnects and succeeds."""
    args = ["--tcp", "127.0.0.1:0", "--fault", "disconnect=1", "--fault-count", "1"]
    with sim_process(*args) as (url, _), SerialDevice(url, timeout=TIMEOUT) as device:
        gate = Gate(device)
        failed = call(gate, "write_register", addr=1, data=9)
        assert (failed["ok"], failed["code"]) == (False, "device-error")
        assert "socket disconnected" in failed["message"]
        assert call(gate, "read_register", addr=1)["result"] == {"addr": 1, "data": 9}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind", ["drop", "corrupt", "delay", "busy"])
def test_reads_are_retried_after_a_fault(kind: str, tmp_path: Path) -> None:
    """With retries=1 a read survives one faulted reply; the retry gets the right value."""
    args = fault_args(kind, tmp_path, "--fault-after", "1", "--fault-count", "1")
    with sim_process(*args) as (port, _), SerialDevice(port, timeout=TIMEOUT,
                                                       retries=1) as device:
        assert device.write(4, 44) == 44
        assert device.read(4) == 44
        assert device.timeouts == (0 if kind == "busy" else 1)


@pytest.mark.timeout(60)
def test_random_faults_never_report_an_unacknowledged_write(tmp_path: Path) -> None:
    """Seeded mixed faults: every observation is a success that is true, or a typed failure."""
    args = ["--pty", "--fault", "drop=0.1,corrupt=0.1,garbage=0.2,busy=0.1,delay=0.05",
            "--delay", "0.3", "--seed", "11", "--fault-count", "10"]
    # What each register may hold: one value when known, several after a failed write.
    possible: list[set[int]] = [{0} for _ in range(16)]
    failures = successes = 0
    with sim_process(*args) as (port, _), SerialDevice(port, timeout=0.25,
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
                assert obs["code"] in ("device-timeout", "device-error")
        assert failures >= 3 and successes >= 10
        device.retries = 3
        final = device.snapshot()
    assert all(final[addr] in possible[addr] for addr in range(16))


# --- the backend's own rules ----------------------------------------------------------------------


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
def test_device_refusal_is_typed_and_not_retried() -> None:
    """An `e ADDR` answer is DeviceRefused with its code, sent once even with retries."""

    class Counting(sim.Firmware):
        requests = 0

        def answer(self, request: wire.Request) -> wire.Reply:
            Counting.requests += 1
            return wire.ErrorReply(request.seq, "ADDR")

    with sim_thread(Counting()) as url, SerialDevice(url, retries=3) as device:
        with pytest.raises(DeviceRefused, match=r"no such register address \(ADDR\)") as info:
            device.read(9)
        assert info.value.code == "ADDR"
        assert Counting.requests == 1


def test_out_of_range_access_never_reaches_the_line() -> None:
    """addr 16 or data 256 is refused before anything is sent (defence in depth)."""
    with SerialDevice("loop://", timeout=0.05) as device:
        with pytest.raises(RegisterRangeError):
            device.read(16)
        with pytest.raises(RegisterRangeError):
            device.write(0, 256)
        assert device._port is not None and device._port.in_waiting == 0


@pytest.mark.timeout(10)
def test_an_echoing_line_times_out_instead_of_answering() -> None:
    """On loop:// the host hears its own request: dropped as an echo, then a timeout."""
    with SerialDevice("loop://", timeout=0.05, retries=1) as device:
        with pytest.raises(DeviceTimeout,
                           match=r"no valid reply within 0.05 s \(ReadRequest, seq 2\)"):
            device.read(1)
        assert device.timeouts == 2 and device.bad_frames == 2


@pytest.mark.parametrize(
    ("url", "detail"),
    [("foo://bar", "invalid URL, protocol 'foo' not known"),
     ("/dev/regdev-no-such-port", "No such file or directory"),
     ("socket://localhost", "Could not open port socket://localhost")],
)
def test_bad_port_errors_repeat_the_accepted_forms(url: str, detail: str) -> None:
    """A port that cannot be opened is TransportError naming the port, the cause and the forms."""
    with pytest.raises(TransportError) as info:
        SerialDevice(url)
    message = str(info.value)
    assert message.startswith(f"cannot open port `{url}`: ")
    assert detail in message and message.endswith(f"expected {URL_FORMS}")


@pytest.mark.parametrize(
    ("options", "message"),
    [({"timeout": 0}, "timeout must be a number of seconds > 0"),
     ({"timeout": float("inf")}, "timeout must be"),
     ({"retries": -1}, "retries must be an int >= 0"),
     ({"baudrate": 0}, "baudrate must be a positive int")],
)
def test_bad_settings_are_value_errors(options: dict[str, Any], message: str) -> None:
    """Settings out of range are refused before the port is opened."""
    with pytest.raises(ValueError, match=message):
        SerialDevice("loop://", **options)


@pytest.mark.timeout(20)
def test_port_is_opened_exclusively() -> None:
    """A second SerialDevice on the same pty is refused while the first holds it."""
    with (sim_process("--pty") as (port, _), SerialDevice(port),
          pytest.raises(TransportError, match="exclusively lock")):
        SerialDevice(port)


@pytest.mark.timeout(20)
def test_simulator_gone_is_a_device_error_not_a_crash() -> None:
    """When the device side dies, calls fail as device-error and no pyserial error leaks."""
    with sim_process("--pty") as (port, process), SerialDevice(port, timeout=0.3) as device:
        gate = Gate(device)
        assert call(gate, "read_register", addr=0)["ok"] is True
        process.terminate()
        process.wait(timeout=5)
        obs = call(gate, "read_register", addr=0)
        assert (obs["ok"], obs["code"]) == (False, "device-error")
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
    """pyserial and OS errors become regdev's; a ValueError passes unless opening."""
    cases: list[tuple[BaseException, type[BaseException]]] = [
        (serial.SerialTimeoutException("Write timeout"), DeviceTimeout),
        (serial.SerialException("read failed"), TransportError),
        (OSError(5, "Input/output error"), TransportError),
    ]
    for raised, expected in cases:
        with pytest.raises(expected) as info, map_exceptions("/dev/x"):
            raise raised
        assert info.value.__cause__ is raised
    with pytest.raises(ValueError), map_exceptions("/dev/x"):
        raise ValueError("a bug, not a port")
    with pytest.raises(TransportError, match="cannot open port"), map_exceptions(
            "/dev/x", opening=True):
        raise ValueError("bad baud")


def test_close_is_idempotent_and_the_next_call_reopens() -> None:
    """close() twice is fine; a later transaction opens the port again."""
    device = SerialDevice("loop://", timeout=0.05, retries=0)
    device.close()
    device.close()
    with pytest.raises(DeviceTimeout):  # loop:// echoes: no reply, but the port was reopened
        device.identify()
    assert device._port is not None
    device.close()
