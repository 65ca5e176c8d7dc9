"""`regdev serve --http`: MCP over Streamable HTTP with bearer tokens, driven by the SDK's own
HTTP client and by raw requests, on 127.0.0.1 only. The same bytes get the same verdict and
audit record as over stdio; who may call is the policy's; a protected write asks a person.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types

from conftest import CALIB_WRITE_PAIRS, EXAMPLES, HeldFirstWrite
from regdev import Gate, Policy, RegisterFile, read_audit
from regdev.agents._replay import load_replay
from support.httpserver import (
    ISSUER,
    MCP_HEADERS,
    KeySet,
    Served,
    answer,
    http_server,
    inprocess_server,
    policy_text,
    post,
    sdk_client,
    server_env,
    token,
)

MODERN = "2026-07-28"


@pytest.fixture(scope="module")
def keys() -> Iterator[KeySet]:
    keyset = KeySet()
    yield keyset
    keyset.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, keys: KeySet) -> Iterator[Served]:
    """One server with sessions for the module: elicitation approval, 30 s to answer."""
    with inprocess_server(tmp_path_factory.mktemp("http"),
                          policy_text(jwks_url=keys.url, timeout=30.0)) as server:
        yield server


@pytest.fixture(scope="module")
def hurried(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server whose questions expire after 1.5 s (the clients here take 4 s to answer)."""
    with inprocess_server(tmp_path_factory.mktemp("hurried"), policy_text(timeout=1.5)) \
            as server:
        yield server


@pytest.fixture(scope="module")
def stateless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A --stateless server: raw tools/call requests need no session."""
    with inprocess_server(tmp_path_factory.mktemp("stateless"), policy_text(),
                          stateless=True) as server:
        yield server


def records(served: Served) -> list[Any]:
    """The server's audit records so far, every pending one committed first."""
    return served.records()


def call_text(request_id: int, params: bytes | str) -> bytes:
    params = params.encode() if isinstance(params, str) else params
    return (b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": ' % request_id
            + params + b"}")


# --- list and call with the SDK's client --------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", MODERN])
def test_lists_and_calls_with_the_sdk_client(served: Served, mode: str) -> None:
    """Both protocol eras: tools/list gives the tools with outputSchema; a write and a read
    run; a refusal is an isError result; the SDK's client checks every structuredContent
    against the outputSchema; each call is recorded with the caller's name, never its token."""
    with sdk_client(served.url, token("alice"), mode=mode) as client:
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else MODERN)
        listed = client.list_tools().tools
        assert [tool.name for tool in listed] == ["write_register", "read_register"]
        assert all(tool.output_schema and tool.output_schema["type"] == "object"
                   for tool in listed)
        written = client.call("write_register", {"addr": 5, "data": 0x5A})
        read = client.call("read_register", {"addr": 5})
        refused = client.call("write_register", {"addr": 16, "data": 1})
    assert written.structured_content == {"ok": True, "tool": "write_register",
                                          "result": {"addr": 5, "data": 0x5A}}
    assert read.structured_content == {"ok": True, "tool": "read_register",
                                       "result": {"addr": 5, "data": 0x5A}}
    assert refused.is_error is True
    assert refused.structured_content == Gate().handle(
        '{"name": "write_register", "arguments": {"addr": 16, "data": 1}}',
        dialect="mcp").to_dict()
    last = records(served)[-3:]
    assert [(r.tool, r.code, r.caller, r.session, r.dialect) for r in last] == [
        ("write_register", None, "token:alice", "default", "mcp"),
        ("read_register", None, "token:alice", "default", "mcp"),
        ("write_register", "range-addr", "token:alice", "default", "mcp")]
    assert token("alice").encode() not in served.audit.read_bytes()
    assert token("alice") not in served.log()


def test_a_read_only_token_is_listed_only_the_tools_it_may_call(served: Served) -> None:
    """tools/list with a read-only token (session viewer): read_register only, never the
    write tool its scope would refuse (denied-write_register)."""
    with sdk_client(served.url, token("victor"), mode=MODERN) as client:
        assert [tool.name for tool in client.list_tools().tools] == ["read_register"]
    with sdk_client(served.url, token("alice"), mode=MODERN) as client:
        assert [tool.name for tool in client.list_tools().tools] == [
            "write_register", "read_register"]


def test_an_oauth_access_token_is_a_caller(served: Served, keys: KeySet) -> None:
    """A JWT signed by the authorization server's key, for this audience: the caller is
    oauth:SUBJECT and its scope chooses the session; a read-only scope is the viewer."""
    with sdk_client(served.url, keys.sign(), mode=MODERN) as client:
        assert client.call("write_register", {"addr": 6, "data": 1}).is_error is False
    viewer = keys.sign({"sub": "vera@lab", "scp": ["regdev:read"], "scope": None})
    with sdk_client(served.url, viewer) as client:
        denied = client.call("write_register", {"addr": 6, "data": 2})
        assert client.call("read_register", {"addr": 6}).structured_content["result"] == {
            "addr": 6, "data": 1}
    assert denied.structured_content["code"] == "denied-write_register"
    got = [(r.caller, r.session, r.code) for r in records(served)[-3:]]
    assert got == [("oauth:alice@lab", "default", None),
                   ("oauth:vera@lab", "viewer", "denied-write_register"),
                   ("oauth:vera@lab", "viewer", None)]


@pytest.mark.parametrize("case", ["expired", "audience", "issuer", "kid", "hs256", "key",
                                  "no-sub", "garbage"])
def test_bad_oauth_tokens_get_401(served: Served, keys: KeySet, case: str) -> None:
    """Expired, for another audience or issuer, an unknown key, HS256 signed with the public
    key set, another key, no subject, not a JWT: 401, and nothing reaches the gate."""
    from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415

    now = int(time.time())
    bad = {
        "expired": lambda: keys.sign({"exp": now - 3600, "iat": now - 7200}),
        "audience": lambda: keys.sign({"aud": "another-server"}),
        "issuer": lambda: keys.sign({"iss": "https://evil.test.invalid/"}),
        "kid": lambda: keys.sign(kid="unknown-key"),
        "hs256": keys.forged_hs256,
        "key": lambda: keys.sign(key=rsa.generate_private_key(public_exponent=65537,
                                                              key_size=2048)),
        "no-sub": lambda: keys.sign({"sub": None}),
        "garbage": lambda: "a.b.c",
    }[case]()
    before = len(records(served))
    response = post(served.url, call_text(1, '{"name": "read_register", '
                                             '"arguments": {"addr": 1}}'), bearer=bad)
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    assert len(records(served)) == before


