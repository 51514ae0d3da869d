"""A Messages or Responses session's render remembered per wire message (`render_memo`, the view's
`RenderMemo`) forwards the very bytes of the render made whole for every call: under new
messages, plans that drop or rewrite earlier messages differently from call to call, engine
arguments and short-id flags that change, messages replaced by edited copies and restarts
(issue 7: the render costs what changed)."""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.wire import messages as messages_wire
from gateway.wire import responses as responses_wire
from gateway.wire.messages import Messages
from gateway.wire.responses import Responses
from gateway.wire.view import RenderMemo
from tests.wire.test_view_lineage import responses_items

TEXT = st.sampled_from(["", "a", "b c", "xyz\n"])  # few: a call often repeats a fate
PROPERTY = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _id(t: int) -> str:
    return f"toolu_01abcdefghijklmnopqr{t:04d}"  # long: sent short


@st.composite
def session(draw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for t in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["user", "assistant", "thinking", "unknown", "results",
                                     "system", "text"]))
        if kind == "user":
            out.append({"role": "user", "content": draw(TEXT)})
        elif kind == "text":
            out.append({"role": "assistant", "content": draw(TEXT)})
        elif kind in ("assistant", "thinking", "unknown"):
            blocks: list[dict[str, Any]] = []
            if kind == "thinking":
                blocks.append({"type": "thinking", "thinking": "th", "signature": "s"})
            if kind == "unknown":
                blocks.append({"type": "container_upload", "file_id": "f"})
            blocks += [{"type": "text", "text": draw(TEXT), "cache_control": {"type": "x"}},
                       {"type": "tool_use", "id": _id(t), "name": "sh", "input": {"c": 1}}]
            out.append({"role": "assistant", "content": blocks})
        elif kind == "results":
            out.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": _id(max(t - 1, 0)),
                 "content": draw(st.sampled_from(["out", [{"type": "text", "text": "o"}]]))},
                *([{"type": "text", "text": draw(TEXT)}] if draw(st.booleans()) else [])]})
        else:
            out.append({"role": "system", "content": draw(TEXT)})
    return out


def _fitted(draw: Any, view: Any, ids: int, name: Any = _id) -> Any:
    """What the engine may hand the render: a plan over the view's messages (each kept,
    rewritten or dropped; None: all as sent), new arguments for some calls, short ids, a
    playbook block."""
    count = len(view.sources)
    plan = None
    if draw(st.integers(0, 4)):
        fates = draw(st.lists(st.sampled_from([None, None, "x", "y", False]),
                              min_size=count, max_size=count))
        plan = [(k, None if view.sources[k] in ("system", ["instructions"]) else fate)
                for k, fate in enumerate(fates) if fate is not False]  # the engine's own
    arguments = {name(t): orjson.dumps({"c": draw(st.integers(0, 1))}).decode()
                 for t in draw(st.lists(st.integers(0, ids), max_size=3))} or None
    block = SimpleNamespace(text="playbook") if draw(st.booleans()) else None
    return SimpleNamespace(plan=plan, arguments=arguments, short_ids=draw(st.booleans()),
                           block=block)


@PROPERTY
@given(wire=session(), system=st.sampled_from([None, "Sys.", [{"type": "text", "text": "S"}]]),
       data=st.data())
