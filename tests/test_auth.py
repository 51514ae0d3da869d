"""Tenants and upstream credentials in both auth modes, and the admin key."""

from __future__ import annotations

import hashlib

import pytest

from gateway.auth import authenticate, require_admin
from gateway.errors import AdminForbidden, InvalidAPIKey
from gateway.settings import Settings


def test_passthrough_tenant_is_a_hash_of_the_key_and_the_key_goes_upstream() -> None:
    principal = authenticate({"authorization": "Bearer sk-abc"}, Settings())
    assert principal.tenant == hashlib.sha256(b"sk-abc").hexdigest()[:16]
    assert principal.upstream_authorization == "Bearer sk-abc"


def test_passthrough_without_a_key_uses_the_configured_upstream_key() -> None:
    principal = authenticate({}, Settings(upstream_api_key="sk-up"))
    assert principal.upstream_authorization == "Bearer sk-up"


def test_keys_mode_maps_gateway_keys_to_tenants() -> None:
    settings = Settings(auth_mode="keys", keys={"gk-1": "team-a"}, upstream_api_key="sk-up")
    principal = authenticate({"authorization": "Bearer gk-1"}, settings)
    assert (principal.tenant, principal.upstream_authorization) == ("team-a", "Bearer sk-up")
    for headers in ({"authorization": "Bearer gk-2"}, {}, {"authorization": "Basic gk-1"}):
        with pytest.raises(InvalidAPIKey):
            authenticate(headers, settings)


def test_admin_key_required_and_disabled_when_unset() -> None:
    with pytest.raises(AdminForbidden):
        require_admin({"authorization": "Bearer anything"}, Settings())
    settings = Settings(admin_key="adm")
    require_admin({"authorization": "Bearer adm"}, settings)
    with pytest.raises(AdminForbidden):
        require_admin({"authorization": "Bearer wrong"}, settings)


def test_settings_repr_hides_secrets() -> None:
    text = repr(Settings(upstream_api_key="sk-hidden-1", admin_key="adm-hidden",
                         keys={"gk-hidden": "t"}))
    assert "sk-hidden-1" not in text and "adm-hidden" not in text and "gk-hidden" not in text


def test_admin_key_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every admin check, right or wrong key, goes through `hmac.compare_digest` (its time
    does not depend on where the first differing byte is), never through `==`."""
    import hmac

    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    settings = Settings(admin_key="admin-key-0123")
    require_admin({"authorization": "Bearer admin-key-0123"}, settings)
    for wrong in ("admin-key-0124", "x", "admin-key-01234"):
        with pytest.raises(AdminForbidden):
            require_admin({"authorization": f"Bearer {wrong}"}, settings)
    assert compared == [(t.encode(), b"admin-key-0123") for t in
                        ("admin-key-0123", "admin-key-0124", "x", "admin-key-01234")]
