"""The explainer's account of a call that was not fitted (Redis down: failed open)."""

from __future__ import annotations

from gateway.observability.explain import explain, render_text, unmanaged_account


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
