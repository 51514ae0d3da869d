"""cluster.arrival_lines: runs of a new output's lines that repeat an item the model still reads
verbatim go out as one-line markers from the output's first call on. Nothing is lost (the
lines are in the same request), nothing sent before changes, and the output still ages into
a digest of its original text."""

from __future__ import annotations

import uuid
from typing import Any

from gateway.context.apply import pointer
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item
from gateway.context.lines import LineIndex, index_lines, without_repeated_lines
from gateway.context.session import MemorySessionStore
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.sessions import drops_add_up, fit_agreed

from .conftest import without_credit

TOOLS = [{"type": "function",
          "function": {"name": "browse", "parameters": {"type": "object"}}}]
MENU = [f"[{100 + k}] link 'Menu entry number {k} of the site'" for k in range(30)]


def _page(title: str, body: list[str]) -> str:
    return "\n".join([f"Tab 0 (current): {title}", *MENU, "", *body])


def _item(text: str, item_id: str = "a") -> Item:
    return Item(id=item_id, kind="tool_result", unit="u", message_index=3, segment=0,
                text=text, tokens=len(text) // 4, fixed_tokens=0, turn=-1, pinned=False,
                rewritable=True)


def test_runs_of_repeated_lines_become_markers_and_the_rest_stays() -> None:
    first = _item(_page("Orders", ["row 1: order 4411 shipped", "row 2: order 4412 open"]))
    index: LineIndex = {}
    index_lines(index, first)
    new = _page("Order 4412", ["status: open since 2024-03-02", "total: 118.40 USD"])
    cut = without_repeated_lines(new, index, 120)
    assert cut is not None
    text, rep = cut
    assert rep is first
    assert "[ctxgate: 30 lines as in an earlier tool result: Tab 0 (current): Orders]" in text
    assert not any(line in text for line in MENU)  # the menu went, once
    for kept in ("Tab 0 (current): Order 4412", "status: open since 2024-03-02",
                 "total: 118.40 USD"):
        assert kept in text  # what is new stays as sent
    assert len(text) < len(new) // 2


def test_short_runs_stay_as_sent() -> None:
    index: LineIndex = {}
    index_lines(index, _item("alpha line one\nbeta line two\ngamma"))
    assert without_repeated_lines("alpha line one\nbeta line two\nnew", index, 120) is None
    assert without_repeated_lines("nothing\nrepeats here", index, 1) is None


def _engine(settings: Settings, embedder: Any, cache: bool) -> ContextEngine:
    return ContextEngine(settings, None, Metrics(), DropLog("/dev/null", "none", None), embedder,
                         sessions=MemorySessionStore(), prefix_cache_size=1024 if cache else 0)


def _session(pages: list[str]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You browse a shop's admin pages with the browse tool."},
        {"role": "user", "content": "Which order placed in March is still open?"},
    ]
    for k, page in enumerate(pages):
        messages.append({"role": "assistant", "content": f"Step {k}: looking further.",
                         "tool_calls": [{"id": f"c{k}", "type": "function", "function": {
                             "name": "browse", "arguments": f'{{"page": {k}}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": page})
    return messages


def _pages(n: int) -> list[str]:
    return [_page(f"Orders page {k}", [f"row {k}.{i}: order {4400 + 10 * k + i} state {i % 3}"
                                       for i in range(8)]) for k in range(n)]


async def test_a_page_repeating_the_menu_is_cut_on_arrival_and_kept_so(
    settings: Settings, embedder: Any
) -> None:
    """Every call extends the previous one, the drop log adds up, the cache changes nothing,
    and every value of every page is still in the request."""
    pages = _pages(4)
    messages = _session(pages)
    session = uuid.uuid4().hex
    settings = without_credit(settings)  # 4 calls: no step, the share's first is on the 5th
    cached, plain = _engine(settings, embedder, True), _engine(settings, embedder, False)
    previous: list[Any] | None = None
    for end in range(4, len(messages) + 1, 2):
        body = {"messages": messages[:end], "tools": TOOLS}
        call = CallContext("t-lines", uuid.uuid4().hex, {"x-ctxgate-session-id": session})
        fitted = await fit_agreed(cached, plain, body, call)  # the full path agrees
        forwarded = fitted.body["messages"]
        if previous is not None:
            assert forwarded[: len(previous)] == previous
        assert drops_add_up(fitted)
        previous = list(forwarded)
    tools = [m["content"] for m in previous or [] if m["role"] == "tool"]
    assert tools[0] == pages[0]
    for page, sent in zip(pages[1:], tools[1:], strict=True):
        assert sent.startswith("Tab 0 (current): Orders page ")
        assert "[ctxgate: 30 lines as in an earlier tool result: Tab 0 (current): Orders" in sent
        assert len(sent) < len(page) * 0.6
    text = "\n".join(str(m["content"]) for m in previous or [])
    for page in pages:
        for line in page.splitlines():
            assert line in text  # in its own page or in the one the marker names
    assert {d.reason for d in fitted.drops} == {"repeated_lines"}
    assert cached.prefixes.reused >= 2  # cut on the cache's path too, not only the full one


async def test_a_cut_page_still_ages_into_a_digest_of_its_original(
    settings: Settings, embedder: Any
) -> None:
    pages = _pages(12)
    messages = _session(pages)
    engine = _engine(settings, embedder, True)
    session = uuid.uuid4().hex
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end], "tools": TOOLS}, CallContext(
            "t-lines", uuid.uuid4().hex, {"x-ctxgate-session-id": session}))
    by_index = {d.message_index: d for d in fitted.drops}
    aged = [d for i, d in by_index.items() if d.reason == "aged" and i > 4]
    assert aged, "no cut page aged"
    tools = [m["content"] for m in fitted.body["messages"] if m["role"] == "tool"]
    assert all("lines as in an earlier" not in t for t in tools[:3])  # digests replaced them
    assert tools[-1].startswith("Tab 0 (current): Orders page 11")


def test_a_pointer_quotes_a_short_start_of_its_copy_and_a_marker_a_longer_one() -> None:
    rep = _item(_page("Orders placed in March 2024", ["row 1"]))
    assert pointer(rep) == "[ctxgate: repeats an earlier tool result: Tab 0 (current):…]"
    index: LineIndex = {}
    index_lines(index, rep)
    cut = without_repeated_lines(_page("Order 1", ["new row"]), index, 120)
    assert cut is not None
    assert "[ctxgate: 30 lines as in an earlier tool result: Tab 0 (current): Orders placed i…]" \
        in cut[0]
