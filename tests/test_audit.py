"""The audit log: one append-only record per call, durable writes, group commit, CLI."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

from conftest import EXAMPLES, CountingDevice, default_signals, run
from regdev import (
    Approval,
    AuditError,
    AuditInUse,
    AuditLog,
    AuditRecord,
    Gate,
    Observation,
    Policy,
    Refusal,
    ScriptedProposer,
    Session,
    open_audit,
    read_audit,
    run_loop,
)
from regdev.audit._idempotency import KeyRow
from regdev.audit._log import (
    BACKSTOP_CHECKPOINT_FRAMES,
    CHECKPOINT_FRAMES,
    default_audit_path,
    encode_json,
    insert_statement,
    lock_path,
)
from regdev.audit._reader import explain_audit
from regdev.audit._record import ADDED_COLUMNS, COLUMNS, SCHEMA
from regdev.core._observation import PIPELINE, Stage

WRITE = '{"tool": "write_register", "arguments": {"addr": 3, "data": 255}, "id": "c1"}'
READ = '{"tool": "read_register", "arguments": {"addr": 3}}'


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "audit.db"


def only(records: list[AuditRecord]) -> AuditRecord:
    assert len(records) == 1, records
    return records[0]


def test_accepted_write_record_has_every_field(store: Path | str) -> None:
    """Time, session, dialect, raw (size, SHA-256), verdict, tool, arguments, result, timings."""
    before = time.time()
    with Gate(audit=open_audit(store)) as gate:
        gate.handle(WRITE)
    record = only(read_audit(store))
    raw = WRITE.encode()
    assert before <= record.time <= time.time()
    assert (record.event, record.session, record.dialect, record.ok) == (
        "call", "default", "canonical", True)
    assert (record.raw, record.raw_bytes, record.raw_sha256) == (
        raw, len(raw), hashlib.sha256(raw).digest())
    assert (record.stage, record.code, record.message, record.tool) == (
        None, None, None, "write_register")
    assert json.loads(record.arguments or "") == {"addr": 3, "data": 255}
    assert json.loads(record.result or "") == {"addr": 3, "data": 255}
    assert (record.call_id, record.idempotency_key, record.replay) == ("c1", None, False)
    timings = (record.parse_ns, record.validate_ns, record.authorize_ns, record.execute_ns,
               record.observe_ns)
    assert all(type(t) is int and t >= 0 for t in timings), timings
    assert record.timings == dict(zip(PIPELINE, timings, strict=True))


def test_the_stage_names_come_from_one_tuple(db: Path) -> None:
    """The refusal stages and the audit columns all read PIPELINE."""
    assert PIPELINE == ("parse", "validate", "authorize", "execute", "observe")
    assert typing.get_args(Stage) == (*PIPELINE, "internal")
    assert AuditRecord.__struct_fields__ == ("id", *COLUMNS)
    times = COLUMNS.index("replay") + 1
    assert COLUMNS[times:times + len(PIPELINE)] == tuple(f"{stage}_ns" for stage in PIPELINE)
    assert COLUMNS[times + len(PIPELINE):] == tuple(name for name, _ in ADDED_COLUMNS)
    with AuditLog(db):
        pass
    with sqlite3.connect(db) as conn:
        calls = [row[1] for row in conn.execute("PRAGMA table_info(calls)")]
        keys = [row[1] for row in conn.execute("PRAGMA table_info(idempotency_keys)")]
    assert calls == ["id", *COLUMNS] and keys == list(KeyRow._fields)


def test_refusals_record_the_stage_reached(store: Path | str) -> None:
    """A refusal's record names its stage and code; stages not reached have no time."""
    with Gate(audit=open_audit(store)) as gate:
        gate.handle("{not json")
        gate.handle('{"tool": "write_register", "arguments": {"addr": 16, "data": 1}}')
    parse_refusal, range_refusal = read_audit(store)
    assert (parse_refusal.stage, parse_refusal.code, parse_refusal.tool) == (
        "parse", "not-json", None)
    assert parse_refusal.parse_ns is not None and parse_refusal.validate_ns is None
    assert (range_refusal.stage, range_refusal.code, range_refusal.tool) == (
        "validate", "range-addr", "write_register")
    assert range_refusal.message == "addr 16 is outside 0..15"
    assert json.loads(range_refusal.arguments or "") == {"addr": 16, "data": 1}
    assert range_refusal.validate_ns is not None and range_refusal.authorize_ns is None


def test_raw_is_capped_but_its_size_and_hash_are_of_the_whole(store: Path | str) -> None:
    """Only max_raw_bytes are kept; raw_bytes and raw_sha256 describe the full call."""
    raw = b'{"tool": "read_register", "arguments": {"addr": 1}, "pad": "\xff\xfe"}'
    with Gate(audit=open_audit(store, max_raw_bytes=16)) as gate:
        gate.handle(raw)
    record = only(read_audit(store))
    assert record.raw == raw[:16]
    assert (record.raw_bytes, record.raw_sha256) == (len(raw), hashlib.sha256(raw).digest())
    assert record.code == "not-json"  # invalid UTF-8, kept exactly in the database


def test_json_export_shows_text_hex_and_the_observation(store: Path | str) -> None:
    """to_dict: raw as text, SHA-256 in hex, JSON values, and the observation rebuilt."""
    with Gate(audit=open_audit(store)) as gate:
        observation = gate.handle(WRITE)
        refused = gate.handle(b'{"tool": "x", "arguments": {}, "bad": "\xff"}')
    ok, bad = (record.to_dict() for record in read_audit(store))
    assert ok["observation"] == observation.to_dict()
    assert ok["raw"] == WRITE and ok["raw_sha256"] == hashlib.sha256(WRITE.encode()).hexdigest()
    assert ok["arguments"] == {"addr": 3, "data": 255}
    assert bad["observation"] == refused.to_dict() and "\ufffd" in bad["raw"]
    json.dumps(bad)  # every value is JSON


