"""The engine end to end on real Redis: budgets, drop-log sums, sessions, prefix, playbook."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.context.engine import CallContext, ContextEngine, InjectedBlock
from gateway.context.replay import load_calls
from gateway.errors import ContextBudgetExceeded, InvalidRequest
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from tests.context.sessions import drops_add_up

from .conftest import CORPUS


def _agent_session(turns: int, size: int = 400) -> list[dict]:
    msgs: list[dict] = [
        {"role": "system", "content": "You are an autonomous programmer."},
        {"role": "user", "content": "Fix bug 77 in src/calc.py: totals are wrong."},
    ]
    for t in range(turns):
        msgs.append(
            {
                "role": "assistant",
                "content": f"Step {t}: look at src/f{t}.py.",
                "tool_calls": [
                    {
                        "id": f"c{t}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": f'{{"n": {t}}}'},
                    }
                ],
            }
        )
        body = "\n".join(f"{k}:    value_{t}_{k} = compute({k}, {t})" for k in range(size // 10))
        msgs.append(
            {"role": "tool", "tool_call_id": f"c{t}", "content": f"[File: src/f{t}.py]\n{body}"}
        )
    return msgs


def _call(session: str, **headers: str) -> CallContext:
    return CallContext(
        tenant="t1", trace_id="tr", headers={"x-ctxgate-session-id": session, **headers}
    )


def _valid(messages: list[dict]) -> None:
    open_calls: set[str] = set()
    for msg in messages:
        assert msg["role"] in ("system", "developer", "user", "assistant", "tool")
        if msg["role"] == "tool":
            assert msg["tool_call_id"] in open_calls
        if msg["role"] == "assistant":
            open_calls = {c["id"] for c in msg.get("tool_calls") or ()}


async def test_small_request_is_untouched(engine: ContextEngine) -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi there"}]}
    fitted = await engine.fit(body, _call("small"))
    assert not fitted.changed and fitted.body is body and fitted.drops == []
    assert fitted.tokens_before == fitted.tokens_after > 0


async def test_drop_log_sum_and_budget(engine: ContextEngine, drop_log_path: Path) -> None:
    msgs = _agent_session(30)
    fitted = await engine.fit(
        {"messages": msgs},
        _call(
            "budget", **{"x-ctxgate-budget-tokens": "3000", "x-ctxgate-task-class": "coding_agent"}
        ),
    )
    assert fitted.changed and fitted.budget == 3000
    assert fitted.tokens_after <= 3000 < fitted.tokens_before
    assert drops_add_up(fitted)
    saved = fitted.tokens_before - fitted.tokens_after
    lines = [json.loads(line) for line in drop_log_path.read_text().splitlines()]
    *decisions, call = lines  # a first call: every drop is a new decision, then the call line
    assert len(decisions) == len(fitted.drops) and call["event"] == "context.call"
    assert call["dropped_tokens"] == saved and call["new_decisions"] == len(decisions)
    assert {line["stage"] for line in decisions} <= {"select", "rerank", "cluster", "compress"}
    assert all(line["session_id"] == "budget" for line in lines)
    _valid(fitted.body["messages"])
    # pinned items byte-identical
    assert fitted.body["messages"][0] == msgs[0] and fitted.body["messages"][-1] == msgs[-1]


async def test_pinned_over_budget_is_refused(engine: ContextEngine) -> None:
    body = {"messages": [{"role": "user", "content": "word " * 500}]}
    with pytest.raises(ContextBudgetExceeded) as info:
        await engine.fit(body, _call("over", **{"x-ctxgate-budget-tokens": "100"}))
    assert info.value.allowed == 100 and info.value.needed > 100
    assert engine.metrics.budget_exceeded.labels("default")._value.get() == 1


@pytest.mark.parametrize(
    "header",
    [
        ("x-ctxgate-budget-tokens", "-5"),
        ("x-ctxgate-budget-tokens", "ten"),
        ("x-ctxgate-task-class", "nope"),
    ],
)
async def test_bad_headers(engine: ContextEngine, header: tuple[str, str]) -> None:
    with pytest.raises(InvalidRequest):
        await engine.fit(
            {"messages": [{"role": "user", "content": "x"}]}, _call("bad", **{header[0]: header[1]})
        )


async def test_session_remembers_class_and_decisions(engine: ContextEngine) -> None:
    msgs = _agent_session(14)
    stable = []
    for end in range(4, len(msgs) + 1, 2):
        fitted = await engine.fit({"messages": msgs[:end]}, _call("sess"))
        assert fitted.task_class == "coding_agent"  # by the system-prompt rule
        if fitted.prefix_stable is not None:
            stable.append(fitted.prefix_stable)
    assert fitted.tokens_after < fitted.tokens_before
    assert sum(stable) / len(stable) >= 0.75 and not all(stable)
    state = await engine.sessions.load("t1", "sess")
    assert state.task_class == "coding_agent" and state.decisions and state.steps >= 1


async def test_replicas_render_a_session_identically(
    engine: ContextEngine, settings: Any, embedder: Any
) -> None:
    # A second engine (another replica: empty caches) on the same Redis continues the session
    # and renders the remembered decisions byte for byte.
    msgs = _agent_session(14)
    other = ContextEngine(
        settings, engine.forecasts._redis, Metrics(), DropLog("/dev/null", "none", None), embedder
    )
    for end in range(4, len(msgs) + 1, 2):
        ours = await engine.fit({"messages": msgs[:end]}, _call("replica"))
        if end == len(msgs) - 4:
            break
    theirs = await other.fit({"messages": msgs[: end + 2]}, _call("replica"))
    n = len(ours.body["messages"])
    assert theirs.body["messages"][:n] == ours.body["messages"] and theirs.prefix_stable


async def test_playbook_block_is_pinned_into_system(engine: ContextEngine) -> None:
    class Source:
        async def block_for_session(
            self, tenant: str, task_class: str, session_id: str, query: str, cap_tokens: int
        ) -> InjectedBlock:
            return InjectedBlock("<playbook>\n[a-00001] test first\n</playbook>", ["a-00001"], 12)

    engine.playbook = Source()
    msgs = _agent_session(2)
    fitted = await engine.fit({"messages": msgs}, _call("pb"))
    assert fitted.changed and fitted.injected_bullet_ids == ["a-00001"]
    assert fitted.body["messages"][0]["content"].endswith("</playbook>")
    assert msgs[0]["content"] == "You are an autonomous programmer."  # not mutated
    saved = sum(d.tokens_before - d.tokens_after for d in fitted.drops)
    assert saved == fitted.tokens_before - (fitted.tokens_after - 12)


async def test_observe_moves_the_forecast(engine: ContextEngine) -> None:
    body = {"model": "gpt-4", "messages": [{"role": "user", "content": "hello"}]}
    fitted = await engine.fit(body, _call("fc", **{"x-ctxgate-task-class": "plain_chat"}))
    for _ in range(6):
        await engine.observe(fitted, {"completion_tokens": 3000}, "length")
    await engine.forecasts.flush()
    engine.forecasts._local.clear()
    stats = await engine.forecasts.stats("t1", "plain_chat")
    assert stats.calls == 6 and stats.overflows == 6
    again = await engine.fit(body, _call("fc2", **{"x-ctxgate-task-class": "plain_chat"}))
    assert again.budget < fitted.budget  # the reserve grew, so the input budget shrank


@pytest.mark.skipif(not CORPUS.exists(), reason="../shared corpus not present")
async def test_corpus_trajectory_replays_valid(engine: ContextEngine) -> None:
    path = next(CORPUS.glob("replay__marshmallow*function_calling__*.traj"))
    calls = load_calls(path)
    for body in calls:
        fitted = await engine.fit(body, _call(f"traj-{path.stem}"))
        _valid(fitted.body["messages"])
        assert fitted.tokens_after <= fitted.budget
        assert (
            sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after
        )
    assert fitted.tokens_after < fitted.tokens_before


async def test_short_one_shot_is_not_embedded_but_a_conversation_is(engine: ContextEngine) -> None:
    first = [{"role": "user", "content": "Which customers had the highest revenue last quarter?"}]
    fitted = await engine.fit({"messages": first}, _call("oneshot"))
    assert fitted.task_class == "default"
    assert (await engine.sessions.load("t1", "oneshot")).task_class is None  # nothing decided
    assert (
        engine.embedder is not None
        and engine.embedder.cached("Which customers had the highest revenue last quarter?") is None
    )
    later = [
        *first,
        {"role": "assistant", "content": "Let me write a query."},
        {"role": "user", "content": "Group it by region too."},
    ]
    fitted = await engine.fit({"messages": later}, _call("oneshot"))
    assert fitted.task_class == "data_sql"  # nearest examples, decided once the session grew
    assert (await engine.sessions.load("t1", "oneshot")).task_class == "data_sql"


async def test_retrieved_documents_are_cut_before_the_question(engine: ContextEngine) -> None:
    docs = "".join(
        f"<document id={k}>Section {k}: "
        + f"policy detail {k} about refunds and returns. " * 30
        + "</document>\n"
        for k in range(8)
    )
    question = "Using the documents, what is the refund window for annual plans?"
    msgs = [
        {"role": "system", "content": "Answer only using the provided context."},
        {"role": "user", "content": "Context:\n" + docs + question},
    ]
    fitted = await engine.fit(
        {"messages": msgs}, _call("rag", **{"x-ctxgate-budget-tokens": "900"})
    )
    assert fitted.task_class == "retrieval_qa"
    assert fitted.tokens_after <= 900
    assert {d.kind for d in fitted.drops} == {"knowledge"}
    sent = fitted.body["messages"][1]["content"]
    assert sent.startswith("Context:\n") and sent.endswith(question)  # own words untouched
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after


async def test_passthrough_class_forwards_unchanged_when_pinned_overflows(
    settings: Any, redis_client: Any, embedder: Any
) -> None:
    raw = dict(settings.task_classes)
    raw["lenient"] = {"on_overflow": "passthrough"}
    lenient = ContextEngine(
        settings.model_copy(update={"task_classes": raw}),
        redis_client,
        Metrics(),
        DropLog("/dev/null", "none", None),
        embedder,
    )
    body = {"messages": [{"role": "user", "content": "word " * 500}]}
    fitted = await lenient.fit(
        body, _call("pass", **{"x-ctxgate-budget-tokens": "100", "x-ctxgate-task-class": "lenient"})
    )
    assert not fitted.changed and fitted.body is body
    assert lenient.metrics.budget_exceeded.labels("lenient")._value.get() == 1


async def test_a_stale_demonstration_triggers_a_step_on_its_own(engine: ContextEngine) -> None:
    demo = "Here is a demonstration of how to correctly accomplish this task.\n" + "\n".join(
        f"demo step {k}: open src/demo_{k}.py and edit line {k}" for k in range(200)
    )
    msgs: list[dict] = [
        {"role": "system", "content": "You are an autonomous programmer."},
        {"role": "user", "content": demo},
        {"role": "user", "content": "Fix bug 77 in src/calc.py: totals are wrong."},
    ]
    for t in range(6):  # short turns: far under the verbatim high-water mark by themselves
        msgs += [
            {"role": "assistant", "content": f"```\nls src/d{t}\n```"},
            {"role": "user", "content": f"f{t}.py"},
        ]
    headers = {"x-ctxgate-task-class": "coding_agent"}
    first_drop = None
    for end in range(4, len(msgs) + 1, 2):
        fitted = await engine.fit({"messages": msgs[:end]}, _call("stale-demo", **headers))
        if any(d.reason == "stale_instruction" for d in fitted.drops) and first_drop is None:
            first_drop = end
            assert "demonstration" not in json.dumps(fitted.body["messages"])
    # Dropped as soon as it is stale (2 turns, the call that ends at 6): ahead of the step
    # budget's first step (the 5th call, at 12), since the cut repays its re-send at once.
    assert first_drop == 6


async def test_a_sessions_account_pieces_are_those_built_afresh_and_only_new_ones_are_built(
    engine: ContextEngine,
) -> None:
    """The explainer's account of every call of a long session, cut into pieces with the
    session's previous pieces remembered (`AccountPieces`), is byte for byte the account
    built and cut afresh; between steps only the last pieces are built again."""
    from gateway.observability import explain

    msgs, pieces, built = _agent_session(150, size=60), explain.AccountPieces(), []
    original = explain._entries

    def counting(name: str, source: Any) -> list[Any]:
        built.append(len(source))
        return original(name, source)

    explain._entries = counting  # type: ignore[assignment]
    try:
        for end in range(4, len(msgs) + 1, 2):
            fitted = await engine.fit({"messages": msgs[:end]}, _call("pieces"))
            built.clear()
            stored = pieces.of(fitted, fitted.budget_source)
            rebuilt = sum(built)
            assert stored == explain.split_account(
                explain.account_of(fitted, fitted.budget_source))
    finally:
        explain._entries = original  # type: ignore[assignment]
    assert len(fitted.plan or ()) > 4 * explain.PIECE and rebuilt <= 3 * explain.PIECE
