"""Each stage on its own: select, cluster, compress, rerank (real embedder)."""

from __future__ import annotations

from typing import Any

from gateway.context.forecast import Budget
from gateway.context.items import Item, parse_request
from gateway.context.stages import STAGES, StageContext
from gateway.context.taskclass import BudgetSplit, TaskClass, task_class
from gateway.context.tokens import TokenCounter
from gateway.embeddings import Embedder

COUNTER = TokenCounter()
BUDGET = Budget(100_000, BudgetSplit())


def _ctx(
    cls: TaskClass,
    items: list[Item],
    horizon: int,
    embedder: Embedder | None = None,
    target: int | None = None,
) -> StageContext:
    return StageContext(
        task_class=cls,
        counter=COUNTER,
        encoding="o200k_base",
        embedder=embedder,
        fixed_tokens=3,
        horizon=horizon,
        query="fix the crash in parser.py",
        originals={i.id: i for i in items},
        decisions={},
        target=target,
    )


def _items(msgs: list[dict[str, Any]]) -> list[Item]:
    return parse_request({"messages": msgs}, COUNTER, "o200k_base").items


def _cls(stages: dict[str, Any]) -> TaskClass:
    return task_class("t", {"stages": stages, "compaction": {"verbatim_turns_high": 3}})


def _turns(n: int, text: str) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "goal: fix parser.py"}]
    for t in range(n):
        msgs += [
            {"role": "assistant", "content": f"step {t}"},
            {"role": "user", "content": text.format(t=t)},
        ]
    return msgs


async def test_select_drops_stale_instructions_and_strips_reminders() -> None:
    msgs = _turns(4, "output {t}\n<system-reminder>use tools</system-reminder>")
    msgs[2]["content"] = "Here is a demonstration: do X"
    items = _items(msgs)
    cls = _cls(
        {
            "select": {
                "stale_patterns": [{"pattern": "^Here is a demonstration", "after_turns": 2}],
                "reminder_patterns": ["<system-reminder>[\\s\\S]*?</system-reminder>"],
            }
        }
    )
    result = await STAGES["select"](items, BUDGET, _ctx(cls, items, horizon=len(msgs)))
    reasons = {d.reason for d in result.decisions.values()}
    assert reasons == {"stale_instruction", "repeated_reminder"}
    texts = [i.text for i in result.items]
    assert "Here is a demonstration: do X" not in texts
    assert texts[-1].endswith("</system-reminder>")  # the latest copy stays
    assert all("system-reminder" not in t for t in texts[:-1])


async def test_cluster_dedups_exact_and_near_keeping_earliest() -> None:
    body = "\n".join(
        f"line {k} of the same long build output with path src/a.py" for k in range(30)
    )
    msgs = _turns(3, body)
    msgs[4]["content"] = body.replace("line 7", "line seven")  # near duplicate
    items = _items(msgs)
    result = await STAGES["cluster"](
        items, BUDGET, _ctx(_cls({"cluster": {"near_threshold": 0.7}}), items, len(msgs))
    )
    pinned_copy = next(i for i in items if i.message_index == 6)  # the latest user message
    assert pinned_copy.pinned
    assert {d.arg for d in result.decisions.values()} == {pinned_copy.id}
    assert {d.reason for d in result.decisions.values()} == {"duplicate", "near_duplicate"}
    assert sorted(i.message_index for i in items if i.id in result.decisions) == [2, 4]


async def test_compress_ages_then_cuts_to_target() -> None:
    body = "\n".join(f"{k}: value = compute({k})  # filler text" for k in range(80))
    msgs = _turns(6, body)
    items = _items(msgs)
    cls = _cls({"compress": {}})
    aged = await STAGES["compress"](items, BUDGET, _ctx(cls, items, horizon=6))
    assert {d.reason for d in aged.decisions.values()} == {"aged"}
    assert all(
        i.message_index >= 6 or i.goal or i.id in aged.decisions or i.tokens < 40 for i in items
    )
    target = 3 + sum(i.tokens for i in items if i.pinned) + 150
    ctx = _ctx(cls, items, horizon=0, target=target)
    cut = await STAGES["compress"](items, BUDGET, ctx)
    assert ctx.total(cut.items) <= target
    assert msgs[-1]["content"] in [i.text for i in cut.items]  # pinned untouched


