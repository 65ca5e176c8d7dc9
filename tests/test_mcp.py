"""The MCP server: `regdev serve` as a real subprocess, driven over stdio by the mcp SDK's own
client and by raw JSON-RPC lines; the verdicts match the in-process gate's exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

import regdev_firmware_sim as sim
from conftest import EXAMPLES
from firmware import sim_thread
from regdev import Gate, RegisterFile, read_audit, tool_definitions
from regdev._mcp import ExactArguments
from regdev._replay import load_replay

REGDEV = str(Path(sys.executable).with_name("regdev"))
SERVE = [REGDEV, "serve", "--log-level", "warning"]


class Session:
    """A synchronous face on the SDK client, for plain pytest tests."""

    def __init__(self, portal: BlockingPortal, client: Client) -> None:
        self.portal = portal
        self.client = client

    def call(self, name: str, arguments: dict[str, Any] | None) -> CallToolResult:
        return self.portal.call(self.client.call_tool, name, arguments)


@pytest.fixture(scope="module")
def session() -> Iterator[Session]:
    """One `regdev serve` subprocess for the module, with the SDK's client attached."""
    params = StdioServerParameters(command=SERVE[0], args=SERVE[1:])
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(
        Client(params, read_timeout_seconds=20)
    ) as client:
        yield Session(portal, client)


def test_lists_the_tools_with_schemas_and_annotations(session: Session) -> None:
    """tools/list gives the registry's schemas and the honest annotations."""
    listed = session.portal.call(session.client.list_tools)
    got = [tool.model_dump(by_alias=True, exclude_none=True) for tool in listed.tools]
    assert [tool["name"] for tool in got] == ["write_register", "read_register"]
    for tool, expected in zip(got, tool_definitions("mcp"), strict=True):
        assert tool["description"] == expected["description"]
        assert tool["inputSchema"] == expected["inputSchema"]
        assert tool["annotations"] == expected["annotations"]
    assert got[0]["annotations"]["destructiveHint"] is True
    assert got[0]["annotations"]["idempotentHint"] is True
    assert got[1]["annotations"]["readOnlyHint"] is True


def test_a_write_is_read_back(session: Session) -> None:
    """A valid write runs on the device; a read returns the value; text = structured content."""
    written = session.call("write_register", {"addr": 7, "data": 0xA5})
    assert written.is_error is False
    assert written.structured_content == {"ok": True, "tool": "write_register",
                                          "result": {"addr": 7, "data": 165}}
    (text,) = written.content
    assert text.type == "text" and json.loads(text.text) == written.structured_content
    read = session.call("read_register", {"addr": 7})
    assert read.is_error is False
    assert read.structured_content == {"ok": True, "tool": "read_register",
                                       "result": {"addr": 7, "data": 165}}


def _mcp_arguments(raw: str) -> tuple[str, dict[str, Any] | None] | str:
    """(name, arguments) a typed MCP client can send for this raw call, or why it cannot."""
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError:
        return "not JSON: the client's host parses the model output before any tools/call"
    if not isinstance(doc, dict):
        return "not an object: tools/call params are one object"
    arguments = doc.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        return "arguments not an object: the SDK refuses the envelope (see the raw test)"
    return doc["name"], arguments


def test_wild_calls_get_the_in_process_verdicts(session: Session) -> None:
    """Each wild call expressible as MCP arguments gets the same observation as in process."""
    gate = Gate()
    compared, skipped = [], []
    for number, record in load_replay(EXAMPLES / "wild-calls.jsonl"):
        expected = gate.handle(record.raw, dialect=record.dialect or "mcp").to_dict()
        call = _mcp_arguments(record.raw)
        if isinstance(call, str):
            skipped.append(number)
            continue
        result = session.call(*call)
        got = result.structured_content
        assert isinstance(got, dict)
        assert result.is_error is (not expected["ok"]), f"line {number}"
        if call[1] is None:
            # A typed client cannot send `"arguments": null`; it leaves them out, which is
            # bad-arguments too (with its own message). The raw test below sends null itself.
            assert got["code"] == expected["code"] == "bad-arguments"
        else:
            assert got == expected, f"line {number}: {record.why}"
        compared.append((number, expected.get("code", "ok")))
    assert skipped == [1, 2, 3, 4, 5, 6, 8, 16]
    assert compared == [(7, "bad-arguments"), (9, "unknown-tool"), (10, "unknown-argument"),
                        (11, "type-addr"), (12, "type-data"), (13, "ok"), (14, "type-addr"),
                        (15, "range-data"), (17, "missing-addr"), (18, "ok")]