# --- who may call -----------------------------------------------------------------------------


@pytest.mark.parametrize("bearer", [None, "not-a-token", "Basic " + "x" * 20, "Bearer"])
def test_401_without_or_with_a_bad_token_points_at_the_metadata(served: Served,
                                                                bearer: str | None) -> None:
    """No token, an unknown one, another scheme: 401 with WWW-Authenticate naming the
    protected-resource metadata, which is served (RFC 9728); nothing is recorded."""
    before = len(records(served))
    headers = {}
    if bearer is not None:
        headers["Authorization"] = bearer if bearer.startswith(("Basic", "Bearer")) \
            else f"Bearer {bearer}"
    response = post(served.url, call_text(1, '{"name": "read_register", '
                                             '"arguments": {"addr": 1}}'), headers=headers)
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    metadata_url = f"{served.base}/.well-known/oauth-protected-resource/mcp"
    assert challenge.startswith("Bearer ") and f'resource_metadata="{metadata_url}"' in challenge
    assert response.json()["error"] == "invalid_token"
    import httpx2  # noqa: PLC0415

    metadata = httpx2.get(metadata_url).json()
    assert metadata == {"resource": served.url, "authorization_servers": [ISSUER],
                        "scopes_supported": ["regdev:operate", "regdev:read"],
                        "bearer_methods_supported": ["header"], "resource_name": "regdev"}
    with pytest.raises(Exception) as caught, \
            sdk_client(served.url, None if bearer is None else "not-a-token") as client:
        client.list_tools()
    assert "MCPError: Server returned an error response" in _messages(caught.value)
    assert len(records(served)) == before


def _messages(error: BaseException) -> str:
    """The messages of an exception and of those it groups or was raised from."""
    found = [f"{type(error).__name__}: {error}"]
    for inner in getattr(error, "exceptions", ()):
        found.append(_messages(inner))
    if error.__cause__ is not None:
        found.append(_messages(error.__cause__))
    return "\n".join(found)


def test_a_read_only_token_is_refused_a_write_and_recorded(served: Served) -> None:
    """victor's token holds regdev:read: session viewer. Its write is denied-write_register,
    recorded with its name; its read runs; the device is not touched by the write."""
    with sdk_client(served.url, token("alice")) as client:
        client.call("write_register", {"addr": 9, "data": 33})
    with sdk_client(served.url, token("victor"), mode=MODERN) as client:
        listed = [tool.name for tool in client.list_tools().tools]
        denied = client.call("write_register", {"addr": 9, "data": 44})
        read = client.call("read_register", {"addr": 9})
    assert listed == ["read_register"]  # viewer is offered only what it may call
    assert denied.structured_content == {
        "ok": False, "stage": "authorize", "code": "denied-write_register",
        "message": "session viewer holds the read scope; write_register needs the write "
                   "scope, so this session cannot call it", "retryable": False}
    assert read.structured_content["result"] == {"addr": 9, "data": 33}
    denial, reading = records(served)[-2:]
    assert (denial.caller, denial.session, denial.code, denial.ok) == (
        "token:victor", "viewer", "denied-write_register", False)
    assert (reading.caller, reading.ok) == ("token:victor", True)


def test_a_token_whose_scopes_choose_no_session_gets_403(served: Served) -> None:
    """A valid token without any scope the server serves: 403 insufficient_scope, naming
    the scopes; bob (only regdev:approve) may approve on a page but not call."""
    for name in ("nobody", "bob"):
        response = post(served.url, call_text(1, '{"name": "read_register", '
                                                 '"arguments": {"addr": 1}}'),
                        bearer=token(name))
        assert response.status_code == 403
        challenge = response.headers["www-authenticate"]
        assert 'error="insufficient_scope"' in challenge
        assert 'scope="regdev:operate regdev:read"' in challenge


@pytest.mark.parametrize(("origin", "status"), [
    ("https://evil.test.invalid", 403), ("http://127.0.0.1:1", 403), ("null", 403),
    ("https://console.test.invalid", 200), (None, 200)])
def test_origin_is_validated(stateless: Served, origin: str | None, status: int) -> None:
    """A browser's Origin must be allowed (the policy's list, or the server's own origin):
    another one gets 403 before the token is even looked at, and nothing is recorded."""
    before = len(records(stateless))
    headers = {"Origin": origin} if origin is not None else {}
    response = post(stateless.url, call_text(7, '{"name": "read_register", '
                                                '"arguments": {"addr": 2}}'),
                    bearer=token("alice"), headers=headers)
    assert response.status_code == status, response.text
    assert len(records(stateless)) == before + (status == 200)
    own = post(stateless.url, call_text(8, '{"name": "read_register", "arguments": {"addr": 2}}'),
               bearer=token("alice"), headers={"Origin": f"http://127.0.0.1:{stateless.port}"})
    assert own.status_code == 200


@pytest.mark.parametrize("host", ["evil.test.invalid", "127.0.0.1:1", "localhost"])
def test_a_foreign_host_header_is_refused(stateless: Served, host: str) -> None:
    """Bound to 127.0.0.1, the server answers only for its loopback names with its port
    (DNS rebinding): another Host gets 421."""
    response = post(stateless.url, call_text(1, '{"name": "read_register", '
                                                '"arguments": {"addr": 2}}'),
                    bearer=token("alice"), headers={"Host": host})
    assert response.status_code == 421


# --- the same bytes as over stdio ----------------------------------------------------------------

#: Audit columns that differ between two runs of one call by nature (two servers have two
#: in-process devices; only HTTP authenticates its caller).
#: Columns that differ between the transports by design: times, the device's identity, who
#: the caller is (a token over HTTP) and the client's own name (the stdio test client says
#: clientInfo at initialize; the stateless HTTP requests here carry none).
VOLATILE = {"id", "time", "parse_ns", "validate_ns", "authorize_ns", "execute_ns",
            "observe_ns", "device", "device_epoch", "caller", "proposer", "intent"}


