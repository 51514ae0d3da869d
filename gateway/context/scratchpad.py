"""A scratchpad agent's earlier steps inside its latest user message, cut under a budget.

A ReAct or structured-chat agent (LangChain's `agent_scratchpad`) is called with its system
prompt and ONE user message: the objective, then every earlier step as `Thought:` /
`Action:` / `Observation: <tool output>`, ending in the `Thought:` prompt. The engine pins
the latest user message whole, so under a budget such a call was refused as soon as that
message alone was over it, though most of it is old tool output (issue 7: a refusal only
when nothing else works). When the pinned content is over the budget, that message is sent
to the budget ladder as pieces: the head (the objective) and the tail (the newest step and
the prompt) stay pinned; each older step is one unit of two unpinned pieces, the agent's
reply (`assistant`, with the labels: dropped with its step, never rewritten, so what is
sent still reads as the loop) and the observation's body (`tool_result`), aged by the steps
after it. The ladder then digests, masks and drops them as it does tool exchanges: oldest
first, just enough. Without a budget's pressure nothing is split: a digest inside a message
the client only appends to re-bills the rest of it at every change (branch scratch59,
bench/README.md's session 59 paragraph: cost @0.1 −6.30 · −2.45 on HyperAgent's runs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gateway.context.items import LOOP_LABEL, Item, ParsedRequest, message_id
from gateway.context.tokens import TokenCounter
from gateway.observability.droplog import Kind

# What follows the newest observation of a scratchpad: the loop's prompt for the next
# thought (LangChain's `llm_prefix`), nothing else. Without it the last block may run into
# the task after a prompt's examples (OpenHands' first call: `Observation:\n[1] 126` ...
# `--- END OF EXAMPLE ---` ... the task, no label after).
_LOOP_TAIL = re.compile(r"\s*Thought(?: \d+)?:\s*")
_SPACE = re.compile(r"\s*")


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a scratchpad: the reply from `start` (its first label) to `body`, the
    observation's body from `body` to `end` (blank space around it left with the reply)."""

    start: int
    body: int
    end: int


def scratchpad_steps(text: str) -> list[Step]:
    """The steps of a scratchpad, when `text` ends in the loop: its newest observation
    followed by a `Thought:` prompt and nothing else (a prompt's examples, followed by the
    task, are not a scratchpad). A numbered episode's steps start at its last
    `Observation 1:` (the examples before it are another episode's). Empty when `text` is
    no scratchpad or a step has no reply before its observation."""
    labels = list(LOOP_LABEL.finditer(text))
    steps: list[Step] = []
    thought: int | None = None  # the step's latest `Thought:` label, else its first other
    other: int | None = None
    for k, m in enumerate(labels):
        if m.group(1) == "Thought":
            thought = m.start()
        elif m.group(1) != "Observation":
            other = m.start() if other is None else other
        if m.group(1) != "Observation":
            continue
        if m.group(2) == "1":
            steps = []  # a new episode: the earlier blocks were examples
        start = thought if thought is not None else other
        if start is None:
            return []
        end = labels[k + 1].start() if k + 1 < len(labels) else len(text)
        body = _SPACE.match(text, m.end(), end).end()  # type: ignore[union-attr]
        steps.append(Step(start, body, _stripped_end(text, body, end)))
        thought = other = None
    if not steps or not _LOOP_TAIL.fullmatch(text, steps[-1].end):
        return []
    return steps


def _stripped_end(text: str, start: int, end: int) -> int:
    """Where text[start:end] ends without its trailing blank space."""
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def unpinned_scratchpad(
    messages: Sequence[Mapping[str, Any]], parsed: ParsedRequest, counter: TokenCounter
) -> ParsedRequest:
    """`parsed` with the scratchpad of its last message, a user message with string content
    and a pinned item, split into pieces (module doc): all steps but the newest unpinned.
    The message is split whole, whatever items it was parsed into (one; retrieved documents;
    the pieces of a session's earlier call that sent it, pinned again as its latest user
    message). The pieces' tokens add up to the message's (the tail takes what the seams
    differ by), so a cut piece's drop event counts what the message saved. `parsed` when
    there is no such scratchpad of two steps or more."""
    layout = parsed.layout
    last = len(messages) - 1
    text = messages[last].get("content") if messages else None
    if layout is None or layout.latest_user != last or not isinstance(text, str):
        return parsed
    own = [k for k, item in enumerate(parsed.items) if item.message_index == last]
    if not own or not any(parsed.items[k].pinned for k in own):
        return parsed
    steps = scratchpad_steps(text)
    if len(steps) < 2:
        return parsed
    first = parsed.items[own[0]]
    whole = replace(first, text=text, pinned=True, kind="user",
                    tokens=sum(parsed.items[k].tokens for k in own))
    pieces = _pieces(whole, steps, counter, parsed.encoding)
    return replace(parsed, items=[*parsed.items[:own[0]], *pieces, *parsed.items[own[-1] + 1:]])


def _pieces(item: Item, steps: list[Step], counter: TokenCounter, encoding: str) -> list[Item]:
    """`item` (the message's one item) as its head, two pieces per old step, and its tail."""
    text, old = item.text, steps[:-1]
    head = text[:old[0].start]
    out = [replace(item, id=message_id(item.message_index, "scratchpad head", head, {}),
                   text=head, tokens=counter.count(head, encoding) + item.fixed_tokens)]
    for j, step in enumerate(old):
        unit = f"{item.unit}/step{j}"
        turn = item.turn - (len(steps) - 1 - j)  # aged by the steps taken after it
        start = step.start if j == 0 else old[j - 1].end
        parts: tuple[tuple[Kind, str], ...] = (("assistant", text[start:step.body]),
                                               ("tool_result", text[step.body:step.end]))
        for kind, piece in parts:
            out.append(Item(
                id=message_id(item.message_index, f"scratchpad {kind} {j}", piece, {}),
                kind=kind, unit=unit, message_index=item.message_index, segment=len(out),
                text=piece, tokens=counter.count(piece, encoding), fixed_tokens=0, turn=turn,
                pinned=False, rewritable=kind == "tool_result", clock=item.clock))
    rest = text[old[-1].end:]
    tail = item.tokens - sum(piece.tokens for piece in out)
    out.append(replace(item, id=message_id(item.message_index, "scratchpad tail", rest, {}),
                       segment=len(out), text=rest, tokens=tail, fixed_tokens=0))
    return out
