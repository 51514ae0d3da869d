"""The body cache on bodies of a megabyte and more (`gateway/api/bodies.py`, issue 7): on the
fitting thread (`off_loop`) a long session's large body is resumed from its last one, its new
messages decoded a piece at a time past a megabyte, exactly as the body decoded whole; on the
loop such a body is never resumed nor kept, and a large body kept is dropped only by keeping
another large one (issue 10: no large free on the loop), within its own bound. A Messages or
Responses body is resumed so too, its chat view built on from its last one's on the thread
and kept apart (`Views`: a large view dropped only by keeping another large one). A fitted
large body is encoded from its last encoding's runs (`Fitting.large_encoder`, on the thread
only, bounded per tenant); a bypassed one is validated from where its last one's validation
ended, refused exactly as the whole walk refuses it."""

from __future__ import annotations

import asyncio
import json
import time
from functools import partial
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from bench.wire_convert import CONVERTERS
from gateway.api.bodies import MAX_BODY_BYTES, RUN, BodyCache, BodyEncoder, decode_members
from gateway.api.fitting import Fitting
from gateway.api.pieces import PIECEWISE_BYTES, Unsure, members_in_pieces, parse_large
from gateway.api.route import Call
from gateway.auth import Principal
from gateway.context.offload import FittingThread
from gateway.context.prefix import Lineage
from gateway.context.replay import build_engine, calls_from_messages
from gateway.errors import GatewayError
from gateway.settings import Settings
from gateway.wire.chat import ChatCompletions
from gateway.wire.messages import Messages
from gateway.wire.responses import Responses
from gateway.wire.view import Views, WireFormat
from tests.api.test_bodies import BAD, CHAT, _opened, _refusal, outcome
from tests.sessions import synthetic_session


def _message(n: int, size: int = 40_000) -> dict[str, Any]:
    return {"role": "tool" if n % 2 else "assistant", "tool_call_id": f"call_{n}",
            "content": f"{n}: é ✓ \\ \" " + "x" * size, "n": n / 3, "k": [n, None, True]}


TOOLS = [{"type": "function", "function": {"name": f"tool_{k}", "parameters": {
    "type": "object", "required": ["a"], "properties": {"a": {"enum": ["x", "y"]}}}}}
    for k in range(40)]


def _body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """As the openai SDK writes it: `tools` after `messages` (more `]` than tried)."""
    return {"model": "m", "messages": messages, "tools": TOOLS, "tool_choice": "auto"}


def _session(calls: int, size: int = 40_000) -> list[bytes]:
    messages = [{"role": "user", "content": "task"}]
    raws = []
    for n in range(calls):
        messages.append(_message(n, size))
        raws.append(orjson.dumps(_body(messages)))
    return raws


def test_a_large_body_that_extends_the_last_is_resumed_on_the_fitting_thread() -> None:
    """Bodies from 0.85 to 2.2 MB: each past a megabyte is resumed from the one before it
    (the first of them from the last one under a megabyte), names it in its lineage, shares
    its message objects, and decodes as the whole body does (fails on main: a body of a
    megabyte or more was never kept)."""
    raws = _session(55)
    assert len(raws[20]) < MAX_BODY_BYTES <= len(raws[30]) and len(raws[-1]) > 2 * MAX_BODY_BYTES
    cache = BodyCache()
    last: tuple[dict[str, Any], Any] | None = None
    for raw in raws[20:]:
        before = cache.resumed
        body, lineage = cache.decode_traced("t", raw, parse_large, off_loop=True)
        assert orjson.dumps(body) == orjson.dumps(orjson.loads(raw))
        assert lineage is not None
        if last is not None:
            assert cache.resumed == before + 1
            count = len(last[0]["messages"])
            assert (lineage.after, lineage.count) == (last[1].body, count)
            assert all(a is b for a, b in zip(body["messages"][:count], last[0]["messages"],
                                              strict=True))
        last = body, lineage
    assert cache.resumed == len(raws[21:])
    assert cache._held == len(raws[-1]) and not cache._order  # each replaced the one before


