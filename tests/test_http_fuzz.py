"""A fuzz of `regdev serve --http`'s endpoint: malformed bodies, headers, methods, huge and
truncated requests, with and without a token, on 127.0.0.1. Whatever arrives: never a 500
nor a traceback; nothing unauthenticated reaches the gate (no audit record, no device access);
nothing refused reaches the device (the device's writes are exactly the accepted writes the
audit log holds); a slow or vanished client holds nothing up."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regdev import RegisterFile
from support.httpserver import Served, inprocess_server, policy_text, post, raw_request, token
from support.strategies import json_values, raw_register_calls, to_json

CAP = 64 * 1024 + 1024 * 1024  # the gate's byte cap + the envelope: the stdio line cap


class CountingFile(RegisterFile):
    """A register file counting every access (reads and writes), thread-safe."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = self.reads = 0
        self._counting = threading.Lock()

    def write(self, addr: int, data: int) -> int:
        with self._counting:
            self.writes += 1
        return super().write(addr, data)

    def read(self, addr: int) -> int:
        with self._counting:
            self.reads += 1
        return super().read(addr)


@pytest.fixture(scope="module")
def device() -> CountingFile:
    return CountingFile()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, device: CountingFile) -> Iterator[Served]:
    """A --stateless server (a tools/call needs no session) giving bodies 1.5 s to arrive."""
    with inprocess_server(tmp_path_factory.mktemp("fuzz"), policy_text(), stateless=True,
                          device=device, body_seconds=1.5) as served:
        yield served
        assert "Traceback" not in served.log(), served.log()


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with inprocess_server(tmp_path_factory.mktemp("fuzz-sessions"), policy_text(),
                          body_seconds=1.5) as served:
        yield served


def request(served: Served, head: str, body: bytes = b"", *, read: bool = True
            ) -> tuple[int, dict[str, str], bytes]:
    """A raw request: ``head`` is the request line and headers ("\\n" ends lines; Host is
    added), then ``body`` as it is."""
    lines = head.strip("\n").split("\n")
    text = "\r\n".join([lines[0], f"Host: 127.0.0.1:{served.port}", *lines[1:]]) + "\r\n\r\n"
    return raw_request(served.port, text.encode("latin-1") + body, read=read)


def authed(body: bytes, *, extra: str = "", bearer: str | None = None) -> str:
    auth = f"Authorization: Bearer {bearer or token('alice')}\n" if bearer != "" else ""
    return ("POST /mcp HTTP/1.1\nContent-Type: application/json\n"
            "Accept: application/json, text/event-stream\n"
            f"{auth}Content-Length: {len(body)}\nConnection: close\n{extra}")


def state(served: Served, device: CountingFile) -> tuple[int, int, int]:
    """(audit records, device writes, device reads), every pending record committed."""
    return len(served.records()), device.writes, device.reads


def accepted_writes(served: Served) -> int:
    return sum(1 for r in served.records()
               if r.ok and r.tool == "write_register" and not r.replay)


def assert_answered(status: int, headers: dict[str, str], body: bytes) -> None:
    """An answer in regdev's (or the HTTP layer's) words: no 500, no traceback."""
    assert not 500 <= status < 600 or status == 503, (status, body)
    assert b"Traceback" not in body and b"File \"" not in body, body


# --- without a token: nothing reaches the gate ---------------------------------------------------

UNAUTHENTICATED = [
    "POST /mcp HTTP/1.1\nContent-Type: application/json\nContent-Length: {n}\nConnection: close",
    "POST /mcp HTTP/1.1\nAuthorization: Bearer nope\nContent-Length: {n}\nConnection: close",
    "POST /mcp HTTP/1.1\nAuthorization: Basic YWxpY2U6eA==\nContent-Length: {n}\n"
    "Connection: close",
    "POST /mcp HTTP/1.1\nAuthorization: bearer\nContent-Length: {n}\nConnection: close",
    "POST /mcp HTTP/1.1\nAuthorization: Bearer " + "x" * 20000 + "\nContent-Length: {n}\n"
    "Connection: close",
    "GET /mcp HTTP/1.1\nAccept: text/event-stream\nConnection: close",
    "DELETE /mcp HTTP/1.1\nMcp-Session-Id: abc\nConnection: close",
    "PUT /mcp HTTP/1.1\nContent-Length: {n}\nConnection: close",
]


