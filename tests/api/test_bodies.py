"""A session's body decoded from where its last call's ended is the body decoded whole."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.api import bodies
from gateway.api.asgi import parse_json_object
from gateway.api.bodies import BodyCache, BodyEncoder, decode_members
from gateway.api.pieces import PIECEWISE_BYTES, parse_large
from gateway.context.replay import calls_from_messages
from gateway.errors import GatewayError, InvalidJSON
from gateway.wire.chat import ChatCompletions
from gateway.wire.messages import Messages
from tests.sessions import synthetic_session


def outcome(decode: Any, raw: bytes) -> Any:
    """What a decoder makes of `raw`, exactly: its value's own bytes (orjson writes 1 and
    true, 1.0 and 1, a key order apart), or its error."""
    try:
        value = decode(raw)
    except InvalidJSON as error:
        return ("invalid_json", error.message)
    try:
        return orjson.dumps(value)
    except TypeError:  # nested too deep for orjson to write (and for ==): its shape
        return ("deep", _shape(value))


def _shape(value: Any) -> list[Any]:
    """A deeply nested value's nesting, walked without recursion."""
    shape, stack = [], [value]
    while stack:
        item = stack.pop()
        shape.append(type(item).__name__ if isinstance(item, list | dict) else item)
        stack.extend(item.values() if isinstance(item, dict) else
                     item if isinstance(item, list) else ())
    return shape


def cached(cache: BodyCache, tenant: str = "t") -> Any:
    return lambda raw: cache.decode(tenant, raw, parse_json_object)


def test_a_long_session_is_decoded_from_its_last_call_and_exactly_as_whole() -> None:
    calls = calls_from_messages(synthetic_session(0, 120)[1], "gpt-4o-mini")
    cache = BodyCache(min_bytes=1024)
    for dumps in (orjson.dumps, lambda b: json.dumps(b).encode(),
                  lambda b: json.dumps(b, ensure_ascii=False, indent=1).encode()):
        before = cache.resumed
        for body in calls:
            raw = dumps(body)
            assert outcome(cached(cache), raw) == outcome(parse_json_object, raw)
        large = sum(len(dumps(body)) >= 1024 for body in calls)
        assert cache.resumed - before >= large - 2  # every later call but the first kept


def test_a_decoded_body_is_the_callers_own_list() -> None:
    calls = calls_from_messages(synthetic_session(1, 40)[1], "gpt-4o-mini")
    cache = BodyCache(min_bytes=256)
    first = cache.decode("t", orjson.dumps(calls[-2]), parse_json_object)
    first["messages"].append({"role": "user", "content": "changed by its caller"})
    first["model"] = "changed"
    later = cache.decode("t", orjson.dumps(calls[-1]), parse_json_object)
    assert cache.resumed == 1 and later == calls[-1]


def test_tenants_never_resume_from_each_others_bodies() -> None:
    calls = calls_from_messages(synthetic_session(2, 30)[1], "gpt-4o-mini")
    cache = BodyCache(min_bytes=256)
    cache.decode("a", orjson.dumps(calls[-2]), parse_json_object)
    assert cache.decode("b", orjson.dumps(calls[-1]), parse_json_object) == calls[-1]
    assert cache.resumed == 0
    assert cache.decode("a", orjson.dumps(calls[-1]), parse_json_object) == calls[-1]
    assert cache.resumed == 1


def test_the_bodies_kept_stay_within_their_bytes() -> None:
    calls = calls_from_messages(synthetic_session(3, 60)[1], "gpt-4o-mini")
    raws = [orjson.dumps(body) for body in calls[-6:]]
    cache = BodyCache(max_bytes=2 * len(raws[-1]), min_bytes=256)
    for n, raw in enumerate(raws):
        cache.decode(f"tenant-{n}", raw, parse_json_object)  # none resumes: all kept
        assert cache._bytes <= 2 * len(raws[-1])
    assert cache.resumed == 0 and len(cache._order) == 2
    assert sum(len(kept) for kept in cache._by_tenant.values()) == 2


MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "tool", "assistant"]),
                                 "content": st.text(max_size=12) | st.none()})
