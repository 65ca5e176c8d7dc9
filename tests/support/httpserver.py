"""`regdev serve --http` for the tests: the policy with its lab tokens, an OAuth key set served
on 127.0.0.1, the server as a subprocess, the SDK's own HTTP client, and raw HTTP requests.

Everything talks to 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import http.server
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import jwt
from anyio.from_thread import BlockingPortal, start_blocking_portal
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

REGDEV = str(Path(sys.executable).with_name("regdev"))

#: Lab tokens by caller name: (the token, its scopes).
TOKENS: dict[str, tuple[str, list[str]]] = {
    "alice": ("alice-0123456789abcdef0123456789abcdef", ["regdev:operate"]),
    "victor": ("victor-0123456789abcdef0123456789abcdef", ["regdev:read"]),
    "bob": ("bob-0123456789abcdef0123456789abcdef", ["regdev:approve"]),
    "carol": ("carol-0123456789abcdef0123456789abcdef", ["regdev:operate", "regdev:approve"]),
    "nobody": ("nobody-0123456789abcdef0123456789abcdef", ["something:else"]),
}
ISSUER = "https://auth.test.invalid/"
AUDIENCE = "regdev-bench-7"
KID = "test-key-1"


def token(name: str) -> str:
    return TOKENS[name][0]


class KeySet:
    """The OAuth server's signing keys and their JWKS, served on 127.0.0.1: an RSA key
    ``KID`` to begin with; keys can be added, and the set rotated (``published``), slowed
    (``stall``, ``trickle``) and broken (``status``, ``body``, ``close``, ``extra``)."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        #: Signing keys by kid, and the kids the set publishes (in order).
        self.signers: dict[str, Any] = {KID: self.key}
        self.published: list[str] = [KID]
        #: JWKs published after the signers' (as they are: broken ones too).
        self.extra: list[Any] = []
        #: Served instead of the set when not None (a broken body).
        self.body: bytes | None = None
        self.status = 200
        #: Close the connection without an answer.
        self.close_connection = False
        #: When set, each answer waits until it is set (at most 60 s).
        self.stall: threading.Event | None = None
        #: Seconds between two bytes of the answer (status line and headers too), or None.
        self.trickle: float | None = None
        self.fetches = 0
        self.changed = threading.Condition()
        keys = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with keys.changed:
                    keys.fetches += 1
                    keys.changed.notify_all()
                if keys.stall is not None:
                    keys.stall.wait(60)
                if keys.close_connection:
                    self.close_connection = True
                    return
                body = keys.body if keys.body is not None else keys.jwks.encode()
                head = (f"HTTP/1.1 {keys.status} X\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
                self.close_connection = True
                try:
                    if keys.trickle is None:
                        self.wfile.write(head + body)
                        return
                    for byte in head + body:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(keys.trickle)
                        if keys.stopped:
                            return
                except OSError:  # the client gave up
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.stopped = False
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        # (looks for shutdown every 20 ms: socketserver's 0.5 s was a wait at every close)
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    def add_key(self, kid: str, kind: str = "RSA") -> Any:
        """A new signing key ``kid`` (RSA 2048 or EC P-256), published; the private key."""
        from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048) if kind == "RSA" \
            else ec.generate_private_key(ec.SECP256R1())
        self.signers[kid] = key
        self.published.append(kid)
        return key

    @property
    def jwks(self) -> str:
        """The set published now (JSON text)."""
        keys = []
        for kid in self.published:
            key = self.signers[kid]
            if isinstance(key, rsa.RSAPrivateKey):
                public, alg = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()), "RS256"
            else:
                public, alg = jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()), "ES256"
            keys.append({**json.loads(public), "kid": kid, "use": "sig", "alg": alg})
        return json.dumps({"keys": keys + self.extra})

    def wait_fetches(self, count: int, timeout: float = 30) -> None:
        """Wait until the set was asked for ``count`` times (AssertionError after timeout s)."""
        with self.changed:
            assert self.changed.wait_for(lambda: self.fetches >= count, timeout), self.fetches

    def sign(self, claims: dict[str, Any] | None = None, *, kid: str = KID,
             key: Any = None, algorithm: str | None = None) -> str:
        """An access token: sub alice@lab, scope regdev:operate, valid for 5 minutes, unless
        ``claims`` say otherwise (a None value removes the claim); signed by the key ``kid``
        names (``key`` when given; KID's for an unknown kid), RS256 or ES256 by its kind."""
        now = int(time.time())
        body: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice@lab",
                                "scope": "regdev:operate", "iat": now, "exp": now + 300}
        for name, value in (claims or {}).items():
            if value is None:
                body.pop(name, None)
            else:
                body[name] = value
        signer = key if key is not None else self.signers.get(kid, self.key)
        if algorithm is None:
            algorithm = "RS256" if isinstance(signer, rsa.RSAPrivateKey) else "ES256"
        return jwt.encode(body, signer, algorithm=algorithm, headers={"kid": kid})

    def forged_hs256(self) -> str:
        """The algorithm-confusion attack: a token "signed" HS256 with the public key's PEM
        text as the secret (pyjwt refuses to make one, so it is made by hand)."""
        import hmac  # noqa: PLC0415

        from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

        def b64(data: bytes) -> bytes:
            return base64.urlsafe_b64encode(data).rstrip(b"=")

        secret = self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        now = int(time.time())
        head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": KID}).encode())
        body = b64(json.dumps({"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory",
                               "scope": "regdev:operate", "exp": now + 300}).encode())
        tag = hmac.new(secret, head + b"." + body, hashlib.sha256).digest()
        return (head + b"." + body + b"." + b64(tag)).decode()

    def close(self) -> None:
        self.stopped = True
        if self.stall is not None:
            self.stall.set()
        self.server.shutdown()
        self.server.server_close()


