"""`regdev serve --http` under callers that hold what they can: connections that send nothing
or trickle their headers, and MCP sessions opened without end. Each limit with its refusal,
on 127.0.0.1 only, with small limits set by option so that the tests stay small.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from regdev.server._http_limits import HttpLimits
from support.httpserver import (
    MCP_HEADERS,
    Served,
    http_server,
    inprocess_server,
    policy_text,
    post,
    sdk_client,
    token,
)

INITIALIZE = json.dumps({
    "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
READ = (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": '
        b'"read_register", "arguments": {"addr": 1}}}')


def closed_by_server(sock: socket.socket, timeout: float = 30) -> bytes:
    """Everything ``sock`` receives until the server closes it (within ``timeout`` s; a reset,
    for bytes sent after the server closed, ends it too)."""
    sock.settimeout(timeout)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def error_of(response: bytes) -> dict[str, Any]:
    """The JSON-RPC error in a raw HTTP response."""
    error: dict[str, Any] = json.loads(response.split(b"\r\n\r\n", 1)[1])["error"]
    return error


# --- connections ------------------------------------------------------------------------------


def test_idle_connections_do_not_lock_out_a_caller_with_a_token(tmp_path: Path) -> None:
    """More connections that send nothing than the whole connection cap (20 against 16) leave
    at most --max-unauthenticated of them open, the oldest closed first: a caller with a
    token then opens a session and calls, as it could with none of them there."""
    options = ("--max-connections", "16", "--max-unauthenticated", "4",
               "--header-seconds", "120")
    with http_server(tmp_path, policy_text(), *options) as served:
        idle = [socket.create_connection(("127.0.0.1", served.port), timeout=30)
                for _ in range(20)]
        try:
            with sdk_client(served.url, token("alice")) as client:
                result = client.call("read_register", {"addr": 1})
                assert (result.is_error, result.structured_content) == (False, {
                    "ok": True, "tool": "read_register", "result": {"addr": 1, "data": 0}})
            assert [closed_by_server(sock) for sock in idle[:16]] == [b""] * 16
        finally:
            for sock in idle:
                sock.close()
    assert ("regdev serve: WARNING regdev: 4 connections are open on which no valid token "
            "was presented, the most kept (--max-unauthenticated): closing the oldest (a flood "
            "of connections?)\n") in served.log()


@pytest.fixture
def stateless(tmp_path: Path) -> Iterator[Served]:
    """A --stateless server keeping 2 connections without a token, with a minute for bodies."""
    with inprocess_server(tmp_path, policy_text(), stateless=True, body_seconds=60,
                          limits=HttpLimits(max_unauthenticated=2, header_seconds=120)) as served:
        yield served


def test_a_connection_that_presented_a_token_is_not_closed_for_the_budget(
        stateless: Served) -> None:
    """A connection whose request presented a valid token leaves the budget: connections
    without one, more than the budget, close each other (the oldest first), not it; its
    request then gets its answer."""
    port = stateless.port
    with held_with_a_token(port) as caller:  # the front asks for the body after the token
        idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(6)]
        try:
            assert [closed_by_server(sock) for sock in idle[:4]] == [b""] * 4
            caller.sendall(READ)
            response = http.client.HTTPResponse(caller, method="POST")
            response.begin()
            status, body = response.status, response.read()
        finally:
            for sock in idle:
                sock.close()
    assert status == 200, body
    assert answer_of(body)["result"]["structuredContent"] == {
        "ok": True, "tool": "read_register", "result": {"addr": 1, "data": 0}}


def held_with_a_token(port: int) -> socket.socket:
    """A connection whose request presented alice's token and waits to send its body (the
    server asked for it: 100 Continue)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                 b"Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
                 b"Accept: application/json, text/event-stream\r\n"
                 b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n"
                 % (port, token("alice").encode(), len(READ)))
    assert sock.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
    return sock