def test_serve_port_runs_the_calls_on_the_serial_device() -> None:
    """--port: accepted calls reach the device over the wire protocol; a refused one does not."""
    registers = RegisterFile()
    with sim_thread(sim.Firmware(registers)) as url:
        params = StdioServerParameters(command=SERVE[0], args=[*SERVE[1:], "--port", url])
        with start_blocking_portal() as portal, portal.wrap_async_context_manager(
            Client(params, read_timeout_seconds=20)
        ) as client:
            written = portal.call(client.call_tool, "write_register", {"addr": 9, "data": 0x5A})
            refused = portal.call(client.call_tool, "write_register", {"addr": 9, "data": "7"})
            read = portal.call(client.call_tool, "read_register", {"addr": 9})
    assert written.structured_content == {"ok": True, "tool": "write_register",
                                          "result": {"addr": 9, "data": 0x5A}}
    assert refused.is_error is True
    assert refused.structured_content == Gate().handle(
        '{"tool": "write_register", "arguments": {"addr": 9, "data": "7"}}').to_dict()
    assert read.structured_content == {"ok": True, "tool": "read_register",
                                       "result": {"addr": 9, "data": 0x5A}}
    assert registers.snapshot()[9] == 0x5A and registers.write_count == 1


# --- raw JSON-RPC over the subprocess's stdio -------------------------------------------------

