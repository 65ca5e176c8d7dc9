"""The Modbus backend end to end: the wild cases over Modbus TCP and RTU on a pty against a plain
pymodbus server and against regdev's simulator; every fault kind; writes run at most once where
pymodbus's own client, with its default retries, runs them twice; exception codes; URLs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pymodbus.client import ModbusSerialClient, ModbusTcpClient
from pymodbus.exceptions import ModbusException
from pymodbus.framer import FramerType
from pymodbus.pdu.register_message import WriteSingleRegisterResponse

import regdev_firmware_sim as sim
from conftest import EXAMPLES, ROOT
from regdev import (
    DeviceBusy,
    DeviceError,
    DeviceRefused,
    DeviceTimeout,
    Gate,
    RegisterRangeError,
    TransportError,
)
from regdev.agents._replay import load_replay, run_replay
from regdev.devices._modbus import ModbusDevice, parse_modbus_url
from regdev_modbus_sim import Background
from support.modbus_servers import Duplicating, Plain

#: Host timeout for a call meant to time out, and how late a delay fault replies: 3x beyond
#: it, so a loaded machine cannot make the late reply look timely.
TIMEOUT = 0.25
DELAY = 0.75
#: Timeout for the calls that must succeed: a loaded machine may be slow to answer.
PATIENT = 5.0
SHARED_CASES = ROOT.parent / "shared" / "cases"
FAULT_KINDS = ("drop", "corrupt", "delay", "garbage", "disconnect", "busy")


def call(gate: Gate, tool: str, **arguments: int) -> dict[str, Any]:
    """One canonical call through the gate; the observation as JSON data."""
    return gate.handle(json.dumps({"tool": tool, "arguments": arguments})).to_dict()


def url_of(server: Background) -> str:
    """The regdev URL of a simulator: its own for TCP, under modbus+rtu:// for RTU."""
    return server.url if server.url.startswith("modbus+") else f"modbus+rtu://{server.url}"


@contextmanager
def device_on(kind: str, framing: str) -> Iterator[tuple[ModbusDevice, list[int] | None]]:
    """A ModbusDevice on a plain pymodbus server or on the simulator; yield it and, for the
    plain server, its live registers (read after a request)."""
    if kind == "plain":
        with Plain(framing) as plain, ModbusDevice(plain.url, timeout=PATIENT) as device:
            yield device, plain.registers
            device.snapshot()  # the action hook saw the registers
            assert plain.registers[:16] == device.snapshot()
    else:
        with Background(framing) as server, ModbusDevice(url_of(server),
                                                         timeout=PATIENT) as device:
            yield device, None


def case_files() -> list[Path]:
    shared = sorted(SHARED_CASES.glob("*.jsonl")) if SHARED_CASES.is_dir() else []
    return [EXAMPLES / "wild-calls.jsonl", *shared]


# --- the shared cases, over both framings, against both servers -----------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("framing", ["tcp", "pty"])
@pytest.mark.parametrize("kind", ["plain", "sim"])
def test_wild_cases_give_the_in_process_verdicts_and_registers(kind: str, framing: str) -> None:
    """Every shared case file through Modbus: the observations and the registers are those of
    the in-process device, with no timeout and no stale reply."""
    for path in case_files():
        records = load_replay(path)
        local = Gate()
        expected = [o.observation.to_dict() for o in run_replay(records, local)]
        with device_on(kind, framing) as (device, _):
            got = [o.observation.to_dict() for o in run_replay(records, Gate(device))]
            assert got == expected, path
            assert device.snapshot() == local.device.snapshot()
            assert device.timeouts == 0 and device.stale_replies == 0
    assert local.device.snapshot() == [0, 0, 0, 200] + [0] * 12


