"""What an aged answer of the agent's masked as a plain placeholder keeps: the files it cites
by line (`core/bun.lock:41`), whole, as a later turn re-types them (OpenCode's `AGENTS.md:76`
in a sub-agent's brief 80 messages on; `compress._masked_citations`). An answer citing none
is masked as before — the real engine on the embedded Redis, the shipped configuration."""

from __future__ import annotations

import re
from typing import Any

from gateway.context.engine import ContextEngine
from gateway.context.summarize import cited_lines
from tests.context.sessions import drops_add_up, fit_each_call, order_page, task_queue

TOOLS = [{"type": "function", "function": {"name": "read_page",
                                           "parameters": {"type": "object"}}}]
CITING = ("Done - the release now pulls the `elysia-protobuf` parser from the fork's `master`"
          " branch on `github:victoryforphil/elysia-protobuf#master`, resolved at `477b368`"
          " by `bun_install_v1.2.5` for `core_service_v2` and `proto_tools_v3`.\n\n"
          "- Updated `core/package.json:13` to track the fork.\n"
          "- Refreshed `core/bun.lock:9` to keep the dependency spec on the branch.\n"
          "- Lock resolution points to the latest commit at install time in "
          "`core/bun.lock:41`, which is expected when tracking a branch.\n"
          "- Updated `AGENTS.md:76` to describe this workflow for the team.\n\n"
          "Note: with branch tracking, installs are less deterministic over time than "
          "commit pinning; a warning line in the readme would tell teammates the tradeoff.")
PLAIN = re.sub(r"(?<=\w):\d+", "", CITING)  # the same answer naming the files only


def test_a_turn_cites_files_by_line() -> None:
    assert cited_lines(CITING) == ["core/package.json:13", "core/bun.lock:9",
                                   "core/bun.lock:41", "AGENTS.md:76"]
    assert cited_lines(CITING, frozenset({"AGENTS.md:76"}))[-1] == "core/bun.lock:41"
    assert cited_lines(PLAIN) == []
    # a traceback's long path is no citation a turn re-types
    deep = "usr/local/lib/python3.11/site-packages/autogen_magentic_one/agents/orchestrator.py:216"
    assert cited_lines(f"File {deep} failed") == []


def queue(closing: str) -> list[dict[str, Any]]:
    return task_queue("You work the ticket queue with the tools.", [
        ("Ticket T-100: pin the parser to the fork.", 3, closing),
        ("Ticket T-200: audit the orders.", 40, "Ticket T-200 is audited.")], order_page)


async def masked_answer(engine: ContextEngine, closing: str, session: str) -> list[str]:
    messages = queue(closing)
    fits = await fit_each_call(engine, messages, TOOLS, "t-cite", session)
    assert all(drops_add_up(fit) for fit in fits)
    return [next(m["content"] for m in fit.body["messages"][:10]
                 if m.get("role") == "assistant" and not m.get("tool_calls"))
            for fit in fits if len(fit.body["messages"]) > 10]


async def test_a_masked_answer_keeps_its_citations(engine: ContextEngine) -> None:
    sent = await masked_answer(engine, CITING, "cites")
    masked = [text for text in sent if text.startswith("[ctxgate: omitted")]
    assert masked, "the answer aged to its mask"
    assert masked[-1] == ("[ctxgate: omitted Done - the relea…; cites: core/package.json:13 "
                          "core/bun.lock:9 core/bun.lock:41 AGENTS.md:76]")


async def test_an_answer_citing_nothing_is_masked_as_before(engine: ContextEngine) -> None:
    sent = await masked_answer(engine, PLAIN, "plain")
    masked = [text for text in sent if text.startswith("[ctxgate: omitted")]
    assert masked and masked[-1] == "[ctxgate: omitted Done - the relea…]"
