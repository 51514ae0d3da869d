"""What an aged MCP content block keeps once it is masked whole: the short cells of its
payload's records that carry the task's and the latest calls' terms (a form's questions, a
sheet's headers, an e-mail address), in its placeholder, and the payload's first line as
its excerpt — the real engine on the embedded Redis, the shipped configuration."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context.apply import first_line, kept_cells, placeholder
from gateway.context.engine import ContextEngine
from gateway.context.focus import task_focus
from gateway.context.fold import sent_as
from gateway.context.items import Item
from gateway.context.summarize import kept_fields
from tests.context.sessions import drops_add_up, fit_each_call, reading_session

TASK = "Copy the delivery survey questions into the customer feedback form."
TOOLS = [{"type": "function", "function": {"name": "read_page",
                                           "parameters": {"type": "object"}}}]
QUESTION = "How satisfied are you with the delivery speed?"


def block(payload: Any) -> str:
    text = payload if isinstance(payload, str) else orjson.dumps(payload, option=orjson.OPT_INDENT_2
                                                                 ).decode()
    return orjson.dumps({"type": "text", "text": text, "annotations": None}).decode()


def page(k: int) -> str:
    """A page of records: on page 0 one question names the task's terms, the rest none."""
    rows = [{"id": 5000 + 20 * k + i, "question": f"Rate our packaging option {k}-{i} please",
             "status": "open", "owner": f"owner{k}{i}@mcp.com"} for i in range(20)]
    if k == 0:
        rows[7] = {"id": 5007, "question": QUESTION, "status": "open",
                   "owner": "survey.lead@mcp.com"}
    return block(rows)


def item(text: str) -> Item:
    return Item(id="m1", kind="tool_result", unit="u1", message_index=1, segment=0, text=text,
                tokens=len(text) // 4, fixed_tokens=0, turn=1, pinned=False, rewritable=True)


def test_a_masked_block_keeps_the_cells_of_its_records_naming_the_task() -> None:
    focus = task_focus([{"role": "user", "content": TASK}])
    got = kept_fields(page(0), focus)
    assert got[:4] == ["5007", QUESTION, "open", "survey.lead@mcp.com"]  # naming `delivery`
    assert not any("packaging" in c for c in got)  # the others name no focus term
    # within its bound; nothing of a text that is not a content block, or with no focus
    assert sum(len(c) + 2 for c in got) <= 160
    assert kept_fields(orjson.loads(page(0))["text"], focus) == []
    assert kept_fields(page(0), frozenset()) == []
    # a cell whose values the model reads anyway is left out
    assert "open" not in kept_fields(page(0), focus, frozenset({"open"}))
    # a text payload: its lines are its records
    text = block("Subject: Delivery survey\nQ1: " + QUESTION + "\nQ2: Rate our packaging")
    assert kept_fields(text, focus) == ["Subject: Delivery survey", "Delivery survey",
                                        f"Q1: {QUESTION}", QUESTION]


def test_a_blocks_placeholder_names_its_payload_and_keeps_its_cells() -> None:
    masked = item(page(0))
    assert first_line(masked) == '"id": 5000,'  # the payload's first named line
    assert placeholder(masked) == '[ctxgate: omitted "id": 5000,]'
    assert first_line(item("plain\nline")) == "plain"  # any other text as before
    focus = task_focus([{"role": "user", "content": TASK}])
    text = kept_cells(masked, focus)
    assert text is not None and text.startswith('[ctxgate: omitted "id": 5000,; mentions: ')
    assert QUESTION in text and text.endswith("]")
    # a fold note names what the placeholder kept
    assert QUESTION in sent_as(text) and sent_as(text).startswith("omitted; mentions: ")
    assert kept_cells(item("[1, 2]"), focus) is None


async def test_an_aged_block_masked_by_the_engine_keeps_its_task_cells(
    engine: ContextEngine,
) -> None:
    messages = reading_session(TASK, [page(k) for k in range(36)], "read_page")
    fits = await fit_each_call(engine, messages, TOOLS, "t-mask", "mask-blocks")
    last = fits[-1]
    sent = last.body["messages"]
    first = next(m["content"] for m in sent if m.get("tool_call_id") == "call_000")
    assert first.startswith('[ctxgate: omitted "id": 5000,; mentions: ')  # masked whole
    assert QUESTION in first and "survey.lead@mcp.com" in first
    assert "packaging" not in first
    assert all(drops_add_up(fit) for fit in fits)  # the drop log still adds up
