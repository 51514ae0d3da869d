"""A digest of an output made while a queue's later task is the current one lists
`LATER_TASK_VALUES` values more than its cap (`summarize._mentions`): there a step comes every
few calls, and a value the agent types a few calls after reading the output once (a branch
of a listing, a month's total under a list of receipts) was past the cap (bench/README.md,
"Toolathlon queues' recall, part thirty-three"). A first task's digest and a turn's prose
list what they did."""

from __future__ import annotations

import re

from gateway.context.focus import Focus
from gateway.context.summarize import LATER_TASK_VALUES, MENTION_CAP, summarize

BRANCHES = 24
LISTING = "\n".join(f"branch dev_{k:02d} protected no" for k in range(BRANCHES))
FIRST = frozenset({"orders", "audit"})  # the first task's terms (`Focus.lead`)
LATER = Focus(FIRST | {"robots", "sitemap"}, FIRST)  # a later task's own terms besides


def listed(text: str) -> set[str]:
    line = next(line for line in text.splitlines() if line.startswith("[omitted text mentions"))
    return set(re.findall(r"dev_\d\d", line))


def test_later_task_digest_lists_more_values() -> None:
    first = listed(summarize(LISTING, "tool_result", 3, focus=FIRST))
    later = listed(summarize(LISTING, "tool_result", 3, focus=LATER))
    assert len(first) == MENTION_CAP[3]
    assert len(later) == MENTION_CAP[3] + LATER_TASK_VALUES
    assert first < later
    assert "dev_10" in later and "dev_10" not in first


def test_prose_lists_no_more() -> None:
    prose = " ".join(f"I will check dev_{k:02d} next." for k in range(BRANCHES))
    assert (summarize(prose, "assistant", 3, focus=LATER)
            == summarize(prose, "assistant", 3, focus=FIRST))
