"""bench.recall_fates: a message's fate is the severest of its items' drop events, and a
value lost from several messages is put down to the mildest of their fates."""

from bench.recall_fates import fate, mildest
from gateway.context.fold import FOLD_REASON
from gateway.observability.droplog import DropEvent


def _event(stage: str, action: str, reason: str) -> DropEvent:
    return DropEvent(stage=stage, action=action, reason=reason, item_id="i",  # type: ignore[arg-type]
                     kind="tool_result", message_index=3, tokens_before=100, tokens_after=10)


def test_no_event_is_sent() -> None:
    assert fate([]) == "sent"


def test_each_mechanism_is_named() -> None:
    assert fate([_event("compress", "compress", "aged")]) == "digest"
    assert fate([_event("compress", "mask", "aged")]) == "placeholder"
    assert fate([_event("cluster", "dedup", "duplicate")]) == "pointer"
    assert fate([_event("select", "drop", "recency")]) == "dropped"
    # the fold's events are drops and rewrites: the fold's reason wins
    assert fate([_event("compress", "drop", FOLD_REASON)]) == "folded"
    assert fate([_event("compress", "compress", FOLD_REASON)]) == "folded"


def test_a_message_digested_then_folded_is_folded() -> None:
    events = [_event("compress", "compress", "aged"), _event("compress", "drop", FOLD_REASON)]
    assert fate(events) == "folded"


def test_a_value_goes_to_its_mildest_carrier() -> None:
    assert mildest(["folded", "placeholder", "dropped"]) == "placeholder"
    assert mildest(["dropped", "digest"]) == "digest"
    assert mildest([]) == "sent"