def _stdio_replies(home: Path, audit: Path, lines: list[bytes]) -> list[dict[str, Any]]:
    """The answers of `regdev serve` on stdio to ``lines`` (after the handshake), sent one
    at a time, each after the answer to the one before (as the HTTP requests are)."""
    regdev = str(Path(__import__("sys").executable).with_name("regdev"))
    process = subprocess.Popen(
        [regdev, "serve", "--audit", str(audit), "--log-level", "warning", "--policy",
         str(home / "policy.toml")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=server_env(home))
    assert process.stdin is not None and process.stdout is not None
    handshake = [b'{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": '
                 b'{"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": '
                 b'{"name": "t", "version": "0"}}}',
                 b'{"jsonrpc": "2.0", "method": "notifications/initialized"}']
    replies = []
    for number, line in enumerate([*handshake, *lines]):
        process.stdin.write(line + b"\n")
        process.stdin.flush()
        if number != 1:  # the notification gets no answer
            replies.append(json.loads(process.stdout.readline()))
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0 and b"Traceback" not in err, err
    return replies[1:]


def test_wild_calls_get_the_same_verdicts_and_records_as_over_stdio(
        stateless: Served, tmp_path: Path) -> None:
    """Every wild call of examples/wild-calls.jsonl, and calls that are not strict JSON, as
    the same bytes over HTTP and over stdio: the same answer (result or JSON-RPC error) and
    the same audit record, but for the caller and the times."""
    params: list[bytes] = [record.raw.encode() for _, record in
                           load_replay(EXAMPLES / "wild-calls.jsonl")]
    params += [b'{"name": "write_register", "arguments": {"addr": 3, "addr": 4, "data": 1}}',
               b'{"name": "write_register", "arguments": {"addr": NaN, "data": 1}}',
               b'{"name": "write_register", "arguments": {"addr": 3.0000000000000001, '
               b'"data": 1}}',
               b'{"name": "write_register", "arguments": {"addr": 2, "data": 7}, '
               b'"_meta": {"idempotency_key": "k-1"}}',
               b'{"name": "write_register", "arguments": "{\\"addr\\": 3}"}',
               b'{"name": "write_register", "arguments": {"addr": 15, "data": 1}}',
               b'{"name": "write_register", "arguments": {"addr": 0, "data": 1}}']
    bodies = [call_text(1000 + number, text) for number, text in enumerate(params)]
    before = len(records(stateless))
    over_http = [answer(post(stateless.url, body, bearer=token("alice"))) for body in bodies]
    home = tmp_path / "stdio"
    home.mkdir()
    (home / "policy.toml").write_text((stateless.audit.parent / "policy.toml").read_text())
    over_stdio = _stdio_replies(home, tmp_path / "stdio.db", bodies)
    assert over_http == over_stdio
    http_records = records(stateless)[before:]
    stdio_records = read_audit(tmp_path / "stdio.db")
    results = sum("result" in reply for reply in over_http)  # the rest are JSON-RPC errors
    assert len(http_records) == len(stdio_records) == results >= len(params) - 6
    for got, expected in zip(http_records, stdio_records, strict=True):
        mine = {k: v for k, v in got.to_dict().items() if k not in VOLATILE}
        theirs = {k: v for k, v in expected.to_dict().items() if k not in VOLATILE}
        assert mine == theirs
        assert (got.caller, expected.caller) == ("token:alice", None)
        assert (got.proposer, expected.proposer) == ("mcp", "mcp:t 0")


# --- approval by a person --------------------------------------------------------------------


def _answering(action: str, content: dict[str, Any] | None = None, *,
               delay: float = 0.0, asked: list[str] | None = None) -> Any:
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        if asked is not None:
            asked.append(params.message)
        if delay:
            await anyio.sleep(delay)
        return types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]
    return elicit


@pytest.mark.parametrize("mode", ["legacy", MODERN])
@pytest.mark.parametrize("case", [
    ("accept", {"approve": True}, True, None),
    ("accept", {"approve": False}, False, "answered no"),
    ("decline", None, False, "declined"),
    ("cancel", None, False, "dismissed without an answer"),
    ("accept", {"approve": "yes"}, False, "the answer does not fit the question's form"),
])
def test_a_protected_write_asks_the_callers_client(
        served: Served, mode: str, case: tuple[str, dict[str, Any] | None, bool, str]) -> None:
    """Register 15 is protected: the client is asked, with the caller, the register, its value
    now and the value to write; only accept with approve true runs the write; decline,
    cancel and a wrong answer are approval-denied saying which. The audit record names the
    approver and how it was asked."""
    action, content, ok, why = case
    asked: list[str] = []
    with sdk_client(served.url, token("alice"), mode=mode,
                    elicit=_answering(action, content, asked=asked)) as client:
        before = client.call("read_register", {"addr": 15}).structured_content["result"]["data"]
        value = (before + 1) % 256
        got = client.call("write_register", {"addr": 15, "data": value}).structured_content
        after = client.call("read_register", {"addr": 15}).structured_content["result"]["data"]
    assert asked == [f"token:alice asks to write {value} (0x{value:02X}) to protected "
                     f"register 15, which holds {before} (0x{before:02X}). Approve this write?"]
    assert got["ok"] is ok
    assert after == (value if ok else before)
    record = next(r for r in reversed(records(served)) if r.tool == "write_register")
    assert (record.caller, record.approval) == ("token:alice", "elicitation")
    if ok:
        assert record.approver == "token:alice" and record.code is None
    else:
        assert got["code"] == "approval-denied"
        assert got["message"] == ("register 15 is protected and the approver denied this "
                                  f"write ({why})")
        assert record.code == "approval-denied" and record.message == got["message"]


