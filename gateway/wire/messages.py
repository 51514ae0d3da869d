"""Anthropic's Messages API (`POST /v1/messages`) as engine items and back.

`system` (a string or text blocks) is the system prompt. Each message maps to chat messages:
an assistant message to one assistant message (its text, its `tool_use` blocks as tool
calls); a user message to one `tool` message per `tool_result` block (answering its
`tool_use`, so the engine keeps or drops them together) and one user message for its other
blocks. `thinking` / `redacted_thinking` (signed), images, documents, server tool blocks and
unknown blocks are opaque: counted as sent, never edited. The latest assistant message with
thinking and every message with an unknown block or another role (Claude Code sends
`system` messages) are pinned. The first user message (the task) is the engine's to keep,
as in chat; the API wants a user message first, so if the engine dropped it whole, a short
user note stands in its place. A rewritten message's text
blocks become one text block that keeps the last one's `cache_control`, so the request
never has more breakpoints than the client sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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

KNOWN = frozenset({"text", "image", "document", "tool_use", "tool_result", "thinking",
                   "redacted_thinking", "server_tool_use", "web_search_tool_result"})
THINKING = ("thinking", "redacted_thinking")
OMITTED = "(Earlier messages were left out to fit the context budget.)"
Source = tuple[int, tuple[int, ...] | None]  # (message index, its blocks; None: whole string)


def _text(blocks: list[Any]) -> str | None:
    """The text of blocks that are all text, else None."""
    if blocks and all(b.get("type") == "text" for b in blocks):
        return "".join(str(b.get("text", "")) for b in blocks)
    return None


def _chat_content(blocks: list[Any]) -> Any:
    """A string when the blocks are text only (rewritable), else parts (opaque ones kept)."""
    text = _text(blocks)
    if text is not None:
        return text
    return [{"type": "text", "text": str(b.get("text", ""))} if b.get("type") == "text"
            else {"type": "opaque", "block": b} for b in blocks]


def _tool_result_content(block: Mapping[str, Any]) -> Any:
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return _chat_content(content)
    return ""


def _assistant(blocks: list[Any], indexes: list[int]) -> dict[str, Any]:
    uses = [i for i in indexes if blocks[i].get("type") == "tool_use"]
    rest = [blocks[i] for i in indexes if blocks[i].get("type") != "tool_use"]
    message: dict[str, Any] = {"role": "assistant", "content": _chat_content(rest) if rest
                               else None}
    if uses:
        message["tool_calls"] = [{"id": str(blocks[i].get("id", "")), "type": "function",
                                  "function": {"name": str(blocks[i].get("name", "")),
                                               "arguments": orjson.dumps(
                                                   blocks[i].get("input")).decode()}}
                                 for i in uses]
    return message


@dataclass(frozen=True, slots=True)
class _Built:
    """One body's view as the next body's is built on from it (`extend_view`); never
    changed once made (the next view's lists are new)."""

    messages: list[dict[str, Any]]
    sources: list[Any]
    count: int  # wire messages read
    last_assistant: int  # the last assistant message's index (-1: none)
    signed: int | None  # the chat index of the message pinned as the last one with thinking
    memo: RenderMemo  # the session's render memo (`render_memo`)


def build_view(body: Mapping[str, Any]) -> ChatView:
    return extend_view(body, None)[0]


def extend_view(body: Mapping[str, Any], state: Any) -> tuple[ChatView, Any, int]:
    """`build_view(body)`, built on from `state` (what an earlier call of this gives as
    its second value: the view of a body whose messages are this body's first ones,
    decoded from the same bytes, and whose other members are this body's; None: from the
    start), the state to build on from this one, and how many of the view's leading
    messages are that earlier view's own objects (0 without `state`)."""
    wire = body.get("messages") or []
    if isinstance(state, _Built):
        start, messages, sources = state.count, list(state.messages), list(state.sources)
        shared = len(messages)
        last_assistant = next((i for i in range(len(wire) - 1, start - 1, -1)
                               if wire[i].get("role") == "assistant"), state.last_assistant)
        signed, memo = state.signed, state.memo
        if signed is not None and last_assistant != state.last_assistant:
            # no longer the last assistant message: not pinned for its thinking any more
            messages[signed] = {k: v for k, v in messages[signed].items() if k != PINNED}
            shared, signed = signed, None
    else:
        start, messages, sources, shared, signed = 0, [], [], 0, None
        memo = RenderMemo()
        system = body.get("system")
        system_text = system if isinstance(system, str) else _text(
            [b for b in system if isinstance(b, Mapping)]) if isinstance(system, list) else None
        if system_text:
            messages.append({"role": "system", "content": system_text})
            sources.append("system")
        last_assistant = max((i for i, m in enumerate(wire) if m.get("role") == "assistant"),
                             default=-1)
    for m in range(start, len(wire)):
        message = wire[m]
        role = str(message.get("role", "user"))
        content = message.get("content")
        if role not in ("user", "assistant"):  # e.g. Claude Code's `system` messages: as sent
            messages.append({"role": "system" if role == "system" else "opaque",
                             "content": content if isinstance(content, str) else
                             _chat_content(list(content or ())), PINNED: True})
            sources.append((m, None))
            continue
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            sources.append((m, None))
            continue
        blocks = [b for b in content or () if isinstance(b, Mapping)]
        unknown = any(b.get("type") not in KNOWN for b in blocks)
        if role == "assistant":
            chat = _assistant(blocks, list(range(len(blocks))))
            if unknown or (m == last_assistant and any(b.get("type") in THINKING
                                                       for b in blocks)):
                chat[PINNED] = True
                if not unknown:
                    signed = len(messages)
            messages.append(chat)
            sources.append((m, tuple(range(len(blocks)))))
            continue
        results = [i for i, b in enumerate(blocks) if b.get("type") == "tool_result"]
        for i in results:
            messages.append({"role": "tool", "tool_call_id": str(blocks[i].get("tool_use_id")),
                             "content": _tool_result_content(blocks[i])})
            sources.append((m, (i,)))
        others = tuple(i for i in range(len(blocks)) if i not in results)
        if others or not results:
            chat = {"role": role, "content": _chat_content([blocks[i] for i in others])}
            if unknown:
                chat[PINNED] = True
            messages.append(chat)
            sources.append((m, others))
    built = _Built(messages, sources, len(wire), last_assistant, signed, memo)
    chat_body: dict[str, Any] = {"model": body.get("model"), "messages": list(messages)}
    if body.get("tools"):
        chat_body["tools"] = body["tools"]
    if isinstance(body.get("max_tokens"), int):
        chat_body["max_tokens"] = body["max_tokens"]
    return ChatView(chat_body, list(sources), memo=memo), built, shared


def _breakpoint(blocks: list[Any]) -> dict[str, Any]:
    marks = [b["cache_control"] for b in blocks if "cache_control" in b]
    return {"cache_control": marks[-1]} if marks else {}


def _rewrite_blocks(blocks: list[Any], indexes: tuple[int, ...], text: str) -> dict[int, Any]:
    """New blocks for `indexes` of one message (None: removed) carrying `text`."""
    if len(indexes) == 1 and blocks[indexes[0]].get("type") == "tool_result":
        block = blocks[indexes[0]]
        content = block.get("content")
        if isinstance(content, list):
            content = [{"type": "text", "text": text, **_breakpoint(content)}]
        else:
            content = text
        return {indexes[0]: {**block, "content": content}}
    texts = [i for i in indexes if blocks[i].get("type") == "text"]
    out: dict[int, Any] = dict.fromkeys(texts)
    if texts:
        out[texts[0]] = {"type": "text", "text": text,
                         **_breakpoint([blocks[i] for i in texts])}
    return out


def render(body: dict[str, Any], view: ChatView, plan: Plan | None,
           block: str | None) -> dict[str, Any]:
    out = dict(body)
    if plan is not None:
        wire = body.get("messages") or []
        changes: dict[int, dict[int, Any]] = {}  # message -> block index -> new block / None
        whole: dict[int, str | None] = {}  # string-content messages: new text / None dropped
        for fate, source in zip(message_fates(len(view.sources), plan), view.sources,
                                strict=True):
            if fate is True or source == "system":
                continue
            m, indexes = source
            if indexes is None:
                whole[m] = None if fate is False else str(fate)
            elif fate is False:
                changes.setdefault(m, {}).update(dict.fromkeys(indexes))
            else:
                changes.setdefault(m, {}).update(
                    _rewrite_blocks(wire[m]["content"], indexes, str(fate)))
        rendered = []
        for m, message in enumerate(wire):
            if m in whole:
                if whole[m] is not None:
                    rendered.append({**message, "content": whole[m]})
            elif m in changes:
                blocks = [changes[m].get(i, b) if i in changes[m] else b
                          for i, b in enumerate(message["content"])]
                kept = [b for b in blocks if b is not None]
                if kept:
                    rendered.append({**message, "content": kept})
            else:
                rendered.append(message)
        if rendered and rendered[0].get("role") != "user" and wire[0].get("role") == "user":
            rendered.insert(0, {"role": "user", "content": OMITTED})
        out["messages"] = rendered
    if block:
        out["system"] = _with_block(body.get("system"), block)
    return out


def with_arguments(body: dict[str, Any], arguments: Mapping[str, str]) -> dict[str, Any]:
    """`body` with the `tool_use` blocks the engine named (by `id`) given new input (the
    engine's arguments are a JSON object's text: `input` stays an object)."""
    def block(b: Any) -> Any:
        if not isinstance(b, Mapping) or b.get("type") != "tool_use":
            return b
        new = arguments.get(str(b.get("id", "")))
        return b if new is None else {**b, "input": orjson.loads(new)}

    messages = []
    for message in body.get("messages") or []:
        if (isinstance(message, Mapping) and message.get("role") == "assistant"
                and isinstance(message.get("content"), list)):
            message = {**message, "content": [block(b) for b in message["content"]]}
        messages.append(message)
    return {**body, "messages": messages}


def with_short_ids(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with each `tool_use` block's `id` and the `tool_use_id` of the `tool_result`
    answering it sent as `call_ids.short_id` of it (the engine's rename: they still pair).
    The calls of an assistant message with thinking or an unknown block keep their ids, and
    so do their results: such a message goes out as the client sent it."""
    wire = body.get("messages") or []
    kept: set[str] = set()
    for message in wire:
        content = message.get("content") if isinstance(message, Mapping) else None
        if message.get("role") == "assistant" and isinstance(content, list) and any(
            isinstance(b, Mapping) and (b.get("type") in THINKING or b.get("type") not in KNOWN)
            for b in content
        ):
            kept.update(str(b.get("id")) for b in content
                        if isinstance(b, Mapping) and b.get("type") == "tool_use")

    return {**body, "messages": [_short_message(message, kept) for message in wire]}


def _short_message(message: Any, kept: set[str] | frozenset[str]) -> Any:
    """One message of `with_short_ids`, the ids in `kept` left as sent."""
    def block(b: Any) -> Any:
        if not isinstance(b, Mapping):
            return b
        key = {"tool_use": "id", "tool_result": "tool_use_id"}.get(str(b.get("type")))
        value = b.get(key) if key else None
        if not isinstance(value, str) or value in kept or short_id(value) == value:
            return b
        return {**b, key: short_id(value)}

    if isinstance(message, Mapping) and isinstance(message.get("content"), list):
        return {**message, "content": [block(b) for b in message["content"]]}
    return message


def _keeps(message: Mapping[str, Any]) -> frozenset[str]:
    """The call ids `with_short_ids` keeps for this message: its calls' when it is an
    assistant message with thinking or an unknown block."""
    content = message.get("content")
    if message.get("role") == "assistant" and isinstance(content, list) and any(
        isinstance(b, Mapping) and (b.get("type") in THINKING or b.get("type") not in KNOWN)
        for b in content
    ):
        return frozenset(str(b.get("id")) for b in content
                         if isinstance(b, Mapping) and b.get("type") == "tool_use")
    return frozenset()


def _refs(message: Any) -> frozenset[str]:
    """Every id the blocks of `message` name: all that `_short_message` can look up."""
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, list):
        return frozenset()
    return frozenset(b[k] for b in content if isinstance(b, Mapping)
                     for k in ("id", "tool_use_id") if isinstance(b.get(k), str))


@dataclass(slots=True)
class _Memo:
    """One wire message's render (`render_memo`) and what it was made from."""

    message: Any  # held: its id is not reused while this entry lives
    uses: frozenset[str]  # its `tool_use` blocks' ids as `with_arguments` looks them up
    made: bool = False  # whether the fields below were set
    spec: tuple[Any, ...] | None = None  # its sources' (blocks, fate) not kept as sent
    arguments: dict[str, str] | None = None  # the engine's new input for its calls
    middle: Any = None  # `render` then `with_arguments` of it (None: dropped)
    keeps: frozenset[str] = frozenset()  # `_keeps(middle)`
    refs: frozenset[str] = frozenset()  # `_refs(middle)`
    kept: frozenset[str] | None = None  # its refs left long (None: ids not shortened)
    rendered: Any = None  # what it went out as (None: dropped)


def _render_one(message: Mapping[str, Any], spec: tuple[Any, ...]) -> Any:
    """`render`'s output for one wire message given its sources' (blocks, fate) pairs that
    are not kept as sent (None: dropped), exactly as `render` builds it."""
    whole: Any = ()  # () not a whole-string message
    changes: dict[int, Any] = {}
    for indexes, fate in spec:
        if indexes is None:
            whole = None if fate is False else str(fate)
        elif fate is False:
            changes.update(dict.fromkeys(indexes))
        else:
            changes.update(_rewrite_blocks(message["content"], indexes, str(fate)))
    if whole != ():
        return None if whole is None else {**message, "content": whole}
    blocks = [changes.get(i, b) if i in changes else b for i, b in enumerate(message["content"])]
    kept = [b for b in blocks if b is not None]
    return {**message, "content": kept} if kept else None


def render_memo(body: dict[str, Any], view: ChatView, fitted: FittedCall,
                memo: RenderMemo) -> dict[str, Any]:
    """`Messages.render` (`render`, `with_arguments`, `with_short_ids`) with each wire
    message's output remembered in `memo` by the message object: a message whose plan
    fates, engine arguments and kept ids are those of its last render goes out as the same
    object again, so a call costs what changed, not the whole history."""
    plan, arguments, short = fitted.plan, fitted.arguments, fitted.short_ids
    out = dict(body)
    wire = body.get("messages") or []
    specs: dict[int, list[Any]] = {}
    if plan is not None:
        for fate, source in zip(message_fates(len(view.sources), plan), view.sources,
                                strict=True):
            if fate is not True and source != "system":
                specs.setdefault(source[0], []).append((source[1], fate))
    old, entries = memo.entries, {}
    order = []
    for m, message in enumerate(wire):  # what render and with_arguments make of each
        entry = old.get(id(message))
        if entry is None or entry.message is not message:
            content = message.get("content")
            entry = _Memo(message, frozenset(
                str(b.get("id", "")) for b in content
                if isinstance(b, Mapping) and b.get("type") == "tool_use"
            ) if isinstance(content, list) else frozenset())
        entries[id(message)] = entry
        spec = tuple(specs[m]) if m in specs else None
        own_arguments = ({i: arguments[i] for i in entry.uses if i in arguments}
                         if arguments else None)
        if not entry.made or (entry.spec, entry.arguments) != (spec, own_arguments):
            middle = _render_one(message, spec) if spec else message
            if middle is not None and arguments:
                middle = with_arguments({"messages": [middle]}, arguments)["messages"][0]
            entry.made, entry.spec, entry.arguments, entry.middle = (
                True, spec, own_arguments, middle)
            entry.keeps, entry.refs = (_keeps(middle), _refs(middle)) if middle is not None else (
                frozenset(), frozenset())
            entry.kept = entry.rendered = None
        order.append(entry)
    memo.entries = entries
    # with_short_ids: the ids kept long are read from the messages that go out
    kept: frozenset[str] = frozenset().union(*(e.keeps for e in order if e.keeps))
    rendered = []
    for entry in order:
        if entry.middle is None:
            continue
        if not short:
            rendered.append(entry.middle)
            continue
        own_kept = entry.refs & kept
        if entry.rendered is None or entry.kept != own_kept:
            entry.kept, entry.rendered = own_kept, _short_message(entry.middle, own_kept)
        rendered.append(entry.rendered)
    if (plan is not None and rendered and rendered[0].get("role") != "user"
            and wire[0].get("role") == "user"):
        rendered.insert(0, {"role": "user", "content": OMITTED})
    out["messages"] = rendered
    if fitted.block:
        out["system"] = _with_block(body.get("system"), fitted.block.text)
    return out


def _with_block(system: Any, block: str) -> Any:
    """The system prompt with the playbook appended: after the client's own blocks (and
    their cache breakpoints), so the client's cached prefix stays valid."""
    if isinstance(system, list):
        return [*system, {"type": "text", "text": block}]
    if isinstance(system, str) and system:
        return [{"type": "text", "text": system}, {"type": "text", "text": block}]
    return block


def validate(body: Mapping[str, Any], start: int = 0) -> None:
    """Raise InvalidRequest if the gateway cannot handle `body`; its first `start` messages
    passed before (an earlier body that this one continues): not walked again."""
    if not isinstance(body.get("model"), str):
        raise InvalidRequest("model: Field required", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest("messages: Field required", param="messages")
    for m in range(start, len(messages)):
        message = messages[m]
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidRequest(f"messages.{m}: must be an object with a string role",
                                 param=f"messages.{m}")
        content = message.get("content")
        if not isinstance(content, str | list) or (
                isinstance(content, list) and not all(isinstance(b, dict) for b in content)):
            raise InvalidRequest(f"messages.{m}.content: must be a string or a list of blocks",
                                 param=f"messages.{m}.content")
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise InvalidRequest("system: must be a string or a list of text blocks",
                             param="system")
    if "stream" in body and not isinstance(body["stream"], bool | None):
        raise InvalidRequest("stream: must be a boolean", param="stream")


def _usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, Mapping):
        return None
    prompt = sum(int(usage.get(k) or 0) for k in (
        "input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    return {"prompt_tokens": prompt, "completion_tokens": usage.get("output_tokens"),
            "input_tokens": usage.get("input_tokens"),
            "cache_read_input_tokens": usage.get("cache_read_input_tokens")}


_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
           "max_tokens": "length", "pause_turn": "stop", "refusal": "content_filter"}


def summary(message: Mapping[str, Any]) -> dict[str, Any]:
    """The learners' summary of a Message."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message.get("content") or ():
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            calls.append({"id": block.get("id"), "type": "function", "function": {
                "name": block.get("name", ""), "arguments": orjson.dumps(
                    block.get("input")).decode()}})
    stop = message.get("stop_reason")
    return {"content": "".join(texts) if texts else None, "tool_calls": calls,
            "finish_reason": _FINISH.get(str(stop), stop), "usage": _usage(
                message.get("usage"))}


class StreamWatch:
    """Rebuilds the Message from `message_start`, the content block events and
    `message_delta` (stop reason, output usage)."""

    def __init__(self) -> None:
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}

    def add(self, data: bytes) -> None:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            self._message = dict(event["message"])
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            self._blocks[int(event.get("index", 0))] = dict(event["content_block"])
        elif kind == "content_block_delta":
            self._delta(int(event.get("index", 0)), event.get("delta") or {})
        elif kind == "message_delta" and self._message is not None:
            self._message.update(event.get("delta") or {})
            usage = {**(self._message.get("usage") or {}), **(event.get("usage") or {})}
            self._message["usage"] = usage

    def _delta(self, index: int, delta: Mapping[str, Any]) -> None:
        block = self._blocks.get(index)
        if block is None:
            return
        if delta.get("type") == "text_delta":
            block["text"] = str(block.get("text", "")) + str(delta.get("text", ""))
        elif delta.get("type") == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json", "")))

    def response(self) -> dict[str, Any] | None:
        if self._message is None:
            return None
        for index, parts in self._json.items():
            try:
                self._blocks[index]["input"] = orjson.loads("".join(parts) or "{}")
            except orjson.JSONDecodeError:
                self._blocks[index]["input"] = {}
        message = {**self._message, "content": [self._blocks[i] for i in sorted(self._blocks)]}
        return summary(message)


class Messages(Translated):
    """Anthropic's Messages API wire format."""

    name = "/v1/messages"
    upstream_path = "v1/messages"
    items = "messages"  # the member a session's later bodies extend (`gateway/api/bodies.py`)
    last_events: tuple[bytes, ...] = (b"event: message_stop",)
    translation = Translation(
        validate=validate, view=build_view, extend_view=extend_view, render=render,
        render_memo=render_memo, with_arguments=with_arguments, with_short_ids=with_short_ids,
        summary=summary, stream_summary=StreamWatch)