@pytest.mark.parametrize("head", UNAUTHENTICATED)
def test_no_valid_token_reaches_nothing(server: Served, device: CountingFile, head: str) -> None:
    """Without a valid token, whatever the method, header or body: 401 (or the HTTP layer's
    own refusal of a header too large), and no audit record, no device access."""
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": ' \
           b'"write_register", "arguments": {"addr": 3, "data": 9}}}'
    before = state(server, device)
    status, headers, answer = request(server, head.replace("{n}", str(len(body))), body)
    assert_answered(status, headers, answer)
    assert status in (401, 431, 400), (status, answer)
    if status == 401:
        assert "resource_metadata=" in headers["www-authenticate"]
    assert state(server, device) == before


@settings(max_examples=60)
@given(body=st.binary(max_size=400), bearer=st.sampled_from(["", "nope", "x.y.z"]))
def test_fuzzed_bodies_without_a_token_reach_nothing(server: Served, device: CountingFile,
                                                     body: bytes, bearer: str) -> None:
    """Random bodies with no token or a bad one: 401, and nothing recorded or run."""
    before = state(server, device) if body[:1] == b"{" else None
    status, _, answer = request(server, authed(body, bearer=bearer), body)
    assert status == 401 and b"Traceback" not in answer
    if before is not None:
        assert state(server, device) == before


# --- with a token: every body is judged, and nothing refused reaches the device -------------------


def _call(request_id: Any, raw_call: str) -> bytes:
    """A JSON-RPC tools/call whose params hold ``raw_call`` (canonical text) as an MCP call."""
    doc = raw_call.replace('"tool"', '"name"', 1)
    return (f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "method": "tools/call", '
            f'"params": {doc}}}').encode()


@settings(max_examples=120)
@given(raw_call=raw_register_calls(), cut=st.integers(min_value=0, max_value=400),
       noise=st.binary(max_size=8))
def test_fuzzed_calls_are_answered_and_only_accepted_writes_run(
        server: Served, device: CountingFile, raw_call: str, cut: int, noise: bytes) -> None:
    """Register calls with numbers at every edge, whole or cut short anywhere, with bytes
    appended: each is answered (a result or a JSON-RPC error, never a 500); the device's
    writes stay exactly the audit log's accepted writes."""
    body = _call(7, raw_call)
    body = body[:cut] + noise if cut < len(body) else body
    status, headers, answer = request(server, authed(body), body)
    assert_answered(status, headers, answer)
    assert status in (200, 202, 400, 406), (status, answer)
    if status == 200 and answer:
        text = answer.decode()
        message = json.loads(text.split("data:", 1)[1]) if "data:" in text else json.loads(text)
        assert "result" in message or "error" in message
    assert device.writes == accepted_writes(server)


@settings(max_examples=60)
@given(value=json_values)
def test_fuzzed_json_bodies_are_answered(server: Served, device: CountingFile,
                                         value: Any) -> None:
    """Any JSON value as the body, or as a tools/call's params: answered, never a 500."""
    for body in (to_json(value).encode(),
                 b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": '
                 + to_json(value).encode() + b"}"):
        status, headers, answer = request(server, authed(body), body)
        assert_answered(status, headers, answer)
    assert device.writes == accepted_writes(server)


