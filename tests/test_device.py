"""The in-process register file: reset values, read, write, snapshot, range refusals, threads,
and the state_id that idempotency keys are scoped to."""

from __future__ import annotations

import threading

import pytest

from regdev import Device, RegisterFile, RegisterRangeError, TimeoutDevice


def test_starts_at_zero_by_default() -> None:
    """Without reset values every register reads 0."""
    assert RegisterFile().snapshot() == [0] * 16


def test_reset_values_apply_at_start_and_on_reset() -> None:
    """Configured reset values are the start state and what reset restores."""
    values = list(range(100, 116))
    regs = RegisterFile(values)
    assert regs.snapshot() == values
    regs.write(3, 7)
    assert regs.read(3) == 7
    regs.reset()
    assert regs.snapshot() == values


def test_write_returns_value_and_counts() -> None:
    """A write returns the stored value and is counted."""
    regs = RegisterFile()
    assert regs.write(15, 255) == 255
    assert regs.read(15) == 255
    assert regs.write_count == 1


@pytest.mark.parametrize("addr", [-1, 16, 2**64, True, 3.0, "3", None])
def test_refuses_bad_address(addr: object) -> None:
    """Addresses outside 0..15, and non-int addresses (bool, float), are refused."""
    regs = RegisterFile()
    with pytest.raises(RegisterRangeError, match="address"):
        regs.read(addr)  # type: ignore[arg-type]
    with pytest.raises(RegisterRangeError, match="address"):
        regs.write(addr, 1)  # type: ignore[arg-type]
    assert regs.write_count == 0


@pytest.mark.parametrize("data", [-1, 256, False, 1.0, "1"])
def test_refuses_bad_data(data: object) -> None:
    """Data outside 0..255, and non-int data, are refused without changing the register."""
    regs = RegisterFile()
    with pytest.raises(RegisterRangeError, match="data"):
        regs.write(0, data)  # type: ignore[arg-type]
    assert regs.snapshot() == [0] * 16
    assert regs.write_count == 0


@pytest.mark.parametrize("values", [[0] * 15, [0] * 17, [0] * 15 + [256]])
def test_refuses_bad_reset_values(values: list[int]) -> None:
    """Reset values must be 16 bytes."""
    with pytest.raises(RegisterRangeError):
        RegisterFile(values)


def test_snapshot_is_a_copy() -> None:
    """Changing a snapshot does not change the device."""
    regs = RegisterFile()
    snap = regs.snapshot()
    snap[0] = 99
    assert regs.read(0) == 0


def test_concurrent_writes_are_all_applied() -> None:
    """Writes from many threads are each applied once (the lock serialises them)."""
    regs = RegisterFile()

    def worker(addr: int) -> None:
        for value in range(256):
            regs.write(addr, value)

    threads = [threading.Thread(target=worker, args=(a,)) for a in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert regs.write_count == 16 * 256
    assert regs.snapshot() == [255] * 16


def test_state_id_names_the_registers() -> None:
    """A register file's state_id is its own unless given; a wrapper reports the wrapped one."""
    first, second = RegisterFile(), RegisterFile()
    assert first.state_id().startswith("RegisterFile:") and first.state_id() == first.state_id()
    assert first.state_id() != second.state_id()
    assert RegisterFile(state_id="bench-1").state_id() == "bench-1"
    timed = TimeoutDevice(second, 1.0)
    assert timed.state_id() == second.state_id()
    timed.close()
    with pytest.raises(ValueError, match="state_id"):
        RegisterFile(state_id="")


def test_a_device_without_its_own_state_id_gets_a_unique_one() -> None:
    """The base class default is one random id per object, stable for that object."""

    class Bare(RegisterFile):
        def state_id(self) -> str:
            return Device.state_id(self)

    one, two = Bare(), Bare()
    assert one.state_id() == one.state_id() != two.state_id()
    assert one.state_id().startswith("Bare:")


def test_a_block_write_on_the_default_map_is_all_or_nothing_and_checked_as_write() -> None:
    """The default map's block write (its shortcut past the per-register rules) stores the
    values when every one is a byte, and nothing when one is not, naming it as write() does."""
    device = RegisterFile()
    assert device.write_block(2, [1, 2, 255]) == [1, 2, 255]
    assert device.snapshot()[:6] == [0, 0, 1, 2, 255, 0] and device.write_count == 3
    for bad in ([7, 256], [7, True], [7, 3.0]):
        with pytest.raises(RegisterRangeError) as info:
            device.write_block(0, bad)
        with pytest.raises(RegisterRangeError) as expected:
            device.write(0, bad[1])
        assert str(info.value) == str(expected.value)
    assert device.snapshot()[:6] == [0, 0, 1, 2, 255, 0] and device.write_count == 3


def test_open_device_opens_each_scheme_of_its_table() -> None:
    """open_device picks the backend by the URL's scheme: in process, serial, Modbus TCP."""
    import socket  # noqa: PLC0415

    from regdev import ModbusDevice, RegisterMap, SerialDevice, open_device  # noqa: PLC0415
    from regdev.devices._open import SCHEMES  # noqa: PLC0415

    assert sorted(SCHEMES) == ["", "inprocess", "loop", "modbus+rtu", "modbus+tcp",
                               "rfc2217", "socket"]
    regmap = RegisterMap.default()
    for url in (None, "inprocess", "INPROCESS://"):
        with open_device(url, regmap=regmap) as device:
            assert type(device) is RegisterFile and device.regmap is regmap
    with open_device("loop://", timeout=0.2) as device:
        assert type(device) is SerialDevice and device.regmap == regmap
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with open_device(f"socket://127.0.0.1:{port}", timeout=0.2) as device:
            assert type(device) is SerialDevice
        with open_device(f"modbus+tcp://127.0.0.1:{port}?unit=1", timeout=0.2) as device:
            assert type(device) is ModbusDevice


def test_open_device_refuses_an_unknown_scheme_and_port_options_in_process() -> None:
    """An unknown scheme, and a timeout or baud rate for the in-process device, are refused."""
    from regdev import TransportError, open_device  # noqa: PLC0415

    with pytest.raises(TransportError, match=r"^cannot open port bogus://x: unknown URL scheme; "
                                             r"expected .*modbus\+tcp://HOST\[:PORT\]"):
        open_device("bogus://x")
    with pytest.raises(ValueError, match=r"^the in-process device takes no baudrate or timeout"):
        open_device("inprocess", timeout=1.0, baudrate=9600)


def test_a_device_is_a_context_manager_that_closes_it() -> None:
    """`with device:` returns the device and closes it at the end, even when the block raises."""
    closed = []

    class Recorded(RegisterFile):
        def close(self) -> None:
            closed.append(True)

    with Recorded() as device:
        assert isinstance(device, Recorded)
    assert closed == [True]
    with pytest.raises(RuntimeError), Recorded():
        raise RuntimeError("inside")
    assert closed == [True, True]


def test_the_base_class_takes_the_map_explicitly() -> None:
    """Device(regmap) keeps the map it is given; without one it is the default map."""
    from regdev import Register, RegisterMap  # noqa: PLC0415

    class Bare(Device):
        def read(self, addr: int) -> int:
            return 0

        def write(self, addr: int, data: int) -> int:
            return data

        def reset(self) -> None:
            pass

        def snapshot(self) -> list[int]:
            return [0] * len(self.regmap)

    regmap = RegisterMap([Register(None, 0), Register(None, 1)])
    assert Bare(regmap).regmap is regmap
    assert Bare().regmap == RegisterMap.default()