def test_the_log_is_append_only(db: Path) -> None:
    """The database itself refuses UPDATE and DELETE of records and keys."""
    with Gate(audit=AuditLog(db)) as gate:
        gate.handle('{"tool": "write_register", "arguments": {"addr": 1, "data": 1}, '
                    '"idempotency_key": "k"}')
    conn = sqlite3.connect(db)
    for statement in ("UPDATE calls SET ok = 0", "DELETE FROM calls",
                      "UPDATE idempotency_keys SET observation = ''",
                      "DELETE FROM idempotency_keys"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(statement)
    conn.close()


@pytest.mark.parametrize(("durability", "synchronous"), [("crash", 1), ("power-loss", 2)])
def test_wal_mode_and_durability_levels(db: Path, durability: Any, synchronous: int) -> None:
    """WAL always; synchronous NORMAL (1) against a crash, FULL (2) against power loss."""
    audit = AuditLog(db, durability=durability)
    assert audit._conn.execute("PRAGMA synchronous").fetchone()[0] == synchronous
    audit.close()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_the_flusher_checkpoints_the_wal_off_the_writers_path(db: Path) -> None:
    """Writers' commits never copy the WAL into the database below the backstop; the
    flusher's checkpoint does, on its own connection, once enough frames accumulated."""
    audit = AuditLog(db, flush_interval=0.01)
    assert audit._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == (
        BACKSTOP_CHECKPOINT_FRAMES)
    empty = db.stat().st_size
    gate = Gate(audit=audit)
    for _ in range(CHECKPOINT_FRAMES + 10):  # one commit (one WAL frame at least) each
        gate.handle(WRITE)
    deadline = time.monotonic() + 10
    while db.stat().st_size == empty and time.monotonic() < deadline:
        time.sleep(0.01)
    assert db.stat().st_size > empty  # pages copied from the WAL by a checkpoint
    gate.close()
    assert len(read_audit(db)) == CHECKPOINT_FRAMES + 10


def test_a_write_is_committed_before_its_observation_returns(store: Path | str) -> None:
    """Another connection sees the write's record as soon as handle() returns."""
    gate = Gate(audit=open_audit(store, flush_interval=3600))  # the flusher never runs
    gate.handle(READ)
    gate.handle(WRITE)
    records = read_audit(store)  # a separate, read-only connection
    assert [r.tool for r in records] == ["read_register", "write_register"]
    gate.close()


def test_reads_are_group_committed_and_close_flushes_them(store: Path | str) -> None:
    """A read's record may wait in memory; close() commits it."""
    gate = Gate(audit=open_audit(store, flush_interval=3600))
    gate.handle(READ)
    assert read_audit(store) == []  # waiting for the flusher (never, here) or a write
    gate.close()
    assert only(read_audit(store)).tool == "read_register"


def test_the_flusher_commits_within_its_interval(store: Path | str) -> None:
    """With no write to carry them, records are committed by the flusher thread."""
    gate = Gate(audit=open_audit(store, flush_interval=0.01))
    gate.handle(READ)
    deadline = time.monotonic() + 10
    while not read_audit(store) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(read_audit(store)) == 1
    gate.close()


class BrokenConnection:
    """Stands in for the SQLite connection when the disk fails."""

    in_transaction = False

    def execute(self, *args: Any) -> None:
        error = sqlite3.OperationalError("disk I/O error")  # as SQLite raises it
        error.sqlite_errorcode, error.sqlite_errorname = 10, "SQLITE_IOERR"
        raise error

    executemany = execute

    def close(self) -> None:
        pass


def test_a_write_whose_record_cannot_be_committed_is_not_a_success(
        db: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The device ran it (its intent was committed before), but the caller gets audit-error,
    never ok."""
    audit = AuditLog(db)
    real = audit._conn

    class BreaksTheLog(CountingDevice):
        def write(self, addr: int, data: int) -> int:
            audit._conn = BrokenConnection()  # type: ignore[assignment]
            return super().write(addr, data)

    device = BreaksTheLog()
    gate = Gate(device, audit=audit)
    with caplog.at_level(logging.ERROR, logger="regdev"):
        obs = gate.handle(WRITE)
    assert (obs.ok, obs.stage, obs.code) == (False, "observe", "audit-error")
    assert "disk I/O error" in (obs.message or "") and "read the register back" in (
        obs.message or "")
    assert obs.refusal is not None and not obs.refusal.retryable and obs.id == "c1"
    assert device.accesses == 1 and "lost" in caplog.text
    gate.audit._conn = real  # type: ignore[union-attr]
    gate.close()


class FailingCommits(AuditLog):
    """An audit log whose commits fail while ``failing`` is set (a full disk, injected)."""

    failing = False

    def _commit(self) -> object:
        if not self.failing:
            return super()._commit()
        real, self._conn = self._conn, BrokenConnection()  # type: ignore[assignment]
        try:
            return super()._commit()
        finally:
            self._conn = real


def test_after_a_failed_commit_writes_are_refused_until_a_commit_succeeds(
        db: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Fail closed: once a write's record is lost, writes stop at authorize (never reaching
    the device) while reads go on; the next commit that succeeds lets writes run again."""
    device = CountingDevice()
    audit = FailingCommits(db, flush_interval=3600)  # commits happen only when asked here
    gate = Gate(device, audit=audit)
    audit.failing = True
    with caplog.at_level(logging.ERROR, logger="regdev"):
        lost = gate.handle(WRITE)
        refused = [gate.handle(WRITE) for _ in range(3)]
        read = gate.handle(READ)
    # The write's intent could not be committed: it was not sent.
    assert (lost.stage, lost.code) == ("execute", "audit-error") and device.accesses == 1
    assert lost.message == ("the write was not sent: the audit log could not record it first "
                            "(reading or writing the file failed (a disk I/O error))")
    assert {(obs.stage, obs.code) for obs in refused} == {("authorize", "audit-error")}
    assert "calls that change the device are refused until a commit succeeds" in (
        refused[0].message or "")
    assert read.ok and device.accesses == 1  # no write ran; the read ran
    assert audit.failure is not None and "disk I/O error" in audit.failure
    audit.failing = False
    audit.flush()  # the probe: the refusals' and the read's records commit
    assert audit.failure is None
    assert gate.handle(WRITE).ok and device.accesses == 2
    gate.close()
    assert [(r.stage, r.code) for r in read_audit(db)] == [  # the first intent was lost
        ("execute", "audit-error"), ("authorize", "audit-error"), ("authorize", "audit-error"),
        ("authorize", "audit-error"), (None, None), (None, None)]


def test_a_failed_read_commit_also_stops_writes(db: Path) -> None:
    """Any lost commit means the log cannot be trusted to record the next write."""
    audit = FailingCommits(db, flush_interval=3600)
    gate = Gate(CountingDevice(), audit=audit)
    audit.failing = True
    assert gate.handle(READ).ok
    with pytest.raises(AuditError):
        audit.flush()
    assert gate.handle(WRITE).code == "audit-error" and gate.handle(READ).ok
    audit.failing = False
    gate.close()


def test_a_closed_audit_log_refuses_every_call(db: Path) -> None:
    """Nothing runs unrecorded: after close, calls are audit-error and never reach the device."""
    device = CountingDevice()
    gate = Gate(device, audit=AuditLog(db))
    gate.close()
    obs = gate.handle(WRITE)
    assert (obs.stage, obs.code) == ("authorize", "audit-error")
    assert device.accesses == 0


def test_not_an_audit_database(tmp_path: Path) -> None:
    """Another SQLite database, a newer schema, or not SQLite at all: AuditError, one line."""
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(AuditError, match="not a regdev audit log"):
        AuditLog(other)
    newer = tmp_path / "newer.db"
    sqlite3.connect(newer).execute("PRAGMA user_version = 99").connection.close()
    with pytest.raises(AuditError, match="schema version 99"):
        AuditLog(newer)
    text = tmp_path / "text.db"
    text.write_text("hello, this is not a database at all" * 100)
    with pytest.raises(AuditError, match="cannot open the audit database"):
        AuditLog(text)
    with pytest.raises(AuditError, match="no audit database at"):
        read_audit(tmp_path / "missing.db")


@pytest.mark.parametrize(
    ("keyword", "value"),
    [("durability", "disk"), ("flush_interval", 0), ("flush_interval", float("inf")),
     ("flush_interval", float("nan")), ("flush_interval", 5e-324), ("flush_interval", 1e300),
     ("max_raw_bytes", -1)],
)
def test_audit_arguments_are_checked(db: Path, keyword: str, value: Any) -> None:
    """Bad settings are ValueError at construction."""
    with pytest.raises(ValueError, match=keyword):
        AuditLog(db, **{keyword: value})


def test_loop_steps_and_stop_are_recorded(store: Path | str) -> None:
    """Each step's record carries the loop id and step; the stop is one more record."""
    proposer = ScriptedProposer([READ, '{"tool": "read_register", "arguments": {"addr": 99}}',
                                 '{"tool": "read_register", "arguments": {}}'])
    with Gate(audit=open_audit(store)) as gate:
        result = run_loop(proposer, gate)
    records = read_audit(store, loop_id=result.loop_id)
    assert [(r.event, r.step, r.code) for r in records] == [
        ("call", 1, None), ("call", 2, "range-addr"), ("call", 3, "missing-addr"),
        ("stop", 3, "rejected")]
    assert records[-1].message == result.detail and records[-1].ok is False
    assert records[-1].to_dict()["observation"] is None


def test_filters(store: Path | str) -> None:
    """session, code (ok for accepted), time range, loop and last combine."""
    policy = Policy.from_dict({"sessions": {"viewer": {"scopes": ["read"]}}})
    with Gate(audit=open_audit(store), policy=policy) as gate:
        gate.handle(READ)
        gate.handle(WRITE, session=gate.session("viewer"))
        middle = time.time()
        gate.handle(WRITE)
    assert [r.session for r in read_audit(store, session="viewer")] == ["viewer"]
    assert [r.code for r in read_audit(store, code="denied-write_register")] == [
        "denied-write_register"]
    assert [r.tool for r in read_audit(store, code="ok")] == ["read_register", "write_register"]
    # 3 is the last write's intent, left out: its call record (4) exists
    assert [r.id for r in read_audit(store, since=middle)] == [4]
    assert [r.id for r in read_audit(store, until=middle)] == [1, 2]
    assert [r.id for r in read_audit(store, last=2)] == [2, 4]
    assert [r.id for r in read_audit(store, last=2**63 - 1)] == [1, 2, 4]
    assert read_audit(store, last=0) == []
    assert read_audit(store, session="nobody") == []
    for last in (-1, 2**63):
        with pytest.raises(ValueError, match=rf"^last must be in 0\.\.{2**63 - 1}, got {last}$"):
            read_audit(store, last=last)


def test_default_path_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    """$REGDEV_AUDIT, else $XDG_STATE_HOME/regdev/audit.db, else ~/.local/state/..."""
    monkeypatch.setenv("REGDEV_AUDIT", str(tmp_path / "x.db"))
    assert default_audit_path() == tmp_path / "x.db"
    monkeypatch.delenv("REGDEV_AUDIT")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_audit_path() == tmp_path / "regdev" / "audit.db"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # invalid per the XDG spec
    assert default_audit_path() == tmp_path / ".local" / "state" / "regdev" / "audit.db"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_audit_path() == tmp_path / ".local" / "state" / "regdev" / "audit.db"


# --- the CLI ----------------------------------------------------------------------------------


def test_commands_record_to_the_default_audit_log(capsys: pytest.CaptureFixture[str],
                                                  audit_path: Path) -> None:
    """demo, replay and call record every call by default; --no-audit records nothing."""
    run(capsys, "call", READ)
    run(capsys, "demo", "--json")
    _, out, _ = run(capsys, "demo")
    assert f"recorded in the audit log {audit_path}" in out
    records = read_audit(audit_path)
    assert len(records) == 1 + 2 * 9  # one call; twice eight steps and a stop
    assert len({r.loop_id for r in records if r.loop_id}) == 2
    other = audit_path.parent / "other.db"
    run(capsys, "call", READ, "--audit", str(other), "--durability", "power-loss")
    assert only(read_audit(other)).tool == "read_register"
    run(capsys, "call", READ, "--no-audit")
    assert len(read_audit(audit_path)) == 1 + 2 * 9  # nothing more recorded


def test_audit_command_shows_and_filters(capsys: pytest.CaptureFixture[str],
                                         audit_path: Path) -> None:
    """regdev audit prints one line per record and a count; filters apply."""
    run(capsys, "demo")
    status, out, _ = run(capsys, "audit")
    lines = out.splitlines()
    assert status == 0 and len(lines) == 10 and lines[-1] == f"9 records in {audit_path}"
    assert "refused validate/range-data" in lines[2] and "loop stop: rejected" in lines[8]
    status, out, _ = run(capsys, "audit", "--code", "range-data", "--since", "2000-01-01",
                         "--until", str(time.time() + 60))
    assert status == 0 and out.count("range-data") == 1 and "1 record in" in out
    status, out, _ = run(capsys, "audit", "--json", "--last", "1")
    assert json.loads(out)["event"] == "stop"


def test_audit_shows_and_filters_the_caller_and_approver(
        capsys: pytest.CaptureFixture[str], audit_path: Path) -> None:
    """The text listing names each call's caller and, for an approved or denied protected
    write, its approver and how it was asked (each quoted and escaped as a key is: a caller
    is a token's name or an OAuth subject, client-controlled); --caller keeps one caller's
    calls; a record without a caller shows neither."""
    answers = iter([Approval(True, "token:bob", "url"),
                    Approval(False, "token:b\x1b[2Job", "url", "denied on the approval page")])
    policy = Policy.from_dict({"registers": {"protected": [3]}},
                              approve=lambda request: next(answers))
    with Gate(policy=policy, audit=AuditLog(audit_path)) as gate:
        gate.handle(WRITE, session=Session("default", caller="token:alice"))
        gate.handle(WRITE, session=Session("default", caller="oauth:m\u00e9\nx"))
        gate.handle(READ)
    status, out, _ = run(capsys, "audit")
    lines = out.splitlines()
    assert status == 0 and len(lines) == 4
    assert "(caller 'token:alice', approver 'token:bob' (url), device " in lines[0]
    assert ("refused authorize/approval-denied" in lines[1]
            and "(caller 'oauth:m\\u00e9\\nx', approver 'token:b\\x1b[2Job' (url), device "
            in lines[1])
    assert "caller" not in lines[2] and "approver" not in lines[2]
    status, out, _ = run(capsys, "audit", "--caller", "token:alice")
    assert status == 0 and out.splitlines()[-1] == f"1 record in {audit_path}"
    assert "caller 'token:alice'" in out
    status, out, _ = run(capsys, "audit", "--caller", "oauth:m\u00e9\nx", "--json")
    assert [json.loads(line)["approver"] for line in out.splitlines()] == ["token:b\x1b[2Job"]
    status, out, _ = run(capsys, "audit", "--caller", "token:nobody")
    assert (status, out.splitlines()) == (0, [f"0 records in {audit_path}"])


def test_audit_shows_and_filters_the_proposer(
        capsys: pytest.CaptureFixture[str], audit_path: Path) -> None:
    """The text listing names each call's proposer (the model), quoted and escaped, and each
    loop stop's; --proposer keeps one proposer's records."""
    with Gate(audit=AuditLog(audit_path)) as gate:
        gate.handle(WRITE, proposer="openai:qwen3:8b", loop_id="L1", step=1)
        gate.record_loop_stop("L1", "done", "the model is done", 1, proposer="openai:qwen3:8b")
        gate.handle(READ, proposer="anthropic:c\x1b[2J")
        gate.handle(READ)
    status, out, _ = run(capsys, "audit")
    lines = out.splitlines()
    assert status == 0 and len(lines) == 5
    assert "(loop L1 step 1, proposer 'openai:qwen3:8b', device " in lines[0]
    assert lines[1].endswith("1 step, proposer 'openai:qwen3:8b'")
    assert "proposer 'anthropic:c\\x1b[2J', device " in lines[2]
    assert "proposer" not in lines[3]
    status, out, _ = run(capsys, "audit", "--proposer", "openai:qwen3:8b")
    assert status == 0 and out.splitlines()[-1] == f"2 records in {audit_path}"
    status, out, _ = run(capsys, "audit", "--proposer", "anthropic:c\x1b[2J", "--json")
    assert [json.loads(line)["tool"] for line in out.splitlines()] == ["read_register"]


def test_audit_code_refuses_a_code_no_record_can_hold(
        capsys: pytest.CaptureFixture[str], audit_path: Path) -> None:
    """--code takes ok, a verdict code (a fixed one, or missing-/type-/range-ARG, denied-TOOL)
    or a loop stop reason; anything else (a typo) is refused as replay refuses it, exit 2,
    naming where the codes are, instead of matching nothing silently."""
    run(capsys, "demo")
    for code, found in [("ok", 5), ("range-data", 1), ("rejected", 1), ("approval-denied", 0),
                        ("range-limits.low", 0), ("denied-erase_chip", 0), ("provider-error", 0),
                        ("error", 0)]:
        status, out, _ = run(capsys, "audit", "--code", code)
        assert (status, out.splitlines()[-1].split(" in ")[0]) == (
            0, f"{found} record{'s' if found != 1 else ''}"), code
    for code in ["bogus", "range-", "range", "Range-data", "okay", "denied"]:
        status, out, err = run(capsys, "audit", "--code", code)
        assert (status, out) == (2, ""), code
        assert err.splitlines() == [
            f"regdev audit: error: --code {code} is not a verdict code (docs/errors.md lists "
            "them: e.g. range-addr, approval-denied, denied-TOOL), a loop stop reason (done, "
            "budget, rejected, truncated, model-refusal, provider-error, error), or ok"]


def test_audit_command_json_exports_every_record(capsys: pytest.CaptureFixture[str],
                                                 audit_path: Path) -> None:
    """--json: one JSON object per record, nothing else on stdout."""
    run(capsys, "demo")
    _, out, _ = run(capsys, "audit", "--json", "--session", "default")
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == 9
    assert records[0]["observation"] == {"ok": True, "tool": "read_register",
                                         "result": {"addr": 0, "data": 0}}
    assert {"time", "session", "dialect", "raw", "raw_bytes", "raw_sha256", "stage", "code",
            "tool", "arguments", "result", "idempotency_key", "parse_ns"} <= set(records[0])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--since", "yesterday"], "--since: expected an ISO 8601 time"),
        (["--since", "nan"], "--since: expected a time, got 'nan'"),
        (["--until", "1e400"], "--until: expected a time, got '1e400'"),
        (["--loop", "zzz"], "no loop id in"),
        (["--last", "-1"], "--last must be a number of records in 1..9223372036854775807, "
                           "got -1"),
        (["--last", "0"], "--last must be a number of records in 1..9223372036854775807, "
                          "got 0"),
        (["--last", "99999999999999999999999"], "--last must be a number of records in "
                                                "1..9223372036854775807, got "
                                                "99999999999999999999999"),
        (["--db", "/nonexistent/a.db"], "no audit database at /nonexistent/a.db"),
    ],
)
def test_audit_command_errors_are_one_line(capsys: pytest.CaptureFixture[str],
                                           argv: list[str], message: str) -> None:
    """Bad options and a missing database exit 2 with one line."""
    run(capsys, "call", READ)
    status, out, err = run(capsys, "audit", *argv)
    assert status == 2 and out == "" and message in err and err.count("\n") == 1


