"""SunSpec discovery (`regdev map --sunspec-discover URL`): the example images served by a
plain pymodbus server, discovered, and every value checked against pysunspec2's own client
reading the same server; chains that loop, overrun or name unknown models refused by
address, nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymodbus.client import ModbusTcpClient
from pymodbus.simulator import DataType, SimData
from sunspec2 import device as sdevice
from sunspec2 import mdef
from sunspec2.modbus.client import SunSpecModbusClientDeviceTCP

from conftest import EXAMPLES, run
from regdev.core._errors import DeviceError, DeviceRefused, DeviceTimeout
from regdev.devices._regmap import RegisterMap
from regdev.devices._sunspec import (
    BASES,
    END_ID,
    MARKER,
    Discovery,
    discover,
    image_registers,
    model_definition,
)
from support.modbus_servers import Plain

REGDEV = Path(sys.executable).parent / "regdev"
METER = EXAMPLES / "sunspec-meter.json"
INVERTER = EXAMPLES / "sunspec-inverter.json"
DT = ModbusTcpClient.DATATYPE
#: The map's types as pymodbus's convert_from_registers types.
TYPES = {"int16": DT.INT16, "uint16": DT.UINT16, "int32": DT.INT32, "uint32": DT.UINT32,
         "int64": DT.INT64, "uint64": DT.UINT64, "float32": DT.FLOAT32, "float64": DT.FLOAT64,
         "string": DT.STRING}
#: SunSpec's "not implemented" raw values, by the map's type (pysunspec2 reads them as None).
UNIMPLEMENTED = {"int16": {-32768}, "uint16": {0xFFFF}, "int32": {-(1 << 31)},
                 "uint32": {0xFFFFFFFF, 0}, "uint64": {0xFFFFFFFFFFFFFFFF, 0}, "string": {""}}


@contextmanager
def served(base: int, registers: list[int]) -> Iterator[Plain]:
    """A plain pymodbus server (its own server and datastore) on 127.0.0.1 holding
    ``registers`` from ``base``, unit 1."""
    with Plain("tcp", simdata=[SimData(base, values=registers,
                                       datatype=DataType.REGISTERS)]) as plain:
        yield plain


def memory(*blocks: tuple[int, list[int]]) -> Any:
    """A ``read(addr, count)`` over these blocks of registers; any other address is refused
    (Modbus exception 02), as a device refuses it."""
    held = {base + i: value for base, values in blocks for i, value in enumerate(values)}

    def read(addr: int, count: int) -> list[int]:
        if any(addr + i not in held for i in range(count)):
            raise DeviceRefused("illegal data address")
        return [held[addr + i] for i in range(count)]
    return read


def decode(value: dict[str, Any], registers: dict[int, int],
           by_name: dict[str, dict[str, Any]], *, scaled: bool = True) -> Any:
    """A value of the map decoded from the registers as its definition says, with pymodbus's
    convert_from_registers and the scale factor (raw x 10^sf) or scale (not when
    ``scaled`` is False)."""
    count = value.get("count") or {"int16": 1, "uint16": 1, "int32": 2, "uint32": 2,
                                   "float32": 2, "int64": 4, "uint64": 4,
                                   "float64": 4}[value["type"]]
    raw = ModbusTcpClient.convert_from_registers(
        [registers[value["addr"] + i] for i in range(count)], TYPES[value["type"]],
        word_order=value.get("word_order", "big"))
    if not scaled:
        return raw
    if "scale_factor" in value:
        return Decimal(raw).scaleb(decode(by_name[value["scale_factor"]], registers, by_name))
    if "scale" in value:
        return Decimal(raw) * Decimal(value["scale"])
    return raw


def their_point(device: SunSpecModbusClientDeviceTCP, name: str) -> Any:
    """pysunspec2's point for one of our value names (``mppt.module[2].DCA``)."""
    parts = name.split(".")
    model_name, _, index = parts[0].partition("[")
    node: Any = device.models[model_name][int(index.rstrip("]")) - 1 if index else 0]
    for part in parts[1:-1]:
        group, _, number = part.partition("[")
        node = node.groups[group]
        if number:
            node = node[int(number.rstrip("]")) - 1]
    return node.points[parts[-1]]


