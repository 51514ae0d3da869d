"""The upstream OpenAI-compatible API, behind a transport seam.

httpx is the interface; the transport underneath is aiohttp's (`httpx-aiohttp`), which
served about 2.8x the requests per second of httpx's own pool at 16 connections here (see
bench/README.md). Tests can pass any `httpx.AsyncBaseTransport` (e.g. `httpx.MockTransport`).
Requests go straight to the transport, not through `httpx.AsyncClient`: a client keeps a
cookie jar, which would carry one tenant's upstream cookies into another tenant's
requests, and its redirect/auth/cookie layers cost ~13% of a bypassed call's CPU for
nothing a transparent proxy wants. Library errors are mapped to the gateway's errors here,
at the boundary.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from dataclasses import dataclass

import httpx

from gateway.errors import UpstreamTimeout, UpstreamUnreachable


def default_transport(kind: str = "aiohttp") -> httpx.AsyncBaseTransport:
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000,
                          keepalive_expiry=30)
    if kind == "httpx":
        return httpx.AsyncHTTPTransport(limits=limits, http2=False)
    from httpx_aiohttp import AiohttpTransport

    return AiohttpTransport(limits=limits)


def _refused(exc: httpx.TimeoutException) -> bool:
    """httpx-aiohttp maps a refused connection to ConnectTimeout: tell them apart."""
    import aiohttp

    cause = exc.__cause__
    return isinstance(cause, aiohttp.ClientConnectorError) and not isinstance(
        cause, aiohttp.ServerTimeoutError | TimeoutError)


class Upstream:
    """Sends requests to `base_url` (which includes `/v1`) and returns streaming responses."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float,
        transport: httpx.AsyncBaseTransport | None = None,
        transport_kind: str = "aiohttp",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # connect and first byte bounded by the setting; a stream may then run as long as it
        # keeps sending (read timeout applies between chunks too).
        self._timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)).as_dict()
        self._transport = transport or default_transport(transport_kind)

    def url(self, path: str, query: bytes = b"") -> str:
        url = f"{self.base_url}/{path.lstrip('/')}"
        return f"{url}?{query.decode('latin-1')}" if query else url

    async def open(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | list[tuple[str, str]],
        content: bytes | AsyncIterable[bytes] | None,
        query: bytes = b"",
    ) -> httpx.Response:
        """Send a request; the response's body is left unread for the caller to stream."""
        request = httpx.Request(method, self.url(path, query), headers=headers,
                                content=content, extensions={"timeout": self._timeout})
        try:
            response = await self._transport.handle_async_request(request)
            response.request = request
            return response
        except httpx.TimeoutException as exc:
            if _refused(exc):
                raise UpstreamUnreachable(
                    f"The upstream API could not be reached ({exc.__cause__!r}).") from exc
            raise UpstreamTimeout(
                f"The upstream API did not answer in time ({type(exc).__name__})."
            ) from exc
        except (httpx.TransportError, OSError) as exc:
            raise UpstreamUnreachable(
                f"The upstream API could not be reached ({type(exc).__name__})."
            ) from exc

    async def aclose(self) -> None:
        await self._transport.aclose()


@dataclass
class UpstreamWait:
    """Time spent waiting on the upstream, so that the gateway's own time can be told apart."""

    seconds: float = 0.0


async def timed_chunks(response: httpx.Response, wait: UpstreamWait) -> AsyncIterator[bytes]:
    """The response's raw bytes as they arrive, adding each wait for them to `wait`."""
    chunks = response.aiter_raw()
    while True:
        started = time.perf_counter()
        try:
            chunk = await anext(chunks)
        except StopAsyncIteration:
            return
        finally:
            wait.seconds += time.perf_counter() - started
        yield chunk