def policy_text(*, jwks_url: str | None = None, via: str = "elicitation",
                timeout: float = 20.0, extra: str = "") -> str:
    """The tests' policy: register 0 read-only, 15 protected; session viewer may read."""
    lines = [
        "[registers]", "read_only = [0]", "protected = [15]", "",
        "[sessions.viewer]", 'scopes = ["read"]', "",
        "[approval]", f'via = "{via}"', f"timeout = {timeout}", "",
        "[http]", 'allowed_origins = ["https://console.test.invalid"]', "",
        "[http.scopes]", '"regdev:operate" = "default"', '"regdev:read" = "viewer"', "",
    ]
    for name, (secret, scopes) in TOKENS.items():
        digest = hashlib.sha256(secret.encode()).hexdigest()
        lines += [f"[http.tokens.{name}]", f'sha256 = "{digest}"', f"scopes = {json.dumps(scopes)}",
                  ""]
    if jwks_url is not None:
        lines += ["[http.oauth]", f'issuer = "{ISSUER}"', f'audience = "{AUDIENCE}"',
                  f'jwks_url = "{jwks_url}"', ""]
    return "\n".join(lines) + extra


@dataclass
class Served:
    """A running `regdev serve --http` (a subprocess), or the same server in this process
    (``process`` None; ``stderr`` then holds regdev's log lines)."""

    url: str
    process: subprocess.Popen[bytes] | None
    audit: Path
    stderr: list[str] = field(default_factory=list)
    #: Commits the audit records still pending (in process only; a subprocess commits them
    #: when it stops).
    flush: Callable[[], None] | None = None

    def records(self) -> list[Any]:
        """The audit records so far, every pending one committed first (in process)."""
        from regdev import read_audit  # noqa: PLC0415

        assert self.flush is not None, "a subprocess's records are complete once it stopped"
        self.flush()
        return read_audit(self.audit)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/")[0])

    @property
    def base(self) -> str:
        return self.url.removesuffix("/mcp")

    def log(self) -> str:
        return "".join(self.stderr)


def server_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REGDEV_AUDIT", "XDG_STATE_HOME")}
    return {**env, "HOME": str(home), "PYTHONUNBUFFERED": "1"}


