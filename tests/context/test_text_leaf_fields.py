"""A content block's fields line reads two shapes it used to miss (`summarize.fields`;
bench/README.md, "Toolathlon queues' recall, part seventeen"): the names inside a JSON
listing's text leaves (an announcement's `message`, which the JSON digest cuts at its head),
and a Markdown list item's bold key (`- **Options:** Very willing, …`), whose value is
listed alone, as a plain `Options: …` line's is."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context.engine import ContextEngine
from gateway.context.session import MemorySessionStore
from gateway.context.summarize import fields, summarize
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

from .conftest import without_repay
from .sessions import fit_each_call

EXAM = "Western Regional Placement Examination"
TOPICS = [
    {"id": 90 - k, "title": f"Course notice {k} - LIT20{k}", "posted_at": "2025-10-17T23:24:54Z",
     "read_state": "unread", "published": True, "user_name": "Course Admin",
     "html_url": f"http://localhost:10001/courses/68/discussion_topics/{90 - k}",
     "message": (f"Dear LIT20{k} students,\n\nThis is to announce that the final assessment "
                 f"of unit {k} will be held in the spring term.\n\nDuration: 90 minutes\n\n"
                 + (f"Please check your score of the {EXAM} first.\n\n" if k == 0 else
                    f"Bring the reading list of week {k} and the essay outline.\n\n")
                 + "Best regards,\nCourse Instructor")}
    for k in range(8)
]
FORM = "\n".join([
    "# Customer Feedback Questionnaire", "",
    "### 1. Overall Rating", "- **Type:** Single choice", "- **Question:** Rate your visit.",
    "- **Options:** Very satisfied, Satisfied, Neutral, Dissatisfied, Very dissatisfied",
    "- **Required:** Yes", "",
    "### 2. Willingness to Recommend", "- **Type:** Single choice",
    "- **Question:** Would you recommend our store to friends?",
    "- **Options:** Very willing, Willing, Might, Not very willing, Unwilling",
    "- **Required:** Yes", "",
    *(f"- **Setting {k}:** shown on page {k} of the survey form" for k in range(30)),
])
OPTIONS = "Very willing, Willing, Might, Not very willing, Unwilling"


def block(text: str) -> str:
    return orjson.dumps({"type": "text", "text": text}).decode()


def test_a_listing_s_text_leaves_name_what_they_say() -> None:
    listing = orjson.dumps(TOPICS, option=orjson.OPT_INDENT_2).decode()
    out = summarize(block(listing), "tool_result", 3)
    assert EXAM not in out.split("\n")[0]  # the JSON digest cut the message at its head
    assert EXAM in out and "Course Instructor" in out
    assert len(out) < len(listing) // 2


def test_a_markdown_bold_key_is_a_key() -> None:
    got = fields(FORM)
    assert OPTIONS in got and "Would you recommend our store to friends?" in got
    assert not any("**" in f or f.startswith(("- ", "#")) for f in got)
    assert "Options: " + OPTIONS not in got  # the value alone, not the key's cell again
    out = summarize(block(FORM), "tool_result", 3)
    fields_line = next(line for line in out.splitlines() if line.startswith("[omitted fields:"))
    assert OPTIONS in fields_line and "**" not in fields_line


def _session(after: int) -> list[dict[str, Any]]:
    listing = orjson.dumps(TOPICS, option=orjson.OPT_INDENT_2).decode()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an assistant with tools."},
        {"role": "user", "content": "Read the course announcements, then post a reminder "
                                    "naming the examination students must check."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c0", "type": "function", "function": {
                "name": "list_announcements", "arguments": '{"course_id": 68}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": block(listing)},
    ]
    for k in range(1, after + 1):
        messages.append({"role": "assistant", "content": f"Checking section {k}.", "tool_calls": [
            {"id": f"c{k}", "type": "function", "function": {
                "name": "check_section", "arguments": f'{{"section": "s-{k}"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": "\n".join(
            f"Section s-{k} seat {i}: held for cohort {k * 40 + i}" for i in range(40))})
    messages.append({"role": "assistant", "content": "Done."})
    return messages


async def test_an_aged_listing_keeps_the_name_its_text_gives(
    settings: Settings, embedder: Embedder
) -> None:
    engine = ContextEngine(without_repay(settings), None, Metrics(),
                           DropLog("/dev/null", "none", None), embedder,
                           sessions=MemorySessionStore())
    session = _session(30)
    fits = await fit_each_call(engine, session, [], "t-leaf", "text-leaf")
    whole = session[3]["content"]
    sent = [fit.body["messages"][3]["content"] for fit in fits]
    digests = [t for t in sent if t != whole and not t.startswith("[ctxgate: omitted")]
    assert digests and all(len(t) < len(whole) // 2 for t in digests)
    assert all(EXAM in t for t in digests)
