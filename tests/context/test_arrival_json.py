"""cluster.arrival_json: a new output that is JSON laid out with whitespace goes out without
the whitespace outside its strings from its first call on. The same JSON value, every string
as it was, nothing sent before changes, and the output still ages from its original text.
Customer-service agents (tau-bench) read reservation records written with `", "` and `": "`:
8-10% of each is layout, paid at full price on arrival and cached on every later call."""

from __future__ import annotations

import json
import uuid
from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.lines import minified
from gateway.context.session import MemorySessionStore
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.sessions import drops_add_up, fit_agreed

from .conftest import without_credit, without_repay, without_young

TOOLS = [{"type": "function", "function": {
    "name": name, "parameters": {"type": "object"}}}
    for name in ("get_user_details", "get_reservation_details")]
SYSTEM = "# Airline agent policy\nYou help users book, change and cancel reservations."


def _reservation(k: int) -> dict[str, Any]:
    return {
        "reservation_id": f"RES{k:03d}X", "user_id": "omar_davis_3817", "origin": "SFO",
        "destination": "MCO", "cabin": "economy",
        "flights": [{"origin": a, "destination": b, "flight_number": f"HAT{100 * n + k}",
                     "date": f"2024-05-{16 + n // 2}", "price": 133 + 10 * n + k}
                    for n, (a, b) in enumerate([("SFO", "BOS"), ("BOS", "MCO"),
                                                ("MCO", "PHX"), ("PHX", "SFO")])],
        "passengers": [{"first_name": "Omar", "last_name": "Davis", "dob": "1982-10-19"}],
        "note": f"window seat,  \"quiet\" row {k}",  # spaces and escapes inside a string
    }


