"""`compress._expired_digests` walks a step's whole history: an item decided for good (masked,
pointed to, dropped: no digest, no decision it still ages under) is passed over without the
branches' tests, and the batch's decisions are made only when the batch comes (bench/README.md,
"Per-call time on long sessions, part forty-one"). Its answer is the one the full walk gave:
`_walked` below is that walk, as main had it before the change."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.context.apply import GIST
from gateway.context.items import Item, parse_request
from gateway.context.lines import MINIFIED_JSON, MINIFIED_KEPT, REPEATED_LINES
from gateway.context.session import Decision
from gateway.context.stages import compress
from gateway.context.stages.base import StageContext
from gateway.context.stages.compress import (
    EXPIRED_MIN_TOKENS,
    _aged_digest,
    _current_task,
    _done_task,
    _drawn_blocks,
    _expired_digests,
    _masked_commands,
    _old_turn,
    _typed,
    _young_task,
)
from gateway.context.steps import text_tools_now, undecided, whole_block
from gateway.context.taskclass import CompressOptions, TaskClass, task_class
from gateway.context.tokens import TokenCounter

COUNTER = TokenCounter()
MASK = Decision("compress", "mask", "aged", "mask", 1)
DEDUP = Decision("cluster", "dedup", "duplicate", "dedup", arg="x")
DIGEST = Decision("compress", "compress", "aged", "summary", text="digest")
KEPT = Decision("compress", "compress", MINIFIED_KEPT, "summary", text="{}")
LINES = Decision("cluster", "dedup", REPEATED_LINES, "dedup", text="lines")
JSON = Decision("cluster", "compress", MINIFIED_JSON, "strip", text="{}")
OTHER = Decision("compress", "compress", "budget", "summary", text="cut")
DROP = Decision("select", "drop", "stale", "drop")
FORMS = [None, MASK, DEDUP, DIGEST, KEPT, LINES, JSON, OTHER, DROP]


def _walked(items: list[Item], ctx: StageContext, opts: CompressOptions,
            due: frozenset[str] = frozenset()) -> dict[str, Decision]:
    """`_expired_digests` as main had it (4653820): every item through every branch."""
    after = opts.mask_after_turns
    from_turns = opts.mask_turns_from_turns
    text = text_tools_now(ctx.task_class, items)
    if text is not None:
        after = after if text.mask_after_turns is None else text.mask_after_turns
        from_turns = from_turns if text.mask_turns_from_turns is None else (
            text.mask_turns_from_turns)
    if after is None or not ctx.task_class.compaction.ages:
        return {}
    expired = {}
    oldest = 0
    task = _young_task(items, opts)
    done = _done_task(items, opts)
    current = _current_task(items, opts)
    drawn = _drawn_blocks(items, ctx, opts)
    typed = functools.cache(lambda: _typed(items, ctx))
    digests = any(_aged_digest(ctx.decisions.get(item.id)) and item.tokens >= EXPIRED_MIN_TOKENS
                  for item in items)
    for item in items:
        before = done is not None and item.message_index < done
        aged = (item.age - (opts.mask_current_turns or 0) + after
                if current is not None and item.message_index > current else item.age)
        if ((aged < after and not before) or item.pinned
                or (task is not None and item.message_index > task)):
            continue
        if before and item.id in due and item.tokens >= EXPIRED_MIN_TOKENS:
            expired[item.id] = Decision("compress", "mask", "aged", "mask", 1,
                                        text=_masked_commands(item, opts, ctx, typed))
            oldest = max(oldest, 2 * after)
            continue
        made = ctx.decisions.get(item.id)
        digest = made is not None and (
            (made.method == "summary" and made.reason == "aged") or made.reason == MINIFIED_KEPT)
        size = (ctx.originals.get(item.id, item).tokens if made is not None
                and made.reason == MINIFIED_KEPT else item.tokens)
        if digest and size >= EXPIRED_MIN_TOKENS:
            expired[item.id] = Decision("compress", "mask", "aged", "mask", 1,
                                        text=_masked_commands(item, opts, ctx, typed))
            oldest = max(oldest, 2 * after if before else aged)
        elif (item.tokens >= EXPIRED_MIN_TOKENS and item.message_index < ctx.horizon
              and undecided(item, ctx.decisions) and item.rewritable
              and whole_block(item, opts) and item.id not in drawn):
            expired[item.id] = Decision("compress", "mask", "aged", "mask", 1)
        elif _old_turn(item, ctx, opts, digest, from_turns):
            expired[item.id] = Decision("compress", "mask", "aged", "mask", 1, arg=GIST)
            if ("user" not in opts.kinds and not digests
                    and item.message_index < item.clock.task_start):
                oldest = max(oldest, aged)
    if oldest < 2 * after:
        return {}
    c = ctx.task_class.compaction
    if ctx.late_batch and c.repay_young_calls and ctx.calls <= c.repay_young_calls + 1:
        least = oldest - after
        age = {item.id: item.age for item in items}
        expired = {k: d for k, d in expired.items() if age[k] >= least}
    return expired


# task classes that take each branch: turns masked as gists, a finished task's turns, the
# current task aging slower, a young task held back, a text-tool agent (no user digests)
CLASSES: list[dict[str, Any]] = [
    {"mask_after_turns": 3},
    {"mask_after_turns": 2, "mask_turns_min_tokens": 5, "done_task_turns": 3},
    {"mask_after_turns": 3, "mask_turns_min_tokens": 5, "mask_current_turns": 5,
     "mask_task_from_turns": 4},
    {"mask_after_turns": 2, "mask_turns_min_tokens": 5, "kinds": ["tool_result", "assistant"],
     "whole_block_tokens": 400},
]


def _session(turns: list[tuple[int, int, bool]]) -> list[dict[str, Any]]:
    """A session of `turns` (an assistant turn's words, its answer's words, whether a new
    task's statement comes after it), its assistant turns running shell blocks at times."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You fix bugs."},
                                  {"role": "user", "content": "goal: fix parser.py " * 5}]
    for t, (said, answer, task) in enumerate(turns):
        shell = f"\n```bash\ngrep -n value_{t} parser.py\n```" if t % 3 == 0 else ""
        msgs.append({"role": "assistant", "content": f"step {t} " * said + shell})
        msgs.append({"role": "user", "content": " ".join(
            f"value_{t}_{k}" for k in range(answer))})
        if task:
            msgs.append({"role": "assistant", "content": "done"})
            msgs.append({"role": "user", "content": f"new task {t}: fix lexer.py " * 4})
    return msgs