@pytest.mark.parametrize("mode", ["legacy", MODERN])
def test_a_question_not_answered_in_time_is_denied(hurried: Served, mode: str) -> None:
    """A yes that comes after the 1.5 s the policy allows does not run the write: the server
    stopped waiting (before 2026-07-28), or the sealed question expired (2026-07-28)."""
    with sdk_client(hurried.url, token("alice"), mode=mode,
                    elicit=_answering("accept", {"approve": True}, delay=4.0)) as client:
        got = client.call("write_register", {"addr": 15, "data": 42}).structured_content
        assert client.call("read_register", {"addr": 15}).structured_content["result"] == {
            "addr": 15, "data": 0}
    assert got["message"] == ("register 15 is protected and this write was not approved "
                              "(no answer within 1.5 s)")  # nobody said no: no "approver"


def test_a_client_that_cannot_be_asked_is_denied(served: Served) -> None:
    """A client without the elicitation capability: approval-denied saying so, at once."""
    with sdk_client(served.url, token("alice")) as client:
        got = client.call("write_register", {"addr": 15, "data": 200}).structured_content
    assert got["code"] == "approval-denied"
    assert "did not declare elicitation" in got["message"]


def test_a_2026_answer_with_a_tampered_or_reused_state_is_denied(served: Served) -> None:
    """2026-07-28: the question comes back as an InputRequiredResult with a sealed
    requestState. A state with one byte changed, a state for another call, and a state used
    twice are approval-denied; the untouched state with a yes runs the write once."""
    with sdk_client(served.url, token("alice"), mode=MODERN,
                    elicit=_answering("accept", {"approve": True})) as client:
        session = client.client.session

        def call(data: int, **extra: Any) -> Any:
            return client.portal.call(lambda: session.call_tool(
                "write_register", {"addr": 15, "data": data}, allow_input_required=True,
                **extra))

        first = call(77)
        assert isinstance(first, types.InputRequiredResult) and first.request_state
        (key,) = first.input_requests or {}
        yes = {key: types.ElicitResult(action="accept", content={"approve": True})}
        state = first.request_state
        flipped = state[:10] + ("A" if state[10] != "A" else "B") + state[11:]
        tampered = call(77, input_responses=yes, request_state=flipped)
        other = call(78, input_responses=yes, request_state=state)
        good = call(77, input_responses=yes, request_state=state)
        again = call(77, input_responses=yes, request_state=state)
    prefix = "register 15 is protected and this write was not approved ("  # no one answered
    answered = "register 15 is protected and the approver denied this write ("
    reasons = [result.structured_content["message"].removeprefix(prefix).removeprefix(answered)
               for result in (tampered, other, again)]
    assert again.structured_content["message"].startswith(answered)  # its approver is known
    assert reasons == ["the answer's requestState is not one this server sealed "
                       "(tampered, or from another server))",
                       "the answer is to a question about another call or caller)",
                       "this question was answered already)"]
    assert good.structured_content["ok"] is True


