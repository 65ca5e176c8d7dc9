"""OAuth access tokens on `regdev serve --http`, against an issuer served by the test on
127.0.0.1 that is rotated, slowed and broken: the key set's cache, its fetch (one at a time,
with a deadline, backing off after failures), the caller's identity, scopes and times."""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from regdev import Policy, PolicyError
from regdev.server import _auth
from regdev.server._auth import TokenCheck
from support.httpserver import KID, KeySet, Served, inprocess_server, policy_text, post

READ = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_register", "arguments": {"addr": 1}}}'  # noqa: E501


class Clock:
    """A monotonic clock the test moves (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def keys() -> Iterator[KeySet]:
    keyset = KeySet()
    yield keyset
    keyset.close()


def check_for(keys: KeySet, clock: Clock | None = None) -> TokenCheck:
    """The token check of the tests' policy, on ``keys``' set (and ``clock``)."""
    access = Policy.from_dict(_toml(policy_text(jwks_url=keys.url))).http
    assert access is not None
    return TokenCheck(access, clock=clock) if clock is not None else TokenCheck(access)


def _toml(text: str) -> dict[str, Any]:
    import tomllib  # noqa: PLC0415

    return tomllib.loads(text)


def verify(check: TokenCheck, token: str) -> Any:
    """``check.verify_token(token)`` run to its end (at most 60 s: AssertionError after)."""
    found: list[Any] = []
    thread = threading.Thread(target=lambda: found.append(anyio.run(check.verify_token, token)),
                              daemon=True)
    thread.start()
    thread.join(60)
    assert found, "the token check did not end within 60 s"
    return found[0]


def lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "regdev" and r.levelno == level]


# --- 1. rotation ---------------------------------------------------------------------------


def test_a_removed_key_stops_verifying_within_the_refresh_time(keys: KeySet) -> None:
    """A key removed from the set verifies until the keys are 300 s old, not after; the
    set is fetched again then, and its remaining key still verifies."""
    clock = Clock()
    keys.add_key("rsa2")
    check = check_for(keys, clock)
    old, new = keys.sign(kid=KID), keys.sign(kid="rsa2")
    assert verify(check, old) is not None and verify(check, new) is not None
    keys.published.remove(KID)
    clock.now += 299
    assert verify(check, old) is not None  # the keys fetched 299 s ago
    assert keys.fetches == 1
    clock.now += 2
    assert verify(check, old) is None
    assert verify(check, new) is not None
    assert keys.fetches == 2


# --- 2. subjects alike up to the cut ---------------------------------------------------------


@pytest.fixture
def stateful(tmp_path: Path, keys: KeySet) -> Iterator[Served]:
    with inprocess_server(tmp_path, policy_text(jwks_url=keys.url)) as server:
        yield server


def test_a_verified_token_is_taken_again_until_its_exp_or_60_s(
        keys: KeySet, monkeypatch: pytest.MonkeyPatch) -> None:
    """A JWT verified once is taken again without its signature checked (no second decode),
    for at most 60 s of the clock, and never once its exp and leeway are past (wall clock);
    then it is verified anew."""
    clock = Clock()
    check = check_for(keys, clock)
    decoded: list[str] = []
    decode = _auth.jwt.decode

    def counted(token: str, *args: Any, **kwargs: Any) -> Any:
        decoded.append(token)
        return decode(token, *args, **kwargs)

    monkeypatch.setattr(_auth.jwt, "decode", counted)
    now = time.time()
    token = keys.sign({"exp": int(now) + 100})
    first = verify(check, token)
    assert first is not None and verify(check, token) == first and len(decoded) == 1
    clock.now += 61  # past VERIFIED_SECONDS: verified again
    assert verify(check, token) == first and len(decoded) == 2
    leeway = 30.0  # the policy's default
    monkeypatch.setattr(_auth.time, "time", lambda: int(now) + 100 + leeway + 1)
    assert verify(check, token) is None and len(decoded) == 3  # expired: decoded, refused
    assert check._verified.get(token) is None


def test_subjects_alike_up_to_the_cut_are_two_callers(stateful: Served, keys: KeySet) -> None:
    """Two subjects that differ only past the 200-character cut of the shown name: two audit
    names, each with a digest of its subject, and one cannot use the other's MCP session."""
    from regdev.server._access import caller_name  # noqa: PLC0415

    first, second = "\u5b9f" * 35 + "-a", "\u5b9f" * 35 + "-b"
    names = [caller_name("oauth", first), caller_name("oauth", second)]
    assert names[0] != names[1]
    for subject, name in zip((first, second), names, strict=True):
        digest = hashlib.sha256(subject.encode()).hexdigest()[:16]
        assert name == "oauth:" + "\\u5b9f" * 30 + "...#" + digest and len(name) == 206
    tokens = [keys.sign({"sub": first}), keys.sign({"sub": second})]
    init = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}})
    opened = post(stateful.url, init, bearer=tokens[0])
    assert opened.status_code == 200, opened.text
    session = {"mcp-session-id": opened.headers["mcp-session-id"],
               "mcp-protocol-version": "2025-11-25"}
    assert post(stateful.url, '{"jsonrpc": "2.0", "method": "notifications/initialized"}',
                bearer=tokens[0], headers=session).status_code == 202
    write = (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": '
             b'"write_register", "arguments": {"addr": 4, "data": 7}}}')
    assert post(stateful.url, write, bearer=tokens[1], headers=session).status_code == 404
    assert stateful.records() == []
    assert post(stateful.url, write, bearer=tokens[0], headers=session).status_code == 200
    assert [(r.caller, r.ok) for r in stateful.records()] == [(names[0], True)]