@pytest.mark.timeout(60)
@pytest.mark.parametrize("framing", ["tcp", "pty"])
def test_every_operation_against_pymodbus_datastore(framing: str) -> None:
    """read, write, block write, masked write, snapshot and reset on pymodbus's own datastore:
    what the server holds is what regdev says."""
    with Plain(framing) as plain, ModbusDevice(plain.url, timeout=PATIENT) as device:
        assert device.write(3, 0xC8) == 0xC8
        assert device.read(3) == 0xC8
        assert device.write_block(5, [1, 2, 3]) == [1, 2, 3]
        assert device.write_masked(3, 0x0F, 0x05) == 0xC5
        assert device.snapshot() == [0, 0, 0, 0xC5, 0, 1, 2, 3] + [0] * 8
        assert plain.registers[:16] == [0, 0, 0, 0xC5, 0, 1, 2, 3] + [0] * 8
        device.reset()
        assert device.snapshot() == [0] * 16
        assert plain.executed[(6, 3, (0xC8,))] == 1
        assert plain.executed[(16, 5, (1, 2, 3))] == 1
        assert plain.executed[(22, 3, (0xC5,))] == 1
        assert plain.executed[(16, 0, (0,) * 16)] == 1


@pytest.mark.timeout(30)
def test_base_address_moves_the_registers() -> None:
    """base=4: register 0 is holding register 4."""
    with Plain("tcp") as plain, ModbusDevice(plain.url + "&base=4", timeout=PATIENT,
                                             count=8) as device:
        device.write(0, 7)
        device.write(7, 9)
        assert plain.registers[:12] == [0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 9]
        with pytest.raises(RegisterRangeError, match=r"registers are at 0\.\.7"):
            device.write(8, 1)



@pytest.mark.timeout(30)
@pytest.mark.parametrize("count", [4, 16, 40])
def test_count_is_the_map_the_gate_offers(count: int) -> None:
    """count=N without a map: the device's map has N plain registers at 0..N-1, so the gate's
    tools offer exactly those, and addr N is refused at validate (nothing is sent)."""
    with Plain("tcp", registers=count + 1) as plain, ModbusDevice(plain.url, timeout=PATIENT,
                                                                  count=count) as device:
        assert [register.addr for register in device.regmap.registers] == list(range(count))
        assert device.regmap.is_default is (count == 16)
        gate = Gate(device)
        assert gate.tools["write_register"].input_schema["properties"]["addr"]["maximum"] \
            == count - 1
        last = gate.handle(json.dumps({"tool": "write_register",
                                       "arguments": {"addr": count - 1, "data": 9}}))
        assert last.ok and plain.registers[count - 1] == 9
        past = gate.handle(json.dumps({"tool": "write_register",
                                       "arguments": {"addr": count, "data": 9}}))
        assert not past.ok and past.code == "range-addr"
        assert plain.registers[count] == 0  # nothing was sent


# --- faults -------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", FAULT_KINDS)
@pytest.mark.parametrize("framing", ["tcp", "pty"])
def test_a_faulted_write_is_never_a_success_and_the_next_call_succeeds(
        framing: str, kind: str, tmp_path: Path) -> None:
    """One fault on a write's reply: a typed failure (unknown outcome, or busy: not run), never
    a false success (RTU finds a reply behind garbage: a true one); the write ran at most
    once, counted by the server; the next call succeeds."""
    link = tmp_path / "modbus-pty" if framing == "pty" else None
    # Replies before the faulted one: two calls, and on RTU the synchronising read first.
    faults = sim.Faults({kind: 1.0}, after=2 + (framing == "pty"), count=1, delay=DELAY)
    with Background(framing, faults, link=link) as server:
        url = f"modbus+rtu://{link}" if link is not None else url_of(server)
        with ModbusDevice(url, timeout=PATIENT, retries=0) as device:
            gate = Gate(device)
            assert call(gate, "write_register", addr=1, data=0x11)["ok"]
            assert call(gate, "read_register", addr=1)["result"] == {"addr": 1, "data": 0x11}
            device.timeout = TIMEOUT
            faulted = call(gate, "write_register", addr=2, data=0x22)
            if kind == "garbage" and framing == "pty":  # RTU finds the reply past the noise
                assert faulted == {"ok": True, "tool": "write_register",
                                   "result": {"addr": 2, "data": 0x22}}
                assert device._codec.skipped > 0
            elif kind == "busy":
                assert faulted["code"] == "device-busy"
                assert "not executed" in faulted["message"]
            else:
                assert faulted["code"] == "device-timeout"
                assert "the write may or may not have happened" in faulted["message"]
            device.timeout = PATIENT
            after = call(gate, "read_register", addr=2)
            assert after == {"ok": True, "tool": "read_register",
                             "result": {"addr": 2, "data": 0 if kind == "busy" else 0x22}}
        assert server.faults.injected[kind] == 1
        assert server.model.executed[(6, 2, (0x22,))] == (0 if kind == "busy" else 1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["drop", "corrupt", "delay", "garbage", "busy"])