# Byte strings that put a call's new messages, or something that only looks like them,
# between a kept body's last message and its tail.
MIDDLE = st.sampled_from([
    b"", b" ", b",", b", ", b",]", b", {}", b",{\"role\":\"user\"}", b"{}", b",1,", b",1 ,2",
    b",[1]],\"x\":[2", b",1],[2", b"1],[2", b"],\"messages\":[", b",\"\\ud800\"",
    b",\"\\ud83d\\ude00\"", b",1e400",
    b",NaN", b",\"a\"\x00", b"\xff", b",\"\xc3\xa9\"", b",\"]\"", b",{\"a\":\"]\"}",
    b"," + b"[" * 1030 + b"]" * 1030, b"," + b"[" * 1021 + b"]" * 1021,
])
TAIL = st.sampled_from([
    b"", b',"tools":[{"a":["]"]}]', b',"messages":"later wins"', b',"messages":[]',
    b',"stream":true , "n":[1,2]', b' ', b',"x":"\\"messages\\":["',
])
HEAD = st.sampled_from([
    b'{"model":"m","messages":', b'{ "messages" : ', b'{"model":"messages","messages":',
    b'{"tools":[{"messages":[1]}],"messages":', b'{"messages":1,"messages":',
    b'{"messages":',
])


@settings(max_examples=400, deadline=None)
@given(HEAD, st.lists(MESSAGE, max_size=4), TAIL, st.lists(MESSAGE, max_size=3), MIDDLE,
       st.booleans())
def test_any_next_body_decodes_as_it_does_whole(head: bytes, kept: list[Any], tail: bytes,
                                                new: list[Any], middle: bytes,
                                                valid: bool) -> None:
    cache = BodyCache(min_bytes=0)
    first = head + orjson.dumps(kept) + tail + b"}"
    assert outcome(cached(cache), first) == outcome(parse_json_object, first)
    messages = orjson.dumps(kept)[:-1]
    if valid:  # a well-formed next call: its new messages appended
        sep = b"," if kept and new else b""
        middle = sep + orjson.dumps(new)[1:-1]
    second = head + messages + middle + b"]" + tail + b"}"
    assert outcome(cached(cache), second) == outcome(parse_json_object, second)


def test_nesting_past_orjsons_limit_is_refused_as_in_the_whole_body() -> None:
    head = b'{"model":"m","messages":[{"role":"user","content":"x"}'
    cache = BodyCache(min_bytes=0)
    cache.decode("t", head + b"]}", parse_json_object)
    for depth in (1020, 1021, 1022, 1023, 1024):
        raw = head + b"," + b"[" * depth + b"]" * depth + b"]}"
        assert outcome(cached(cache), raw) == outcome(parse_json_object, raw)


def test_a_body_past_a_megabyte_is_decoded_whole_and_not_kept() -> None:
    messages = [{"role": "tool", "content": "x" * 1000 + str(n), "n": n / 3} for n in
                range(PIECEWISE_BYTES // 900)]
    body = orjson.dumps({"model": "m", "messages": messages})
    cache = BodyCache(min_bytes=0)
    assert outcome(lambda raw: cache.decode("t", raw, parse_large), body) == orjson.dumps(
        orjson.loads(body))
    assert not cache._order  # a body this large is the fitting thread's: never kept
    assert decode_members(b"1],[2") is None and decode_members(b" ") == []


def test_a_body_split_in_the_wrong_place_is_decoded_whole() -> None:
    """Where `"messages": [` is not the body's own history, nothing is kept."""
    cache = BodyCache(min_bytes=0)
    raw = b'{"tools":[{"messages":[1]}],"model":"m"}'
    assert cache.decode("t", raw, parse_json_object) == orjson.loads(raw)
    assert not cache._order
    assert bodies.TAIL_TRIES > 0


def _refusal(check: Any) -> Any:
    """What a validation makes of a body: passes, or its error's message and parameter."""
    try:
        check()
    except GatewayError as error:
        return (type(error).__name__, error.message, error.param)
    return "ok"


CHAT = ChatCompletions()
MESSAGES_WIRE = Messages()
BAD = [  # each breaks one check (the chat format's; the last two, the Messages format's too)
    {"role": "tool", "tool_call_id": "never-opened", "content": "x"},
    {"role": "tool", "content": "no id"},
    {"role": "wizard", "content": "x"},
    {"role": "user", "content": 7},
    {"role": "assistant", "content": None, "tool_calls": "not a list"},
    {"role": "assistant", "content": None, "tool_calls": [{"function": {}}]},
    {"content": "no role"},
    "not an object",
]


def _opened(n: int) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{n}", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": f"call_{n}", "content": "out " * 40}]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 6), st.lists(st.sampled_from([*range(len(BAD)), *[-1, -2] * 4]),
                                   min_size=1, max_size=6), st.integers(0, 3 * len(BAD)),
       st.booleans())