async def test_rerank_scores_goal_and_relevance(embedder: Embedder) -> None:
    msgs = _turns(3, "unrelated weather report {t}: sunny")
    msgs[4]["content"] = "Traceback: crash in parser.py line 12, ValueError"
    items = _items(msgs)
    result = await STAGES["rerank"](items, BUDGET, _ctx(_cls({"rerank": {}}), items, 0, embedder))
    scores = {i.message_index: i.score for i in result.items}
    assert scores[0] > scores[4] > scores[2]


async def test_digests_keep_the_latest_turns_commands_whole() -> None:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "goal: fix parser.py"}]
    for t in range(4):
        script = "\n".join(f"    value_{t}_{k} = parse_{k}(line)" for k in range(20))
        edit = f"Rewrite it.\n```\nedit 1:1\n{script}\nend_of_edit\n```"
        msgs += [
            {"role": "assistant", "content": edit},
            {"role": "user", "content": f"File updated {t}."},
        ]
    items = _items(msgs)
    cls = _cls({"compress": {"kinds": ["assistant"], "min_tokens": 25, "level": 3}})
    out = await STAGES["compress"](items, BUDGET, _ctx(cls, items, horizon=len(msgs)))
    texts = {i.message_index: i.text for i in out.items}
    # ages 3 and 2: the edit's middle cut; ages 1 and 0: the agent's latest code kept whole
    assert "value_0_10" not in texts[1] and "value_1_10" not in texts[3]
    assert "value_2_10 = parse_10(line)" in texts[5] and "value_3_10" in texts[7]
    assert all("Rewrite" not in texts[i] for i in (1, 3, 5, 7))


def test_a_batch_after_a_left_out_one_masks_what_it_would_have_on_time() -> None:
    """A mask batch after one a weighed step left out (`SessionState.late_batch`), inside
    the young window or at its exit (`repay_young_calls`: the first call past it), masks
    the digests at least `oldest - mask_after_turns` old, as it would have when its oldest
    digest was twice that old, not the digests that became due meanwhile (Toolathlon
    claude runs: a digest naming the paths the agent opened calls later, masked at the
    exit, bench/README.md "A young session's large calls weighed, part three"; part five of
    "Short runs' cost @0.1"). A batch no step left out masks every digest due: a long
    session's tail, steps every few calls, is not thinned (part six). Past the exit: every
    digest due."""
    from gateway.context.session import Decision
    from gateway.context.stages.compress import _expired_digests

    msgs = _turns(30, "output {t}: " + " ".join(f"value_{k}" for k in range(80)))
    items = _items(msgs)
    old = next(i for i in items if i.age == 25 and i.kind == "user")
    due = next(i for i in items if i.age == 12 and i.kind == "user")  # >= 10, < 25 - 10
    spec = {"compaction": {"verbatim_turns_high": 3, "repay_calls": 20,
                           "repay_young_calls": 30},
            "stages": {"compress": {"mask_after_turns": 10}}}
    cls = task_class("t", spec)
    opts = cls.stages.compress
    assert opts is not None
    ctx = _ctx(cls, items, horizon=len(msgs))
    for item in (old, due):
        ctx.decisions[item.id] = Decision("compress", "compress", "aged", "summary")

    def masked(calls: int, c: TaskClass = cls, late: bool = True) -> set[str]:
        ctx.calls, ctx.task_class, ctx.late_batch = calls, c, late
        return set(_expired_digests(items, ctx, opts))

    # after a left-out batch, the catch-up (inside the window or at its exit): on time
    assert masked(5) == masked(30) == masked(31) == {old.id}
    # no batch left out: every digest due, the window's exit included
    assert masked(5, late=False) == masked(31, late=False) == {old.id, due.id}
    assert masked(32) == {old.id, due.id}  # past the exit: no step is weighed any more
    off = task_class("t", {**spec, "compaction": {**spec["compaction"], "repay_young_calls": 0}})
    assert masked(31, off) == masked(5, off) == {old.id, due.id}
