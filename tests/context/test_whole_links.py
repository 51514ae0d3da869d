"""A digest's value list names a link or an e-mail address whole, as written
(`summarize._whole_links`): the list splits a link at `:` and drops its trailing `/`, and
splits an address at `@`, so `https://…/lineups/` and `laura.hall@mcp.com` were listed as
`www…/lineups` and `laura.hall`, which the agent's next call cannot copy."""

from __future__ import annotations

from gateway.context.engine import ContextEngine
from gateway.context.summarize import summarize
from tests.context.sessions import drops_add_up, fit_each_call, reading_session

BASE = "https://www.example-league.org/match/2037765--city-vs-inter"


def hits(n: int = 10) -> str:
    """A web search's hits: one `Title:` / `Link:` / `Snippet:` record each, a sitelinks line
    carrying more links in a printed list."""
    rows = []
    for k in range(n):
        rows.append(f"Title: Result {k} | Stats | Final {2015 + k}\nLink: https://site{k}.example.com/"
                    f"match/{1000 + k}/stats/\nSnippet: {'Match report and key stats. ' * 4}\n"
                    f"Sitelinks: [{{'title': 'Line-ups', 'link': '{BASE}/lineups{k}/'}}, "
                    f"{{'title': 'Events', 'link': '{BASE}/events{k}/'}}]\n")
    return "\n".join(rows)


def contacts(n: int = 30) -> str:
    """A plain listing of people and their addresses."""
    return "\n".join(f"{k:02d}. Person {k} <person.number{k}@corp-mail.example> desk {400 + k}"
                     for k in range(n))


def test_a_digest_lists_links_and_addresses_whole() -> None:
    out = summarize(hits(), "tool_result", 3)
    listed = out.splitlines()[-1]
    assert listed.startswith("[omitted text mentions:")
    assert f" {BASE}/lineups8/ " in listed  # whole: scheme and trailing `/`
    assert "www.example-league.org/match" not in listed.replace(f"{BASE}/", "")
    out = summarize(contacts(), "tool_result", 3)
    listed = out.splitlines()[-1]
    assert " person.number28@corp-mail.example " in listed


def test_values_that_are_not_links_are_listed_as_before() -> None:
    text = "\n".join(f"row {k}: wrote /srv/data/run_{k:03d}/out_{k:03d}.csv status ok_{k}"
                     for k in range(40))
    out = summarize(text, "tool_result", 3)
    listed = out.splitlines()[-1]
    assert " /srv/data/run_038/out_038.csv " in listed  # an absolute path, as written
    assert "://" not in listed and "@" not in listed


async def test_an_agent_opens_a_link_it_saw_long_before(engine: ContextEngine) -> None:
    tools = [{"type": "function", "function": {"name": "search",
                                                "parameters": {"type": "object"}}}]
    results = [hits()] + [hits().replace("2037765", f"{k}77") for k in range(1, 14)]
    messages = reading_session("Find the line-ups of the final and report them.", results,
                               "search", say="Next.", closing="Opening it.")
    fits = await fit_each_call(engine, messages, tools, "t-links", "links")
    last = fits[-1].body["messages"]
    out = str(next(m["content"] for m in last if m.get("tool_call_id") == "call_000"))
    assert len(out) < len(hits())  # digested
    assert f"{BASE}/lineups8/" in out  # the link named whole, as the agent would copy it
    assert all(drops_add_up(fit) for fit in fits)  # the drop log still adds up