def test_callers_alike_up_to_the_cut_get_two_sessions(keys: KeySet) -> None:
    """The live session (and its rate-limit bucket) is the whole subject's: two subjects
    alike up to the cut get two."""
    from regdev import Gate, RegisterFile  # noqa: PLC0415
    from regdev.server._http import CallerSessions  # noqa: PLC0415

    check = check_for(keys)
    callers = [check.caller(verify(check, keys.sign({"sub": "\u5b9f" * 35 + end})))
               for end in "ab"]
    policy = Policy.from_dict({"rate_limit": {"rate": 1e-6, "burst": 1}})
    with Gate(RegisterFile(), policy=policy) as gate:
        sessions = CallerSessions(gate, policy)
        one, two = (sessions.session(caller) for caller in callers)
        assert one is not two and len(sessions) == 2
        assert one.take_token() is None and two.take_token() is None


# --- 3. scopes -------------------------------------------------------------------------------


@pytest.mark.parametrize("separator", ["\u00a0", "\t", "\u3000", "\u001f", "\u0085", "\n"])
def test_scopes_are_separated_by_spaces_only(keys: KeySet, separator: str) -> None:
    """RFC 6749 section 3.3: only U+0020 separates scopes; with any other whitespace the
    string is one scope, which chooses no session (403)."""
    check = check_for(keys)
    joined = verify(check, keys.sign({"scope": f"regdev:read{separator}regdev:operate"}))
    assert joined.scopes == [f"regdev:read{separator}regdev:operate"]
    assert check.caller(joined).session is None
    spaced = verify(check, keys.sign({"scope": "regdev:read  regdev:operate"}))
    assert spaced.scopes == ["regdev:operate", "regdev:read"]
    assert check.caller(spaced).session == "default"


# --- 4. a slow key set and a flood of unknown keys ------------------------------------------


@pytest.fixture
def stateless(tmp_path: Path, keys: KeySet) -> Iterator[Served]:
    with inprocess_server(tmp_path, policy_text(jwks_url=keys.url), stateless=True) as server:
        yield server


