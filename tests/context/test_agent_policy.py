"""The general agent policy: tool-using requests age whatever their class, and sessions of
one agent (tenant, system prompt, tool set) are classed alike however they start."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from gateway.context.agents import MemoryAgentClassStore
from gateway.context.classify import Classifier, agent_fingerprint, is_agent_request
from gateway.context.engine import CallContext, ContextEngine, tool_names
from gateway.context.fold import TURNS_HEAD
from gateway.context.session import MemorySessionStore
from gateway.context.taskclass import agent_policy, load_task_classes
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

from .conftest import without_repay

BROWSER_TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("click", "fill", "scroll")
]
SYSTEM = "You browse the web for the user with the given tools."


def _call(session: str, tenant: str = "t-agents", **headers: str) -> CallContext:
    return CallContext(tenant, "tr", {"x-ctxgate-session-id": session, **headers})


def _browser_session(steps: int, lines: int = 80) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Find the cheapest red kettle and add it to the cart."},
    ]
    for k in range(steps):
        messages.append({"role": "assistant", "content": f"Look at page {k}.", "tool_calls": [
            {"id": f"c{k}", "type": "function",
             "function": {"name": "scroll", "arguments": f'{{"page": "p{k}"}}'}}]})
        tree = "\n".join(f"[{k}{i:03d}] link 'Kettle model {k}-{i} in steel, 1.7 l'"
                         for i in range(lines))
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": tree})
    return messages


def test_tool_requests_no_rule_matches_fall_back_to_the_agent_policy(
    settings: Settings,
) -> None:
    classifier = Classifier(load_task_classes(settings), None)
    defines = {"messages": [{"role": "user", "content": "go"}], "tools": BROWSER_TOOLS}
    history_only = {"messages": _browser_session(1)}
    plain = {"messages": [{"role": "user", "content": "go"}]}
    assert classifier.by_rules(defines) == "agent"
    assert classifier.by_rules(history_only) == "agent"
    assert classifier.by_rules(plain) is None
    assert is_agent_request(history_only) and not is_agent_request(plain)
    # a tool-name rule still wins over the fallback
    bash = [{"type": "function", "function": {"name": "bash"}}]
    assert classifier.by_rules({"messages": plain["messages"], "tools": bash}) == "coding_agent"


def test_a_class_that_does_not_age_takes_the_agent_aging(settings: Settings) -> None:
    classes = load_task_classes(settings)
    policy = agent_policy(classes)
    assert policy is not None and policy.compaction.ages
    chat = classes["plain_chat"]
    assert not chat.compaction.ages
    aged = chat.aging_as(policy)
    assert aged.compaction == policy.compaction and aged.stages.compress == policy.stages.compress
    assert aged.name == "plain_chat" and aged.budget == chat.budget  # its own budget stays
    coding = classes["coding_agent"]
    assert coding.aging_as(policy) is coding  # a class that ages keeps its own settings


def test_fingerprint_is_system_prompt_and_tool_set() -> None:
    short = {"messages": [{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": "hi"}], "tools": BROWSER_TOOLS}
    longer = {"messages": _browser_session(3), "tools": list(reversed(BROWSER_TOOLS))}
    other_tools = {"messages": short["messages"], "tools": BROWSER_TOOLS[:1]}
    assert agent_fingerprint(short) == agent_fingerprint(longer)
    assert agent_fingerprint(short) != agent_fingerprint(other_tools)
    assert agent_fingerprint({"messages": [{"role": "user", "content": "hi"}]}) is None


async def test_memory_store_first_claim_wins() -> None:
    store = MemoryAgentClassStore()
    assert await store.claim("t", "fp", "agent") == "agent"
    assert await store.claim("t", "fp", "data_sql") == "agent"
    assert await store.get("t", "fp") == "agent" and await store.get("u", "fp") is None


async def test_redis_store_first_claim_wins(engine: ContextEngine) -> None:
    store = engine.agents
    assert await store.claim("t-redis", "fp1", "data_sql") == "data_sql"
    assert await store.claim("t-redis", "fp1", "agent") == "data_sql"
    assert await store.get("t-redis", "fp1") == "data_sql"


async def test_two_sessions_of_one_agent_get_one_class(engine: ContextEngine) -> None:
    """The first session starts with a short call (nothing decided), its longer call
    decides by embedding; the agent's second session, short from its first call, gets
    that class instead of `default`."""
    system = {"role": "system", "content": "You are the analytics desk of Acme Retail."}
    short = [system, {"role": "user", "content": "Which customers had the highest revenue?"}]
    first = await engine.fit({"messages": short}, _call("one-a"))
    assert first.task_class == "default"
    grown = [*short, {"role": "assistant", "content": "For which period?"},
             {"role": "user", "content": "Last quarter, grouped by region."}]
    decided = await engine.fit({"messages": grown}, _call("one-a"))
    assert decided.task_class == "data_sql"
    second = await engine.fit({"messages": short}, _call("one-b"))
    assert second.task_class == "data_sql"
    other_tenant = await engine.fit({"messages": short}, _call("one-c", tenant="t-other"))
    assert other_tenant.task_class == "default"


async def test_a_tool_using_session_in_no_named_class_is_compacted(
    engine: ContextEngine,
) -> None:
    messages = _browser_session(12)
    fitted = None
    for end in range(4, len(messages) + 1, 2):  # each call ends with a tool result
        fitted = await engine.fit(
            {"messages": messages[:end], "tools": BROWSER_TOOLS}, _call("browse")
        )
    assert fitted is not None and fitted.task_class == "agent"
    assert fitted.budget > fitted.tokens_before  # no budget pressure: aging alone cuts
    assert fitted.tokens_after < 0.6 * fitted.tokens_before
    aged = [d for d in fitted.drops if d.reason == "aged"]
    assert aged and all(d.kind in ("tool_result", "assistant") for d in aged)
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after
    sent = fitted.body["messages"]
    assert sent[-1] == messages[-1]  # the newest observation goes verbatim


async def test_plain_chat_with_tools_ages_too(engine: ContextEngine) -> None:
    messages = _browser_session(12)
    fitted = None
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit(
            {"messages": messages[:end], "tools": BROWSER_TOOLS},
            _call("chat-tools", **{"x-ctxgate-task-class": "plain_chat"}),
        )
    assert fitted is not None and fitted.task_class == "plain_chat"
    assert any(d.reason == "aged" for d in fitted.drops)


async def test_old_digests_become_placeholders_in_batches(engine: ContextEngine) -> None:
    messages = _browser_session(40, lines=30)
    masked_at: list[int] = []
    fitted = None
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit(
            {"messages": messages[:end], "tools": BROWSER_TOOLS}, _call("long-browse")
        )
        assert sum(d.tokens_saved for d in fitted.drops) == (
            fitted.tokens_before - fitted.tokens_after
        )
        masks = [d for d in fitted.drops if d.action == "mask" and d.reason == "aged"]
        if masks and (not masked_at or len(masks) > masked_at[-1]):
            masked_at.append(len(masks))
    assert fitted is not None
    sent = fitted.body["messages"]
    oldest = sent[3]["content"]
    assert oldest.startswith("[ctxgate: omitted ")
    assert len(sent) == len(messages)
    digested = [i for i, (out, came) in enumerate(zip(sent, messages, strict=True))
                if came["role"] == "tool" and not out["content"].startswith("[ctxgate:")
                and len(out["content"]) < len(came["content"])]
    assert digested and digested[-1] > len(sent) // 2  # recent outputs digested, not masked
    # masked in a few batches, not one more on every step
    assert 1 <= len(masked_at) <= 3


async def test_an_aged_turn_that_made_tool_calls_keeps_its_calls_not_its_prose(
    engine: ContextEngine,
) -> None:
    messages = _browser_session(12)
    plan = ("I am now scrolling to the next page because the kettles listed so far are all "
            "more expensive than the one in ref_k{} and the cheapest red one may be further down.")
    for k, m in enumerate(messages):
        if m["role"] == "assistant":
            m["content"] = plan.format(k)
    fitted = None
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit(
            {"messages": messages[:end], "tools": BROWSER_TOOLS}, _call("browse-prose")
        )
    assert fitted is not None and fitted.task_class == "agent"
    sent = fitted.body["messages"]
    turns = [(out, came) for out, came in zip(sent, messages, strict=True)
             if came["role"] == "assistant"]
    aged = [(out, came) for out, came in turns if out["content"] != came["content"]]
    assert aged, "a step aged some turns"
    for out, came in aged:  # the value each turn named stays, its words go
        assert "scrolling" not in out["content"]
        assert re.search(r"ref_k\d+", came["content"])[0] in out["content"]
    # every turn's tool calls go whole, the latest turn's prose verbatim
    assert all(out["tool_calls"] == came["tool_calls"] for out, came in turns)
    assert turns[-1][0]["content"] == turns[-1][1]["content"]
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after


async def test_a_digest_does_not_list_the_names_of_the_tools_the_request_defines(
    settings: Settings, embedder: Any
) -> None:
    # every rewrite of a step kept: the oldest turn's digest is the one that would name it
    engine = ContextEngine(without_repay(settings), None, Metrics(),
                           DropLog("/dev/null", "none", None), embedder,
                           sessions=MemorySessionStore())
    messages = _browser_session(12)
    for k, m in enumerate(messages):
        if m["role"] == "assistant":
            m["content"] = (f"Next I call open_cart_page, then check ref_k{k} against the "
                            "cheapest red kettle listed so far on the earlier pages.")
    cart = {"type": "function", "function": {"name": "open_cart_page",
                                             "parameters": {"type": "object"}}}
    aged: dict[str, list[str]] = {}
    for label, tools in (("without", BROWSER_TOOLS), ("with", [*BROWSER_TOOLS, cart])):
        fitted = None
        for end in range(4, len(messages) + 1, 2):
            fitted = await engine.fit(
                {"messages": messages[:end], "tools": tools}, _call(f"cart-{label}")
            )
        assert fitted is not None
        aged[label] = [out["content"] for out, came in zip(
            fitted.body["messages"], messages, strict=True)
            if came["role"] == "assistant" and out["content"] != came["content"]]
        assert aged[label] and all("ref_k" in text for text in aged[label])
    # the model reads the tool list on every call: a digest need not name a tool it defines
    # (without it, the oldest digest lists the name; the later ones see it listed above)
    assert "open_cart_page" in aged["without"][0]
    assert not any("open_cart_page" in text for text in aged["with"])


def test_tool_names_read_every_wire_shape() -> None:
    chat = {"type": "function", "function": {"name": "get_iban", "parameters": {}}}
    responses = {"type": "function", "name": "send_money", "parameters": {}}
    messages = {"name": "read_file", "input_schema": {"type": "object"}}
    body = {"tools": [chat, responses, messages, "not a tool", {"type": "web_search"}]}
    assert tool_names(body) == {"get_iban", "send_money", "read_file"}
    assert tool_names({"messages": []}) == frozenset()


def _support_queue(tickets: int) -> list[dict[str, Any]]:
    """One agent working short tickets one after another: each a customer turn naming its
    ids, a lookup, its result and the agent's answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You help customers with their reservations."},
        {"role": "user", "content": "Hello, I need help with my booking."},
    ]
    for k in range(tickets):
        messages.append({"role": "user", "content": (
            f"Hi, I am customer cust_{k:03d}_4411 and I would like to know the current status "
            f"of my reservation RES{k:03d}X before I travel, thanks.")})
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{k}", "type": "function", "function": {
                "name": "get_reservation", "arguments": f'{{"id": "RES{k:03d}X"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": "\n".join(
            f"segment {i}: flight HAT{k:03d}{i} on 2024-05-{10 + i} seat {i}A" for i in range(12))})
        messages.append({"role": "assistant", "content": f"Reservation RES{k:03d}X is confirmed."})
    return messages