@pytest.mark.parametrize("framing", ["tcp", "pty"])
def test_reads_are_retried_after_a_fault(framing: str, kind: str) -> None:
    """A read whose reply is faulted is sent again and succeeds. On RTU a delayed reply holds
    the device up for 3 timeouts (it answers in order), so that read takes more attempts."""
    faults = sim.Faults({kind: 1.0}, after=1 + (framing == "pty"), count=1, delay=DELAY)
    retries = 8 if (kind, framing) == ("delay", "pty") else 1
    with Background(framing, faults) as server, ModbusDevice(
            url_of(server), timeout=PATIENT, retries=retries) as device:
        device.write(4, 44)
        device.timeout = TIMEOUT if kind != "busy" else PATIENT
        assert device.read(4) == 44
        in_place = kind == "busy" or (kind, framing) == ("garbage", "pty")  # no resend
        assert (device.timeouts + device.bad_replies == 0) == in_place
        if (kind, framing) == ("garbage", "pty"):
            assert device._codec.skipped > 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("framing", ["tcp", "pty"])
def test_mixed_seeded_faults_never_report_a_false_success(framing: str) -> None:
    """Every fault kind at once, seeded: each observation is a success that is true (the
    server holds what was read or written), or a typed failure; a write never runs twice."""
    faults = sim.Faults({"drop": 0.1, "corrupt": 0.1, "garbage": 0.1, "busy": 0.1,
                         "delay": 0.05}, seed=11, count=12, delay=DELAY)
    possible: list[set[int]] = [{0} for _ in range(16)]  # what each register may hold
    failures = successes = 0
    with Background(framing, faults) as server, ModbusDevice(
            url_of(server), timeout=TIMEOUT, retries=0) as device:
        gate = Gate(device)
        for step in range(40):
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
                    assert server.model.executed[(6, addr, (step,))] == 1
                    possible[addr] = {step}
                else:
                    possible[addr].add(step)
            if obs["ok"]:
                successes += 1
            else:
                failures += 1
                assert obs["code"] in ("device-timeout", "device-busy", "device-unavailable")
        device.timeout = PATIENT
        final = device.snapshot()
    assert failures >= 3 and successes >= 10
    assert all(final[addr] in possible[addr] for addr in range(16))
    assert all(n == 1 for n in server.model.executed.values())


def _write_all(write: Any, count: int) -> None:
    for step in range(1, count + 1):
        write(step % 16, step)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["drop", "delay"])
@pytest.mark.parametrize("framing", ["tcp", "pty"])
def test_writes_run_at_most_once_where_pymodbus_default_retries_run_them_twice(
        framing: str, kind: str) -> None:
    """The same seeded faults on two runs of 12 distinct writes: through regdev (retries=3 for
    reads) every write runs at most once on the server and every success is true; pymodbus's
    own client with its default retries runs some write twice, or takes a reply for another
    request's (the anchor regdev beats)."""
    rates = {kind: 0.3}
    writes = 12

    # regdev
    with Background(framing, sim.Faults(rates, seed=5, delay=DELAY)) as server, \
            ModbusDevice(url_of(server), timeout=TIMEOUT, retries=3) as device:
        gate = Gate(device)
        reported: dict[tuple[int, int], str] = {}

        def through_gate(addr: int, data: int) -> None:
            observation = call(gate, "write_register", addr=addr, data=data)
            reported[(addr, data)] = "ok" if observation["ok"] else observation["code"]

        _write_all(through_gate, writes)
        executed = server.model.executed
        assert server.faults.injected[kind] >= 2
        # ok: ran once; device-timeout: at most once; device-unavailable (the RTU line could
        # not be synchronised first): not sent, so never ran.
        runs = {"ok": {1}, "device-timeout": {0, 1}, "device-unavailable": {0}}
        assert all(executed[(6, a, (d,))] in runs[code] for (a, d), code in reported.items())
        assert "device-timeout" in reported.values()

    # pymodbus's client, default retries (3), same seed
    with Background(framing, sim.Faults(rates, seed=5, delay=DELAY)) as server:
        if framing == "tcp":
            host, port = server.url.removeprefix("modbus+tcp://").rsplit(":", 1)
            client: Any = ModbusTcpClient(host, port=int(port), timeout=TIMEOUT)
        else:
            client = ModbusSerialClient(server.url, framer=FramerType.RTU, timeout=TIMEOUT)
        assert client.retries == 3  # pymodbus's default
        misaligned = 0

        def stock(addr: int, data: int) -> None:
            nonlocal misaligned
            try:
                reply = client.write_register(addr, data, device_id=1)
            except ModbusException:
                return  # a failure it reports as one
            if not (isinstance(reply, WriteSingleRegisterResponse)
                    and (reply.address, list(reply.registers)) == (addr, [data])):
                misaligned += 1

        client.connect()
        try:
            _write_all(stock, writes)
        finally:
            client.close()
        duplicates = sum(1 for (function, _, _), n in server.model.executed.items()
                         if function == 6 and n > 1)
        assert duplicates + misaligned > 0


