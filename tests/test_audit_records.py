"""Every audit record is read back and exported exactly (numbers past any float, raw bytes),
from any place (a read-only filesystem), and a refused database leaves no lock file beside it."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regdev import REGISTER_TOOLS, AuditError, AuditLog, Gate, Tool, ToolSet, read_audit
from regdev.audit import _lock as lock_module
from regdev.audit._log import lock_path
from regdev.cli._main import main
from support.strategies import huge_number_values, to_json

DIALECT_NAMES = ("canonical", "mcp", "openai", "anthropic")


def exact(value: Any) -> Any:
    """A value with each number tagged by its exact form: a Decimal's digits and exponent
    (so ``1E-400`` is not ``0.0``, nor ``0.10`` the same as ``0.1``), an int's value. A
    Decimal of exponent 0 (``2.55e2`` decodes to ``Decimal("255")``) is written in JSON as
    the integer it is, so it is tagged as that int."""
    kind = type(value)
    if kind is Decimal:
        if value.as_tuple().exponent == 0:
            return ("int", int(value))
        return ("decimal", value.as_tuple())
    if kind is int:
        return ("int", value)
    if kind is float:
        return ("float", value)
    if kind is list:
        return [exact(item) for item in value]
    if kind is dict:
        return {key: exact(item) for key, item in value.items()}
    return value


def in_dialect(dialect: str, tool: str, arguments_text: str) -> str:
    """A call to ``tool`` with the arguments given as JSON text, in ``dialect``."""
    if dialect == "canonical":
        return f'{{"tool": "{tool}", "arguments": {arguments_text}}}'
    if dialect == "mcp":
        return f'{{"name": "{tool}", "arguments": {arguments_text}}}'
    if dialect == "anthropic":
        return (f'{{"type": "tool_use", "id": "toolu_1", "name": "{tool}", '
                f'"input": {arguments_text}}}')
    return to_json({"type": "function", "id": "call_1",
                    "function": {"name": tool, "arguments": arguments_text}})


def export(db: Path) -> tuple[int, list[dict[str, Any]], str]:
    """``regdev audit --db DB --json``: its status, each line decoded exactly (every number
    with a fraction or an exponent as the Decimal of its text), and its stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["audit", "--db", str(db), "--json"])
    lines = [json.loads(line, parse_float=Decimal) for line in out.getvalue().splitlines()]
    return status, lines, err.getvalue()


#: Arguments objects holding numbers no float holds, as they were found in the wild, and their kin.
HUGE_ARGUMENTS = [
    '{"addr": 1e999}', '{"addr": -1e309}', '{"addr": 2e308}', '{"addr": [1e999]}',
    '{"addr": {"x": -1e999999999}}', '{"addr": 1e-400}',
    '{"addr": 0.1000000000000000000000000000000000000001}', '{"addr": 1.50}',
    '{"addr": [0e999999999999, -0.0]}', '{"addr": 3, "data": 2.55e2, "n": 1E+1000000}',
]


@pytest.mark.parametrize("dialect", DIALECT_NAMES)
def test_numbers_past_a_float_are_read_back_and_exported_exactly(
        tmp_path: Path, dialect: str) -> None:
    """Each record, in any dialect, is read back and exported with its numbers exactly as
    the call held them (digits and exponent), and every record is exported, in order."""
    db = tmp_path / "audit.db"
    with Gate(audit=AuditLog(db)) as gate:
        for text in HUGE_ARGUMENTS:
            observation = gate.handle(in_dialect(dialect, "read_register", text),
                                      dialect=dialect)
            assert observation.code in ("range-addr", "type-addr", "unknown-argument")
    sent = [exact(json.loads(text, parse_float=Decimal)) for text in HUGE_ARGUMENTS]
    assert [exact(record.to_dict()["arguments"]) for record in read_audit(db)] == sent
    status, lines, err = export(db)
    assert (status, err) == (0, "")
    assert [exact(line["arguments"]) for line in lines] == sent


