"""compress: what is left and still too large is rewritten shorter, pinned items never.

1. Age (regardless of budget): items of the kinds in `kinds`, at least `min_tokens` long,
   in messages the current step covers, are summarised extractively (see summarize.py);
   the goal (the task statement) is kept.
2. Caps: retrieved documents over the class's knowledge cap, and history over its history
   cap, are cut lowest-importance first.
3. Budget: over the high-water mark, items are cut down the budget ladder (`stages/ladder.py`)
   until the total is at the step's target.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.context.forecast import Budget
from gateway.context.items import Item
from gateway.context.session import Decision
from gateway.context.stages.base import StageContext, StageResult, decide
from gateway.context.stages.ladder import cut
from gateway.context.taskclass import CompressOptions


async def compress_items(items: list[Item], budget: Budget, ctx: StageContext) -> StageResult:
    opts = ctx.task_class.stages.compress or CompressOptions()
    kinds, min_tokens = set(opts.kinds), opts.min_tokens
    aged = {
        item.id: Decision("compress", "compress", "aged", "summary", opts.level)
        for item in items
        if ctx.task_class.compaction.ages
        and not item.pinned
        and not item.goal
        and item.id not in ctx.decisions
        and item.message_index < ctx.horizon
        and item.kind in kinds
        and item.tokens >= min_tokens
        and item.rewritable
    }
    result = decide(items, aged, ctx)
    items, decisions = result.items, dict(result.decisions)
    low = ctx.task_class.compaction.low_water
    caps: list[tuple[str, Callable[[Item], bool], int]] = [
        ("knowledge_cap", lambda i: i.kind == "knowledge", budget.split.knowledge),
        ("history_cap", lambda i: i.kind not in ("system", "knowledge"), budget.split.history),
    ]
    for reason, part, cap in caps:
        aim = cap if ctx.first_call else int(cap * low)
        items, made = cut(items, ctx, reason, aim, part, above=cap)
        decisions.update(made)
    if ctx.target is not None:
        items, made = cut(items, ctx, "over_budget", ctx.target, offset=ctx.fixed_tokens)
        decisions.update(made)
    return StageResult(items, decisions)