def their_names(device: SunSpecModbusClientDeviceTCP) -> Iterator[str]:
    """Every point pysunspec2 read, but the pads, named as our values are."""
    def walk(group: Any, path: str) -> Iterator[str]:
        for name, point in group.points.items():
            if point.pdef["type"] != "pad":
                yield f"{path}.{name}"
        for name, sub in group.groups.items():
            if isinstance(sub, list):
                for number, each in enumerate(sub, 1):
                    yield from walk(each, f"{path}.{name}[{number}]")
            else:
                yield from walk(sub, f"{path}.{name}")
    for model in device.model_list:
        yield from walk(model, model.gname)


def discover_cli(capsys: pytest.CaptureFixture[str], url: str, *more: str
                 ) -> tuple[int, str, str]:
    return run(capsys, "map", "--sunspec-discover", url, "--timeout", "10", *more)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("image", [METER, INVERTER], ids=["meter", "inverter"])
def test_discovery_agrees_with_pysunspec2_on_the_example_images(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, image: Path) -> None:
    """An example image served by a plain pymodbus server: the discovered map's every value,
    decoded from the server's registers with the scale factor applied (by pymodbus's
    convert_from_registers, and by regdev's own value codec), equals what pysunspec2's own
    client reads from the same server."""
    base, registers = image_registers(image)
    out = tmp_path / "map.json"
    with served(base, registers) as plain:
        status, stdout, stderr = discover_cli(capsys, plain.url, "--json", "-o", str(out))
        assert (status, stdout, stderr) == (0, "", "")
        port = int(plain.url.rsplit(":", 1)[1].split("?")[0])
        theirs = SunSpecModbusClientDeviceTCP(slave_id=1, ipaddr="127.0.0.1", ipport=port,
                                              timeout=10)
        try:
            theirs.scan()
        finally:
            theirs.close()
    document = json.loads(out.read_text())
    held = {base + i: value for i, value in enumerate(registers)}
    by_name = {value["name"]: value for value in document["values"]}
    # every register of the chain, up to the end model's id (its length register is not
    # read: some devices have none)
    assert [r["addr"] for r in document["registers"]] == sorted(held)[:-1]
    assert {(r["width"], r["table"]) for r in document["registers"]} == {(16, "holding")}
    regmap = RegisterMap.from_json(out.read_text(), str(out))  # regdev's map reader takes it
    compared = 0
    for value in document["values"]:
        point = their_point(theirs, value["name"])
        expected = point.cvalue
        ours = decode(value, held, by_name)
        codec = regmap.value(value["name"])  # regdev's own codec gives the same
        assert codec is not None
        sf = (int(decode(by_name[value["scale_factor"]], held, by_name))
              if "scale_factor" in value else None)
        mine = codec.engineering(codec.from_registers([held[a] for a in codec.addresses]), sf)
        if isinstance(mine, str) and value["type"] != "string":
            mine = value["enum"][mine]  # an enumerated value, by its name
        assert mine == ours, value["name"]
        if expected is None:  # not implemented: the raw value says so
            assert decode(value, held, by_name, scaled=False) in UNIMPLEMENTED[value["type"]], \
                value["name"]
            continue
        if isinstance(expected, float) and not isinstance(ours, str):
            assert float(ours) == expected, value["name"]
        else:
            assert ours == expected, value["name"]
        compared += 1
    assert set(by_name) == set(their_names(theirs))  # every point but the pads
    assert compared >= len(document["values"]) - 3


