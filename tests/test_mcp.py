"""The MCP server: `regdev serve` as a real subprocess, driven over stdio by the mcp SDK's own
client and by raw JSON-RPC lines; the verdicts match the in-process gate's exactly. Then the
reader that judges each line, in process.

Every server started here records into an audit log under the test's temporary folder and
runs with HOME pointing at an empty folder that must stay empty: nothing is written into the
user's own ~/.local/state/regdev/audit.db.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, StdioServerParameters, stdio_client, types
from mcp.shared.message import SessionMessage
from mcp.types import CallToolResult

import regdev_firmware_sim as sim
from conftest import EXAMPLES, default_signals
from regdev import Gate, RegisterFile, read_audit, tool_definitions
from regdev.agents._replay import load_replay
from regdev.server._mcp import (
    NOT_INITIALIZED,
    SERVER_STOPPING,
    Envelope,
    MessageReader,
    Received,
    read_envelope,
)
from support.firmware import sim_thread

REGDEV = str(Path(sys.executable).with_name("regdev"))
SERVE = [REGDEV, "serve", "--log-level", "warning"]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """HOME for every server of this module; test_no_server_wrote_under_home checks it."""
    return tmp_path_factory.mktemp("home")


def server_env(home: Path) -> dict[str, str]:
    """The environment of a server: this one, with HOME moved and no audit path implied."""
    env = {k: v for k, v in os.environ.items() if k not in ("REGDEV_AUDIT", "XDG_STATE_HOME")}
    return {**env, "HOME": str(home)}


class Session:
    """A synchronous face on the SDK client, for plain pytest tests."""

    def __init__(self, portal: BlockingPortal, client: Client) -> None:
        self.portal = portal
        self.client = client

    def call(self, name: str, arguments: dict[str, Any] | None) -> CallToolResult:
        return self.portal.call(self.client.call_tool, name, arguments)


@contextmanager
def sdk_client(home: Path, *options: str) -> Iterator[Session]:
    """`regdev serve OPTIONS` started by the SDK's stdio client, with HOME at ``home``."""
    params = StdioServerParameters(command=SERVE[0], args=[*SERVE[1:], *options],
                                   env={"HOME": str(home)})  # merged over the SDK's defaults
    # The server's stderr goes to file descriptor 2 (pytest's capture shows it with a failure),
    # named here: stdio_client's default, ``errlog=sys.stderr``, is whatever sys.stderr was
    # when the mcp package was first imported, in a test that imported it under capsys that
    # test's capture, closed since and with no file descriptor ("fileno" for every later test).
    assert sys.__stderr__ is not None
    transport = stdio_client(params, errlog=sys.__stderr__)
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(
        Client(transport, read_timeout_seconds=20)
    ) as client:
        yield Session(portal, client)


