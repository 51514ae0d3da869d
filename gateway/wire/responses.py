"""The OpenAI Responses API (`POST /v1/responses`) as engine items and back.

`instructions` is the system prompt. `input` items map to chat messages: a `message` to a
message of its role; a run of `function_call` / `custom_tool_call` items to one assistant
message with those tool calls (the assistant text message right before them included: one
turn, as in chat); each `*_output` to a `tool` message answering its call (so
the engine keeps or drops a call with its output). A `reasoning` item is never edited and
travels with the item after it: it joins that item's chat message, as opaque content.
Every other item type (and an output whose call is not in the request) is opaque, pinned,
and sent byte-for-byte. A request with `previous_response_id` or `conversation` only carries
new items: it is traced and gets the playbook, never compacted.

A body that continues its session's last one (`gateway/api/bodies.py`: its first items are
that body's, decoded from the same bytes) has its view built on from that body's
(`extend_view`): only the new items are read, and the chat messages that no new item
changes are the very same objects (the engine then skips its byte check of them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from gateway.context.call_ids import short_id
from gateway.errors import InvalidRequest
from gateway.wire.view import (
    PINNED,
    ChatView,
    Plan,
    RenderMemo,
    Translated,
    Translation,
    message_fates,
)

if TYPE_CHECKING:
    from gateway.context.engine import FittedCall

CALLS = ("function_call", "custom_tool_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")
TEXT_PARTS = ("input_text", "output_text", "text")


def item_type(item: Mapping[str, Any]) -> str:
    """An input item's type; an item with a role and no type is a message (EasyInputMessage)."""
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return str(kind)


