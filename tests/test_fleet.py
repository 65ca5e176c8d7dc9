"""A fleet file: the devices one server serves; bad files refused naming the line."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from conftest import run
from regdev.server._fleet import FleetDevice, FleetError, load_fleet


def fleet(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_fleet_file_names_each_device_with_its_port_map_unit_and_session(
        tmp_path: Path) -> None:
    """Each [devices.NAME] table gives a device; the unit goes into the port's URL, the map
    is found beside the file; units on one RS-485 line share its port."""
    path = fleet(tmp_path, """
[devices.bench1]
port = "modbus+rtu:///dev/ttyUSB0?baud=19200"
unit = 3
map = "sensor.rdl"
session = "lab"

[devices.bench2]
port = "modbus+rtu:///dev/ttyUSB0?baud=19200"
unit = 4

[devices.oven]
port = "/dev/ttyACM0"
""")
    assert load_fleet(path).devices == [
        FleetDevice("bench1", "modbus+rtu:///dev/ttyUSB0?baud=19200&unit=3",
                    tmp_path / "sensor.rdl", "lab", 2),
        FleetDevice("bench2", "modbus+rtu:///dev/ttyUSB0?baud=19200&unit=4", None, None, 8),
        FleetDevice("oven", "/dev/ttyACM0", None, None, 12)]
    assert {d.line_key for d in load_fleet(path).devices[:2]} == {"modbus+rtu:///dev/ttyUSB0"}
    assert (load_fleet(path).lease_seconds, load_fleet(path).renew_seconds) == (10.0, 3.0)
    # Modbus TCP takes unit 255, as its URL's ?unit= does (the id of a device reached directly)
    direct = fleet(tmp_path, '[devices.meter]\nport = "modbus+tcp://127.0.0.1:502"\nunit = 255\n')
    assert [d.port for d in load_fleet(direct).devices] == ["modbus+tcp://127.0.0.1:502?unit=255"]


@pytest.mark.parametrize(("text", "message"), [
    ('[devices.a]\nport = "/dev/ttyUSB0"\n\n[devices.b]\nport = "/dev/ttyUSB0"\n',
     r"fleet.toml:5: devices a \(line 1\) and b both name the port /dev/ttyUSB0; one port "
     r"has one owner$"),
    ('[devices.a]\nport = "modbus+rtu:///dev/ttyUSB0"\nunit = 2\n\n[devices.b]\n'
     'port = "modbus+rtu:///dev/ttyUSB0?unit=2"\n',
     r"fleet.toml:6: devices a \(line 1\) and b both name unit 2 on the line "
     r"modbus\+rtu:///dev/ttyUSB0; one port has one owner, each unit an id of its own$"),
    ('[devices."a/b"]\nport = "loop://"\n',
     r"fleet.toml:1: the device name `a/b` is not one URL path segment"),
    ('[devices.".."]\nport = "loop://"\n',
     r"fleet.toml:1: the device name `\.\.` is not one URL path segment"),
    ('[devices.a]\nport = "loop://"\nunit = 0\n',
     r"fleet.toml:3: devices.a: unit must be a Modbus unit id 1..247, got 0$"),
    ('[devices.a]\nport = "modbus+rtu:///dev/ttyS9"\nunit = 248\n',
     r"fleet.toml:3: devices.a: unit must be a Modbus unit id 1..247, got 248$"),
    ('[devices.a]\nport = "modbus+tcp://127.0.0.1:502"\nunit = 256\n',
     r"fleet.toml:3: devices.a: unit must be a Modbus unit id 1..255 \(Modbus TCP\), got 256$"),
    ('[devices.a]\nport = "loop://"\ncolour = "red"\n',
     r"fleet.toml:3: devices.a has an unknown key `colour`"),
    ('[devices.a]\nmap = "x.rdl"\n', r"fleet.toml:1: devices.a needs port = \"URL\""),
    ('title = "lab"\n', r"fleet.toml:1: unknown table or key `title`"),
    ("", r"fleet.toml: no devices"),
    ("[devices.a\n", r"fleet.toml: not TOML: "),
])
def test_a_bad_fleet_file_is_refused_in_one_line_naming_the_line(
        tmp_path: Path, text: str, message: str) -> None:
    """One port twice, one unit twice on a line, a name that is not a path segment, a bad
    key or value: a FleetError of one line naming file:line."""
    with pytest.raises(FleetError, match=message) as caught:
        load_fleet(fleet(tmp_path, text))
    assert "\n" not in str(caught.value)


def test_serve_http_fleet_serves_each_device_at_its_own_endpoint(tmp_path: Path) -> None:
    """serve --http --fleet: each device at /mcp/NAME with its own registers; a token whose
    scopes name a device reaches that one only (403 elsewhere)."""
    from support.httpserver import TOKENS, http_server, policy_text, post, sdk_client  # noqa: PLC0415

    path = fleet(tmp_path, '[devices.a]\nport = "inprocess"\n\n'
                           '[devices.b]\nport = "inprocess"\n')
    secret = "dana-0123456789abcdef0123456789abcdef"
    digest = hashlib.sha256(secret.encode()).hexdigest()
    extra = (f'\n[http.tokens.dana]\nsha256 = "{digest}"\n'
             'scopes = ["regdev:operate", "device:b"]\n')
    alice = TOKENS["alice"][0]
    with http_server(tmp_path / "srv", policy_text(extra=extra), "--fleet", str(path)) as served:
        base = served.url
        assert base.endswith("/mcp"), base
        with sdk_client(f"{base}/a", alice) as client:
            assert not client.call("write_register", {"addr": 3, "data": 7}).is_error
            read = client.call("read_register", {"addr": 3}).structured_content
            assert read is not None and read["result"] == {"addr": 3, "data": 7}
        with sdk_client(f"{base}/b", alice) as client:
            read = client.call("read_register", {"addr": 3}).structured_content
            assert read is not None and read["result"] == {"addr": 3, "data": 0}
        with sdk_client(f"{base}/b", secret) as client:
            assert not client.call("read_register", {"addr": 3}).is_error
        refused = post(f"{base}/a", '{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
                       bearer=secret)
        assert refused.status_code == 403 and "other devices than a" in refused.text


@pytest.mark.timeout(60)
@pytest.mark.skipif(os.name != "posix", reason="needs a pty")
def test_units_on_one_rs485_line_share_one_port_and_one_transaction_at_a_time() -> None:
    """Two Modbus RTU units on one line (a pymodbus server on a pty serving units 1 and 2),
    opened through one table of lines: one SharedLine, one port open (a second open of the
    port alone is refused: it is held exclusively), one lock; threads writing both units at
    once each get every write acknowledged, and each unit holds its own values."""
    from regdev.core._errors import TransportError  # noqa: PLC0415
    from regdev.devices._open import open_device  # noqa: PLC0415
    from regdev.devices._transaction import SharedLine  # noqa: PLC0415
    from support.modbus_servers import Plain  # noqa: PLC0415

    with Plain("rtu", units=(1, 2)) as plain:
        port = plain.url.removesuffix("?unit=1")
        lines: dict[str, SharedLine] = {}
        one = open_device(f"{port}?unit=1", timeout=2.0, lines=lines)
        two = open_device(f"{port}?unit=2", timeout=2.0, lines=lines)
        try:
            assert len(lines) == 1
            line = next(iter(lines.values()))
            assert line.name == "serial:" + os.path.realpath(port.removeprefix("modbus+rtu://"))
            assert one._tx.lock is two._tx.lock is line.lock  # type: ignore[attr-defined]
            line.open()
            with pytest.raises(TransportError):  # the port is the line's, held exclusively
                open_device(f"{port}?unit=3", timeout=2.0)
            failures: list[BaseException] = []

            def writes(device: object, offset: int) -> None:
                try:
                    for addr in range(16):
                        assert device.write(addr, (addr + offset) % 256) == (  # type: ignore[attr-defined]
                            addr + offset) % 256
                except BaseException as error:
                    failures.append(error)

            threads = [threading.Thread(target=writes, args=(one, 10)),
                       threading.Thread(target=writes, args=(two, 100))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            assert failures == []
            assert one.snapshot() == [addr + 10 for addr in range(16)]
            assert two.snapshot() == [addr + 100 for addr in range(16)]
            assert plain.unit_registers[1][:16] == [addr + 10 for addr in range(16)]
            assert plain.unit_registers[2][:16] == [addr + 100 for addr in range(16)]
        finally:
            one.close()
            two.close()


@pytest.mark.parametrize(("text", "message"), [
    ('[devices.a]\nport = "modbus+rtu:///dev/ttyS9?baud=9600"\nunit = 1\n\n[devices.b]\n'
     'port = "modbus+rtu:///dev/ttyS9?baud=19200"\nunit = 2\n',
     r"fleet.toml:6: devices a \(line 1\) and b are on one serial line serial:/dev/ttyS9 with "
     r"other settings \(baud=9600 and baud=19200\): give every unit of a line the same$"),
    ('[devices.a]\nport = "/dev/ttyS9"\n\n[devices.b]\nport = "modbus+rtu:///dev/ttyS9"\n',
     r"fleet.toml:5: devices a \(line 1\) and b are on one serial line serial:/dev/ttyS9; one "
     r"port has one owner \(only Modbus RTU units share a line\)$"),
    ('[leases]\nseconds = 5\nrenew_seconds = 5\n\n[devices.a]\nport = "inprocess"\n',
     r"fleet.toml:3: leases.renew_seconds \(5\) must be less than leases.seconds \(5\)"),
    ('[leases]\nseconds = 0\n\n[devices.a]\nport = "inprocess"\n',
     r"fleet.toml:2: leases.seconds must be a number of seconds in \(0, 3600\], got 0$"),
])
def test_devices_on_one_serial_line_must_be_rtu_units_of_one_line_setting(
        tmp_path: Path, text: str, message: str) -> None:
    """Two devices on one serial line: only Modbus RTU units with the line's settings share
    it; a bad [leases] table is refused naming its line too."""
    with pytest.raises(FleetError, match=message):
        load_fleet(fleet(tmp_path, text))


@pytest.mark.parametrize("option", [["--port", "inprocess"], ["--baud", "9600"],
                                    ["--map", "sensor.rdl"]])
def test_serve_refuses_a_device_option_beside_a_fleet(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str]) -> None:
    """--port, --baud and --map name one device: beside --fleet (whose URLs say each port,
    line speed and map) they are refused in one line, nothing started; --baud was ignored."""
    path = fleet(tmp_path, '[devices.a]\nport = "inprocess"\n')
    status, out, err = run(capsys, "serve", "--http", "127.0.0.1:0", "--fleet", str(path),
                           "--no-audit", *option)
    assert (status, out) == (2, "")
    assert err == ("regdev serve: error: --fleet names each device's port (its line speed in "
                   "the URL: ?baud=N) and map; give no --port, --baud or --map with it\n")


def test_one_line_spelt_otherwise_is_one_setting(tmp_path: Path) -> None:
    """The settings in effect decide, not the URL's text: no `baud` is `baud=19200` (the
    default), `parity=e` is `parity=E`, the keys in any order; a setting that differs is
    shown alone, with each side's value."""
    same = load_fleet(fleet(tmp_path, (
        '[devices.a]\nport = "modbus+rtu:///dev/ttyS9?baud=19200&parity=e"\nunit = 1\n\n'
        '[devices.b]\nport = "modbus+rtu:///dev/ttyS9?parity=E&stopbits=1"\nunit = 2\n')))
    assert [device.name for device in same.devices] == ["a", "b"]
    with pytest.raises(FleetError, match=(
            r"fleet.toml:6: devices a \(line 1\) and b are on one serial line "
            r"serial:/dev/ttyS9 with other settings \(parity=N and parity=E\): give every "
            r"unit of a line the same$")):
        load_fleet(fleet(tmp_path, (
            '[devices.a]\nport = "modbus+rtu:///dev/ttyS9?baud=19200"\nunit = 1\n\n'
            '[devices.b]\nport = "modbus+rtu:///dev/ttyS9?parity=E"\nunit = 2\n')))


