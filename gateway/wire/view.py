"""The seam between a wire adapter and the context engine.

The engine fits a chat-shaped request and reports, per chat message, whether it went out as
sent, rewritten (its new text), or not at all: the render `Plan`. An adapter builds the chat
view of its request with `sources` (which of its own items each chat message stands for),
then re-renders only what the plan changed; every other item goes out byte-for-byte.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, count
from operator import is_not
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from gateway.context.items import PINNED
from gateway.context.prefix import Lineage
from gateway.context.render import Plan

if TYPE_CHECKING:
    from gateway.context.engine import FittedCall

__all__ = ["PINNED", "ChatView", "Plan", "RenderMemo", "StreamSummary", "Translated", "Translation",
           "UnmarkedMessages", "Views", "WireFormat", "message_fates", "unmarked"]


@dataclass(frozen=True, slots=True)
class ChatView:
    """A request as the engine sees it.

    `body` is chat-shaped (`model`, `messages`, `tools`, `max_tokens`); `sources[k]` names
    the wire items chat message k stands for (their meaning is the adapter's own).
    `compact` is False for a request the gateway must not compact (it only carries new
    items of a conversation held upstream): it is still classified, traced and given the
    playbook. `session_key` is the client's own session identity, if its format has one.
    """

    body: dict[str, Any]
    sources: Sequence[Any]
    compact: bool = True
    session_key: str | None = None
    # the adapter's render memo for this session's views (not part of what the view is)
    memo: RenderMemo | None = field(default=None, compare=False, repr=False)


class RenderMemo:
    """What an adapter's render gave per wire item on a session's last call, shared by the
    views built on from one another (`extend_view`) and dropped with them. `entries` is
    replaced whole by each render and holds the items of that call's body only (so it is
    bounded by the session's body); each entry holds its item, so an identity is never
    another object's, and is used only when everything its rendering read is the same."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[int, Any] = {}


def message_fates(count: int, plan: Plan | None) -> list[str | bool]:
    """Per chat message: True kept as sent, a str its rewritten text, False dropped.
    A None plan means every message went out as sent."""
    if plan is None:
        return [True] * count
    fates: list[str | bool] = [False] * count
    for index, text in plan:
        fates[index] = True if text is None else text
    return fates


def unmarked(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Chat-view messages as a reader sees them: the adapters' PINNED marks removed."""
    return [{k: v for k, v in m.items() if k != PINNED} if PINNED in m else m
            for m in messages]


class UnmarkedMessages:
    """`unmarked` for a session's calls, remembering per session (a bounded LRU) its latest
    call's messages and what they gave: the start a call shares with that one, the very
    same objects (compared by identity at C speed; between steps a session forwards the same
    message objects again), gives what it gave, and only the rest is read. The objects are
    held, so an identity cannot be another's; nothing here changes a message. As many
    sessions as the engine's prefix cache keeps by default: the messages held are those
    the sessions' prefixes hold (a session past them keeps its last call's alive here)."""

    def __init__(self, sessions: int = 256) -> None:
        self._sessions = sessions
        self._last: OrderedDict[Any, tuple[tuple[Any, ...], list[dict[str, Any]]]] = (
            OrderedDict())
        self._lock = threading.Lock()  # the loop and the fitting thread both build traces

    def of(self, key: Any, messages: Sequence[Any]) -> list[dict[str, Any]]:
        """`unmarked(messages)` of the session `key`'s latest call."""
        with self._lock:
            last = self._last.pop(key, None)
        if last is not None:
            old, gave = last
            # the first index whose message is not the last call's (count(): no difference)
            same = next(compress(count(), map(is_not, messages, old)),
                        min(len(messages), len(old)))
            out = gave[:same] + unmarked(messages[same:])
        else:
            out = unmarked(messages)
        with self._lock:
            self._last[key] = (tuple(messages), out)
            if len(self._last) > self._sessions:
                self._last.popitem(last=False)
        return out


class Views:
    """Each wire format's chat view of a body the gateway proved to continue an earlier
    one (`gateway/api/bodies.py`: `Lineage`), built on from that body's view.

    A Chat Completions body is its own view: its lineage is the engine's as it is. A
    Messages or Responses body's view is new chat messages, so the body's lineage says
    nothing of them; here the view of a kept body is remembered by the body's number
    (what the adapter's `extend_view` returns to build on), and a body whose lineage names
    that body and its message count has its view built on from it: only its new items
    read, the earlier view's messages reused as objects where no new item changes them.
    Its lineage for the engine then counts those (`count`: the view's leading messages
    that are the earlier view's own, decoded from the same bytes and built by the same
    code), so the engine skips its byte check when they are all of them. Anything else (no
    lineage, a view not remembered, another count) is built whole, with a lineage naming
    no earlier body. A view is remembered until a later body builds on it (one per chain
    of a session's bodies), at most `entries` of them (least recently used dropped); the
    states hold the messages the engine's prefixes hold anyway.

    A `large` body's view (a body of a megabyte or more, decoded and fitted on the fitting
    thread only: `gateway/api/bodies.py`) is kept apart, at most `large_entries` of them,
    and dropped only where another large view is kept, on that thread: a small view's
    keeping (on the loop) never drops one, so the loop never frees 10^4 messages' views.
    A later body's view builds on a large one only on that thread too (a body that
    continues a large one is large: its lineage is made there only)."""

    def __init__(self, entries: int = 256, large_entries: int = 16) -> None:
        self._entries = entries
        self._large_entries = large_entries
        self._kept: OrderedDict[int, tuple[int, Any]] = OrderedDict()  # body -> count, state
        self._large: OrderedDict[int, tuple[int, Any]] = OrderedDict()  # large bodies' views
        self._lock = threading.Lock()  # the loop and the fitting thread both build views
        self.extended = 0  # views built on from an earlier one (read by tests and benches)

    def view(self, wire: WireFormat, body: dict[str, Any], lineage: Lineage | None,
             large: bool = False) -> tuple[ChatView, Lineage | None]:
        """`wire.view(body)`, and what is proven of its messages (None: nothing). `large`:
        the body is a large one, on the fitting thread (its view kept apart)."""
        extend = getattr(wire, "extend_view", None)
        if extend is None or lineage is None:
            view = wire.view(body)
            return view, lineage if view.body is body else None
        with self._lock:
            kept = None
            if lineage.after is not None:
                kept = self._kept.pop(lineage.after, None) or self._large.pop(
                    lineage.after, None)
        if kept is not None and kept[0] == lineage.count:
            view, state, shared = extend(body, kept[1])
            proven = Lineage(lineage.body, lineage.after, shared)
            self.extended += 1
        else:
            view, state, _ = extend(body, None)
            proven = Lineage(lineage.body)
        items = body.get(getattr(wire, "items", "messages"))
        order, bound = (self._large, self._large_entries) if large else (
            self._kept, self._entries)
        dropped = []  # freed once the lock is let go
        with self._lock:
            order[lineage.body] = (len(items) if isinstance(items, list) else -1, state)
            order.move_to_end(lineage.body)
            while len(order) > bound:
                dropped.append(order.popitem(last=False))
        return view, proven


class StreamSummary(Protocol):
    """Watches a relayed stream's events and rebuilds the answer's summary."""

    def add(self, data: bytes) -> None: ...

    def response(self) -> dict[str, Any] | None: ...


class WireFormat(Protocol):
    """One API's request and response, as far as the gateway must understand them."""

    name: str  # the route's endpoint label, e.g. "/v1/responses"
    upstream_path: str  # where the request goes, relative to its upstream's base URL
    # The body's member a session's later bodies extend, a list (`messages`; `input`).
    # A format whose view is not the body itself also has `extend_view(body, state) ->
    # (view, state, shared)` (`Views`).
    items: str
    # Markers of a stream's last event: a client that hangs up once one has been relayed
    # got its whole answer (the call completes; it is not counted as a 499).
    last_events: tuple[bytes, ...]

    def validate(self, body: Mapping[str, Any]) -> None:
        """Raise InvalidRequest if the gateway cannot handle `body`."""

    def validate_from(self, body: Mapping[str, Any], start: int, state: Any) -> Any:
        """`validate(body)` where the body's first `start` messages passed it in an earlier
        body that this one continues (`gateway/api/bodies.py`), leaving `state` (None when
        none did: `start` is 0): only the rest is walked, the same error raised as by the
        whole walk. Returns the state after all its messages, for a body continuing this
        one."""

    def view(self, body: dict[str, Any]) -> ChatView: ...

    def render(self, body: dict[str, Any], view: ChatView,
               fitted: FittedCall) -> dict[str, Any]:
        """The request to forward: `body` with only what the engine's plan (`fitted.plan`)
        changed re-rendered and its playbook block (`fitted.block`, if any) placed where
        this format keeps its system prompt. Called only when the engine changed
        something; otherwise the client's own bytes go out."""

    def summary(self, answer: Mapping[str, Any]) -> dict[str, Any]:
        """`{"content", "tool_calls", "finish_reason", "usage"}` of a whole answer, with
        usage as `prompt_tokens` / `completion_tokens`."""

    def stream_summary(self) -> StreamSummary: ...


@dataclass(frozen=True, slots=True)
class Translation:
    """The functions of a module that takes one API's body to chat form and back
    (`gateway/wire/messages.py`, `gateway/wire/responses.py`)."""

    validate: Callable[[Mapping[str, Any], int], None]  # (body, start)
    view: Callable[[Mapping[str, Any]], ChatView]
    extend_view: Callable[[Mapping[str, Any], Any], tuple[ChatView, Any, int]]
    render: Callable[[dict[str, Any], ChatView, Plan | None, str | None], dict[str, Any]]
    render_memo: Callable[[dict[str, Any], ChatView, FittedCall, RenderMemo], dict[str, Any]]
    with_arguments: Callable[[dict[str, Any], Mapping[str, str]], dict[str, Any]]
    with_short_ids: Callable[[dict[str, Any]], dict[str, Any]]
    summary: Callable[[Mapping[str, Any]], dict[str, Any]]
    stream_summary: Callable[[], StreamSummary]


class Translated:
    """A `WireFormat` whose body is not chat form, by its module's `Translation`: the view
    is built from the body, and a fitted call is rendered back into the body's own items
    (the list `items` names)."""

    items: str
    translation: ClassVar[Translation]

    def validate(self, body: Mapping[str, Any]) -> None:
        self.translation.validate(body, 0)

    def validate_from(self, body: Mapping[str, Any], start: int, state: Any) -> Any:
        self.translation.validate(body, start)  # no state: each item is checked on its own

    def view(self, body: dict[str, Any]) -> ChatView:
        return self.translation.view(body)

    def extend_view(self, body: dict[str, Any], state: Any) -> tuple[ChatView, Any, int]:
        return self.translation.extend_view(body, state)

    def render(self, body: dict[str, Any], view: ChatView,
               fitted: FittedCall) -> dict[str, Any]:
        t = self.translation
        if view.memo is not None and isinstance(body.get(self.items), list) and (
                fitted.plan is not None or fitted.arguments or fitted.short_ids):
            return t.render_memo(body, view, fitted, view.memo)
        out = t.render(body, view, fitted.plan, fitted.block.text if fitted.block else None)
        out = t.with_arguments(out, fitted.arguments) if fitted.arguments else out
        return t.with_short_ids(out) if fitted.short_ids else out

    def summary(self, answer: Mapping[str, Any]) -> dict[str, Any]:
        return self.translation.summary(answer)

    def stream_summary(self) -> StreamSummary:
        return self.translation.stream_summary()