def test_on_the_loop_a_large_body_is_decoded_whole_and_not_kept() -> None:
    raws = _session(40)
    cache = BodyCache()
    cache.decode_traced("t", raws[-2], parse_large, off_loop=True)
    assert cache._held == len(raws[-2])
    body, lineage = cache.decode_traced("t", raws[-1], parse_large)  # the loop's call
    assert lineage is None and cache.resumed == 0 and cache._held == len(raws[-2])
    assert body == orjson.loads(raws[-1])
    assert cache.resume_traced("t", raws[-1]) is None  # what the routes ask on the loop


def test_small_bodies_never_drop_a_large_one_and_large_ones_keep_their_bound() -> None:
    """Keeping small bodies (on the loop) drops small ones only, however many; keeping large
    ones drops the oldest large ones past `large_bytes`; a body past `max_large` is not kept."""
    raws = _session(40)
    large = raws[-1]
    cache = BodyCache(max_bytes=300_000, min_bytes=256, large_bytes=2 * len(large) + 1,
                      max_large=3 * len(large))
    cache.decode_traced("a", large, parse_large, off_loop=True)
    for n, raw in enumerate(raws[:8]):  # small bodies of other tenants, past `max_bytes`
        cache.decode_traced(f"small-{n}", raw, parse_large)
        cache.decode_traced("a", raw, parse_large)  # and of the large body's own tenant
        assert cache._bytes <= 300_000
    assert [split.raw for _, split in cache._large.values()] == [large]
    for tenant in "bcd":
        cache.decode_traced(tenant, large, parse_large, off_loop=True)
        assert cache._held <= 2 * len(large) + 1
    assert [tenant for tenant, _ in cache._large.values()] == ["c", "d"]
    huge = orjson.dumps(_body([_message(n, 400_000) for n in range(16)]))
    assert len(huge) >= 3 * len(large)
    assert cache.decode_traced("e", huge, parse_large, off_loop=True)[1] is None
    assert "e" not in cache._by_tenant


def test_new_messages_past_a_megabyte_decode_a_piece_at_a_time_as_whole() -> None:
    """A large body whose new messages alone pass a megabyte: decoded a piece at a time
    (`members_in_pieces`), to the whole body's value or error, whatever follows the kept
    messages (a lone surrogate, NaN, a trailing comma, a `]` that closes the list early)."""
    kept = [{"role": "user", "content": "task " + "k" * 1_100_000}]
    big = "y" * PIECEWISE_BYTES
    for middle in [b',{"role":"tool","content":"' + big.encode() + b'"}',
                   b', {"a": "' + big.encode() + b'"} , {"b": [1.5, -2, 1e3]}',
                   b',"' + big.encode() + b'\\ud800"', b',"' + big.encode() + b'",NaN',
                   b',"' + big.encode() + b'",', b',"' + big.encode() + b'"],"x":[2',
                   b',"' + big.encode() + b'\xff"']:
        cache = BodyCache()
        first = orjson.dumps({"model": "m", "messages": kept, "tools": TOOLS})
        cache.decode_traced("t", first, parse_large, off_loop=True)
        head, tail = first.split(b'}],"tools"')
        raw = head + b"}" + middle + b'],"tools"' + tail
        assert (outcome(partial(cache.decode, "t", whole=parse_large, off_loop=True), raw)
                == outcome(parse_large, raw)), middle[-12:]


def test_members_decoded_a_piece_at_a_time_are_orjsons() -> None:
    for members in [b"", b" ", b'1, "a" ,{"b":[null,true]} ', b'{"c":"\\u00e9\\n"}',
                    json.dumps([{"x": 1.25}, [], "é"])[1:-1].encode()]:
        assert members_in_pieces(members) == decode_members(members)
    for bad in [b"1],[2", b"1,", b",", b"NaN", b'"\\ud83d\\ude00"', b"1e400", b"\xff"]:
        try:
            members_in_pieces(bad)
        except Unsure:
            continue
        raise AssertionError(bad)


