"""rerank: importance of each unpinned item for the *current* step (after PAACE).

score = relevance (cosine to the current step: the latest result and request) + recency
      + plan-aware weights: the goal highest, error-and-recovery steps kept, sub-goals that
        finished (before the latest success) lower.
Embeddings come from the shared embedder: cached by content hash, computed off the event
loop, only for items never seen, and for at most `EMBED_ITEMS` items a call (the newest).
On a session's first call at most `EMBED_NEW` of them are new to the model (the rest rank
without relevance); a later call embeds all it ranks, so its output does not depend on it.
Options: `min_relevance` (drop retrieved documents below it), `weights` {relevance, recency,
goal, error, finished}.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np

from gateway.context.forecast import Budget
from gateway.context.items import Item
from gateway.context.session import Decision
from gateway.context.stages.base import StageContext, StageResult, decide
from gateway.context.taskclass import RerankOptions

_ERROR = re.compile(r"(?i)\b(error|exception|traceback|failed|fatal)\b")
_SUCCESS = re.compile(r"(?i)\b(passed|succeeded|successfully|fixed|resolved|done)\b")
EMBED_CHARS = 2000
# Items embedded per call at most: the most recent and the task statement. Older ones rank
# by recency alone, so a call's embedding work stays bounded however long its history.
EMBED_ITEMS = 64
# Texts never seen that a session's first call sends the model at most (the current step
# aside): a first call over its budget can bring ~65 of them at once, 10-17 s of one batch
# on a loaded machine (bench/README.md, "Per-call time on long sessions, part sixteen").
# Later calls are not capped: their steps' recall paid for it there (part seventeen).
EMBED_NEW = 16


async def _relevance(
    items: list[Item], ctx: StageContext, documents: bool
) -> list[float | None]:
    """Cosine of each item to the current step; None for those not embedded. `documents`:
    undecided retrieved documents are embedded on a capped call whatever their number
    (`min_relevance` decides their drop on it)."""
    if ctx.embedder is None or not ctx.query:
        return [0.0] * len(items)
    recent = sorted(range(len(items)), key=lambda k: -items[k].message_index)[:EMBED_ITEMS]
    chosen = sorted({*recent, *(k for k, item in enumerate(items) if item.goal)})
    texts = [items[k].text[:EMBED_CHARS] or " " for k in chosen]
    query = ctx.query[-EMBED_CHARS:]
    out: list[float | None] = [None] * len(items)
    if not ctx.first_call:
        vectors = await ctx.embedder.embed([query, *texts])
        sims = np.clip(vectors[1:] @ vectors[0], -1.0, 1.0)
        for k, sim in zip(chosen, sims, strict=True):
            out[k] = float(sim)
        return out
    # A first call: the step, undecided documents, the goal, then the newest, newest first.
    text_of = dict(zip(chosen, texts, strict=True))
    ahead = [k for k in chosen if documents and _undecided_document(items[k], ctx)]
    goal = [k for k in chosen if items[k].goal and k not in ahead]
    rest = [k for k in recent if k not in ahead and not items[k].goal]
    order = [*ahead, *goal, *rest]
    found = await ctx.embedder.embed_some(
        [query, *(text_of[k] for k in order)], EMBED_NEW, always=1 + len(ahead)
    )
    step = found[0]
    assert step is not None  # always embedded
    vector_of = dict(zip(order, found[1:], strict=True))
    kept = [k for k in chosen if vector_of[k] is not None]
    # One array in index order, as `embed` returns it: when nothing is left out, the very
    # product a later call takes.
    vectors = np.stack([step, *(v for k in kept if (v := vector_of[k]) is not None)])
    sims = np.clip(vectors[1:] @ vectors[0], -1.0, 1.0)
    for k, sim in zip(kept, sims, strict=True):
        out[k] = float(sim)
    return out


def _undecided_document(item: Item, ctx: StageContext) -> bool:
    return item.kind == "knowledge" and item.id not in ctx.decisions


async def rerank_items(items: list[Item], budget: Budget, ctx: StageContext) -> StageResult:
    opts = ctx.task_class.stages.rerank or RerankOptions()
    weights = opts.weights
    free = [item for item in items if not item.pinned]
    min_relevance = opts.min_relevance
    relevance = dict(zip(
        (i.id for i in free), await _relevance(free, ctx, min_relevance is not None), strict=True
    ))
    last_success = max((i.message_index for i in items if _SUCCESS.search(i.text)), default=-1)
    scored: list[Item] = []
    for item in items:
        if item.pinned:
            scored.append(replace(item, score=math.inf))
            continue
        score = weights.relevance * (relevance[item.id] or 0.0)
        score += weights.recency * math.exp(-item.age / 4)
        if item.goal:
            score += weights.goal
        if _ERROR.search(item.text):
            score += weights.error
        elif item.message_index < last_success:
            score += weights.finished
        scored.append(replace(item, score=score))
    chosen: dict[str, Decision] = {}
    if min_relevance is not None:
        for item in free:
            rel = relevance[item.id]
            if (
                _undecided_document(item, ctx)
                and rel is not None  # not embedded: too old to judge, left to the budget
                and rel < min_relevance
            ):
                chosen[item.id] = Decision("rerank", "drop", "irrelevant", "drop")
    return decide(scored, chosen, ctx)
