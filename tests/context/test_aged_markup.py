"""An agent that writes its calls and its reasoning as markup (`<thinking>`, `<tool-use>`
`<shell>`) and gets each call's result back as a system message naming no call (`Ran
command: ...`): its aged turns keep their markup's skeleton, whatever they become (a digest,
a placeholder), since its next turn writes the same tags again (`summarize.markup`,
`apply.rewritten_text`; bench/README.md, "Aged replies keep their markup"). An agent whose
results come back otherwise keeps its placeholders as they were."""

from __future__ import annotations

from typing import Any

from gateway.context.apply import placeholder, rewritten_text
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import parse_request
from gateway.context.session import Decision
from gateway.context.summarize import markup
from gateway.context.tokens import TokenCounter

MASK = Decision("compress", "mask", "aged", "mask", 1)
ASK = {"role": "user", "content": "set up the project: a repository, a script, a commit"}


def turn(k: int) -> dict[str, str]:
    return {"role": "assistant", "content": (
        "<thinking>\n" + f"Step {k}: the project needs its next piece in place. " * 12
        + "\n</thinking>\n\n" + f"Running step {k} now.\n\n<tool-use>\n<shell>\n"
        f"make step_{k}\n</shell>\n</tool-use>")}


def output(k: int) -> dict[str, str]:
    return {"role": "system", "content": f"Ran command: `make step_{k}`\n\n" + f"ok {k}\n" * 40}


def session(rounds: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [ASK]
    for k in range(rounds):
        messages += [turn(k), output(k)]
    return messages


def test_the_skeleton_of_a_turns_markup() -> None:
    assert markup(turn(3)["content"]) == (
        "<thinking>…</thinking><tool-use><shell>…</shell></tool-use>")
    # an element and its children only: not the HTML a save element writes
    saved = ("<tool-use>\n<save args='a.html'>\n<html>\n<body>\n</body>\n</html>\n</save>\n"
             "</tool-use>")
    assert markup(saved) == "<tool-use><save args='a.html'>…</save></tool-use>"
    # a tag written twice in a row is kept once
    assert markup("<think>  \n<think>\nhm\n</think>  \n</think>\ndone") == "<think>…</think>"
    # tags inside fenced code, inside a line, or never closed are not the turn's markup
    assert markup("Here:\n```html\n<div>\n</div>\n```") == ""
    assert markup("It is <b>bold</b>.\n<open>\nno close") == ""


def test_an_aged_turn_keeps_its_markup_only_where_results_are_system_messages() -> None:
    messages = session(3)
    parsed = parse_request({"messages": messages}, TokenCounter(), "o200k_base")
    assert parsed.layout is not None and parsed.layout.clock.system_results
    first = next(item for item in parsed.items if item.message_index == 1)
    masked = rewritten_text(first, MASK)
    assert masked is not None and masked.startswith(placeholder(first))
    assert masked.endswith("<thinking>…</thinking><tool-use><shell>…</shell></tool-use>")
    # the same turns answered by user messages: the placeholder as before
    users = [{**m, "role": "user"} if m["role"] == "system" else m for m in messages]
    parsed = parse_request({"messages": users}, TokenCounter(), "o200k_base")
    assert parsed.layout is not None and not parsed.layout.clock.system_results
    first = next(item for item in parsed.items if item.message_index == 1)
    assert rewritten_text(first, MASK) == placeholder(first)


async def test_a_late_call_keeps_the_closing_tags_of_its_aged_turns(
    engine_without_young: ContextEngine,
) -> None:
    messages = session(24)
    context = CallContext("t-markup", "tr", {"x-ctxgate-session-id": "markup",
                                             "x-ctxgate-task-class": "default"})
    fitted = None
    for end in range(3, len(messages) + 1, 2):  # each call ends with a result
        fitted = await engine_without_young.fit({"messages": messages[:end]}, context)
    assert fitted is not None
    sent = fitted.body["messages"]
    assert len(sent) == len(messages)
    aged = [out["content"] for out, came in zip(sent, messages, strict=True)
            if came["role"] == "assistant" and out["content"] != came["content"]]
    assert aged, "old turns were rewritten"
    assert all("</thinking>" in text and "</tool-use>" in text for text in aged)
    assert all(len(text) < 0.5 * len(turn(0)["content"]) for text in aged)
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after


def test_such_an_agents_replies_list_values_with_their_periods() -> None:
    # its replies re-tell what a run found (`…the 100th prime is 541.`) as the next run of
    # the same task finds it again: their value lists keep the sentence's period
    found = {"role": "assistant", "content": "The script ran: the 100th prime is 541.\n"
             + "It checks every odd divisor up to the square root. " * 6}
    messages = [*session(2), found, {"role": "user", "content": "next: a web page"}]
    parsed = parse_request({"messages": messages}, TokenCounter(), "o200k_base")
    reply = next(item for item in parsed.items if item.message_index == 5)
    assert reply.periods
    digest = rewritten_text(reply, Decision("compress", "compress", "aged", "summary", 3))
    assert digest is not None and "541." in digest
    result = next(item for item in parsed.items if item.message_index == 2)
    assert not result.periods  # a result's values as before
    users = [{**m, "role": "user"} if m["role"] == "system" else m for m in messages]
    parsed = parse_request({"messages": users}, TokenCounter(), "o200k_base")
    assert not next(item for item in parsed.items if item.message_index == 5).periods
