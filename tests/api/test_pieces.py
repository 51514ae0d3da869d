"""A large body decoded a piece at a time is decoded exactly as orjson decodes it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.api.asgi import parse_json_object
from gateway.api.pieces import PIECEWISE_BYTES, parse_json_in_pieces, parse_large
from gateway.errors import InvalidJSON

CASES = [
    b"", b"[]", b"3", b'"s"', b"{", b"{}", b" {} ", b'{"a":1,}', b'{"a":[1,]}', b'{"a":NaN}',
    b'{"a":Infinity}', b'{"a":1} x', b"\xff", b'{"a" 1}', b'{"a":1 "b":2}', b'{1:2}',
    b' { "a" : [ 1 , 2 ] , "b" : { } } ', b'{"a":[]}', b'{"a":"\\ud800"}',
    b'{"a":"\\ud83d\\ude00 \\u00e9"}', b'{"a":1e400}', b'{"a":123456789012345678901234567890}',
    b'{"a":-5,"b":2.5e3,"c":[true,false,null],"a":"last wins"}', b'{"messages":[{"x":[}]}',
    '{"messages":[{"role":"user","content":"é ☃ 𝄞"}]}'.encode(),
]


def outcome(parse: Any, raw: bytes) -> Any:
    try:
        return parse(raw)
    except InvalidJSON as error:
        return ("invalid_json", error.message)


@pytest.mark.parametrize("raw", CASES)
def test_every_case_decodes_or_fails_as_orjson_would(raw: bytes) -> None:
    assert outcome(parse_json_in_pieces, raw) == outcome(parse_json_object, raw)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(), JSON | st.lists(JSON, max_size=6), max_size=5),
       st.sampled_from([0, 2]))
def test_random_objects_decode_as_orjson_decodes_them(value: dict[str, Any], indent: int) -> None:
    option = orjson.OPT_INDENT_2 if indent else 0
    try:
        raw = orjson.dumps(value, option=option)
    except TypeError:  # an integer orjson cannot write
        return
    assert outcome(parse_json_in_pieces, raw) == outcome(parse_json_object, raw)


def test_a_long_sessions_body_under_a_megabyte_is_decoded_in_one_go() -> None:
    """Past 400 messages a call is fitted off the loop, but a body under `PIECEWISE_BYTES`
    is decoded by orjson there, not a piece at a time (7x the CPU at call 300 of the
    synthetic session: a cost that grew with the session, not with the call's news)."""
    import time

    from gateway.context.offload import LARGE_MESSAGES, is_large
    from gateway.context.replay import calls_from_messages
    from tests.sessions import synthetic_session

    body = calls_from_messages(synthetic_session(0, 300)[1], "gpt-4o-mini")[-1]
    raw = orjson.dumps(body)
    assert is_large(raw) and len(body["messages"]) > LARGE_MESSAGES
    assert len(raw) < PIECEWISE_BYTES
    assert parse_large(raw) == body == parse_json_in_pieces(raw)

    def cpu(parse: Any) -> float:
        best = float("inf")
        for _ in range(7):
            started = time.process_time()
            parse(raw)
            best = min(best, time.process_time() - started)
        return best

    assert cpu(parse_large) < cpu(parse_json_in_pieces) / 2
    big = orjson.dumps({"messages": [{"role": "user", "content": "x" * PIECEWISE_BYTES}]})
    assert parse_large(big) == orjson.loads(big)