def test_a_remembered_render_is_the_render_made_whole(
        wire: list[dict[str, Any]], system: Any, data: Any) -> None:
    top: dict[str, Any] = {"model": "m", "max_tokens": 64}
    if system is not None:
        top["system"] = system
    memo = RenderMemo()
    calls = data.draw(st.integers(2, 10))
    for _ in range(calls):
        messages = wire[:data.draw(st.integers(1, len(wire)))]
        edit = data.draw(st.sampled_from([None, None, "copy", "edit", "restart"]))
        if edit == "restart":  # a new process or a lost view: the memo starts empty
            memo = RenderMemo()
        elif edit and messages:  # an earlier message replaced (equal or edited copy)
            k = data.draw(st.integers(0, len(messages) - 1))
            other = copy.deepcopy(messages[k])
            if edit == "edit":
                other["content"] = "edited" if isinstance(other["content"], str) else [
                    *other["content"], {"type": "text", "text": "more"}]
            messages = [*messages[:k], other, *messages[k + 1:]]
        body = {**top, "messages": messages}
        view = messages_wire.build_view(body)
        fitted = _fitted(data.draw, view, len(wire))
        remembered = messages_wire.render_memo(body, view, fitted, memo)
        whole = Messages().render(copy.deepcopy(body), dataclasses.replace(view, memo=None),
                                  fitted)
        assert orjson.dumps(remembered) == orjson.dumps(whole)
        assert set(memo.entries) == {id(m) for m in messages}  # bounded by the body
    assert orjson.dumps(body) == orjson.dumps({**top, "messages": messages})  # untouched


def test_a_continued_session_renders_its_old_messages_as_the_same_objects() -> None:
    """Through `Messages.render` with views built on: an unchanged old message goes out as
    the object it went out as on the last call (nothing rebuilt), short ids and all."""
    adapter = Messages()
    wire: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    state, last = None, None
    for t in range(6):
        wire += [{"role": "assistant", "content": [
                     {"type": "text", "text": f"step {t}"},
                     {"type": "tool_use", "id": _id(t), "name": "sh", "input": {"c": t}}]},
                 {"role": "user", "content": [
                     {"type": "tool_result", "tool_use_id": _id(t), "content": "out"}]}]
        body = {"model": "m", "max_tokens": 64, "messages": list(wire)}
        view, state, _ = adapter.extend_view(body, state)
        assert view.memo is not None
        fitted = SimpleNamespace(plan=[(k, None) for k in range(len(view.sources))],
                                 arguments=None, short_ids=True, block=None)
        out = adapter.render(body, view, fitted)  # type: ignore[arg-type]
        whole = adapter.render(body, dataclasses.replace(view, memo=None),
                               fitted)  # type: ignore[arg-type]
        assert orjson.dumps(out) == orjson.dumps(whole)
        assert out["messages"][1]["content"][1]["id"] != _id(0)  # sent short
        if last is not None:
            assert all(a is b for a, b in zip(last, out["messages"][:len(last)], strict=True))
        last = out["messages"]


def _call_id(t: int) -> str:
    return f"call_abcdefghijklmnopqrstuvwx{t:02d}"  # long: sent short


@PROPERTY
@given(raw=responses_items(), instructions=st.sampled_from([None, "Be brief."]),
       data=st.data())
def test_a_remembered_responses_render_is_the_render_made_whole(
        raw: list[dict[str, Any]], instructions: str | None, data: Any) -> None:
    items = [{**item, "call_id": _call_id(int(item["call_id"][1:]))}
             if str(item.get("call_id", "")).startswith("c") else item for item in raw]
    top: dict[str, Any] = {"model": "m", "tools": [{"type": "function", "name": "sh"}]}
    if instructions is not None:
        top["instructions"] = instructions
    memo = RenderMemo()
    for _ in range(data.draw(st.integers(2, 10))):
        cut = items[:data.draw(st.integers(1, len(items)))]
        edit = data.draw(st.sampled_from([None, None, "copy", "edit", "restart"]))
        if edit == "restart":
            memo = RenderMemo()
        elif edit:
            k = data.draw(st.integers(0, len(cut) - 1))
            other = copy.deepcopy(cut[k])
            if edit == "edit":
                other["call_id" if "call_id" in other else "id"] = _call_id(99)
            cut = [*cut[:k], other, *cut[k + 1:]]
        body = {**top, "input": cut}
        view = responses_wire.build_view(body)
        fitted = _fitted(data.draw, view, len(items), _call_id)
        remembered = responses_wire.render_memo(body, view, fitted, memo)
        whole = Responses().render(copy.deepcopy(body), dataclasses.replace(view, memo=None),
                                   fitted)
        assert orjson.dumps(remembered) == orjson.dumps(whole)
        assert set(memo.entries) == {id(item) for item in cut}  # bounded by the body
