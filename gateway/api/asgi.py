"""Small pure-ASGI helpers shared by the routes: bodies, headers, responses, disconnects."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeVar

import orjson

from gateway.errors import ClientGone, InvalidJSON, RequestTooLarge

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
RawHeaders = list[tuple[bytes, bytes]]
T = TypeVar("T")
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Headers that describe one hop, not the message (RFC 9110 §7.6.1), plus those we recompute.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length",
})
JSON = b"application/json"


def request_headers(scope: Scope) -> dict[str, str]:
    """Lower-cased request headers; repeated headers joined with ', '."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


async def read_body(receive: Receive, limit: int, declared: str | None = None) -> bytes:
    """The whole request body; RequestTooLarge past `limit`, ClientGone on disconnect."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(f"Request body of {declared} bytes exceeds the limit of {limit}.")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(f"Request body exceeds the limit of {limit} bytes.")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def parse_json_object(body: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidJSON(f"The request body is not valid JSON: {exc}.") from None
    if not isinstance(value, dict):
        raise InvalidJSON("The request body must be a JSON object.")
    return value


async def send_response(
    send: Send, status: int, body: bytes, headers: RawHeaders, content_type: bytes = JSON
) -> None:
    raw = [*headers, (b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def cancel_on_disconnect(receive: Receive, work: Awaitable[T]) -> T:
    """Run `work`; if the client hangs up first, cancel it and raise ClientGone."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise ClientGone
