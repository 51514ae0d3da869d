"""A queue's later task that names a short document (a formatting guide, `Format.md`) keeps
it whole while the agent fills its reports from it, as a first task does (`steps.source_block`
read on the current task: the files its user message names, its turns counted from that
message; `Layout.extend`). Read on the session, past its 60th turn the guide went as a digest
at the step after it was read, while the agent still copied its section titles one every
third call (bench/README.md, "A queue's later task keeps the document it names") — the real
engine on the embedded Redis, the shipped configuration."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context.engine import ContextEngine
from gateway.context.items import parse_request
from gateway.context.tokens import TokenCounter
from tests.context.sessions import drops_add_up, fit_each_call, order_page

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("get_page_blocks", "get_document_text", "append_blocks")]
FIRST_TURNS = 64  # the first task alone outlasts `whole_block_turns`
SECTIONS = ["Candidate Information:", "Interviewer Evaluation:", "Evaluation Conclusion:",
            "Technical Assessment:", "Communication Skills:", "Salary Expectation:",
            "Reference Checks:", "Onboarding Timeline:", "Security Clearance:",
            "Relocation Needs:", "Language Proficiency:", "Final Remarks:"]
GUIDE = orjson.dumps({"type": "text", "text": "# Document Generation Instructions\n\n" + "\n".join(
    f"- Section {k} title: {title} (bold, 12pt, followed by one paragraph)"
    for k, title in enumerate(SECTIONS, 1)), "annotations": None}).decode()
SECOND = "Write the evaluation report following the formatting guidelines in Format.md."


def queue(second: str) -> list[dict[str, Any]]:
    """A first task of `FIRST_TURNS` page reads, then `second`: the agent reads the guide
    and writes one of its section titles every third call, reading pages between."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You work the task queue with the tools."},
        {"role": "user", "content": "Ticket T-100: audit the orders."}]
    k = 0

    def turn(name: str, args: dict[str, Any], result: str) -> None:
        nonlocal k
        k += 1
        call = f"call_{k:03d}"
        messages.append({"role": "assistant", "content": f"Step {k}.", "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]})
        messages.append({"role": "tool", "tool_call_id": call, "content": result})

    for _ in range(FIRST_TURNS):
        turn("get_page_blocks", {"block_id": f"page-{k + 1}"}, order_page(k + 1))
    messages.append({"role": "assistant", "content": "Ticket T-100 is audited."})
    messages.append({"role": "user", "content": second})
    turn("get_document_text", {"filename": "/workspace/Format.md"}, GUIDE)
    for title in SECTIONS:
        turn("append_blocks", {"block_id": "report", "text": title}, "Blocks appended.")
        turn("get_page_blocks", {"block_id": f"page-{k + 1}"}, order_page(k + 1))
        turn("get_page_blocks", {"block_id": f"page-{k + 1}"}, order_page(k + 1))
    messages.append({"role": "assistant", "content": "The report is written."})
    return messages


def test_the_current_task_names_the_file_a_result_answers() -> None:
    messages = queue(SECOND)
    layout = parse_request({"messages": messages}, TokenCounter(), "o200k_base").layout
    guide = next(i for i, m in enumerate(messages) if m.get("content") == GUIDE)
    start = messages.index({"role": "user", "content": SECOND})
    assert layout.clock.named == {guide}
    assert (layout.clock.task_start, layout.clock.task_turns) == (start, FIRST_TURNS + 1)
    assert layout.task_files == set()  # the first task named none


async def titles_missing(engine: ContextEngine, second: str, name: str) -> list[str]:
    """The section titles a call writes that the forwarded call did not carry."""
    messages = queue(second)
    fits = await fit_each_call(engine, messages, TOOLS, "t-queue-source", name)
    ends = [end for end in range(3, len(messages)) if messages[end]["role"] == "assistant"]
    missing = []
    for end, fit in zip(ends, fits, strict=True):
        calls = messages[end].get("tool_calls") or ()
        if not calls or calls[0]["function"]["name"] != "append_blocks":
            continue
        title = orjson.loads(calls[0]["function"]["arguments"])["text"]
        sent = "\n".join(str(m.get("content")) for m in fit.body["messages"])
        if title not in sent:
            missing.append(title)
        # the drop log still adds up
        assert drops_add_up(fit)
    return missing


async def test_a_guide_the_later_task_names_stays_whole_while_the_agent_copies_from_it(
    engine: ContextEngine,
) -> None:
    assert await titles_missing(engine, SECOND, "queue-source-named") == []
    # the same queue whose second task does not name the file: digested while copied from
    unnamed = SECOND.replace("in Format.md", "in the workspace")
    assert len(await titles_missing(engine, unnamed, "queue-source-unnamed")) > 3