def _text_only(content: Any) -> str | None:
    """The text of content made only of text parts (or a string), else None."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and all(
        isinstance(p, Mapping) and p.get("type") in TEXT_PARTS for p in content
    ):
        return "".join(str(p.get("text", "")) for p in content)
    return None


def _opaque(item: Mapping[str, Any]) -> dict[str, Any]:
    """Opaque content: counted as sent, never rewritten."""
    return {"type": "opaque", "item": item}


@dataclass
class _Builder:
    """Walks `input` once, building the chat view and each chat message's sources.

    A builder that made one body's view is never changed after: the next body's view is
    built on a `copy()` of it, whose lists are new and whose messages (and their sources)
    are replaced, never written to (`shared`: how many of the copied messages are still
    the very objects)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    sources: list[list[int]] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)  # reasoning items awaiting their follower
    calls: set[str] = field(default_factory=set)
    open_group: int | None = None  # chat index of a call run still being extended
    items: int = 0  # input items read
    shared: int = 0  # leading messages that are the copied builder's own objects
    system: dict[str, Any] | None = None  # the view's system message (`instructions`)
    memo: RenderMemo = field(default_factory=RenderMemo)  # the session's (`render_memo`)

    def copy(self) -> _Builder:
        return _Builder(list(self.messages), list(self.sources), list(self.pending),
                        set(self.calls), self.open_group, self.items, len(self.messages),
                        self.system, self.memo)

    def add(self, message: dict[str, Any], index: int, items: list[Any], *,
            pinned: bool = False, opens_turn: bool = False) -> None:
        reasoning = self.pending
        self.pending = []
        if reasoning:
            message = self._with_reasoning(message, reasoning, items)
        if pinned:
            message[PINNED] = True
        self.messages.append(message)
        self.sources.append([*reasoning, index])
        # an assistant's text and the calls right after it are one turn, as in chat
        self.open_group = len(self.messages) - 1 if opens_turn else None

    def _with_reasoning(self, message: dict[str, Any], reasoning: list[int],
                        items: list[Any]) -> dict[str, Any]:
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else (
            list(content) if isinstance(content, list) else [])
        return {**message, "content": [*(_opaque(items[i]) for i in reasoning), *parts]}

    def call(self, item: Mapping[str, Any], index: int, items: list[Any]) -> None:
        call_id = str(item.get("call_id", ""))
        self.calls.add(call_id)
        name = str(item.get("name", ""))
        arguments = item.get("arguments") if item_type(item) == "function_call" else item.get(
            "input")
        call = {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": str(arguments or "")}}
        if self.open_group is not None:  # replaced, not written to (`copy`)
            at = self.open_group
            group = dict(self.messages[at])
            group["tool_calls"] = [*group.get("tool_calls", ()), call]
            if self.pending:
                content = group.get("content")
                parts = [{"type": "text", "text": content}] if isinstance(content, str) else (
                    list(content or []))
                group["content"] = [*parts, *(_opaque(items[i]) for i in self.pending)]
            self.messages[at] = group
            self.sources[at] = [*self.sources[at], *self.pending, index]
            self.shared = min(self.shared, at)
            self.pending = []
            return
        self.add({"role": "assistant", "content": None, "tool_calls": [call]}, index, items)
        self.open_group = len(self.messages) - 1


def _message(item: Mapping[str, Any]) -> dict[str, Any]:
    role = str(item.get("role", "user"))
    content = item.get("content")
    text = _text_only(content)
    if text is not None:
        return {"role": role, "content": text}
    parts = content if isinstance(content, list) else []
    return {"role": role, "content": [
        {"type": "text", "text": str(p.get("text", ""))}
        if isinstance(p, Mapping) and p.get("type") in TEXT_PARTS else _opaque(p)
        for p in parts]}


def _output(item: Mapping[str, Any]) -> dict[str, Any]:
    output = item.get("output")
    text = _text_only(output)
    content: Any = text if text is not None else [_opaque(item)]
    return {"role": "tool", "tool_call_id": str(item.get("call_id", "")), "content": content}


def build_view(body: Mapping[str, Any]) -> ChatView:
    return extend_view(body, None)[0]


def extend_view(body: Mapping[str, Any], state: Any) -> tuple[ChatView, Any, int]:
    """`build_view(body)`, built on from `state` (what an earlier call of this gives as
    its second value: the view of a body whose input items are this body's first ones,
    decoded from the same bytes, and whose other members are this body's; None: from the
    start), the state to build on from this one, and how many of the view's leading
    messages are that earlier view's own objects (0 without `state`)."""
    raw = body.get("input")
    items: list[Any] = [{"role": "user", "content": raw}] if isinstance(raw, str) else list(
        raw or ())
    builder = _Builder() if not isinstance(state, _Builder) else state.copy()
    for index in range(builder.items, len(items)):
        item = items[index]
        kind = item_type(item)
        if kind == "reasoning":
            builder.pending.append(index)
            continue
        if kind in CALLS:
            builder.call(item, index, items)
        elif kind in OUTPUTS and str(item.get("call_id", "")) in builder.calls:
            builder.add(_output(item), index, items)
        elif kind == "message":
            message = _message(item)
            builder.add(message, index, items, opens_turn=message["role"] == "assistant"
                        and isinstance(message["content"], str))
        else:  # compaction, item_reference, hosted tool calls, unknown: as sent, pinned
            builder.add({"role": "opaque", "content": [_opaque(item)]}, index, items,
                        pinned=True)
    builder.items = len(items)
    kept = builder  # read on from by the next body's view: the trailing reasoning is not
    if builder.pending:  # reasoning with no item after it: the client's to answer for
        builder = builder.copy()
        builder.add({"role": "opaque", "content": []}, builder.pending.pop(), items,
                    pinned=True)
    messages = list(builder.messages)  # the view's own list: the builder's is kept
    instructions = body.get("instructions")
    sources: list[Any] = list(builder.sources)
    shared = kept.shared if isinstance(state, _Builder) else 0
    if isinstance(instructions, str) and instructions:
        system = kept.system  # the earlier view's, when it had the same instructions
        if system is None or system["content"] != instructions:
            system = kept.system = {"role": "system", "content": instructions}
            shared = 0
        else:
            shared += 1
        messages = [system, *messages]
        sources = [["instructions"], *sources]
    elif kept.system is not None:
        kept.system, shared = None, 0
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if body.get("tools"):
        chat["tools"] = body["tools"]
    if isinstance(body.get("max_output_tokens"), int):
        chat["max_tokens"] = body["max_output_tokens"]
    chained = body.get("previous_response_id") is not None or body.get(
        "conversation") is not None
    key = body.get("prompt_cache_key")
    return ChatView(chat, sources, compact=not chained,
                    session_key=key if isinstance(key, str) and key else None,
                    memo=kept.memo), kept, shared


def _rewritten(item: Mapping[str, Any], text: str) -> dict[str, Any]:
    """`item` with its text replaced (only items whose text was all they had are rewritten)."""
    if item_type(item) in OUTPUTS:
        return {**item, "output": text}
    content = item.get("content")
    if isinstance(content, list) and content:
        return {**item, "content": [{**content[0], "text": text}]}
    return {**item, "content": text}


def _plan_items(items: list[Any], view: ChatView,
                plan: Plan) -> tuple[set[int], dict[int, str]]:
    """The input items `plan` drops, and those it rewrites with their new text."""
    dropped: set[int] = set()
    rewritten: dict[int, str] = {}
    for fate, sources in zip(message_fates(len(view.sources), plan), view.sources,
                             strict=True):
        if fate is True:
            continue
        numbered = [s for s in sources if isinstance(s, int)]
        if fate is False:
            dropped.update(numbered)
        elif isinstance(fate, str):  # the text's own item: reasoning and calls never
            rewritten[next((i for i in reversed(numbered) if item_type(items[i]) not in (
                *CALLS, "reasoning")), numbered[-1])] = fate
    return dropped, rewritten


def render(body: dict[str, Any], view: ChatView, plan: Plan | None,
           block: str | None) -> dict[str, Any]:
    out = dict(body)
    items = body.get("input")
    if plan is not None and isinstance(items, list):
        dropped, rewritten = _plan_items(items, view, plan)
        out["input"] = [_rewritten(item, rewritten[i]) if i in rewritten else item
                        for i, item in enumerate(items) if i not in dropped]
    if block:
        instructions = body.get("instructions")
        out["instructions"] = f"{instructions}\n\n{block}" if instructions else block
    return out


def with_arguments(body: dict[str, Any], arguments: Mapping[str, str]) -> dict[str, Any]:
    """`body` with the calls the engine named (by `call_id`) sent with new arguments (a
    JSON object's text: a function call's `arguments`, a custom tool call's `input`)."""
    items = body.get("input")
    if not isinstance(items, list):
        return body

    def rewritten(item: Any) -> Any:
        if not isinstance(item, Mapping) or item_type(item) not in CALLS:
            return item
        new = arguments.get(str(item.get("call_id", "")))
        if new is None:
            return item
        return {**item, "arguments" if item_type(item) == "function_call" else "input": new}

    return {**body, "input": [rewritten(item) for item in items]}


def with_short_ids(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with every tool call's and tool output's `call_id` sent as
    `call_ids.short_id` of it (the engine's rename: a call and its output still pair). Only
    `call_id` changes: an item's own `id` is the API's reference to a stored item."""
    items = body.get("input")
    if not isinstance(items, list):
        return body

    def rewritten(item: Any) -> Any:
        if not isinstance(item, Mapping) or item_type(item) not in (*CALLS, *OUTPUTS):
            return item
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or short_id(call_id) == call_id:
            return item
        return {**item, "call_id": short_id(call_id)}

    return {**body, "input": [rewritten(item) for item in items]}


@dataclass(slots=True)
class _Memo:
    """One input item's render (`render_memo`) and what it was made from."""

    item: Any  # held: its id is not reused while this entry lives
    call: str | None  # its `call_id` as `with_arguments` looks it up (None: not a call)
    made: bool = False  # whether the fields below were set
    text: str | None = None  # the plan's new text for it
    arguments: str | None = None  # the engine's new arguments for it
    short: bool = False  # whether its call id went out short
    rendered: Any = None  # what it went out as


def render_memo(body: dict[str, Any], view: ChatView, fitted: FittedCall,
                memo: RenderMemo) -> dict[str, Any]:
    """`Responses.render` (`render`, `with_arguments`, `with_short_ids`) with each input
    item's output remembered in `memo` by the item object: an item whose new text, new
    arguments and short-id flag are those of its last render goes out as the same object
    again, so a call costs what changed, not the whole history."""
    plan, arguments, short = fitted.plan, fitted.arguments, fitted.short_ids
    items: list[Any] = body["input"]
    dropped, rewritten = _plan_items(items, view, plan) if plan is not None else (set(), {})
    old, entries = memo.entries, {}
    out_items = []
    for i, item in enumerate(items):
        entry = old.get(id(item))
        if entry is None or entry.item is not item:
            entry = _Memo(item, str(item.get("call_id", "")) if isinstance(item, Mapping)
                          and item_type(item) in CALLS else None)
        entries[id(item)] = entry
        if i in dropped:
            continue
        text = rewritten.get(i)
        new = arguments.get(entry.call) if arguments and entry.call is not None else None
        if not entry.made or (entry.text, entry.arguments, entry.short) != (text, new, short):
            one = _rewritten(item, text) if text is not None else item
            if arguments:
                one = with_arguments({"input": [one]}, arguments)["input"][0]
            if short:
                one = with_short_ids({"input": [one]})["input"][0]
            entry.made, entry.text, entry.arguments, entry.short, entry.rendered = (
                True, text, new, short, one)
        out_items.append(entry.rendered)
    memo.entries = entries
    out = dict(body)
    out["input"] = out_items
    if fitted.block:
        instructions = body.get("instructions")
        out["instructions"] = (f"{instructions}\n\n{fitted.block.text}" if instructions
                               else fitted.block.text)
    return out


def validate(body: Mapping[str, Any], start: int = 0) -> None:
    """Raise InvalidRequest if the gateway cannot handle `body`; its first `start` input
    items passed before (an earlier body that this one continues): not walked again."""
    if not isinstance(body.get("model"), str):
        raise InvalidRequest("'model' must be a string.", param="model")
    items = body.get("input")
    if items is not None and not isinstance(items, str | list):
        raise InvalidRequest("'input' must be a string or an array of items.", param="input")
    if isinstance(items, list):
        for index in range(start, len(items)):
            if not isinstance(items[index], dict):
                raise InvalidRequest(f"input[{index}] must be an object.",
                                     param=f"input[{index}]")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("'instructions' must be a string.", param="instructions")
    if "stream" in body and not isinstance(body["stream"], bool | None):
        raise InvalidRequest("'stream' must be a boolean.", param="stream")


def _usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, Mapping):
        return None
    return {"prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
            "total_tokens": usage.get("total_tokens")}


def summary(response: Mapping[str, Any]) -> dict[str, Any]:
    """The learners' summary of a Response object."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in response.get("output") or ():
        if not isinstance(item, Mapping):
            continue
        kind = item_type(item)
        if kind == "message":
            texts += [str(p.get("text", "")) for p in item.get("content") or ()
                      if isinstance(p, Mapping) and p.get("type") == "output_text"]
        elif kind in CALLS:
            arguments = item.get("arguments", item.get("input", ""))
            calls.append({"id": item.get("call_id"), "type": "function", "function": {
                "name": item.get("name", ""), "arguments": str(arguments)}})
    status = response.get("status")
    finish = "tool_calls" if calls else ("length" if status == "incomplete" else "stop")
    return {"content": "".join(texts) if texts else None, "tool_calls": calls,
            "finish_reason": finish, "usage": _usage(response.get("usage"))}


class StreamWatch:
    """Takes the final Response from `response.completed` / `.incomplete` / `.failed`."""

    def __init__(self) -> None:
        self._final: dict[str, Any] | None = None

    def add(self, data: bytes) -> None:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if isinstance(event, dict) and event.get("type") in (
                "response.completed", "response.incomplete") and isinstance(
                event.get("response"), dict):
            self._final = event["response"]

    def response(self) -> dict[str, Any] | None:
        return summary(self._final) if self._final is not None else None


class Responses(Translated):
    """The Responses API wire format."""

    name = "/v1/responses"
    upstream_path = "responses"
    items = "input"  # the member a session's later bodies extend (`gateway/api/bodies.py`)
    last_events: tuple[bytes, ...] = (
        b"event: response.completed", b"event: response.incomplete", b"event: response.failed")
    translation = Translation(
        validate=validate, view=build_view, extend_view=extend_view, render=render,
        render_memo=render_memo, with_arguments=with_arguments, with_short_ids=with_short_ids,
        summary=summary, stream_summary=StreamWatch)