# --- exception codes, values, URLs ------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("code", "error", "verdict", "words"), [
    (0x03, DeviceRefused, "device-error", "does not accept this value (illegal data value); "
                                          "not executed (Modbus exception 03)"),
    (0x04, DeviceError, "device-error", "failed while executing it (server device failure)"),
    (0x05, DeviceTimeout, "device-timeout", "will finish it later"),
    (0x06, DeviceBusy, "device-busy", "busy (server device busy); not executed"),
    (0x0B, DeviceTimeout, "device-timeout", "may or may not have happened"),
])
def test_exception_codes_map_to_verdicts(code: int, error: type[Exception], verdict: str,
                                         words: str) -> None:
    """An exception reply from pymodbus's server is the typed error, and the gate's verdict
    says it in the model's words; a busy write is not retried."""
    with Plain("tcp", refuse={13: code}) as plain, ModbusDevice(plain.url,
                                                               timeout=PATIENT) as device:
        with pytest.raises(error, match="Modbus exception") as raised:
            device.write(1, 13)
        assert words in str(raised.value)
        observation = call(Gate(device), "write_register", addr=1, data=13)
        assert (observation["ok"], observation["code"]) == (False, verdict)
        assert words in observation["message"]
        assert device.read(1) == 0


@pytest.mark.timeout(30)
def test_an_address_the_server_lacks_is_exception_02() -> None:
    """A register past the server's datastore: refused (02), as device-error."""
    with Plain("tcp", registers=8) as plain, ModbusDevice(plain.url, timeout=PATIENT) as device:
        with pytest.raises(DeviceRefused, match="no such register address") as raised:
            device.write(10, 1)
        assert raised.value.code == "02"
        observation = call(Gate(device), "read_register", addr=12)
        assert observation["code"] == "device-error"


@pytest.mark.timeout(30)
def test_a_holding_register_over_a_byte_is_a_device_error() -> None:
    """The 8-bit model: a holding register holding 0x1234 is not a byte."""
    with Plain("tcp", values=0x1234) as plain, ModbusDevice(plain.url, timeout=PATIENT) as device, \
            pytest.raises(DeviceError, match="holds 0x1234, not a byte"):
        device.read(2)


@pytest.mark.timeout(30)
def test_a_unit_the_server_lacks_is_never_a_success() -> None:
    """A unit id pymodbus's server does not serve (it answers exception 04, its datastore
    failing to find the unit): a failure that says the write may have run, not a success."""
    with Plain("tcp") as plain:
        url = plain.url.replace("unit=1", "unit=9")
        with ModbusDevice(url, timeout=PATIENT) as device:
            observation = call(Gate(device), "write_register", addr=1, data=1)
    assert (observation["ok"], observation["code"]) == (False, "device-error")
    assert "may have run in part" in observation["message"]
    assert plain.executed[(6, 1, (1,))] == 0


