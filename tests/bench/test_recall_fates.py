"""bench.recall_fates: a message's fate is the severest of its items' drop events, and a
value lost from several messages is put down to the mildest of their fates."""

from bench.recall_fates import bare_kept, fate, mildest, token_class, whole_token
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


def test_a_value_inside_a_longer_token_is_not_whole() -> None:
    # the yardstick matches substrings: `pods` is in `AirPods`, but the agent read no `pods`
    assert not whole_token("pods", 'link "AirPods" [ref=e117]')
    assert not whole_token("closed", '"in_closed_grading_period": false')
    assert not whole_token("10000", "Only the first 100000 characters")
    assert whole_token("pods", "pods in namespace data: 3 pods")
    assert whole_token("default", '"color":"default"')
    # a value's own edge characters may be anything: `2024.` ends a sentence
    assert whole_token("2024.", "a split on June 10, 2024. Now")
    # the first occurrence inside a longer token, a later one whole
    assert whole_token("120", "89120f, then 120 rows")


def test_a_value_whose_bare_form_is_forwarded_is_classed_apart() -> None:
    # the agent ends its sentence on a year: `1998.` is needed; an unrelated old page held
    # `1998.`, the page it read (forwarded) holds `1998,`: the value is kept, its form is not
    forwarded = "It was completed in 1998, at a cost of US$185 million"
    assert bare_kept("1998.", forwarded)
    assert bare_kept("./check_data.py", "python check_data.py")
    assert not bare_kept("1998", forwarded)  # no closing mark: the value itself was lost
    assert not bare_kept("2009.", forwarded)
    old = ["a game released in 1998. Set in"]
    assert token_class("1998.", old, forwarded) == "bare kept"
    assert token_class("2009.", ["released on August 25, 2009."], forwarded) == "whole"
    assert token_class("pods", ['link "AirPods"'], forwarded) == "inside"