def _with_gists(settings: Settings) -> Settings:
    """The shipped settings with old user turns joining the digests' batches as gists in the
    `agent` class from a session's first turn (shipped: from its 60th)."""
    classes = copy.deepcopy(settings.task_classes)
    classes["agent"]["stages"]["compress"]["mask_turns_min_tokens"] = 12
    classes["agent"]["stages"]["compress"]["mask_turns_from_turns"] = 0
    return settings.model_copy(update={"task_classes": classes})


async def _queue_gists(engine: ContextEngine, tickets: int, session: str) -> list[str]:
    """The customer turns the calls of a `tickets`-ticket queue send as gists (any call:
    a long queue's last calls fold old turns into notes of their values, fold.py)."""
    messages = _support_queue(tickets)
    fitted = None
    gists: dict[str, None] = {}
    for end in range(3, len(messages)):
        if messages[end]["role"] == "assistant":
            fitted = await engine.fit(
                {"messages": messages[:end], "tools": BROWSER_TOOLS}, _call(session))
            gists.update(dict.fromkeys(
                str(out["content"]) for out in fitted.body["messages"]
                if out["role"] == "user" and "; mentions:" in str(out["content"])))
    assert fitted is not None and fitted.task_class == "agent"
    for out in fitted.body["messages"]:  # a gist folded into a turns note: its values' line
        if out["role"] == "user" and TURNS_HEAD.match(str(out["content"])):
            gists.update(dict.fromkeys(line for line in str(out["content"]).splitlines()
                                       if "cust_" in line and "would like" not in line))
    return list(gists)


