"""A Messages or Responses session fitted as its route fits it (`Fitting.prepare`, the real
engine): a call whose body continues the session's last one is decoded and translated from
where that one ended and hands the engine its lineage (the engine skips its byte check),
and forwards the very bytes of the same session whose every body is decoded whole; an
edited history is decoded and translated whole, unproven (issue 7)."""

from __future__ import annotations

import json
import time
from typing import Any

import orjson
import pytest

from bench.wire_convert import CONVERTERS
from gateway.api.bodies import MIN_BYTES
from gateway.api.fitting import Fitting, Prepared
from gateway.api.route import Call
from gateway.auth import Principal
from gateway.context.engine import ContextEngine
from gateway.context.prefix import Prefix
from gateway.context.replay import calls_from_messages
from gateway.observability.metrics import Metrics
from gateway.wire.messages import Messages
from gateway.wire.responses import Responses
from gateway.wire.view import WireFormat
from tests.context.test_prefix_cache import _engine
from tests.sessions import synthetic_session

WIRES = {"responses": Responses(), "messages": Messages()}


def _call(session: str, n: int) -> Call:
    return Call({"x-ctxgate-session-id": session}, f"{session}-{n}", time.perf_counter(),
                Principal("tenant-lineage", None))


def _peek(engine: ContextEngine, session: str) -> Prefix:
    prefix = engine.prefixes.take("tenant-lineage", session)
    assert prefix is not None
    engine.prefixes.put("tenant-lineage", session, prefix)
    return prefix


def _out(prepared: Prepared) -> tuple[Any, ...]:
    fitted = prepared.fitted
    assert fitted is not None
    return (fitted.changed, fitted.tokens_before, fitted.tokens_after, len(fitted.drops))


@pytest.mark.parametrize("name", sorted(WIRES))
async def test_a_continued_body_is_translated_on_and_forwards_the_whole_paths_bytes(
        settings: Any, embedder: Any, name: str) -> None:
    """Fails when a continued body is not given its view's lineage (the engine's proven
    count stays 0), when an edited one is, or when the forwarded bytes differ."""
    wire: WireFormat = WIRES[name]
    calls = [CONVERTERS[name](c) for c in
             calls_from_messages(synthetic_session(5, 40)[1], "gpt-4o-mini")]
    edited = json.loads(json.dumps(calls[-1]))  # an earlier turn edited by the client
    edited[wire.items][3] = {**edited[wire.items][3], "content": "edited"} if name == (
        "messages") else {"role": "user", "content": "edited"}
    retooled = {**calls[-1], "tools": [*calls[-1].get("tools", []), *(
        [{"type": "function", "name": "extra", "parameters": {}}] if name == "responses"
        else [{"name": "extra", "input_schema": {"type": "object"}}])]}
    bodies = [*calls, edited, calls[-1], retooled]
    proven = Fitting(_engine(settings, embedder, True), Metrics(), 60.0)
    whole = Fitting(_engine(settings, embedder, True), Metrics(), 60.0)
    kept = 0
    for n, body in enumerate(bodies):
        compact = orjson.dumps(body)
        indented = json.dumps(body, indent=n + 1).encode()  # never continues a kept body
        before_views = proven.views.extended
        before = _peek(proven.engine, "s").proven if n else 0
        one = await proven.prepare(wire, compact, _call("s", n))
        other = await whole.prepare(wire, indented, _call("s", n))
        assert _out(one) == _out(other), f"call {n}"
        if one.forward != compact or other.forward != indented:
            assert one.forward == other.forward, f"call {n}"
        extended = proven.views.extended - before_views
        if body is edited:
            assert extended == 0 and _peek(proven.engine, "s").proven <= before  # unproven
        elif n < len(calls) and n and len(orjson.dumps(calls[n - 1])) >= MIN_BYTES:
            assert extended == 1, f"call {n}"  # built on from the last body's view
            kept += 1
        if n == len(calls) - 1:  # the engine's byte check skipped on most continued calls
            assert _peek(proven.engine, "s").proven >= kept // 2
    assert kept >= 10
    assert _peek(whole.engine, "s").proven == 0