def test_past_max_connections_a_request_gets_503_in_regdevs_words(tmp_path: Path) -> None:
    """With --max-connections connections held by callers with a token, a request on one
    more gets 503 with a JSON-RPC error naming the limit, and its connection is closed; once
    one of them closes, requests are served again."""
    limits = HttpLimits(max_connections=4, max_unauthenticated=2, header_seconds=120)
    with inprocess_server(tmp_path, policy_text(), stateless=True, body_seconds=60,
                          limits=limits) as served:
        held = [held_with_a_token(served.port) for _ in range(4)]
        try:
            metadata = b"GET /.well-known/oauth-protected-resource/mcp HTTP/1.1\r\n" \
                       b"Host: 127.0.0.1:%d\r\n\r\n" % served.port
            with socket.create_connection(("127.0.0.1", served.port), timeout=30) as extra:
                extra.sendall(metadata)
                answer = closed_by_server(extra)
            assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
            assert b"\r\nretry-after: 1\r\n" in answer.lower()
            assert error_of(answer) == {
                "code": -32000, "data": {"limit": "--max-connections"},
                "message": "Service Unavailable: 5 connections are open, more than the "
                           "server keeps (--max-connections 4); try again shortly"}
            held.pop().close()
            deadline = time.monotonic() + 60
            while (status := httpx2.get(served.base + "/.well-known/oauth-protected-resource"
                                        "/mcp", timeout=30).status_code) != 200:
                assert status == 503 and time.monotonic() < deadline
                time.sleep(0.1)
        finally:
            for sock in held:
                sock.close()
        assert ("regdev serve: WARNING regdev: refused a request: 5 connections are open "
                "(--max-connections 4)\n") in served.log()


def answer_of(stream: bytes) -> dict[str, Any]:
    """The one JSON-RPC message of an SSE answer."""
    data = [line[5:] for line in stream.decode().splitlines() if line.startswith("data:")]
    assert len(data) == 1, stream
    message: dict[str, Any] = json.loads(data[0])
    return message


@pytest.fixture
def hurried(tmp_path: Path) -> Iterator[Served]:
    """A server giving request heads half a second."""
    with inprocess_server(tmp_path, policy_text(),
                          limits=HttpLimits(header_seconds=0.5)) as served:
        yield served
        assert "Traceback" not in served.log(), served.log()


LATE = {"code": -32600, "message": "Invalid Request: the request's headers did not arrive "
                                   "within 0.5 s (--header-seconds)"}


def test_a_connection_that_sends_nothing_gets_408_and_is_closed(hurried: Served) -> None:
    """A connection that sends nothing is answered 408 with a JSON-RPC error naming the
    time and the option, and closed."""
    with socket.create_connection(("127.0.0.1", hurried.port), timeout=30) as sock:
        answer = closed_by_server(sock)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
    assert b"\r\nconnection: close\r\n" in answer and error_of(answer) == LATE


def test_headers_trickled_a_byte_at_a_time_get_408(hurried: Served) -> None:
    """Headers sent a byte now and then (slowloris) are not waited for past the time: the
    connection gets 408 while it is still sending them."""
    head = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % hurried.port
            + b"X-Trickle: " + b"a" * 4000)
    with socket.create_connection(("127.0.0.1", hurried.port), timeout=30) as sock:
        sent = 0
        try:  # 4000 x 0.05 s: far longer than the half second allowed
            while sent < len(head) and not select.select([sock], [], [], 0.05)[0]:
                sock.sendall(head[sent:sent + 1])
                sent += 1
        except OSError:  # the server closed it: what it answered is still to read
            pass
        assert 0 < sent < len(head), "the server waited for the whole trickle"
        answer = closed_by_server(sock)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
    assert error_of(answer) == LATE