def test_a_pending_question_does_not_hold_the_device(served: Served) -> None:
    """While alice's client takes its time answering a question about register 15, carol's
    writes and reads of other registers run at once; then alice's yes runs her write."""
    answered = threading.Event()

    async def slow(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        await anyio.to_thread.run_sync(answered.wait, 120)
        return types.ElicitResult(action="accept", content={"approve": True})

    results: list[Any] = []
    with sdk_client(served.url, token("alice"), elicit=slow) as alice:
        worker = threading.Thread(target=lambda: results.append(
            alice.call("write_register", {"addr": 15, "data": 123})))
        worker.start()
        with sdk_client(served.url, token("carol")) as carol:
            for data in range(5):
                assert carol.call("write_register", {"addr": 4, "data": data}).is_error is False
            assert carol.call("read_register", {"addr": 4}).structured_content["result"][
                "data"] == 4
        assert not results  # alice's call is still waiting for its answer
        answered.set()
        worker.join(20)
    assert results[0].structured_content["ok"] is True


class _SlowWrite(HeldFirstWrite):
    """A device whose first write waits (up to 30 s) until register ``addr`` was read
    ``reads`` times: a write on its way (a slow device) while the other approved call checks
    the register, which is when two approved writes raced."""

    def __init__(self, addr: int, reads: int) -> None:
        super().__init__()
        self.addr, self.reads, self.seen = addr, reads, 0
        self.read_enough = threading.Event()

    def read(self, addr: int) -> int:
        if addr == self.addr:
            self.seen += 1
            if self.seen >= self.reads:
                self.read_enough.set()
        return super().read(addr)

    def first_write(self) -> None:
        self.read_enough.wait(30)


@pytest.mark.parametrize(("tool", "first", "second"), CALIB_WRITE_PAIRS)
def test_two_approved_writes_sent_at_once_run_once(
        tmp_path: Path, tool: str, first: dict[str, Any], second: dict[str, Any]) -> None:
    """Two writes of protected CALIB sent at once on a slow device, both approved over the
    value 0: the first runs, the second is approval-denied (its approver never saw 0x11 or
    0x22), for a register, a field and a block write."""
    device = _SlowWrite(3, reads=4)  # two questions asked, two answers checked
    asked: list[str] = []
    both_asked = threading.Event()

    async def yes(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        if len(asked) == 2:
            both_asked.set()
        await anyio.to_thread.run_sync(both_asked.wait, 30)
        return types.ElicitResult(action="accept", content={"approve": True})

    policy = policy_text().replace("protected = [15]", "protected = [3]")
    results: dict[str, Any] = {}
    with inprocess_server(tmp_path, policy, device=device) as server:
        def call(name: str, arguments: dict[str, Any]) -> None:
            with sdk_client(server.url, token(name), elicit=yes) as client:
                results[name] = client.call(tool, arguments).structured_content

        workers = [threading.Thread(target=call, args=("alice", first)),
                   threading.Thread(target=call, args=("carol", second))]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        written = [r for r in server.records() if r.tool == tool]
    assert len(asked) == 2
    ran = [name for name, got in results.items() if got["ok"]]
    assert len(ran) == 1, results
    denied = results["carol" if ran == ["alice"] else "alice"]
    held = 0x11 if ran == ["alice"] else 0x22
    assert denied["code"] == "approval-denied"
    assert denied["message"] in (  # checked under the register's lock, or at the answer
        "register CALIB (0x03) is protected and this write was not run: the approval was "
        f"given while it held 0 (0x00), and it holds {held} (0x{held:02X}) now (another "
        "write ran meanwhile); ask again",
        "register CALIB (0x03) is protected and the approver denied this write (register 3 "
        f"changed from 0 to {held} while the question was open; ask again)")
    assert device.snapshot()[3] == held
    assert sorted((r.ok, r.code) for r in written) == [(False, "approval-denied"), (True, None)]


@pytest.fixture(scope="module")
def by_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with inprocess_server(tmp_path_factory.mktemp("url"),
                          policy_text(via="url", timeout=30.0)) as server:
        yield server


def _page_url(served: Served, after: int) -> str:
    """The approval page the server logged after ``after`` lines of its log."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for line in served.stderr[after:]:
            if "approval needed:" in line:
                return line.split("answer at ")[1].split()[0]
        time.sleep(0.05)
    raise AssertionError(served.log())


def _answer_page(url: str, bearer: str, decision: str) -> tuple[int, str]:
    import httpx2  # noqa: PLC0415

    origin = url.split("/approve/", maxsplit=1)[0]
    response = httpx2.post(url, data={"token": bearer, "decision": decision},
                           headers={"Origin": origin})
    return response.status_code, response.text


#: The page that takes an answer, around what the answer makes happen.
_ANSWERED = ('<!doctype html><html><head><meta charset="utf-8"><title>regdev: Answer recorded'
             "</title></head><body><h1>Answer recorded</h1><p>{}</p></body></html>")


@pytest.mark.parametrize("mode", ["legacy", MODERN])
def test_a_url_approval_is_signed_by_another_person(by_url: Served, mode: str) -> None:
    """via = url: the question is a page the server serves. The caller's own token cannot
    answer it, nor a token without regdev:approve; bob's yes runs alice's write, and the
    audit record says bob approved it on the page."""
    after = len(by_url.stderr)
    results: list[Any] = []
    shown: list[str] = []

    async def open_page(context: Any, params: Any) -> types.ElicitResult:
        shown.append(params.url)
        return types.ElicitResult(action="accept")

    with sdk_client(by_url.url, token("alice"), mode=mode, elicit=open_page) as alice:
        worker = threading.Thread(target=lambda: results.append(
            alice.call("write_register", {"addr": 15, "data": 99})))
        worker.start()
        url = _page_url(by_url, after)
        import httpx2  # noqa: PLC0415

        page = httpx2.get(url)
        assert page.status_code == 200 and "token:alice asks to write 99 (0x63)" in page.text
        assert page.headers["x-frame-options"] == "DENY"
        assert _answer_page(url, token("alice"), "approve")[0] == 403  # the caller
        assert _answer_page(url, token("victor"), "approve")[0] == 403  # no regdev:approve
        assert _answer_page(url, "not-a-token", "approve")[0] == 403
        held = page.text.split("which holds ", 1)[1].split(")", 1)[0] + ")"  # 0 (0x00)...
        assert _answer_page(url, token("bob"), "approve") == (200, _ANSWERED.format(
            f"Approved: the write runs now, unless register 15 no longer holds {held} or the "
            "caller has gone; the caller is told the result."))
        assert _answer_page(url, token("bob"), "deny")[0] == 404  # answered: closed
        worker.join(30)
    assert shown == [url]
    assert results[0].structured_content["ok"] is True
    record = next(r for r in reversed(records(by_url)) if r.tool == "write_register")
    assert (record.ok, record.caller, record.approver, record.approval) == (
        True, "token:alice", "token:bob", "url")


@pytest.fixture(scope="module")
def by_url_hurried(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with inprocess_server(tmp_path_factory.mktemp("url-hurried"),
                          policy_text(via="url", timeout=1.5)) as server:
        yield server


def test_a_denied_or_unanswered_url_approval_is_approval_denied(
        by_url: Served, by_url_hurried: Served) -> None:
    """bob's deny on the page, and no answer within the timeout: approval-denied, and the
    write does not run; the records say who denied, and that nobody answered."""
    after = len(by_url.stderr)
    results: list[Any] = []
    with sdk_client(by_url.url, token("alice")) as alice:
        worker = threading.Thread(target=lambda: results.append(
            alice.call("write_register", {"addr": 15, "data": 5})))
        worker.start()
        assert _answer_page(_page_url(by_url, after), token("bob"), "deny") == (
            200, _ANSWERED.format("Denied: the write will not run; the caller is told it was "
                                  "denied."))
        worker.join(30)
    with sdk_client(by_url_hurried.url, token("alice")) as alice:
        timed_out = alice.call("write_register", {"addr": 15, "data": 6})
        read = alice.call("read_register", {"addr": 15})
    assert results[0].structured_content["message"].endswith("(denied on the approval page)")
    assert timed_out.structured_content["message"].endswith("(no answer within 1.5 s)")
    assert read.structured_content["result"]["data"] == 0
    denied = next(r for r in reversed(records(by_url)) if r.tool == "write_register")
    unanswered = next(r for r in reversed(records(by_url_hurried)) if r.tool == "write_register")
    assert (denied.approver, denied.approval, denied.ok) == ("token:bob", "url", False)
    assert (unanswered.approver, unanswered.approval, unanswered.ok) == (None, "url", False)


# --- the policy and the command line -----------------------------------------------------------


def test_the_command_serves_and_stops_cleanly(tmp_path: Path) -> None:
    """`regdev serve --http 127.0.0.1:0` as a process: it logs its URL, serves a caller, and
    SIGTERM ends it with status 0, no traceback, and the caller's calls in the audit log."""
    with http_server(tmp_path, policy_text(), "--stateless") as served:
        assert served.url.startswith("http://127.0.0.1:") and served.url.endswith("/mcp")
        with sdk_client(served.url, token("alice"), mode=MODERN) as client:
            assert client.call("write_register", {"addr": 2, "data": 9}).is_error is False
            assert client.call("read_register", {"addr": 2}).structured_content["result"] == {
                "addr": 2, "data": 9}
    assert "stopping on SIGTERM" in served.log() and "stopped" in served.log()
    assert [(r.tool, r.ok, r.caller) for r in read_audit(served.audit)] == [
        ("write_register", True, "token:alice"), ("read_register", True, "token:alice")]



def test_serve_http_needs_a_policy_with_callers(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Without --policy, or with a policy lacking [http], --http refuses to start (exit 2,
    one line): it serves no caller it cannot name. A bad address repeats the form."""
    from regdev.cli._main import main  # noqa: PLC0415

    bare = tmp_path / "bare.toml"
    bare.write_text("timeout = 1.0\n")
    for options in ([], ["--policy", str(bare)]):
        assert main(["serve", "--http", "127.0.0.1:0", "--no-audit", *options]) == 2
        assert capsys.readouterr().err.startswith(
            "regdev serve: error: --http needs --policy FILE with an [http] table")
    for bad in ("127.0.0.1:99999", "host:port", "::1:80", ""):
        assert main(["serve", "--http", bad, "--no-audit"]) == 2
        err = capsys.readouterr().err
        assert err == (f"regdev serve: error: --http takes [HOST:]PORT (127.0.0.1:8000, "
                       f"[::1]:8000, 8000), got {bad!r}\n")
    assert main(["serve", "--stateless"]) == 2
    assert capsys.readouterr().err == ("regdev serve: error: --stateless goes with --http "
                                       "[HOST:]PORT\n")


def test_policy_scopes_must_name_declared_sessions() -> None:
    """http.scopes naming a session the policy does not declare is refused when loaded."""
    from regdev import PolicyError  # noqa: PLC0415

    with pytest.raises(PolicyError, match="names session 'operators', which the policy "
                                          "does not declare"):
        Policy.from_dict({"http": {"scopes": {"regdev:operate": "operators"}}})
    policy = Policy.from_dict({"sessions": {"ops": {}},
                               "http": {"scopes": {"regdev:operate": "ops"}}})
    assert policy.http is not None and policy.http.scopes == {"regdev:operate": "ops"}


def test_the_example_policy_loads_and_its_tokens_are_what_it_says() -> None:
    """examples/http-policy.toml is valid, and each example token written in its comments is
    the one whose SHA-256 it declares, with the scopes the comments say."""
    import hashlib  # noqa: PLC0415

    policy = Policy.from_file(EXAMPLES / "http-policy.toml")
    assert policy.http is not None and policy.approval.via == "url"
    text = (EXAMPLES / "http-policy.toml").read_text()
    for name, scopes in (("alice", ("regdev:operate",)), ("viewer", ("regdev:read",)),
                         ("bob", ("regdev:approve",))):
        secret = text.split(f"#   {name}:")[1].split()[0]
        declared = policy.http.tokens[name]
        assert declared.sha256 == hashlib.sha256(secret.encode()).hexdigest()
        assert declared.scopes == scopes



@pytest.mark.parametrize("seconds", [0, -1, 5e-324, 1e-300, 1e-7, float("nan"), float("inf"),
                                     86400.5, 1e300])
def test_a_body_time_out_of_range_is_refused_before_serving(seconds: float) -> None:
    """``body_seconds`` (how long a client has to send a body) outside 0.001..86400, NaN or
    infinite: ValueError naming it and the range, before anything listens."""
    from regdev.server._approval import approvals_for  # noqa: PLC0415
    from regdev.server._http import build_http_app  # noqa: PLC0415

    loaded = Policy.from_dict(tomllib.loads(policy_text()))
    device = RegisterFile()
    with Gate(device, policy=loaded) as gate, pytest.raises(ValueError) as raised:
        build_http_app(gate, loaded, approvals_for(loaded, device), host="127.0.0.1",
                       port=8000, body_seconds=seconds)
    assert str(raised.value) == ("body_seconds must be a number of seconds in 0.001..86400, "
                                 f"got {seconds!r}")


def test_callers_sessions_are_an_lru_of_bounded_size() -> None:
    """The live sessions of callers (each with its own rate-limit bucket) are bounded: past
    the cap the least recently used is dropped, and comes back as a new session with a full
    bucket; a caller served again keeps its session (and its spent bucket)."""
    from regdev.server._auth import Caller  # noqa: PLC0415
    from regdev.server._http import MAX_CALLER_SESSIONS, CallerSessions  # noqa: PLC0415

    policy = Policy.from_dict({"rate_limit": {"rate": 1e-6, "burst": 1}})
    callers = [Caller(f"oauth:subject-{n}", frozenset({"regdev:operate"}), "default")
               for n in range(4)]
    with Gate(RegisterFile(), policy=policy) as gate:
        assert CallerSessions(gate, policy).cap == MAX_CALLER_SESSIONS == 4096
        sessions = CallerSessions(gate, policy, cap=2)
        first = sessions.session(callers[0])
        assert first.caller == "oauth:subject-0" and first.take_token() is None
        assert first.take_token() is not None  # its bucket is spent
        second = sessions.session(callers[1])
        assert sessions.session(callers[0]) is first  # used again: now the most recent
        sessions.session(callers[2])  # over the cap: drops subject-1, the least recent
        assert len(sessions) == 2
        assert sessions.session(callers[0]) is first
        again = sessions.session(callers[1])
        assert again is not second and again.take_token() is None  # new: a full bucket
        assert len(sessions) == 2 and sessions.session(callers[0]) is first
        for caller in callers:
            sessions.session(caller)
        assert len(sessions) == 2
        with pytest.raises(ValueError, match="cap must be an int >= 1"):
            CallerSessions(gate, policy, cap=0)


def test_a_refused_origin_and_host_are_shown_escaped_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """The server's log line and the 403/421 message quote the header escaped exactly once
    (ESC as ``\\x1b``, not ``\\\\x1b``), in backticks, through serve's log formatter."""
    import logging  # noqa: PLC0415

    from regdev.cli._output import LogFormatter  # noqa: PLC0415
    from regdev.server._http import Guard  # noqa: PLC0415

    guard = Guard(frozenset({"127.0.0.1:8000"}), frozenset())
    origin = "http://e\x1b[31mvil\x07"
    scope = {"headers": [(b"host", b"127.0.0.1:8000"), (b"origin", origin.encode("latin-1"))]}
    with caplog.at_level(logging.WARNING, logger="regdev"):
        refused = guard.check(scope)
    assert refused is not None and refused.status_code == 403
    formatter = LogFormatter("regdev serve: %(levelname)s %(name)s: %(message)s")
    assert [formatter.format(record) for record in caplog.records] == [
        "regdev serve: WARNING regdev: refused a request from the origin "
        "`http://e\\x1b[31mvil\\x07`"]
    assert json.loads(bytes(refused.body))["error"]["message"] == (
        "requests from the origin `http://e\\x1b[31mvil\\x07` are not allowed (the policy's "
        "http.allowed_origins)")
    host = guard.check({"headers": [(b"host", b"e\\vil`\x1b")]})
    assert host is not None and json.loads(bytes(host.body))["error"]["message"] == (
        "this server does not answer for the host `e\\\\vil\\x60\\x1b`")


@pytest.fixture(scope="module")
def by_url_stateless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with inprocess_server(tmp_path_factory.mktemp("url-stateless"),
                          policy_text(via="url", timeout=30.0), stateless=True) as server:
        yield server


def test_a_caller_that_goes_away_withdraws_its_approval_question(
        by_url_stateless: Served) -> None:
    """alice's client gives up (closes its connection) while her write waits on the page:
    the question is withdrawn, bob's late yes finds it closed (404), the write does not run,
    and the record says approval-denied because the caller went away."""
    import httpx2  # noqa: PLC0415

    served = by_url_stateless
    after = len(served.stderr)
    gave_up: list[BaseException] = []

    def call() -> None:
        try:
            post(served.url, call_text(31, '{"name": "write_register", "arguments": '
                                           '{"addr": 15, "data": 77}}'),
                 bearer=token("alice"), timeout=1.0)
        except httpx2.TimeoutException as error:
            gave_up.append(error)

    worker = threading.Thread(target=call)
    worker.start()
    url = _page_url(served, after)
    worker.join(30)
    assert gave_up  # the client went away before anyone answered
    deadline = time.monotonic() + 20
    record = None
    while record is None and time.monotonic() < deadline:
        record = next((r for r in reversed(records(served)) if r.tool == "write_register"),
                      None)
        time.sleep(0.05)
    assert _answer_page(url, token("bob"), "approve")[0] == 404
    assert record is not None
    assert (record.ok, record.code, record.approval, record.approver) == (
        False, "approval-denied", "url", None)
    assert record.message.endswith("(the caller went away)")
    read = post(served.url, call_text(32, '{"name": "read_register", "arguments": '
                                          '{"addr": 15}}'), bearer=token("alice"))
    assert answer(read)["result"]["structuredContent"]["result"]["data"] == 0


def _open_session(served: Served, bearer: str,
                  capabilities: dict[str, Any] | None = None) -> dict[str, str]:
    """A session opened with raw requests (initialize, then initialized): the headers that
    go with every later request in it."""
    opened = post(served.url, json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities or {},
            "clientInfo": {"name": "raw", "version": "0"}}}), bearer=bearer)
    assert opened.status_code == 200, opened.text
    headers = {"Mcp-Session-Id": opened.headers["mcp-session-id"],
               "Mcp-Protocol-Version": "2025-11-25"}
    assert post(served.url, b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
                bearer=bearer, headers=headers).status_code == 202
    return headers


