"""The C firmware (firmware-sim/c/): its core against the Python codec, its register maps, the
host build on a pty, and the ATmega328P image in simavr driven by regdev's commands.

The host and differential tests need make and a C compiler; the simavr tests need avr-gcc and
simavr too (tests/firmware_c.py says which are missing; ``REGDEV_REQUIRE_FIRMWARE=1`` makes a
missing tool a failure, as in CI).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple, Protocol

import pytest
import serial

import regdev_firmware_sim as sim
from conftest import EXAMPLES, ROOT, default_rows, run
from firmware import SIM, sim_process
from firmware_c import (
    C_DIR,
    DEVICE_ID,
    SHARED_BUILD,
    STARTS,
    CCore,
    CEpochs,
    c_identify_text,
    make,
    need,
)
from regdev import MapError, RegisterFile, read_audit
from regdev.cli._main import main
from regdev.devices import _protocol as wire
from regdev.devices._regmap import Field, Register, RegisterMap

REGDEV = Path(sys.executable).parent / "regdev"
GEN = C_DIR / "gen_regmap.py"
#: The identify texts' descriptions (the id and epoch follow).
HOST_IDENTITY = "regdev C/host default"
UNO_IDENTITY = "regdev C/uno default"


def frame(payload: bytes) -> bytes:
    """``$``, the payload, ``*``, its CRC-8 and LF: a frame with a good checksum."""
    return b"$%s*%02X\n" % (payload, wire.crc8(payload))


# --- builds ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The host build (the pty server and the shared object) of the default map."""
    need("host")
    build = tmp_path_factory.mktemp("c-host")
    make(build, "host", "lib")
    return build


@pytest.fixture
def core(host_build: Path) -> CCore:
    """A fresh C core of the default map."""
    return CCore(host_build / "host" / "libregdev_core.so")