def test_a_later_request_on_a_kept_connection_has_the_same_time(hurried: Served) -> None:
    """After a request answered, the next request's head on the same connection (here sent
    with it, and cut short) has the same time: 408, and closed."""
    metadata = "/.well-known/oauth-protected-resource/mcp"
    with socket.create_connection(("127.0.0.1", hurried.port), timeout=30) as sock:
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n"
                     b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     % (metadata.encode(), hurried.port, hurried.port))
        answer = closed_by_server(sock)
    first, _, rest = answer.partition(b"HTTP/1.1 408 Request Timeout\r\n")
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and b'"resource_name": "regdev"' in first
    assert error_of(rest) == LATE


# --- MCP sessions -----------------------------------------------------------------------------


def initialize(served: Served, who: str) -> httpx2.Response:
    """An ``initialize`` of ``who`` (a lab token's name) that opens a session."""
    return post(served.url, INITIALIZE, bearer=token(who))


def end(served: Served, who: str, opened: httpx2.Response) -> None:
    """End the session ``opened`` opened (DELETE)."""
    with httpx2.Client(timeout=30) as client:
        ended = client.delete(served.url, headers={
            **MCP_HEADERS, "Authorization": f"Bearer {token(who)}",
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "Mcp-Protocol-Version": "2025-11-25"})
    assert ended.status_code == 200, ended.text


def refusal(response: httpx2.Response) -> tuple[int, dict[str, Any]]:
    """The status and JSON-RPC error of a refused ``initialize``."""
    body = json.loads(response.content)
    assert body["id"] is None and response.headers["content-type"] == "application/json"
    return response.status_code, body["error"]


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[Served]:
    """A server with sessions: 2 a caller, 3 in all, 4 new ones a caller a minute."""
    limits = HttpLimits(max_caller_sessions=2, max_sessions=3, initialize_rate=4)
    with inprocess_server(tmp_path, policy_text(), limits=limits) as served:
        yield served
        assert "Traceback" not in served.log(), served.log()


def test_a_caller_holds_at_most_its_share_of_sessions(capped: Served) -> None:
    """A read-only caller opening session after session gets 429 past --max-caller-sessions,
    saying so; another caller still opens one; a session ended (DELETE) frees its place."""
    first, second = initialize(capped, "victor"), initialize(capped, "victor")
    assert (first.status_code, second.status_code) == (200, 200)
    assert refusal(initialize(capped, "victor")) == (429, {
        "code": -32000, "data": {"limit": "--max-caller-sessions"},
        "message": "Too many sessions: `token:victor` has 2 open, the most one caller may "
                   "have (--max-caller-sessions 2); end one (DELETE with its Mcp-Session-Id) "
                   "or use one you have (a session left idle ends after 300 s)"})
    assert initialize(capped, "alice").status_code == 200
    end(capped, "victor", first)
    assert initialize(capped, "victor").status_code == 200
    assert ("regdev serve: WARNING regdev: refused a new session for token:victor: "
            "--max-caller-sessions\n") in capped.log()


def test_the_server_holds_at_most_max_sessions(capped: Served) -> None:
    """Past --max-sessions in all, a caller under its own cap gets 503 naming the server's
    limit, with Retry-After; a session ended makes room."""
    opened = [initialize(capped, who) for who in ("victor", "victor", "alice")]
    assert [each.status_code for each in opened] == [200, 200, 200]
    refused = initialize(capped, "carol")
    assert refusal(refused) == (503, {
        "code": -32000, "data": {"limit": "--max-sessions"},
        "message": "Too many sessions: the server has 3 open, the most it keeps "
                   "(--max-sessions 3); try again when one ends (a session left idle ends "
                   "after 300 s)"})
    assert refused.headers["retry-after"] == "1"
    end(capped, "alice", opened[2])
    assert initialize(capped, "carol").status_code == 200


