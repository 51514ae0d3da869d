"""A session past what a step cuts to has the texts its next over-budget step's rerank
embeds sent to the model as they arrive, off the event loop, and that step waits for them
or finds them cached: it embeds the current step and what arrived since, not the newest 64
items at once (issue 7: one Toolathlon call embedded 44 texts, 11–32 s under load)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gateway.context.engine import CallContext
from gateway.embeddings import Embedder, content_hash
from tests.sessions import synthetic_session

from .test_prefix_cache import _engine, _growing


def _logged(embedder: Embedder) -> tuple[Embedder, list[list[str]]]:
    """A twin of the session's embedder (its model and thread, its own memo) whose batches
    sent to the model are logged."""
    twin = embedder.with_client(None)
    batches: list[list[str]] = []
    encode = twin._encode

    def logged(texts: list[str]) -> Any:
        batches.append(list(texts))
        return encode(texts)

    twin._encode = logged  # type: ignore[method-assign]
    return twin, batches


async def test_a_prefetched_text_reaches_the_model_once_and_embed_waits_for_it(
    embedder: Embedder,
) -> None:
    twin, batches = _logged(embedder)
    texts = ["the invoice id INV-2041 was paid", "quiz 7 opens on Monday at 9:00"]
    assert twin.prefetch(texts) == 2
    assert twin.prefetch([*texts, texts[0]]) == 0  # on its way already: not sent again
    got = await twin.embed([texts[1], "a text nobody prefetched", texts[0]])
    # the prefetched texts reached the model once, in their own batch
    assert sorted(map(sorted, batches)) == sorted([sorted(texts), ["a text nobody prefetched"]])
    assert twin.cached(texts[0]) is not None and not twin._pending
    alone = await embedder.with_client(None).embed(texts)
    assert np.allclose(got[2], alone[0], atol=1e-5) and np.allclose(got[0], alone[1], atol=1e-5)
    assert twin.prefetch(texts) == 0  # cached now


async def test_an_over_budget_steps_rerank_finds_the_texts_that_arrived_embedded(
    settings: Any, embedder: Embedder
) -> None:
    """Grown call by call under a budget it passes several times: every rerank after the
    first finds all but a few of its texts cached or on their way; the first over-budget
    step, which no call before it neared, embeds them all."""
    _, msgs, _ = synthetic_session(3, turns=70)
    twin, batches = _logged(embedder)
    engine = _engine(settings, twin, True)
    fresh: list[tuple[int, int, int]] = []  # call, texts given, texts neither cached nor sent
    embed = twin.embed

    async def counted(texts: Any) -> Any:
        new = {content_hash(t) for t in texts} - set(twin._pending)
        new = {d for d in new if twin._cache.get(d) is None}
        if len(texts) > 2:  # a rerank's (the classifier embeds one text)
            fresh.append((n, len(texts), len(new)))
        return await embed(texts)

    twin.embed = counted  # type: ignore[method-assign]
    for n, (body, _) in enumerate(_growing(msgs)):
        headers = {"x-ctxgate-session-id": "pre", "x-ctxgate-budget-tokens": "12000"}
        await engine.fit(body, CallContext("t1", f"pre{n}", headers))
    print(fresh, [len(b) for b in batches])
    assert len(fresh) >= 3, fresh  # the session passed its mark again and again
    later = fresh[1:]
    assert all(new <= 4 for _, _, new in later), later  # the query and the newest turn's
    assert sum(given for _, given, _ in later) >= 5 * sum(new for _, _, new in later)
