"""The PostgreSQL store: what is its own (several writers, its schema version, its URL on the
command line). The tests every store passes are in test_audit.py and test_idempotency.py,
run on SQLite and PostgreSQL alike (the ``store`` fixture)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time

import anyio
import psycopg
import pytest

from conftest import run
from regdev import (
    Approval,
    ApprovalRequest,
    AuditError,
    AuditLog,
    Gate,
    Observation,
    Policy,
    RegisterFile,
    open_audit,
    read_audit,
)
from regdev.audit._pgschema import POSTGRES_SCHEMA_VERSION
from regdev.audit._record import COLUMNS
from regdev.server._approval import approvals_for
from support.pgserver import Server, free_port

WRITE = '{"tool": "write_register", "arguments": {"addr": 3, "data": 255}, "id": "c1"}'
READ = '{"tool": "read_register", "arguments": {"addr": 3}}'


def schema_of(dsn: str) -> str:
    return dsn.rpartition("%3D")[2]


def test_the_calls_table_has_every_column_of_the_record(postgres: Server) -> None:
    """calls has id and every column of COLUMNS, in order (the one list of columns)."""
    dsn = postgres.fresh_dsn()
    with open_audit(dsn):
        pass
    with psycopg.connect(postgres.dsn) as conn:
        names = [row[0] for row in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'calls' "
            "AND table_schema = %s ORDER BY ordinal_position", (schema_of(dsn),))]
    assert names == ["id", *COLUMNS]


def test_the_store_is_append_only(postgres: Server) -> None:
    """The database refuses UPDATE and DELETE of records, keys and resets."""
    dsn = postgres.fresh_dsn()
    with Gate(RegisterFile(), audit=open_audit(dsn)) as gate:
        gate.handle('{"tool": "write_register", "arguments": {"addr": 1, "data": 1}, '
                    '"idempotency_key": "k"}')
        gate.reset_device()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in ("UPDATE calls SET ok = 0", "DELETE FROM calls",
                          "UPDATE idempotency_keys SET observation = ''",
                          "DELETE FROM idempotency_keys", "DELETE FROM device_resets"):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                conn.execute(statement)


def test_another_schema_version_is_refused_with_what_to_do(postgres: Server) -> None:
    """A store of another schema version is refused, naming both versions and the way out."""
    dsn = postgres.fresh_dsn()
    with open_audit(dsn):
        pass
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE regdev_schema SET version = 99")
    message = (f"has regdev's PostgreSQL schema version 99; this regdev uses version "
               f"{POSTGRES_SCHEMA_VERSION}: open it with the regdev that wrote it, or give "
               "this one a new database")
    with pytest.raises(AuditError, match=message):
        open_audit(dsn)
    with pytest.raises(AuditError, match=message):
        read_audit(dsn)


def test_a_database_with_a_calls_table_of_its_own_is_refused(postgres: Server) -> None:
    """A schema that holds a table named calls not made by regdev is not taken over."""
    dsn = postgres.fresh_dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE calls (x int)")
    with pytest.raises(AuditError, match="has a table calls that is not a regdev audit log"):
        open_audit(dsn)


def test_several_writers_keep_every_record(postgres: Server) -> None:
    """Four writers on one store, in threads, 50 writes each: 200 records, none lost."""
    dsn = postgres.fresh_dsn()
    logs = [open_audit(dsn) for _ in range(4)]

    def work(log: AuditLog) -> None:
        gate = Gate(RegisterFile(), audit=log)
        for i in range(50):
            assert gate.handle(WRITE.replace("c1", f"c{i}")).ok

    threads = [threading.Thread(target=work, args=(log,)) for log in logs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for log in logs:
        log.close()
    records = read_audit(dsn, code="ok")
    assert len(records) == 200 and len({r.id for r in records}) == 200


def test_records_and_keys_of_one_commit_are_one_statement(postgres: Server) -> None:
    """Two keyed records and a plain one committed together (one statement with the keys and
    the reservations' deletion): every record and key stored, no reservation left, and each
    key answered from the store by another process."""
    dsn = postgres.fresh_dsn()
    first, other = open_audit(dsn, flush_interval=3600), open_audit(dsn)  # no flush between
    try:
        slots = [("dev@1", "default", "k1"), ("dev@1", "default", "k2")]
        prints = [b"a" * 32, b"b" * 32]
        for slot, print_ in zip(slots, prints, strict=True):
            assert first.begin_key(slot, print_) is None  # reserved
        observation = Observation.success("write_register", {"addr": 3, "data": 1})
        text = json.dumps(observation.to_dict())
        rows = [first.row(time=1.0, session="default", dialect="canonical", raw=WRITE,
                          observation=observation, tool="write_register",
                          arguments='{"addr":3,"data":1}', idempotency_key=key)
                for key in ("k1", "k2", None)]
        first.append(rows[0], first.key_row(slots[0], prints[0], text, 1.0))
        first.append(rows[1], first.key_row(slots[1], prints[1], text, 1.0))
        first.append(rows[2], durable=True)  # the three in one commit
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT count(*) FROM calls").fetchone() == (3,)
            assert conn.execute("SELECT key FROM idempotency_keys ORDER BY key").fetchall() == [
                ("k1",), ("k2",)]
            assert conn.execute("SELECT count(*) FROM idempotency_running").fetchone() == (0,)
        for slot, print_ in zip(slots, prints, strict=True):
            found = other.begin_key(slot, print_)
            assert isinstance(found, Observation) and found.replay and found.result == {
                "addr": 3, "data": 1}
    finally:
        first.close()
        other.close()


def test_cli_records_to_postgresql_and_audit_and_report_read_it(
        capsys: pytest.CaptureFixture[str], postgres: Server,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """--audit postgresql://... records; regdev audit and report read the store (--db and
    $REGDEV_AUDIT); the password is never shown."""
    dsn = postgres.fresh_dsn()
    status, _, err = run(capsys, "call", WRITE, "--audit", dsn)
    assert status == 0, err
    status, out, _ = run(capsys, "audit", "--db", dsn, "--json")
    assert status == 0 and json.loads(out)["arguments"] == {"addr": 3, "data": 255}
    monkeypatch.setenv("REGDEV_AUDIT", dsn)
    status, _, err = run(capsys, "call", READ)
    assert status == 0, err
    status, out, _ = run(capsys, "audit")
    assert status == 0 and out.splitlines()[-1] == f"2 records in {dsn}"
    status, out, _ = run(capsys, "report", "--json")
    report = json.loads(out)
    assert status == 0 and report["db"] == dsn
    assert [(p["proposer"], p["calls"]) for p in report["proposers"]] == [("unknown", 2)]


def test_a_wrong_url_or_a_server_down_is_exit_2_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A URL libpq refuses, and a server that does not answer: exit 2, one line, no
    password shown, nothing run."""
    port = free_port()
    for dsn, words in ((f"postgresql://me:secret@127.0.0.1:{port}/x", "connection"),
                       ("postgresql://127.0.0.1:notaport/x", "invalid")):
        for argv in (["call", WRITE, "--audit", dsn], ["audit", "--db", dsn]):
            status, out, err = run(capsys, *argv)
            assert status == 2 and out == "", (argv, out)
            assert err.count("\n") == 1 and "secret" not in err, err
            assert "cannot" in err and words in err, err