def _register(served: Served, headers: dict[str, str], addr: int) -> int:
    """Register ``addr``'s value, read by alice in the session of ``headers``."""
    read = post(served.url, call_text(40, '{"name": "read_register", "arguments": '
                                          f'{{"addr": {addr}}}}}'), bearer=token("alice"),
                headers=headers)
    data: int = answer(read)["result"]["structuredContent"]["result"]["data"]
    return data


def _leave_after(served: Served, body: bytes, bearer: str, headers: dict[str, str],
                 how: str) -> None:
    """POST ``body`` in the session of ``headers`` and go away before any answer: ``socket``
    sends it on a raw socket, waits 1.5 s and closes it; ``timeout`` is an HTTP client whose
    read times out after 1 s (it then closes its connection)."""
    import socket  # noqa: PLC0415

    import httpx2  # noqa: PLC0415

    if how == "timeout":
        with pytest.raises(httpx2.TimeoutException):
            post(served.url, body, bearer=bearer, headers=headers, timeout=1.0)
        return
    sent = {**MCP_HEADERS, **headers, "Authorization": f"Bearer {bearer}",
            "Host": f"127.0.0.1:{served.port}", "Content-Length": str(len(body))}
    head = "".join(f"{name}: {value}\r\n" for name, value in sent.items())
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(f"POST /mcp HTTP/1.1\r\n{head}\r\n".encode() + body)
        time.sleep(1.5)


