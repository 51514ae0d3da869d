"""A call whose body the gateway proved to continue the session's last one
(`prefix.Lineage`, from `gateway/api/bodies.py`) skips the engine's byte check of its old
messages, and a call sent as is reads its fidelity haystack and class rules from its new
messages only; a call without that proof (the replay, a body the gateway did not keep) is
still checked. Either way the engine gives what it gives without any proof (issue 7)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import xxhash

from gateway.context import prefix as prefix_module
from gateway.context.classify import Classifier, HistoryRules
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.prefix import Lineage, Prefix
from gateway.context.taskclass import load_task_classes
from tests.sessions import synthetic_session

from .test_prefix_cache import _engine, _growing, _seen


def _peek(engine: ContextEngine, session: str) -> Prefix:
    prefix = engine.prefixes.take("t1", session)
    assert prefix is not None
    engine.prefixes.put("t1", session, prefix)
    return prefix


def _hashed(prefix: Prefix, messages: list[dict[str, Any]]) -> bool:
    """Whether the prefix's digest is the XXH3 of `messages`' segments (the byte check's)."""
    h, lo = xxhash.xxh3_128(seed=prefix_module._SEED), 0
    for hi in prefix.bounds:
        h.update(orjson.dumps(messages[lo:hi]))
        lo = hi
    return lo == len(messages) and h.digest() == prefix.digest


def _context(n: int, session: str, lineage: Lineage | None = None) -> CallContext:
    return CallContext("t1", f"{session}{n}", {"x-ctxgate-session-id": session}, lineage)


async def test_proven_calls_skip_the_byte_check_and_fit_as_checked_ones(
    settings: Any, embedder: Any
) -> None:
    """Each call naming the body before it: extended without the byte check, yet every
    call fits as on an engine given no proof, and the digest kept stays the XXH3 of the
    messages' segments (fails when the proven path hashes other bytes than the checked
    one, or is never taken)."""
    _, msgs, _ = synthetic_session(1, turns=40)
    proven, plain = _engine(settings, embedder, True), _engine(settings, embedder, True)
    calls, count = _growing(msgs), 0
    for n, (body, _) in enumerate(calls):
        lineage = Lineage(n + 1, n or None, count)
        assert _seen(await proven.fit(body, _context(n, "p", lineage))) == _seen(
            await plain.fit(body, _context(n, "p")))
        count = len(body["messages"])
        assert _hashed(_peek(proven, "p"), body["messages"])
    assert _peek(proven, "p").proven > len(calls) // 2
    assert _peek(plain, "p").proven == 0


async def test_a_body_the_gateway_has_not_proven_is_still_byte_checked(
    settings: Any, embedder: Any
) -> None:
    """A body whose old message was edited: with no lineage, or one naming another body or
    another count, the byte check finds the edit (the prefix is not extended: the digest
    kept is the edited messages'), and the call fits as on an engine given no proof; only
    a lineage naming the prefix's very body is trusted (fails when any flag skips it)."""
    _, msgs, _ = synthetic_session(2, turns=20)
    calls = _growing(msgs)
    first, later = calls[-3][0], calls[-1][0]
    edited = copy.deepcopy(later)
    edited["messages"][2]["content"] = "edited by the client"
    count = len(first["messages"])
    for lineage in (None, Lineage(2), Lineage(2, 999, count), Lineage(2, 1, count - 1)):
        engine, plain = _engine(settings, embedder, True), _engine(settings, embedder, True)
        await engine.fit(first, _context(0, "e", Lineage(1)))
        await plain.fit(first, _context(0, "e"))
        assert _seen(await engine.fit(edited, _context(1, "e", lineage))) == _seen(
            await plain.fit(edited, _context(1, "e")))
        prefix = _peek(engine, "e")
        assert prefix.proven == 0 and _hashed(prefix, edited["messages"])
    trusting = _engine(settings, embedder, True)
    await trusting.fit(first, _context(0, "e", Lineage(1)))
    await trusting.fit(edited, _context(1, "e", Lineage(2, 1, count)))
    assert _peek(trusting, "e").proven == 1  # what the gateway's proof stands for
    assert not _hashed(_peek(trusting, "e"), edited["messages"])


async def test_bypassed_calls_proven_read_on_and_observe_as_walked(
    settings: Any, embedder: Any
) -> None:
    """Calls sent as is, each naming the body before it: one haystack and one read of the
    class rules kept across the calls, read on from where the last call stopped, and the
    same signals and fidelity record as an engine walking every message (no proof); a call
    whose body is not proven to continue the last one starts afresh (fails when the kept
    haystack is used for it)."""
    _, msgs, _ = synthetic_session(3, turns=40)
    proven, plain = _engine(settings, embedder, True), _engine(settings, embedder, True)
    calls, count, kept = _growing(msgs), 0, None
    for n, (body, _) in enumerate(calls):
        lineage = Lineage(n + 1, n or None, count)
        got = await proven.observe_sent(body, _context(n, "b", lineage), "bypass")
        assert got == await plain.observe_sent(body, _context(n, "b"), "bypass")
        assert proven.sent_seen is not None
        seen = proven.sent_seen[("t1", "b")]
        assert kept is None or seen.haystack is kept.haystack
        assert seen.rules.count == len(body["messages"])  # no class header: rules read
        kept, count = seen, len(body["messages"])
        mine = await proven.sessions.load("t1", "b")
        theirs = await plain.sessions.load("t1", "b")
        assert (mine.fidelity, mine.indexed_runs) == (theirs.fidelity, theirs.indexed_runs)
    assert kept is not None and any(t is not None for t in kept.haystack.texts)
    body = calls[-1][0]
    await proven.observe_sent(body, _context(99, "b", Lineage(500, 7, count)), "bypass")
    assert proven.sent_seen[("t1", "b")].haystack is not kept.haystack


def test_class_rules_read_on_from_a_kept_read_name_what_reading_all_names(
    settings: Any,
) -> None:
    """`Classifier.by_rules` with a `HistoryRules` moved on call by call names the class
    that reading every message names, as system and developer texts, tool calls and tool
    results arrive late in a session (fails when a kept read misses a later message)."""
    classifier = Classifier(load_task_classes(settings), None)
    tools = sorted({name for cls in load_task_classes(settings).values()
                    for name in cls.match.tools})
    added: list[dict[str, Any]] = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "developer", "content": "You are a careful SQL analyst."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
        {"role": "system", "content": "You fix bugs in a repository."},
    ]
    if tools:
        added.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": "b", "type": "function", "function": {"name": tools[0], "arguments": "{}"}}]})
    for model in ("gpt-4o-mini", "claude-sonnet"):
        seen, names = HistoryRules(), set()
        for n in range(1, len(added) + 1):
            body = {"model": model, "messages": added[:n]}
            named = classifier.by_rules(body, seen)
            assert named == classifier.by_rules(body)
            names.add(named)
        assert len(names) > 1  # the rules' answer changed as the session went on


