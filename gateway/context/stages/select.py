"""select: cheap rules, regardless of budget — scope, recency, stale step instructions,
repeated reminders. Applies to messages the current compaction step covers (`horizon`).

Options: `max_turns` (drop turns older than this), `knowledge_max_turns` (scope: drop
retrieved documents older than this), `stale_patterns` ([{pattern, after_turns, action}]:
instructions that go stale, dropped or masked once `after_turns` old), `reminder_patterns`
(regexes of reminder blocks: an older copy is stripped when a newer message repeats it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gateway.context.forecast import Budget
from gateway.context.items import Item
from gateway.context.session import Decision
from gateway.context.stages.base import StageContext, StageResult, decide, unit_pinned
from gateway.context.stale import stale_rule
from gateway.context.taskclass import SelectOptions, StaleRule


def _stale(item: Item, rules: Sequence[StaleRule], ctx: StageContext) -> Decision | None:
    rule = stale_rule(item, rules, ctx.caches.stale)
    if rule is None:
        return None
    if rule.action == "strip":  # cut the matching block out, keep the rest of the message
        return Decision("select", "compress", "stale_instruction", "strip", arg=rule.pattern)
    return Decision("select", rule.action, "stale_instruction", rule.action)


def _reminder(
    item: Item, pos: int, last: dict[tuple[str, str], int],
    patterns: Sequence[tuple[str, re.Pattern[str]]],
) -> Decision | None:
    """Strip a reminder block when every block of it is repeated by a later item."""
    for pattern, compiled in patterns:
        blocks = compiled.findall(item.text)
        if blocks and all(last[(pattern, block)] > pos for block in blocks):
            return Decision("select", "compress", "repeated_reminder", "strip", arg=pattern)
    return None


def _last_blocks(items: list[Item], patterns: Sequence[tuple[str, re.Pattern[str]]]
                 ) -> dict[tuple[str, str], int]:
    """Where each reminder block occurs last: one pass, not a scan of the rest per item.
    The patterns compiled once a call: `re.findall`'s own look-up of the compiled pattern
    cost twice the search on a late call's ~550 short items (bench/README.md, "Per-call
    time on long sessions, part thirteen"); a memo of each text's blocks cost more than
    the search."""
    last: dict[tuple[str, str], int] = {}
    for pos, item in enumerate(items):
        for pattern, compiled in patterns:
            for block in compiled.findall(item.text):
                last[(pattern, block)] = pos
    return last


async def select_items(items: list[Item], budget: Budget, ctx: StageContext) -> StageResult:
    opts = ctx.task_class.stages.select or SelectOptions()
    max_turns, knowledge_max = opts.max_turns, opts.knowledge_max_turns
    stale_rules, reminders = opts.stale_patterns, opts.reminder_patterns
    pinned_units = unit_pinned(items)
    compiled = [(pattern, re.compile(pattern)) for pattern in reminders]
    last_blocks = _last_blocks(items, compiled) if reminders else {}
    chosen: dict[str, Decision] = {}
    for pos, item in enumerate(items):
        if item.pinned or item.id in ctx.decisions or item.message_index >= ctx.horizon:
            continue
        droppable = item.unit not in pinned_units
        decision = None
        if max_turns is not None and item.age > max_turns and droppable and not item.goal:
            decision = Decision("select", "drop", "recency", "drop")
        elif (
            knowledge_max is not None and item.kind == "knowledge" and item.age > knowledge_max
        ):
            decision = Decision("select", "drop", "out_of_scope", "drop")
        elif stale_rules:
            decision = _stale(item, stale_rules, ctx)
            if decision is not None and decision.method == "drop" and not droppable:
                decision = Decision("select", "mask", "stale_instruction", "mask")
        if decision is None and reminders:
            decision = _reminder(item, pos, last_blocks, compiled)
        if decision is not None:
            chosen[item.id] = decision
    return decide(items, chosen, ctx)