def test_a_caller_opens_at_most_initialize_rate_sessions_a_minute(capped: Served) -> None:
    """A caller that opens and ends sessions in a loop gets 429 once its --initialize-rate is
    spent, with the seconds to wait in the message and in Retry-After; another caller is not
    held up. (The exact count is SessionLimits' test: here a slow machine may see a token
    come back meanwhile.)"""
    opened_ok = 0
    while (opened := initialize(capped, "victor")).status_code == 200:
        opened_ok += 1
        end(capped, "victor", opened)
        assert opened_ok <= 40, "never refused"
    assert opened_ok >= 4
    refused = opened
    status, error = refusal(refused)
    wait = int(refused.headers["retry-after"])
    assert (status, error["data"]) == (429, {"limit": "--initialize-rate"})
    assert 1 <= wait <= 15  # a token comes back every 15 s
    assert error["message"] == (f"Too many new sessions: `token:victor` may open 4 a minute "
                                f"(--initialize-rate 4); try again in {wait} s, or use a "
                                "session you have")
    assert initialize(capped, "alice").status_code == 200


def test_an_idle_session_ends_and_frees_its_place(tmp_path: Path) -> None:
    """A session with no request for --session-idle-seconds ends (its id then gets 404), and
    no longer counts against its caller's --max-caller-sessions."""
    limits = HttpLimits(max_caller_sessions=1, session_idle_seconds=0.5)
    with inprocess_server(tmp_path, policy_text(), limits=limits) as served:
        opened = initialize(served, "victor")
        assert opened.status_code == 200
        headers = {"Mcp-Session-Id": opened.headers["mcp-session-id"],
                   "Mcp-Protocol-Version": "2025-11-25"}
        deadline = time.monotonic() + 60
        while (again := initialize(served, "victor")).status_code != 200:  # no request in it
            assert refusal(again)[1]["data"] == {"limit": "--max-caller-sessions"}
            assert time.monotonic() < deadline, "the idle session was not ended"
            time.sleep(0.1)
        assert post(served.url, READ, bearer=token("victor"), headers=headers
                    ).status_code == 404
        assert "Traceback" not in served.log(), served.log()


def test_session_limits_count_exactly() -> None:
    """SessionLimits on a clock of its own: --initialize-rate N admits N at once, then one
    every 60/N s; a session counts against its caller while the SDK holds it, an initialize
    that opened none does not."""
    from regdev.server._http_limits import LimitRefusal, SessionLimits  # noqa: PLC0415

    now = [100.0]
    live: set[str] = set()
    limits = SessionLimits(HttpLimits(initialize_rate=4, max_caller_sessions=3,
                                      max_sessions=5), lambda: live, clock=lambda: now[0])
    for number in range(4):
        limits.admit("token:victor")
        live.add(f"s{number}")
        limits.opened("token:victor", f"s{number}")
        if number < 3:
            live.discard(f"s{number}")  # ended (DELETE, or idle)
    assert limits.held("token:victor") == 1
    with pytest.raises(LimitRefusal) as refused:
        limits.admit("token:victor")
    assert (refused.value.status, refused.value.limit, refused.value.retry_after) == (
        429, "--initialize-rate", 15)
    now[0] += 15.0
    limits.admit("token:victor")
    limits.opened("token:victor", None)  # refused by the SDK: no session
    assert limits.held("token:victor") == 1
    now[0] += 60.0
    for number in (10, 11):
        limits.admit("token:victor")
        live.add(f"s{number}")
        limits.opened("token:victor", f"s{number}")
    with pytest.raises(LimitRefusal) as refused:
        limits.admit("token:victor")
    assert (refused.value.status, refused.value.limit) == (429, "--max-caller-sessions")
    for number in (20, 21):
        limits.admit("token:alice")
        live.add(f"s{number}")
        limits.opened("token:alice", f"s{number}")
    with pytest.raises(LimitRefusal) as refused:
        limits.admit("token:carol")
    assert (refused.value.status, refused.value.limit) == (503, "--max-sessions")