def test_audit_last_beyond_sqlite_integers_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--last past 2**63-1 is one usage line, exit 2; at the bound it reads every record."""
    run(capsys, "call", READ)
    assert run(capsys, "audit", "--last", "99999999999999999999999") == (
        2, "", "regdev audit: error: --last must be a number of records in "
               "1..9223372036854775807, got 99999999999999999999999\n")
    status, out, _ = run(capsys, "audit", "--last", str(2**63 - 1))
    assert (status, out.splitlines()[-1]) == (0, f"1 record in {default_audit_path()}")


def test_audit_loop_takes_the_id_shown(capsys: pytest.CaptureFixture[str]) -> None:
    """--loop accepts the 8 characters the text view shows, as well as the whole id."""
    run(capsys, "demo")
    run(capsys, "demo")
    loop_ids = {r.loop_id for r in read_audit(default_audit_path()) if r.loop_id}
    assert len(loop_ids) == 2
    for loop_id in loop_ids:
        for given in (loop_id, loop_id[:8]):
            status, out, _ = run(capsys, "audit", "--loop", given)
            assert status == 0 and out.endswith(f"9 records in {default_audit_path()}\n")
            assert out.count(f"loop {loop_id[:8]}") == 9
    status, _, err = run(capsys, "audit", "--loop", "")
    assert status == 2 and "2 loop ids in" in err and "give more of the id" in err


def test_bad_policy_file_in_the_cli_is_one_line(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    """--policy with a bad file: exit 2, one line naming the file and field; nothing runs."""
    path = tmp_path / "p.toml"
    path.write_text('[sessions.x]\nscopes = ["root"]\n')
    status, out, err = run(capsys, "call", READ, "--policy", str(path))
    assert status == 2 and out == "" and err.count("\n") == 1
    assert f"{path}: `sessions.x.scopes[0]`" in err
    status, _, err = run(capsys, "demo", "--session", "nobody")
    assert status == 2 and "--session nobody needs --policy FILE" in err
    path.write_text('[sessions.x]\ntools = ["erase_chip"]\n')
    status, _, err = run(capsys, "call", READ, "--policy", str(path))
    assert status == 2 and err.count("\n") == 1
    assert f"{path}: the policy offers session `x` the tool `erase_chip`" in err
    path.write_text('[sessions.x]\nscopes = ["read"]\n')
    status, _, err = run(capsys, "call", READ, "--policy", str(path), "--session", "y")
    assert status == 2 and f"{path}: the policy declares no session `y`" in err


def test_unusable_audit_path_is_one_line(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    """An audit path that cannot be created: exit 2, one line."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    status, _, err = run(capsys, "call", READ, "--audit", str(blocker / "audit.db"))
    assert status == 2 and "cannot open the audit database" in err


