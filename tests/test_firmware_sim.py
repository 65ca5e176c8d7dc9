"""The firmware simulator: standalone launch, its command line, firmware and fault injection."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import regdev_firmware_sim as sim
from firmware import SIM, is_sim_identity, sim_process
from regdev import TransportError
from regdev.devices import _protocol as wire
from regdev.devices._serial import SerialDevice


@pytest.mark.timeout(30)
def test_runs_standalone_without_regdev_dependencies() -> None:
    """`python -S -E firmware-sim/regdev_firmware_sim.py --pty` serves with the stdlib alone."""
    bare = (sys.executable, "-S", "-E")
    for module in ("msgspec", "serial", "regdev"):  # nothing beyond the stdlib is importable
        probe = subprocess.run([*bare, "-c", f"import {module}"], capture_output=True, check=False)
        assert probe.returncode == 1, module
    with sim_process("--pty", python=bare) as (port, _), SerialDevice(port, timeout=2) as device:
        assert is_sim_identity(device.identify())
        assert device.write(9, 0x99) == 0x99
        assert device.snapshot()[9] == 0x99


def test_copied_alone_it_names_the_files_it_needs(tmp_path: Path) -> None:
    """The script without src/regdev beside it, and no regdev installed: one line, exit 2."""
    alone = tmp_path / "regdev_firmware_sim.py"
    shutil.copy(SIM, alone)
    done = subprocess.run([sys.executable, "-S", "-E", str(alone), "--pty"], capture_output=True,
                          text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "regdev_firmware_sim.py: error: the simulator needs regdev's "
        "src/regdev/devices/_protocol/__init__.py, src/regdev/devices/_device.py, "
        "src/regdev/devices/_regmap.py, src/regdev/devices/_values.py, "
        "src/regdev/core/_errors.py, src/regdev/core/_text.py: "
        "run it from a regdev source tree (firmware-sim/ beside src/), or install regdev\n")


def test_importing_the_simulator_first_leaves_regdev_whole() -> None:
    """`import regdev_firmware_sim` before `import regdev`: regdev is the real package."""
    code = ("import regdev_firmware_sim, regdev, sys; "
            "print(regdev.SerialDevice.__name__, regdev_firmware_sim.wire is "
            "sys.modules['regdev.devices._protocol'], '_regdev_sim' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, check=True, env={**os.environ, "PYTHONPATH": str(SIM.parent)})
    assert done.stdout == "SerialDevice True False\n"


@pytest.mark.timeout(30)
def test_a_second_tcp_client_is_turned_away_and_its_write_never_runs() -> None:
    """While one host is served, another connection is closed unread: its write fails as not
    sent, and does not run later when the first host leaves."""
    with sim_process("--tcp", "127.0.0.1:0") as (url, _):
        with SerialDevice(url, timeout=2) as first:
            assert is_sim_identity(first.identify())
            with SerialDevice(url, timeout=0.5) as second, pytest.raises(
                    TransportError, match=r"^the write was not sent: port socket://"):
                second.write(3, 0xBB)
            assert first.write(3, 0xAA) == 0xAA
        with SerialDevice(url, timeout=2) as third:
            assert third.read(3) == 0xAA


@pytest.mark.timeout(30)
def test_interrupt_exits_0_quietly() -> None:
    """Ctrl-C (SIGINT) and SIGTERM end the simulator with status 0 and nothing on stderr."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        with sim_process("--tcp", "127.0.0.1:0") as (url, process):
            assert url.startswith("socket://127.0.0.1:")
            process.send_signal(signum)
            assert process.wait(timeout=60) == 0
            assert process.stderr is not None and process.stderr.read() == ""


@pytest.mark.timeout(30)
def test_pty_link_is_printed_and_removed(tmp_path: Path) -> None:
    """--link PATH prints PATH first, points it at the pty, and removes it on exit."""
    link = tmp_path / "regdev-port"
    with sim_process("--pty", "--link", str(link)) as (port, process):
        assert port == str(link)
        assert link.is_symlink() and Path(link.readlink()).name.isdigit()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0
    assert not link.exists()


def _make_fifo(path: Path) -> None:
    os.mkfifo(path)


def _make_socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as unix:
        unix.bind(str(path))