@contextmanager
def http_server(folder: Path, policy: str, *options: str,
                log_level: str = "info") -> Iterator[Served]:
    """`regdev serve --http 127.0.0.1:0` on ``policy`` (TOML text), audit log in ``folder``;
    stopped with SIGTERM at the end, which must end it with status 0 and no traceback."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "home").mkdir(exist_ok=True)
    policy_path = folder / "policy.toml"
    policy_path.write_text(policy)
    audit = folder / "audit.db"
    process = subprocess.Popen(
        [REGDEV, "serve", "--http", "127.0.0.1:0", "--policy", str(policy_path),
         "--audit", str(audit), "--log-level", log_level, *options],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=server_env(folder / "home"))
    lines: list[str] = []
    found = threading.Event()
    url: list[str] = []

    def read_stderr() -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode("utf-8", "replace")
            lines.append(line)
            if "serving MCP over HTTP at " in line and not url:
                url.append(line.split("serving MCP over HTTP at ")[1].split()[0])
                found.set()
        found.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert found.wait(60) and url, "".join(lines)
        yield Served(url[0], process, audit, lines)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError("regdev serve --http did not stop on SIGTERM") from None
        reader.join(10)
        assert process.returncode == 0, "".join(lines)
        assert "Traceback" not in "".join(lines), "".join(lines)


class _Lines(logging.Handler):
    """Log records as the lines `regdev serve` writes on stderr, tracebacks included."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.INFO)
        self.lines = lines
        self.setFormatter(logging.Formatter("regdev serve: %(levelname)s %(name)s: "
                                            "%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record) + "\n")


#: The loggers whose records an in-process server keeps (regdev's, and the errors of the
#: layers under it: a traceback anywhere shows in ``Served.log()``).
_WATCHED = ("regdev", "uvicorn", "uvicorn.error", "mcp", "starlette", "sse_starlette")


@contextmanager
def inprocess_server(folder: Path, policy: str, *, stateless: bool = False,
                     device: Any = None, body_seconds: float = 10.0,
                     limits: Any = None) -> Iterator[Served]:
    """The server of `regdev serve --http 127.0.0.1:0` run in a thread of this process (the
    same functions the command runs, without the second of importing the SDK again):
    on a fresh register file, recording to ``folder/audit.db``; ``limits`` an ``HttpLimits``
    (None: the defaults)."""
    from regdev import AuditLog, Gate, Policy, RegisterFile  # noqa: PLC0415
    from regdev.server._approval import approvals_for  # noqa: PLC0415
    from regdev.server._http import serve_http  # noqa: PLC0415

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "policy.toml").write_text(policy)
    loaded = Policy.from_file(folder / "policy.toml")
    device = device if device is not None else RegisterFile()
    approvals = approvals_for(loaded, device)
    gate = Gate(device, policy=loaded.model_copy(update={"approve": approvals}),
                audit=AuditLog(folder / "audit.db"))
    assert gate.policy is not None
    lines: list[str] = []
    handler = _Lines(lines)
    for name in _WATCHED:
        logging.getLogger(name).addHandler(handler)
    logger = logging.getLogger("regdev")
    previous = logger.level
    logger.setLevel(logging.INFO)
    urls: list[str] = []
    listening, stop = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            serve_http(gate, gate.policy, approvals, host="127.0.0.1", port=0,  # type: ignore[arg-type]
                       stateless=stateless, ready=lambda url: (urls.append(url),
                                                               listening.set()), stop=stop,
                       body_seconds=body_seconds, limits=limits)
        except BaseException as error:  # shown by the assertion below
            failure.append(error)
            listening.set()

    thread = threading.Thread(target=run, name="regdev serve --http", daemon=True)
    thread.start()
    try:
        assert listening.wait(30) and urls, failure
        assert gate.audit is not None
        yield Served(urls[0], None, folder / "audit.db", lines, gate.audit.flush)
    finally:
        stop.set()
        thread.join(30)
        gate.close()
        for name in _WATCHED:
            logging.getLogger(name).removeHandler(handler)
        logger.setLevel(previous)
        assert not thread.is_alive() and not failure, failure


# --- the SDK's own HTTP client, synchronously ---------------------------------------------------

Elicit = Callable[[Any, types.ElicitRequestParams], Any]


class SdkClient:
    """The SDK's ``Client`` over Streamable HTTP, with a bearer token, for plain tests."""

    def __init__(self, portal: BlockingPortal, client: Client) -> None:
        self.portal = portal
        self.client = client

    def call(self, name: str, arguments: dict[str, Any] | None,
             meta: dict[str, Any] | None = None) -> types.CallToolResult:
        result: types.CallToolResult = self.portal.call(
            lambda: self.client.call_tool(name, arguments, meta=meta))
        return result

    def list_tools(self) -> types.ListToolsResult:
        result: types.ListToolsResult = self.portal.call(self.client.list_tools)
        return result

    @property
    def protocol_version(self) -> str:
        return str(self.client.session.protocol_version)


@contextmanager
def sdk_client(url: str, bearer: str | None, *, mode: str = "legacy",
               elicit: Elicit | None = None) -> Iterator[SdkClient]:
    """The SDK's client on ``url``: ``mode`` legacy (initialize, 2025-11-25) or 2026-07-28."""
    headers = {"Authorization": f"Bearer {bearer}"} if bearer is not None else {}

    async def open_client() -> Any:
        return create_mcp_http_client(headers=headers)

    with start_blocking_portal() as portal:
        http = portal.call(open_client)
        with portal.wrap_async_context_manager(http), portal.wrap_async_context_manager(
            Client(streamable_http_client(url, http_client=http), mode=mode,  # type: ignore[arg-type]
                   read_timeout_seconds=30, elicitation_callback=elicit)
        ) as client:
            yield SdkClient(portal, client)


# --- raw HTTP ----------------------------------------------------------------------------------

MCP_HEADERS = {"Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}


def post(url: str, body: bytes | str, *, bearer: str | None = None,
         headers: dict[str, str] | None = None, timeout: float = 30) -> httpx2.Response:
    """One POST to ``url`` (no session: the server must be --stateless for a tools/call)."""
    sent = {**MCP_HEADERS, **({"Authorization": f"Bearer {bearer}"} if bearer else {}),
            **(headers or {})}
    with httpx2.Client(timeout=timeout) as client:
        return client.post(url, content=body.encode() if isinstance(body, str) else body,
                           headers=sent)


def answer(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message of a response: the JSON body, or the SSE stream's one message."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines()
                if line.startswith("data:") and line[5:].strip()]
        assert len(data) == 1, response.text
        message: dict[str, Any] = json.loads(data[0])
        return message
    message = json.loads(response.content)
    return message


def raw_request(port: int, data: bytes, *, read: bool = True,
                timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    """Send ``data`` (a whole HTTP request, as bytes) on a new connection to 127.0.0.1:port;
    the status, headers and body of the answer (status 0: the connection was closed first)."""
    import socket  # noqa: PLC0415

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        if not read:
            return 0, {}, b""
        response = http.client.HTTPResponse(sock, method=data.split(b" ", 1)[0].decode())
        try:
            response.begin()
        except (http.client.RemoteDisconnected, ConnectionResetError):
            return 0, {}, b""
        body = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body


def basic(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
