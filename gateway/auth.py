"""Who is calling: the tenant, and the credential that goes upstream.

`passthrough`: the client's `Authorization` goes upstream unchanged; the tenant is the first
16 hex digits of sha256 of the bearer token. `keys`: the client's bearer token is a gateway
key from the YAML `keys:` map (key -> tenant); the upstream gets `CTXGATE_UPSTREAM_API_KEY`.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.errors import AdminForbidden, InvalidAPIKey
from gateway.settings import Settings

ANONYMOUS = "anonymous"


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str
    upstream_authorization: str | None  # the whole header value, or None to send none


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def tenant_of_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def authenticate(headers: Mapping[str, str], settings: Settings) -> Principal:
    """Resolve the caller from lower-cased request headers; raise InvalidAPIKey."""
    authorization = headers.get("authorization")
    token = bearer_token(authorization)
    upstream_key = settings.upstream_api_key
    fallback = f"Bearer {upstream_key.get_secret_value()}" if upstream_key else None
    if settings.auth_mode == "keys":
        tenant = settings.keys.get(token) if token else None
        if tenant is None:
            raise InvalidAPIKey("Incorrect API key provided: not a key of this gateway.")
        return Principal(tenant, fallback)
    if token is None:
        return Principal(ANONYMOUS, fallback)
    return Principal(tenant_of_token(token), authorization)


def require_admin(headers: Mapping[str, str], settings: Settings) -> None:
    """Raise AdminForbidden unless the request carries the admin key."""
    expected = settings.admin_key.get_secret_value() if settings.admin_key else None
    token = bearer_token(headers.get("authorization"))
    if not expected:
        raise AdminForbidden("The admin API is disabled: CTXGATE_ADMIN_KEY is not set.")
    if token is None or not hmac.compare_digest(token.encode(), expected.encode()):
        raise AdminForbidden("Incorrect admin key.")