def test_policy_applies_in_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    """--policy and --session reach the gate of demo, replay and call."""
    status, out, _ = run(capsys, "call", '{"tool": "write_register", "arguments": '
                         '{"addr": 1, "data": 1}}', "--policy", str(EXAMPLES / "policy.toml"),
                         "--session", "viewer")
    assert status == 1 and json.loads(out)["code"] == "denied-write_register"
    status, out, _ = run(capsys, "demo", "--json", "--policy", str(EXAMPLES / "policy.toml"),
                         "--session", "viewer")
    steps = [json.loads(line) for line in out.splitlines()]
    assert steps[1]["observation"]["code"] == "denied-write_register"
    assert steps[-2]["stop"] == "rejected"


def test_no_replay_across_cli_calls_on_a_fresh_device(capsys: pytest.CaptureFixture[str],
                                                      audit_path: Path) -> None:
    """Each `regdev call` runs on a fresh in-process device: a key stored by an earlier run
    belongs to that run's device, so the write runs again here and is never reported as
    done by a replay."""
    raw = ('{"tool": "write_register", "arguments": {"addr": 1, "data": 5}, '
           '"idempotency_key": "cli-1"}')
    outs = [json.loads(run(capsys, "call", raw)[1]) for _ in range(2)]
    assert outs == [{"ok": True, "tool": "write_register", "result": {"addr": 1, "data": 5}}] * 2
    _, out, _ = run(capsys, "call", raw.replace('"data": 5', '"data": 6'))
    assert json.loads(out)["ok"] is True
    assert [r.replay for r in read_audit(audit_path)] == [False, False, False]