def test_a_password_is_never_shown_even_where_libpq_quotes_the_url(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A URL libpq cannot parse whole is quoted in its message: the password is hidden there
    too, in the user part or as the query's `password` parameter."""
    port = free_port()
    for dsn, shown in (
            (f"postgresql://me:hunter2@[::1:{port}/x", f"postgresql://me:***@[::1:{port}/x"),
            (f"postgresql://me@[::1:{port}/x?password=hunter2",
             f"postgresql://me@[::1:{port}/x?password=***"),
            (f"postgresql://me@127.0.0.1:{port}/x?sslmode=disable&password=hunter2",
             f"postgresql://me@127.0.0.1:{port}/x?sslmode=disable&password=***")):
        for argv in (["call", WRITE, "--audit", dsn], ["audit", "--db", dsn]):
            status, out, err = run(capsys, *argv)
            assert status == 2 and out == "", (argv, out)
            assert err.count("\n") == 1 and "hunter2" not in err, err
            assert shown in err, err


def test_serve_with_postgresql_down_exits_2_in_one_line() -> None:
    """regdev serve with its store out of reach: exit 2, one line on stderr."""
    dsn = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    done = subprocess.run([sys.executable, "-m", "regdev", "serve", "--audit", dsn],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "cannot open the audit database" in done.stderr


def test_a_rate_limit_is_shared_by_the_processes_of_a_store(postgres: Server) -> None:
    """A caller's bucket is the store's: its burst spent through one writer is spent for the
    other too (two AuditLogs stand for two processes)."""
    dsn = postgres.fresh_dsn()
    policy = Policy.from_dict({"rate_limit": {"rate": 0.001, "burst": 2}})
    with open_audit(dsn) as one, open_audit(dsn) as other:
        first = policy.session(caller="token:alice", shared=one.shared_bucket)
        second = policy.session(caller="token:alice", shared=other.shared_bucket)
        bob = policy.session(caller="token:bob", shared=other.shared_bucket)
        assert first.take_token() is None and second.take_token() is None
        refusal = first.take_token()
        assert refusal is not None and refusal.code == "rate-limited"
        assert second.take_token() is not None
        assert bob.take_token() is None  # a bucket per caller
    with open_audit(dsn) as again:  # the buckets outlive the processes
        third = policy.session(caller="token:alice", shared=again.shared_bucket)
        assert third.take_token() is not None


def test_an_approval_question_opened_by_one_process_is_answered_through_another(
        postgres: Server) -> None:
    """A page question asked by one process (its Approvals) is served and answered by the
    other's page; the asking process sees the yes, with the register's value it holds."""
    dsn = postgres.fresh_dsn()
    policy = Policy.from_dict({"approval": {"via": "url", "timeout": 60}})
    device = RegisterFile()
    device.write(15, 9)

    async def approver(token: str) -> tuple[str, frozenset[str]] | None:
        return ("token:carol", frozenset({"regdev:approve"})) if token == "good" else None

    with open_audit(dsn) as one, open_audit(dsn) as other:
        asking, answering = (approvals_for(policy, device) for _ in range(2))
        asking.shared, answering.shared = one.shared_questions(), other.shared_questions()
        answering.verify_approver = approver
        request = ApprovalRequest("default", "write_register", {"addr": 15, "data": 1}, 15,
                                  caller="token:alice")
        question = asking._open_question(request, "url")
        assert question is not None
        status, page = answering.page(question.id)
        assert status == 200 and "register 15" in page.lower()
        result: list[Approval] = []
        waiter = threading.Thread(target=lambda: result.append(asking._wait_page(question)))
        waiter.start()
        status, _ = anyio.run(answering.answer_page, question.id,
                              b"token=good&decision=approve")
        assert status == 200
        waiter.join(timeout=60)
        assert result == [Approval(True, "token:carol", "url", holds=((15, 9),))]
        status, _ = anyio.run(answering.answer_page, question.id,
                              b"token=good&decision=deny")
        assert status == 404  # answered: closed everywhere


def test_postgresql_down_refuses_writes_and_they_are_served_again_once_it_is_back(
        postgres: Server) -> None:
    """PostgreSQL stopped mid-run: a write is refused audit-error (nothing sent to the
    device) while it is down; once it is back and a commit succeeds again (the refusals'
    records, by the flusher, on a new connection), writes are served and recorded again; no
    record of an accepted write is lost."""
    dsn = postgres.fresh_dsn()
    device = RegisterFile()
    with Gate(device, audit=open_audit(dsn)) as gate:
        assert gate.handle(WRITE).ok
        postgres.stop("fast")
        try:
            down = gate.handle(WRITE.replace('"data": 255', '"data": 7'))
            assert (down.ok, down.code) == (False, "audit-error"), down.to_dict()
            assert device.read(3) == 255  # the write never reached the device
        finally:
            postgres.start()
        audit = gate.audit
        assert audit is not None
        deadline = time.monotonic() + 120
        back = gate.handle(WRITE.replace('"data": 255', '"data": 9'))
        while not back.ok and time.monotonic() < deadline:  # refused until a commit succeeds:
            assert back.code == "audit-error", back.to_dict()  # the flusher's, of the refusals
            while audit.failure is not None and time.monotonic() < deadline:
                time.sleep(0.05)
            back = gate.handle(WRITE.replace('"data": 255', '"data": 9'))
        assert back.ok, back.to_dict()
        assert device.read(3) == 9
    accepted = [r.arguments for r in read_audit(dsn, code="ok")]
    assert accepted == ['{"addr":3,"data":255}', '{"addr":3,"data":9}']


def test_a_keyed_write_refused_while_postgresql_is_down_says_why(postgres: Server) -> None:
    """PostgreSQL stopped: a keyed write is refused `audit-error` saying why (the server's or
    the OS's words), never the bare "audit log failure"; nothing is sent."""
    dsn = postgres.fresh_dsn()
    device = RegisterFile()
    with Gate(device, audit=open_audit(dsn)) as gate:
        assert gate.handle(KEYED % (1, "k1")).ok
        postgres.stop("fast")
        try:
            down = gate.handle(KEYED % (2, "k2"))
        finally:
            postgres.start()
        assert (down.ok, down.code) == (False, "audit-error"), down.to_dict()
        assert "audit log failure" not in down.message, down.message
        assert down.message.startswith("the write was not sent: the audit log could not "
                                       "record it first ("), down.message
        assert device.read(3) == 1


def test_after_a_restart_the_next_keyed_write_is_served_at_once(postgres: Server) -> None:
    """PostgreSQL restarted between two keyed writes, no call in between: the store's
    connections, closed by the server while idle, are found so before a statement is sent
    into them and made again, so the next keyed write is served (it was refused
    `audit-error`, one per connection, while each learnt its connection was cut), recorded,
    and its key stored."""
    dsn = postgres.fresh_dsn()
    device = RegisterFile()
    with Gate(device, audit=open_audit(dsn)) as gate:
        assert gate.handle(KEYED % (1, "k1")).ok
        postgres.stop("fast")
        postgres.start()
        back = gate.handle(KEYED % (2, "k2"))
        assert back.ok, back.to_dict()
        assert device.read(3) == 2
        again = gate.handle(KEYED % (2, "k2"))  # the key stored across the restart
        assert again.ok and device.read(3) == 2
    accepted = [r.arguments for r in read_audit(dsn, code="ok")]
    assert accepted[:2] == ['{"addr":3,"data":1}', '{"addr":3,"data":2}']


#: A keyed write of register 3 (its data and key filled in).
KEYED = ('{"tool": "write_register", "arguments": {"addr": 3, "data": %d}, '
         '"idempotency_key": "%s"}')


def test_a_missing_postgresql_or_nginx_is_one_line_naming_the_install_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where PostgreSQL's server or nginx is not installed, the harness says so in one line
    with the apt-get command that installs it (the tests skip with it; CI fails)."""
    from support import nginxserver, pgserver  # noqa: PLC0415 - the harness

    monkeypatch.setattr(pgserver.glob, "glob", lambda pattern: [])
    with pytest.raises(pgserver.Missing) as missing:
        pgserver.binaries()
    assert str(missing.value).endswith("install it with: apt-get install postgresql")
    monkeypatch.setattr(nginxserver.shutil, "which", lambda name: None)
    monkeypatch.setattr(nginxserver.os.path, "exists", lambda path: False)
    with pytest.raises(pgserver.Missing) as missing, nginxserver.started([1]):
        pass
    assert str(missing.value).endswith("install it with: apt-get install nginx")
    assert "\n" not in str(missing.value)


def test_a_version_1_store_is_upgraded_with_the_leases_table(postgres: Server) -> None:
    """A store of schema version 1 (before serial leases) is read as it is, and upgraded
    to this version, the table serial_leases added, when a writer opens it."""
    dsn = postgres.fresh_dsn()
    with Gate(RegisterFile(), audit=open_audit(dsn)) as gate:
        assert gate.handle(WRITE).ok
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE serial_leases")
        conn.execute("UPDATE regdev_schema SET version = 1")
    assert len(read_audit(dsn)) == 1
    with open_audit(dsn):
        pass
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM regdev_schema").fetchone() == (
            POSTGRES_SCHEMA_VERSION,) == (2,)
        assert conn.execute("SELECT count(*) FROM serial_leases").fetchone() == (0,)


def test_one_process_holds_a_serial_line_and_another_takes_it_once_its_lease_lapses(
        postgres: Server) -> None:
    """Two processes' leases on one store: the first to ask holds the line (renewed); the
    other is refused LineElsewhere naming the owner and the expiry; an owner that stops
    renewing without a word (as SIGKILL leaves it) loses the line once its lease lapses,
    by the server's clock, and the other takes it; a clean close gives it up at once."""
    from regdev.core._errors import LineElsewhere  # noqa: PLC0415

    dsn = postgres.fresh_dsn()
    with open_audit(dsn) as audit:
        first = audit.line_leases(1.0, 0.2)
        second = audit.line_leases(1.0, 0.2)
        try:
            assert first.hold("serial:/dev/ttyUSB0") is True  # taken anew
            assert first.hold("serial:/dev/ttyUSB0") is False  # held
            with pytest.raises(LineElsewhere) as refused:
                second.hold("serial:/dev/ttyUSB0")
            assert re.fullmatch(
                r"the serial line serial:/dev/ttyUSB0 is driven by another regdev process of "
                + re.escape(f"the fleet, {first.owner}, whose lease expires at ")
                + r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC unless renewed \(its owner renews "
                r"it while it runs\); nothing was sent: send the call to that process "
                r"\(behind a load balancer, send it again until it lands there\), or again "
                r"after that time if it stopped", str(refused.value))
            assert second.hold("serial:/dev/ttyS1") is True  # another line: another owner
            with psycopg.connect(dsn, autocommit=True) as conn:  # renewed: a later expiry
                query = "SELECT owner, expires FROM serial_leases WHERE line = %s"
                owner, expires = conn.execute(query, ("serial:/dev/ttyUSB0",)).fetchone()
                deadline = time.monotonic() + 60
                while conn.execute(query, ("serial:/dev/ttyUSB0",)).fetchone() == (
                        owner, expires):
                    assert time.monotonic() < deadline, "the lease was never renewed"
                    time.sleep(0.05)
                assert conn.execute(query, ("serial:/dev/ttyUSB0",)).fetchone()[0] == first.owner
            first._stop.set()  # renews no more, gives nothing up: as a process killed
            assert first._renewer is not None
            first._renewer.join(5)
            deadline = time.monotonic() + 60
            while True:
                try:
                    assert second.hold("serial:/dev/ttyUSB0") is True
                    break
                except LineElsewhere:
                    assert time.monotonic() < deadline, "the lease never lapsed"
                    time.sleep(0.05)
            with pytest.raises(LineElsewhere, match=re.escape(second.owner)):
                first.hold("serial:/dev/ttyUSB0")  # its own view lapsed too
        finally:
            second.close()
            first.close()
        third = audit.line_leases(10.0, 3.0)
        try:  # the second closed: its lines are free at once
            assert third.hold("serial:/dev/ttyUSB0") is True
            assert third.hold("serial:/dev/ttyS1") is True
        finally:
            third.close()