@pytest.mark.timeout(120)
def test_the_meter_map_names_types_scale_factors_and_units(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The meter's map: `MODEL.POINT` names with the model's own name, the power a scaled
    int16 in W, energy an acc32 (uint32, big word order) in Wh, the marker and each model's
    id and length identity registers, and the table printed without --json."""
    base, registers = image_registers(METER)
    with served(base, registers) as plain:
        status, text, _ = discover_cli(capsys, plain.url, "--json")
        assert status == 0
        table = discover_cli(capsys, plain.url)
    document = json.loads(text)
    values = {value["name"]: value for value in document["values"]}
    assert values["ac_meter_abcn.W"] == {
        "name": "ac_meter_abcn.W", "addr": 40070 + 18, "type": "int16", "byte_order": "big",
        "scale_factor": "ac_meter_abcn.W_SF", "unit": "W", "access": "r",
        "description": "Watts. Total Real Power."}
    assert values["ac_meter_abcn.W_SF"]["type"] == "int16"
    assert values["ac_meter_abcn.TotWhImp"] | {"description": ""} == {
        "name": "ac_meter_abcn.TotWhImp", "addr": 40070 + 46, "type": "uint32",
        "byte_order": "big", "word_order": "big", "scale_factor": "ac_meter_abcn.TotWh_SF",
        "unit": "Wh", "access": "r", "description": ""}
    assert values["common.Mn"]["type"] == "string" and values["common.Mn"]["count"] == 16
    assert values["common.DA"]["access"] == "rw"
    assert values["ac_meter_abcn.Evt"]["enum"]["M_EVENT_Power_Failure"] == 1 << 2
    assert document["name"] == "SunSpec Acme Energy AM-3P-100"
    held = {base + i: value for i, value in enumerate(registers)}
    assert decode(values["ac_meter_abcn.W"], held, values) == Decimal("1234.5")
    identity = {r["addr"]: r["reset"] for r in document["registers"] if r.get("identity")}
    assert identity == {40000: MARKER[0], 40001: MARKER[1], 40002: 1, 40003: 66,
                        40070: 203, 40071: 105, 40177: END_ID}
    status, shown, err = table
    assert (status, err) == (0, "")
    lines = shown.splitlines()
    assert lines[:4] == [
        "SunSpec Acme Energy AM-3P-100", "SunSpec marker at 40000; 2 models, end model at 40177",
        "  model 1     common                           at 40002, 68 registers",
        "  model 203   ac_meter_abcn                    at 40070, 107 registers"]
    assert any(line.split() == ["ac_meter_abcn.W", "40088", "int16", "W",
                                "ac_meter_abcn.W_SF", "r"] for line in lines)


@pytest.mark.timeout(120)
def test_discovery_over_rtu_gives_the_map_tcp_gives(capsys: pytest.CaptureFixture[str]) -> None:
    """The meter served over Modbus RTU (a pty) is discovered as over TCP: the same values and
    registers."""
    base, registers = image_registers(METER)
    maps = []
    for framing in ("tcp", "pty"):
        with Plain(framing, simdata=[SimData(base, values=registers,
                                             datatype=DataType.REGISTERS)]) as plain:
            status, text, err = discover_cli(capsys, plain.url, "--json")
        assert (status, err) == (0, "")
        document = json.loads(text)
        maps.append((document["registers"], document["values"]))
    assert maps[0] == maps[1]


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A URL that is not Modbus, a base in it, a FILE beside it, a bad --timeout, and
    --timeout without --sunspec-discover: one line each, exit 2, nothing sent."""
    url = "modbus+tcp://127.0.0.1:9?unit=1"
    error = "regdev map: error: "
    assert run(capsys, "map", "--sunspec-discover", "/dev/ttyUSB0") == (
        2, "", f"{error}--sunspec-discover takes a Modbus URL, got /dev/ttyUSB0: expected "
               "modbus+tcp://HOST[:PORT]?unit=1 or modbus+rtu://PORT?baud=19200&unit=1 (PORT a "
               "device path such as /dev/ttyUSB0, or a pyserial URL such as "
               "socket://HOST:PORT)\n")
    assert run(capsys, "map", "--sunspec-discover", url + "&base=1") == (
        2, "", f"{error}SunSpec discovery on {url}&base=1: give the URL no base: the SunSpec "
               "marker is looked for at holding registers 40000, 50000 and 0\n")
    assert run(capsys, "map", "x.json", "--sunspec-discover", url) == (
        2, "", f"{error}--sunspec-discover takes no FILE or --examples\n")
    assert run(capsys, "map", "--sunspec-discover", url, "--timeout", "0") == (
        2, "", f"{error}--timeout must be a number of seconds in 0.001..86400, got 0.0\n")
    assert run(capsys, "map", "x.json", "--timeout", "1") == (
        2, "", f"{error}--timeout goes with --sunspec-discover URL\n")


@pytest.mark.parametrize("image", ["sunspec-meter.json", "sunspec-inverter.json"])
def test_a_device_image_given_as_a_map_is_said_to_be_one(
        capsys: pytest.CaptureFixture[str], image: str) -> None:
    """`regdev map IMAGE` (and any --map): one line saying it is a SunSpec device image for a
    server, and how to get its map, not that `base` is an unknown key."""
    path = EXAMPLES / image
    status, out, err = run(capsys, "map", str(path))
    assert (status, out) == (2, "")
    assert err == (
        f"regdev map: error: {path}: a SunSpec device image (its `models`' register values, "
        "for a Modbus server to serve), not a register map: serve it (docs/sunspec.md, "
        '"Example images"), then `regdev map --sunspec-discover modbus+tcp://HOST:PORT?unit=1` '
        "prints its map, and with `--json -o MAP.json` writes the map that --map takes\n")


def test_a_device_that_never_answers_is_said_in_regdevs_words(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A TCP peer that takes the connection and never answers: one line saying what was read,
    from which unit, and that no valid answer came within the timeout; none of pymodbus's
    own text ("Modbus Error: [Input/Output] No response received ...")."""
    import socket  # noqa: PLC0415

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # (the kernel completes the handshake: connected, never answered)
        url = f"modbus+tcp://127.0.0.1:{silent.getsockname()[1]}?unit=3"
        status, out, err = run(capsys, "map", "--sunspec-discover", url, "--timeout", "0.05")
    assert (status, out) == (2, "")
    assert err == (
        f"regdev map: error: SunSpec discovery on {url}: the device answered no read of the "
        "SunSpec marker at holding register 40000, 50000 or 0 (the last: a read of holding "
        "registers 0..1 (function 03) to unit 3: no valid answer within 50 ms, sent twice (a "
        "read changes nothing))\n"), err


def test_the_marker_is_looked_for_at_40000_then_50000_then_0() -> None:
    """The base is the first of 40000, 50000, 0 holding the marker; a base the device
    refuses is passed over."""
    chain = [*MARKER, END_ID]
    assert discover(memory((50000, chain), (0, chain))).base == 50000
    assert discover(memory((0, chain))).base == 0
    assert discover(memory((40000, chain), (0, chain))).base == 40000
    assert discover(memory((40000, [1, 2, 3]), (0, chain))).base == 0


def test_a_base_the_device_does_not_answer_at_is_passed_over() -> None:
    """A device silent at 40000 (a timeout) is looked at 50000 and 0; one silent at all three
    is a device error saying so, not "no marker"."""
    chain = [*MARKER, END_ID]
    answering = memory((0, chain))

    def silent_at_40000(addr: int, count: int) -> list[int]:
        if addr == 40000:
            raise DeviceTimeout("holding registers 40000..40001: no valid reply")
        return answering(addr, count)

    assert discover(silent_at_40000).base == 0

    def silent(addr: int, count: int) -> list[int]:
        raise DeviceTimeout(f"holding registers {addr}..{addr + count - 1}: no valid reply")

    with pytest.raises(DeviceError) as caught:
        discover(silent)
    assert str(caught.value) == (
        "the device answered no read of the SunSpec marker at holding register 40000, 50000 "
        "or 0 (the last: holding registers 0..1: no valid reply)")


def test_no_marker_is_one_line() -> None:
    """No marker at any of the three bases: one line saying so."""
    with pytest.raises(DeviceError) as caught:
        discover(memory((40000, [0] * 4), (0, [1, 2])))
    assert str(caught.value) == ("no SunSpec marker (SunS, 0x53756E53) at holding register "
                                 "40000, 50000 or 0: not a SunSpec device, or another unit id")


def common(length: int = 66) -> list[int]:
    """A common model (id 1) of ``length``, every point 0."""
    return [1, length] + [0] * length


@pytest.mark.parametrize(("chain", "message"), [
    ([*MARKER, *common(), 64999, 4, 0, 0, 0, 0, END_ID],
     "the SunSpec model at 40070 has id 64999, which pysunspec2 has no model definition for "
     "(a vendor's model, or not a model id: the chain may be broken)"),
    ([*MARKER, 203, 65534],
     "the SunSpec chain loops: the model at 40002 (id 203, length 65534) would end past "
     "register 65535, and a 16-bit address wraps round to 40002, where the chain has already "
     "been"),
    ([*MARKER, 1, 30000],
     "the SunSpec model at 40002 (id 1, length 30000) runs past holding register 65535, the "
     "end of the address space"),
    ([*MARKER, *common(64), END_ID],
     "the SunSpec model at 40002 (id 1, common): its length register says 64 (so 66 "
     "registers with the id and length), but its definition in pysunspec2 makes it 68"),
    ([*MARKER, 160, 30, *[0] * 30, END_ID],
     "the SunSpec model at 40002 (id 160, mppt): its length 30 does not hold a whole number "
     "of its repeated group module (20 registers each) after its 10 fixed registers"),
], ids=["unknown-model", "loop", "overrun", "length", "group"])
def test_a_bad_chain_is_refused_naming_the_address(chain: list[int], message: str) -> None:
    """A chain that names a model pysunspec2 does not know, loops, runs past register 65535,
    or whose model's length disagrees with its definition: one line naming the address."""
    with pytest.raises(DeviceError) as caught:
        discover(memory((40000, chain + [0] * 10)))
    assert str(caught.value) == message


def test_a_chain_that_ends_at_the_last_register_without_an_end_model() -> None:
    """A model that ends at register 65535 leaves no room for the end model: refused,
    naming the address."""
    length = 65536 - 50002 - 2
    with pytest.raises(DeviceError) as caught:
        discover(memory((50000, [*MARKER, 1, length] + [0] * length)))
    assert str(caught.value) == ("the SunSpec chain runs past holding register 65535 with no "
                                 "end model (0xFFFF): the last model ends at 65535")


@pytest.mark.timeout(120)
def test_an_unknown_model_writes_nothing(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    """On a plain pymodbus server whose chain names a model pysunspec2 does not know:
    exit 2, one line naming the address, and no output file."""
    chain = [*MARKER, *common(), 64999, 2, 7, 7, END_ID, 0]
    out = tmp_path / "map.json"
    with served(40000, chain) as plain:
        status, stdout, stderr = discover_cli(capsys, plain.url, "--json", "-o", str(out))
    assert (status, stdout) == (2, "")
    assert stderr == (f"regdev map: error: SunSpec discovery on {plain.url}: the SunSpec "
                      "model at 40070 has id 64999, which pysunspec2 has no model definition "
                      "for (a vendor's model, or not a model id: the chain may be broken)\n")
    assert not out.exists()
    assert not list(tmp_path.glob("*.part")) and not list(tmp_path.glob(".*.part"))


def test_a_model_twice_is_indexed() -> None:
    """A chain with the same model twice names their values `name[1].POINT`,
    `name[2].POINT`."""
    meter = [203, 105] + [0] * 105
    found = discover(memory((40000, [*MARKER, *common(), *meter, *meter, END_ID])))
    assert [model.prefix for model in found.models] == [
        "common", "ac_meter_abcn[1]", "ac_meter_abcn[2]"]
    names = {value["name"]: value for value in found.values}
    assert names["ac_meter_abcn[2].W"]["scale_factor"] == "ac_meter_abcn[2].W_SF"
    assert names["ac_meter_abcn[2].W"]["addr"] == 40070 + 107 + 18


def test_the_inverter_controls_and_repeated_groups() -> None:
    """The inverter image: controls.WMaxLimPct is a writable uint16 in % WMax scaled by
    controls.WMaxLimPct_SF; the mppt model's modules are indexed from 1, each scaled by the
    model's own scale factors."""
    base, registers = image_registers(INVERTER)
    found: Discovery = discover(memory((base, registers)))
    values = {value["name"]: value for value in found.values}
    assert values["controls.WMaxLimPct"] | {"description": ""} == {
        "name": "controls.WMaxLimPct", "addr": 40127, "type": "uint16", "byte_order": "big",
        "scale_factor": "controls.WMaxLimPct_SF", "unit": "% WMax", "access": "rw",
        "description": ""}
    assert values["controls.Conn"]["enum"] == {"DISCONNECT": 0, "CONNECT": 1}
    assert values["mppt.module[2].DCA"]["scale_factor"] == "mppt.DCA_SF"
    held = {base + i: value for i, value in enumerate(registers)}
    assert decode(values["controls.WMaxLimPct"], held, values) == Decimal("100.0")
    assert decode(values["mppt.module[2].DCA"], held, values) == Decimal("9.63")
    assert decode(values["mppt.module[2].IDStr"], held, values) == "string B"
    assert [model.id for model in found.models] == [1, 103, 123, 160]


def test_points_no_value_can_hold_keep_their_registers() -> None:
    """A string longer than 16 registers (DERMeasureAC.MnAlrmInfo, 32) gets no value, said in
    `skipped`; its registers are in the map, read-only; pads get no value either."""
    model = sdevice.Model(model_id=701, data={})
    data = model.get_mb()
    body = [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]
    found = discover(memory((40000, [*MARKER, *body, END_ID])))
    assert found.skipped == ("DERMeasureAC.MnAlrmInfo: a string of 32 registers, more than "
                             "the 16 a value may span",)
    names = {value["name"] for value in found.values}
    assert "DERMeasureAC.MnAlrmInfo" not in names and "DERMeasureAC.W" in names
    start = 40002 + model.points["MnAlrmInfo"].offset
    registers = {r["addr"]: r for r in found.to_dict()["registers"]}
    assert all(registers[start + i]["access"] == "r" for i in range(32))
    assert len(registers) == len(body) + 3


#: Model ids for the chains below: known ones (with and without repeated groups), unknown
#: ones, and the end model.
_IDS = st.sampled_from([1, 103, 123, 160, 203, 705, 707, 804, 64999, 0, END_ID])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_IDS, st.integers(0, 0xFFFF), st.lists(
    st.integers(0, 0xFFFF), max_size=8)), max_size=4), st.sampled_from(BASES))
