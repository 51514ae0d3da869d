"""rerank: importance of each unpinned item for the *current* step (after PAACE).

score = relevance (cosine to the current step: the latest result and request) + recency
      + plan-aware weights: the goal highest, error-and-recovery steps kept, sub-goals that
        finished (before the latest success) lower.
Embeddings come from the shared embedder: cached by content hash, computed off the event
loop, only for items never seen, and for at most `EMBED_ITEMS` items a call (the newest).
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


async def _relevance(items: list[Item], ctx: StageContext) -> list[float | None]:
    """Cosine of each item to the current step; None for those not embedded."""
    if ctx.embedder is None or not ctx.query:
        return [0.0] * len(items)
    recent = sorted(range(len(items)), key=lambda k: -items[k].message_index)[:EMBED_ITEMS]
    chosen = sorted({*recent, *(k for k, item in enumerate(items) if item.goal)})
    texts = [items[k].text[:EMBED_CHARS] or " " for k in chosen]
    vectors = await ctx.embedder.embed([ctx.query[-EMBED_CHARS:], *texts])
    sims = np.clip(vectors[1:] @ vectors[0], -1.0, 1.0)
    out: list[float | None] = [None] * len(items)
    for k, sim in zip(chosen, sims, strict=True):
        out[k] = float(sim)
    return out


async def rerank_items(items: list[Item], budget: Budget, ctx: StageContext) -> StageResult:
    opts = ctx.task_class.stages.rerank or RerankOptions()
    weights = opts.weights
    free = [item for item in items if not item.pinned]
    relevance = dict(zip((i.id for i in free), await _relevance(free, ctx), strict=True))
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
    min_relevance = opts.min_relevance
    if min_relevance is not None:
        for item in free:
            rel = relevance[item.id]
            if (
                item.kind == "knowledge"
                and item.id not in ctx.decisions
                and rel is not None  # not embedded: too old to judge, left to the budget
                and rel < min_relevance
            ):
                chosen[item.id] = Decision("rerank", "drop", "irrelevant", "drop")
    return decide(scored, chosen, ctx)