@pytest.mark.parametrize("how", ["socket", "timeout"])
def test_a_caller_that_goes_away_withdraws_its_question_in_a_session(
        by_url: Served, how: str) -> None:
    """The session mode keeps the promise of --stateless: alice's tools/call in her session
    waits on the page, and her connection closes (a raw socket closed after 1.5 s, or a
    client whose read times out): the question is withdrawn at once (the page answers 404,
    bob's yes comes too late), the write never reaches the device, and the record says
    approval-denied because the caller went away. Her session still serves her."""
    served = by_url
    headers = _open_session(served, token("alice"))
    held = _register(served, headers, 15)
    after = len(served.stderr)
    before = len(records(served))
    body = call_text(41, '{"name": "write_register", "arguments": {"addr": 15, "data": 11}}')
    leaving = threading.Thread(target=_leave_after,
                               args=(served, body, token("alice"), headers, how))
    leaving.start()
    url = _page_url(served, after)
    leaving.join(30)
    deadline = time.monotonic() + 20
    written: list[Any] = []
    while not written and time.monotonic() < deadline:
        written = [r for r in records(served)[before:] if r.tool == "write_register"]
        time.sleep(0.05)
    assert _answer_page(url, token("bob"), "approve")[0] == 404
    import httpx2  # noqa: PLC0415

    assert httpx2.get(url).status_code == 404
    assert [(r.ok, r.code, r.approval, r.approver, r.caller) for r in written] == [
        (False, "approval-denied", "url", None, "token:alice")]
    assert written[0].message.endswith("(the caller went away)")
    assert _register(served, headers, 15) == held  # her session serves her still
    question = url.rstrip("/").rsplit("/", 1)[-1]
    deadline = time.monotonic() + 20  # the log line may reach the pipe after the record
    while (not any("withdrawn" in line for line in served.stderr[after:])
           and time.monotonic() < deadline):
        time.sleep(0.05)
    assert [line for line in served.stderr[after:] if "withdrawn" in line] == [
        f"regdev serve: INFO regdev: approval question {question} withdrawn: the caller went "
        "away\n"]