def _ctx(cls: TaskClass, items: list[Item], horizon: int, calls: int,
         late: bool) -> StageContext:
    return StageContext(task_class=cls, counter=COUNTER, encoding="o200k_base", embedder=None,
                        fixed_tokens=3, horizon=horizon, query="fix parser.py",
                        originals={i.id: i for i in items}, decisions={}, calls=calls,
                        late_batch=late)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 200), st.booleans()),
                   min_size=1, max_size=24),
    forms=st.lists(st.sampled_from(FORMS), min_size=60, max_size=60),
    spec=st.sampled_from(CLASSES),
    horizon=st.floats(0, 1),
    due=st.sets(st.integers(0, 59), max_size=8),
    calls=st.integers(1, 40),
    late=st.booleans(),
)
def test_the_walk_passing_over_decided_items_answers_as_the_full_walk(
    turns: list[tuple[int, int, bool]], forms: list[Decision | None], spec: dict[str, Any],
    horizon: float, due: set[int], calls: int, late: bool,
) -> None:
    msgs = _session(turns)
    items = parse_request({"messages": msgs}, COUNTER, "o200k_base").items
    cls = task_class("t", {"compaction": {"verbatim_turns_high": 3, "repay_young_calls": 20},
                           "stages": {"compress": spec}})
    opts = cls.stages.compress
    assert opts is not None
    ctx = _ctx(cls, items, int(horizon * len(msgs)), calls, late)
    for item, form in zip(items, forms, strict=False):
        if form is not None:
            ctx.decisions[item.id] = form
    ids = frozenset(items[k].id for k in due if k < len(items))
    got = _expired_digests(items, ctx, opts, ids)
    want = _walked(items, ctx, opts, ids)
    assert list(got.items()) == list(want.items())  # the same decisions, in the same order


def test_a_step_without_a_batch_tests_no_decided_item_and_makes_no_mask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Items decided for good are not put through the branches (`_old_turn` is asked of the
    others only), and no mask's text is made while no batch comes (main: both, every step)."""
    msgs = _session([(5, 120, False)] * 12)
    items = parse_request({"messages": msgs}, COUNTER, "o200k_base").items
    cls = task_class("t", {"compaction": {"verbatim_turns_high": 3},
                           "stages": {"compress": {"mask_after_turns": 4,
                                                   "mask_turns_min_tokens": 5}}})
    opts = cls.stages.compress
    assert opts is not None
    ctx = _ctx(cls, items, len(msgs), 13, False)
    results = [i for i in items if i.kind == "user" and i.message_index > 1]
    for item in results[:6]:
        ctx.decisions[item.id] = MASK  # decided for good
    for item in results[6:]:
        ctx.decisions[item.id] = DIGEST  # the oldest 5 turns old: under twice `mask_after_turns`
    asked: list[str] = []
    made: list[str] = []

    def old_turn(item: Item, *args: Any) -> bool:
        asked.append(item.id)
        return _old_turn(item, *args)

    def masked_commands(item: Item, *args: Any) -> str | None:
        made.append(item.id)
        return _masked_commands(item, *args)

    monkeypatch.setattr(compress, "_old_turn", old_turn)
    monkeypatch.setattr(compress, "_masked_commands", masked_commands)
    assert [i.age for i in results] == list(range(11, -1, -1))
    assert _expired_digests(items, ctx, opts) == {}
    assert asked and not {i.id for i in results[:6]} & set(asked)
    assert made == []
    # the same walk with a batch due: the digests' masks are made, the masked items left
    ctx.task_class = task_class("t", {"compaction": {"verbatim_turns_high": 3},
                                      "stages": {"compress": {"mask_after_turns": 2,
                                                              "mask_turns_min_tokens": 5}}})
    quick = ctx.task_class.stages.compress
    assert quick is not None
    got = _expired_digests(items, ctx, quick)
    assert got == _walked(items, ctx, quick) and got
    assert set(made) <= set(got)
