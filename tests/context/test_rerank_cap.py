"""A session's first call sends the model at most `EMBED_NEW` never-seen texts in its rerank
(issue 7, per-call time: a first call over its budget brought up to ~65 at once, 10-17 s of
one batch); a later call's rerank embeds every text it ranks, as before, so a long session's
steps score exactly as without the cap. Real embedder (each test its own memo, no Redis),
real engine, nothing mocked."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.forecast import Budget
from gateway.context.items import Item, parse_request
from gateway.context.stages import STAGES, StageContext
from gateway.context.stages.rerank import EMBED_CHARS, EMBED_NEW
from gateway.context.taskclass import BudgetSplit, task_class
from gateway.context.tokens import TokenCounter
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

COUNTER = TokenCounter()
BUDGET = Budget(100_000, BudgetSplit())
OUTPUTS = 30  # exchanges: 58 texts ranked, all within EMBED_ITEMS


@pytest.fixture
def fresh(embedder: Embedder) -> Embedder:
    """The session's model with a memo of its own and no Redis: every text is new to it."""
    return embedder.with_client(None)


@pytest.fixture
async def capped_engine(
    settings: Settings, redis_client: aioredis.Redis, fresh: Embedder, tmp_path: Path
) -> AsyncIterator[ContextEngine]:
    metrics = Metrics()
    log = DropLog(str(tmp_path / "drops.jsonl"), "hash", metrics)
    yield ContextEngine(settings, redis_client, metrics, log, fresh)
    log.close()


def _output(k: int, tag: str) -> str:
    rows = [{"id": f"{tag}-{k}-{j}", "city": f"City {k}", "stock": 10 * j + k,
             "note": f"warehouse {k} shelf {j} holds {k + j} crates of part P-{k}{j}"}
            for j in range(12)]
    return json.dumps({"type": "text", "text": json.dumps(rows)})


def _session(n: int, tag: str) -> list[dict[str, Any]]:
    """A tool-using agent's call: a task, then `n` tool exchanges, each output its own."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a tool-using agent."},
        {"role": "user", "content": f"Count the crates of every warehouse ({tag})."},
    ]
    for k in range(n):
        cid = f"toolu_{k:03d}"
        msgs += [
            {"role": "assistant", "content": f"Step {k}.", "tool_calls": [
                {"id": cid, "type": "function",
                 "function": {"name": "read_stock", "arguments": json.dumps({"site": k})}}]},
            {"role": "tool", "tool_call_id": cid, "content": _output(k, tag)},
        ]
    return msgs


def _embedded(embedder: Embedder, msgs: list[dict[str, Any]]) -> list[bool]:
    """Per tool output of `msgs`, in order: whether the embedder has its vector."""
    return [embedder.cached(m["content"][:EMBED_CHARS]) is not None
            for m in msgs if m["role"] == "tool"]


def _call(session: str, budget: int) -> CallContext:
    return CallContext(tenant="cap", trace_id=uuid.uuid4().hex, headers={
        "x-ctxgate-session-id": session, "x-ctxgate-budget-tokens": str(budget)})


async def test_a_first_call_over_its_budget_embeds_at_most_the_cap(
    capped_engine: ContextEngine, fresh: Embedder
) -> None:
    """A first call of 30 exchanges at 60% of its size: the rerank sends the model its newest
    `EMBED_NEW` texts, not the 58 it ranks; the call is still cut into its budget."""
    msgs = _session(OUTPUTS, uuid.uuid4().hex[:8])
    tokens = parse_request({"messages": msgs}, COUNTER, "o200k_base").tokens
    budget = int(0.6 * tokens)
    fitted = await capped_engine.fit({"messages": msgs}, _call(uuid.uuid4().hex, budget))
    assert fitted.drops and fitted.tokens_after <= budget
    # the newest 16 texts ranked, newest first: the last 8 closed exchanges' calls and
    # outputs (the latest exchange is pinned, its texts unranked)
    steps = [fresh.cached(m["content"]) is not None for m in msgs if m["role"] == "assistant"]
    half = EMBED_NEW // 2
    old = OUTPUTS - half - 1
    assert steps == [False] * old + [True] * half + [False]
    assert _embedded(fresh, msgs) == [False] * old + [True] * half + [False]


async def test_a_later_calls_step_embeds_every_text_it_ranks(
    capped_engine: ContextEngine, fresh: Embedder
) -> None:
    """A session whose first call is small, then a call 30 exchanges longer and over its
    budget (a later call's step, the long sessions' case): every text it ranks is embedded in
    that one rerank, as without the cap."""
    tag = uuid.uuid4().hex[:8]
    msgs = _session(OUTPUTS, tag)
    tokens = parse_request({"messages": msgs}, COUNTER, "o200k_base").tokens
    session = uuid.uuid4().hex
    first = await capped_engine.fit({"messages": msgs[:2]}, _call(session, int(0.6 * tokens)))
    assert not first.drops
    fitted = await capped_engine.fit({"messages": msgs}, _call(session, int(0.6 * tokens)))
    assert fitted.drops  # a step
    # every output but the latest exchange's (pinned, unranked)
    assert _embedded(fresh, msgs) == [True] * (OUTPUTS - 1) + [False]


def _ctx(
    items: list[Item], embedder: Embedder, first_call: bool, stages: dict[str, Any]
) -> StageContext:
    return StageContext(
        task_class=task_class("t", {"stages": stages}),
        counter=COUNTER,
        encoding="o200k_base",
        embedder=embedder,
        fixed_tokens=3,
        horizon=0,
        query="how many crates does warehouse 3 hold?",
        originals={i.id: i for i in items},
        decisions={},
        first_call=first_call,
    )


async def test_a_first_call_scores_as_before_when_its_new_texts_fit_the_cap(
    embedder: Embedder,
) -> None:
    """Under the cap a first call's scores are the uncapped rerank's, to the bit (the same
    texts in the same batch, the same product); over it, the texts left out rank without
    relevance until a later call embeds them, and that call's scores equal an uncapped
    rerank's."""
    tag = uuid.uuid4().hex[:8]
    few = parse_request({"messages": _session(8, tag)}, COUNTER, "o200k_base").items
    capped = await STAGES["rerank"](few, BUDGET, _ctx(few, embedder.with_client(None), True, {}))
    plain = await STAGES["rerank"](few, BUDGET, _ctx(few, embedder.with_client(None), False, {}))
    assert [i.score for i in capped.items] == [i.score for i in plain.items]

    many = parse_request({"messages": _session(OUTPUTS, tag)}, COUNTER, "o200k_base").items
    mine = embedder.with_client(None)
    first = await STAGES["rerank"](many, BUDGET, _ctx(many, mine, True, {}))
    later = await STAGES["rerank"](many, BUDGET, _ctx(many, mine, False, {}))
    plain = await STAGES["rerank"](many, BUDGET, _ctx(many, embedder.with_client(None), False, {}))
    assert [i.score for i in first.items] != [i.score for i in plain.items]
    assert np.allclose([i.score for i in later.items], [i.score for i in plain.items], atol=1e-5)
    # an output the first call left out scores by recency alone there
    old = [k for k, i in enumerate(many) if i.kind == "tool_result"][-EMBED_NEW]
    assert first.items[old].score != pytest.approx(later.items[old].score, abs=1e-4)