async def test_shipped_gists_wait_for_a_long_session(
    engine: ContextEngine, settings: Settings
) -> None:
    """Shipped: `agent`'s old customer turns become gists once a session has made 60 turns;
    a shorter run (tau-bench's have 2-30 calls) never gets the batch it could not repay."""
    compress = settings.task_classes["agent"]["stages"]["compress"]
    assert (compress["mask_turns_min_tokens"], compress["mask_turns_from_turns"]) == (12, 60)
    assert await _queue_gists(engine, 14, "short-queue") == []  # 28 turns
    gists = await _queue_gists(engine, 45, "long-queue")  # 90 turns
    # 8 with the repay rule (steps.unrepaid: a young session's early steps leave the first
    # turns' small rewrites out), 10+ without it
    assert len(gists) >= 8 and all(re.search(r"RES\d+X|cust_\d{3}_4411", g) for g in gists)


async def test_old_customer_turns_become_gists_with_the_digests(
    settings: Settings, redis_client: aioredis.Redis, embedder: Embedder, drop_log_path: Path
) -> None:
    metrics = Metrics()
    log = DropLog(str(drop_log_path), "hash", metrics)
    engine = ContextEngine(_with_gists(settings), redis_client, metrics, log, embedder)
    try:
        await _old_turns_become_gists(engine)
    finally:
        log.close()