def _send(port: int, bearer: str) -> socket.socket:
    """A tools/call POST sent on a new connection (the answer is read later)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=90)
    sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n"
                 b"Content-Type: application/json\r\nAccept: application/json, "
                 b"text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
                 % (port, bearer.encode(), len(READ), READ))
    return sock


def _status(sock: socket.socket) -> int:
    import http.client  # noqa: PLC0415

    with sock:
        response = http.client.HTTPResponse(sock, method="POST")
        response.begin()
        response.read()
        return response.status


def test_a_stalled_key_set_and_unknown_keys_do_not_hold_up_known_keys(
        stateless: Served, keys: KeySet, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the key set stalls and 40 tokens of unknown keys wait for it, a token of a known
    key is answered; the 40 share one fetch, and get 401 once it ends."""
    monkeypatch.setattr(_auth, "JWKS_TIMEOUT", 60.0)
    monkeypatch.setattr(_auth, "JWKS_COOLDOWN", 0.0)  # an unknown key may fetch at once
    known = keys.sign()
    assert post(stateless.url, READ, bearer=known).status_code == 200
    assert keys.fetches == 1
    keys.stall = threading.Event()
    flood = [_send(stateless.port, keys.sign(kid=f"unknown-{n}")) for n in range(40)]
    keys.wait_fetches(2)
    answered = post(stateless.url, READ, bearer=known, timeout=30)
    assert answered.status_code == 200
    assert keys.fetches == 2
    monkeypatch.setattr(_auth, "JWKS_COOLDOWN", 30.0)  # from the end of the stalled fetch
    keys.stall.set()
    assert [_status(sock) for sock in flood] == [401] * 40
    assert keys.fetches == 2
    assert "Traceback" not in stateless.log()


# --- 5. a trickling key set -----------------------------------------------------------------


