"""Who is calling: bearer tokens checked for ``regdev serve --http``, and the session their
scopes choose.

Rules of this file:

* Two kinds of bearer token (``Authorization: Bearer TOKEN``), as the policy's ``[http]``
  table declares them (``server/_access.py``): lab tokens, looked up by their SHA-256; and OAuth
  access tokens, JWTs verified with PyJWT against the authorization server's issuer, this
  server's audience and the keys it publishes (JWKS), asymmetric algorithms only.
* The token itself is never stored, logged or recorded: a caller is named ``token:NAME`` or
  ``oauth:SUBJECT`` (:func:`~regdev.server._access.caller_name`), and that name is what the
  audit log and approval questions show. Who the caller *is* (its session, its rate-limit
  bucket, the MCP sessions it owns) is the full subject, never the shortened name. The SDK's
  ``AccessToken.token`` holds the token's SHA-256, not the token.
* Every failure to verify a token is the same answer to the client (it is not valid), with the
  reason in the server's log, one line a refusal (info; a key set that cannot be used is a
  warning, once a fetch): an expired token, a wrong audience or issuer, an unknown key, a key
  set that cannot be fetched. Nothing here raises for a client's input or the issuer's
  answer.
* The key set (:class:`KeySet`) is fetched on the event loop, never in a worker thread: one
  fetch at a time, with a deadline on the whole of it; callers whose key is known are
  answered from the keys at once, and fetches after a failure back off.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import jwt
from mcp.server.auth.provider import AccessToken, principal_components

from ..core._json import load_json
from ..core._text import escape_text
from ._access import HttpAccess, caller_name

__all__ = ["Caller", "Identity", "KeySet", "TokenCheck", "token_sha256"]

logger = logging.getLogger("regdev")

#: Longest bearer token read, in characters: anything longer is refused unread (a JWT with
#: many claims is a few KiB).
MAX_TOKEN_CHARS = 16 * 1024
#: Seconds a verified bearer token is taken again without being verified again (a JWT never
#: past its ``exp`` and leeway); then its signature and claims are checked anew, so a key
#: withdrawn from the issuer's key set stops a token it signed within this time.
VERIFIED_SECONDS = 60.0
#: Most verified tokens remembered (least recently used dropped first): about 1 KB each.
MAX_VERIFIED_TOKENS = 1024
#: Seconds the whole fetch of the key set (JWKS) may take: connecting, the answer's headers
#: and its body. A key set that trickles in slower is a failed fetch.
JWKS_TIMEOUT = 10.0
#: Seconds the keys of one fetch are used: a key removed from the issuer's set stops
#: verifying tokens at most this long after the fetch that last saw it.
JWKS_REFRESH = 300.0
#: Seconds after a fetch before a token with an unknown key (``kid``) may fetch again.
JWKS_COOLDOWN = 30.0
#: Seconds before the next fetch after a failed one, doubled by each further failure in a
#: row, up to the second figure.
JWKS_BACKOFF = (5.0, 60.0)
#: The largest key set read, in bytes (a set of a few keys is a few KiB).
MAX_JWKS_BYTES = 256 * 1024


def token_sha256(token: str) -> str:
    """The SHA-256 of a token's UTF-8 text, 64 lowercase hex digits (as the policy stores a
    lab token)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


