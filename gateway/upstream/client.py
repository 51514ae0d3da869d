"""The upstream OpenAI-compatible API, behind a transport seam.

httpx is the interface; the transport underneath is aiohttp's (`httpx-aiohttp`), which
served about 3x the requests per second of httpx's own pool at 16 connections here (see
bench/README.md). Tests can pass any `httpx.AsyncBaseTransport` (e.g. `httpx.MockTransport`).
Library errors are mapped to the gateway's errors here, at the boundary.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping

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
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0))
        self._client = httpx.AsyncClient(
            transport=transport or default_transport(transport_kind), timeout=timeout
        )

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
        request = self._client.build_request(
            method, self.url(path, query), headers=headers, content=content
        )
        try:
            return await self._client.send(request, stream=True)
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
        await self._client.aclose()