def test_a_resumed_body_is_validated_from_where_its_last_one_was_as_whole(
        turns: int, later: list[int], bad_kept: int, messages_wire: bool) -> None:
    """Each next body (new messages good, bad, answering a tool call opened in the kept part
    (-1) or opening one (-2)) is refused or passed exactly as the whole walk does, message and
    parameter; a kept body that was refused is checked again from its first message."""
    wire = MESSAGES_WIRE if messages_wire else CHAT
    history: list[Any] = [{"role": "system", "content": "s" * 2000}]
    for n in range(turns):
        history += [{"role": "user", "content": f"turn {n}"}, *_opened(n)]
    if bad_kept < len(BAD):  # an invalid message in the kept part
        history.insert(1 + bad_kept % max(1, len(history)), BAD[bad_kept])
    cache = BodyCache(min_bytes=512)
    check = (wire.name, wire.validate_from)
    body = {"model": "m", "messages": history, "stream": False}
    cache.decode("t", orjson.dumps(body), parse_json_object)  # kept, not validated
    for step, pick in enumerate(later):
        new = (BAD[pick] if pick >= 0  # -1: answers the kept part's first call (if any)
               else {"role": "tool", "content": "again", "tool_call_id": "call_0"} if pick == -1
               else _opened(100 + step)[0])  # -2: opens a call of its own
        body = {**body, "messages": [*body["messages"], new]}
        raw = orjson.dumps(body)
        whole = _refusal(lambda raw=raw: wire.validate(orjson.loads(raw)))
        resumed = _refusal(lambda raw=raw: cache.resume("t", raw, check))
        assert resumed == whole
    assert cache.resumed == len(later)


def test_validation_state_is_noted_only_for_a_body_that_passed() -> None:
    history: list[Any] = [{"role": "system", "content": "s" * 2000}, *_opened(0)]
    cache, check = BodyCache(min_bytes=512), (CHAT.name, CHAT.validate_from)
    body = {"model": "m", "messages": history}
    cache.decode("t", orjson.dumps(body), parse_json_object)
    for new, ok in [({"role": "tool", "tool_call_id": "call_0", "content": "a"}, True),
                    ({"role": "tool", "tool_call_id": "call_9", "content": "b"}, False),
                    ({"role": "user", "content": "c"}, False),  # the bad one is kept above
                    ]:
        body = {**body, "messages": [*body["messages"], new]}
        assert (_refusal(lambda b=body: cache.resume("t", orjson.dumps(b), check)) == "ok") is ok


def test_a_body_encoded_by_runs_is_the_body_encoded_whole() -> None:
    calls = calls_from_messages(synthetic_session(1, 80)[1], "gpt-4o-mini")
    encoder, rng = BodyEncoder(), random.Random(3)
    previous: list[Any] = []
    for body in calls:
        messages = [*previous, *body["messages"][len(previous):]]  # the last call's objects
        if rng.random() < 0.3 and len(messages) > 40:  # a step: rewrites, drops, copies
            at = rng.randrange(1, len(messages))
            messages[at] = {**messages[at], "content": "[digest]"}
            del messages[rng.randrange(1, len(messages))]
            messages[5:9] = copy.deepcopy(messages[5:9])
        previous = body["messages"]
        forwarded = {"tools": [{"key": encoder._key}], **body, "messages": messages}
        assert encoder.dumps(forwarded) == orjson.dumps(forwarded)  # the nonce twice: whole
        forwarded = {**body, "messages": messages}
        assert encoder.dumps(forwarded) == orjson.dumps(forwarded)
    assert encoder.reused > 250  # most runs were not encoded again (315 here)


def _nested(levels: int) -> Any:
    deep: Any = "x"
    for _ in range(levels):
        deep = [deep]
    return deep


def test_a_body_orjson_cannot_encode_fails_by_runs_as_whole() -> None:
    """At the deepest nesting orjson writes in a body and one level past it (its limit
    counts from the body, not from a run), the runs encode or fail as the whole body."""
    messages = [{"role": "user", "content": f"m{n}"} for n in range(40)]
    body = {"model": "m", "messages": messages}
    levels = 200
    while True:  # the deepest a message's content can be in the body
        messages[20] = {"role": "user", "content": _nested(levels + 1)}
        try:
            orjson.dumps(body)
        except orjson.JSONEncodeError:
            break
        levels += 1
    encoder = BodyEncoder()
    with pytest.raises(orjson.JSONEncodeError) as whole:
        orjson.dumps(body)
    with pytest.raises(orjson.JSONEncodeError) as runs:
        encoder.dumps(body)
    assert str(runs.value) == str(whole.value)
    messages[20] = {"role": "user", "content": _nested(levels)}
    assert encoder.dumps(body) == orjson.dumps(body)


