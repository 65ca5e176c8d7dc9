"""Who is calling: bearer tokens checked for ``regdev serve --http``, and the session their
scopes choose.

Rules of this file:

* Two kinds of bearer token (``Authorization: Bearer TOKEN``), as the policy's ``[http]``
  table declares them (``gate/_access.py``): lab tokens, looked up by their SHA-256; and OAuth
  access tokens, JWTs verified with PyJWT against the authorization server's issuer, this
  server's audience and the keys it publishes (JWKS), asymmetric algorithms only.
* The token itself is never stored, logged or recorded: a caller is named ``token:NAME`` or
  ``oauth:SUBJECT`` (:func:`~regdev.gate._access.caller_name`), and that name is what the
  audit log and approval questions show. The SDK's ``AccessToken.token`` holds the token's
  SHA-256, not the token.
* Every failure to verify a token is the same answer to the client (it is not valid), with the
  reason in the server's log at level info: an expired token, a wrong audience or issuer, an
  unknown key, a key set that cannot be fetched. Nothing here raises for a client's input.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio.to_thread
import jwt
from mcp.server.auth.provider import AccessToken

from ..core._text import escape_text
from ..gate._access import HttpAccess, caller_name

__all__ = ["Caller", "TokenCheck", "token_sha256"]

logger = logging.getLogger("regdev")

#: Longest bearer token read, in characters: anything longer is refused unread (a JWT with
#: many claims is a few KiB).
MAX_TOKEN_CHARS = 16 * 1024
#: Seconds to wait for the authorization server's key set (JWKS).
JWKS_TIMEOUT = 10.0


def token_sha256(token: str) -> str:
    """The SHA-256 of a token's UTF-8 text, 64 lowercase hex digits (as the policy stores a
    lab token)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller.

    Attributes:
        name: ``token:NAME`` or ``oauth:SUBJECT``: what the audit log and questions show.
        scopes: the scopes its token holds.
        session: the policy session those scopes choose (the first entry of ``http.scopes``
            the token holds), or None when they choose none (the request is refused, 403).
    """

    name: str
    scopes: frozenset[str]
    session: str | None


class TokenCheck:
    """The bearer tokens a policy's ``[http]`` table accepts (the SDK's ``TokenVerifier``).

    Args:
        access: the policy's ``[http]`` table.
    """

    def __init__(self, access: HttpAccess) -> None:
        self.access = access
        self._lab = {spec.sha256: (name, frozenset(spec.scopes))
                     for name, spec in access.tokens.items()}
        oauth = access.oauth
        self._jwks = jwt.PyJWKClient(oauth.jwks_url, cache_keys=True, lifespan=300,
                                     timeout=JWKS_TIMEOUT) if oauth is not None else None

    def caller(self, token: AccessToken) -> Caller:
        """The :class:`Caller` a token verified by :meth:`verify_token` stands for."""
        scopes = frozenset(token.scopes)
        return Caller(token.client_id, scopes, self.session_for(scopes))

    def session_for(self, scopes: Iterable[str]) -> str | None:
        """The session the scopes choose: that of the first ``http.scopes`` entry (in the
        policy's order) whose scope is held; None when none is."""
        held = set(scopes)
        return next((session for scope, session in self.access.scopes.items()
                     if scope in held), None)

    async def verify_token(self, token: str) -> AccessToken | None:
        """Check a bearer token: a lab token of the policy, or a valid JWT of its OAuth
        server. Returns the SDK's ``AccessToken`` (``client_id`` is the caller's name), or
        None when the token is not valid. Never raises for a client's token."""
        if not token or len(token) > MAX_TOKEN_CHARS:
            return None
        digest = token_sha256(token)
        lab = self._lab.get(digest)
        if lab is not None:
            name, scopes = lab
            who = caller_name("token", name)
            return AccessToken(token=digest, client_id=who, subject=who, scopes=sorted(scopes))
        if self._jwks is None or token.count(".") != 2:
            logger.info("refused a bearer token: not a token of the policy")
            return None
        try:
            claims = await anyio.to_thread.run_sync(partial(self._decode, token))
        except jwt.PyJWKClientConnectionError as error:
            logger.warning("refused a bearer token: the key set at %s cannot be fetched: %s",
                           self._jwks.uri, error)
            return None
        except jwt.PyJWTError as error:
            logger.info("refused a bearer token: %s", escape_text(str(error), 200))
            return None
        subject = claims.get("sub")
        if type(subject) is not str or not subject:
            logger.info("refused a bearer token: its `sub` is not a non-empty string")
            return None
        who = caller_name("oauth", subject)
        expires = claims.get("exp")
        return AccessToken(token=digest, client_id=who, subject=who,
                           scopes=sorted(_jwt_scopes(claims)),
                           expires_at=expires if type(expires) is int else None,
                           claims={"iss": claims.get("iss")})

    def _decode(self, token: str) -> dict[str, Any]:
        """Verify a JWT's signature (key from the JWKS, by its ``kid``), issuer, audience and
        times; the claims. Blocking (it may fetch the key set): run in a worker thread."""
        oauth = self.access.oauth
        assert oauth is not None and self._jwks is not None
        key = self._jwks.get_signing_key_from_jwt(token)
        claims: dict[str, Any] = jwt.decode(
            token, key, algorithms=list(oauth.algorithms), audience=oauth.audience,
            issuer=oauth.issuer, leeway=oauth.leeway,
            options={"require": ["exp", "iss", "aud", "sub"]})
        return claims


def _jwt_scopes(claims: Mapping[str, Any]) -> set[str]:
    """The scopes of an access token: ``scope``, a space-separated string (RFC 8693, RFC
    9068), or ``scp``, a list of strings (as some servers issue it)."""
    scope = claims.get("scope")
    if type(scope) is str:
        return set(scope.split())
    listed = claims.get("scp")
    if type(listed) is list:
        return {item for item in listed if type(item) is str}
    return set()