def test_a_trickling_key_set_is_given_up_at_the_deadline(
        keys: KeySet, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A key set sent one byte a second is abandoned when the whole fetch has taken
    JWKS_TIMEOUT (3 s here): the token is refused and the reason logged."""
    monkeypatch.setattr(_auth, "JWKS_TIMEOUT", 3.0)
    keys.trickle = 1.0
    check = check_for(keys)
    with caplog.at_level(logging.INFO, logger="regdev"):
        assert verify(check, keys.sign()) is None
    assert lines(caplog, logging.WARNING) == [
        f"the key set at {keys.url} cannot be used: no answer within 3 s; tried again in 5 s "
        "at the earliest"]


# --- 6. cooldown after failures -------------------------------------------------------------


def _break(keys: KeySet, how: str) -> None:
    if how == "500":
        keys.status = 500
    elif how == "close":
        keys.close_connection = True
    elif how == "not-json":
        keys.body = b"<html>not json</html>"
    else:  # no usable key
        keys.body = json.dumps({"keys": [{"kty": "RSA", "kid": "x", "alg": "none"}]}).encode()


@pytest.mark.parametrize("how", ["500", "close", "not-json", "no-usable-key"])
def test_failed_fetches_back_off(keys: KeySet, how: str) -> None:
    """While the key set fails (500, connection closed, not JSON, no usable key), 20 tokens
    of unknown keys fetch it once; the next fetch waits 5 s, the one after 10 s; once it
    works again, the keys verify."""
    clock = Clock()
    check = check_for(keys, clock)
    assert verify(check, keys.sign()) is not None
    _break(keys, how)
    clock.now += 31  # past the cooldown after the fetch that worked
    for n in range(20):
        assert verify(check, keys.sign(kid=f"unknown-{n}")) is None
    assert keys.fetches == 2
    clock.now += 4.9
    assert verify(check, keys.sign(kid="unknown-a")) is None and keys.fetches == 2
    clock.now += 0.2
    assert verify(check, keys.sign(kid="unknown-b")) is None and keys.fetches == 3
    clock.now += 9.9
    assert verify(check, keys.sign(kid="unknown-c")) is None and keys.fetches == 3
    keys.status, keys.close_connection, keys.body = 200, False, None
    keys.add_key("rsa2")
    clock.now += 0.2
    assert verify(check, keys.sign(kid="rsa2")) is not None and keys.fetches == 4


# --- 7. a broken key set is a 401, not a 500 --------------------------------------------------


def test_a_key_set_that_is_not_json_is_401_with_one_warning(
        stateless: Served, keys: KeySet) -> None:
    """A key set whose body is not JSON: 401 invalid_token, one warning line, no
    traceback."""
    keys.body = b"<html>down for maintenance</html>"
    response = post(stateless.url, READ, bearer=keys.sign())
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    warnings = [line for line in stateless.stderr if "WARNING" in line]
    assert warnings == [f"regdev serve: WARNING regdev: the key set at {keys.url} cannot be "
                        "used: the body is not JSON: unexpected `<` at byte 0; tried again in "
                        "5 s at the earliest\n"]
    assert "Traceback" not in stateless.log()


def test_a_key_set_that_repeats_a_key_is_refused_as_not_json(
        stateless: Served, keys: KeySet) -> None:
    """A key set whose object gives `keys` twice (an empty list, then the real keys) is
    refused as regdev's strict JSON refuses a call with a repeated key: 401, one warning line
    naming the key; another reader's last-one-wins would have trusted the second list."""
    keys.body = b'{"keys": [], ' + keys.jwks.encode()[1:]
    response = post(stateless.url, READ, bearer=keys.sign())
    assert response.status_code == 401
    warnings = [line for line in stateless.stderr if "WARNING" in line]
    assert warnings == [f"regdev serve: WARNING regdev: the key set at {keys.url} cannot be "
                        'used: the body is not JSON: key "keys" appears twice in one object; '
                        "tried again in 5 s at the earliest\n"]


def test_a_key_with_alg_none_is_skipped_and_the_others_used(
        stateless: Served, keys: KeySet) -> None:
    """A key set holding a key with alg none (and a newly published EC key): the bad key is
    skipped with one warning line, the token of the new key is served."""
    keys.add_key("ec1", "EC")
    keys.extra = [{"kty": "RSA", "kid": "bad", "alg": "none", "n": "AQAB", "e": "AQAB"}]
    response = post(stateless.url, READ, bearer=keys.sign(kid="ec1"))
    assert response.status_code == 200, response.text
    assert post(stateless.url, READ, bearer=keys.sign(kid="bad")).status_code == 401
    warnings = [line for line in stateless.stderr if "WARNING" in line]
    assert warnings == [f"regdev serve: WARNING regdev: the key set at {keys.url}: skipped key "
                        "`bad`: alg `none` is not accepted\n"]
    assert "Traceback" not in stateless.log()


# --- 8. one leeway for every exp ---------------------------------------------------------------


def test_one_leeway_for_every_exp_and_a_line_for_every_refusal(
        stateless: Served, keys: KeySet) -> None:
    """Leeway 30 s: an int exp 10 s past and a float one 10.5 s past are served; 40 s past,
    a numeric string, true, NaN's stand-in (a huge number) and a string nbf are refused 401,
    each with its own log line."""
    now = time.time()
    served = [int(now) - 10, now - 10.5]
    refused = [int(now) - 40, now - 40.5, str(int(now) + 300), True]
    for exp in served:
        assert post(stateless.url, READ, bearer=keys.sign({"exp": exp})).status_code == 200
    before = stateless.log().count("refused a bearer token")
    for exp in refused:
        assert post(stateless.url, READ, bearer=keys.sign({"exp": exp})).status_code == 401
    assert post(stateless.url, READ, bearer=keys.sign({"nbf": "0"})).status_code == 401
    assert stateless.log().count("refused a bearer token") == before + len(refused) + 1
    assert "its `exp` is not a number of seconds" in stateless.log()
    assert "its `nbf` is not a number of seconds" in stateless.log()


# --- 9. https for the issuer and its keys ---------------------------------------------------


@pytest.mark.parametrize(("url", "ok"), [
    ("https://auth.example.org/jwks.json", True), ("http://127.0.0.1:8080/jwks.json", True),
    ("http://127.3.4.5/jwks.json", True), ("http://[::1]:8080/jwks.json", True),
    ("http://auth.example.org/jwks.json", False), ("http://localhost/jwks.json", False),
    ("http://10.0.0.1/jwks.json", False), ("http://[::ffff:8.8.8.8]/k", False),
])
@pytest.mark.parametrize("field", ["issuer", "jwks_url"])
def test_the_issuer_and_its_keys_need_https_unless_on_loopback(field: str, url: str,
                                                               ok: bool) -> None:
    """`issuer` and `jwks_url` are https:// URLs, or http:// on a loopback address."""
    oauth = {"issuer": "https://auth.example.org/", "audience": "a",
             "jwks_url": "https://auth.example.org/jwks.json", field: url}
    policy = {"http": {"scopes": {"regdev:operate": "default"}, "oauth": oauth}}
    if ok:
        assert Policy.from_dict(policy).http.oauth is not None  # type: ignore[union-attr]
        return
    with pytest.raises(PolicyError) as raised:
        Policy.from_dict(policy)
    assert "must be an https:// URL (http:// only on a loopback address" in str(raised.value)