#: Who a caller is, as the SDK compares principals (client id, issuer, subject): the key of
#: its live session and of the MCP sessions it owns.
Identity = tuple[str, str | None, str | None]


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller.

    Attributes:
        name: ``token:NAME`` or ``oauth:SUBJECT``: what the audit log and questions show (a
            subject longer than 200 characters once escaped is shortened, with a digest of
            the whole; see :func:`~regdev.server._access.caller_name`).
        scopes: the scopes its token holds.
        session: the policy session those scopes choose (the first entry of ``http.scopes``
            the token holds), or None when they choose none (the request is refused, 403).
        identity: who the caller is: ``(name, issuer, subject)`` with the token's full
            subject (the SDK's principal); by default ``(name, None, name)``.
    """

    name: str
    scopes: frozenset[str]
    session: str | None
    identity: Identity | None = field(default=None)

    def __post_init__(self) -> None:
        if self.identity is None:
            object.__setattr__(self, "identity", (self.name, None, self.name))


class _Refused(Exception):
    """A token is not valid: the reason, for the server's log (already escaped)."""


class KeySet:
    """The authorization server's signing keys (JWKS), fetched from ``url`` and kept
    :data:`JWKS_REFRESH` seconds.

    A token's key is looked up by its ``kid``. Known, in keys fetched less than
    :data:`JWKS_REFRESH` seconds ago: used at once, whatever a fetch is doing. Unknown, or the
    keys too old: the set is fetched again, by one caller while the others wait for that
    fetch (on the event loop: no thread is held); a token with an unknown key fetches at most
    once every :data:`JWKS_COOLDOWN` seconds, and after a failed fetch none is tried for
    :data:`JWKS_BACKOFF` seconds (doubling, up to the cap): meanwhile such tokens are refused at
    once. A fetch that takes longer than ``timeout`` seconds in all fails. Keys that cannot
    be used (an algorithm not accepted, such as ``none``, a malformed key) are skipped, and the
    others used; a set with no usable key, a body that is not a JWK set, an HTTP status other
    than 200 are failed fetches, and the keys fetched before stay in use until they are
    :data:`JWKS_REFRESH` seconds old.

    Args:
        url: the key set's URL (``https://``, or ``http://`` on a loopback address).
        algorithms: the accepted signature algorithms: a key for another one is skipped.
        timeout: seconds the whole fetch may take (default :data:`JWKS_TIMEOUT`).
        clock: the monotonic clock, in seconds (tests move it).
    """

    def __init__(self, url: str, algorithms: Iterable[str], *, timeout: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self.algorithms = frozenset(algorithms)
        self.timeout = JWKS_TIMEOUT if timeout is None else timeout
        self.clock = clock
        self._keys: dict[str | None, list[jwt.PyJWK]] = {}
        self._fetched = -math.inf  # when the keys in use were fetched
        self._next_fetch = -math.inf  # no fetch before this time
        self._failures = 0  # failed fetches in a row
        self._fetching: anyio.Event | None = None  # set when the fetch under way ends
        #: Fetches started (for the tests and the log).
        self.fetches = 0

    @property
    def fresh_until(self) -> float:
        """The clock's time until which the keys in use are taken without a fetch."""
        return self._fetched + JWKS_REFRESH

    async def key(self, kid: str | None, algorithm: object) -> jwt.PyJWK:
        """The key ``kid`` names, for a token signed with ``algorithm`` (the header's
        ``alg``): of the keys that can verify it, the first whose algorithm it is.

        Raises:
            _Refused: no such key in a usable key set (the reason in the message).
        """
        for _ in range(3):  # a fetch that ended without an outcome (cancelled) is retried
            now = self.clock()
            fresh = now - self._fetched < JWKS_REFRESH
            if fresh and kid in self._keys:
                return self._pick(kid, algorithm)
            if self._fetching is not None:
                await self._fetching.wait()
            elif now < self._next_fetch:
                break
            else:
                await self._fetch()
            if self.clock() - self._fetched < JWKS_REFRESH:
                if kid in self._keys:
                    return self._pick(kid, algorithm)
                break
        shown = "no kid" if kid is None else f"kid `{escape_text(kid, 80)}`"
        if self.clock() - self._fetched < JWKS_REFRESH:
            wait = max(0.0, self._next_fetch - self.clock())
            raise _Refused(f"no key for its {shown} in the key set at {self.url} (fetched again "
                           f"for an unknown key in {wait:.0f} s at the earliest)")
        wait = max(0.0, self._next_fetch - self.clock())
        raise _Refused(f"the key set at {self.url} cannot be used (tried again in {wait:.0f} s "
                       "at the earliest)")

    def _pick(self, kid: str | None, algorithm: object) -> jwt.PyJWK:
        found = self._keys[kid]
        return next((key for key in found if key.algorithm_name == algorithm), found[0])

    async def _fetch(self) -> None:
        """Fetch the set once (this caller; the others wait for :attr:`_fetching`)."""
        self._fetching = done = anyio.Event()
        self.fetches += 1
        outcome: tuple[dict[str | None, list[jwt.PyJWK]], list[str]] | str | None = None
        try:
            try:
                with anyio.fail_after(self.timeout):
                    body = await self._get()
                outcome = _usable_keys(body, self.algorithms)
            except TimeoutError:
                outcome = f"no answer within {self.timeout:g} s"
            except _Refused as refused:
                outcome = str(refused)
        finally:
            now = self.clock()
            if isinstance(outcome, tuple):
                keys, skipped = outcome
                self._keys, self._fetched, self._failures = keys, now, 0
                self._next_fetch = now + JWKS_COOLDOWN
                if skipped:
                    logger.warning("the key set at %s: skipped %s", self.url,
                                   "; ".join(skipped[:8])
                                   + (f"; and {len(skipped) - 8} more" if len(skipped) > 8
                                      else ""))
            elif outcome is not None:
                first, cap = JWKS_BACKOFF
                wait = min(first * 2 ** min(self._failures, 16), cap)
                self._failures += 1
                self._next_fetch = now + wait
                logger.warning("the key set at %s cannot be used: %s; tried again in %g s at "
                               "the earliest", self.url, outcome, wait)
            self._fetching = None
            done.set()

    async def _get(self) -> bytes:
        """The key set's body (up to :data:`MAX_JWKS_BYTES` bytes).

        Raises:
            _Refused: the fetch failed (the reason).
        """
        try:
            async with httpx2.AsyncClient(follow_redirects=False, timeout=None) as client, \
                    client.stream("GET", self.url,
                                  headers={"Accept": "application/json"}) as response:
                if response.status_code != 200:
                    raise _Refused(f"HTTP status {response.status_code}")
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_JWKS_BYTES:
                        raise _Refused(f"the body is over {MAX_JWKS_BYTES} bytes")
                return bytes(body)
        except _Refused:
            raise
        except Exception as error:  # httpx2's errors, and whatever else the issuer's answer
            # makes a library raise: a failed fetch, never a 500
            raise _Refused(escape_text(f"{type(error).__name__}: {error}", 200)) from None


def _usable_keys(body: bytes, algorithms: frozenset[str]
                 ) -> tuple[dict[str | None, list[jwt.PyJWK]], list[str]]:
    """The signing keys of a JWK set's body (RFC 7517 section 5) by ``kid``, and what was
    skipped: keys for encryption (``use`` other than ``sig``) silently, keys that cannot be
    used (another algorithm, ``none`` among them; a key PyJWT cannot read) by name.

    Raises:
        _Refused: not a JWK set, or no usable key in it.
    """
    try:
        document = load_json(body)
    except ValueError as error:  # not UTF-8 text, not JSON, or a key given twice
        raise _Refused(f"the body is not JSON: {error}") from None
    listed = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(listed, list):
        raise _Refused("the body is not a JWK set (a JSON object with a `keys` list)")
    keys: dict[str | None, list[jwt.PyJWK]] = {}
    skipped: list[str] = []
    for entry in listed:
        if not isinstance(entry, dict):
            skipped.append("an entry that is not an object")
            continue
        kid = entry.get("kid")
        if kid is not None and type(kid) is not str:
            skipped.append("a key whose kid is not a string")
            continue
        name = "a key without kid" if kid is None else f"key `{escape_text(kid, 80)}`"
        if entry.get("use", "sig") != "sig":
            continue
        alg = entry.get("alg")
        if alg is not None and alg not in algorithms:
            skipped.append(f"{name}: alg `{escape_text(str(alg), 40)}` is not accepted")
            continue
        try:
            key = jwt.PyJWK(entry)
        except Exception as error:  # the issuer's text, read by PyJWT: a malformed key
            # may raise anything (NotImplementedError, OverflowError, ...)
            skipped.append(f"{name}: {escape_text(str(error), 80)}")
            continue
        if key.algorithm_name not in algorithms:
            skipped.append(f"{name}: its algorithm {key.algorithm_name} is not accepted")
            continue
        keys.setdefault(kid, []).append(key)
    if not keys:
        raise _Refused("no usable signing key in it" + (f" ({'; '.join(skipped[:4])})"
                                                        if skipped else ""))
    return keys, skipped


class TokenCheck:
    """The bearer tokens a policy's ``[http]`` table accepts (the SDK's ``TokenVerifier``).

    Args:
        access: the policy's ``[http]`` table.
        clock: the monotonic clock of the key set's cache and of the tokens verified
            lately (:data:`VERIFIED_SECONDS`), in seconds (tests move it).
    """

    def __init__(self, access: HttpAccess, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.access = access
        self._lab = {spec.sha256: (name, frozenset(spec.scopes))
                     for name, spec in access.tokens.items()}
        oauth = access.oauth
        self.keys = KeySet(oauth.jwks_url, oauth.algorithms, clock=clock) \
            if oauth is not None else None
        self._clock = clock
        #: Tokens verified lately: the token, its AccessToken, the clock's time until which
        #: it is taken as verified, and (a JWT) its ``exp`` plus the leeway, Unix seconds.
        self._verified: OrderedDict[str, tuple[AccessToken, float, float]] = OrderedDict()

    def caller(self, token: AccessToken) -> Caller:
        """The :class:`Caller` a token verified by :meth:`verify_token` stands for."""
        scopes = frozenset(token.scopes)
        return Caller(token.client_id, scopes, self.session_for(scopes),
                      principal_components(token))

    def session_for(self, scopes: Iterable[str]) -> str | None:
        """The session the scopes choose: that of the first ``http.scopes`` entry (in the
        policy's order) whose scope is held; None when none is."""
        held = set(scopes)
        return next((session for scope, session in self.access.scopes.items()
                     if scope in held), None)

    async def verify_token(self, token: str) -> AccessToken | None:
        """Check a bearer token: a lab token of the policy, or a valid JWT of its OAuth
        server. Returns the SDK's ``AccessToken`` (``client_id`` is the caller's name;
        ``subject`` the token's whole ``sub``; ``expires_at`` its ``exp`` in whole seconds),
        or None when the token is not valid. Never raises for a client's token or the
        issuer's key set."""
        if not token or len(token) > MAX_TOKEN_CHARS:
            logger.info("refused a bearer token: empty or over %d characters", MAX_TOKEN_CHARS)
            return None
        verified = self._verified.get(token)
        if verified is not None:  # taken again: within VERIFIED_SECONDS and before its exp
            access, until, expires = verified
            if self._clock() < until and time.time() < expires:
                self._verified.move_to_end(token)
                return access
            self._verified.pop(token, None)
        found = await self._verify(token)
        if found is not None:
            self._remember(token, found)
        return found

    def _remember(self, token: str, access: AccessToken) -> None:
        """Keep ``token`` as verified for :data:`VERIFIED_SECONDS`; a JWT never past its
        ``exp`` plus the leeway, nor past the time its issuer's keys are fetched again (a key
        withdrawn then stops its tokens as it would without this)."""
        oauth, until = self.access.oauth, self._clock() + VERIFIED_SECONDS
        expires = math.inf
        if access.expires_at is not None and oauth is not None and self.keys is not None:
            expires = access.expires_at + oauth.leeway
            until = min(until, self.keys.fresh_until)
        self._verified[token] = (access, until, expires)
        while len(self._verified) > MAX_VERIFIED_TOKENS:
            self._verified.popitem(last=False)

    async def _verify(self, token: str) -> AccessToken | None:
        """:meth:`verify_token` without the tokens verified lately."""
        digest = token_sha256(token)
        lab = self._lab.get(digest)
        if lab is not None:
            name, scopes = lab
            who = caller_name("token", name)
            return AccessToken(token=digest, client_id=who, subject=who, scopes=sorted(scopes))
        if self.keys is None or token.count(".") != 2:
            logger.info("refused a bearer token: not a token of the policy")
            return None
        try:
            claims = await self._claims(token)
        except _Refused as refused:
            logger.info("refused a bearer token: %s", refused)
            return None
        subject = claims["sub"]
        expires = claims["exp"]
        return AccessToken(token=digest, client_id=caller_name("oauth", subject),
                           subject=subject, scopes=sorted(_jwt_scopes(claims)),
                           expires_at=math.floor(expires), claims={"iss": claims.get("iss")})

    async def _claims(self, token: str) -> dict[str, Any]:
        """Verify a JWT's signature (key from the JWKS, by its ``kid``), issuer, audience and
        times (one leeway for ``exp`` and ``nbf``, whatever their number type); the claims.

        Raises:
            _Refused: the token is not valid (the reason).
        """
        oauth = self.access.oauth
        assert oauth is not None and self.keys is not None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as error:
            raise _Refused(escape_text(str(error), 200)) from None
        kid = header.get("kid")
        if kid is not None and type(kid) is not str:
            raise _Refused("its `kid` is not a string")
        key = await self.keys.key(kid, header.get("alg"))
        try:  # the times are checked below, the same way for ints and floats
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=list(oauth.algorithms), audience=oauth.audience,
                issuer=oauth.issuer,
                options={"require": ["exp", "iss", "aud", "sub"], "verify_exp": False,
                         "verify_nbf": False, "verify_iat": False})
        except jwt.PyJWTError as error:
            raise _Refused(escape_text(str(error), 200)) from None
        subject = claims.get("sub")
        if type(subject) is not str or not subject:
            raise _Refused("its `sub` is not a non-empty string")
        _check_times(claims, time.time(), oauth.leeway)
        return claims


def _check_times(claims: Mapping[str, Any], now: float, leeway: float) -> None:
    """``exp``, ``nbf`` and ``iat``, when present, are numbers of seconds (an int or a finite
    float; a string, even of digits, is not: RFC 7519 section 2, NumericDate); ``exp`` is
    past, or ``nbf`` to come, only by more than ``leeway`` seconds.

    Raises:
        _Refused: a time claim that is not a number, an expired token, one not valid yet.
    """
    for name in ("exp", "nbf", "iat"):
        if name in claims:
            value = claims[name]
            if type(value) not in (int, float) or (type(value) is float
                                                    and not math.isfinite(value)):
                raise _Refused(f"its `{name}` is not a number of seconds")
    if claims["exp"] + leeway <= now:
        raise _Refused(f"it expired {now - claims['exp']:.1f} s ago (leeway {leeway:g} s)")
    if "nbf" in claims and claims["nbf"] - leeway > now:
        raise _Refused(f"it is not valid for another {claims['nbf'] - now:.1f} s "
                       f"(leeway {leeway:g} s)")


def _jwt_scopes(claims: Mapping[str, Any]) -> set[str]:
    """The scopes of an access token: ``scope``, a string of scopes separated by spaces
    (U+0020 only: RFC 6749 section 3.3, RFC 9068; any other character, other whitespace
    included, is part of a scope), or ``scp``, a list of strings (as some servers issue
    it)."""
    scope = claims.get("scope")
    if type(scope) is str:
        return {part for part in scope.split(" ") if part}
    listed = claims.get("scp")
    if type(listed) is list:
        return {item for item in listed if type(item) is str}
    return set()