def test_urls_parse_to_their_targets() -> None:
    """The URL forms, with their defaults and a pyserial URL's own query kept."""
    tcp = parse_modbus_url("modbus+tcp://Example.com?unit=3&base=100")
    assert (tcp.framing, tcp.host, tcp.tcp_port, tcp.unit, tcp.base) == \
        ("tcp", "example.com", 502, 3, 100)
    rtu = parse_modbus_url("modbus+rtu:///dev/ttyUSB0?baud=9600&parity=n&unit=7&echo=1")
    assert (rtu.port, rtu.baudrate, rtu.parity, rtu.stopbits, rtu.unit, rtu.echo) == \
        ("/dev/ttyUSB0", 9600, "N", 1, 7, True)
    nested = parse_modbus_url("modbus+rtu://socket://127.0.0.1:5020?logging=debug&unit=2")
    assert (nested.port, nested.unit, nested.parity) == \
        ("socket://127.0.0.1:5020?logging=debug", 2, "N")


@pytest.mark.parametrize(("url", "words"), [
    ("modbus+tcp://127.0.0.1:0", "a port 1..65535"),
    ("modbus+tcp://:502", "a port 1..65535"),
    ("modbus+tcp://h:1?unit=0", "unit must be an integer 1..255"),
    ("modbus+rtu:///dev/x?unit=248", "unit must be an integer 1..247"),
    ("modbus+rtu:///dev/x?parity=X", "parity must be N, E or O"),
    ("modbus+tcp://h:1?baud=9600", "`baud` is not a modbus+tcp key"),
    ("modbus+rtu://?unit=1", "no serial port named"),
    ("modbus+tcp://h:1?unit=1&unit=2", "given twice"),
    ("modbus+tcp://h:1?base=65535", "past holding register 65535"),
])
def test_a_bad_url_repeats_the_forms(url: str, words: str) -> None:
    """One line naming what is wrong, then the accepted forms."""
    with pytest.raises(TransportError) as raised:
        ModbusDevice(url)
    assert words in str(raised.value)
    assert "\n" not in str(raised.value)
    if "past" not in words:
        assert "expected modbus+tcp://HOST[:PORT]?unit=1" in str(raised.value)


def test_nothing_listening_is_transport_error() -> None:
    """A TCP port with no server: not sent, one line with the OS's words."""
    with pytest.raises(TransportError, match=r"cannot connect to 127\.0\.0\.1:1 .*refused"):
        ModbusDevice("modbus+tcp://127.0.0.1:1")


@pytest.mark.timeout(30)
def test_rtu_port_is_opened_exclusively() -> None:
    """A second ModbusDevice on the same pty is refused while the first holds it."""
    with Plain("pty") as plain, ModbusDevice(plain.url, timeout=PATIENT) as first:
        with pytest.raises(TransportError, match="in use"):
            ModbusDevice(plain.url)
        first.close()
        with ModbusDevice(plain.url, timeout=PATIENT) as second:
            assert second.read(0) == 0


@pytest.mark.timeout(30)
def test_state_id_and_identify_name_the_device() -> None:
    """state_id names framing, port, unit and base; identify describes it without a request."""
    with Plain("tcp") as plain, ModbusDevice(plain.url + "&base=2", count=4) as device:
        port = plain.url.split("//")[1].split("?")[0]
        assert device.state_id() == f"modbus:tcp://{port}?unit=1"
        assert device.identity() == (f"modbus:tcp://{port}?unit=1", None)  # no epoch to say
        assert device.identify() == (f"Modbus TCP {port}, unit 1, 4 x 8-bit in holding "
                                     "registers 2..5")


@pytest.mark.timeout(30)
def test_a_setting_the_port_refuses_is_one_transport_error() -> None:
    """termios.error (not an OSError) from pyserial is mapped too: a Linux pty set to even
    parity refuses the setting when it is opened again."""
    with Plain("pty") as plain:
        url = plain.url + "&parity=E"
        ModbusDevice(url).close()
        with pytest.raises(TransportError) as raised:
            ModbusDevice(url)
    assert str(raised.value).endswith(": Invalid argument")
    assert str(raised.value).startswith("cannot open port /dev/")