def test_a_large_resumed_body_is_validated_from_where_its_last_one_was_as_whole() -> None:
    """`decode_traced(..., check=)` on the fitting thread: each large body resumed is
    refused or passed exactly as the whole walk does (new messages good or bad, one
    answering a call opened in the kept part); a refused one is checked whole again."""
    history: list[Any] = [{"role": "system", "content": "s" * (MAX_BODY_BYTES + 10)},
                          *_opened(0)]
    cache, check = BodyCache(), (CHAT.name, CHAT.validate_from)
    body = {"model": "m", "messages": history}
    cache.decode_traced("t", orjson.dumps(body), parse_large, off_loop=True, check=check)
    news = [*BAD, {"role": "tool", "tool_call_id": "call_0", "content": "again"},
            *_opened(1), {"role": "user", "content": "fine"}]
    for new in news:
        body = {**body, "messages": [*body["messages"], new]}
        raw = orjson.dumps(body)
        whole = _refusal(lambda raw=raw: CHAT.validate(orjson.loads(raw)))
        resumed = _refusal(lambda raw=raw: cache.decode_traced(
            "t", raw, parse_large, off_loop=True, check=check))
        assert resumed == whole, new
    assert cache.resumed == len(news)


# Anthropic Messages and OpenAI Responses bodies of a megabyte and more (`Fitting`, `Views`).

def _wire_session(name: str, calls: int = 8) -> list[bytes]:
    """A synthetic session's last `calls` calls in `name`'s wire format, its first tool
    output padded so that only the first of them is under a megabyte."""
    chats = calls_from_messages(synthetic_session(7, 40)[1], "gpt-4o-mini")[-calls:]
    convert = CONVERTERS.get(name, lambda chat: chat)  # chat: as it is
    pad = MAX_BODY_BYTES - 200 - len(orjson.dumps(convert(chats[0])))
    lines = "".join(f"line {k}: lorem ipsum dolor. " for k in range(pad // 20))[:pad]
    raws = []
    for chat in chats:
        messages = list(chat["messages"])
        at = next(n for n, message in enumerate(messages) if message["role"] == "tool")
        messages[at] = {**messages[at], "content": messages[at]["content"] + "\n" + lines}
        raws.append(orjson.dumps(convert({**chat, "messages": messages})))
    return raws


WIRES = {"messages": Messages(), "responses": Responses()}


async def _fit_all(fitting: Fitting, wire: WireFormat, raws: list[bytes],
                   session: str) -> list[bytes]:
    """Each body through the managed route's fitting (`Fitting.prepare`), as forwarded."""
    out = []
    for n, raw in enumerate(raws):
        call = Call({"x-ctxgate-session-id": session}, f"{session}-{n}", time.perf_counter(),
                    Principal("large", None))
        prepared = await fitting.prepare(wire, raw, call)
        call.fitted = prepared.fitted
        out.append(prepared.forward)
        fitting.release(call)
    return out


@pytest.mark.parametrize("name", sorted(WIRES))
def test_a_large_messages_or_responses_body_is_resumed_and_its_view_built_on_on_the_thread(
        redis_url: str, name: str) -> None:
    """Through `Fitting.prepare` with its fitting thread: each body of a megabyte or more
    (all but the first) is resumed from the last one and its chat view built on from that
    one's (both on the thread), its view kept apart, and it forwards exactly what the same
    bodies decoded and translated whole forward (fails on main: only a chat body of a
    megabyte was resumed there; a Messages or Responses one was decoded whole)."""
    wire, raws = WIRES[name], _wire_session(name)
    assert len(raws[0]) < MAX_BODY_BYTES <= len(raws[1])

    async def run(keep: bool) -> tuple[list[bytes], Fitting]:
        engine = build_engine(Settings(), with_embedder=False)
        thread = FittingThread(lambda _client: build_engine(Settings(), with_embedder=False),
                               lambda: aioredis.Redis.from_url(redis_url))
        thread.start()
        try:
            fitting = Fitting(engine, engine.metrics, 600.0, thread)
            if not keep:  # nothing kept: every body decoded and translated whole
                fitting._bodies[wire.name] = BodyCache(min_bytes=1 << 62, name=wire.items)
            return await _fit_all(fitting, wire, raws, f"{name}-{keep}"), fitting
        finally:
            await thread.aclose()

    resumed, fitting = asyncio.run(run(True))
    whole, _ = asyncio.run(run(False))
    assert resumed == whole
    assert fitting.bodies_of(wire).resumed == len(raws) - 1
    assert fitting.views.extended == len(raws) - 1
    assert list(fitting.views._large) == [fitting.bodies_of(wire)._large[
        next(iter(fitting.bodies_of(wire)._large))][1].number]  # the last body's view only
    assert not fitting.views._kept  # the first (small) body's view was built on, on the thread


def test_a_small_views_keeping_never_drops_a_large_one() -> None:
    """`Views`: keeping small views (on the loop) past `entries` drops small ones only;
    keeping large ones (on the thread) drops the oldest large ones past `large_entries`;
    a large view is still built on from (fails on main: `Views.view` had no `large`)."""
    wire = WIRES["messages"]
    views = Views(entries=4, large_entries=2)
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "a"}]}
    views.view(wire, body, Lineage(1), large=True)
    for number in range(100, 110):
        views.view(wire, body, Lineage(number))
        assert len(views._kept) <= 4
    assert list(views._large) == [1]
    longer = {**body, "messages": [*body["messages"], {"role": "assistant", "content": "b"}]}
    _, proven = views.view(wire, longer, Lineage(2, 1, 1), large=True)
    assert proven == Lineage(2, 1, 1) and views.extended == 1
    views.view(wire, body, Lineage(3), large=True)
    views.view(wire, body, Lineage(4), large=True)
    assert list(views._large) == [3, 4] and len(views._kept) == 4