async def test_a_first_calls_documents_are_embedded_past_the_cap(embedder: Embedder) -> None:
    """A class that drops irrelevant documents judges every undecided one it ranks on that
    call, so a capped first call embeds them all, and at most `EMBED_NEW` other texts."""
    tag = uuid.uuid4().hex[:8]
    docs = "".join(f"<document id={k}>Warehouse {k} ({tag}) report: "
                   + f"shelf {k} holds crates of part P-{k}. " * 10 + "</document>\n"
                   for k in range(20))
    msgs = _session(20, tag)  # 38 texts ranked and the documents: all within EMBED_ITEMS
    msgs[1] = {"role": "user", "content": "Context:\n" + docs + msgs[1]["content"]}
    items = parse_request({"messages": msgs}, COUNTER, "o200k_base").items
    documents = [i for i in items if i.kind == "knowledge"]
    assert len(documents) == 20
    mine = embedder.with_client(None)
    await STAGES["rerank"](items, BUDGET,
                           _ctx(items, mine, True, {"rerank": {"min_relevance": 0.05}}))
    assert all(mine.cached(d.text[:EMBED_CHARS]) is not None for d in documents)
    others = [i for i in items if not i.pinned and i.kind != "knowledge"]
    assert sum(mine.cached(i.text[:EMBED_CHARS]) is not None for i in others) == EMBED_NEW


async def test_embed_some_returns_known_texts_and_embeds_at_most_the_new_asked(
    embedder: Embedder,
) -> None:
    mine = embedder.with_client(None)
    tag = uuid.uuid4().hex[:8]
    known = [f"known text {k} {tag}" for k in range(3)]
    await mine.embed(known)
    new = [f"new text {k} {tag}" for k in range(10)]
    texts = [new[0], *known, *new[1:]]
    found = await mine.embed_some(texts, new_at_most=4, always=1)
    assert [v is not None for v in found] == [True] * 8 + [False] * 5
    assert [t for t in texts if mine.cached(t) is not None] == texts[:8]
    whole = await embedder.with_client(None).embed(texts[:8])
    assert np.allclose(np.stack([v for v in found if v is not None]), whole, atol=1e-5)
