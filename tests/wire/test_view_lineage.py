"""A Messages or Responses body's chat view built on from its session's last body's view
(`extend_view`, `gateway.wire.view.Views`) is the view built whole, its leading messages
the earlier view's own objects where they are counted so, and the earlier view untouched
(issue 7: only the new part translated)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.context.prefix import Lineage
from gateway.wire import messages as messages_wire
from gateway.wire import responses as responses_wire
from gateway.wire.messages import Messages
from gateway.wire.responses import Responses
from gateway.wire.view import ChatView, Views

TEXT = st.text(alphabet="abc xyz/.:019\n", min_size=0, max_size=12)
PROPERTY = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def responses_items(draw: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for t in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["user", "assistant", "call", "custom", "output",
                                     "stray", "reasoning", "opaque", "parts"]))
        if kind == "user":
            items.append({"role": "user", "content": draw(TEXT)})
        elif kind == "assistant":
            items.append({"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": draw(TEXT), "annotations": []}]})
        elif kind == "call":
            items.append({"type": "function_call", "call_id": f"c{t}", "name": "sh",
                          "arguments": draw(TEXT)})
        elif kind == "custom":
            items.append({"type": "custom_tool_call", "call_id": f"c{t}", "name": "patch",
                          "input": draw(TEXT)})
        elif kind == "output":  # answers an earlier call (or none: opaque)
            items.append({"type": "function_call_output",
                          "call_id": f"c{draw(st.integers(0, max(t - 1, 0)))}",
                          "output": draw(TEXT)})
        elif kind == "stray":
            items.append({"type": "custom_tool_call_output", "call_id": "nowhere",
                          "output": [{"type": "input_text", "text": draw(TEXT)}]})
        elif kind == "reasoning":
            items.append({"type": "reasoning", "id": f"rs{t}", "summary": [],
                          "encrypted_content": draw(TEXT)})
        elif kind == "opaque":
            items.append({"type": "web_search_call", "id": f"ws{t}", "status": "completed"})
        else:
            items.append({"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": draw(TEXT)},
                {"type": "input_image", "image_url": "data:,"}]})
    return items


@st.composite
def messages_list(draw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "thinking", "unknown", "results",
                                     "system", "text"]))
        if kind == "user":
            out.append({"role": "user", "content": draw(TEXT)})
        elif kind == "text":
            out.append({"role": "assistant", "content": draw(TEXT)})
        elif kind in ("assistant", "thinking", "unknown"):
            blocks: list[dict[str, Any]] = []
            if kind == "thinking":
                blocks.append({"type": "thinking", "thinking": draw(TEXT), "signature": "s"})
            if kind == "unknown":
                blocks.append({"type": "container_upload", "file_id": "f"})
            blocks += [{"type": "text", "text": draw(TEXT)},
                       {"type": "tool_use", "id": f"t{t}", "name": "sh",
                        "input": {"cmd": draw(TEXT)}}]
            out.append({"role": "assistant", "content": blocks})
        elif kind == "results":
            out.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{max(t - 1, 0)}",
                 "content": draw(TEXT)},
                *([{"type": "text", "text": draw(TEXT)}] if draw(st.booleans()) else [])]})
        else:
            out.append({"role": "system", "content": draw(TEXT)})
    return out


def _same(one: ChatView, other: ChatView) -> None:
    """Equal as the engine and the renderer read them (key order and types included)."""
    assert orjson.dumps(one.body) == orjson.dumps(other.body)
    assert [list(s) if isinstance(s, tuple | list) else s for s in one.sources] == [
        list(s) if isinstance(s, tuple | list) else s for s in other.sources]
    assert (one.compact, one.session_key) == (other.compact, other.session_key)


def _chain(extend: Any, bodies: list[dict[str, Any]]) -> int:
    """Each body's view built on from the last's: as built whole; `shared` of its leading
    messages the last view's own objects; the last view unchanged. Returns how many calls
    reused every message of the view before."""
    state, last, whole_reuse = None, None, 0
    for body in bodies:
        frozen = orjson.dumps(last.body) if last is not None else b""
        view, state, shared = extend(body, state)
        _same(view, extend(copy.deepcopy(body), None)[0])
        if last is None:
            assert shared == 0
        else:
            assert orjson.dumps(last.body) == frozen  # nothing written to the last view
            old, new = last.body["messages"], view.body["messages"]
            assert all(a is b for a, b in zip(old[:shared], new[:shared], strict=True))
            whole_reuse += shared == len(old)
        last = view
    return whole_reuse


def _cuts(draw: Any, n: int) -> list[int]:
    return sorted(set(draw(st.lists(st.integers(1, n), max_size=5))) | {n})


@PROPERTY
@given(items=responses_items(), instructions=st.sampled_from([None, "", "Be brief."]),
       data=st.data())
def test_responses_views_built_on_are_the_views_built_whole(
        items: list[dict[str, Any]], instructions: str | None, data: Any) -> None:
    top: dict[str, Any] = {"model": "m", "tools": [{"type": "function", "name": "sh"}]}
    if instructions is not None:
        top["instructions"] = instructions
    bodies = [{**top, "input": items[:cut]} for cut in _cuts(data.draw, len(items))]
    _chain(responses_wire.extend_view, bodies)


@PROPERTY
@given(wire=messages_list(), system=st.sampled_from([None, "Sys.", [
    {"type": "text", "text": "Sys."}]]), data=st.data())
def test_messages_views_built_on_are_the_views_built_whole(
        wire: list[dict[str, Any]], system: Any, data: Any) -> None:
    top: dict[str, Any] = {"model": "m", "max_tokens": 64}
    if system is not None:
        top["system"] = system
    bodies = [{**top, "messages": wire[:cut]} for cut in _cuts(data.draw, len(wire))]
    _chain(messages_wire.extend_view, bodies)


def test_a_plain_session_reuses_every_message_of_the_view_before() -> None:
    """An agent's calls (each ends on a user turn or a tool's output, no thinking): every
    message of the last view is reused as is, so the engine's check can be skipped."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "fix it"}]
    wire: list[dict[str, Any]] = [{"role": "user", "content": "fix it"}]
    responses, messages = [], []
    for t in range(6):
        items += [{"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": f"step {t}"}]},
            {"type": "function_call", "call_id": f"c{t}", "name": "sh", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{t}", "output": f"out {t}"}]
        wire += [{"role": "assistant", "content": [
            {"type": "text", "text": f"step {t}"},
            {"type": "tool_use", "id": f"t{t}", "name": "sh", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{t}",
                                          "content": f"out {t}"}]}]
        responses.append({"model": "m", "instructions": "Be brief.", "input": list(items)})
        messages.append({"model": "m", "system": "Sys.", "messages": list(wire)})
    assert _chain(responses_wire.extend_view, responses) == 5
    assert _chain(messages_wire.extend_view, messages) == 5


def test_views_build_on_only_from_the_very_body_and_count_proven() -> None:
    """`Views`: a lineage naming the kept body and its count is built on (its count the
    messages reused); naming another body, another count or no body, built whole with no
    earlier body named; a chat body's lineage passes as it is."""
    wire = Messages()
    first = {"model": "m", "system": "Sys.", "messages": [{"role": "user", "content": "a"}]}
    later = {**first, "messages": [*first["messages"], {"role": "assistant", "content": "b"},
                                   {"role": "user", "content": "c"}]}
    views = Views()
    view, proven = views.view(wire, first, Lineage(1))
    assert proven == Lineage(1)
    view, proven = views.view(wire, later, Lineage(2, 1, 1))
    assert proven == Lineage(2, 1, 2) and views.extended == 1  # system + the first user turn
    _same(view, wire.view(later))
    for lineage in (Lineage(3, 2, 2), Lineage(3, 99, 3), Lineage(3)):
        fresh = Views()
        fresh.view(wire, later, Lineage(2))
        view, proven = fresh.view(wire, {**later, "messages": [
            *later["messages"], {"role": "assistant", "content": "d"}]}, lineage)
        assert proven == Lineage(3) and fresh.extended == 0
    assert views.view(wire, later, None) == (wire.view(later), None)
    chat = {"model": "m", "messages": [{"role": "user", "content": "a"}]}
    from gateway.wire.chat import ChatCompletions
    assert Views().view(ChatCompletions(), chat, Lineage(5, 4, 1))[1] == Lineage(5, 4, 1)
    assert Responses().items == "input"