def test_decimals_handed_over_as_python_data_are_exported_exactly(tmp_path: Path) -> None:
    """handle_call with Decimal("1E+400"), nested or not, records and exports it exactly."""
    db = tmp_path / "audit.db"
    arguments = [{"addr": Decimal("1E+400")}, {"addr": [Decimal("-1E+400"), Decimal("1E-400")]},
                 {"addr": {"deep": Decimal("0.1000000000000000000000000000000000000001")}}]
    with Gate(audit=AuditLog(db)) as gate:
        for value in arguments:
            assert not gate.handle_call({"tool": "read_register", "arguments": value}).ok
    status, lines, _ = export(db)
    assert status == 0 and [exact(line["arguments"]) for line in lines] == exact(arguments)


def echo(device: object, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"echo": arguments}


#: A tool that takes any arguments and returns them: its record holds them in its arguments
#: and in its result.
ECHO = ToolSet([*REGISTER_TOOLS.values(),
                Tool("echo", "returns its arguments", {"type": "object"}, handler=echo)])


@pytest.fixture(scope="module")
def echo_gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gate]:
    """One gate with the echo tool and an audit log, for every example of a property."""
    with Gate(tools=ECHO, audit=AuditLog(tmp_path_factory.mktemp("echo") / "audit.db")) as gate:
        yield gate


def last_records(gate: Gate, count: int) -> list[Any]:
    """The last ``count`` records of the gate's audit log (committed first)."""
    assert gate.audit is not None
    return gate.audit.records(last=count)


@given(st.lists(st.tuples(huge_number_values, st.sampled_from((*DIALECT_NAMES, "python"))),
                min_size=1, max_size=4))
def test_every_record_with_numbers_past_a_float_is_exported_exactly(
        echo_gate: Gate, calls: list[tuple[Any, str]]) -> None:
    """Whatever numbers a call holds (huge and tiny exponents, long fractions, long integers,
    nested), sent as text in any dialect or as Python data: each record's arguments and
    result are exported (as `regdev audit --json` prints them) exactly, and no record is
    missing or out of order."""
    expected = []
    for value, dialect in calls:
        arguments = {"n": value}
        if dialect == "python":
            observation = echo_gate.handle_call({"tool": "echo", "arguments": arguments})
        else:
            observation = echo_gate.handle(in_dialect(dialect, "echo", to_json(arguments)),
                                           dialect=dialect)
        assert observation.ok or observation.code == "output-too-large", observation
        expected.append((exact(arguments), exact({"echo": arguments}) if observation.ok
                         else None))
    lines = [json.loads(record.to_json(), parse_float=Decimal)
             for record in last_records(echo_gate, len(calls))]
    assert [(exact(line["arguments"]), exact(line["result"])) for line in lines] == expected
    assert [exact(line["observation"].get("result")) for line in lines] == [
        result for _, result in expected]


def test_a_stored_observation_keeps_its_numbers_when_replayed(tmp_path: Path) -> None:
    """An observation stored under an idempotency key (as JSON text, in the audit database)
    with exact numbers in its result is replayed with the same numbers; the model is sent
    JSON numbers, never strings."""
    db = tmp_path / "audit.db"
    arguments = {"n": Decimal("1E+400"), "m": Decimal("0.10"), "k": [Decimal("-1E-400"), 10**300]}
    call = to_json({"tool": "echo", "arguments": arguments, "idempotency_key": "k1"})
    with Gate(tools=ECHO, audit=AuditLog(db)) as gate:
        first = gate.handle(call)
        again = gate.handle(call)
    assert first.ok and again.replay
    for observation in (first, again):
        assert exact(observation.result) == exact({"echo": arguments})
        assert exact(json.loads(observation.to_json(), parse_float=Decimal)["result"]) == \
            exact({"echo": arguments})