@pytest.fixture(scope="module")
def session(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """One `regdev serve` subprocess for the module, with the SDK's client attached."""
    audit = tmp_path_factory.mktemp("sdk") / "audit.db"
    with sdk_client(home, "--audit", str(audit)) as client:
        yield client


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


def test_the_sdk_client_does_not_use_the_stderr_of_the_test_that_imported_mcp(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's stdio_client takes ``errlog=sys.stderr`` as it was when mcp was imported:
    after a test that imported it under capsys, a capture since closed, with no file
    descriptor. sdk_client names its own, so a server starts whatever ran before."""
    import mcp.client.stdio  # noqa: PLC0415 - the module whose default is the shared state

    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr(mcp.client.stdio.stdio_client.__wrapped__, "__defaults__", (closed,))
    with sdk_client(home, "--no-audit") as client:
        result = client.call("read_register", {"addr": 1})
    assert not result.is_error, result


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


def test_serve_port_runs_the_calls_on_the_serial_device(home: Path, tmp_path: Path) -> None:
    """--port: accepted calls reach the device over the wire protocol; a refused one does not."""
    registers = RegisterFile()
    with sim_thread(sim.Firmware(registers)) as url, sdk_client(
            home, "--port", url, "--audit", str(tmp_path / "audit.db")) as client:
        written = client.call("write_register", {"addr": 9, "data": 0x5A})
        refused = client.call("write_register", {"addr": 9, "data": "7"})
        read = client.call("read_register", {"addr": 9})
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
HANDSHAKE_TEXT = "".join(json.dumps(message) + "\n" for message in HANDSHAKE)


class RawServer:
    """`regdev serve` spoken to line by line: one JSON-RPC request out, its answer back."""

    def __init__(self, home: Path, audit: Path | None, *options: str,
                 ignored: Sequence[str] = ()) -> None:
        """Start the server with the stop signals at their defaults, but for those named in
        ``ignored`` (see :func:`conftest.default_signals`)."""
        audit_options = ["--audit", str(audit)] if audit is not None else []
        self.process = subprocess.Popen(
            default_signals([*SERVE, *audit_options, *options], ignored=ignored),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=server_env(home))
        self.lines: list[bytes] = []

    def handshake(self) -> None:
        assert self.send(json.dumps(HANDSHAKE[0]))["id"] == 0  # type: ignore[index]
        self.send(json.dumps(HANDSHAKE[1]), answer=False)

    def send(self, line: str | bytes, *, answer: bool = True) -> dict[str, Any] | None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write((line.encode() if isinstance(line, str) else line) + b"\n")
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


@pytest.fixture(scope="module")
def raw(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawServer]:
    """One raw-line server for the tests whose answers do not depend on the device's state."""
    server = RawServer(home, tmp_path_factory.mktemp("raw") / "audit.db")
    server.handshake()
    yield server
    status, rest, err = server.close()
    assert status == 0 and rest == b"" and b"Traceback" not in err


def tools_call(request_id: object, params_text: str) -> str:
    return (f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "method": "tools/call", '
            f'"params": {params_text}}}')


def test_raw_envelope_and_exact_numbers(raw: RawServer) -> None:
    """arguments not an object is the SDK's envelope error (-32602); null arguments and
    numbers a float cannot hold get the gate's verdicts, as in process."""
    for request_id, text in enumerate(['"{\\"addr\\": 3, \\"data\\": 200}"', '""', '[3, 200]'],
                                      start=1):
        reply = raw.send(tools_call(request_id, f'{{"name": "write_register", "arguments": '
                                                f'{text}}}'))
        assert reply is not None and reply["id"] == request_id
        assert reply["error"]["code"] == -32602, reply
    gate = Gate()
    for request_id, params, code in [
        (4, '{"name": "read_register", "arguments": null}', "bad-arguments"),
        (5, '{"name": "read_register"}', "bad-arguments"),
        (6, '{"name": "write_register", "arguments": {"addr": 3.0000000000000001, "data": 1}}',
         "type-addr"),
        (7, '{"name": "write_register", "arguments": {"addr": 15.99999999999999999, '
            '"data": 1}}', "type-addr"),
        (8, '{"name": "write_register", "arguments": {"addr": 1e400, "data": 1}}',
         "range-addr"),
        (9, '{"name": "write_register", "arguments": {"addr": 2.0, "data": 1E1}}', None),
        (10, '{"name": "erase_chip", "arguments": {}}', "unknown-tool"),
    ]:
        reply = raw.send(tools_call(request_id, params))
        assert reply is not None and reply["id"] == request_id
        expected = gate.handle(params, dialect="mcp").to_dict()
        assert expected.get("code") == code
        assert reply["result"]["structuredContent"] == expected
        assert reply["result"]["isError"] is (not expected["ok"])
        assert json.loads(reply["result"]["content"][0]["text"]) == expected


def _observation(reply: dict[str, Any] | None) -> dict[str, Any]:
    assert reply is not None and "result" in reply, reply
    assert reply["result"]["isError"] is True
    observation: dict[str, Any] = reply["result"]["structuredContent"]
    return observation


def test_tools_calls_that_are_not_strict_json_are_refused_under_their_id(raw: RawServer) -> None:
    """A repeated key, NaN, an integer over Python's digit limit, nesting too deep: the gate's
    not-json, answered under the request's id, and nothing runs (read back unchanged)."""
    before = raw.send(tools_call(20, '{"name": "read_register", "arguments": {"addr": 4}}'))
    assert before is not None
    for request_id, arguments, words in [
        (21, '{"addr": 3, "addr": 4, "data": 1}', 'key "addr" appears twice'),
        (22, '{"addr": NaN, "data": 1}', "is not a JSON number (JSON has no NaN or Infinity)"),
        (23, '{"addr": 4, "data": ' + "9" * 5000 + "}", "an integer has more than 4300 digits"),
        (24, '{"addr": ' + "[" * 2000 + "]" * 2000 + ', "data": 1}', "nested too deeply"),
        (25, '{"addr": 4, "data": 1}}', "more text after the end of the JSON document"),
    ]:
        line = tools_call(request_id, f'{{"name": "write_register", "arguments": {arguments}}}')
        got = _observation(raw.send(line))
        assert raw.lines[-1].startswith(b'{"jsonrpc":"2.0","id":%d,' % request_id)
        assert got["code"] == "not-json" and words in got["message"], got
        assert got == Gate().handle(line, dialect="mcp").to_dict()  # the line, refused
    after = raw.send(tools_call(26, '{"name": "read_register", "arguments": {"addr": 4}}'))
    assert after is not None
    assert after["result"]["structuredContent"] == before["result"]["structuredContent"]


#: Bytes that are not JSON, as a model or a client may put them before or inside a value: a
#: no-break space, a byte order mark, a zero-width space, a word, a NaN, a control character.
NOT_JSON_BYTES = ["\u00a0", "\ufeff", "\u200b", "x", "NaN ", "\u0007"]


@pytest.mark.parametrize("junk", NOT_JSON_BYTES)
def test_a_call_with_bytes_that_are_not_json_is_answered_under_its_own_id(
        raw: RawServer, junk: str) -> None:
    """Bytes that are not JSON before the params, after them, between members or before the
    whole message, with ids inside the params: each request is answered under its own id
    (never null, never an inner one), not-json, and nothing runs."""
    inner = '{"name": "write_register", "arguments": {"addr": 5, "data": 9}, "id": "inner"}'
    before = raw.send(tools_call(40, '{"name": "read_register", "arguments": {"addr": 5}}'))
    assert before is not None
    lines = [
        tools_call(41, junk + inner),
        tools_call(42, inner + junk),
        tools_call(43, "[" + junk + inner + "]"),
        junk + tools_call(44, junk + inner),
        f'{{"jsonrpc": "2.0", "params": {junk}{inner}, "id": 45,{junk} "method": "tools/call"}}',
        f'{{"jsonrpc": "2.0", "id": 46, "method": "tools/call", "params": {junk}[{inner}]}}',
    ]
    for request_id, line in enumerate(lines, start=41):
        reply = raw.send(line.encode())
        assert reply is not None and reply["id"] == request_id, (line, reply)
        if "result" in reply:  # the gate refused the line
            assert reply["result"]["structuredContent"]["code"] == "not-json"
        else:  # the SDK's envelope check (params an array)
            assert reply["error"]["code"] in (-32602, -32700), reply
    after = raw.send(tools_call(47, '{"name": "read_register", "arguments": {"addr": 5}}'))
    assert after is not None
    assert after["result"]["structuredContent"] == before["result"]["structuredContent"]


def test_a_deeply_nested_call_is_judged_not_fatal(raw: RawServer) -> None:
    """The 912-byte call nested 400 deep that crashed the server: type-addr, and the server
    goes on answering."""
    deep = "[" * 400 + "]" * 400
    params = f'{{"name": "write_register", "arguments": {{"addr": {deep}, "data": 1}}}}'
    got = _observation(raw.send(tools_call(30, params)))
    assert got == Gate().handle(params, dialect="mcp").to_dict()
    assert got["code"] == "type-addr"
    reply = raw.send(tools_call(31, '{"name": "read_register", "arguments": {"addr": 1}}'))
    assert reply is not None and reply["result"]["isError"] is False


def test_every_request_is_answered_and_notifications_never(raw: RawServer) -> None:
    """Lines that are not requests the SDK can take: -32700 or -32600, with the id when it
    can be read; a blank line or a notification gets nothing (a ping shows no stray answer)."""
    for line, request_id, code in [
        (b"garbage not json", None, -32700),
        (b"\xff\xfe invalid utf-8", None, -32700),
        (b"[]", None, -32600),
        (b'{"jsonrpc": "2.0", "id": 40}', 40, -32600),
        (b'{"jsonrpc": "1.0", "id": 41, "method": "ping"}', 41, -32600),
        (b'{"jsonrpc": "2.0", "id": true, "method": "tools/call", "params": {}}', None, -32600),
        (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', None, -32600),
        (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', None, -32600),
        (b'{"jsonrpc": "2.0", "id": 42, "method": "ping", "params": {"a": 1, "a": 2}}', 42,
         -32700),
        (b'{"jsonrpc": "2.0", "id": 43, "id": 44, "method": "tools/call", "params": {"a": NaN}}',
         None, -32700),
        (b'{"jsonrpc": "2.0", "id": 45, "method": "tools/call", "name": "read_register", '
         b'"arguments": {"addr": 1}, "x": NaN}', 45, -32700),
    ]:
        reply = raw.send(line)
        assert reply is not None and "error" in reply, (line, reply)
        assert (reply["id"], reply["error"]["code"]) == (request_id, code), (line, reply)
    for quiet in [b"", b"   ", b'{"jsonrpc": "2.0", "method": "notifications/x", "p": NaN}',
                  b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": 5}',
                  b'{"jsonrpc": "2.0", "id": 47, "result": 5}',  # a response: never answered
                  b'{"jsonrpc": "2.0", "id": null, "error": {"code": 1, "message": "x"}}']:
        raw.send(quiet, answer=False)
    assert raw.send(b'{"jsonrpc": "2.0", "id": 46, "method": "ping"}') == {
        "jsonrpc": "2.0", "id": 46, "result": {}}


def test_a_line_over_the_cap_is_too_large_under_its_id(raw: RawServer) -> None:
    """A line longer than the cap (64 KiB + 1 MiB) is cut there, refused as too-large under
    the id it starts with, and the rest of it is dropped unread."""
    pad = "x" * (1200 * 1024)
    line = tools_call(50, f'{{"name": "write_register", "arguments": {{"addr": 1, "data": 1, '
                          f'"pad": "{pad}"}}}}')
    got = _observation(raw.send(line))
    assert got["code"] == "too-large"
    reply = raw.send(tools_call(51, '{"name": "read_register", "arguments": {"addr": 1}}'))
    assert reply is not None and reply["id"] == 51 and reply["result"]["isError"] is False


@pytest.mark.parametrize(("params", "cause"), [
    ("null", "tools/call needs params with name and arguments (an object)"),
    (None, "tools/call needs params with name and arguments (an object)"),
    ('{"arguments": {"addr": 1}}', "tools/call needs params with name and arguments (an object)"),
    ('{"name": "read_register", "arguments": "{\\"addr\\": 1}"}',
     "tools/call arguments must be an object, got a string (a string holding JSON is still a "
     "string)"),
    ('{"name": "read_register", "arguments": [1]}',
     "tools/call arguments must be an object, got an array"),
    ('{"name": "read_register", "arguments": {"addr": 1}, "_meta": 3}',
     "tools/call params do not match the MCP CallToolRequest schema"),
], ids=["null", "absent", "no-name", "string", "array", "meta"])
def test_an_envelope_error_names_its_cause(raw: RawServer, params: str | None,
                                           cause: str) -> None:
    """tools/call params the SDK's envelope check refuses: -32602, with the cause said."""
    line = (tools_call(41, params) if params is not None
            else '{"jsonrpc": "2.0", "id": 41, "method": "tools/call"}')
    assert raw.send(line) == {"jsonrpc": "2.0", "id": 41, "error": {
        "code": -32602, "message": f"Invalid request parameters: {cause}", "data": ""}}


def test_wild_calls_as_raw_params_get_the_in_process_verdicts(home: Path, tmp_path: Path) -> None:
    """Every wild call's text, sent as the params of a tools/call line, gets the in-process
    observation; text that is not JSON is not-json under its id; arguments that are not an
    object are the SDK's -32602, and an array of calls is not a request (-32600)."""
    server = RawServer(home, tmp_path / "audit.db")
    gate, envelope = Gate(), {}
    try:
        server.handshake()
        for number, record in load_replay(EXAMPLES / "wild-calls.jsonl"):
            expected = gate.handle(record.raw, dialect="mcp").to_dict()
            reply = server.send(tools_call(number, record.raw))
            assert reply is not None and reply["id"] == number
            if "error" in reply:
                envelope[number] = reply["error"]["code"]
            elif expected.get("code") == "not-json":
                assert reply["result"]["structuredContent"]["code"] == "not-json"
            else:
                assert reply["result"]["structuredContent"] == expected, f"line {number}"
    finally:
        status, _, err = server.close()
    assert envelope == {1: -32602, 2: -32602, 6: -32602, 8: -32600}
    assert status == 0 and b"Traceback" not in err


#: The per-request envelope of the 2026-07-28 protocol era (what the SDK's client sends).
MODERN_META = ('"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", '
               '"io.modelcontextprotocol/clientCapabilities": {}}')


def test_audit_records_the_text_as_received(home: Path, tmp_path: Path) -> None:
    """In the 2026-07-28 era (server/discover, as the SDK's client speaks): each call is
    recorded with dialect mcp and its params exactly as sent (spacing, _meta, fractions), a
    key is honoured, and a line that is not JSON is refused under its id and recorded as that
    line. Lines are written all at once and stdin closed: every request is still answered."""
    db = tmp_path / "audit.db"
    discover = ('{"jsonrpc": "2.0", "id": 0, "method": "server/discover", '
                f'"params": {{{MODERN_META}}}}}')
    key = MODERN_META.replace('"_meta": {', '"_meta": {"idempotency_key": "k1", ')
    params = [
        f'{{ "name" : "write_register", "arguments": {{"addr": 3, "data": 7}}, {key} }}',
        f'{{"name": "write_register", "arguments": {{"addr": 3, "data": 7}}, {key}}}',
        '{"name": "write_register", "arguments": {"addr": 3.0000000000000001, "data": 7}, '
        f"{MODERN_META}}}",
    ]
    lines = [discover, *(tools_call(n, text) for n, text in enumerate(params, start=1))]
    lines.append(tools_call(4, f'{{"name": "write_register", "arguments": {{"addr": NaN}}, '
                               f"{MODERN_META}}}"))
    process = subprocess.run(
        [*SERVE, "--audit", str(db)], input="".join(f"{line}\n" for line in lines).encode(),
        capture_output=True, timeout=30, env=server_env(home), check=False)
    answers = {m["id"]: m["result"].get("structuredContent")
               for m in map(json.loads, process.stdout.splitlines())}
    assert process.returncode == 0 and b"Traceback" not in process.stderr
    assert sorted(answers) == [0, 1, 2, 3, 4]  # discover, then every call
    assert answers[2] == {**answers[1], "replay": True}
    assert [answers[n].get("code") for n in (3, 4)] == ["type-addr", "not-json"]
    records = read_audit(db)
    assert [(r.dialect, r.code, r.idempotency_key, r.replay) for r in records] == [
        ("mcp", None, "k1", False), ("mcp", None, "k1", True), ("mcp", "type-addr", None, False),
        ("mcp", "not-json", None, False)]
    assert [r.raw for r in records] == [text.encode() for text in params] + [lines[4].encode()]
    assert records[2].arguments == '{"addr":3.0000000000000001,"data":7}'
    assert {r.proposer for r in records} == {"mcp"}  # no clientInfo in these requests


def test_each_call_records_the_mcp_client_as_its_proposer(home: Path, tmp_path: Path) -> None:
    """A client that says who it is (clientInfo) is each call's proposer in the audit log:
    mcp:NAME VERSION, kept as sent (regdev report escapes it when it shows it)."""
    db = tmp_path / "audit.db"
    meta = MODERN_META.replace(
        '"_meta": {', '"_meta": {"io.modelcontextprotocol/clientInfo": '
                      '{"name": "probe\\nclient", "version": "1.2"}, ')
    line = tools_call(1, f'{{"name": "read_register", "arguments": {{"addr": 1}}, {meta}}}')
    process = subprocess.run(
        [*SERVE, "--audit", str(db)], input=f"{line}\n".encode(), capture_output=True,
        timeout=30, env=server_env(home), check=False)
    assert process.returncode == 0, process.stderr
    assert [r.proposer for r in read_audit(db)] == ["mcp:probe\nclient 1.2"]


def test_serve_proposer_names_every_calls_proposer(home: Path, tmp_path: Path) -> None:
    """regdev serve --proposer LABEL records LABEL as each call's proposer, whatever the
    client says it is; a label that is not printable is a usage error."""
    db = tmp_path / "audit.db"
    meta = MODERN_META.replace(
        '"_meta": {', '"_meta": {"io.modelcontextprotocol/clientInfo": '
                      '{"name": "probe", "version": "1.2"}, ')
    line = tools_call(1, f'{{"name": "read_register", "arguments": {{"addr": 1}}, {meta}}}')
    process = subprocess.run(
        [*SERVE, "--audit", str(db), "--proposer", "pydantic-ai:gpt-5"],
        input=f"{line}\n".encode(), capture_output=True, timeout=30, env=server_env(home),
        check=False)
    assert process.returncode == 0, process.stderr
    assert [r.proposer for r in read_audit(db)] == ["pydantic-ai:gpt-5"]
    bad = subprocess.run([*SERVE, "--proposer", "a\nb"], input=b"", capture_output=True,
                         timeout=30, env=server_env(home), check=False)
    assert bad.returncode == 2 and b"printable" in bad.stderr


def test_a_policy_caps_bytes_and_lists_only_the_offered_tools(home: Path, tmp_path: Path) -> None:
    """serve --policy: the policy's max_input_bytes caps the params as in process, and
    tools/list shows the session only the tools it is offered."""
    policy = tmp_path / "policy.toml"
    policy.write_text('max_input_bytes = 80\n[sessions.reader]\nscopes = ["read"]\n'
                      'tools = ["read_register"]\n')
    server = RawServer(home, tmp_path / "audit.db", "--policy", str(policy),
                       "--session", "reader")
    try:
        server.handshake()
        listed = server.send('{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}')
        small = '{"name": "read_register", "arguments": {"addr": 1}}'
        big = '{"name": "read_register", "arguments": {"addr": 1, "pad": "' + "x" * 60 + '"}}'
        answers = [server.send(tools_call(n, text)) for n, text in enumerate(
            [small, big, '{"name": "write_register", "arguments": {"addr": 1, "data": 1}}'],
            start=2)]
    finally:
        status, _, err = server.close()
    assert listed is not None
    assert [t["name"] for t in listed["result"]["tools"]] == ["read_register"]
    codes = [a["result"]["structuredContent"].get("code") for a in answers]  # type: ignore[index]
    assert codes == [None, "too-large", "unknown-tool"]
    assert status == 0 and b"Traceback" not in err


def test_serve_with_a_map_lists_and_runs_the_maps_tools(home: Path, tmp_path: Path) -> None:
    """serve --map: tools/list is the map's tools; a field write runs as in process."""
    server = RawServer(home, tmp_path / "audit.db", "--map", str(EXAMPLES / "sensor.rdl"))
    try:
        server.handshake()
        listed = server.send('{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}')
        answer = server.send(tools_call(2, '{"name": "write_field", "arguments": '
                                           '{"field": "CTRL.MODE", "value": "ONESHOT"}}'))
    finally:
        status, _, err = server.close()
    assert listed is not None and answer is not None
    assert [t["name"] for t in listed["result"]["tools"]] == [
        "write_register", "read_register", "read_registers", "write_registers",
        "write_field", "read_fields"]
    assert answer["result"]["structuredContent"]["result"]["fields"] == {
        "EN": 0, "MODE": "ONESHOT", "RATE": "HZ1"}
    assert status == 0 and b"Traceback" not in err


@pytest.mark.skipif(os.name != "posix", reason="sends POSIX signals")
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", 1)],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_ends_the_server_cleanly_with_every_call_recorded(
        home: Path, tmp_path: Path, number: int) -> None:
    """SIGINT, SIGTERM or SIGHUP while the client keeps stdin open: exit 0 at once, no trace,
    and every answered call is in the audit log (the SDK's client itself sends SIGTERM)."""
    db = tmp_path / "audit.db"
    server = RawServer(home, db, "--log-level", "info")  # the signals at their defaults,
    server.handshake()  # even when the tests run under nohup or as a background job
    for n in range(1, 21):
        server.send(tools_call(n, '{"name": "read_register", "arguments": {"addr": 1}}'))
    server.process.send_signal(number)
    try:
        status = server.process.wait(timeout=15)
    finally:
        if server.process.poll() is None:
            server.process.kill()
    _, err = server.process.communicate()
    assert status == 0
    assert b"Traceback" not in err
    assert err.decode().splitlines()[-2:] == [
        f"regdev serve: INFO regdev: stopping on {signal.Signals(number).name}",
        "regdev serve: INFO regdev: stopped"]
    assert len(read_audit(db)) == 20


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.timeout(60)
def test_a_full_stdout_is_one_line_and_exit_1(home: Path) -> None:
    """stdout is /dev/full (every write fails with ENOSPC): exit 1 and one line on stderr,
    as every other command says it, no traceback."""
    with open("/dev/full", "wb") as full:
        done = subprocess.run(default_signals([*SERVE, "--no-audit"]),
                              input=HANDSHAKE_TEXT.encode(), stdout=full,
                              stderr=subprocess.PIPE, env=server_env(home), timeout=30,
                              check=False)
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        "regdev serve: error: cannot write the output: No space left on device"]


@pytest.mark.timeout(60)
def test_a_client_gone_from_stdout_ends_the_server_with_the_calls_recorded(
        home: Path, tmp_path: Path) -> None:
    """The client stops reading stdout (closes its end: EPIPE, as `regdev serve | head -c
    10` does): the next answer fails, the server ends with exit 1 and nothing on stderr (a
    reader gone is silent, as for every command), and the call whose answer failed, which
    ran, is in the audit log with the one before it."""
    db = tmp_path / "audit.db"
    server = RawServer(home, db)
    server.handshake()
    first = server.send(tools_call(1, '{"name": "write_register", "arguments": '
                                      '{"addr": 3, "data": 9}}'))
    assert first is not None and first["result"]["isError"] is False
    process = server.process
    assert process.stdin is not None and process.stdout is not None
    process.stdout.close()
    process.stdin.write(tools_call(2, '{"name": "write_register", "arguments": '
                                      '{"addr": 4, "data": 10}}').encode() + b"\n")
    process.stdin.close()
    status = process.wait(timeout=30)
    assert process.stderr is not None
    assert (status, process.stderr.read()) == (1, b"")
    assert [(r.tool, json.loads(r.arguments or "{}")) for r in read_audit(db)] == [
        ("write_register", {"addr": 3, "data": 9}), ("write_register", {"addr": 4, "data": 10})]


@pytest.mark.skipif(os.name != "posix", reason="sends POSIX signals")
@pytest.mark.timeout(60)
@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "SIGHUP", "end of input"])
def test_a_stop_denies_an_open_approval_question_at_once(
        home: Path, tmp_path: Path, stop: str) -> None:
    """A write to protected register 15 waits for the client's answer to elicitation/create
    (the policy gives 120 s); a stop signal or end of input denies it at once: the call is
    answered approval-denied "the server is stopping" (not "no answer within 120 s"), it is
    so recorded, and the server exits 0 well before the question's timeout."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[registers]\nprotected = [15]\n[approval]\ntimeout = 120.0\n')
    db = tmp_path / "audit.db"
    server = RawServer(home, db, "--policy", str(policy), "--log-level", "info")
    hello = {**HANDSHAKE[0], "params": {**HANDSHAKE[0]["params"],  # type: ignore[dict-item]
                                        "capabilities": {"elicitation": {}}}}
    assert server.send(json.dumps(hello))["id"] == 0  # type: ignore[index]
    server.send(json.dumps(HANDSHAKE[1]), answer=False)
    asked = server.send(tools_call(1, '{"name": "write_register", "arguments": '
                                      '{"addr": 15, "data": 7}}'))
    assert asked is not None and asked["method"] == "elicitation/create", asked
    assert "protected register 15" in asked["params"]["message"]
    process = server.process
    assert process.stdin is not None
    if stop == "end of input":
        process.stdin.close()
    else:
        process.send_signal(getattr(signal, stop))
    try:
        status = process.wait(timeout=30)  # the question's own timeout is 120 s
    finally:
        if process.poll() is None:
            process.kill()
    assert process.stdout is not None and process.stderr is not None
    out, err = process.stdout.read(), process.stderr.read()
    answers = [json.loads(line) for line in out.splitlines()]
    assert status == 0 and b"Traceback" not in err, err
    # the question is withdrawn (MCP cancellation of the server's own request), then the
    # call is answered
    assert [(a.get("method"), a.get("params", {}).get("requestId"), a.get("id"))
            for a in answers] == [("notifications/cancelled", asked["id"], None),
                                  (None, None, 1)], answers
    got = answers[1]["result"]["structuredContent"]
    assert (got["ok"], got["code"]) == (False, "approval-denied"), got
    assert "the server is stopping" in got["message"] and "no answer" not in got["message"]
    [record] = read_audit(db)
    assert (record.code, record.approval) == ("approval-denied", "elicitation")
    assert record.message == got["message"]


@pytest.mark.skipif(os.name != "posix", reason="sends POSIX signals")
@pytest.mark.timeout(60)
@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "SIGHUP", "end of input"])
def test_a_stop_mid_stream_answers_every_call_that_ran(
        home: Path, tmp_path: Path, stop: str) -> None:
    """A client streams writes without waiting for answers and the server is stopped while
    they pour in: every call the audit log holds (every call that ran) was answered with its
    result under its id; every other answer is SERVER_STOPPING (not run, not recorded); no id
    is answered twice; exit 0, nothing on stderr but the server's own log lines. At end of
    input every call runs and is answered."""
    count = 1200  # (addr, data) = (n % 16, n // 16) tells the calls apart in the audit log
    db = tmp_path / "audit.db"
    server = RawServer(home, db, "--log-level", "info")
    server.handshake()
    process = server.process
    assert process.stdin is not None and process.stdout is not None
    answers: list[dict[str, Any]] = []
    got_some = threading.Event()

    def read_answers() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            answers.append(json.loads(line))
            if len(answers) == 100:
                got_some.set()
        got_some.set()

    def write_calls() -> None:
        assert process.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # the server stopped reading and left
            for n in range(1, count + 1):
                params = (f'{{"name": "write_register", "arguments": {{"addr": {n % 16}, '
                          f'"data": {n // 16}}}}}')
                process.stdin.write(tools_call(n, params).encode() + b"\n")
            process.stdin.flush()
            if stop == "end of input":
                process.stdin.close()

    reader = threading.Thread(target=read_answers)
    writer = threading.Thread(target=write_calls)
    reader.start()
    writer.start()
    try:
        assert got_some.wait(30), "no answers came"
        if stop != "end of input":
            process.send_signal(getattr(signal, stop))
        status = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        writer.join(timeout=30)
        reader.join(timeout=30)
    assert process.stderr is not None
    err = process.stderr.read().decode()
    assert status == 0
    assert all(line.startswith("regdev serve: INFO regdev: ") for line in err.splitlines()), err
    ran = {addr + 16 * data for addr, data in (
        (arguments["addr"], arguments["data"])
        for arguments in (json.loads(record.raw or b"")["arguments"] for record in
                          read_audit(db)))}
    ids = [answer["id"] for answer in answers]
    assert len(ids) == len(set(ids))
    results = {answer["id"] for answer in answers if "result" in answer}
    assert results == ran
    assert all(answer["result"]["isError"] is False for answer in answers if "result" in answer)
    not_run = [answer for answer in answers if "result" not in answer]
    assert {answer["error"]["code"] for answer in not_run} <= {SERVER_STOPPING}
    if stop == "end of input":
        assert ran == set(range(1, count + 1)) and not not_run


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="sends a POSIX SIGHUP")
def test_a_signal_ignored_at_start_stays_ignored(home: Path, tmp_path: Path) -> None:
    """Under nohup (SIGHUP ignored when the server starts) SIGHUP does not stop it."""
    server = RawServer(home, tmp_path / "audit.db", ignored=["SIGHUP"])
    server.handshake()
    server.process.send_signal(signal.SIGHUP)
    assert server.send('{"jsonrpc": "2.0", "id": 1, "method": "ping"}') == {
        "jsonrpc": "2.0", "id": 1, "result": {}}
    status, rest, err = server.close()
    assert status == 0 and rest == b"" and b"stopping on" not in err


def test_a_home_without_room_for_the_audit_log_warns_and_serves(tmp_path: Path) -> None:
    """Started as an MCP client starts it (no --audit, no $REGDEV_AUDIT) with a HOME where
    nothing can be created: one warning line, and the server serves without an audit log.
    A request before the handshake is told to send initialize first."""
    home = tmp_path / "home"
    home.write_text("")  # a file: ~/.local/state cannot be made under it, even by root
    server = RawServer(home, None, "--log-level", "info")
    early = server.send('{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}')
    assert early == {"jsonrpc": "2.0", "id": 1, "error": {
        "code": -32602, "message": NOT_INITIALIZED, "data": ""}}
    server.handshake()
    reply = server.send(tools_call(2, '{"name": "read_register", "arguments": {"addr": 1}}'))
    assert reply is not None and reply["result"]["isError"] is False
    status, rest, err = server.close()
    assert (status, rest) == (0, b"")
    first, *others = err.decode().splitlines()
    assert first.startswith(f"regdev serve: warning: the default audit log {home}/.local/state/"
                            "regdev/audit.db cannot be used: cannot make the folder "
                            f"{home}/.local: Not a directory;")
    assert "going on without an audit log" in first
    assert others[0].endswith("session default, audit log off")


#: A sitecustomize for a server under test: its import of the mcp SDK waits until the file
#: $REGDEV_TEST_RELEASE exists, after creating $REGDEV_TEST_REACHED, so a test knows the
#: server is importing the SDK (and has its stop signals caught: `regdev serve` catches them
#: first) for as long as it wants, however slow the machine.
IMPORT_GATE = """\
import os, sys, time


