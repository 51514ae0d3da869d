"""A document the task names, read through an MCP tool and transcribed into another tool a
piece per call (a biography into a web page, a form's template into a shop), stays whole
while the agent copies from it (`steps.source_block`, `compress.source_block_tokens`): its
digest, made at the step after it was read and before the copying began, kept a few of its
lines and lost the rest (bench/README.md, "Toolathlon recall, part seven") — the real engine
on the embedded Redis, the shipped configuration."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context.engine import ContextEngine
from gateway.context.items import parse_request
from gateway.context.tokens import TokenCounter
from tests.context.sessions import drops_add_up, fit_each_call

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("get_document_text", "get_page_blocks", "append_blocks")]
PLACES = ["Mackay", "Canberra", "Albion", "Guildford", "Hobart", "Noosa", "Montville",
          "Buderim", "Adelaide", "Kew", "Camden", "Dromana"]
SECTIONS = [
    [f"{place} Art Society workshop {k}: Monday {k + 3}th - Friday {k + 7}th of month {k + 1}",
     f"Contact {place} office: bookings.{place.lower()}@artsociety.example.org",
     f"Telephone for {place}: 04{k:02d} 887 9{k:02d}, seats limited to {k + 8} painters"]
    for k, place in enumerate(PLACES)]
DOC = orjson.dumps({"type": "text", "text": "About the artist\n" + "\n\n".join(
    "\n".join(lines) for lines in SECTIONS), "annotations": None}).decode()


def page_blocks(k: int) -> str:
    """A page's blocks as JSON (the notes app's answer to every call), ~2k tokens."""
    return orjson.dumps({"type": "text", "text": orjson.dumps({"object": "list", "results": [
        {"object": "block", "id": f"28fd1b2a-54b2-{k:04d}-{i:04d}-e5a8f007c25a",
         "created_time": f"2025-10-17T23:{i:02d}:00.000Z", "has_children": False,
         "type": "paragraph", "paragraph": {"rich_text": [
             {"type": "text", "text": {"content": f"Block {i} of revision {k}"}}]}}
        for i in range(24)]}).decode()}).decode()


def session(task: str, copies: bool = True) -> list[dict[str, Any]]:
    """Read the document and the page, then copy one section of the document per call
    (`copies`; else write lines of the agent's own)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a tool-using agent."},
        {"role": "user", "content": task},
    ]

    def turn(k: int, name: str, args: dict[str, Any], result: str) -> None:
        call = f"call_{k:03d}"
        messages.append({"role": "assistant", "content": f"Step {k}.", "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]})
        messages.append({"role": "tool", "tool_call_id": call, "content": result})

    turn(0, "get_document_text", {"filename": "/workspace/artist_profile.docx"}, DOC)
    turn(1, "get_page_blocks", {"block_id": "page-1"}, page_blocks(1))
    turn(2, "get_page_blocks", {"block_id": "page-2"}, page_blocks(2))
    for k, lines in enumerate(SECTIONS, 3):
        turn(k, "append_blocks", {"block_id": "page-1", "children": [
            {"type": "paragraph", "paragraph": {"content": line if copies else f"Note {k}-{i}"}}
            for i, line in enumerate(lines)]},
             page_blocks(k))
    messages.append({"role": "assistant", "content": "The page now holds every workshop."})
    return messages


NAMED = "Update the artist's page with the workshops listed in `artist_profile.docx`."
UNNAMED = "Update the artist's page with the workshops listed in the artist's profile document."


def test_the_task_names_the_file_a_result_answers() -> None:
    messages = session(NAMED)
    named = parse_request({"messages": messages}, TokenCounter(), "o200k_base").layout.clock
    assert named.named == {3}  # the document, not the page reads
    other = parse_request({"messages": session(UNNAMED)}, TokenCounter(), "o200k_base")
    assert other.layout.clock.named == set()


async def copied_lines_missing(engine: ContextEngine, task: str, name: str) -> list[str]:
    """Lines a call copies that the forwarded call did not carry."""
    messages = session(task)
    fits = await fit_each_call(engine, messages, TOOLS, "t-source", name)
    missing = []
    for fit, lines in zip(fits[3:], SECTIONS, strict=True):
        sent = "\n".join(str(m.get("content")) for m in fit.body["messages"])
        missing += [line for line in lines if line not in sent.replace('\\"', '"')]
    assert all(drops_add_up(fit) for fit in fits)  # the drop log still adds up
    return missing


async def test_a_document_the_task_names_stays_whole_while_the_agent_copies_from_it(
    engine: ContextEngine,
) -> None:
    assert await copied_lines_missing(engine, NAMED, "source-named") == []
    # the same session whose task does not name the file: digested before the copying
    assert len(await copied_lines_missing(engine, UNNAMED, "source-unnamed")) > 10


async def test_a_document_the_task_names_that_nobody_copies_from_is_digested(
    engine_without_young: ContextEngine,
) -> None:
    engine = engine_without_young  # one task: digested as a queue's later tasks are
    messages = session(NAMED, copies=False)
    fits = await fit_each_call(engine, messages, TOOLS, "t-source", "source-uncopied")
    sent = str(fits[-1].body["messages"][3]["content"])  # the document's result
    assert len(sent) < len(DOC) / 2