def test_replays_are_marked_in_the_text_output(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    """Within one run (one device), a key sent twice is replayed, and says so."""
    raw = ('{"tool": "write_register", "arguments": {"addr": 1, "data": 5}, '
           '"idempotency_key": "r-1"}')
    path = tmp_path / "calls.jsonl"
    path.write_text("\n".join(json.dumps({"raw": raw}) for _ in range(2)) + "\n")
    _, out, _ = run(capsys, "replay", str(path))
    lines = [line for line in out.splitlines() if line.startswith(("line    1", "line    2"))]
    assert len(lines) == 2 and "replayed" not in lines[0]
    assert lines[1].endswith("register 1 = 0x05 (5); replayed (not executed now)")
    _, out, _ = run(capsys, "audit", "--last", "1")
    assert "replayed (not executed)" in out


def test_shell_is_authorized_and_recorded(capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch,
                                          audit_path: Path) -> None:
    """regdev shell takes the policy and audit options too: a viewer's write is denied, and
    every command is one record."""
    monkeypatch.setattr("sys.stdin", io.StringIO("read 1\nwrite 1 2\n"))
    status, out, _ = run(capsys, "shell", "--policy", str(EXAMPLES / "policy.toml"),
                         "--session", "viewer")
    assert status == 1  # a command was refused (docs/cli.md)
    assert "refused   authorize/denied-write_register (final)" in out
    monkeypatch.setattr("sys.stdin", io.StringIO("reset\n"))
    _, out, _ = run(capsys, "shell", "--policy", str(EXAMPLES / "policy.toml"), "--no-audit")
    assert ("refused   authorize/read-only-register (final): reset_device changes every "
            "register, and register 0 is read-only") in out
    assert [(r.session, r.tool, r.code) for r in read_audit(audit_path)] == [
        ("viewer", "identify_device", None), ("viewer", "read_register", None),
        ("viewer", "write_register", "denied-write_register")]


def test_a_large_batch_is_committed_whole_and_in_order(store: Path | str) -> None:
    """Records committed together (multi-row inserts plus a remainder) keep the call order."""
    raws = [f'{{"tool": "read_register", "arguments": {{"addr": {i % 16}}}, "id": "r{i}"}}'
            for i in range(100)]
    with Gate(audit=open_audit(store, flush_interval=3600)) as gate:
        for raw in raws:
            gate.handle(raw)
    records = read_audit(store)
    assert [r.raw for r in records] == [raw.encode() for raw in raws]
    assert [r.call_id for r in records] == [f"r{i}" for i in range(100)]
    assert [r.id for r in records] == list(range(1, 101))


def test_nulls_are_written_as_literals_and_read_back_as_none(store: Path | str) -> None:
    """insert_statement binds only the values that are not None; every record reads back
    column for column, whatever mix of NULLs a batch holds."""
    rows = [AuditLog.stop_row(time=1.0, session="s", loop_id="l", stop="done", detail="d",
                              steps=2)]
    with open_audit(store, flush_interval=3600) as audit:
        gate = Gate(audit=audit)
        gate.handle(WRITE)
        gate.handle("{not json")
        rows.append(rows[0])
        statement, params = insert_statement(rows)
        assert statement.count("?") == len(params) == 2 * sum(v is not None for v in rows[0])
        assert "NULL" in statement
        for row in rows:
            audit.append(row)
    write, refusal, stop, again = read_audit(store)
    assert (write.ok, write.replay, write.stage, write.raw) == (True, False, None, WRITE.encode())
    assert (refusal.ok, refusal.code, refusal.tool, refusal.validate_ns) == (
        False, "not-json", None, None)
    assert (stop.event, stop.ok, stop.dialect, stop.raw, stop.step) == ("stop", True, None,
                                                                         None, 2)
    assert again == AuditRecord(**{**msgspec.structs.asdict(stop), "id": 5})  # 1: an intent


#: The append-only triggers of idempotency_keys, as versions 1 and 2 created them.
OLD_KEY_TRIGGERS = """
CREATE TRIGGER idempotency_keys_append_only_update BEFORE UPDATE ON idempotency_keys
    BEGIN SELECT RAISE(ABORT, 'idempotency keys are append-only'); END;
CREATE TRIGGER idempotency_keys_append_only_delete BEFORE DELETE ON idempotency_keys
    BEGIN SELECT RAISE(ABORT, 'idempotency keys are append-only'); END;
"""
V1_KEYS = """
CREATE TABLE idempotency_keys (
    session TEXT NOT NULL, key TEXT NOT NULL, fingerprint BLOB NOT NULL,
    observation TEXT NOT NULL, time REAL NOT NULL, PRIMARY KEY (session, key)
) WITHOUT ROWID;
""" + OLD_KEY_TRIGGERS


def test_a_version_1_database_is_upgraded_and_its_unscoped_keys_set_aside(db: Path) -> None:
    """Version 1 keys were not tied to a device: they are kept, append-only, but never
    replayed; records stay and new ones follow them."""
    conn = sqlite3.connect(db)
    conn.executescript(SCHEMA + V1_KEYS + "PRAGMA user_version = 1;")
    conn.execute("INSERT INTO idempotency_keys VALUES ('default', 'old', x'00', '{}', 1.0)")
    conn.execute(f"INSERT INTO calls ({', '.join(COLUMNS)}) VALUES "
                 f"({', '.join('?' * len(COLUMNS))})",
                 AuditLog.stop_row(time=1.0, session="s", loop_id="l", stop="done",
                                   detail="d", steps=1))
    conn.commit()
    conn.close()
    device = CountingDevice()
    with Gate(device, audit=AuditLog(db)) as gate:
        assert len(gate.audit.idempotency) == 0  # type: ignore[union-attr]
        raw = WRITE.replace('"id": "c1"', '"idempotency_key": "old"')
        assert not gate.handle(raw).replay and device.accesses == 1
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
    assert conn.execute("SELECT key FROM idempotency_keys_v1").fetchall() == [("old",)]
    assert conn.execute("SELECT session, key FROM idempotency_keys").fetchall() == [
        ("default", "old")]
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM idempotency_keys_v1")
    conn.close()
    assert [r.event for r in read_audit(db)] == ["stop", "call"]


V2_KEYS = """
CREATE TABLE idempotency_keys (
    device TEXT NOT NULL, session TEXT NOT NULL, key TEXT NOT NULL, fingerprint BLOB NOT NULL,
    observation TEXT NOT NULL, time REAL NOT NULL, PRIMARY KEY (device, session, key)
) WITHOUT ROWID;
""" + OLD_KEY_TRIGGERS


def test_a_version_2_database_is_upgraded_and_its_keys_kept_but_never_replayed(
        db: Path) -> None:
    """Version 2 keys move to epoch '' and keep their device (no reset epoch: it was not
    known then), so they are never replayed: the call runs again and its key is stored in the
    device's scope of today. The rebuilt table is append-only."""
    with Gate(CountingDevice(state_id="serial:bench"), audit=AuditLog(db)) as gate:
        keyed = WRITE.replace('"id": "c1"', '"idempotency_key": "old"')
        stored = gate.handle(keyed)
    conn = sqlite3.connect(db)  # rewrite it as version 2 wrote it: scoped by the device alone
    rows = conn.execute("SELECT 'serial:bench', session, key, fingerprint, observation, time "
                        "FROM idempotency_keys").fetchall()
    conn.executescript("DROP TABLE idempotency_keys; DROP TABLE device_resets;" + V2_KEYS
                       + "PRAGMA user_version = 2;")
    conn.executemany("INSERT INTO idempotency_keys VALUES (?, ?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    device = CountingDevice(state_id="serial:bench")
    with Gate(device, audit=AuditLog(db)) as gate:
        again = gate.handle(keyed)
        assert (again.replay, again.result, device.accesses) == (False, stored.result, 1)
        assert gate.handle(keyed).replay is True and device.accesses == 1
    scope = f"serial:bench@{device.identity().epoch}"
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
    assert conn.execute("SELECT device, epoch, key FROM idempotency_keys "
                        "ORDER BY time").fetchall() == [("serial:bench", "", "old"),
                                                        (scope, "", "old")]
    assert conn.execute("SELECT count(*) FROM sqlite_schema WHERE name = "
                        "'idempotency_keys_v2'").fetchone()[0] == 0
    for statement in ("UPDATE idempotency_keys SET observation = ''",
                      "DELETE FROM idempotency_keys"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(statement)
    conn.close()


def test_device_resets_are_append_only_and_durable(db: Path) -> None:
    """A reset is committed when record_reset returns (another connection sees it) and the
    database refuses UPDATE and DELETE of it."""
    audit = AuditLog(db)
    epoch = audit.record_reset("serial:bench")
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT device, epoch FROM device_resets").fetchall() == [
        ("serial:bench", epoch)]
    for statement in ("UPDATE device_resets SET epoch = ''", "DELETE FROM device_resets"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute(statement)
    conn.close()
    audit.close()
    with pytest.raises(AuditError, match="closed"):
        audit.record_reset("serial:bench")


# --- one writer a database ----------------------------------------------------------------------

#: A writer in another process: opens the audit log, says so, and holds it until stdin closes.
HOLDER = """
import sys
from regdev import AuditLog
log = AuditLog(sys.argv[1])
print("ready", flush=True)
sys.stdin.read()
log.close()
"""


@contextmanager
def holder(path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process holding the audit log at ``path`` open (killed on the way out)."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        yield child
    finally:
        child.kill()
        child.wait()


def test_a_second_audit_log_on_the_same_database_is_refused_until_the_first_closes(
        tmp_path: Path) -> None:
    """Two AuditLogs in one process: the second is refused, naming this process, until close."""
    path = tmp_path / "two.db"
    device = CountingDevice(state_id="serial:/dev/ttyUSB0")
    server = Gate(device, audit=AuditLog(path))
    with pytest.raises(AuditInUse) as refused:
        AuditLog(path)  # the breaker's shell: it would replay keys the server's reset ended
    message = str(refused.value)
    assert message.startswith(f"the audit database {path} is in use by another AuditLog in "
                              f"this process (pid {os.getpid()}: ")
    assert message.endswith(")") and "\n" not in message
    assert isinstance(refused.value, AuditError)
    assert refused.value.holder.split(" ")[0] == str(os.getpid())
    server.close()
    assert lock_path(path).read_text() == ""  # the holder line goes with the lock
    with AuditLog(path) as second:
        assert second.idempotency is not None
        assert lock_path(path).read_text().split(" ")[0] == str(os.getpid())


def test_a_failed_open_releases_the_lock(tmp_path: Path) -> None:
    """An AuditLog that fails to open (not an audit log) leaves the database free."""
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(AuditError, match="not a regdev audit log"):
        AuditLog(path)
    path.unlink()
    AuditLog(path).close()


@pytest.mark.skipif(sys.platform == "win32", reason="no fcntl: no lock (documented)")
def test_another_process_writing_the_database_is_refused(tmp_path: Path) -> None:
    """A writer in another process: this one is refused with its pid; readers still read."""
    path = tmp_path / "audit.db"
    with AuditLog(path) as log:
        log.append(log.stop_row(time=1.0, session="s", loop_id="l", stop="done",
                                detail="", steps=0), durable=True)
    with holder(path) as child:
        with pytest.raises(AuditInUse) as refused:
            AuditLog(path)
        assert str(refused.value) == (f"the audit database {path} is in use by another regdev "
                                      f"process (pid {child.pid}: -c {path})")
        assert [record.code for record in read_audit(path)] == ["done"]  # no lock to read
        child.communicate("")  # stdin closed: the holder closes its log and exits
        assert child.returncode == 0
    AuditLog(path).close()


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_a_killed_writer_frees_the_database(tmp_path: Path) -> None:
    """SIGKILL the holder: the operating system releases its lock, the next writer opens."""
    path = tmp_path / "audit.db"
    with holder(path) as child:
        with pytest.raises(AuditInUse):
            AuditLog(path)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    with AuditLog(path) as log:  # the dead holder's line is still in the file: not read
        assert not log.closed


@pytest.mark.skipif(sys.platform == "win32", reason="no fcntl: no lock (documented)")
def test_cli_refuses_a_database_in_use_even_the_default_one(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Default path in use: exit 2 and one line that says what to do (not a quiet no-audit)."""
    monkeypatch.delenv("REGDEV_AUDIT")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    path = tmp_path / "regdev" / "audit.db"
    call = '{"tool": "write_register", "arguments": {"addr": 1, "data": 2}}'
    with holder(path) as child:
        status, out, err = run(capsys, "call", call)
        assert (status, out) == (2, "")
        assert err == (f"regdev call: error: the audit database {path} is in use by another "
                       f"regdev process (pid {child.pid}: -c {path}); give this one its own "
                       "with --audit PATH, or --no-audit\n")
        status, out, err = run(capsys, "call", "--audit", str(path), call)  # named: the same
        assert status == 2 and err.startswith(f"regdev call: error: the audit database {path} "
                                              "is in use by another regdev process")
        status, out, err = run(capsys, "call", "--no-audit", call)
        assert (status, json.loads(out)["ok"], err) == (0, True, "")
        status, out, err = run(capsys, "audit", "--db", str(path))  # a reader: no lock
        assert (status, err) == (0, "")


def test_encode_json_gives_none_for_data_that_is_not_json() -> None:
    """A value that cannot be encoded (an arbitrary object, a cycle) is None, never an
    exception: the audit log records the call without it."""
    cycle: list[object] = []
    cycle.append(cycle)
    assert encode_json({"addr": 3, "data": [1, 2]}) == '{"addr":3,"data":[1,2]}'
    assert encode_json({"x": object()}) is None
    assert encode_json(cycle) is None


def test_a_symlink_to_the_database_takes_the_same_lock(tmp_path: Path) -> None:
    """Two names of one database (a symlink) are one writer's: the second is refused."""
    path = tmp_path / "real.db"
    alias = tmp_path / "alias.db"
    alias.symlink_to(path)
    with AuditLog(path), pytest.raises(AuditInUse):
        AuditLog(alias)
    assert lock_path(alias) == lock_path(path) == tmp_path / "real.db.lock"


def test_a_record_with_text_sqlite_cannot_store_is_kept_escaped(tmp_path: Path) -> None:
    """A string that is not Unicode text reaching the log (here, straight through row()) is
    stored backslash-escaped, and the records committed with it are kept."""
    with AuditLog(tmp_path / "a.db") as log:
        for session in ("s1", "s\ud800", "s3"):
            log.append(log.row(time=1.0, session=session, dialect="canonical", raw=b"{}",
                               observation=Observation(
                                   refusal=Refusal("validate", "unknown-tool", "x")),
                               tool=None, arguments=None))
    assert [r.session for r in read_audit(tmp_path / "a.db")] == ["s1", "s\\ud800", "s3"]


def test_a_path_too_long_is_one_error_not_a_traceback(tmp_path: Path) -> None:
    """A database name the OS refuses (too long) is an AuditError in the OS's words, for the
    writer and for the reader."""
    path = tmp_path / ("a" * 300)
    with pytest.raises(AuditError) as writing:
        AuditLog(path)
    assert str(writing.value) == f"cannot open the audit database {path}: File name too long"
    with pytest.raises(AuditError) as reading:
        read_audit(path)
    assert str(reading.value) == f"cannot read the audit database {path}: File name too long"


def test_a_filter_that_is_not_unicode_text_is_an_audit_error(tmp_path: Path) -> None:
    """A session filter holding a lone surrogate (bytes from a non-UTF-8 terminal) is an
    AuditError naming the cause, not a UnicodeEncodeError."""
    path = tmp_path / "a.db"
    AuditLog(path).close()
    with pytest.raises(AuditError, match="a filter holds text that is not Unicode"):
        read_audit(path, session="\udcff")
    assert read_audit(path, session="default") == []


def test_a_database_without_the_added_columns_is_read_and_then_upgraded(db: Path) -> None:
    """A log written before the caller/approver/approval columns existed: readers see None
    in them without changing the file; the next writer adds them, keeping the old records,
    and its own records fill them."""
    with Gate(audit=AuditLog(db)) as gate:
        gate.handle(READ)  # a read: no intent record, which the regdev before them never wrote
    conn = sqlite3.connect(db)  # as the regdev before them wrote it (nor its indexes)
    for (index,) in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'index' AND "
                                 "name LIKE 'calls_by_%'").fetchall():
        conn.execute(f"DROP INDEX {index}")
    for name, _ in ADDED_COLUMNS:
        conn.execute(f"ALTER TABLE calls DROP COLUMN {name}")
    conn.commit()
    conn.close()
    (old,) = read_audit(db)
    assert (old.ok, old.caller, old.approver, old.approval) == (True, None, None, None)
    for column in ("caller", "device", "proposer"):  # a filter on a column it lacks: none
        assert read_audit(db, **{column: "token:alice"}) == [], column
    policy = Policy.from_dict({"registers": {"protected": [3]}},
                              approve=lambda request: Approval(True, "token:bob", "url"))
    with Gate(policy=policy, audit=AuditLog(db)) as gate:
        gate.handle(WRITE, session=Session("default", caller="token:alice"))
    conn = sqlite3.connect(db)
    names = [row[1] for row in conn.execute("PRAGMA table_info(calls)")]
    conn.close()
    assert names[-len(ADDED_COLUMNS):] == [name for name, _ in ADDED_COLUMNS]
    first, second = read_audit(db)
    assert first == old
    assert (second.ok, second.caller, second.approver, second.approval) == (
        True, "token:alice", "token:bob", "url")
    assert second.to_dict()["caller"] == "token:alice"


def test_each_filter_is_answered_through_its_index(store: Path | str) -> None:
    """A filter by code, session, device, caller, proposer, loop or time reads through its
    index (its cost follows its matches, not the log's size), on either store; an intent's
    call record is found by its index too."""
    rows = []
    for i in range(4000):
        rows.append((1000.0 + i, "call", f"s{i % 50}", "canonical", f"loop{i % 40}", 1,
                     None, None, None, 1, None, f"code-{i % 30}" if i % 2 else None, None,
                     "read_register", None, None, None, None, 0,
                     *(None,) * len(PIPELINE), f"dev{i % 20}", None, f"p{i % 25}",
                     f"token:c{i % 10}", None, None, None, None, None))
    with open_audit(store, flush_interval=3600) as audit:
        for row in rows:
            audit.append(row)
    if isinstance(store, str):  # PostgreSQL plans by its statistics
        import psycopg  # noqa: PLC0415 - the postgresql extra

        with psycopg.connect(store, autocommit=True) as conn:
            conn.execute("ANALYZE calls")
    for column, filters in (("code", {"code": "code-3"}), ("session", {"session": "s7"}),
                            ("device", {"device": "dev3"}), ("caller", {"caller": "token:c1"}),
                            ("proposer", {"proposer": "p4"}), ("loop", {"loop_id": "loop9"}),
                            ("time", {"since": 4990.0})):
        plan = " | ".join(explain_audit(store, **filters))
        assert f"calls_by_{column}" in plan, (column, plan)
    assert len(read_audit(store, code="code-3")) == len(range(3, 4000, 30))


def test_audit_follow_shows_records_as_they_are_committed(store: Path | str) -> None:
    """regdev audit --follow prints the records there, then each new one another writer
    commits, and exits 0 on Ctrl-C (SIGINT)."""
    with Gate(audit=open_audit(store)) as gate:
        gate.handle(READ)
    follower = subprocess.Popen(  # (SIGINT at its default: a background job ignores it)
        default_signals([sys.executable, "-m", "regdev", "audit", "--db", str(store),
                         "--follow", "--json"]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout = follower.stdout
    assert stdout is not None
    try:
        assert json.loads(stdout.readline())["tool"] == "read_register"
        with Gate(audit=open_audit(store)) as gate:
            gate.handle(WRITE)
        record = json.loads(stdout.readline())  # waits until it is shown
        assert (record["event"], record["tool"], record["call_id"]) == (
            "call", "write_register", "c1")
    finally:
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=60)
    assert follower.returncode == 0, err
