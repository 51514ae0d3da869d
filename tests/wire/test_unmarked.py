"""A session's traced messages unmarked from what its last call's gave (`UnmarkedMessages`)."""

from __future__ import annotations

from typing import Any

from gateway.wire.view import PINNED, UnmarkedMessages, unmarked


def _msgs(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"m{i}", **({PINNED: True} if i % 3 == 0 else {})}
            for i in range(start, start + n)]


def test_a_sessions_messages_unmarked_from_its_last_call_are_those_unmarked_afresh() -> None:
    """Call after call (grown, an old message edited, restarted shorter, another session
    between, a step that sends other objects), what is kept gives `unmarked` of the call's
    messages; the start that is the last call's very objects is not read again (its unmarked
    copies are the same objects), and a message replaced by an equal new one is read anew
    (fails when the start is compared by value or is taken past the first new object)."""
    sent, key = UnmarkedMessages(), ("acme", "s")
    calls = _msgs(6)
    first = sent.of(key, calls)
    assert first == unmarked(calls)
    grown = [*calls, *_msgs(4, 6)]
    second = sent.of(key, grown)
    assert second == unmarked(grown)
    assert all(a is b for a, b in zip(first, second, strict=False))  # the kept start
    assert sent.of(("acme", "other"), _msgs(2)) == unmarked(_msgs(2))
    edited = list(grown)
    edited[3] = {**grown[3], "content": "m3 edited"}  # a new object, marked
    edited[2] = dict(grown[2])  # an equal new object: read anew, not taken as the old one
    third = sent.of(key, edited)
    assert third == unmarked(edited) and third[3]["content"] == "m3 edited"
    assert third[0] is second[0] and third[2] is edited[2] and third[3] is not second[3]
    assert all(PINNED not in m for m in third)
    restarted = _msgs(3)
    assert sent.of(key, restarted) == unmarked(restarted)
    assert sent.of(key, []) == []
    assert sent.of(key, edited) == unmarked(edited)