def _session(n: int, repeat_last: bool = False) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Hi, I am omar_davis_3817; please downgrade my flights."},
    ]
    for k in range(n):
        j = k - 1 if repeat_last and k == n - 1 else k  # the last output repeats the one before
        messages.append({"role": "assistant", "content": f"Checking reservation {k}.",
                         "tool_calls": [{"id": f"c{k}", "type": "function", "function": {
                             "name": "get_reservation_details",
                             "arguments": json.dumps({"reservation_id": f"RES{j:03d}X"})}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{k}",
                         "content": json.dumps(_reservation(j))})
    return messages


def _engine(settings: Settings, embedder: Any, cache: bool) -> ContextEngine:
    return ContextEngine(settings, None, Metrics(), DropLog("/dev/null", "none", None), embedder,
                         sessions=MemorySessionStore(), prefix_cache_size=1024 if cache else 0)


async def _replay(settings: Settings, embedder: Any, messages: list[dict[str, Any]]
                  ) -> tuple[Any, ContextEngine]:
    """Every call of the session through a prefix-cached engine and a full-path one: both
    forward the same bytes; every call extends the previous; the drop log adds up."""
    cached, plain = _engine(settings, embedder, True), _engine(settings, embedder, False)
    session = uuid.uuid4().hex
    previous: list[Any] | None = None
    fitted: Any = None
    for end in range(4, len(messages) + 1, 2):
        body = {"messages": messages[:end], "tools": TOOLS}
        call = CallContext("t-json", uuid.uuid4().hex, {"x-ctxgate-session-id": session})
        fitted = await fit_agreed(cached, plain, body, call)  # the full path agrees
        assert drops_add_up(fitted)
        forwarded = fitted.body["messages"]
        if previous is not None and fitted.task_class == "agent":
            assert forwarded[: len(previous)] == previous or any(
                d.reason == "aged" for d in fitted.drops)
        previous = list(forwarded)
    return fitted, cached


def test_minified_keeps_every_string_and_leaves_what_is_not_json() -> None:
    text = json.dumps(_reservation(7), indent=2)
    out = minified(text)
    assert out is not None and len(out) < len(text) * 0.75
    assert json.loads(out) == json.loads(text)
    assert 'window seat,  \\"quiet\\" row 7' in out  # a string's own spaces stay
    assert minified(out) is None  # nothing left to take
    assert minified("[(1, 'a b'), (2, 'c')]") is None  # SQL rows as Python prints them
    assert minified("Found 2 results: {a, b}") is None
    assert minified('{"a": 1, "b": [1, 2') is None  # cut off: not JSON


async def test_a_json_output_goes_out_minified_from_its_first_call(
    settings: Settings, embedder: Any
) -> None:
    messages = _session(4)
    fitted, cached = await _replay(without_credit(settings), embedder, messages)
    assert fitted.task_class == "agent"
    sent = [m["content"] for m in fitted.body["messages"] if m["role"] == "tool"]
    sent_by_client = [m["content"] for m in messages if m["role"] == "tool"]
    for out, original in zip(sent, sent_by_client, strict=True):
        assert json.loads(out) == json.loads(original)
        assert len(out) <= len(original) - 30  # ", " and ": " went
    assert sent[-1] == minified(sent_by_client[-1])  # the latest output too: on arrival
    assert {d.reason for d in fitted.drops} == {"minified_json"}
    assert cached.prefixes.reused >= 2  # minified on the cache's path too


async def test_a_repeat_of_a_minified_output_still_points_to_it(
    settings: Settings, embedder: Any
) -> None:
    messages = _session(4, repeat_last=True)
    fitted, _ = await _replay(without_credit(settings), embedder, messages)
    sent = [m["content"] for m in fitted.body["messages"] if m["role"] == "tool"]
    assert sent[-1].startswith("[ctxgate: repeats an earlier tool result:")
    assert sent[-2] == minified(messages[-3]["content"])


async def test_a_minified_output_still_ages_into_a_digest_of_its_original(
    settings: Settings, embedder: Any
) -> None:
    messages = _session(14)
    # every rewrite of a step kept: with the repay rule a 14-call session leaves the first
    # output's small digest out (steps.unrepaid)
    fitted, _ = await _replay(without_repay(settings), embedder, messages)
    reasons = {d.message_index: d.reason for d in fitted.drops}
    assert reasons[3] == "aged"  # the first output: digested, once no longer the latest
    assert reasons[len(messages) - 1] == "minified_json"
    first = next(m["content"] for m in fitted.body["messages"] if m["role"] == "tool")
    assert "RES000X" in first and "…" in first  # a digest: its arrays cut, its ids kept


def _profile(k: int) -> str:
    """A flat record: every field a value the agent may re-type, nothing a digest can cut."""
    return json.dumps({"user_id": f"user_{k:04d}", "first_name": "Omar", "last_name": "Davis",
                       "email": f"omar.davis{k}@example.com", "dob": "1982-10-19",
                       "membership": "gold", "city": "San Diego", "zip": f"92{k:03d}",
                       "payment_id": f"credit_card_{2929700 + k}", "last_four": "7803"})


async def test_an_aged_output_its_digest_would_hardly_shorten_stays_as_sent(
    settings: Settings, embedder: Any
) -> None:
    """A step that would rewrite it re-sends everything after it for next to nothing."""
    messages = _session(8)
    for k, i in enumerate(range(3, len(messages), 2)):
        messages[i]["content"] = _profile(k)
    fitted, _ = await _replay(settings, embedder, messages)
    reasons = {d.message_index: d.reason for d in fitted.drops}
    sent = fitted.body["messages"]
    kept = [i for i, reason in reasons.items() if reason == "minified_kept"]
    assert 3 in kept and len(kept) >= 3  # profiles a step aged, kept as first sent
    for i in kept:
        assert sent[i]["content"] == minified(messages[i]["content"])
    assert reasons[len(messages) - 1] == "minified_json"


def test_minified_leaves_out_null_members_and_keeps_every_value() -> None:
    """An object's member whose value is null names nothing a later call can use; every
    other value stays, every string byte for byte, arrays keep their nulls."""
    order = {"cancel_reason": None, "order_id": "#W6390527", "return_items": None,
             "items": [{"item_id": "8384507844", "options": None, "price": 137.94}],
             "note": 'says "a":null, {"b":null}', "empty": {"x": None}, "slots": [None, 1],
             "status": "null", "exchange_items": None}
    text = json.dumps(order, indent=2)
    out = minified(text)
    assert out is not None and len(out) < len(json.dumps(order, separators=(",", ":"))) - 60
    assert json.loads(out) == {
        "order_id": "#W6390527", "items": [{"item_id": "8384507844", "price": 137.94}],
        "note": 'says "a":null, {"b":null}', "empty": {}, "slots": [None, 1],
        "status": "null"}
    assert 'says \\"a\\":null, {\\"b\\":null}' in out  # a string's own text stays
    # sent without whitespace already: its null members alone are worth leaving out
    compact = json.dumps({"a": None, "b": None, "c": "RES001X"}, separators=(",", ":"))
    assert minified(compact) == '{"c":"RES001X"}'
    assert minified('{"c":"RES001X"}') is None  # nothing to take


async def test_a_json_output_goes_out_without_its_null_members_from_its_first_call(
    settings: Settings, embedder: Any
) -> None:
    """On arrival, so no prefix already sent changes: every call extends the previous one
    and every value of every output is still sent."""
    messages = _session(4)
    for k, i in enumerate(range(3, len(messages), 2)):
        record = {**_reservation(k), "cancel_reason": None, "return_items": None,
                  "exchange": {"items": None, "price_difference": None}}
        messages[i]["content"] = json.dumps(record)  # no layout: only the nulls to take
    fitted, cached = await _replay(without_credit(settings), embedder, messages)
    sent = [m["content"] for m in fitted.body["messages"] if m["role"] == "tool"]
    for k, out in enumerate(sent):
        assert json.loads(out) == {**_reservation(k), "exchange": {}}
    assert sent[-1] == minified(messages[-1]["content"])  # the latest output: on arrival
    assert {d.reason for d in fitted.drops} == {"minified_json"}
    assert cached.prefixes.reused >= 2


async def test_a_kept_record_short_once_its_nulls_went_is_still_masked_when_old(
    settings: Settings, embedder: Any
) -> None:
    """A record kept as first sent (`minified_kept`) joins the batch of old digests masked
    by its size as the client sent it: without its layout and null members it is under
    EXPIRED_MIN_TOKENS, and it would go on being sent whole on every later call."""
    messages = _session(26)  # one task: batches as the session's later tasks get them
    nulls = {f"field_{j}": None for j in range(14)}
    for k, i in enumerate(range(3, len(messages), 2)):
        record = {"user_id": f"user_{k:04d}", "email": f"omar.davis{k}@example.com",
                  "payment_id": f"credit_card_{2929700 + k}", "city": "San Diego"}
        messages[i]["content"] = json.dumps({**record, **nulls}, indent=2)
    fitted, _ = await _replay(without_young(settings), embedder, messages)
    reasons = {d.message_index: d.reason for d in fitted.drops}
    sent = fitted.body["messages"]
    assert reasons[len(messages) - 1] == "minified_json"
    assert 100 < len(minified(messages[3]["content"]) or "") < 160  # short once minified
    assert "user_0000" not in sent[3]["content"]  # the oldest record: masked
    assert sent[3]["content"].startswith("[ctxgate:")