# --- the options ------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "error"), [
    (["--max-sessions", "0"], "--max-sessions must be an integer in 1..100000, got 0"),
    (["--max-unauthenticated", "512"],
     "--max-unauthenticated must be an integer in 1..511, got 512"),
    (["--max-connections", "8", "--max-unauthenticated", "8"],
     "--max-unauthenticated must be an integer in 1..7, got 8"),
    (["--max-caller-sessions", "600"],
     "--max-caller-sessions must be an integer in 1..512, got 600"),
    (["--header-seconds", "nan"],
     "--header-seconds must be a number of seconds in 0.001..3600, got nan"),
    (["--session-idle-seconds", "0"],
     "--session-idle-seconds must be a number of seconds in 0.001..86400, got 0.0"),
    (["--initialize-rate", "-1"], "--initialize-rate must be an integer in 1..100000, got -1"),
])
def test_a_limit_out_of_range_is_refused_before_serving(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str],
        error: str) -> None:
    """A limit out of its range stops `regdev serve --http` before it listens: exit 2, one
    line naming the option and its range."""
    from regdev.cli._main import main  # noqa: PLC0415

    policy = tmp_path / "policy.toml"
    policy.write_text(policy_text())
    assert main(["serve", "--http", "127.0.0.1:0", "--policy", str(policy), "--no-audit",
                 *options]) == 2
    assert capsys.readouterr().err == f"regdev serve: error: {error}\n"


def test_a_limit_without_http_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """The limits are of the HTTP server: given to `regdev serve` on stdio, they are refused
    in one line, exit 2."""
    from regdev.cli._main import main  # noqa: PLC0415

    assert main(["serve", "--max-caller-sessions", "2"]) == 2
    assert capsys.readouterr().err == ("regdev serve: error: --max-caller-sessions goes with "
                                       "--http [HOST:]PORT\n")


def test_the_help_states_the_defaults_the_server_has() -> None:
    """Each limit has its option, whose help states HttpLimits' default; docs/cli.md and
    docs/agents.md name every option."""
    from regdev.cli._serve import LIMIT_OPTIONS  # noqa: PLC0415

    defaults = HttpLimits()
    assert list(LIMIT_OPTIONS) == HttpLimits.names()
    for name, (_, kind, text) in LIMIT_OPTIONS.items():
        stated = text.rsplit("default ", 1)[1].rstrip(")")
        assert kind(stated) == getattr(defaults, name), name
    docs = Path(__file__).resolve().parent.parent / "docs"
    for page in ("cli.md", "agents.md"):
        text = (docs / page).read_text()
        for name in LIMIT_OPTIONS:
            assert f"--{name.replace('_', '-')}" in text, (page, name)


def test_session_limits_count_callers_by_identity_not_shown_name() -> None:
    """Two subjects whose shown names agree (cut at 200 characters) are two callers: each
    has its own share of sessions and its own initialize bucket, and the refusal shows the
    name, not the identity."""
    from regdev.server._http_limits import LimitRefusal, SessionLimits  # noqa: PLC0415

    live: set[str] = set()
    limits = SessionLimits(HttpLimits(initialize_rate=2, max_caller_sessions=2,
                                      max_sessions=10), lambda: live, clock=lambda: 0.0)
    shown = "oauth:" + "x" * 180 + "...#0123456789abcdef"
    first = (shown, "https://issuer.example", "x" * 300 + "a")
    second = (shown, "https://issuer.example", "x" * 300 + "b")
    for who, ids in ((first, ("a1", "a2")), (second, ("b1", "b2"))):
        for session_id in ids:
            limits.admit(who, shown)
            live.add(session_id)
            limits.opened(who, session_id)
    assert (limits.held(first), limits.held(second)) == (2, 2)
    with pytest.raises(LimitRefusal) as refused:
        limits.admit(second, shown)
    assert refused.value.limit == "--max-caller-sessions"
    assert "x" * 300 not in str(refused.value)
