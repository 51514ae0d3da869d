"""A large body decoded a piece at a time is decoded exactly as orjson decodes it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.api.asgi import parse_json_object
from gateway.api.pieces import parse_json_in_pieces
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
