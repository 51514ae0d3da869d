"""rerank: importance of each unpinned item for the *current* step (after PAACE).

score = relevance (cosine to the current step: the latest result and request) + recency
      + plan-aware weights: the goal highest, error-and-recovery steps kept, sub-goals that
        finished (before the latest success) lower.
Embeddings come from the shared embedder: cached by content hash, computed off the event
loop, only for items never seen. Options: `min_relevance` (drop retrieved documents below
it), `weights` {relevance, recency, goal, error, finished}.
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


async def _relevance(items: list[Item], ctx: StageContext) -> list[float]:
    if ctx.embedder is None or not ctx.query:
        return [0.0] * len(items)
    texts = [item.text[:EMBED_CHARS] or " " for item in items]
    vectors = await ctx.embedder.embed([ctx.query[-EMBED_CHARS:], *texts])
    sims = vectors[1:] @ vectors[0]
    return [float(x) for x in np.clip(sims, -1.0, 1.0)]


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
        score = weights.relevance * relevance[item.id]
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
            if (
                item.kind == "knowledge"
                and item.id not in ctx.decisions
                and relevance[item.id] < min_relevance
            ):
                chosen[item.id] = Decision("rerank", "drop", "irrelevant", "drop")
    return decide(scored, chosen, ctx)
