"""A plain tool text listing records by their links (a web search's hits: `Title:` /
`Link:` / `Snippet:` lines) keeps those links whole in its digest (`summarize._with_links`):
the agent opens or cites one of them calls later, and the value list splits a link at `:`
(`https://arxiv.org/abs/2308.12950` is `https arxiv.org/abs/2308.12950`)."""

from __future__ import annotations

from typing import Any

from gateway.context.engine import ContextEngine
from gateway.context.summarize import summarize
from tests.context.sessions import drops_add_up, fit_each_call

SNIPPET = "A study of how models learn from code and text, with benchmarks and ablations. "


def hits(topic: str, n: int = 10) -> str:
    """A web search's result text, as Toolathlon's search tool returns it."""
    return "\n\n".join(
        f"Title: {topic} paper {k}: results and analysis\nLink: https://arxiv.org/abs/2308.{k:05d}\n"
        f"Snippet: {SNIPPET * 3}\nSitelinks: No sitelinks"
        for k in range(n))


LINKS = [f"https://arxiv.org/abs/2308.{k:05d}" for k in range(10)]


def test_a_search_results_digest_keeps_every_hits_link_whole() -> None:
    text = hits("Code Llama")
    out = summarize(text, "tool_result", 3)
    assert len(out) < len(text) / 2
    assert all(link in out for link in LINKS)


def test_a_text_with_fewer_link_lines_is_digested_as_before() -> None:
    # a browser page names its own address on one line (`URL: …`); links in running text
    page = "\n".join(["Tab 0 (current): Orders", "  URL: http://shop.example.com/admin/orders",
                      "  URL: http://shop.example.com/admin/orders?page=2"]
                     + [f"[{k}] row 'Order {k} placed, see http://shop.example.com/o/{k}' "
                        + SNIPPET for k in range(40)])
    out = summarize(page, "tool_result", 3)
    assert "[records:" not in out
    # the same search text as a user turn or an assistant turn: not a tool's listing
    assert "[records:" not in summarize(hits("Code Llama"), "user", 3)


async def test_an_agent_opens_a_link_from_a_search_read_long_before(
    engine: ContextEngine,
) -> None:
    tools = [{"type": "function", "function": {"name": "search",
                                                "parameters": {"type": "object"}}}]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant with tools."},
        {"role": "user", "content": "Find the Code Llama paper and add its BibTeX entry."},
    ]
    for k in range(14):
        call = f"call_{k:03d}"
        messages.append({"role": "assistant", "content": "Next.", "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": "search", "arguments": f'{{"query": "topic {k}"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": call,
                         "content": hits("Code Llama" if k == 0 else f"Topic {k}")})
    messages.append({"role": "assistant", "content": "Opening it."})
    fits = await fit_each_call(engine, messages, tools, "t-links", "links")
    last = fits[-1].body["messages"]
    out = str(next(m["content"] for m in last if m.get("tool_call_id") == "call_000"))
    assert len(out) < len(hits("Code Llama")) / 2  # digested
    assert all(link in out for link in LINKS)  # every hit's link, whole
    assert all(drops_add_up(fit) for fit in fits)  # the drop log still adds up