async def _old_turns_become_gists(engine: ContextEngine) -> None:
    messages = _support_queue(30)
    fitted = None
    for end in range(3, len(messages)):
        if messages[end]["role"] != "assistant":
            continue
        fitted = await engine.fit(
            {"messages": messages[:end], "tools": BROWSER_TOOLS}, _call("support-queue")
        )
        assert sum(d.tokens_saved for d in fitted.drops) == (
            fitted.tokens_before - fitted.tokens_after
        )
    assert fitted is not None and fitted.task_class == "agent"
    sent = fitted.body["messages"]
    assert len(sent) == len(messages) - 1
    turns = [(out["content"], came["content"]) for out, came in zip(sent, messages, strict=False)
             if came["role"] == "user"]
    assert turns[0][0] == turns[0][1]  # the task stays
    gists = [(out, came) for out, came in turns[1:] if out != came]
    assert len(gists) >= 10, "old customer turns are masked"
    for out, came in gists:  # as a placeholder that keeps the ids the turn named
        assert out.startswith("[ctxgate: omitted Hi, I am custo") and "; mentions:" in out
        assert re.search(r"cust_\d+_4411", came)[0] in out  # type: ignore[index]
        assert re.search(r"RES\d+X", came)[0] in out  # type: ignore[index]
        assert len(out) < len(came)
    assert turns[-1][0] == turns[-1][1]  # the latest customer turns stay verbatim
    assert turns[-5][0] == turns[-5][1]
