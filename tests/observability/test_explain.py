"""The explainer's account of a call that was not fitted (Redis down: failed open), and a
session's account pieces remembered between its calls."""

from __future__ import annotations

import orjson
import pytest

from gateway.observability.droplog import DropEvent
from gateway.observability.explain import (
    PIECE,
    AccountPieces,
    Pieces,
    _entries,
    explain,
    render_text,
    split_account,
    unmanaged_account,
)


def test_an_unmanaged_account_explains_every_message_as_sent() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}]
    explained = explain(unmanaged_account(messages, "sess", "gpt-x"), "tr-1", "acme")
    assert explained["unmanaged"] == "failed open: store unavailable"
    assert [(m["index"], m["status"], m["sent_as"]) for m in explained["messages"]] == [
        (0, "kept", 0), (1, "kept", 1), (2, "kept", 2), (3, "kept", 3)]
    assert explained["upstream"]["messages"] == 4 and explained["tokens"]["saved_by_drops"] == 0
    text = render_text(explained)
    assert "(failed open: store unavailable)" in text and "None" not in text
    assert "upstream got 4 of 4 messages" in text


def _events(n: int, tokens: int = 10) -> list[DropEvent]:
    return [DropEvent(stage="compress", action="compress", reason="aged", item_id=f"m{i}",
                      kind="tool_result", message_index=i, tokens_before=tokens + i,
                      tokens_after=3) for i in range(n)]


def test_a_sessions_pieces_remember_the_latest_objects_equal_to_the_kept_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step rebuilds its drop events as equal, new objects: the session's memo then holds
    the new ones, so the calls after it compare their pieces by identity (in C), not with a
    Python `__eq__` per event on every later call; an event that changed is still built
    anew. Every split is byte for byte the account split afresh."""
    compared = [0]
    equal = DropEvent.__eq__

    def counting(a: DropEvent, b: object) -> bool:
        compared[0] += 1
        return equal(a, b)

    monkeypatch.setattr(DropEvent, "__eq__", counting)
    pieces, key = AccountPieces(), ("acme", "s")

    def split(drops: list[DropEvent]) -> tuple[bytes, Pieces]:
        account = {"v": 1, "roles": None, "plan": None, "drops": drops}
        stored = pieces.split(key, account, _entries)
        assert stored == split_account({**account, "drops": _entries("drops", drops)})
        return stored

    split(_events(5 * PIECE))
    rebuilt = _events(5 * PIECE)  # equal to the last call's, none the same object
    split(rebuilt)  # the step call compares them by value
    compared[0] = 0
    split([*rebuilt, *_events(3)])
    assert compared[0] == 0  # the call after the step: every full piece by identity
    edited = list(rebuilt)
    edited[70] = _events(71, tokens=11)[70]  # one event's tokens changed
    named = [orjson.loads(split(drops)[0])["drops"]["pieces"] for drops in (edited, rebuilt)]
    assert [a == b for a, b in zip(*named, strict=True)] == [True, False, True, True, True]