async def test_account_roles_read_on_for_proven_calls_are_the_account_built_afresh(
    settings: Any, embedder: Any
) -> None:
    """The explainer's account pieces of calls whose bodies name the body before them take
    the roles of the new messages only (`AccountPieces`), and are byte for byte the account
    built and cut afresh; a body whose old message changed role, with no proof or with a
    lineage naming another body, has its roles read whole (fails when the kept roles are
    used for it)."""
    from gateway.observability import explain

    _, msgs, _ = synthetic_session(4, turns=30)
    engine, pieces = _engine(settings, embedder, True), explain.AccountPieces()
    calls, count = _growing(msgs), 0
    for n, (body, _) in enumerate(calls):
        fitted = await engine.fit(body, _context(n, "r", Lineage(n + 1, n or None, count)))
        assert pieces.of(fitted, fitted.budget_source) == explain.split_account(
            explain.account_of(fitted, fitted.budget_source))
        count = len(body["messages"])
    assert pieces._roles[("t1", "r")][0] == len(calls)
    edited = copy.deepcopy(calls[-1][0])
    edited["messages"][1]["role"] = "developer"
    for k, lineage in enumerate((None, Lineage(900, 5, count))):
        fitted = await engine.fit(edited, _context(100 + k, "r", lineage))
        assert pieces.of(fitted, fitted.budget_source) == explain.split_account(
            explain.account_of(fitted, fitted.budget_source))