HEADERS = [
    ("Content-Type: text/plain\n", 415),
    ("Content-Type: application/json; charset=latin-1\n", 415),
    ("Content-Type: application/json\nContent-Type: application/json\n", 400),
    ("Accept: text/html\n", 406),
    ("Origin: http://evil.test.invalid\n", 403),
    ("Origin: http://127.0.0.1:1\nOrigin: https://console.test.invalid\n", 400),
    ("Authorization: Bearer nope\n", 401),  # a second Authorization header
    ("Mcp-Protocol-Version: 1999-01-01\n", 400),
    ("Mcp-Protocol-Version: 2026-07-28\n", 400),  # no Mcp-Method header, no _meta
    ("Mcp-Session-Id: not-a-session\n", 200),
    ("X-Filler: " + "a" * 8000 + "\n", 200),
]


@pytest.mark.parametrize(("extra", "status"), HEADERS)
def test_odd_headers_get_their_answer(server: Served, device: CountingFile, extra: str,
                                      status: int) -> None:
    """Wrong or doubled headers: an answer in words with the status that says what was wrong;
    only a request that gets 200 may run its call."""
    body = _call(9, '{"tool": "write_register", "arguments": {"addr": 4, "data": 4}}')
    head = authed(body)
    name = extra.split(":", maxsplit=1)[0]
    if name in ("Content-Type", "Accept"):  # in place of the usual one
        head = "".join(line + "\n" for line in head.splitlines()
                       if not line.startswith(name + ":"))
    got, headers, answer = request(server, head + extra, body)
    assert_answered(got, headers, answer)
    assert got == status, (got, answer)
    assert device.writes == accepted_writes(server)


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD",
                                    "TRACE", "FOO"])
@pytest.mark.parametrize("path", ["/mcp", "/mcp/", "/", "/approve/x", "/approve/",
                                  "/.well-known/oauth-protected-resource/mcp", "/%00"])
def test_any_method_on_any_path_is_answered(sessions: Served, method: str, path: str) -> None:
    """Every method on every path, with a token: an answer (405, 404, 401, 307, a stream...),
    never a 500."""
    head = (f"{method} {path} HTTP/1.1\nAuthorization: Bearer {token('alice')}\n"
            "Accept: application/json, text/event-stream\nContent-Length: 0\nConnection: close")
    if method == "GET" and path == "/mcp":  # a stateless-less GET opens a stream: needs a session
        head += "\nMcp-Session-Id: none"
    status, headers, answer = request(sessions, head)
    assert_answered(status, headers, answer)
    assert status in (200, 202, 204, 307, 400, 401, 404, 405, 406), (method, path, status)


# --- huge, truncated and slow requests ---------------------------------------------------------


def test_a_body_declared_over_the_cap_is_refused_unread(server: Served,
                                                        device: CountingFile) -> None:
    """Content-Length over the cap: 413 at once, before any of the body is sent; the audit
    log records the refusal as stdio records a line over its cap (too-large, the caller and
    its session), with no raw text (none was read) and no id (nor could one be read)."""
    before = state(server, device)
    head = authed(b"").replace("Content-Length: 0", f"Content-Length: {CAP + 1}")
    status, _, answer = request(server, head)
    assert status == 413 and b"over the cap" in answer
    assert state(server, device) == (before[0] + 1, *before[1:])
    record = server.records()[-1]
    assert (record.ok, record.stage, record.code, record.dialect, record.session,
            record.caller, record.tool, record.call_id, record.raw, record.raw_bytes) == (
        False, "parse", "too-large", "mcp", "default", "token:alice", None, None, None, None)
    assert record.message == (f"the request body is over the cap of {CAP} bytes "
                              f"(Content-Length {CAP + 1}): a call of at most 65536 bytes and "
                              "its JSON-RPC envelope; send one call of at most 65536 bytes")