class _WaitBeforeTheSDK:
    def find_spec(self, name, path=None, target=None):
        if name == "mcp":
            sys.meta_path.remove(self)
            open(os.environ["REGDEV_TEST_REACHED"], "w").close()
            while not os.path.exists(os.environ["REGDEV_TEST_RELEASE"]):
                time.sleep(0.01)
        return None


sys.meta_path.insert(0, _WaitBeforeTheSDK())
"""


@pytest.mark.skipif(os.name != "posix", reason="sends a POSIX SIGTERM")
@pytest.mark.timeout(60)
def test_sigterm_while_starting_stops_cleanly(tmp_path: Path) -> None:
    """SIGTERM while the server is still importing the SDK (a client giving up early) ends
    it with status 0, not the signal's 143. The server is held in that import until the
    signal is sent (a sitecustomize), so the signal lands there on any machine."""
    (tmp_path / "sitecustomize.py").write_text(IMPORT_GATE)
    reached, release = tmp_path / "reached", tmp_path / "release"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "REGDEV_TEST_REACHED": str(reached),
           "REGDEV_TEST_RELEASE": str(release)}
    process = subprocess.Popen(default_signals([*SERVE, "--no-audit", "--log-level", "info"]),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
    try:
        while not reached.exists():
            assert process.poll() is None, process.communicate()
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        release.touch()
        if process.poll() is None:
            process.kill()
    assert (process.returncode, out) == (0, b"")
    assert err.decode().splitlines() == ["regdev serve: INFO regdev: stopping on SIGTERM",
                                         "regdev serve: INFO regdev: stopped"]


def test_no_server_wrote_under_home(home: Path, session: Session, raw: RawServer) -> None:
    """The servers above ran with HOME here, each with its own --audit: HOME is untouched."""
    assert session.call("read_register", {"addr": 0}).is_error is False
    assert raw.send(tools_call(99, '{"name": "read_register", "arguments": {"addr": 0}}'))
    assert list(home.rglob("*")) == []


# --- the reader, in process -------------------------------------------------------------------


def _call_line(request_id: int, params: str) -> bytes:
    return tools_call(request_id, params).encode()


def test_reader_hands_the_params_text_exactly_as_received() -> None:
    """A tools/call goes to the SDK with its params text as sent, spacing and all."""
    params = '{ "name":"w" , "arguments": {"addr": 3.0000000000000001},"_meta":{"k":1} }'
    (verdict,) = MessageReader(1000).feed(_call_line(1, params) + b"\n")
    assert isinstance(verdict, SessionMessage)
    assert isinstance(verdict.message, types.JSONRPCRequest) and verdict.message.id == 1
    assert verdict.metadata is not None
    assert verdict.metadata.request_context == Received(params.encode())  # type: ignore[union-attr]


def test_reader_splits_lines_across_reads_and_caps_them() -> None:
    """Lines may arrive in pieces; one over the cap is judged on its first bytes and the rest
    of it is dropped, across reads; a last line without a newline is judged at close."""
    reader = MessageReader(60)
    ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    assert reader.feed(ping[:10]) == []
    (first,) = reader.feed(ping[10:] + b"\n")
    assert isinstance(first, SessionMessage)
    long = _call_line(2, '{"name": "w", "arguments": {"pad": "' + "x" * 200 + '"}}')
    (cut,) = reader.feed(long[:100])
    assert isinstance(cut, SessionMessage) and cut.metadata is not None
    assert cut.message.id == 2  # type: ignore[union-attr]
    assert cut.metadata.request_context == Received(long[:60])  # type: ignore[union-attr]
    assert reader.feed(long[100:] + b"\n" + ping) == []
    (last,) = reader.close()
    assert isinstance(last, SessionMessage) and last.message.id == 1  # type: ignore[union-attr]


def test_reader_answers_a_refused_tools_call_only_when_the_gate_cannot_run_it() -> None:
    """A refused tools/call goes to the gate (as a stand-in) only without top-level name or
    arguments; with them it is a -32700 error, so the refused line can never run a call."""
    line = b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"a": NaN}}'
    verdict = MessageReader(1000).judge(line)
    assert isinstance(verdict, SessionMessage)
    assert verdict.message.params == {"name": ""}  # type: ignore[union-attr]
    assert verdict.metadata.request_context == Received(line)  # type: ignore[union-attr]
    crafted = line[:-1] + b', "name": "write_register", "arguments": {"addr": 1, "data": 1}}'
    verdict = MessageReader(1000).judge(crafted)
    assert isinstance(verdict, types.JSONRPCError)
    assert (verdict.id, verdict.error.code) == (7, types.PARSE_ERROR)


def test_reader_survives_every_kind_of_line() -> None:
    """Whatever the bytes, the reader returns verdicts and never raises."""
    reader = MessageReader(4096)
    lines = [b"{" * 3000, b"[" * 3000, b'{"id": 1, "method": "' + b"\\" * 3000, b"\x00" * 10,
             b'{"id": "\\ud800", "method": "ping", "jsonrpc": "2.0"}',
             b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping", "x": NaN}',
             b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "w", '
             b'"arguments": {"a": "\\u0000"}}}', b'"just a string"', b"1e999999999",
             b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "method": "ping"}']
    verdicts = reader.feed(b"\n".join(lines) + b"\n")
    assert [v.id if isinstance(v, types.JSONRPCError) else "sdk" for v in verdicts] == [
        None, None, 1, None, None, None, "sdk", None, None, None]


def test_reader_refuses_a_line_the_parser_fails_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should the parser raise (it once did: RecursionError in its repeated-key check at ~990
    levels), the line is refused under its id like any other, not run, not fatal."""

    def broken(*args: object, **kwargs: object) -> object:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr("regdev.server._mcp.parse", broken)
    reader = MessageReader(1000)
    ping = reader.judge(b'{"jsonrpc": "2.0", "id": 3, "method": "ping"}')
    assert isinstance(ping, types.JSONRPCError) and (ping.id, ping.error.code) == (3, -32700)
    call = reader.judge(_call_line(4, '{"name": "read_register", "arguments": {"addr": 1}}'))
    assert isinstance(call, SessionMessage) and call.message.params == {"name": ""}  # type: ignore[union-attr]