def test_a_caller_that_goes_away_withdraws_its_elicitation_in_a_session(served: Served) -> None:
    """via = elicitation, in a session: the question goes to alice's client on her POST's
    stream, and her connection closes before she answers: the question is withdrawn at once
    (not after its 30 s), the write never runs, and the record says the caller went away."""
    headers = _open_session(served, token("alice"), {"elicitation": {"form": {}}})
    held = _register(served, headers, 15)
    before = len(records(served))
    body = call_text(43, '{"name": "write_register", "arguments": {"addr": 15, "data": 12}}')
    _leave_after(served, body, token("alice"), headers, "socket")
    deadline = time.monotonic() + 10  # well before the question's own 30 s
    written: list[Any] = []
    while not written and time.monotonic() < deadline:
        written = [r for r in records(served)[before:] if r.tool == "write_register"]
        time.sleep(0.05)
    assert [(r.ok, r.code, r.approval, r.approver) for r in written] == [
        (False, "approval-denied", "elicitation", None)]
    assert written[0].message.endswith("(the caller went away)")
    assert _register(served, headers, 15) == held  # her session serves her still


_NOT_JSON = ("Unsupported Media Type: Content-Type {} is not JSON; send the body as "
             "`Content-Type: application/json` (UTF-8)")


@pytest.mark.parametrize(("content_type", "status", "message"), [
    ("text/plain", 415, _NOT_JSON.format("`text/plain`")),
    ("application/x-www-form-urlencoded", 415,
     _NOT_JSON.format("`application/x-www-form-urlencoded`")),
    ("application/jsonx", 415, _NOT_JSON.format("`application/jsonx`")),
    ("application/json, text/plain", 415, _NOT_JSON.format("`application/json, text/plain`")),
    ("application/json;;", 415, _NOT_JSON.format("`application/json;;`")),
    (None, 415, "Unsupported Media Type: the request has no Content-Type; send the body as "
                "`Content-Type: application/json` (UTF-8)"),
    ("application/json; charset=latin-1", 415, "Unsupported Media Type: the charset "
     "`latin-1` is not served; JSON is read as UTF-8 only; send the body as "
     "`Content-Type: application/json` (UTF-8)"),
    ("application/json; charset=utf-16", 415, "Unsupported Media Type: the charset "
     "`utf-16` is not served; JSON is read as UTF-8 only; send the body as "
     "`Content-Type: application/json` (UTF-8)"),
    ("Application/JSON; charset=\"UTF-8\"", 200, None),
    ("application/json; charset=utf-8; profile=x", 200, None),
    ("application/json", 200, None),
])
def test_the_media_type_must_be_json_in_utf_8(stateless: Served, content_type: str | None,
                                              status: int, message: str | None) -> None:
    """A POST whose Content-Type is not application/json (none, another type, a list, one
    that cannot be parsed) or names a charset other than UTF-8: 415 with a JSON-RPC error
    saying what was sent and what is served, and nothing is recorded or run; JSON in UTF-8
    (any case, other parameters ignored) is served."""
    import httpx2  # noqa: PLC0415

    before = len(records(stateless))
    headers = {"Authorization": f"Bearer {token('alice')}",
               "Accept": "application/json, text/event-stream"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    with httpx2.Client() as client:
        response = client.post(stateless.url, headers=headers, content=call_text(
            51, '{"name": "write_register", "arguments": {"addr": 6, "data": 6}}'))
    assert response.status_code == status, response.text
    done = records(stateless)[before:]
    if message is None:
        assert answer(response)["result"]["structuredContent"]["ok"] is True
        assert [(r.tool, r.ok) for r in done] == [("write_register", True)]
        return
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"jsonrpc": "2.0", "id": None,
                               "error": {"code": -32600, "message": message}}
    assert done == []


def test_approval_questions_name_the_register_and_field_and_decode_the_values() -> None:
    """With a map, the question names the register and its fields and decodes their values
    (enum names, the value now); write_field's question shows the field's value now; the
    default map keeps numbers by address."""
    from regdev.cli._common import read_map  # noqa: PLC0415
    from regdev.gate._policy import ApprovalRequest  # noqa: PLC0415
    from regdev.server._approval import approvals_for, describe  # noqa: PLC0415

    sensor = read_map(EXAMPLES / "sensor.rdl")
    field = ApprovalRequest("default", "write_field", {"field": "CTRL.MODE", "value": "ONESHOT"},
                            1, "token:alice")
    assert describe(field, 0x05, sensor) == (
        "token:alice asks to set CTRL.MODE to ONESHOT (1), which is CONTINUOUS (2), in "
        "protected register CTRL (0x01). Approve this write?")
    by_number = ApprovalRequest("default", "write_field", {"field": "CTRL.MODE", "value": 2}, 1)
    assert describe(by_number, None, sensor).startswith(
        "a caller in session default asks to set CTRL.MODE to CONTINUOUS (2), which is a value "
        "that could not be read, in protected register CTRL (0x01)")
    write = ApprovalRequest("default", "write_register", {"addr": 1, "data": 0x03}, 1,
                            "token:alice")
    assert describe(write, 0x05, sensor) == (
        "token:alice asks to write 0x03 to protected register CTRL (0x01), which holds 0x05: "
        "set CTRL.MODE to ONESHOT (1), which is CONTINUOUS (2). Approve this write?")
    plain = ApprovalRequest("default", "write_register", {"addr": 3, "data": 7}, 3)
    assert describe(plain, 3, None) == (
        "a caller in session default asks to write 7 (0x07) to protected register 3, which "
        "holds 3 (0x03). Approve this write?")
    loaded = Policy.from_dict({"approval": {"via": "url"}})
    approvals = approvals_for(loaded, RegisterFile(regmap=sensor))
    question = approvals._open_question(field, "url")  # the text it asks with
    assert question is not None
    assert question.text.startswith("token:alice asks to set CTRL.MODE to ONESHOT (1), which "
                                    "is SLEEP (0)")