@pytest.mark.timeout(30)
def test_a_keyed_write_sent_again_to_a_modbus_device_is_unconfirmed(tmp_path: Path) -> None:
    """A Modbus device says no reset epoch, so an idempotency key sent again is neither
    answered from the records nor run again: idempotency-unconfirmed (docs/safety.md), and
    the server counts the write once."""
    from regdev import AuditLog  # noqa: PLC0415

    call_ = {"tool": "write_register", "arguments": {"addr": 5, "data": 7}}
    with Plain("tcp") as plain, ModbusDevice(plain.url, timeout=PATIENT) as device, \
            Gate(device, audit=AuditLog(tmp_path / "audit.db")) as gate:
        first = gate.handle_call(call_, idempotency_key="k1")
        second = gate.handle_call(call_, idempotency_key="k1")
        assert first.ok and (second.code, second.replay) == ("idempotency-unconfirmed", False)
        assert plain.executed[(6, 5, (7,))] == 1


@pytest.mark.timeout(30)
def test_an_echoing_rs485_line_is_noticed_and_its_echo_never_acknowledges() -> None:
    """A line that hands back every byte sent (RS-485 local echo): the first synchronisation
    notices it and the copies are dropped, so the echo of a 06 write, byte for byte its
    acknowledgement, is never taken for one; every write still runs once."""
    with Plain("pty", echo=True) as plain, ModbusDevice(plain.url, timeout=PATIENT) as device:
        assert not device.echo
        assert device.write(3, 0x33) == 0x33
        assert device.echo  # learnt at the synchronisation before the write
        assert device.write_masked(3, 0x0F, 0x05) == 0x35
        assert device.snapshot()[:4] == [0, 0, 0, 0x35]
        assert plain.executed == {(6, 3, (0x33,)): 1, (22, 3, (0x35,)): 1}
        assert device.timeouts == 0
    with Plain("pty", echo=True) as plain, ModbusDevice(plain.url + "&echo=1",
                                                        timeout=PATIENT) as device:
        assert device.echo and device.read(0) == 0


@pytest.mark.parametrize(("timeout", "shown"), [
    (0, "0"), (-1, "-1"), (5e-324, "5e-324"), (1e-300, "1e-300"), (1e-7, "1e-07"),
    (float("nan"), "nan"), (float("inf"), "inf"), (86400.5, "86400.5"), (10**400,
     "an integer of about 401 digits"), (True, "a bool"), ("1", "a str")])
def test_a_timeout_out_of_range_is_refused_before_the_port_opens(timeout: Any,
                                                                  shown: str) -> None:
    """ModbusDevice(timeout=) outside 0.001..86400 s, NaN, infinite or not a number:
    ValueError naming it and the range, and no connection tried (the port is closed)."""
    with pytest.raises(ValueError) as raised:
        ModbusDevice("modbus+tcp://127.0.0.1:9?unit=1", timeout=timeout)
    assert str(raised.value) == ("timeout must be a number of seconds in 0.001..86400, got "
                                 f"{shown}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("framing", ["rtu", "tcp"])
def test_a_duplicated_reply_is_never_taken_for_a_later_reads(framing: str) -> None:
    """A device that sends one reply twice: the copy, there before the next request was sent,
    is never that request's reply (a later read gets what the device holds)."""
    for _ in range(5):
        with Duplicating(framing, [0, 0, 0, 251] + [0] * 12) as fake, \
                ModbusDevice(fake.url, timeout=PATIENT) as device:
            assert device.read(5) == 0  # (RTU: after the line's synchronising read)
            fake.duplicate_next = True
            assert device.read(0) == 0
            assert device.read(3) == 251
            assert device.read_block(0, 1) == [0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("framing", ["rtu", "tcp"])
def test_a_duplicated_acknowledgement_never_reports_a_later_write_done(framing: str) -> None:
    """A device that acknowledges a write twice, then executes nothing: the same write sent
    again is a timeout (its outcome unknown), never done on the strength of the old copy."""
    for _ in range(3):
        with Duplicating(framing, [0] * 16) as fake, \
                ModbusDevice(fake.url, timeout=TIMEOUT) as device:
            assert device.read(5) == 0  # (RTU: after the line's synchronising read)
            fake.duplicate_next = True
            assert device.write(2, 7) == 7
            fake.deaf = True
            with pytest.raises(DeviceTimeout, match="may or may not have happened"):
                device.write(2, 7)
            assert fake.executed.count((6, 2)) == 1
