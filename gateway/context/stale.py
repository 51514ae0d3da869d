"""Stale rules (`stages.select.stale_patterns`): which rule, if any, has made an item stale.

One reading for the three places that need it: select (to decide what to cut), the step
trigger (to count the tokens a step would reclaim) and the engine (the session's constant
context as the model will see it however old the session gets).
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence

from gateway.context.items import Item
from gateway.context.taskclass import StaleRule


def stale_rule(
    item: Item,
    rules: Sequence[StaleRule],
    memo: MutableMapping[tuple[str, str], bool] | None = None,
    *,
    any_age: bool = False,
) -> StaleRule | None:
    """The first rule that applies to `item` at its age (`any_age`: once it is old enough
    for all of them); `memo` keeps whether a pattern occurs in an item, by item id."""
    for rule in rules:
        if not any_age and item.age < rule.after_turns:
            continue
        key = (item.id, rule.pattern)
        found = memo.get(key) if memo is not None else None
        if found is None:
            found = rule.regex.search(item.text) is not None
            if memo is not None:
                memo[key] = found
        if found:
            return rule
    return None


def stale_text(text: str, rule: StaleRule) -> str:
    """What of `text` the model still reads once `rule` applies to it."""
    return rule.regex.sub("", text) if rule.action == "strip" else ""