def test_a_damaged_record_hides_none_of_the_others(tmp_path: Path) -> None:
    """A record regdev could not have written (its arguments are not JSON: a database changed
    by other means) is named on stderr; every other record is still exported; exit 1."""
    db = tmp_path / "audit.db"
    read = '{"tool": "read_register", "arguments": {"addr": 1}}'
    with Gate(audit=AuditLog(db)) as gate:
        gate.handle(read)
    with sqlite3.connect(db) as conn:  # an INSERT: the append-only triggers allow it
        conn.execute("INSERT INTO calls (time, event, session, ok, replay, tool, arguments) "
                     "VALUES (1.0, 'call', 'x', 0, 0, 'read_register', '{\"addr\": 1e')")
    with Gate(audit=AuditLog(db)) as gate:
        gate.handle(read)
        gate.handle('{"tool": "read_register", "arguments": {"addr": 1e999}}')
    status, lines, err = export(db)
    assert status == 1
    assert [line["id"] for line in lines] == [1, 3, 4]
    assert exact(lines[2]["arguments"]) == exact({"addr": Decimal("1E+999")})
    assert err.startswith("regdev audit: error: record 2: its arguments column is not JSON")
    assert err.count("\n") == 1 and "Traceback" not in err


# --- the raw column holds the bytes received --------------------------------------------

#: Calls holding bytes that are not UTF-8: a lone 0xFF, a truncated sequence, an encoded
#: surrogate, a Latin-1 byte in a key, an overlong encoding, a stray continuation byte.
NOT_UTF8 = [
    b'{"tool": "read_register", "arguments": {"addr": "\xff"}}',
    b'{"tool": "read_register", "arguments": {"addr": "\xc3"}}',
    b'{"tool": "read_register", "arguments": {"addr": "\xed\xa0\x80"}}',
    b'{"tool": "read_register", "arguments": {"\xe9": 1}}',
    b'{"tool": "read_register", "arguments": {"addr": "\xc0\xaf"}}',
    b'\x80{"tool": "read_register", "arguments": {"addr": 1}}',
]


def only_record(db: Path) -> Any:
    (record,) = read_audit(db)
    return record


@pytest.mark.parametrize("raw", NOT_UTF8)
def test_regdev_call_records_the_bytes_of_its_argument(tmp_path: Path, raw: bytes,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`regdev call` with bytes that are not UTF-8 on its command line: the audit log's raw
    column, raw_bytes and raw_sha256 are those bytes; the refusal is not-json in regdev's
    words (where the bad byte is), never Python's codec error."""
    db = tmp_path / "audit.db"
    status = main(["call", "--audit", str(db), os.fsdecode(raw)])  # as sys.argv holds it
    observation = json.loads(capsys.readouterr().out)
    assert status == 1 and observation["code"] == "not-json"
    assert "invalid UTF-8" in observation["message"] or "invalid character" in \
        observation["message"]
    for python_words in ("codec", "surrogate", "can't encode", "position"):
        assert python_words not in observation["message"]
    record = only_record(db)
    assert (record.raw, record.raw_bytes, record.raw_sha256) == (
        raw, len(raw), hashlib.sha256(raw).digest())
    exported = record.to_dict()
    assert bytes.fromhex(exported["raw_hex"]) == raw
    assert list(exported)[list(exported).index("raw_sha256") + 1] == "raw_hex"


@pytest.mark.skipif(sys.platform == "win32", reason="argv is not bytes on Windows")
def test_the_command_line_argument_reaches_the_log_as_typed(tmp_path: Path) -> None:
    """In a real process (argv decoded by Python), the byte 0xFF is recorded as 0xFF, and
    the message says where it is."""
    db = tmp_path / "audit.db"
    raw = NOT_UTF8[0]
    done = subprocess.run([sys.executable, "-m", "regdev", "call", "--audit", str(db), raw],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1 and done.stderr == ""
    assert json.loads(done.stdout)["message"] == (
        f"not one strict JSON document: invalid UTF-8: byte {raw.index(0xFF)} is 0xFF; send "
        "one JSON object")
    assert only_record(db).raw == raw


@given(st.one_of(st.binary(max_size=40),
                 st.tuples(st.sampled_from([*NOT_UTF8, b'{"tool": "read_register"}']),
                           st.integers(0, 60), st.binary(min_size=1, max_size=3)).map(
                     lambda case: case[0][:case[1]] + case[2] + case[0][case[1]:])))
def test_a_str_carrying_bytes_is_recorded_as_those_bytes(echo_gate: Gate, raw: bytes) -> None:
    """A call given as bytes, or as the str Python makes of them (surrogateescape, as for
    sys.argv), gets the same verdict and the same raw, raw_bytes and raw_sha256: the bytes."""
    as_bytes = echo_gate.handle(raw)
    as_text = echo_gate.handle(raw.decode("utf-8", "surrogateescape"))
    assert as_text == as_bytes
    for record in last_records(echo_gate, 2):
        assert (record.raw, record.raw_bytes, record.raw_sha256) == (
            raw, len(raw), hashlib.sha256(raw).digest())
    if as_bytes.code == "not-json":
        assert "codec" not in (as_bytes.message or "")


# --- reading from a place that cannot be written ----------------------------------------


@pytest.fixture
def sealable(tmp_path: Path) -> Iterator[tuple[Path, Callable[[], None]]]:
    """A folder, and a function that makes it truly unwritable: a tmpfs remounted read-only
    when running as root (root writes through any mode bits), else mode 0o555."""
    folder = tmp_path / "sealed"
    folder.mkdir()
    if os.geteuid() == 0:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs",
                                  str(folder)], capture_output=True, check=False)
        if mounted.returncode != 0:
            pytest.skip("running as root, and no tmpfs can be mounted here to make a "
                        "read-only filesystem")

        def seal() -> None:
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
    else:
        def seal() -> None:
            folder.chmod(0o555)
    try:
        yield folder, seal
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(folder)], check=False)
        else:
            folder.chmod(0o755)