#: What a user may have at the --link path, and how to make it there (each must survive).
TAKEN = {
    "a regular file": lambda path: path.write_text("the user's notes\n"),
    "a directory": lambda path: path.mkdir(),
    "a symlink to ": lambda path: path.symlink_to(path.with_name("elsewhere")),
    "a named pipe": _make_fifo,
    "a socket": _make_socket,
}


def _fingerprint(path: Path) -> tuple[int, int, int, str | None]:
    st = path.lstat()
    content = (path.read_text() if path.is_file() and not path.is_symlink()
               else os.readlink(path) if path.is_symlink() else None)
    return st.st_mode, st.st_ino, st.st_size, content


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="--pty is POSIX only")
@pytest.mark.parametrize("what", list(TAKEN))
def test_a_link_path_that_is_taken_is_refused_and_left_alone(tmp_path: Path, what: str) -> None:
    """Whatever is at the --link path (a file, a directory, a symlink: a stale link of an
    earlier run too, a pipe, a socket) is refused in one line, exit 2, and left exactly as
    it was; so is a user's file at the name the old code made its new link under."""
    link = tmp_path / "port"
    TAKEN[what](link)
    beside = link.with_name("port.new")
    beside.write_text("also the user's\n")
    before = _fingerprint(link), _fingerprint(beside)
    status, err = _sim_exit([*REGDEV_SIM, "--pty", "--link", str(link)])
    assert status == 2
    assert err.startswith(f"regdev firmware-sim: error: cannot make the link {link}: {what}")
    assert err.endswith(" is already there (the simulator replaces only a link it made itself; "
                        "remove it or choose another path)\n") and err.count("\n") == 1
    assert (_fingerprint(link), _fingerprint(beside)) == before


@pytest.mark.skipif(not Path("/dev/null").is_char_device(), reason="needs /dev/null")
def test_a_device_node_at_the_link_path_is_refused_and_left_alone() -> None:
    """--link /dev/null (a device node; as root the old code replaced it): refused, intact."""
    before = os.lstat("/dev/null")
    assert _sim_exit([*REGDEV_SIM, "--pty", "--link", "/dev/null"]) == (
        2, "regdev firmware-sim: error: cannot make the link /dev/null: a character device "
           "is already there (the simulator replaces only a link it made itself; remove it or "
           "choose another path)\n")
    after = os.lstat("/dev/null")
    assert (after.st_mode, after.st_ino, after.st_rdev) == (
        before.st_mode, before.st_ino, before.st_rdev)


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="--pty is POSIX only")
@pytest.mark.timeout(30)
def test_a_link_replaced_while_serving_is_left_alone_at_exit(tmp_path: Path) -> None:
    """The user puts a file where the simulator's link was: at exit it is not removed."""
    link = tmp_path / "port"
    with sim_process("--pty", "--link", str(link)) as (_, process):
        link.unlink()
        link.write_text("the user's file now\n")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    assert link.read_text() == "the user's file now\n"


