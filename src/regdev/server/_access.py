"""Who may call over the network, and how a person approves a protected write: the policy's
``[http]`` and ``[approval]`` tables (read by ``regdev serve``, see ``docs/agents.md``), and
:class:`Policy`, the public ``regdev.Policy``: the gate's policy with these two tables.

Rules of this file:

* Declarations only (pydantic models of the policy file, checked when it is loaded); the
  server that enforces them is ``server/_http.py``.
* A lab token is never stored, only its SHA-256 (tokens are random, 256 bits or more, so a
  fast hash is enough: nothing can be guessed from it). An OAuth access token is a JWT
  checked against its issuer, audience and signature keys (JWKS); only asymmetric signature
  algorithms are accepted, so the key set, which is public, can never sign a token itself.
* A token's scopes choose its session: the first entry of ``http.scopes`` (in the file's
  order) whose scope the token holds names the session; its rules (read or write, which
  tools, rate limits) then hold for that caller over every connection it uses.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from typing import Annotated, Literal, get_args
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from ..core._text import escape_text
from ..gate._policy import Policy as GatePolicy
from ..gate._policy import Seconds

__all__ = [
    "JWT_ALGORITHMS",
    "ApprovalPolicy",
    "HttpAccess",
    "JwtAlgorithm",
    "LabToken",
    "OAuthTokens",
    "Policy",
    "caller_name",
]

#: The JWT signature algorithms an OAuth access token may use: asymmetric only (RFC 7518;
#: RFC 8037 for EdDSA). ``HS*`` would let anyone holding the public key set sign a token, and
#: ``none`` signs nothing.
JwtAlgorithm = Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                       "ES256", "ES384", "ES512", "EdDSA"]
JWT_ALGORITHMS: tuple[str, ...] = get_args(JwtAlgorithm)



#: An OAuth scope token (RFC 6749 section 3.3: printable ASCII but space, quote, backslash).
_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
#: A caller's name in a lab token's table: what the audit log shows as ``token:NAME``.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


def _a_scope(value: str) -> str:
    if not _SCOPE.fullmatch(value):
        raise ValueError(f"{value!r} is not an OAuth scope (printable ASCII without spaces, "
                         "quotes or backslashes)")
    return value


def _a_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a caller name (1..64 letters, digits and ._@-, "
                         "starting with a letter or digit)")
    return value


def _a_secure_url(value: str) -> str:
    """An ``https://`` URL, or ``http://`` on a loopback address (``127.0.0.0/8``, ``[::1]``:
    a literal address, not a name a resolver could answer otherwise)."""
    if value.startswith("https://"):
        return value
    if value.startswith("http://"):
        try:
            host = urlsplit(value).hostname or ""
            if ipaddress.ip_address(host).is_loopback:
                return value
        except ValueError:  # not an address, or a malformed URL
            pass
    raise ValueError("must be an https:// URL (http:// only on a loopback address: "
                     "127.0.0.1, [::1])")


_Scope = Annotated[str, Field(strict=True), AfterValidator(_a_scope)]
_Url = Annotated[str, Field(strict=True, pattern=r"^https?://[^\s]+$")]
#: Where a token's trust comes from (the issuer, its keys): TLS unless on this machine.
_SecureUrl = Annotated[_Url, AfterValidator(_a_secure_url)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LabToken(_Model):
    """A bearer token declared in the policy file (for a lab without an OAuth server).

    Attributes:
        sha256: the SHA-256 of the token's UTF-8 text, 64 hex digits (``printf %s "$TOKEN" |
            sha256sum``); the token itself is never written down.
        scopes: the scopes it holds (OAuth scope syntax), at least one.
    """

    sha256: Annotated[str, Field(strict=True)]
    scopes: Annotated[tuple[_Scope, ...], Field(min_length=1)]

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9a-fA-F]{64}", value):
            raise ValueError("must be the token's SHA-256 as 64 hex digits (printf %s TOKEN | "
                             "sha256sum)")
        return value.lower()


class OAuthTokens(_Model):
    """Access tokens issued by an OAuth 2.1 authorization server, as signed JWTs (RFC 9068).

    Attributes:
        issuer: the ``iss`` every token must carry, exactly (the authorization server's
            issuer identifier, e.g. ``https://auth.example.org/``): ``https://``, or
            ``http://`` on a loopback address (``127.0.0.1``, ``[::1]``).
        audience: the ``aud`` every token must hold: this server's resource identifier,
            normally its public URL (``https://bench-7.example.org/mcp``).
        jwks_url: where the authorization server publishes its signing keys (JWKS):
            ``https://``, or ``http://`` on a loopback address.
        algorithms: the accepted signature algorithms, a subset of :data:`JWT_ALGORITHMS`
            (default RS256 and ES256).
        leeway: seconds of clock difference allowed when checking ``exp`` and ``nbf``
            (default 30).
    """

    issuer: _SecureUrl
    audience: Annotated[str, Field(strict=True, min_length=1)]
    jwks_url: _SecureUrl
    algorithms: Annotated[tuple[JwtAlgorithm, ...], Field(min_length=1)] = ("RS256", "ES256")
    leeway: Annotated[float, Field(strict=True, ge=0, le=3600, allow_inf_nan=False)] = 30.0


class HttpAccess(_Model):
    """Who may call ``regdev serve --http``: bearer tokens, their scopes, browser origins.

    Attributes:
        scopes: scope -> the session a token holding it gets, tried in the file's order (the
            first scope the token holds decides). A token that holds none of them is refused
            (HTTP 403).
        tokens: lab tokens by caller name (``token:NAME`` in the audit log).
        oauth: OAuth access tokens (JWTs) from one authorization server.
        allowed_origins: browser origins (``https://host[:port]``) that may call the server;
            a request with another ``Origin`` header is refused (HTTP 403). Requests without
            one (every non-browser client) are not affected.
        allowed_hosts: ``Host`` header values the server answers (``host:port``), against DNS
            rebinding. Bound to a loopback address, the loopback names with the port are
            always allowed; bound to another address with none listed, any ``Host`` is.
        resource_url: this server's public URL (of ``/mcp``) when it is reached through a
            reverse proxy: it names the resource in the protected-resource metadata and in
            ``WWW-Authenticate``. By default the URL it listens on.
    """

    scopes: Annotated[dict[_Scope, str], Field(min_length=1)]
    tokens: dict[Annotated[str, Field(strict=True), AfterValidator(_a_name)],
                 LabToken] = Field(
        default_factory=dict)
    oauth: OAuthTokens | None = None
    allowed_origins: tuple[Annotated[str, Field(strict=True,
                                                pattern=r"^https?://[^/\s]+$")], ...] = ()
    allowed_hosts: tuple[Annotated[str, Field(strict=True, pattern=r"^[^/\s]+$")], ...] = ()
    resource_url: _Url | None = None


class ApprovalPolicy(_Model):
    """How a person approves a write to a protected register over MCP (``regdev serve``).

    Attributes:
        via: ``"elicitation"``: the caller's MCP client asks its user (form mode), when the
            client supports it; ``"url"``: a page the server serves, where an approver who is
            not the caller signs the answer with their own token (the stronger form: an agent
            cannot answer it for its user).
        timeout: seconds a question waits for its answer, 0.001..86400; then the write is
            denied (``approval-denied``). Default 120.
        approver_scope: the scope a token needs to approve on the page (``via = "url"``).
        max_pending: questions open at once; a write that would open one more is denied at
            once (a flood never reaches a person). Default 8.
    """

    via: Literal["elicitation", "url"] = "elicitation"
    timeout: Seconds = 120.0
    approver_scope: _Scope = "regdev:approve"
    max_pending: Annotated[int, Field(strict=True, ge=1, le=1000)] = 8


#: The longest name shown for a caller after its ``token:`` or ``oauth:``, in characters.
MAX_CALLER_CHARS = 200


def caller_name(kind: Literal["token", "oauth"], name: str) -> str:
    """How a caller is named in the audit log and in approval questions: ``token:NAME`` for
    a lab token, ``oauth:SUBJECT`` for an OAuth access token (its ``sub``, escaped as
    untrusted text). A name longer than :data:`MAX_CALLER_CHARS` characters once escaped is
    shortened to that many: its first 180, ``...#``, and 16 hex digits of the SHA-256 of the
    whole (UTF-8), so that two subjects alike up to the cut are still told apart. This is the
    name shown; who the caller is, for its session, is the whole subject."""
    shown = escape_text(name, None)
    if len(shown) > MAX_CALLER_CHARS:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        shown = f"{shown[:MAX_CALLER_CHARS - 20]}...#{digest}"
    return f"{kind}:{shown}"


class Policy(GatePolicy):
    """The safety policy (``regdev.Policy``): the gate's (:class:`regdev.gate._policy.Policy`:
    limits, the register map, rate limits, sessions, the approval hook) and the MCP server's
    tables, ``[http]`` and ``[approval]``. Every command loads a policy file as this class,
    and a gate given one enforces its gate part; ``regdev serve`` reads the rest.

    Attributes:
        http: who may call ``regdev serve --http`` (bearer tokens and the sessions their
            scopes choose, browser origins); see :class:`HttpAccess`. None: ``regdev serve
            --http`` refuses to start (it serves no caller it cannot name).
        approval: how ``regdev serve`` asks a person to approve a protected write
            (elicitation through the MCP client, or a page it serves); see
            :class:`ApprovalPolicy`.

    Raises:
        pydantic.ValidationError: a field is invalid (:meth:`from_file` and :meth:`from_dict`
            turn it into a one-line :class:`~regdev.PolicyError`), or ``http.scopes`` names
            a session the policy does not declare.
    """

    http: HttpAccess | None = None
    approval: ApprovalPolicy = ApprovalPolicy()

    @model_validator(mode="after")
    def _scopes_name_sessions(self) -> Policy:
        for scope, session in (self.http.scopes.items() if self.http is not None else ()):
            if session != "default" and session not in self.sessions:
                known = ", ".join(sorted({"default", *self.sessions}))
                raise ValueError(f"http.scopes: scope {scope!r} names session {session!r}, "
                                 f"which the policy does not declare; sessions: {known}")
        return self