def test_one_unit_twice_through_a_link_to_the_port_is_refused(tmp_path: Path) -> None:
    """A link to a port names its line: one unit id through the link and the port is
    refused naming the line, as through one spelling."""
    (tmp_path / "tty").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "tty")
    path = fleet(tmp_path, f'[devices.a]\nport = "modbus+rtu://{tmp_path}/tty"\nunit = 4\n\n'
                           f'[devices.b]\nport = "modbus+rtu://{tmp_path}/link"\nunit = 4\n')
    with pytest.raises(FleetError, match=r"fleet.toml:6: devices a \(line 1\) and b are on one "
                       r"serial line serial:.*/tty, both unit 4; one port has one owner"):
        load_fleet(path)


@pytest.mark.timeout(120)
@pytest.mark.skipif(os.name != "posix", reason="needs a pty")
def test_serve_http_fleet_drives_two_rtu_units_of_one_line_through_its_one_port(
        tmp_path: Path) -> None:
    """serve --http --fleet with two Modbus RTU units on one pty (a pymodbus server serving
    units 1 and 2): each endpoint writes its own unit, through the one port the server holds
    for the line (SQLite store: one process, no lease)."""
    from support.httpserver import TOKENS, http_server, policy_text, sdk_client  # noqa: PLC0415
    from support.modbus_servers import Plain  # noqa: PLC0415

    with Plain("rtu", units=(1, 2)) as plain:
        port = plain.url.removesuffix("?unit=1")
        path = fleet(tmp_path, f'[devices.a]\nport = "{port}"\nunit = 1\n\n'
                               f'[devices.b]\nport = "{port}"\nunit = 2\n')
        alice = TOKENS["alice"][0]
        with http_server(tmp_path / "srv", policy_text(), "--fleet", str(path),
                         "--timeout", "2") as served:
            for name, data in (("a", 11), ("b", 22)):
                with sdk_client(f"{served.url}/{name}", alice) as client:
                    written = client.call("write_register", {"addr": 5, "data": data})
                    assert not written.is_error, written.structured_content
        assert plain.unit_registers[1][5] == 11 and plain.unit_registers[2][5] == 22
        assert plain.executed[(6, 5, (11,))] == plain.executed[(6, 5, (22,))] == 1