def test_the_runs_kept_stay_within_their_bytes() -> None:
    encoder = BodyEncoder(max_bytes=20_000)
    for n in range(30):
        messages = [{"role": "user", "content": f"{n}:{k} " + "y" * 100} for k in range(64)]
        assert encoder.dumps({"messages": messages}) == orjson.dumps({"messages": messages})
        assert encoder._bytes <= 20_000
    assert encoder._bytes == sum(len(raw) for _, _, raw in encoder._runs.values())


def test_a_resumed_body_names_the_kept_body_whose_messages_it_repeats() -> None:
    """`Lineage`: a body decoded and kept gets a number; a body resumed from it names that
    number and its message count, and its messages up to that count are the kept body's
    very objects (what lets the engine skip its byte check); two caches never share a
    number; a body not kept, or from another chain, names none (fails when a resumed body
    names itself, or the count is the new body's)."""
    calls = calls_from_messages(synthetic_session(4, 40)[1], "gpt-4o-mini")
    cache, other = BodyCache(min_bytes=256), BodyCache(min_bytes=256)
    first, lineage = cache.decode_traced("t", orjson.dumps(calls[-3]), parse_json_object)
    assert lineage is not None and lineage.after is None
    _, elsewhere = other.decode_traced("t", orjson.dumps(calls[-3]), parse_json_object)
    assert elsewhere is not None and elsewhere.body != lineage.body
    resumed = cache.resume_traced("t", orjson.dumps(calls[-2]))
    assert resumed is not None
    second, proven = resumed
    count = len(first["messages"])
    assert (proven.after, proven.count) == (lineage.body, count)
    assert proven.body not in (lineage.body, elsewhere.body)
    assert all(a is b for a, b in zip(second["messages"][:count], first["messages"],
                                      strict=True))
    third = cache.resume_traced("t", orjson.dumps(calls[-1]))
    assert third is not None and third[1].after == proven.body
    assert third[1].count == len(second["messages"])
    tiny = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    small, none = cache.decode_traced("t", orjson.dumps(tiny), parse_json_object)
    assert none is None and small == tiny  # under min_bytes: not kept, nothing proven


def _sdk_order(body: dict[str, Any], tools: int) -> dict[str, Any]:
    """`body` as the openai SDK writes it: `messages` before `tools`, whose schemas close
    more arrays than `bodies.TAIL_TRIES` (two enums and a `required` list each)."""
    schema = {"type": "object", "required": ["mode", "unit"], "properties": {
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "unit": {"type": "string", "enum": ["s", "ms"]}}}
    return {"model": body["model"], "messages": body["messages"],
            "tools": [{"type": "function", "function": {"name": f"tool_{k}", "parameters": schema}}
                      for k in range(tools)],
            "tool_choice": "auto", "temperature": 0.2}


def test_a_body_with_its_tools_after_the_messages_is_resumed() -> None:
    """The openai SDK writes `tools` after `messages`: 40 tools close 120 arrays after the
    list, past the `]` tried from the end; the list is split before the member that follows
    it, and the session's later calls resume from it, exactly as decoded whole (fails when
    only the last `]` are tried: every call decoded whole, no lineage)."""
    calls = [_sdk_order(body, 40)
             for body in calls_from_messages(synthetic_session(5, 30)[1], "gpt-4o-mini")]
    raws = [orjson.dumps(body) for body in calls[-4:]]
    assert raws[-1].count(b"]", raws[-1].index(b'"tools"')) > bodies.TAIL_TRIES
    cache = BodyCache(min_bytes=256)
    for dumps in (orjson.dumps, lambda b: json.dumps(b, indent=1).encode()):
        for body in calls[-4:]:
            raw = dumps(body)
            assert outcome(cached(cache), raw) == outcome(parse_json_object, raw)
    assert cache.resumed == 6  # every call but each encoding's first
    first, lineage = BodyCache(min_bytes=256).decode_traced("t", raws[0], parse_json_object)
    assert lineage is not None and first == calls[-4]
    # a member named like the next one, after an array inside a tool's schema: not the list
    decoy = {**calls[-1], "tools": [{"type": "function", "function": {
        "name": "t", "parameters": {"enum": ["a"], "tools": 1}}}] + calls[-1]["tools"]}
    raw = orjson.dumps(decoy)
    assert raw.count(b'], "tools":') + raw.count(b'],"tools":') == 2
    assert outcome(cached(BodyCache(min_bytes=256)), raw) == outcome(parse_json_object, raw)
