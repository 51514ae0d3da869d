"""What crosses the gateway: which headers go upstream, which come back, and ours."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from gateway.api.asgi import HOP_BY_HOP, RawHeaders
from gateway.auth import Principal
from gateway.errors import InvalidRequest

_NOT_FORWARDED = HOP_BY_HOP | {"authorization", "accept-encoding"}
# Dropped from relayed responses: hop-by-hop, and those the ASGI server sets itself.
_NOT_RELAYED = HOP_BY_HOP | {"date", "server"}


def upstream_headers(
    headers: Mapping[str, str], principal: Principal, *, identity: bool
) -> list[tuple[str, str]]:
    """The client's headers minus hop-by-hop and ours, with the upstream credential.

    `identity` asks the upstream for an unencoded body (chat: the gateway reads the
    response); otherwise the client's Accept-Encoding passes and bytes are relayed raw.
    """
    out = [
        (name, value) for name, value in headers.items()
        if name not in _NOT_FORWARDED and not name.startswith("x-ctxgate-")
    ]
    if principal.upstream_authorization:
        out.append(("authorization", principal.upstream_authorization))
    if identity:
        out.append(("accept-encoding", "identity"))
    elif "accept-encoding" in headers:
        out.append(("accept-encoding", headers["accept-encoding"]))
    return out


def relayed_headers(response: httpx.Response, *, keep_length: bool = False) -> RawHeaders:
    """The upstream response's headers to pass back to the client, unchanged."""
    return [
        (name, value) for name, value in response.headers.raw
        if name.lower().decode("latin-1") not in _NOT_RELAYED
        or (keep_length and name.lower() == b"content-length")
    ]


def is_bypass(headers: Mapping[str, str]) -> bool:
    value = headers.get("x-ctxgate-bypass")
    if value is None:
        return False
    value = value.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no", ""):
        return False
    raise InvalidRequest("x-ctxgate-bypass must be 'true' or 'false'.", param="x-ctxgate-bypass")
