"""A call whose drop events extend the last call's merges only the new ones with its repeats'
savings (`calls.point_repeats` with `PointedEvents`, `_extension`): its messages, events (in
order) and saving are those of the same call made from scratch, whatever the session did in
between (events replaced by equal copies or changed, savings changed, events added out of
message order, events without a message, repeats without an event)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.context.calls import PointedEvents, _extension, point_repeats
from gateway.observability.droplog import DropEvent

COUNT = 40  # messages in the session


def _messages() -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": f"step {i}" if i % 3 else None, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {
            "name": "run", "arguments": json.dumps({"command": "x" * (10 + i % 7)})}}]}
        for i in range(COUNT)]


def _event(index: int | None, saved: int) -> DropEvent:
    return DropEvent(stage="age", action="mask", reason="aged", item_id=f"m{index}",
                     kind="tool_result", message_index=index, tokens_before=50,
                     tokens_after=50 - saved)


Call = tuple[int, list[DropEvent], dict[tuple[int, int], str]]


@st.composite
def sessions(draw: Any) -> list[Call]:
    """Per call: the messages forwarded, its events and its repeats. Mostly the last call's
    events (the very objects) with new ones for new messages in order; at times an equal copy,
    a changed event, one added out of order or without a message, or a pointer changed."""
    calls: list[Call] = []
    events: list[DropEvent] = []
    repeats: dict[tuple[int, int], str] = {}
    count = 2
    for _ in range(draw(st.integers(2, 12))):
        new = draw(st.integers(0, 6))
        for i in range(count, min(count + new, COUNT)):
            fate = draw(st.sampled_from(["event", "event", "none", "repeat", "both"]))
            if fate in ("event", "both"):
                events.append(_event(i, draw(st.integers(0, 9))))
            if fate in ("repeat", "both"):
                repeats[(i, 0)] = "[ptr]"
        count = min(count + new, COUNT)
        twist = draw(st.sampled_from(
            ["none"] * 6 + ["copy", "change", "early", "no message", "pointer", "repeat old"]))
        if twist == "copy" and events:
            k = draw(st.integers(0, len(events) - 1))
            events[k] = _event(events[k].message_index, events[k].tokens_saved)
        elif twist == "change" and events:
            k = draw(st.integers(0, len(events) - 1))
            events[k] = _event(events[k].message_index, events[k].tokens_saved + 1)
        elif twist == "early":
            events.append(_event(draw(st.integers(0, count - 1)), 3))
        elif twist == "no message":
            events.append(_event(None, 2))
        elif twist == "pointer" and repeats:
            key = draw(st.sampled_from(sorted(repeats)))
            repeats[key] = "[a longer pointer]"
        elif twist == "repeat old":
            repeats[(draw(st.integers(0, count - 1)), 0)] = "[ptr]"
        calls.append((count, list(events), dict(repeats)))
    return calls


@settings(max_examples=400, deadline=None)
@given(calls=sessions())
def test_a_call_that_extends_the_last_ones_events_points_as_from_scratch(
    calls: list[Call],
) -> None:
    messages = _messages()
    memo = PointedEvents()
    for count, events, repeats in calls:
        forwarded = messages[:count]
        indexes = range(count)
        whole = point_repeats(forwarded, indexes, events, len, 1, repeats)
        kept = point_repeats(forwarded, indexes, events, len, 1, repeats, memo)
        if whole is None:
            assert kept is None
            continue
        assert kept is not None
        assert kept.events == whole.events
        assert [e.message_index for e in kept.events] == [
            e.message_index for e in whole.events]
        assert (kept.messages, kept.arguments, kept.saved) == (
            whole.messages, whole.arguments, whole.saved)
        # the memo holds this call: the same events again extend it, and merge as before
        again = _extension(events, memo.savings, memo)
        assert again is not None and again[0] == memo.ordered and not again[1]
        assert memo.decided == {e.message_index for e in events if e.message_index is not None}
        assert memo.ordered == sorted(memo.ordered, key=lambda e: (
            -1 if e.message_index is None else e.message_index))


def test_a_late_call_merges_only_its_new_events() -> None:
    """The last call's events, then one more: only the new event is merged (the last call's
    merged events are handed on as the very objects), and the result is the one from scratch."""
    messages = _messages()
    repeats = {(4, 0): "[ptr]", (9, 0): "[ptr]"}
    events = [_event(i, 1) for i in range(2, 12)]
    memo = PointedEvents()
    first = point_repeats(messages[:12], range(12), events, len, 1, repeats, memo)
    assert first is not None
    grown = [*events, _event(12, 1)]
    extension = _extension(grown, memo.savings, memo)
    assert extension is not None
    ordered, decided, _ = extension
    assert decided == {12}
    assert all(a is b for a, b in zip(ordered, first.events, strict=False))
    kept = point_repeats(messages[:13], range(13), grown, len, 1, repeats, memo)
    whole = point_repeats(messages[:13], range(13), grown, len, 1, repeats)
    assert kept is not None and whole is not None
    assert kept.events == whole.events
    # an old message's saving changed: the extension does not hold, all is merged anew
    assert _extension(grown, {**memo.savings, 4: (99, 1, "x")}, memo) is None