HANDSHAKE = [
    {"jsonrpc": "2.0", "id": 0, "method": "initialize",
     "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
]


class RawServer:
    """`regdev serve` spoken to line by line: one JSON-RPC request out, its answer back.

    Requests go one at a time because closing stdin cancels whatever is still in flight (the
    SDK's rule: the caller is gone), so a client reads its answers before it hangs up.
    """

    def __init__(self, *options: str) -> None:
        self.process = subprocess.Popen(
            [*SERVE, *options], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        self.lines: list[bytes] = []

    def send(self, line: str, *, answer: bool = True) -> dict[str, Any] | None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()
        if not answer:
            return None
        self.lines.append(self.process.stdout.readline())
        reply: dict[str, Any] = json.loads(self.lines[-1])
        return reply

    def close(self) -> tuple[int, bytes, bytes]:
        """Close stdin (EOF) and wait: exit status, the rest of stdout, stderr."""
        out, err = self.process.communicate(timeout=20)
        return self.process.returncode, out, err


def tools_call(request_id: int, params_text: str) -> str:
    return (f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", '
            f'"params": {params_text}}}')


@contextmanager
def sigint_handled() -> Iterator[None]:
    """Start children with SIGINT at its default, whatever this process inherited.

    A shell's background job runs with SIGINT ignored, an ignored signal stays ignored across
    exec, and Python then never raises KeyboardInterrupt. A handled signal is reset to its
    default at exec, so handling it here for the moment of the spawn is enough.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_raw_json_rpc_envelope_exact_numbers_and_clean_eof() -> None:
    """Raw lines: string arguments hit the SDK's envelope check (-32602), null arguments and
    numbers a float cannot hold get the gate's verdicts, stdout holds only JSON-RPC, EOF ends
    the server with status 0."""
    server = RawServer()
    try:
        assert server.send(json.dumps(HANDSHAKE[0]))["id"] == 0  # type: ignore[index]
        server.send(json.dumps(HANDSHAKE[1]), answer=False)
        # arguments not an object (wild-calls lines 1, 2 and 6): refused by the SDK's
        # envelope check before any handler, as JSON-RPC "Invalid params"
        for request_id, text in enumerate([
                '"{\\"addr\\": 3, \\"data\\": 200}"', '""', '[3, 200]'], start=1):
            reply = server.send(tools_call(
                request_id, f'{{"name": "write_register", "arguments": {text}}}'))
            assert reply is not None and reply["id"] == request_id
            assert reply["error"]["code"] == -32602, reply
        gate = Gate()
        for request_id, params, code in [
            (4, '{"name": "read_register", "arguments": null}', "bad-arguments"),
            (5, '{"name": "read_register"}', "bad-arguments"),
            (6, '{"name": "write_register", "arguments": {"addr": 3.0000000000000001, '
                '"data": 1}}', "type-addr"),
            (7, '{"name": "write_register", "arguments": {"addr": 15.99999999999999999, '
                '"data": 1}}', "type-addr"),
            (8, '{"name": "write_register", "arguments": {"addr": 1e400, "data": 1}}',
             "range-addr"),
            (9, '{"name": "write_register", "arguments": {"addr": 2.0, "data": 1E1}}', None),
            (10, '{"name": "erase_chip", "arguments": {}}', "unknown-tool"),
        ]:
            reply = server.send(tools_call(request_id, params))
            assert reply is not None and reply["id"] == request_id
            expected = gate.handle(params, dialect="mcp").to_dict()
            assert expected.get("code") == code
            assert reply["result"]["structuredContent"] == expected
            assert reply["result"]["isError"] is (not expected["ok"])
            assert json.loads(reply["result"]["content"][0]["text"]) == expected
    finally:
        status, rest, err = server.close()
    assert status == 0 and rest == b""
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in server.lines)
    assert b"Traceback" not in err


def test_serve_authorizes_replays_keys_and_records_every_call(tmp_path: Path) -> None:
    """serve takes --policy and --audit like the other commands: calls are authorized, a
    _meta.idempotency_key is honoured, and every call is in the audit log after EOF."""
    db = tmp_path / "audit.db"
    server = RawServer("--policy", str(EXAMPLES / "policy.toml"), "--audit", str(db))
    write = '{"name": "write_register", "arguments": {"addr": 3, "data": 7}'
    try:
        server.send(json.dumps(HANDSHAKE[0]))
        server.send(json.dumps(HANDSHAKE[1]), answer=False)
        answers = [server.send(tools_call(request_id, params))
                   for request_id, params in enumerate([
                       write + ', "_meta": {"idempotency_key": "k1"}}',
                       write + ', "_meta": {"idempotency_key": "k1"}}',
                       write.replace('"addr": 3', '"addr": 0') + "}",
                       write + ', "_meta": {"idempotency_key": 5}}',
                   ], start=1)]
    finally:
        status, _, err = server.close()
    results = [answer["result"]["structuredContent"] for answer in answers]  # type: ignore[index]
    assert status == 0 and b"Traceback" not in err
    assert results[0] == {"ok": True, "tool": "write_register",
                          "result": {"addr": 3, "data": 7}}
    assert results[1] == {**results[0], "replay": True}
    assert [r.get("code") for r in results[2:]] == ["read-only-register", "bad-idempotency-key"]
    records = read_audit(db)
    assert [(r.session, r.code, r.replay, r.idempotency_key) for r in records] == [
        ("default", None, False, "k1"), ("default", None, True, "k1"),
        ("default", "read-only-register", False, None),
        ("default", "bad-idempotency-key", False, None)]


@pytest.mark.skipif(os.name != "posix", reason="sends a POSIX SIGINT")
def test_ctrl_c_ends_the_server_cleanly() -> None:
    """SIGINT while the client keeps stdin open ends the server at once: status 0, no trace."""
    with sigint_handled():
        server = subprocess.Popen(SERVE[:2], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write((json.dumps(HANDSHAKE[0]) + "\n").encode())
    server.stdin.flush()
    assert json.loads(server.stdout.readline())["id"] == 0  # serving
    server.send_signal(signal.SIGINT)
    try:
        status = server.wait(timeout=15)
    finally:
        if server.poll() is None:
            server.kill()
    _, err = server.communicate()
    assert status == 0
    assert b"Traceback" not in err
    assert err.decode().splitlines()[-1] == "regdev serve: INFO regdev: stopped"


# --- exact arguments, in process --------------------------------------------------------------


def _line(request_id: object, name: str, arguments_text: str, method: str = "tools/call"
          ) -> bytes:
    return (f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "method": "{method}", '
            f'"params": {{"name": "{name}", "arguments": {arguments_text}}}}}').encode()


def test_exact_arguments_keeps_only_calls_the_sdk_would_round() -> None:
    """Fractions are kept exactly, by request id, taken once; other lines are not kept."""
    exact = ExactArguments()
    exact.record(_line(1, "w", '{"addr": 3.0000000000000001}'))
    exact.record(_line(2, "w", '{"addr": 3}'))
    exact.record(_line(3, "w", '{"addr": 1.5}', method="ping"))
    exact.record(b"not json tools/call")
    exact.record(_line(4, "w", '{"addr": 2.5}', method="tools\\/call"))  # JSON escape of "/"
    got = exact.take(1, "w", {"addr": 3.0})
    assert got is not None and str(got["addr"]) == "3.0000000000000001"
    assert exact.take(1, "w", {"addr": 3.0}) is None  # taken once
    assert exact.take(2, "w", {"addr": 3}) is None and exact.take(3, "w", {}) is None
    assert exact.take(4, "w", {"addr": 2.5}) == {"addr": Decimal("2.5")}


def test_exact_arguments_never_hands_over_a_stale_or_mismatched_record() -> None:
    """A reused id replaces the record; another name or other argument names get nothing."""
    exact = ExactArguments()
    exact.record(_line(7, "w", '{"addr": 1.5}'))
    exact.record(_line(7, "w", '{"addr": 2}'))  # the id reused: the old record is dropped
    assert exact.take(7, "w", {"addr": 2}) is None
    exact.record(_line("a", "w", '{"addr": 1.5}'))
    assert exact.take("a", "r", {"addr": 1.5}) is None
    exact.record(_line("b", "w", '{"addr": 1.5}'))
    assert exact.take("b", "w", {"data": 1.5}) is None


def test_exact_arguments_table_is_bounded() -> None:
    """Records for requests that never reach the handler cannot pile up."""
    exact = ExactArguments(limit=2)
    for request_id in range(3):
        exact.record(_line(request_id, "w", '{"a": 0.5}'))
    assert exact.take(0, "w", {"a": 0.5}) is None
    assert exact.take(1, "w", {"a": 0.5}) is not None
    assert exact.take(2, "w", {"a": 0.5}) is not None
