"""A large JSON body decoded a piece at a time, so the event loop keeps its turn (issue 10).

`orjson.loads` holds the GIL for all of a body: 50-100 ms for 2-3.5 MB on a busy machine,
during which the gateway's loop, on another thread, cannot run. The fitting thread decodes
a large body here instead: the top-level object key by key, and each top-level array (the
history: `messages`, `input`) element by element, with the standard library's C scanner.
Between pieces the interpreter may switch threads, so the loop waits at most one piece
(one message), not the whole body. Slower than orjson in all (it runs off the loop, in the
call's time budget); anything it does not decode exactly as orjson would (an error, NaN)
is handed to orjson, whose value or error then stands; so is a body with a surrogate
escape (`\\ud83d`), since the standard library accepts a lone one and orjson does not.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.api.asgi import parse_json_object

_SPACE = re.compile(r"[ \t\n\r]*")
PIECEWISE_BYTES = 1 << 20  # a body at least this size is decoded a piece at a time


class Unsure(Exception):
    """Not decoded here: orjson decides."""


def _refuse_constant(name: str) -> Any:
    raise Unsure(name)  # NaN, Infinity: orjson refuses them


def _float(text: str) -> float:
    value = float(text)
    if value in (_INF, -_INF):
        raise Unsure(text)  # 1e400: orjson refuses it
    return value


def _int(text: str) -> int:
    value = int(text)
    if not _INT_MIN <= value <= _INT_MAX:
        raise Unsure(text)  # orjson reads it as a float
    return value


_INF = float("inf")
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_DECODE = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_float,
                           parse_int=_int).raw_decode


def parse_large(raw: bytes) -> dict[str, Any]:
    """A large call's body (`offload.is_large`: a megabyte, or 400 messages) as the fitting
    thread decodes it: a piece at a time from `PIECEWISE_BYTES` on, in one go with orjson
    below. A long session's calls pass 400 messages well before a megabyte (602 messages
    in 777 KB at call 300 of the synthetic session): orjson decodes that in 0.5 ms of CPU,
    the pieces in 3.3 ms, and holding the loop for half a millisecond is no stall."""
    if len(raw) < PIECEWISE_BYTES:
        return parse_json_object(raw)
    return parse_json_in_pieces(raw)


def parse_json_in_pieces(raw: bytes) -> dict[str, Any]:
    """What `parse_json_object(raw)` returns (or raises), decoded a piece at a time."""
    if b"\\ud" in raw or b"\\uD" in raw:
        return parse_json_object(raw)  # a surrogate escape: orjson refuses a lone one
    try:
        return _object(raw.decode("utf-8"))
    except (Unsure, ValueError, IndexError, RecursionError):
        return parse_json_object(raw)  # ValueError: JSONDecodeError and UnicodeDecodeError


def members_in_pieces(members: bytes) -> list[Any]:
    """The array `[members]` (a large body's new messages, `bodies.decode_members`) decoded
    a piece at a time: a member each; `Unsure` when it is not decoded here exactly as orjson
    would decode it (an error, not one array: orjson decides)."""
    if b"\\ud" in members or b"\\uD" in members:
        raise Unsure("a surrogate escape")
    try:
        text = "[" + members.decode("utf-8") + "]"
        out, at = _array(text, 0)
    except (ValueError, IndexError, RecursionError) as error:
        raise Unsure("not decoded here") from error
    if at != len(text):
        raise Unsure("not one array")  # `1],[2`: a `]` of the members closed it
    return out


def _skip(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    assert match is not None  # `*`: matches the empty string
    return match.end()


def _object(text: str) -> dict[str, Any]:
    at = _skip(text, 0)
    if text[at] != "{":
        raise Unsure("not an object")
    out: dict[str, Any] = {}
    at = _skip(text, at + 1)
    while text[at] != "}":
        if text[at] != '"':
            raise Unsure("key")
        key, at = _DECODE(text, at)
        at = _skip(text, at)
        if text[at] != ":":
            raise Unsure("colon")
        at = _skip(text, at + 1)
        out[key], at = _array(text, at) if text[at] == "[" else _DECODE(text, at)
        at = _next(text, at, "}")
    if _skip(text, at + 1) != len(text):
        raise Unsure("trailing data")
    return out


def _array(text: str, at: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    at = _skip(text, at + 1)
    while text[at] != "]":
        value, at = _DECODE(text, at)
        out.append(value)
        at = _next(text, at, "]")
    return out, at + 1


def _next(text: str, at: int, close: str) -> int:
    """Past the comma after a member, or at the container's `close`."""
    at = _skip(text, at)
    if text[at] == ",":
        at = _skip(text, at + 1)
        if text[at] == close:
            raise Unsure("trailing comma")
    elif text[at] != close:
        raise Unsure("separator")
    return at
