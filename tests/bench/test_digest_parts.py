"""bench.digest_parts: a digest split into its parts (kept lines, markers, placeholders, list
lines with their items classed by position, offset and form, JSON keys and leaves), and a
replayed session's digests counted part by part."""

from bench.corpora import Session
from bench.digest_parts import new_acc, parts, session_parts
from gateway.context.replay import build_engine
from gateway.settings import Settings
from tests.sessions import synthetic_session


def test_a_digest_splits_into_its_parts() -> None:
    digest = "\n".join([
        "Traceback (most recent call last):",
        "[…12 lines]",
        '{"id": 4012, "name": "alpha", "note": "… 3 more"}',
        "[omitted fields: status; owner_email; created_at]",
        "[omitted text mentions: 4012 https://example.com/a v2_final] (+3 more)",
        "[ctxgate: tool output of 9,000 chars elided]",
        "last line",
    ])
    got = list(parts(digest))
    assert [kind for kind, _, _ in got] == [
        "line:first", "marker", "line:json", "omitted fields", "line:other", "placeholder",
        "line:other"]
    assert "".join(text for _, text, _ in got) == digest + "\n"  # every character counted once
    json_items = dict((text, cls) for cls, text in got[2][2])
    assert json_items == {'"id":': "json key", "4012,": "json scalar", '"name":': "json key",
                          '"alpha",': "json str<=20", '"note":': "json key",
                          '"… 3 more",': "json more"}
    fields = got[3][2]
    assert ("omitted fields @0-4", "owner_email") in fields
    assert ("omitted fields ^0-239", "status") in fields
    assert {cls for cls, _ in fields if "~" in cls} == {"omitted fields ~token"}


def test_a_mentions_line_classes_its_items_by_form() -> None:
    (kind, _, items), = parts("[omitted text mentions: 4012 https://example.com/a v2_final ab]")
    assert kind == "omitted text mentions"
    forms = {text: cls for cls, text in items if "~" in cls}
    assert forms == {"4012": "omitted text mentions ~number",
                     "https://example.com/a": "omitted text mentions ~link",
                     "v2_final": "omitted text mentions ~token+digit",
                     "ab": "omitted text mentions ~token"}


async def test_a_long_sessions_digests_are_counted_and_supply_values() -> None:
    _, messages, _ = synthetic_session(1, 60)
    engine = build_engine(Settings())
    acc = new_acc()
    try:
        await session_parts(engine, "synthetic", Session("s", messages), acc)
    finally:
        if engine.embedder is not None:
            engine.embedder.close()
    assert acc["base"] > 0 and acc["calls"] > 0
    digest_kinds = {k for k in acc["chars"] if k not in ("verbatim tool output",)}
    assert digest_kinds, "a 60-turn session's old outputs are digested"
    assert all(acc["chars"][k] > 0 and acc["n"][k] > 0 for k in digest_kinds)
    assert {"line:first", "marker", "placeholder", "omitted text mentions"} <= digest_kinds
    # every needed value of the session is found somewhere: in a message sent as it came, in
    # one part kind (counted), or in two (shared); none lost
    assert acc["lost"] == 0
    assert sum(acc["values"][k] for k in digest_kinds if " " not in k) >= 1
