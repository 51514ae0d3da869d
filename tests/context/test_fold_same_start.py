"""A call between steps takes the last call's fold when its forwarded messages start with the
last call's and its events before the horizon are the last call's (`fold._same_start`,
`fold._same_head`): the very objects or equal ones. Each is one list compare now; this
holds them to the identity walk with the equality fallback they replaced, on lists that share
objects, hold equal copies, values that are equal across types (`1 == 1.0 == True`) and
NaN (equal to itself only as the same object)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import is_
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.context.fold import _head, _same_head, _same_start
from gateway.observability.droplog import DropEvent

NAN = float("nan")
VALUES: list[Any] = [1, 1.0, True, NAN, "a", "b", None]


def _walked_start(source: list[Mapping[str, Any]], messages: list[Mapping[str, Any]]) -> bool:
    n = len(source)
    if messages[n - 1] is source[n - 1] and all(map(is_, source, messages)):
        return True
    return source == messages[:n]


def _walked_head(old: Sequence[DropEvent] | None, events: Sequence[DropEvent],
                 horizon: int) -> bool:
    if old is events:
        return True
    if old is None:
        return False
    p = _head(old, horizon)
    if _head(events, horizon) != p:
        return False
    if all(map(is_, old[:p], events[:p])):
        return True
    return old[:p] == events[:p]


# each element of the second list: the first's very object, an equal copy, or another value
TAKE = st.sampled_from(["same", "copy", "other"])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(range(len(VALUES))), min_size=1, max_size=12),
       st.lists(TAKE, min_size=12, max_size=12), st.lists(st.sampled_from(range(len(VALUES))),
                                                           max_size=4),
       st.sampled_from(range(len(VALUES))))
def test_same_start_is_the_walk_with_its_fallback(
    values: list[int], takes: list[str], more: list[int], other: int
) -> None:
    source: list[Mapping[str, Any]] = [{"role": "user", "content": VALUES[v]} for v in values]
    messages: list[Mapping[str, Any]] = [
        m if how == "same" else _copy(m) if how == "copy"
        else {"role": "user", "content": VALUES[other]}
        for m, how in zip(source, takes, strict=False)
    ] + [{"role": "user", "content": VALUES[v]} for v in more]
    assert _same_start(source, messages) == _walked_start(source, messages)


def _copy(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """An equal copy, or for a float content a copy holding another float object (a NaN
    copied so is not equal to the original)."""
    content = message["content"]
    return {**message, "content": content * 1.0 if isinstance(content, float) else content}


def _event(index: int | None, value: int) -> DropEvent:
    return DropEvent(stage="cluster", action="dedup", reason="repeated_call", item_id="i",
                     kind="tool_call", message_index=index, tokens_before=10,
                     tokens_after=value, text="t")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, 0, 1, 2, 3, 4, 5]), st.integers(0, 2)),
                max_size=10),
       st.lists(TAKE, min_size=10, max_size=10), st.integers(0, 6), st.booleans(),
       st.lists(st.tuples(st.integers(0, 6), st.integers(0, 2)), max_size=3))
def test_same_head_is_the_walk_with_its_fallback(
    made: list[tuple[int | None, int]], takes: list[str], horizon: int, none: bool,
    more: list[tuple[int, int]],
) -> None:
    old = sorted((_event(i, v) for i, v in made),
                 key=lambda e: -1 if e.message_index is None else e.message_index)
    events = [e if how == "same" else _event(e.message_index, e.tokens_after)
              if how == "copy" else _event(e.message_index, 9)
              for e, how in zip(old, takes, strict=False)]
    events = sorted(events + [_event(i, v) for i, v in more],
                    key=lambda e: -1 if e.message_index is None else e.message_index)
    given_old = None if none else old
    assert _same_head(given_old, events, horizon) == _walked_head(given_old, events, horizon)
    assert _same_head(old, old, horizon)