def test_a_chunked_body_over_the_cap_is_refused_at_the_cap(server: Served,
                                                           device: CountingFile) -> None:
    """A chunked body that grows past the cap: 413 once the cap is passed (the rest is not
    read into memory), recorded in the audit log as too-large with the body cut at the cap,
    as stdio keeps a line cut at its cap."""
    chunk = b"x" * 65536
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(CAP // 65536 + 2))
    head = authed(b"").replace("Content-Length: 0\n", "Transfer-Encoding: chunked\n")
    records = len(server.records())
    status, _, answer = request(server, head, chunks + b"0\r\n\r\n")
    assert status in (413, 0), answer  # 0: the server closed before the client had sent it all
    before = state(server, device)
    assert before[0] == records + 1
    record = server.records()[-1]
    assert (record.ok, record.code, record.caller, record.call_id) == (
        False, "too-large", "token:alice", None)
    assert record.raw_bytes == CAP and record.raw is not None and set(record.raw) == {ord("x")}
    assert post(server.url, b"{}", bearer=token("alice")).status_code == 400  # still serving
    assert state(server, device)[1:] == before[1:]


@pytest.mark.parametrize("shape", ["short", "bad-chunk", "both-lengths", "two-lengths"])
def test_truncated_or_ambiguous_bodies(server: Served, device: CountingFile, shape: str) -> None:
    """A body shorter than declared (then nothing: 408 after the body time), a malformed
    chunk, Content-Length and Transfer-Encoding together, two Content-Lengths: refused,
    nothing runs."""
    body = _call(1, '{"tool": "write_register", "arguments": {"addr": 5, "data": 5}}')
    head = authed(body)
    if shape == "short":
        data = body[: len(body) // 2]
    elif shape == "bad-chunk":
        head = head.replace(f"Content-Length: {len(body)}\n", "Transfer-Encoding: chunked\n")
        data = b"zz\r\n" + body + b"\r\n0\r\n\r\n"
    elif shape == "both-lengths":
        head += "Transfer-Encoding: chunked\n"
        data = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    else:
        head += f"Content-Length: {len(body) + 1}\n"
        data = body
    before = state(server, device)
    status, headers, answer = request(server, head, data)
    assert_answered(status, headers, answer)
    assert status in (400, 408, 0), (status, answer)
    assert state(server, device)[1] == before[1]


def test_a_slow_client_holds_nobody_up(tmp_path: Path) -> None:
    """A client that sends half a body and stalls: other callers' writes and reads run while
    it has had no answer yet (60 s to send it all, here), and its call never runs."""
    device = CountingFile()
    with inprocess_server(tmp_path, policy_text(), stateless=True, device=device,
                          body_seconds=60) as served:
        body = _call(2, '{"tool": "write_register", "arguments": {"addr": 6, "data": 66}}')
        head = authed(body).strip("\n").split("\n")
        slow = socket.create_connection(("127.0.0.1", served.port), timeout=30)
        slow.sendall(("\r\n".join([head[0], f"Host: 127.0.0.1:{served.port}", *head[1:]])
                      + "\r\n\r\n").encode() + body[:10])
        for data in range(5):
            reply = post(served.url, _call(3 + data, '{"tool": "write_register", "arguments": '
                                                     f'{{"addr": 7, "data": {data}}}}}'),
                         bearer=token("alice"))
            assert reply.status_code == 200 and b'"isError":false' in reply.content
        slow.setblocking(False)
        with pytest.raises(BlockingIOError):
            slow.recv(1)  # the slow request has no answer yet: nobody waited for it
        slow.close()
        assert (device.writes, device.snapshot()[6], device.snapshot()[7]) == (5, 0, 4)
        assert [r.arguments for r in served.records()] == [
            f'{{"addr":7,"data":{data}}}' for data in range(5)]


def test_a_client_that_vanishes_mid_body_leaves_no_trace(server: Served,
                                                         device: CountingFile) -> None:
    """Half a body, then the connection closed: nothing recorded, nothing run, server fine."""
    body = _call(4, '{"tool": "write_register", "arguments": {"addr": 8, "data": 8}}')
    before = state(server, device)
    request(server, authed(body), body[:20], read=False)
    time.sleep(0.3)
    assert state(server, device) == before
    assert post(server.url, b"{}", bearer=token("alice")).status_code == 400


def test_the_log_has_no_traceback(server: Served, tmp_path: Path) -> None:
    """After all of the above: not one traceback in the server's log."""
    assert "Traceback" not in server.log()