def sealed(folder: Path) -> None:
    """Assert that nothing can be created in ``folder`` (the test really exercises it)."""
    with pytest.raises(OSError) as info:
        (folder / "probe").touch()
    assert info.value.errno in (errno.EROFS, errno.EACCES)


def test_a_log_in_a_place_that_cannot_be_written_is_read(
        sealable: tuple[Path, Callable[[], None]], capsys: pytest.CaptureFixture[str]) -> None:
    """A log closed cleanly (no -wal, no -shm) on a read-only filesystem, or in a folder this
    user cannot write, is read whole by read_audit and `regdev audit`: SQLite's plain
    read-only open cannot, so the immutable open is what reads it."""
    folder, seal = sealable
    db = folder / "audit.db"
    with Gate(audit=AuditLog(db)) as gate:
        gate.handle('{"tool": "write_register", "arguments": {"addr": 3, "data": 7}}')
        gate.handle('{"tool": "read_register", "arguments": {"addr": 1e999}}')
    seal()
    sealed(folder)
    with pytest.raises(sqlite3.OperationalError):  # what a plain read-only open gets here
        sqlite3.connect(db.as_uri() + "?mode=ro", uri=True).execute(
            "SELECT count(*) FROM calls").fetchone()
    assert [record.code for record in read_audit(db)] == [None, "range-addr"]
    assert main(["audit", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert out.endswith(f"2 records in {db}\n") and '{"addr":1E+999}' in out
    status, lines, _ = export(db)
    assert status == 0 and exact(lines[1]["arguments"]) == exact({"addr": Decimal("1E+999")})
    assert sorted(path.name for path in folder.iterdir()) == ["audit.db", "audit.db.lock"]


def test_a_killed_writers_log_in_a_read_only_place_is_read_with_its_wal(
        sealable: tuple[Path, Callable[[], None]]) -> None:
    """A writer killed before its last checkpoint leaves -wal and -shm: the records in the
    WAL are read too. A -wal without its -shm cannot be read there: one AuditError says so
    and what to do, never a silently shorter log."""
    folder, seal = sealable
    db, copy = folder / "audit.db", folder / "copy.db"
    script = ("import os, sys; from regdev import AuditLog, Gate\n"
              "gate = Gate(audit=AuditLog(sys.argv[1]))\n"
              "for data in range(3):\n"
              "    gate.handle('{\"tool\": \"write_register\", \"arguments\": "
              "{\"addr\": 1, \"data\": %d}}' % data)\n"
              "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", script, str(db)], check=True)
    copy.write_bytes(db.read_bytes())
    copy.with_name("copy.db-wal").write_bytes(db.with_name("audit.db-wal").read_bytes())
    seal()
    sealed(folder)
    assert [record.arguments for record in read_audit(db)] == [
        f'{{"addr":1,"data":{data}}}' for data in range(3)]
    with pytest.raises(AuditError) as info:
        read_audit(copy)
    assert str(info.value).startswith(f"cannot read the audit database {copy}: its "
                                      f"write-ahead log {copy}-wal holds records")
    assert "\n" not in str(info.value)


# --- no lock file beside a refused path --------------------------------------------------


def refused_targets(folder: Path) -> dict[str, Path]:
    """Paths that exist and cannot hold an audit log, one of each kind."""
    garbage = folder / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 8)
    text = folder / "notes.txt"
    text.write_text("not a database\n")
    header_only = folder / "short.db"
    header_only.write_bytes(b"SQLite format 2\x00")
    other = folder / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    newer = folder / "newer.db"
    sqlite3.connect(newer).execute("PRAGMA user_version = 99").connection.close()
    fifo = folder / "fifo"
    os.mkfifo(fifo)
    subfolder = folder / "folder.db"
    subfolder.mkdir()
    targets = {"garbage": garbage, "text": text, "header": header_only, "other sqlite": other,
               "newer schema": newer, "fifo": fifo, "folder": subfolder,
               "device": Path(os.devnull)}
    with socket.socket(socket.AF_UNIX) as listening, contextlib.suppress(OSError):
        listening.bind(str(folder / "sock"))  # (a path too long for a socket: no socket case)
        targets["socket"] = folder / "sock"
    return targets


