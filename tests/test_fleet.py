"""A fleet file: the devices one server serves; bad files refused naming the line."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

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
    assert load_fleet(path) == [
        FleetDevice("bench1", "modbus+rtu:///dev/ttyUSB0?baud=19200&unit=3",
                    tmp_path / "sensor.rdl", "lab", 2),
        FleetDevice("bench2", "modbus+rtu:///dev/ttyUSB0?baud=19200&unit=4", None, None, 8),
        FleetDevice("oven", "/dev/ttyACM0", None, None, 12)]
    assert {d.line_key for d in load_fleet(path)[:2]} == {"modbus+rtu:///dev/ttyUSB0"}


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