@pytest.fixture(scope="module")
def avr_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Uno image and the simavr harness, built from scratch into a temporary folder."""
    need("avr")
    build = tmp_path_factory.mktemp("c-avr")
    make(build, "sim")
    return build


# --- the core against the protocol doc and the Python codec ---------------------------------------


def test_core_answers_the_protocol_doc_examples(core: CCore) -> None:
    """Each request of docs/protocol.md's table of examples gets the reply the table shows
    next to it (identify: the C firmware's own text, its id and epoch), once the registers
    hold what the example's reply shows (written first, for G and M)."""
    rows = re.findall(r"^\| `(\$[^`]*)\\n` \| `(\w+)\(",
                      (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8"), re.MULTILINE)
    pairs = [(request, reply) for (request, kind), (reply, _) in itertools.pairwise(rows)
             if kind.endswith("Request")]
    assert [request[:5] for request, _ in pairs] == ["$01 I", "$02 R", "$03 W", "$04 D", "$05 Z",
                                                    "$06 R", "$0A G", "$0B P", "$0C M", "$0D D",
                                                    "$0E I"]
    before = {"$0A G": [wire.WriteRequest(0x20, 2, 0x10), wire.WriteRequest(0x21, 3, 0x5A)],
              "$0C M": [wire.WriteRequest(0x22, 1, 0x01)]}
    for request, reply in pairs:
        expected = reply.encode() + b"\n"
        if request.startswith("$01 I"):
            expected = wire.encode(wire.IdentifyReply(
                1, f"{HOST_IDENTITY} id={DEVICE_ID} epoch={STARTS:04X}{0:04X}"))
        for setup in before.get(request[:5], []):
            assert isinstance(ask(core, setup), wire.WriteReply)
        assert core.feed(request.encode() + b"\n") == expected, request


def test_core_identity_is_valid_and_names_platform_and_map(core: CCore) -> None:
    """The identify text fits the protocol (1..48 printable bytes) and says what it is, its id
    and its epoch: docs/protocol.md's example, the 4th start after 3 resets."""
    assert core.identity == HOST_IDENTITY
    for seq in (1, 2, 3):
        assert ask(core, wire.ResetRequest(seq)) == wire.ResetReply(seq)
    reply = ask(core, wire.IdentifyRequest(0x2A))
    assert reply == wire.IdentifyReply(0x2A, "regdev C/host default id=5F3A9C01 epoch=00040003")
    assert isinstance(reply, wire.IdentifyReply)
    assert (reply.device_id, reply.epoch) == ("5F3A9C01", "00040003")


def identify(core: CCore) -> str:
    """The core's identify text now."""
    reply = ask(core, wire.IdentifyRequest(1))
    assert isinstance(reply, wire.IdentifyReply)
    return reply.text


def test_core_epoch_is_new_at_every_start_and_every_reset(core: CCore) -> None:
    """BBBBRRRR: the start count the platform gives at start, the resets since; a write or a
    read leaves it."""
    seen = set()
    for starts in (1, 2):
        core.reset(DEVICE_ID, starts)
        for resets in range(3):
            assert identify(core).endswith(f" epoch={starts:04X}{resets:04X}")
            seen.add(identify(core))
            ask(core, wire.WriteRequest(2, 3, 9))
            ask(core, wire.ReadRequest(3, 3))
            assert identify(core).endswith(f" epoch={starts:04X}{resets:04X}")
            assert ask(core, wire.ResetRequest(4)) == wire.ResetReply(4)
    assert len(seen) == 6


def test_core_reset_count_past_ffff_takes_the_next_start_count(core: CCore) -> None:
    """After 65535 resets the epoch is 0004FFFF; the next reset asks the platform for a new
    start count (once) and says 00050000, an epoch a later start never says (the platform
    counted that start already)."""
    core.reset(DEVICE_ID, 4)
    before = core.next_starts
    resets = b"".join(wire.encode(wire.ResetRequest(1 + i % 255)) for i in range(0xFFFF))
    assert core.feed(resets).count(b"\n") == 0xFFFF
    assert identify(core).endswith(" epoch=0004FFFF") and core.next_starts == before
    assert ask(core, wire.ResetRequest(9)) == wire.ResetReply(9)
    assert identify(core).endswith(" epoch=00050000") and core.next_starts == before + 1


@pytest.mark.parametrize(("device_id", "text"), [
    ("5F3A9C01", "regdev C/host default id=5F3A9C01 epoch=00040000"),
    ("7", "regdev C/host default id=7 epoch=00040000"),
    # room for 13 bytes of description: cut, and the space the cut leaves dropped
    ("ABCDEFGHIJKLMNOP", "regdev C/host id=ABCDEFGHIJKLMNOP epoch=00040000"),
    ("ABCDEFGHIJKL", "regdev C/host def id=ABCDEFGHIJKL epoch=00040000"),
])
def test_core_cuts_its_description_to_fit_its_id(core: CCore, device_id: str,
                                                  text: str) -> None:
    """The description is cut so that the text fits 48 bytes, as c_identify_text says."""
    core.reset(device_id, 4)
    assert identify(core) == text == c_identify_text(HOST_IDENTITY, device_id, 4, 0)
    assert len(text) <= wire.MAX_TEXT
    assert wire.split_identify_text(text)[1:] == (device_id, "00040000")


def test_core_says_the_digest_of_the_map_it_was_built_with(core: CCore) -> None:
    """I 01: `map=DIGEST NAME`, the digest regdev computes for the map the image was built
    with (a host compares it with its own map's); I 00 (spelt I) and I 02 are e SYNTAX."""
    reply = ask(core, wire.IdentifyRequest(7, wire.MAP_PAGE))
    assert reply == wire.IdentifyReply(7, f"map={RegisterMap.default().digest()} default")
    assert wire.split_map_text(reply.text) == (RegisterMap.default().digest(), "default")
    for page in (b"00", b"02"):
        payload = b"08 I " + page
        line = b"$" + payload + b"*%02X\n" % wire.crc8(payload)
        assert wire.decode(core.feed(line)) == wire.ErrorReply(8, "SYNTAX")


@pytest.mark.parametrize("device_id", ["ABCDEFGHIJKLMNOPQ", "5f3a9c01", "5F3A 9C01", "", None])
def test_core_without_an_id_says_its_description_alone(core: CCore,
                                                       device_id: str | None) -> None:
    """An id that is not 1..16 of 0-9 and A-Z (17 characters, lower case, a space, none, a
    NULL pointer) is no id: the text is the description alone, which says no epoch."""
    core.reset(device_id, 4)
    assert identify(core) == HOST_IDENTITY
    assert wire.split_identify_text(HOST_IDENTITY)[1:] == (None, None)


class _Chunks:
    """A line for the simulator's serve(): reads the given chunks, keeps what is written."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks[::-1]
        self.out = bytearray()

    def read(self) -> bytes:
        return self.chunks.pop() if self.chunks else b""

    def write(self, data: bytes) -> None:
        self.out += data


def python_firmware(description: str, device_id: str, starts: int,
                    regmap: RegisterMap | None = None) -> sim.Firmware:
    """The Python firmware simulator saying what the C firmware says to identify: the
    description cut as the C one cuts it, the id, and the C firmware's epochs from the start
    count ``starts`` (:class:`CEpochs`); without an id, the description alone (plain). It
    serves ``regmap`` (the default map when None)."""
    registers = CEpochs(starts, regmap=regmap)
    if not device_id:
        return sim.Firmware(registers, identity=description, plain=True)
    text = c_identify_text(description, device_id, starts, 0)
    return sim.Firmware(registers, identity=wire.split_identify_text(text)[0],
                        device_id=device_id)


def python_device(stream: bytes, firmware: sim.Firmware, rng: random.Random
                  ) -> tuple[bytes, list[int]]:
    """What the Python firmware simulator answers to ``stream`` (read in random chunks of
    1..256 bytes, as from a pty), and its registers after (as held, in address order)."""
    chunks = []
    at = 0
    while at < len(stream):
        size = rng.randint(1, 256)
        chunks.append(stream[at:at + size])
        at += size
    line = _Chunks(chunks)
    sim.serve(line, firmware, sim.Faults())
    return bytes(line.out), held(firmware.registers)


def held(registers: RegisterFile) -> list[int]:
    """The registers as the register file holds them, in address order (write-only bits
    included, as the C core's regdev_test_registers gives them)."""
    return [registers._registers[addr] for addr in registers.regmap.addresses]


_NOISE = b"$\n\r*0123456789ABCDEFabcdef IRWZDGPMirwzdgpmeQ\x00\x7f\xff"
_LETTERS = b"IRWZDGPMirwzdgpmeQ$*"
_SPECIAL = b"$\n\r* 0F"


class _Maker(Protocol):
    def __call__(self, rng: random.Random, addresses: Sequence[int]) -> bytes: ...


def _address(rng: random.Random, addresses: Sequence[int]) -> int:
    """An address of the map mostly; else any, or one near the top (blocks past FF)."""
    roll = rng.random()
    if roll < 0.75:
        return rng.choice(addresses)
    return rng.randrange(256) if roll < 0.9 else rng.randrange(240, 256)


def _values(rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.randrange(256) for _ in range(rng.randint(1, wire.MAX_BLOCK)))


def _request(rng: random.Random, addresses: Sequence[int]) -> bytes:
    seq = rng.randrange(256)
    addr = _address(rng, addresses)
    requests: list[wire.Request] = [
        wire.IdentifyRequest(seq), wire.ReadRequest(seq, addr),
        wire.WriteRequest(seq, addr, rng.randrange(256)), wire.ResetRequest(seq),
        wire.DumpRequest(seq), wire.DumpRequest(seq, rng.randrange(1, 256)),
        wire.ReadBlockRequest(seq, addr, rng.randint(1, wire.MAX_BLOCK)),
        wire.WriteBlockRequest(seq, addr, _values(rng)),
        wire.MaskedWriteRequest(seq, addr, rng.randrange(256), rng.randrange(256))]
    return wire.encode(rng.choice(requests))


def _reply(rng: random.Random, addresses: Sequence[int]) -> bytes:
    seq = rng.randrange(256)
    addr = _address(rng, addresses)
    text = "".join(rng.choice("abc XYZ-,.019") for _ in range(rng.randint(1, 48)))
    dump = tuple(rng.randrange(256) for _ in range(16))
    replies: list[wire.Reply] = [
        wire.IdentifyReply(seq, text), wire.ReadReply(seq, addr, rng.randrange(256)),
        wire.WriteReply(seq, addr, rng.randrange(256)), wire.ResetReply(seq),
        wire.DumpReply(seq, dump), wire.DumpReply(seq, dump, rng.randrange(1, 256)),
        wire.ReadBlockReply(seq, addr, _values(rng)),
        wire.WriteBlockReply(seq, addr, _values(rng)),
        wire.MaskedWriteReply(seq, addr, rng.randrange(256)),
        wire.ErrorReply(seq, rng.choice(wire.ERROR_CODES))]
    return wire.encode(rng.choice(replies))


def _crafted(rng: random.Random, addresses: Sequence[int]) -> bytes:
    """A frame of random parts with a good checksum, so that it reaches the syntax checks."""
    seq = rng.choice([b"%02X" % rng.randrange(256), b"%02x" % rng.randrange(256), b"0",
                      b"G1", b""])
    letter = bytes([rng.choice(_LETTERS)])
    tokens = [b"03", b"FF", b"0f", b"10", b"00", b"11", b"", b" ", b"ABC", b"X", b"00" * 16,
              b"0102", b"00" * 17, b"*", b"\r", b"DATA", b"hello world"]
    fields = b"".join(rng.choice(tokens) + rng.choice([b" ", b"", b"  "])
                      for _ in range(rng.randint(0, 4)))
    payload = seq + rng.choice([b" ", b"", b"  "]) + letter + rng.choice([b" ", b""]) + fields
    payload = payload[:59]
    if rng.random() < 0.2:
        return b"$" + payload + b"*%02X\n" % rng.randrange(256)  # a checksum likely wrong
    if rng.random() < 0.1:
        return b"$" + payload + b"*%02x\n" % wire.crc8(payload)  # lower-case checksum
    return frame(payload)


def _garbage(rng: random.Random, addresses: Sequence[int]) -> bytes:
    return bytes(rng.choice(_NOISE) for _ in range(rng.randint(1, 80)))


def _long_line(rng: random.Random, addresses: Sequence[int]) -> bytes:
    body = bytes(rng.choice(b"0123456789ABCDEF WRP*") for _ in range(rng.randint(55, 140)))
    return b"$" + body + rng.choice([b"\n", b""])


def _line_end(rng: random.Random, addresses: Sequence[int]) -> bytes:
    data = _request(rng, addresses)
    return data[:-1] + rng.choice([b"\r\n", b"\r\r\n", b"\n\n", b"\r"])


_MAKERS: tuple[_Maker, ...] = (_request, _request, _request, _reply, _crafted, _crafted,
                               _garbage, _long_line, _line_end)


def _damage(rng: random.Random, stream: bytearray) -> None:
    if not stream:
        return
    at = rng.randrange(len(stream))
    kind = rng.randrange(5)
    if kind == 0:
        del stream[at]
    elif kind == 1:
        stream[at] = rng.choice(_SPECIAL) if rng.random() < 0.5 else rng.randrange(256)
    elif kind == 2:
        stream[at:at] = bytes([rng.choice(_SPECIAL) if rng.random() < 0.5 else rng.randrange(256)])
    elif kind == 3:
        stream[at:at] = stream[at:at + rng.randint(1, 20)]
    else:
        del stream[at:]


def damaged_stream(rng: random.Random, addresses: Sequence[int] = range(16)) -> bytes:
    """1..8 frames (every request and reply of the protocol, to the map's ``addresses``
    mostly), crafted frames, garbage and long lines, then 0..5 damages (a byte lost, changed
    or added, a slice repeated, the tail cut)."""
    stream = bytearray(b"".join(rng.choice(_MAKERS)(rng, addresses)
                                for _ in range(rng.randint(1, 8))))
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3, 5))):
        _damage(rng, stream)
    return bytes(stream)


#: Seeds of the differential test: stream i uses seed FIRST + i. Rerun one stream with
#: REGDEV_DIFF_SEED=<seed> REGDEV_DIFF_COUNT=1 (and -k default or -k sensor).
FIRST_SEED = int(os.environ.get("REGDEV_DIFF_SEED", "15000"))
STREAMS = int(os.environ.get("REGDEV_DIFF_COUNT", "10000"))


_ID_CHARACTERS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _device_id(rng: random.Random) -> str:
    """An id as the C core may be given one: 8 hex digits (the Uno's), 1..16 of 0-9 and A-Z,
    or none (the core then says no epoch)."""
    kind = rng.randrange(4)
    if kind == 0:
        return ""
    if kind == 1:
        return "".join(rng.choice("0123456789ABCDEF") for _ in range(8))
    return "".join(rng.choice(_ID_CHARACTERS) for _ in range(rng.randint(1, 16)))


class Mapped(NamedTuple):
    """A C core built with a register map, the map, and the core's description."""

    core: CCore
    regmap: RegisterMap
    description: str


@pytest.fixture(params=["default", "sensor"])
def mapped(request: pytest.FixtureRequest) -> Mapped:
    """The C core of the default map, or of the example map (examples/sensor.rdl, compiled
    by `regdev map --json` and generated into C by gen_regmap.py)."""
    if request.param == "default":
        core: CCore = request.getfixturevalue("core")
        return Mapped(core, RegisterMap.default(), HOST_IDENTITY)
    core = request.getfixturevalue("sensor_core")
    path: Path = request.getfixturevalue("sensor_json")
    return Mapped(core, RegisterMap.from_json(path.read_bytes()), "regdev C/host sensor")


@pytest.mark.timeout(600)
def test_core_replies_like_the_python_codec_on_random_damaged_streams(mapped: Mapped) -> None:
    """On 10,000 seeded random damaged byte streams (each map) the C core sends the very bytes
    the Python firmware simulator sends (the codec in its device role, serving the same
    register map), and holds the same registers; both say the same id (random, of 1..16
    characters, or none) and epochs (from a random start count, counting the resets of the
    stream)."""
    core, regmap, description = mapped
    addresses = regmap.addresses
    seen: set[bytes] = set()
    silent = 0
    epochs: set[tuple[str | None, str | None]] = set()
    for seed in range(FIRST_SEED, FIRST_SEED + STREAMS):
        rng = random.Random(seed)
        stream = damaged_stream(rng, addresses)
        device_id = _device_id(rng)
        starts = rng.choice((0, 1, 0xFFFF, rng.randrange(0x10000)))
        expected, registers = python_device(
            stream, python_firmware(description, device_id, starts, regmap), rng)
        core.reset(device_id, starts)
        got = core.feed(stream)
        if got != expected or core.registers() != registers:
            pytest.fail(f"seed {seed} (rerun: REGDEV_DIFF_SEED={seed} REGDEV_DIFF_COUNT=1): "
                        f"stream {stream!r}, id {device_id!r}, start count {starts}\n"
                        f"C:      {got!r}\nPython: {expected!r}\n"
                        f"registers C {core.registers()} Python {registers}")
        replies = [wire.decode(line) for line in expected.splitlines(keepends=True)]
        seen.update(b"e " + r.code.encode() if isinstance(r, wire.ErrorReply)
                    else wire.encode(r)[4:5] for r in replies)
        epochs.update((r.device_id, r.epoch) for r in replies
                      if isinstance(r, wire.IdentifyReply))
        silent += stream.count(b"$") > 0 and not expected
    # The streams reached every reply and every error a device sends (DATA: a map with
    # read-only registers and reserved bits), and some were answered by nothing at all
    # (replies heard as echoes, garbage); identify said no epoch, and epochs after resets.
    every = {b"i", b"r", b"w", b"z", b"d", b"g", b"p", b"m", b"e ADDR", b"e CKSUM",
             b"e SYNTAX"}
    assert seen == (every if regmap.is_default else every | {b"e DATA"})
    assert silent > STREAMS // 100
    assert (None, None) in epochs
    assert any(epoch is not None and not epoch.endswith("0000") for _, epoch in epochs)


# --- register maps --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sensor_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example map, examples/sensor.rdl, in the compiled JSON form (`regdev map --json`)."""
    path = tmp_path_factory.mktemp("sensor") / "sensor.json"
    assert main(["map", str(EXAMPLES / "sensor.rdl"), "--json", "-o", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def sensor_core(sensor_json: Path, tmp_path_factory: pytest.TempPathFactory) -> CCore:
    """The C core built from the example map."""
    need("host")
    build = tmp_path_factory.mktemp("c-sensor")
    make(build, "lib", regmap=sensor_json)
    return CCore(build / "host" / "libregdev_core.so")


#: A map of every kind of bit: a read-only register, reserved bits, write-1-to-clear bits,
#: clear-on-read bits, a write-only field, addresses with no register, and one at 0x80.
TEST_MAP = RegisterMap([
    Register("ID", 0, access="r", reset=0xA5),
    Register("CTRL", 1, fields=(Field("EN", 0, 0, reset=1), Field("MODE", 1, 3))),
    Register("STATUS", 2, fields=(Field("FLAGS", 0, 3, onwrite="woclr", reset=0xF),
                                  Field("CFG", 4, 7))),
    Register("EVENTS", 3, fields=(Field("COUNT", 2, 3, access="r", onread="rclr", reset=3),
                                  Field("LEVEL", 4, 5, access="r", reset=3))),
    Register("KEY", 4, fields=(Field("KEY", 0, 6, access="w"),)),
    Register("LAST", 0x80, reset=0x80),
], name="test-map")


@pytest.fixture(scope="module")
def map_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared object of the C core built from TEST_MAP."""
    need("host")
    build = tmp_path_factory.mktemp("c-map")
    regmap = build / "test-map.json"
    regmap.write_text(TEST_MAP.to_json())
    make(build, "lib", regmap=regmap)
    return build


class Both:
    """The C core of TEST_MAP and the Python simulator serving it, asked the same."""

    def __init__(self, build: Path) -> None:
        self.core = CCore(build / "host" / "libregdev_core.so")
        self.python = python_firmware("regdev C/host test-map", DEVICE_ID, STARTS, TEST_MAP)
        self.link = wire.Connection(wire.DEVICE)

    def ask(self, request: wire.Request) -> wire.Frame:
        """The one reply of the C core, checked to be the Python simulator's too."""
        sent = wire.encode(request)
        got = self.core.feed(sent)
        self.link.receive_data(sent)
        event = self.link.next_event()
        assert isinstance(event, wire.Request)
        assert got == self.link.send(self.python.answer(event)), request
        assert self.core.registers() == held(self.python.registers)
        return wire.decode(got)


@pytest.fixture
def both(map_build: Path) -> Both:
    return Both(map_build)


def ask(core: CCore, request: wire.Request) -> wire.Frame:
    """Send one request to the core; its one reply, decoded."""
    reply = core.feed(wire.encode(request))
    assert reply.count(b"\n") == 1, reply
    return wire.decode(reply)


START = (0xA5, 0x01, 0x0F, 0x3C) + (0,) * 12


def test_map_reset_values_and_dump(both: Both) -> None:
    """At start and after Z every register holds its reset value; a dump shows addresses with
    no register and write-only bits as 0, D AA the 16 from AA; the identity names the map."""
    assert both.ask(wire.DumpRequest(1)) == wire.DumpReply(1, START)
    assert both.ask(wire.DumpRequest(2, 0x7F)) == wire.DumpReply(2, (0, 0x80) + (0,) * 14, 0x7F)
    assert both.ask(wire.DumpRequest(3, 0xF8)) == wire.DumpReply(3, (0,) * 16, 0xF8)
    assert both.ask(wire.WriteRequest(4, 1, 0x0E)) == wire.WriteReply(4, 1, 0x0E)
    assert both.ask(wire.ResetRequest(5)) == wire.ResetReply(5)
    assert both.ask(wire.DumpRequest(6)) == wire.DumpReply(6, START)
    assert both.core.identity == "regdev C/host test-map"


def test_map_absent_register_is_addr(both: Both) -> None:
    """An address with no register answers e ADDR to every request that names it, a block
    that reaches one too (past FF as well); nothing is written."""
    for request in (wire.ReadRequest(1, 5), wire.WriteRequest(2, 14, 1),
                    wire.MaskedWriteRequest(3, 0x81, 1, 1), wire.ReadBlockRequest(4, 3, 3),
                    wire.WriteBlockRequest(5, 0x7F, (1, 1)),
                    wire.WriteBlockRequest(6, 1, (1,) * 16), wire.ReadBlockRequest(7, 0xFF, 2)):
        assert both.ask(request) == wire.ErrorReply(request.seq, "ADDR"), request
    assert both.ask(wire.DumpRequest(8)) == wire.DumpReply(8, START)


def test_map_read_only_register_refuses_a_write(both: Both) -> None:
    """A write, a masked write or a block write that reaches a register with no writable bit
    is refused with e DATA and not executed (all of the block)."""
    assert both.ask(wire.WriteRequest(1, 0, 0x00)) == wire.ErrorReply(1, "DATA")
    assert both.ask(wire.MaskedWriteRequest(2, 0, 0x01, 0x00)) == wire.ErrorReply(2, "DATA")
    assert both.ask(wire.WriteBlockRequest(3, 1, (0x0E, 0, 0))) == wire.ErrorReply(3, "DATA")
    assert both.ask(wire.DumpRequest(4)) == wire.DumpReply(4, START)


def test_map_reserved_bits_are_refused(both: Both) -> None:
    """A write that sets a reserved bit is refused (e DATA); a masked write only when the bit
    is set in both the mask and the data; reserved bits read 0."""
    assert both.ask(wire.WriteRequest(1, 1, 0xFF)) == wire.ErrorReply(1, "DATA")
    assert both.ask(wire.WriteRequest(2, 1, 0x0F)) == wire.WriteReply(2, 1, 0x0F)
    assert both.ask(wire.MaskedWriteRequest(3, 1, 0xF0, 0xF0)) == wire.ErrorReply(3, "DATA")
    assert both.ask(wire.MaskedWriteRequest(4, 1, 0xF1, 0x00)) == wire.MaskedWriteReply(4, 1, 0x0E)
    assert both.ask(wire.ReadRequest(5, 1)) == wire.ReadReply(5, 1, 0x0E)


def test_map_write_one_to_clear_bits(both: Both) -> None:
    """A 1 written to a write-1-to-clear bit clears it, a 0 leaves it; other bits take the
    data; a masked write touches only the bits of its mask."""
    assert both.ask(wire.WriteRequest(1, 2, 0x05)) == wire.WriteReply(1, 2, 0x0A)
    assert both.ask(wire.WriteRequest(2, 2, 0xF0)) == wire.WriteReply(2, 2, 0xFA)
    assert both.ask(wire.MaskedWriteRequest(3, 2, 0x32, 0xFF)) == wire.MaskedWriteReply(3, 2, 0xF8)
    assert both.ask(wire.WriteRequest(4, 2, 0xFF)) == wire.WriteReply(4, 2, 0xF0)


def test_map_clear_on_read_bits(both: Both) -> None:
    """Clear-on-read bits clear after a read (R, and each read of a G), not after a dump
    (D)."""
    assert both.ask(wire.DumpRequest(1)).values[3] == 0x3C  # type: ignore[union-attr]
    assert both.ask(wire.ReadBlockRequest(2, 2, 2)) == wire.ReadBlockReply(2, 2, (0x0F, 0x3C))
    assert both.ask(wire.ReadRequest(3, 3)) == wire.ReadReply(3, 3, 0x30)
    assert both.ask(wire.DumpRequest(4)).values[3] == 0x30  # type: ignore[union-attr]


def test_map_write_only_bits(both: Both) -> None:
    """Write-only bits take writes and read as 0, in the w reply too; the register holds them."""
    assert both.ask(wire.WriteRequest(1, 4, 0x77)) == wire.WriteReply(1, 4, 0)
    assert both.ask(wire.ReadRequest(2, 4)) == wire.ReadReply(2, 4, 0)
    assert both.ask(wire.DumpRequest(3)).values[4] == 0  # type: ignore[union-attr]
    assert both.core.registers()[4] == 0x77
    assert both.ask(wire.WriteRequest(4, 4, 0xF7)) == wire.ErrorReply(4, "DATA")  # reserved


def test_map_block_write_is_all_or_nothing(both: Both) -> None:
    """P writes every value, or (a value refused) none; its reply has the values after."""
    assert both.ask(wire.WriteBlockRequest(1, 1, (0x0E, 0x05))) == wire.WriteBlockReply(
        1, 1, (0x0E, 0x0A))
    assert both.ask(wire.WriteBlockRequest(2, 1, (0x02, 0x80 | 0x0F, 0))) == wire.ErrorReply(
        2, "DATA")  # EVENTS, the third, is read-only
    assert both.ask(wire.WriteBlockRequest(3, 1, (0x10, 0))) == wire.ErrorReply(3, "DATA")
    assert both.ask(wire.ReadBlockRequest(4, 1, 2)) == wire.ReadBlockReply(4, 1, (0x0E, 0x0A))


def test_map_block_count_out_of_range_is_syntax(map_build: Path) -> None:
    """G with a count of 0 or over 16, and D 00 (spelt D), are not frames: e SYNTAX."""
    core = CCore(map_build / "host" / "libregdev_core.so")
    for payload in (b"01 G 01 00", b"02 G 01 11", b"03 D 00"):
        assert core.feed(frame(payload)) == wire.encode(
            wire.ErrorReply(int(payload[:2], 16), "SYNTAX")), payload


# --- the generator --------------------------------------------------------------------------------


def generate(tmp_path: Path, regmap: str | None) -> subprocess.CompletedProcess[str]:
    """Run gen_regmap.py into tmp_path/regmap.h, with the map text ``regmap`` in
    tmp_path/map.json (or no map)."""
    command = [sys.executable, str(GEN), "-o", str(tmp_path / "regmap.h")]
    if regmap is not None:
        path = tmp_path / "map.json"
        path.write_text(regmap)
        command += ["--map", str(path)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def _table(header: str) -> dict[str, list[int]]:
    """The generated table's rows by column: {"addr": [...], ...}."""
    return {column: [int(value[2:4], 16) for value in values.split(", ")]
            for values, column in re.findall(r"^    \{(.*)\}, /\* (\w+) \*/$", header,
                                             re.MULTILINE)}


def test_generator_default_is_sixteen_plain_registers(tmp_path: Path) -> None:
    """Without --map: 16 read-write registers at 0..15, reset 0, no special bits; the same
    table from the default map written out as JSON; no path or date in it."""
    assert generate(tmp_path, None).returncode == 0
    default = (tmp_path / "regmap.h").read_text()
    assert _table(default) == {"addr": list(range(16)), "reset": [0] * 16,
                               "writable": [0xFF] * 16, "readable": [0xFF] * 16,
                               "reserved": [0] * 16, "woclr": [0] * 16, "rclr": [0] * 16}
    assert '#define REGDEV_MAP_NAME "default"' in default
    assert "#define REGDEV_REGISTER_COUNT 16u" in default
    assert str(tmp_path) not in default
    assert generate(tmp_path, RegisterMap.default().to_json()).returncode == 0
    again = (tmp_path / "regmap.h").read_text()
    assert _table(again) == _table(default)
    assert '#define REGDEV_MAP_NAME "map"' in again  # an unnamed map: the file's name


def test_generator_table_is_regdevs_map_model(tmp_path: Path) -> None:
    """The table holds what regdev's map model works out for each register: TEST_MAP's
    masks, address order, count and name."""
    assert generate(tmp_path, TEST_MAP.to_json()).returncode == 0
    header = (tmp_path / "regmap.h").read_text()
    registers = TEST_MAP.registers
    assert _table(header) == {
        "addr": [0, 1, 2, 3, 4, 0x80], "reset": [r.reset for r in registers],
        "writable": [r.writable_mask for r in registers],
        "readable": [r.readable_mask for r in registers],
        "reserved": [r.reserved_mask for r in registers],
        "woclr": [r.woclr_mask for r in registers], "rclr": [r.rclr_mask for r in registers]}
    assert _table(header)["reserved"] == [0, 0xF0, 0, 0xC3, 0x80, 0]
    assert "#define REGDEV_REGISTER_COUNT 6u" in header
    assert '#define REGDEV_MAP_NAME "test-map"' in header


def test_generator_rewrites_the_header_only_when_it_changes(tmp_path: Path) -> None:
    """The same map leaves the header untouched (make rebuilds nothing); a new map rewrites it."""
    assert generate(tmp_path, TEST_MAP.to_json()).returncode == 0
    header = tmp_path / "regmap.h"
    os.utime(header, (1_000_000, 1_000_000))
    assert generate(tmp_path, TEST_MAP.to_json()).returncode == 0
    assert header.stat().st_mtime == 1_000_000
    assert generate(tmp_path, None).returncode == 0
    assert header.stat().st_mtime != 1_000_000


@pytest.mark.parametrize(("name", "kept"), [
    ("a-register-map-with-a-very-long-name", "a-register-map-with-a-very-long-na"),
    ("TS8 temperature sensor", "TS8-temperature-sensor"),
    ('x"$*\\y', "x-y"),
    ("", "map"),  # the file's name
])
def test_generator_names_the_map_in_the_identity(tmp_path: Path, name: str, kept: str) -> None:
    """The map's name (else the file's) in the description: letters, digits, `_`, `.` and
    `-` (others become `-`), cut to fit the 48-byte identify text."""
    regmap = RegisterMap(TEST_MAP.registers, name=name)
    assert generate(tmp_path, regmap.to_json()).returncode == 0
    found = re.search(r'REGDEV_MAP_NAME "(.*)"', (tmp_path / "regmap.h").read_text())
    assert found is not None and found[1] == kept
    assert len(f"regdev C/host {found[1]}") <= 48


def _map_text(registers: list[dict[str, object]]) -> str:
    return json.dumps({"format": "regdev-map", "version": 1, "name": "m",
                       "registers": registers})


@pytest.mark.parametrize("regmap", [
    "{",
    "[]",
    json.dumps({"format": "systemrdl", "version": 1, "registers": []}),
    _map_text([]),
    _map_text([{"addr": -1}]),
    _map_text([{"addr": 1, "reserved_mask": 0xF0}]),  # no fields: nothing is reserved
    _map_text([{"addr": 1}, {"addr": 1}]),
    _map_text([{"addr": 1, "fields": [{"name": "A", "lsb": 0, "msb": 3},
                                      {"name": "B", "lsb": 3, "msb": 4}]}]),
])
def test_generator_refuses_what_regdev_refuses(tmp_path: Path, regmap: str) -> None:
    """A map regdev's map model refuses: its message (naming the file and the place) in one
    line, exit 2, no header."""
    with pytest.raises(MapError) as refused:
        RegisterMap.from_json(regmap, str(tmp_path / "map.json"))
    done = generate(tmp_path, regmap)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"gen_regmap.py: error: {refused.value}\n"
    assert not (tmp_path / "regmap.h").exists()


def test_generator_refuses_more_registers_than_the_firmware_holds(tmp_path: Path) -> None:
    """129 registers: one line, exit 2, no header; 128 are generated."""
    many = RegisterMap([Register(None, addr) for addr in range(129)])
    done = generate(tmp_path, many.to_json())
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"gen_regmap.py: error: {tmp_path / 'map.json'}: the C firmware "
                           "holds at most 128 registers (one byte of RAM each); this map has "
                           "129\n")
    assert not (tmp_path / "regmap.h").exists()
    fewer = RegisterMap([Register(None, addr) for addr in range(128)])
    assert generate(tmp_path, fewer.to_json()).returncode == 0
    assert "#define REGDEV_REGISTER_COUNT 128u" in (tmp_path / "regmap.h").read_text()


# --- on a pty: the host build and the simavr image ------------------------------------------------


@contextmanager
def serving(command: list[str]) -> Iterator[str]:
    """Run a device server that prints its port first; yield the port; stop it with SIGTERM
    and check it exits 0."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None and process.stderr is not None
    try:
        port = process.stdout.readline().strip()
        assert port, f"no port printed: {process.stderr.read()}"
        yield port
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        status = process.wait(timeout=10)
        err = process.stderr.read()
        process.stdout.close()
        process.stderr.close()
    assert (status, err) == (0, "")


@pytest.fixture(params=["host", pytest.param("avr", marks=SHARED_BUILD)])
def device_command(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                   ) -> list[str]:
    """The command serving the C firmware on a pty: the host build, or the Uno image in
    simavr through `regdev firmware-sim --avr` (which builds it if needed)."""
    if request.param == "host":
        build: Path = request.getfixturevalue("host_build")
        return [str(build / "host" / "regdev-firmware-host")]
    need("avr")
    return [sys.executable, str(SIM), "--avr"]


def _identity(command: list[str]) -> str:
    """The description the device of ``command`` says."""
    return UNO_IDENTITY if "--avr" in command else HOST_IDENTITY


def _first_identity(command: list[str]) -> re.Pattern[str]:
    """What a new device of ``command`` says to identify before any reset: its description,
    a random id of 8 hex digits, start count 1, no reset."""
    return re.compile(re.escape(_identity(command)) + r" id=([0-9A-F]{8}) epoch=00010000")


@pytest.mark.timeout(120)
def test_wild_cases_and_demo_over_the_port_match_in_process(
        capsys: pytest.CaptureFixture[str], device_command: list[str]) -> None:
    """The shared wild cases replayed through regdev over the pty give the in-process
    verdicts and registers; `regdev demo --port` prints what the in-process demo prints."""
    wild = str(EXAMPLES / "wild-calls.jsonl")
    local_replay = run(capsys, "replay", wild, "--json", "--no-audit")
    local_demo = run(capsys, "demo", "--json", "--no-audit")
    with serving(device_command) as port:
        remote_demo = run(capsys, "demo", "--json", "--no-audit", "--port", port,
                          "--timeout", "2")
        # The demo left registers set: --reset gives the replay a fresh device.
        remote_replay = run(capsys, "replay", wild, "--json", "--no-audit", "--port", port,
                            "--timeout", "2", "--reset")
    assert remote_replay == local_replay
    assert json.loads(remote_replay[1].splitlines()[-1]) == {
        "registers": default_rows([0, 0, 0, 200] + [0] * 12)}
    assert remote_demo == local_demo


@pytest.mark.timeout(120)
def test_shell_and_serve_drive_the_firmware(device_command: list[str], tmp_path: Path) -> None:
    """`regdev shell --port` and `regdev serve --port` (MCP over stdio) reach the firmware."""
    script = "write 3 0xc8\nread 3\nidentify\nwrite 0x1f 1\ndump\nquit\n"
    with serving(device_command) as port:
        shell = subprocess.run([str(REGDEV), "shell", "--port", port, "--timeout", "2",
                                "--no-audit"], input=script, capture_output=True, text=True,
                               timeout=60, check=False)
        calls = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "test", "version": "0"}}},
                 {"jsonrpc": "2.0", "method": "notifications/initialized"},
                 {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                  "params": {"name": "write_register", "arguments": {"addr": 9, "data": 90}}},
                 {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                  "params": {"name": "read_register", "arguments": {"addr": 9}}}]
        serve = subprocess.run(
            [str(REGDEV), "serve", "--port", port, "--timeout", "2", "--log-level", "warning",
             "--audit", str(tmp_path / "audit.db")],
            input="".join(json.dumps(call) + "\n" for call in calls), capture_output=True,
            text=True, timeout=60, check=False, env={**os.environ, "HOME": str(tmp_path)})
    assert (shell.returncode, shell.stderr) == (1, "")  # 1: write 0x1f 1 was refused
    lines = shell.stdout.splitlines()
    said = lines[1].removeprefix("accepted  identify_device: ")
    assert _first_identity(device_command).fullmatch(said), lines[1]
    assert lines[2:6] == [
        "accepted  write_register: register 3 = 0xc8 (200)",
        "accepted  read_register: register 3 = 0xc8 (200)",
        f"accepted  identify_device: {said}",
        "refused   validate/range-addr (retryable): addr 31 is outside 0..15"]
    assert lines[7:9] == ["  addr    0    1    2    3    4    5    6    7",
                          "  data 0x00 0x00 0x00 0xc8 0x00 0x00 0x00 0x00"]
    assert serve.returncode == 0, serve.stderr
    answers = {answer["id"]: answer for answer in map(json.loads, serve.stdout.splitlines())}
    assert answers[1]["result"]["structuredContent"] == {
        "ok": True, "tool": "write_register", "result": {"addr": 9, "data": 90}}
    assert answers[2]["result"]["structuredContent"] == {
        "ok": True, "tool": "read_register", "result": {"addr": 9, "data": 90}}


@pytest.mark.timeout(120)
def test_damaged_streams_over_the_pty_get_the_python_replies(device_command: list[str]) -> None:
    """Random damaged byte streams written to the port (the UART, its interrupt and ring on the
    AVR) are answered byte for byte as the Python firmware simulator answers them, given the
    device's id (it says it first) and the C firmware's epochs."""
    link = wire.Connection(wire.DEVICE)
    rng = random.Random(7)
    streams = [damaged_stream(rng) for _ in range(40)]
    # Last, a dump after an LF (which ends whatever frame the streams left open): the
    # registers too are the same.
    streams.append(b"\n" + wire.encode(wire.DumpRequest(1)))
    with serving(device_command) as port, serial.Serial(port, 115200, timeout=5) as line:
        line.write(wire.encode(wire.IdentifyRequest(1)))
        reply = wire.decode(line.read_until(b"\n"))
        assert isinstance(reply, wire.IdentifyReply)
        said = _first_identity(device_command).fullmatch(reply.text)
        assert said is not None, reply
        firmware = python_firmware(_identity(device_command), said[1], 1)
        for stream in streams:
            # as the simulator's serve() does, on one link that lives across the streams
            link.receive_data(stream)
            expected = bytearray()
            while True:
                try:
                    request = link.next_event()
                except wire.RemoteProtocolError as error:
                    expected += link.send(wire.ErrorReply(error.seq or 0, error.code))
                    continue
                if request is wire.NEED_DATA:
                    break
                assert isinstance(request, wire.Request)
                expected += link.send(firmware.answer(request))
            line.write(stream)
            got = line.read(len(expected))
            assert got == bytes(expected), stream
    assert wire.decode(bytes(expected).splitlines(keepends=True)[-1]) == wire.DumpReply(
        1, tuple(firmware.registers.snapshot()))


# --- the image: budget, the shipped .hex, the harness ---------------------------------------------

MAKEFILE = (C_DIR / "Makefile").read_text(encoding="utf-8")


def _makefile_value(name: str) -> str:
    found = re.search(rf"^{name} := (\S+)$", MAKEFILE, re.MULTILINE)
    assert found is not None, name
    return found[1]


def test_image_fits_the_size_budget(avr_build: Path) -> None:
    """avr-size: flash (.text + .data) <= 4 KiB and static RAM (.data + .bss) <= 512 bytes,
    the budget the Makefile's `make size` checks too."""
    done = subprocess.run(["avr-size", str(avr_build / "avr" / "regdev-uno.elf")],
                          capture_output=True, text=True, check=True)
    text, data, bss = map(int, done.stdout.splitlines()[1].split()[:3])
    assert (_makefile_value("FLASH_BUDGET"), _makefile_value("RAM_BUDGET")) == ("4096", "512")
    assert text + data <= 4096
    assert data + bss <= 512
    out = make(avr_build, "size")
    assert f"flash {text + data} of 4096 bytes, static RAM {data + bss} of 512 bytes" in out


def test_shipped_hex_is_built_from_this_source(avr_build: Path) -> None:
    """firmware-sim/c/regdev-uno.hex is what `make avr` builds from the source now (refresh
    it with `make -C firmware-sim/c hex`), with the pinned compiler."""
    pinned = _makefile_value("SHIPPED_AVR_GCC")
    version = subprocess.run(["avr-gcc", "-dumpversion"], capture_output=True, text=True,
                             check=True).stdout.strip()
    if version != pinned and os.environ.get("REGDEV_REQUIRE_FIRMWARE") != "1":
        pytest.skip(f"the shipped .hex is built with avr-gcc {pinned}; this is {version}")
    built = (avr_build / "avr" / "regdev-uno.hex").read_bytes()
    assert (C_DIR / "regdev-uno.hex").read_bytes() == built, (
        "firmware-sim/c/regdev-uno.hex is stale: run make -C firmware-sim/c hex")
    # The ELF's .text and .data are all of it: 16-byte records, and an end record.
    assert built.endswith(b":00000001FF\r\n") or built.endswith(b":00000001FF\n")


@contextmanager
def harness(avr_build: Path, *options: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The simavr harness running the image, with ``options``; yield its port and process."""
    process = subprocess.Popen(
        [str(avr_build / "sim" / "regdev-simavr"), *options,
         str(avr_build / "avr" / "regdev-uno.elf")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    try:
        yield process.stdout.readline().strip(), process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        process.stdout.close()
        assert process.stderr is not None
        process.stderr.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flood", [
    b"$" + b"A" * 700 + b"\n",
    bytes(0x80 | (i * 37 % 0x7F) for i in range(1000)),  # noise: no LF, no `$`
    bytes(range(256)) * 8])
@pytest.mark.parametrize("poll_us", ["100", "0"])
def test_the_board_answers_after_any_byte_stream(avr_build: Path, flood: bytes,
                                                 poll_us: str) -> None:
    """An over-long line, 1000 bytes of noise without a line feed, every byte value: sent at
    once into the simavr pty, they leave the Uno image answering the next request (the bridge
    moved nothing more once a burst overran it)."""
    with harness(avr_build, "--poll-us", poll_us) as (port, _), \
            serial.Serial(port, 115200, timeout=10) as line:
        line.write(wire.encode(wire.WriteRequest(1, 2, 0x33)))
        assert wire.decode(line.read_until(b"\n")) == wire.WriteReply(1, 2, 0x33)
        line.write(flood)
        line.flush()
        for seq in (2, 3):  # (the LF first ends what the flood left unfinished: e SYNTAX)
            line.write(b"\n" + wire.encode(wire.ReadRequest(seq, 2)))
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                frame = line.read_until(b"\n")
                if frame.startswith(b"$%02X r" % seq):
                    break
            assert wire.decode(frame) == wire.ReadReply(seq, 2, 0x33)


@pytest.mark.timeout(60)
def test_harness_link_stats_and_clean_exit(avr_build: Path, tmp_path: Path) -> None:
    """--link: the port printed is the link to the pty (and no /tmp/simavr-uart0 points at
    it); SIGTERM ends it with 0, the link gone; --stats reports the cycles run at 16 MHz;
    nothing else on stdout."""
    link = tmp_path / "uno"
    with harness(avr_build, "--link", str(link), "--stats") as (port, process):
        assert port == str(link)
        target = os.readlink(link)
        assert target.startswith("/dev/pts/")
        with serial.Serial(port, 115200, timeout=5) as line:
            line.write(wire.encode(wire.WriteRequest(9, 2, 0x33)))
            assert wire.decode(line.read_until(b"\n")) == wire.WriteReply(9, 2, 0x33)
        simavrs = Path("/tmp/simavr-uart0")
        assert not (simavrs.is_symlink() and os.readlink(simavrs) == target)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.read() == ""
        err = process.stderr.read()
    assert not link.is_symlink()
    stats = re.fullmatch(r"regdev-simavr: (\d+) cycles \(([\d.]+) s at 16000000 Hz\) in "
                         r"[\d.]+ s wall clock, [\d.]+ s CPU \(\d+% of one core\): \d+ cycles "
                         r"per wall second \([\d.]+x real time\)\n", err)
    assert stats is not None, err
    assert int(stats[1]) > 0
    assert float(stats[2]) == pytest.approx(int(stats[1]) / 16e6, abs=0.001)


def test_harness_refuses_what_it_cannot_run(avr_build: Path, tmp_path: Path) -> None:
    """A file that is not an AVR ELF image (text, a host program), a missing file, no file:
    one line on stderr, exit 2."""
    simavr = str(avr_build / "sim" / "regdev-simavr")
    junk = tmp_path / "junk.elf"
    junk.write_text("not an image\n")
    for image, why in ((junk, "not an AVR ELF image"),
                       (Path(sys.executable).resolve(), "not an AVR ELF image"),
                       (tmp_path / "missing.elf", "No such file or directory")):
        done = subprocess.run([simavr, str(image)], capture_output=True, text=True,
                              check=False)
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == f"regdev-simavr: error: cannot load the image {image}: {why}\n"
    done = subprocess.run([simavr], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("usage: regdev-simavr [--link PATH]")


@pytest.mark.parametrize(("flag", "given"), [
    ("--freq", "0"), ("--freq", "-5"), ("--freq", "1e6"), ("--freq", "nan"), ("--freq", ""),
    ("--freq", "100000001"), ("--freq", "99999999999999999999"), ("--freq", " 16000000"),
    ("--poll-us", "-1"), ("--poll-us", "1000001"), ("--poll-us", "abc"), ("--poll-us", "0.5"),
    ("--poll-us", "inf")])
def test_harness_refuses_a_number_out_of_range(avr_build: Path, flag: str, given: str) -> None:
    """--freq (1..100000000 Hz) and --poll-us (0..1000000 simulated microseconds) take whole
    numbers in decimal digits: anything else (a sign, an exponent, NaN, a number past the
    range, which strtoul would have wrapped or cut) is one line naming the flag and the range,
    exit 2, nothing run."""
    unit, top = (("hertz", "1..100000000") if flag == "--freq"
                 else ("simulated microseconds", "0..1000000"))
    done = subprocess.run([str(avr_build / "sim" / "regdev-simavr"), flag, given,
                           str(avr_build / "avr" / "regdev-uno.elf")],
                          capture_output=True, text=True, check=False, timeout=30)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"regdev-simavr: error: {flag}: expected a whole number of {unit} "
                           f"in {top}, got `{given}`\n")


@pytest.mark.timeout(120)
def test_a_board_without_an_id_draws_one_and_keeps_it_in_eeprom(avr_build: Path,
                                                                tmp_path: Path) -> None:
    """An erased EEPROM (a new chip): the firmware draws an id at its first start (from the
    watchdog's jitter: in simavr, which is cycle-exact, always the same one) and writes it,
    the start count and the magic; the next start says the same id and the next count. A
    board without --eeprom is a new board each run, with an id of its own."""
    eeprom = tmp_path / "uno.eeprom"
    eeprom.write_bytes(b"\xff" * 1024)
    with harness(avr_build, "--eeprom", str(eeprom)) as (port, _):
        device_id, epoch = say(port)
    assert device_id is not None and re.fullmatch(r"[0-9A-F]{8}", device_id)
    assert epoch == "00010000"
    kept = eeprom.read_bytes()
    assert len(kept) == 1024 and kept[10:] == b"\xff" * 1014
    assert kept[:10] == b"RDv1" + bytes.fromhex(device_id) + b"\x01\x00"
    with harness(avr_build, "--eeprom", str(eeprom)) as (port, _):
        assert say(port) == (device_id, "00020000")
    assert eeprom.read_bytes()[8:10] == b"\x02\x00"
    ids = set()
    for _ in range(2):
        with harness(avr_build) as (port, _):
            new_id, epoch = say(port)
            assert epoch == "00010000" and new_id not in (None, device_id)
            ids.add(new_id)
    assert len(ids) == 2


@pytest.mark.parametrize(("argv", "message"), [
    (["--id", "5F3A9C01"], "--id needs --eeprom FILE (a board that keeps its id keeps its start "
                           "count, or a restart says old epochs again)"),
    (["--eeprom", "{new}", "--id", "BENCH7"], "--id: expected 8 upper-case hex digits 0-9 A-F "
                                              "(what the EEPROM keeps), got `BENCH7`"),
    (["--eeprom", "{kept}", "--id", "12345678"], "the EEPROM file {kept} holds id 5F3A9C01, not "
                                                 "the --id given"),
    (["--eeprom", "{short}"], "the EEPROM file {short} is not 1024 bytes (the MCU's EEPROM)"),
])
def test_harness_refuses_an_eeprom_it_cannot_keep(avr_build: Path, tmp_path: Path,
                                                  argv: list[str], message: str) -> None:
    """One line on stderr, exit 2, nothing run, no file made or changed."""
    names = {"new": tmp_path / "new.eeprom", "kept": tmp_path / "kept.eeprom",
             "short": tmp_path / "short.eeprom"}
    kept = b"RDv1" + bytes.fromhex("5F3A9C01") + b"\x03\x00" + b"\xff" * 1014
    names["kept"].write_bytes(kept)
    names["short"].write_bytes(b"\xff" * 512)
    done = subprocess.run([str(avr_build / "sim" / "regdev-simavr"),
                           *(arg.format(**names) for arg in argv),
                           str(avr_build / "avr" / "regdev-uno.elf")],
                          capture_output=True, text=True, check=False, timeout=30)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"regdev-simavr: error: {message.format(**names)}\n"
    assert not names["new"].exists() and names["kept"].read_bytes() == kept
    assert names["short"].read_bytes() == b"\xff" * 512


def test_host_build_link_and_usage(host_build: Path, tmp_path: Path) -> None:
    """The host build prints --link's path and keeps the link while it serves; an unknown
    argument is a usage error (exit 2)."""
    program = str(host_build / "host" / "regdev-firmware-host")
    link = tmp_path / "port"
    with serving([program, "--link", str(link)]) as port:
        assert port == str(link) and os.readlink(link).startswith("/dev/pts/")
        with serial.Serial(port, 115200, timeout=5) as line:
            line.write(wire.encode(wire.IdentifyRequest(4)))
            reply = wire.decode(line.read_until(b"\n"))
            assert isinstance(reply, wire.IdentifyReply) and reply.seq == 4
            assert _first_identity([program]).fullmatch(reply.text), reply
    assert not link.is_symlink()
    done = subprocess.run([program, "--fault"], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.endswith("error: unexpected argument `--fault`\n")


def say(port: str) -> tuple[str | None, str | None]:
    """The id and epoch the device on ``port`` says to identify."""
    with serial.Serial(port, 115200, timeout=5) as line:
        line.write(wire.encode(wire.IdentifyRequest(7)))
        reply = wire.decode(line.read_until(b"\n"))
    assert isinstance(reply, wire.IdentifyReply), reply
    return reply.device_id, reply.epoch


def test_host_build_keeps_its_id_and_start_count_in_its_state_file(host_build: Path,
                                                                   tmp_path: Path) -> None:
    """--state FILE: a new FILE takes --id; each start counts one more in it (a restart is a
    power cycle: same id, a new epoch); without --state, a random id each run, start count
    1."""
    program = str(host_build / "host" / "regdev-firmware-host")
    state = tmp_path / "uno.state"
    with serving([program, "--state", str(state), "--id", "BENCH7"]) as port:
        assert say(port) == ("BENCH7", "00010000")
    assert state.read_text() == "BENCH7 1\n"
    assert stat.S_IMODE(state.stat().st_mode) == 0o666 & ~current_umask()
    with serving([program, "--state", str(state)]) as port:
        assert say(port) == ("BENCH7", "00020000")
    with serving([program, "--state", str(state), "--id", "BENCH7"]) as port:
        assert say(port) == ("BENCH7", "00030000")
    assert state.read_text() == "BENCH7 3\n"
    state.write_text("BENCH7 65535\n")
    with serving([program, "--state", str(state)]) as port:
        assert say(port) == ("BENCH7", "00000000")  # the 16-bit count wraps
    ids = set()
    for _ in range(2):
        with serving([program]) as port:
            device_id, epoch = say(port)
            assert epoch == "00010000" and device_id is not None
            assert re.fullmatch(r"[0-9A-F]{8}", device_id)
            ids.add(device_id)
    assert len(ids) == 2


def current_umask() -> int:
    """This process's umask (the programs it starts inherit it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("kind", ["host", "avr"])
@pytest.mark.timeout(120)
def test_a_kept_file_is_replaced_without_touching_the_users_files_beside_it(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """--state FILE and --eeprom FILE are written through a temporary file that no file of the
    user's can be (once FILE.new, which was written over and renamed away): FILE.new and a
    file named like mkstemp's FILE.XXXXXX survive byte for byte, and no file is left behind."""
    kept = tmp_path / ("uno.state" if kind == "host" else "uno.eeprom")
    mine = {kept.with_name(kept.name + ".new"): b"my notes, not the device's\n",
            kept.with_name(kept.name + ".AAAAAA"): b"mine too\n"}
    for path, data in mine.items():
        path.write_bytes(data)
    if kind == "host":
        program = str(request.getfixturevalue("host_build") / "host" / "regdev-firmware-host")
        with serving([program, "--state", str(kept), "--id", "BENCH7"]) as port:
            assert say(port) == ("BENCH7", "00010000")
        assert kept.read_text() == "BENCH7 1\n"
    else:
        kept.write_bytes(b"\xff" * 1024)
        with harness(request.getfixturevalue("avr_build"), "--eeprom", str(kept)) as (port, _):
            assert say(port)[1] == "00010000"
        assert kept.read_bytes()[:4] == b"RDv1" and kept.read_bytes()[8:10] == b"\x01\x00"
    assert {path: path.read_bytes() for path in mine} == mine
    assert sorted(tmp_path.glob(kept.name + "*")) == sorted([kept, *mine])


@pytest.mark.parametrize(("argv", "message"), [
    (["--id", "BENCH7"], "--id needs --state FILE (a device that keeps its id keeps its start "
                         "count, or a restart says old epochs again)"),
    (["--state", "{state}", "--id", "bench7"],
     "--id: expected 1..16 characters of 0-9 and A-Z, got `bench7`"),
    (["--state", "{state}", "--id", "OTHER"], "the state file {state} is device BENCH7's, not "
                                              "OTHER"),
    (["--state", "{bad}"], 'the state file {bad} is not "ID COUNT" (an id of 1..16 of 0-9 and '
                           'A-Z, a count 0..65535)'),
    (["--state", "{missing}/x"], "cannot write the state file {missing}/x: No such file or "
                                 "directory"),
])
def test_host_build_refuses_a_state_it_cannot_keep(host_build: Path, tmp_path: Path,
                                                   argv: list[str], message: str) -> None:
    """One line on stderr, exit 2, nothing served, the state file untouched."""
    names = {"state": tmp_path / "uno.state", "bad": tmp_path / "bad.state",
             "missing": tmp_path / "missing"}
    names["state"].write_text("BENCH7 3\n")
    names["bad"].write_text("BENCH7 70000\n")
    done = subprocess.run([str(host_build / "host" / "regdev-firmware-host"),
                           *(arg.format(**names) for arg in argv)],
                          capture_output=True, text=True, check=False, timeout=30)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"regdev-firmware-host: error: {message.format(**names)}\n"
    assert names["state"].read_text() == "BENCH7 3\n"


@pytest.fixture(params=["host", pytest.param("avr", marks=SHARED_BUILD)])
def restartable(request: pytest.FixtureRequest, tmp_path: Path) -> list[str]:
    """The command serving the C firmware as one device across restarts: the host build with
    a state file, or the Uno image in simavr with an EEPROM file (a restart is a power
    cycle), id 5F3A9C01."""
    if request.param == "host":
        build: Path = request.getfixturevalue("host_build")
        return [str(build / "host" / "regdev-firmware-host"), "--state",
                str(tmp_path / "device.state"), "--id", DEVICE_ID]
    need("avr")
    return [sys.executable, str(SIM), "--avr", "--eeprom", str(tmp_path / "uno.eeprom"),
            "--device-id", DEVICE_ID]


def replay_keyed(capsys: pytest.CaptureFixture[str], calls: Path, port: str,
                 *extra: str) -> tuple[dict[str, object], list[int]]:
    """``regdev replay CALLS --json --port PORT``: the first call's outcome, the registers."""
    status, out, err = run(capsys, "replay", str(calls), "--json", "--port", port,
                           "--timeout", "2", *extra)
    assert status == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    return lines[0], [row["data"] for row in lines[-1]["registers"]]


@pytest.mark.timeout(180)
def test_keyed_writes_are_replayed_until_a_reset_or_a_restart(
        capsys: pytest.CaptureFixture[str], restartable: list[str], tmp_path: Path,
        audit_path: Path) -> None:
    """regdev's idempotency keys against the C firmware: a keyed write sent again is answered
    `replay: true` from the audit log while the device says the same id and epoch; a reset
    (Z, through regdev) and a restart of the device (a power cycle: the host build's state
    file, the Uno's EEPROM in simavr) each begin a new epoch, after which the write runs
    again, and is replayed again after that."""
    calls = tmp_path / "write.jsonl"
    calls.write_text(json.dumps({"raw": json.dumps(
        {"tool": "write_register", "arguments": {"addr": 3, "data": 0xC8},
         "idempotency_key": "op-1"})}) + "\n")
    reset = tmp_path / "read.jsonl"
    reset.write_text(json.dumps({"raw": json.dumps(
        {"tool": "read_register", "arguments": {"addr": 3}})}) + "\n")
    ran = ({"ok": True, "replay": False}, 0xC8)
    replayed = ({"ok": True, "replay": True}, 0xC8)

    def outcome(*extra: str) -> tuple[dict[str, object], int]:
        first, registers = replay_keyed(capsys, calls, port, *extra)
        return {key: first[key] for key in ("ok", "replay")}, registers[3]

    with serving(restartable) as port:
        assert say(port) == (DEVICE_ID, "00010000")
        assert outcome() == ran
        assert outcome() == replayed
        _, registers = replay_keyed(capsys, reset, port, "--reset")
        assert registers == [0] * 16 and say(port) == (DEVICE_ID, "00010001")
        assert outcome() == ran
        assert outcome() == replayed
    with serving(restartable) as port:  # power cycled: registers 0, the next start count
        assert say(port) == (DEVICE_ID, "00020000")
        assert outcome() == ran
        assert outcome() == replayed
    epochs = [(record.device, record.device_epoch) for record in read_audit(audit_path)
              if record.tool == "write_register"]
    assert epochs == [(DEVICE_ID, "00010000")] * 2 + [(DEVICE_ID, "00010001")] * 2 + [
        (DEVICE_ID, "00020000")] * 2


#: What a user may have at the --link path (each must survive, refused in one line).
TAKEN: dict[str, Callable[[Path], object]] = {
    "a regular file": lambda path: path.write_text("the user's notes\n"),
    "a directory": lambda path: path.mkdir(),
    "a symlink": lambda path: path.symlink_to(path.with_name("elsewhere")),
    "a named pipe": os.mkfifo,
}


@pytest.mark.parametrize("what", list(TAKEN))
def test_host_build_refuses_a_link_path_that_is_taken(host_build: Path, tmp_path: Path,
                                                      what: str) -> None:
    """Whatever is at --link PATH (a file, a directory, a symlink: a stale link of an earlier
    run too, a pipe) is refused in one line, exit 2, and left exactly as it was; so is a
    file at PATH.new, the name the link was once made under."""
    _refuses_a_taken_link([str(host_build / "host" / "regdev-firmware-host")],
                          "regdev-firmware-host", tmp_path, what)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("what", list(TAKEN))
def test_harness_refuses_a_link_path_that_is_taken(avr_build: Path, tmp_path: Path,
                                                   what: str) -> None:
    """The same for the simavr harness (`regdev firmware-sim --avr --link PATH`)."""
    _refuses_a_taken_link([str(avr_build / "sim" / "regdev-simavr")], "regdev-simavr",
                          tmp_path, what, str(avr_build / "avr" / "regdev-uno.elf"))


def _fingerprint(path: Path) -> tuple[int, int, str | None]:
    st = path.lstat()
    content = (os.readlink(path) if path.is_symlink()
               else path.read_text() if path.is_file() else None)
    return st.st_mode, st.st_ino, content


def _refuses_a_taken_link(command: list[str], prog: str, tmp_path: Path, what: str,
                          *after: str) -> None:
    link = tmp_path / "port"
    TAKEN[what](link)
    beside = tmp_path / "port.new"
    beside.write_text("also the user's\n")
    before = _fingerprint(link), _fingerprint(beside)
    done = subprocess.run([*command, "--link", str(link), *after], capture_output=True,
                          text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"{prog}: error: cannot make the link {link}: {what} is already there (the simulator "
        "replaces only a link it made itself; remove it or choose another path)\n")
    assert (_fingerprint(link), _fingerprint(beside)) == before


def test_host_build_leaves_a_link_replaced_while_serving(host_build: Path,
                                                         tmp_path: Path) -> None:
    """The user puts a file where the host build's link was: at exit it is left alone."""
    link = tmp_path / "port"
    with serving([str(host_build / "host" / "regdev-firmware-host"), "--link", str(link)]):
        link.unlink()
        link.write_text("the user's file now\n")
    assert link.read_text() == "the user's file now\n"


# --- regdev firmware-sim --avr --------------------------------------------------------------------


def test_firmware_sim_avr_refuses_simulator_options(capsys: pytest.CaptureFixture[str]) -> None:
    """--avr runs the C firmware as built: faults, --seed, --identity or --plain-identify with
    it are a usage error (exit 2), and --avr goes with --pty/--tcp no more than they go
    together; --device-id goes with --avr only with --eeprom, and is then 8 hex digits (what
    the EEPROM keeps); --eeprom goes with --avr only."""
    for extra, named in ((["--fault", "drop=0.5"], "--fault"), (["--seed", "3"], "--seed"),
                         (["--identity", "x"], "--identity"),
                         (["--plain-identify"], "--plain-identify")):
        with pytest.raises(SystemExit) as info:
            main(["firmware-sim", "--avr", *extra])
        assert info.value.code == 2
        assert (f"{named} cannot go with --avr: the C firmware runs as built, without faults, "
                "with its own identity") in capsys.readouterr().err
    for argv, message in (
            (["--avr", "--device-id", "5F3A9C01"],
             "--device-id with --avr needs --eeprom FILE: a board that keeps its id keeps its "
             "start count, or a restart says old epochs again"),
            (["--avr", "--eeprom", "uno.eeprom", "--device-id", "BENCH7"],
             "--device-id with --avr: expected 8 upper-case hex digits 0-9 A-F (what the Uno "
             "keeps in EEPROM), got 'BENCH7'"),
            # lower case: the Uno's rule, not the Python simulator's 1..16 of 0-9 A-Z
            (["--avr", "--eeprom", "uno.eeprom", "--device-id", "5f3a9c01"],
             "--device-id with --avr: expected 8 upper-case hex digits 0-9 A-F (what the Uno "
             "keeps in EEPROM), got '5f3a9c01'"),
            (["--pty", "--eeprom", "uno.eeprom"], "--eeprom goes with --avr (the Uno's EEPROM)")):
        with pytest.raises(SystemExit) as info:
            main(["firmware-sim", *argv])
        assert info.value.code == 2
        assert capsys.readouterr().err.endswith(f"error: {message}\n")
    with pytest.raises(SystemExit):
        main(["firmware-sim", "--avr", "--pty"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_firmware_sim_avr_names_the_missing_tools_when_a_build_is_needed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the tools on PATH and nothing built, --avr says which are missing and the
    packages that give them, in one line."""
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(sim.CannotServe) as refused:
        sim.avr_build(tmp_path / "build")
    assert str(refused.value) == (
        "--avr needs make, cc, avr-gcc, avr-objcopy on PATH to build the C firmware "
        "(Debian/Ubuntu: apt-get install gcc-avr avr-libc binutils-avr libsimavr-dev "
        "libelf-dev)")


def test_firmware_sim_avr_runs_a_built_image_without_the_tools(
        avr_build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An image and harness already built need no make or compiler: without them on PATH
    --avr takes them as they are; a register table that is not the one the map makes (a
    build is needed) is refused naming the tools."""
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert sim.avr_build(avr_build) == (avr_build / "sim" / "regdev-simavr",
                                        avr_build / "avr" / "regdev-uno.elf")
    stale = tmp_path / "stale"
    shutil.copytree(avr_build, stale)
    (stale / "regmap.h").write_text("/* another map */\n", encoding="utf-8")
    with pytest.raises(sim.CannotServe, match=r"^--avr needs make, cc, avr-gcc, avr-objcopy "):
        sim.avr_build(stale)


@SHARED_BUILD
def test_firmware_sim_avr_refuses_a_map_the_firmware_cannot_hold(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A map regdev reads but the C firmware cannot hold (129 registers) is refused before
    anything is built, in regdev's words, naming the user's file: no make, no build copy,
    no packages to install."""
    path = tmp_path / "huge.json"
    many = RegisterMap([Register(f"R{addr}", addr) for addr in range(129)])
    path.write_text(many.to_json(), encoding="utf-8")
    digest = hashlib.sha256(many.to_json().encode("utf-8")).hexdigest()[:12]
    shutil.rmtree(sim.avr_cache() / f"map-{digest}", ignore_errors=True)  # this map's alone
    assert main(["firmware-sim", "--avr", "--map", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"regdev firmware-sim: error: {path}: the C firmware holds at most 128 registers (one "
        "byte of RAM each); this map has 129\n")
    assert not (sim.avr_cache() / f"map-{digest}").exists()


@pytest.mark.parametrize(("said", "advice"), [
    ("avr/main.c:1:1: error: expected ';' before '}' token", False),
    ("avr/main.c:3:10: fatal error: avr/io.h: No such file or directory", True),
])
def test_firmware_sim_avr_build_failure_is_one_line_without_makes_noise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: str, advice: bool) -> None:
    """A failed build is told as the compiler's line alone (not make's `make: ***` lines),
    naming the packages only when a header, library or tool was not found."""
    need("avr")
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "avr-gcc"
    fake.write_text(f"#!/bin/sh\necho \"{said}\" >&2\nexit 1\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(sim.CannotServe) as failed:
        sim.avr_build(tmp_path / "build")
    packages = (" (a tool, header or library is missing: Debian/Ubuntu: apt-get install "
                "gcc-avr avr-libc binutils-avr libsimavr-dev libelf-dev)")
    assert str(failed.value) == f"building the C firmware failed: {said}" + (
        packages if advice else "")


@SHARED_BUILD
@pytest.mark.timeout(240)
def test_firmware_sim_avr_harness_errors_are_regdevs(tmp_path: Path) -> None:
    """What the simavr harness refuses under `regdev firmware-sim --avr` (an EEPROM file of
    the wrong size) is said as regdev firmware-sim's error, not regdev-simavr's."""
    need("avr")
    short = tmp_path / "short.eeprom"
    short.write_bytes(b"\xff" * 512)
    done = subprocess.run([str(REGDEV), "firmware-sim", "--avr", "--eeprom", str(short)],
                          capture_output=True, text=True, check=False, timeout=200)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"regdev firmware-sim: error: the EEPROM file {short} is not 1024 "
                           "bytes (the MCU's EEPROM)\n")


@SHARED_BUILD
@pytest.mark.timeout(240)
def test_firmware_sim_avr_serves_a_register_map(capsys: pytest.CaptureFixture[str],
                                               sensor_json: Path) -> None:
    """`firmware-sim --avr --map FILE` builds the Uno image with that map (in a build folder
    of its own) and runs it in simavr: examples/sensor-calls.jsonl (every access kind, block
    and masked writes) replayed through regdev over the pty meets every expectation, as in
    process, and leaves the registers the in-process replay leaves."""
    need("avr")
    calls = str(EXAMPLES / "sensor-calls.jsonl")
    with sim_process("--avr", "--map", str(sensor_json)) as (port, _):
        with serial.Serial(port, 115200, timeout=5) as line:
            line.write(wire.encode(wire.IdentifyRequest(1)))
            reply = wire.decode(line.read_until(b"\n"))
        assert isinstance(reply, wire.IdentifyReply)
        assert wire.split_identify_text(reply.text)[0] == "regdev C/uno sensor"
        status, out, err = run(capsys, "replay", "--no-audit", "--json", "--port", port,
                               "--timeout", "2", "--map", str(sensor_json), calls)
    assert (status, err) == (0, "")
    on_the_uno = [json.loads(line) for line in out.splitlines()]
    status, out, _ = run(capsys, "replay", "--no-audit", "--json", "--map", str(sensor_json),
                         calls)
    assert on_the_uno == [json.loads(line) for line in out.splitlines()]
    assert all(line["expect_met"] for line in on_the_uno[:-1])
    assert len(on_the_uno) > 10


@SHARED_BUILD
@pytest.mark.timeout(120)
def test_firmware_sim_avr_rebuilds_after_a_source_change(tmp_path: Path) -> None:
    """--avr builds what is out of date before it runs: a touched source is compiled again."""
    need("avr")
    harness_path, image = sim.avr_build()  # up to date now
    before = image.stat().st_mtime_ns
    source = C_DIR / "src" / "regdev_core.c"
    os.utime(source)
    with sim_process("--avr") as (port, _), serial.Serial(port, 115200, timeout=5) as line:
        line.write(wire.encode(wire.IdentifyRequest(1)))
        reply = wire.decode(line.read_until(b"\n"))
        assert isinstance(reply, wire.IdentifyReply)
        assert _first_identity(["--avr"]).fullmatch(reply.text), reply
    assert image.stat().st_mtime_ns > before
    assert harness_path.is_file()


@pytest.mark.timeout(120)
def test_a_run_without_the_tools_says_in_one_line_what_it_skipped(tmp_path: Path) -> None:
    """pytest (as scripts/test runs it) on a machine without the tools: the firmware tests are
    skipped, and one line of the summary says how many and why."""
    env = {key: value for key, value in os.environ.items()
           if key != "REGDEV_REQUIRE_FIRMWARE"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
         "tests/test_firmware_c.py", "-k", "budget or doc_examples"],
        cwd=ROOT, capture_output=True, text=True, check=False,
        env={**env, "PATH": str(tmp_path)})
    lines = [line for line in done.stdout.splitlines() if "firmware tests skipped" in line]
    assert lines == ["firmware tests skipped: 2 (the C firmware's host build and differential "
                     "tests: make and cc not found; the simavr firmware tests: make and cc not "
                     "found)"], done.stdout