@pytest.mark.skipif(sys.platform == "win32", reason="no fcntl: no lock file (documented)")
def test_a_refused_path_is_left_without_a_lock_file(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Every kind of path that cannot hold an audit log (not SQLite, another SQLite
    database, a newer schema, a fifo, a socket, a folder, the null device) is refused, by
    AuditLog, by --audit and by $REGDEV_AUDIT, and no <path>.lock is left beside it."""
    for kind, path in refused_targets(tmp_path).items():
        existed = lock_path(path).exists()
        with pytest.raises(AuditError):
            AuditLog(path)
        assert main(["call", "--audit", str(path), '{"tool": "read_register", '
                     '"arguments": {"addr": 1}}']) == 2, kind
        monkeypatch.setenv("REGDEV_AUDIT", str(path))
        assert main(["call", '{"tool": "read_register", "arguments": {"addr": 1}}']) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 2 and "Traceback" not in err, kind
        assert lock_path(path).exists() == existed, kind
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".lock")) == []


def test_a_lock_file_that_was_there_stays(tmp_path: Path) -> None:
    """A refused database leaves a lock file it did not make (another writer's) alone."""
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    lock_path(path).write_text("")
    with pytest.raises(AuditError, match="not a regdev audit log"):
        AuditLog(path)
    assert lock_path(path).exists()


@pytest.mark.skipif(sys.platform == "win32", reason="no fcntl: no lock file (documented)")
def test_a_writer_whose_lock_file_was_removed_takes_a_new_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused writer removes its lock file while it holds the lock; a writer that opened
    that file just before locks a file nobody sees, so it opens the new one: the lock it
    holds is always the one at <database>.lock."""
    path = tmp_path / "audit.db"
    where = lock_path(path)
    where.write_text("")  # the file a refused writer made and is about to remove
    flock = lock_module.fcntl.flock
    calls = []

    def removed_meanwhile(fd: int, operation: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            where.unlink()  # between this writer's open and its flock
        flock(fd, operation)

    monkeypatch.setattr(lock_module.fcntl, "flock", removed_meanwhile)
    with AuditLog(path):
        assert len(calls) == 2
        assert os.stat(where).st_ino == os.fstat(calls[1]).st_ino
        monkeypatch.setattr(lock_module.fcntl, "flock", flock)
        with pytest.raises(AuditError, match="in use"):
            AuditLog(path)  # and the lock it holds is the one others take