def test_the_link_moves_only_while_it_is_the_simulators_own(tmp_path: Path) -> None:
    """In process: the link is made, moved to a new target (a new pty after a disconnect)
    without touching the names beside it, and removed; once something else is at the path,
    moving the link is refused and removing it leaves that thing be."""
    folder = tmp_path / "links"
    folder.mkdir()
    path = folder / "port"
    beside = [folder / f".port.{os.getpid()}.0.new", folder / "port.new"]
    for each in beside:
        each.write_text("the user's\n")
    link = sim._Link(path)
    link.point_at("/dev/pts/first")
    link.point_at("/dev/pts/second")
    assert os.readlink(path) == "/dev/pts/second"
    assert [each.read_text() for each in beside] == ["the user's\n"] * 2
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["port", *(each.name for each in beside)])  # no new link left behind
    link.remove()
    assert not os.path.lexists(path)
    link.point_at("/dev/pts/third")  # made afresh where nothing is
    path.unlink()
    path.symlink_to("/dev/pts/users")  # a link, but not the one it made
    with pytest.raises(sim.CannotServe, match="was replaced while serving"):
        link.point_at("/dev/pts/fourth")
    link.remove()
    assert os.readlink(path) == "/dev/pts/users"
    path.unlink()
    path.write_text("a file")  # maybe under the inode number the link had
    link.remove()
    assert path.read_text() == "a file"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pty", "--fault", "explode=0.1"], "expected KIND=RATE with KIND one of drop,"),
        (["--pty", "--fault", "drop=2"], "RATE in 0..1, got `drop=2`"),
        (["--pty", "--fault", "disconnect=0.1"], "the disconnect fault on --pty needs --link"),
        (["--tcp", "nohost"], "expected HOST:PORT"),
        (["--pty", "--delay", "5"], "--delay goes with --fault KIND=RATE (without a fault"),
        (["--pty", "--seed", "3", "--fault-count", "2"],
         "--seed, --fault-count go with --fault KIND=RATE"),
        (["--pty", "--fault", "x\x1b[31m=1"], "got `x\\u001b[31m=1`"),  # escaped
        (["--tcp", "\x1b]0;t\x07"], "got `\\u001b]0;t\\u0007`"),
        (["--tcp", "127.0.0.1:0", "--link", "/tmp/x"], "--link goes with --pty or --avr"),
        (["--pty", "--identity", "a*b"], "identify text must be"),
        (["--pty", "--delay", "nan"], "--delay must be a number of seconds in 0..3600, got nan"),
        (["--pty", "--delay", "inf"], "--delay must be a number of seconds in 0..3600, got inf"),
        (["--pty", "--delay", "1e300"], "--delay must be a number of seconds in 0..3600"),
        (["--pty", "--delay", "-1"], "--delay must be a number of seconds in 0..3600"),
        ([], "one of the arguments --pty --tcp --avr --modbus-tcp is required"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], message: str) -> None:
    """A bad option is one line on stderr and exit status 2, before anything is served."""
    done = subprocess.run([sys.executable, str(SIM), *args], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_firmware_answers_every_request() -> None:
    """The firmware answers each request from its register file; addresses above 15 are ADDR."""
    firmware = sim.Firmware()
    assert firmware.answer(wire.WriteRequest(1, 15, 7)) == wire.WriteReply(1, 15, 7)
    assert firmware.answer(wire.ReadRequest(2, 15)) == wire.ReadReply(2, 15, 7)
    assert firmware.answer(wire.DumpRequest(3)) == wire.DumpReply(3, (0,) * 15 + (7,))
    assert firmware.answer(wire.ResetRequest(4)) == wire.ResetReply(4)
    assert firmware.registers.snapshot() == [0] * 16
    epoch = firmware.registers.identity().epoch  # a new one since the reset
    assert firmware.answer(wire.IdentifyRequest(5)) == wire.IdentifyReply(
        5, f"{sim.IDENTITY} id={firmware.device_id} epoch={epoch}")
    assert firmware.answer(wire.ReadRequest(6, 16)) == wire.ErrorReply(6, "ADDR")
    assert firmware.answer(wire.WriteRequest(7, 0xFF, 1)) == wire.ErrorReply(7, "ADDR")


class ListLine:
    """A line whose host side is a list of chunks to read and a list of what was written."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)
        self.written: list[bytes] = []

    def read(self) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""

    def write(self, data: bytes) -> None:
        self.written.append(data)


def test_serve_answers_bad_frames_with_their_code_and_seq() -> None:
    """Bad frames get `e CKSUM`/`e SYNTAX` with their seq (or 00); good ones their reply."""
    line = ListLine(b"junk\n$07 R 03*00\n", b"$08 R 03", b"$09 Q*00\n",
                    wire.encode(wire.ReadRequest(0x0A, 3)))
    sim.serve(line, sim.Firmware(), sim.Faults())
    assert [wire.decode(frame) for frame in line.written] == [
        wire.ErrorReply(7, "CKSUM"),
        wire.ErrorReply(8, "SYNTAX"),  # cut short by the next $
        wire.ErrorReply(9, "CKSUM"),
        wire.ReadReply(0x0A, 3, 0),
    ]


def test_serve_never_answers_a_reply_frame() -> None:
    """Reply frames reaching the device (its own echo) get no answer; requests still do."""
    echo = wire.encode(wire.ReadReply(1, 3, 0)) + wire.encode(wire.ErrorReply(0, "SYNTAX"))
    line = ListLine(echo, echo + wire.encode(wire.ReadRequest(2, 3)), echo)
    sim.serve(line, sim.Firmware(), sim.Faults())
    assert line.written == [wire.encode(wire.ReadReply(2, 3, 0))]


def test_faults_are_reproducible_from_the_seed() -> None:
    """The same seed draws the same faults; --fault-after and --fault-count bound them."""
    def draws(seed: int) -> list[str | None]:
        faults = sim.Faults({"drop": 0.3, "busy": 0.3}, seed=seed, after=2, count=5)
        return [faults.pick() for _ in range(40)]

    first = draws(7)
    assert first == draws(7) != draws(8)
    assert first[:2] == [None, None]
    assert sum(kind is not None for kind in first) == 5


def test_damage_changes_the_reply_as_each_fault_says() -> None:
    """drop loses one byte, corrupt changes one, garbage prefixes 1..20 bytes."""
    faults = sim.Faults(seed=1)
    reply = wire.encode(wire.ReadReply(1, 2, 3))
    dropped = faults.damage("drop", reply)
    assert len(dropped) == len(reply) - 1
    corrupted = faults.damage("corrupt", reply)
    assert len(corrupted) == len(reply)
    assert sum(a != b for a, b in zip(corrupted, reply, strict=True)) == 1
    noisy = faults.damage("garbage", reply)
    assert noisy.endswith(reply) and 1 <= len(noisy) - len(reply) <= 20


def test_bad_fault_settings_are_refused() -> None:
    """Unknown kinds, rates outside 0..1 and negative bounds are ValueError."""
    for rates, options in (({"fire": 0.1}, {}), ({"drop": 1.5}, {}), ({}, {"after": -1}),
                           ({"drop": float("nan")}, {}), ({}, {"delay": float("inf")})):
        with pytest.raises(ValueError):
            sim.Faults(rates, **options)  # type: ignore[arg-type]


def _sim_exit(command: list[str], stdout: str = "") -> tuple[int, str]:
    """Run ``command`` from a shell with stdout redirected as ``stdout`` says (e.g.
    ">/dev/full", ">&-"): (status, stderr); it must end by itself, before serving."""
    done = subprocess.run(["/bin/sh", "-c", f'"$0" "$@" {stdout}', *command],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.stdout == ""
    return done.returncode, done.stderr


REGDEV_SIM = [str(Path(sys.executable).parent / "regdev"), "firmware-sim"]
SCRIPT_SIM = [sys.executable, "-S", "-E", str(SIM)]


@pytest.mark.parametrize(("command", "prog"), [(REGDEV_SIM, "regdev firmware-sim"),
                                               (SCRIPT_SIM, "regdev_firmware_sim.py")],
                         ids=["regdev", "script"])
@pytest.mark.parametrize(("stdout", "reason"), [(">/dev/full", "No space left on device"),
                                                (">&-", "standard output is closed")],
                         ids=["full", "closed"])
def test_a_port_that_cannot_be_announced_is_not_served(
        command: list[str], prog: str, stdout: str, reason: str, tmp_path: Path) -> None:
    """stdout full or closed: one line, exit 2, before serving; a --link made is removed."""
    expected = (2, f"{prog}: error: cannot write the port to standard output: {reason}\n")
    assert _sim_exit([*command, "--tcp", "127.0.0.1:0"], stdout) == expected
    link = tmp_path / "port"
    assert _sim_exit([*command, "--pty", "--link", str(link)], stdout) == expected
    assert not link.exists() and not link.with_name("port.new").exists()


def test_an_address_that_cannot_be_listened_on_is_one_line() -> None:
    """A bad host or a port in use: `cannot listen on HOST:PORT: <the OS's reason>`, exit 2."""
    try:
        socket.getaddrinfo("256.0.0.1", 0)
    except socket.gaierror as error:
        unknown = error.strerror
    else:
        pytest.fail("256.0.0.1 resolved")
    assert _sim_exit([*REGDEV_SIM, "--tcp", "256.0.0.1:0"]) == (
        2, f"regdev firmware-sim: error: cannot listen on 256.0.0.1:0: {unknown}\n")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        for serving in (["--tcp"], ["--modbus-tcp"], ["--modbus-rtu", "--tcp"]):
            # the Modbus ones too: one line, not pymodbus's log line before regdev's
            assert _sim_exit([*REGDEV_SIM, *serving, f"127.0.0.1:{port}"]) == (
                2, f"regdev firmware-sim: error: cannot listen on 127.0.0.1:{port}: Address "
                   "already in use\n"), serving


def test_a_link_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    """--link in a missing directory: `cannot make the link PATH: <reason>`, exit 2."""
    link = tmp_path / "missing" / "port"
    assert _sim_exit([*REGDEV_SIM, "--pty", "--link", str(link)]) == (
        2, f"regdev firmware-sim: error: cannot make the link {link}: No such file or "
           "directory\n")