# A fitted large body encoded from its last encoding; a bypassed one validated from its last.

def _chat_session(calls: int = 8) -> list[bytes]:
    """A synthetic session's last `calls` chat calls, its first tool output padded so that
    only the first of them is under a megabyte."""
    return _wire_session("chat", calls)


def _thread_fitting(redis_url: str) -> tuple[Fitting, FittingThread]:
    engine = build_engine(Settings(), with_embedder=False)
    thread = FittingThread(lambda _client: build_engine(Settings(), with_embedder=False),
                           lambda: aioredis.Redis.from_url(redis_url))
    thread.start()
    return Fitting(engine, engine.metrics, 600.0, thread), thread


@pytest.mark.parametrize("name", ["chat", *sorted(WIRES)])
def test_a_fitted_large_body_is_encoded_from_its_last_encoding_on_the_thread(
        redis_url: str, name: str) -> None:
    """Through `Fitting.prepare` with its fitting thread, under a budget (so the engine
    changes every body and it is encoded): each fitted body of a megabyte or more goes out
    byte for byte as `orjson.dumps` of it, its unchanged runs reused from the last body's
    encoding (by `large_encoder`, which only the thread uses: the loop's encoder holds none
    of them), within the tenant's bound (fails on main: a large body was encoded whole)."""
    wire = {"chat": ChatCompletions(), **WIRES}[name]
    raws = _wire_session(name)
    assert len(raws[0]) < MAX_BODY_BYTES <= len(raws[1])

    async def run() -> tuple[list[bytes], list[bytes], Fitting, int]:
        fitting, thread = _thread_fitting(redis_url)
        forwarded, whole, small = [], [], 0
        try:
            for n, raw in enumerate(raws):
                call = Call({"x-ctxgate-session-id": f"enc-{name}",
                             "x-ctxgate-budget-tokens": "60000"}, f"enc-{name}-{n}",
                            time.perf_counter(), Principal("large", None))
                prepared = await fitting.prepare(wire, raw, call)
                assert prepared.fitted is not None and prepared.fitted.changed
                forwarded.append(prepared.forward)
                whole.append(orjson.dumps(orjson.loads(prepared.forward)))
                call.fitted = prepared.fitted
                fitting.release(call)
                if n == 0:
                    small = fitting.encoder.encoded + fitting.encoder.reused
        finally:
            await thread.aclose()
        return forwarded, whole, fitting, small

    forwarded, whole, fitting, small = asyncio.run(run())
    assert forwarded == whole
    big = fitting.large_encoder
    assert big.reused >= len(raws) - 2  # every large body but the first reused some runs
    # the loop's encoder encoded the first (small) body only
    assert fitting.encoder.encoded + fitting.encoder.reused == small
    assert set(big._tenants) == {"large"}
    assert big._tenant_bytes["large"] == big._bytes <= big._per_tenant