def test_any_chain_gives_a_map_or_one_device_error(
        chain: list[tuple[int, int, list[int]]], base: int) -> None:
    """Whatever a device's chain holds (any ids, lengths and points), discovery gives a map
    or raises DeviceError, never another exception."""
    registers = list(MARKER)
    for model_id, length, points in chain:
        registers += [model_id, length, *(points * (1 + length // max(len(points), 1)))[:length]]
    read = memory((base, registers[:0x10000 - base]))
    try:
        found = discover(read)
    except DeviceError as error:
        assert "\n" not in str(error)
        return
    assert found.base == base


def test_every_model_pysunspec2_ships_lays_out() -> None:
    """Every model definition pysunspec2 ships is laid out (with one of each repeated group),
    its values named within 64 characters and its scale factors naming values of the map."""
    folder = Path(sdevice.models_dir) / "json"
    ids = sorted(mdef.model_filename_to_id(path.name) for path in folder.glob("model_*.json"))
    assert len(ids) > 100
    for model_id in ids:
        definition = model_definition(model_id)
        assert definition is not None
        model = sdevice.Model(model_id=model_id, data=_one_of_each(definition["group"]))
        data = model.get_mb()
        body = [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]
        found = discover(memory((40000, [*MARKER, *body, END_ID])))
        names = {value["name"] for value in found.values}
        assert all(len(name) <= 64 for name in names), model_id
        assert all(value["scale_factor"] in names for value in found.values
                   if "scale_factor" in value), model_id


def _one_of_each(group: dict[str, Any]) -> dict[str, Any]:
    """Data for a pysunspec2 Model: every count point 1, each repeated group once."""
    data: dict[str, Any] = {}
    for point in group["points"]:
        if point["type"] == "count" or point["name"] in _counts(group):
            data[point["name"]] = 1
    for sub in group.get("groups", []):
        inner = _one_of_each(sub)
        data[sub["name"]] = [inner] if sub.get("count") is not None else inner
    return data


def _counts(group: dict[str, Any]) -> set[str]:
    found = set()
    for sub in group.get("groups", []):
        if isinstance(sub.get("count"), str):
            found.add(sub["count"])
        found |= _counts(sub)
    return found


@pytest.mark.timeout(180)
def test_the_discovered_map_drives_the_device_in_units(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    """The discovered map given to --map drives the plain pymodbus server through the gate
    (regdev call, the shell): values read in their units with their scale factors applied,
    WMaxLimPct written exactly (75.5 % is raw 755 at WMaxLimPct_SF -1), 75.55 refused before
    the device; the meter's map on the inverter is refused (its identity registers)."""
    meter_map, inverter_map = tmp_path / "meter.json", tmp_path / "inverter.json"
    base, registers = image_registers(METER)
    with served(base, registers) as plain:
        assert discover_cli(capsys, plain.url, "--json", "-o", str(meter_map))[0] == 0
        status, out, _ = run(capsys, "call", "--no-audit", "--port", plain.url, "--timeout",
                             "10", "--map", str(meter_map),
                             '{"tool":"read_value","arguments":{"name":"ac_meter_abcn.W"}}')
        shell = subprocess.run([str(REGDEV), "shell", "--no-audit", "--port", plain.url,
                                "--timeout", "10", "--map", str(meter_map)],
                               input="read ac_meter_abcn.W\nread ac_meter_abcn.TotVAhImp\n",
                               capture_output=True, text=True, timeout=60, check=False)
    assert (status, json.loads(out)["result"]) == (0, {
        "name": "ac_meter_abcn.W", "value": 1234.5, "unit": "W", "addr": 40088,
        "raw": [12345]})
    assert (shell.returncode, shell.stderr) == (0, "")
    assert shell.stdout.splitlines()[2:] == [
        "accepted  read_value: ac_meter_abcn.W = 1234.5 W (raw 0x3039)",
        "accepted  read_value: ac_meter_abcn.TotVAhImp = 19423000 VAh (raw 0x1d 0xa31c)"]
    base, registers = image_registers(INVERTER)
    with served(base, registers) as plain:
        assert discover_cli(capsys, plain.url, "--json", "-o", str(inverter_map))[0] == 0

        def call(raw: str) -> tuple[int, dict[str, Any]]:
            status, out, _ = run(capsys, "call", "--no-audit", "--port", plain.url,
                                 "--timeout", "10", "--map", str(inverter_map), raw)
            return status, json.loads(out)

        assert call('{"tool":"read_value","arguments":{"name":"controls.WMaxLimPct"}}') == (
            0, {"ok": True, "tool": "read_value", "result": {
                "name": "controls.WMaxLimPct", "value": 100.0, "unit": "% WMax",
                "addr": 40127, "raw": [1000]}})
        assert call('{"tool":"read_value","arguments":{"name":"mppt.module[2].DCA"}}')[1][
            "result"]["value"] == 9.63
        status, refused = call('{"tool":"write_value","arguments":{"name":'
                               '"controls.WMaxLimPct","value":75.55}}')
        assert (status, refused["code"]) == (1, "resolution")
        assert not plain.executed
        status, done = call('{"tool":"write_value","arguments":{"name":"controls.WMaxLimPct",'
                            '"value":75.5}}')
        assert (status, done["result"]["raw"]) == (0, [755])
        assert sum(count for (_, addr, values), count in plain.executed.items()
                   if addr == 40127 and values == (755,)) == 1
        assert len(plain.executed) == 1
        status, read = call('{"tool":"read_value","arguments":{"name":"controls.WMaxLimPct"}}')
        assert read["result"]["value"] == 75.5
        status, out, err = run(capsys, "call", "--no-audit", "--port", plain.url, "--timeout",
                               "10", "--map", str(meter_map),
                               '{"tool":"read_value","arguments":{"name":"ac_meter_abcn.W"}}')
        assert status == 2 and "is not the one --map" in err
