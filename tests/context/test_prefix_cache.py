"""The per-session prefix cache changes the cost of a call, never its output: an engine with
the cache and one without fit the same sessions call by call to the same bytes, tokens and
drop events, through steps, lapsing pins, edits of the history, budget and class changes.
Each test also counts the calls the cached engine rendered from the cache, so none passes
with a cache that is never used."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.context.engine import CallContext, ContextEngine, FittedCall, InjectedBlock
from gateway.context.replay import load_calls
from gateway.context.session import MemorySessionStore
from gateway.errors import ContextBudgetExceeded
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from tests.sessions import synthetic_session

from .conftest import CORPUS
from .test_engine import _agent_session


def _engine(settings: Any, embedder: Any, cache: bool, redis: Any = None) -> ContextEngine:
    return ContextEngine(
        settings,
        redis,
        Metrics(),
        DropLog("/dev/null", "none", None),
        embedder,
        sessions=None if redis is not None else MemorySessionStore(),
        prefix_cache_size=1024 if cache else 0,
    )


def _seen(fitted: FittedCall) -> tuple[Any, ...]:
    return (
        orjson.dumps(fitted.body),
        fitted.changed,
        fitted.task_class,
        fitted.tokens_before,
        fitted.tokens_after,
        fitted.drops,
        fitted.prefix_stable,
        fitted.budget,
        fitted.signals,  # read from the haystack the cache keeps, or afresh
    )


async def _same(
    cached: ContextEngine,
    plain: ContextEngine,
    calls: list[tuple[dict[str, Any], dict[str, str]]],
    session: str,
) -> int:
    """Fit `calls` with both engines, comparing each; returns how many the cache served."""
    before = cached.prefixes.reused
    for n, (body, headers) in enumerate(calls):
        call = CallContext("t1", f"tr{n}", {"x-ctxgate-session-id": session, **headers})
        outcomes = []
        for engine in (cached, plain):
            try:
                outcomes.append(_seen(await engine.fit(body, call)))
            except ContextBudgetExceeded as exc:
                outcomes.append(("refused", exc.needed, exc.allowed))
        assert outcomes[0] == outcomes[1], f"call {n} differs"
    assert plain.prefixes.reused == 0
    return cached.prefixes.reused - before


def _growing(msgs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, str]]]:
    return [
        ({"messages": msgs[:i]}, {})
        for i, m in enumerate(msgs)
        if m["role"] == "assistant" and i > 0
    ]


async def test_long_synthetic_session_is_identical_with_and_without_the_cache(
    settings: Any, embedder: Any
) -> None:
    _, msgs, _ = synthetic_session(1, turns=60)
    cached, plain = _engine(settings, embedder, True), _engine(settings, embedder, False)
    calls = _growing(msgs)
    reused = await _same(cached, plain, calls, "syn")
    assert reused >= len(calls) // 2  # most calls between steps reused the previous call's work


ASSISTANT = CORPUS.parent / "agentdojo" / "sessions.jsonl"


@pytest.mark.skipif(not ASSISTANT.exists(), reason="../shared corpus not present")
async def test_young_sessions_steps_on_credit_are_identical_with_and_without_the_cache(
    settings: Any, embedder: Any
) -> None:
    # The assistant corpus's sessions of 3 to 8 calls, where a young session's credit
    # (`steps.on_credit`) steps ahead of the share: both paths decide alike.
    cached, plain = _engine(settings, embedder, True), _engine(settings, embedder, False)
    sessions = [orjson.loads(line) for line in ASSISTANT.read_bytes().splitlines()[-40:]]
    reused = 0
    for k, session in enumerate(sessions):
        calls = [({**body, "tools": session["tools"]}, headers)
                 for body, headers in _growing(session["messages"])]
        reused += await _same(cached, plain, calls, f"dojo{k}")
    assert reused > 0


@pytest.mark.skipif(not CORPUS.exists(), reason="../shared corpus not present")
async def test_corpus_sessions_are_identical_with_and_without_the_cache(
    settings: Any, embedder: Any
) -> None:
    cached, plain = _engine(settings, embedder, True), _engine(settings, embedder, False)
    reused = 0
    for k, path in enumerate(sorted(CORPUS.glob("*.traj"))[:6]):
        calls = [(body, {}) for body in load_calls(path)]
        reused += await _same(cached, plain, calls, f"traj{k}")
    assert reused > 0


async def test_edits_budgets_retries_and_new_requests_are_identical(
    settings: Any, embedder: Any
) -> None:
    msgs = _agent_session(24)
    calls = _growing(msgs)[:10]
    # A retry (same messages), a budget header that shrinks then goes, a new user request
    # (the task's pin lapses), an edited old message, a shorter history, another model.
    calls.append(calls[-1])
    calls.append(({"messages": msgs[:24]}, {"x-ctxgate-budget-tokens": "2500"}))
    calls.append(({"messages": msgs[:26]}, {}))
    asked = [*msgs[:26], {"role": "user", "content": "Also fix bug 78 in src/total.py."}]
    calls.append(({"messages": asked}, {}))
    calls.append(({"messages": [*asked, *msgs[26:30]]}, {}))
    edited = [dict(m) for m in asked]
    edited[5] = {**edited[5], "content": edited[5]["content"] + "\nedited"}
    calls.append(({"messages": [*edited, *msgs[26:30]]}, {}))
    calls.append(({"messages": [*edited, *msgs[26:32]]}, {}))
    calls.append(({"messages": msgs[:20]}, {}))
    calls.append(({"messages": msgs[:22], "model": "gpt-4"}, {}))
    calls.append(({"messages": msgs[:24], "model": "gpt-4"}, {}))
    calls.append(({"messages": msgs[:26]}, {"x-ctxgate-task-class": "log_investigation"}))
    calls.append(({"messages": msgs[:28]}, {"x-ctxgate-task-class": "log_investigation"}))
    cached, plain = _engine(settings, embedder, True), _engine(settings, embedder, False)
    assert await _same(cached, plain, calls, "edits") >= 3


async def test_a_session_whose_tools_change_is_identical_with_and_without_the_cache(
    settings: Any, embedder: Any
) -> None:
    # The tools' names are values the model sees (a digest does not list them): a call
    # defining other tools than its session's previous call does not extend its prefix.
    def tool(name: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "parameters": {}}}

    calls = _growing(_agent_session(24))
    calls = [({**body, "tools": [tool("bash")] if n < 10 else [tool("bash"), tool("compute")]},
              headers) for n, (body, headers) in enumerate(calls)]
    cached, plain = _engine(settings, embedder, True), _engine(settings, embedder, False)
    assert await _same(cached, plain, calls, "tools") >= 3


async def test_playbook_block_is_identical_with_and_without_the_cache(
    settings: Any, embedder: Any
) -> None:
    class Source:
        async def block_for_session(
            self, tenant: str, task_class: str, session_id: str, query: str, cap_tokens: int
        ) -> InjectedBlock:
            return InjectedBlock("<playbook>\n[a-00001] test first\n</playbook>", ["a-00001"], 12)

        def pinned_block(self, pin: bytes) -> InjectedBlock | None:
            return None

    cached, plain = _engine(settings, embedder, True), _engine(settings, embedder, False)
    cached.playbook = plain.playbook = Source()
    assert await _same(cached, plain, _growing(_agent_session(20)), "pb") >= 3


async def test_a_replica_without_the_cache_continues_identically(
    settings: Any, embedder: Any, redis_client: Any
) -> None:
    # Redis is the source of truth: a cached replica and one without any cache take turns
    # on one session and each renders what a single uncached engine renders.
    msgs = _agent_session(20)
    cached = _engine(settings, embedder, True, redis_client)
    other = _engine(settings, embedder, False, redis_client)
    alone = _engine(settings, embedder, False)
    for n, (body, _) in enumerate(_growing(msgs)):
        replica = other if n % 4 == 3 else cached
        call = CallContext("t1", f"tr{n}", {"x-ctxgate-session-id": "rep"})
        assert _seen(await replica.fit(body, call)) == _seen(await alone.fit(body, call))
    assert cached.prefixes.reused >= 3 and other.prefixes.reused == 0
