"""OAuth access tokens on `regdev serve --http`: the policy's issuer and key set URLs."""

from __future__ import annotations

import pytest

from regdev import Policy
from regdev.core._errors import PolicyError

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
