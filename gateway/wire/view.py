"""The seam between a wire adapter and the context engine.

The engine fits a chat-shaped request and reports, per chat message, whether it went out as
sent, rewritten (its new text), or not at all: the render `Plan`. An adapter builds the chat
view of its request with `sources` (which of its own items each chat message stands for),
then re-renders only what the plan changed; every other item goes out byte-for-byte.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, count
from operator import is_not
from typing import TYPE_CHECKING, Any, Protocol

from gateway.context.items import PINNED
from gateway.context.render import Plan

if TYPE_CHECKING:
    from gateway.context.engine import FittedCall

__all__ = ["PINNED", "ChatView", "Plan", "StreamSummary", "UnmarkedMessages", "WireFormat",
           "message_fates", "unmarked"]


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


class StreamSummary(Protocol):
    """Watches a relayed stream's events and rebuilds the answer's summary."""

    def add(self, data: bytes) -> None: ...

    def response(self) -> dict[str, Any] | None: ...


class WireFormat(Protocol):
    """One API's request and response, as far as the gateway must understand them."""

    name: str  # the route's endpoint label, e.g. "/v1/responses"
    upstream_path: str  # where the request goes, relative to its upstream's base URL

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