@pytest.mark.parametrize(("text", "expected"), [
    (b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"a": NaN}}',
     Envelope(True, 5, "tools/call", False)),
    (b'{"params": {"a": [1, "]}", {"b": "\\"}"}]}, "id": "x", "method": "m"}',
     Envelope(True, "x", "m", False)),
    (b'{"id": 5, "method": "tools/call", "params": {"a": ' + b"[" * 100000,
     Envelope(True, 5, "tools/call", False)),  # cut short: what came before still counts
    (b'{"id": 5, "id": 5, "method": "m"}', Envelope(True, None, "m", False)),  # which one? neither
    (b'{"method": "m", "id": 12', Envelope(True, None, "m", False)),  # 12, or 123 cut short?
    (b'{"id": true, "method": 5}', Envelope(True, None, None, False)),
    (b'{"id": NaN, "method": "m"}', Envelope(True, None, "m", False)),
    (b'{"\\u0069d": 3, "name": "w"}', Envelope(True, 3, None, True)),
    (b'{"method": "notifications/x", "params": NaN}',
     Envelope(False, None, "notifications/x", False)),
    (b'{"id": 1, "params": {"a": NaN, "_meta": {"v": "x"}}}',
     Envelope(True, 1, None, False, {"v": "x"})),
    (b'{"id": 1, "params": {"_meta": {"v": NaN}}}', Envelope(True, 1, None, False)),
    (b"not json", Envelope(False, None, None, False)),
    # bytes that are not JSON (a no-break space, a BOM, a word) before, after or between
    # values: they stay inside the value they touch, so an inner id is never the message's
    (b'{"id": 5, "method": "tools/call", "params": \xc2\xa0{"name": "w", "id": "in"}}',
     Envelope(True, 5, "tools/call", False)),
    (b'{"id":5,"method":"tools/call","params":\xc2\xa0{"name":"w","arguments":{},"id":"in"}}',
     Envelope(True, 5, "tools/call", False)),
    (b'{"params": \xef\xbb\xbf{"id": "in", "method": "m2"}, "id": 5, "method": "m"}',
     Envelope(True, 5, "m", False)),
    (b'{"params": x{"id": "in"}y, "id": 5}', Envelope(True, 5, None, False)),
    (b'{"params": NaN[{"id": "in"}], "id": 5}', Envelope(True, 5, None, False)),
    (b'\xef\xbb\xbf{"id": 5,\xc2\xa0"method": "m", "params": {"a": NaN}}',
     Envelope(True, 5, "m", False)),
    (b'{"id": \xc2\xa05, "method": "m"}', Envelope(True, None, "m", False)),  # not strict
    (b'{"id": 5 6, "method": "m"}', Envelope(True, None, "m", False)),
    # a string that never closes, inside a container: the scan ends there, once (it was
    # quadratic when every escaped quote restarted a string match)
    (b'{"id": 2, "params": ["' + b'\\"' * 200000, Envelope(True, 2, None, False)),
])
def test_read_envelope_reads_the_id_leniently_but_its_value_strictly(
        text: bytes, expected: Envelope) -> None:
    """The id and method of a refused line, read by a flat scan; ambiguity gives no id."""
    assert read_envelope(text) == expected


def test_serve_on_stdio_warns_once_when_approval_is_by_url(home: Path, tmp_path: Path) -> None:
    """A policy whose approval is by URL (examples/http-policy.toml) on stdio: one warning at
    start-up saying protected writes will be refused and what to use instead; none with
    elicitation."""
    url_policy = EXAMPLES / "http-policy.toml"
    form_policy = tmp_path / "form.toml"
    form_policy.write_text('[registers]\nprotected = [15]\n[approval]\nvia = "elicitation"\n')
    warned = []
    for policy in (url_policy, form_policy):
        process = subprocess.run(
            [*SERVE, "--no-audit", "--policy", str(policy)], input=b"", capture_output=True,
            timeout=30, env=server_env(home), check=False)
        assert process.returncode == 0, process.stderr
        warned.append(process.stderr.decode().splitlines())
    assert warned == [[
        "regdev serve: WARNING regdev: the policy's approval is by URL (approval.via = "
        "\"url\"), which needs the pages of regdev serve --http: on stdio every write to a "
        "protected register (15) is refused approval-denied; use approval.via = "
        "\"elicitation\" for stdio"], []]
