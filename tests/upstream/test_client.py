"""The upstream client behind its transport seam: errors mapped at the boundary."""

from __future__ import annotations

import httpx
import pytest

from gateway.errors import UpstreamTimeout, UpstreamUnreachable
from gateway.upstream.client import Upstream


def upstream_raising(exc: Exception) -> Upstream:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return Upstream("http://up.test/v1/", timeout_s=1, transport=httpx.MockTransport(handler))


async def test_request_goes_to_the_path_under_the_base_url() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, content=b"ok")

    upstream = Upstream("http://up.test/v1/", timeout_s=1, transport=httpx.MockTransport(handler))
    response = await upstream.open("POST", "files/abc", headers=[("x-a", "1")], content=b"body",
                                   query=b"purpose=batch")
    assert response.status_code == 201 and await response.aread() == b"ok"
    assert str(seen[0].url) == "http://up.test/v1/files/abc?purpose=batch"
    assert seen[0].content == b"body" and seen[0].headers["x-a"] == "1"
    await upstream.aclose()


@pytest.mark.parametrize("exc,expected", [
    (httpx.ConnectError("refused"), UpstreamUnreachable),
    (httpx.RemoteProtocolError("bad"), UpstreamUnreachable),
    (httpx.ReadTimeout("slow"), UpstreamTimeout),
    (httpx.ConnectTimeout("slow"), UpstreamTimeout),
])
async def test_transport_errors_become_gateway_errors(exc: Exception,
                                                      expected: type[Exception]) -> None:
    with pytest.raises(expected):
        await upstream_raising(exc).open("GET", "models", headers=[], content=None)


async def test_refused_connection_through_aiohttp_is_unreachable_not_timeout() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    upstream = Upstream(f"http://127.0.0.1:{port}/v1", timeout_s=2)
    with pytest.raises(UpstreamUnreachable):
        await upstream.open("GET", "models", headers=[], content=None)
    await upstream.aclose()


async def test_no_cookie_crosses_from_one_request_to_the_next() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"set-cookie": "__cf_bm=tenant-a; Path=/"})

    upstream = Upstream("http://up.test/v1", timeout_s=1, transport=httpx.MockTransport(handler))
    for key in ("Bearer sk-tenant-a", "Bearer sk-tenant-b"):
        response = await upstream.open("GET", "models", headers=[("authorization", key)],
                                       content=None)
        await response.aread()
    assert "cookie" not in seen[1].headers
    assert set(seen[1].headers) == {"host", "authorization"}  # nothing added of its own