def test_the_large_encoders_runs_are_bounded_per_tenant_and_in_all() -> None:
    """`BodyEncoder(max_bytes, per_tenant)`: a tenant's runs past its bound drop its own
    least recently used ones, never another tenant's; past `max_bytes`, everybody's oldest;
    each encoding is orjson's, of `messages` or of the list `name` names (a Responses
    body's `input`) (fails on main: no `per_tenant`, no `name`)."""
    def body(tag: str, n: int, name: str = "messages") -> dict[str, Any]:
        return {"model": "m", name: [{"role": "user", "content": f"{tag}{n}:{k} " + "y" * 100}
                                     for k in range(4 * RUN)]}

    encoder = BodyEncoder(max_bytes=60_000, per_tenant=25_000)
    a = body("a", 0)
    assert encoder.dumps(a, tenant="a") == orjson.dumps(a)
    assert encoder.dumps(a, tenant="a") == orjson.dumps(a) and encoder.reused == 4
    held_a = encoder._tenant_bytes["a"]
    for n in range(1, 5):  # tenant b, well past its own bound
        b = body("b", n)
        assert encoder.dumps(b, tenant="b") == orjson.dumps(b)
        assert encoder._tenant_bytes["b"] <= 25_000
        assert encoder._tenant_bytes["a"] == held_a  # a's runs untouched
    for n in range(5):  # five more tenants: past everybody's bound
        c = body("c", n, "input")
        assert encoder.dumps(c, "input", tenant=f"c{n}") == orjson.dumps(c)
        assert encoder._bytes <= 60_000
    assert encoder._bytes == sum(encoder._tenant_bytes.values()) == sum(
        len(raw) for _, _, raw in encoder._runs.values())
    assert "a" not in encoder._tenants  # the oldest, dropped for everybody's bound


def test_a_large_bypassed_body_is_validated_from_where_its_last_one_was(
        redis_url: str) -> None:
    """`Fitting.parse_as_is` on the fitting thread: a large bypassed body that continues the
    last one is validated from where that one's validation ended (its state noted on the
    body kept, as a fitted one's is), and each is refused exactly as the whole walk refuses
    it, an `InvalidRequest` (an OpenAI-shaped 400), whatever follows a refusal (fails on
    main: a large bypassed body was validated whole, no state kept)."""
    history: list[Any] = [{"role": "system", "content": "s" * (MAX_BODY_BYTES + 10)},
                          *_opened(0)]
    body: dict[str, Any] = {"model": "m", "messages": history}
    # good ones first (one answering the call opened in the first body), then each bad one
    news = [*_opened(1), {"role": "tool", "tool_call_id": "call_0", "content": "again"},
            {"role": "user", "content": "fine"}, *BAD]

    async def run() -> tuple[list[Any], list[Any], Fitting]:
        nonlocal body
        fitting, thread = _thread_fitting(redis_url)
        got, checked = [], []
        try:
            for n, new in enumerate([None, *news]):
                if new is not None:
                    body = {**body, "messages": [*body["messages"], new]}
                call = Call({"x-ctxgate-session-id": "bypass"}, f"bypass-{n}",
                            time.perf_counter(), Principal("large", None))
                raw = orjson.dumps(body)
                try:
                    parsed = await fitting.parse_as_is(CHAT, raw, call)
                except GatewayError as error:
                    got.append((type(error).__name__, error.message, error.param))
                else:
                    got.append("ok" if parsed == body else "differs")
                    call.sent_as_is = parsed
                    fitting.release(call)
                kept = next(iter(fitting.bodies._large.values()))[1]
                checked.append(kept.checked.get(CHAT.name, (None,))[0])
        finally:
            await thread.aclose()
        return got, checked, fitting

    got, checked, fitting = asyncio.run(run())
    whole, walked = [], {"model": "m", "messages": history}
    for new in [None, *news]:
        if new is not None:
            walked = {**walked, "messages": [*walked["messages"], new]}
        whole.append(_refusal(lambda walked=walked: CHAT.validate(walked)))
    assert got == whole and got[:5] == ["ok"] * 5 and "ok" not in got[5:]
    assert fitting.bodies.resumed == len(news)
    # after each body that passed, its validation's end noted on it: the next starts there
    ends = [len(history) + n if result == "ok" else None for n, result in enumerate(got)]
    assert checked[1:] == ends[1:]
