"""Render one item under a decision: drop it, mask it, summarise it, mark it a duplicate,
or strip repeated blocks. Deterministic, so a remembered decision renders identical bytes."""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, fields
from operator import is_
from typing import cast

import orjson

from gateway.context.items import Item
from gateway.context.session import Decision
from gateway.context.summarize import (
    code_line,
    envelope,
    every_value,
    kept_fields,
    markup,
    notable,
    numbered_listing,
    summarize,
    values,
)
from gateway.context.tokens import TokenCounter
from gateway.observability.droplog import Action, DropEvent, Stage


def first_line(item: Item) -> str:
    """The first line of `item`'s text that names something; of an MCP content block
    (`summarize.envelope`), of the payload it carries, not of the envelope's JSON
    (`{"type":"text","…`, the same on every block)."""
    text = item.text
    payload = envelope(text)
    if payload is not None:
        return next((line.strip() for line in payload.splitlines() if _NAMES.search(line)), "")
    first = first_nonblank(text)
    if first[:1].isdigit():
        head = text[text.find(first): text.find(first) + LISTING_HEAD_CHARS].splitlines()
        if numbered_listing(head):
            return _listing_line(head)
    return first


_NAMES = re.compile(r"[^\W_]")  # a line that is not only brackets, quotes and blanks
_NONBLANK = re.compile(r"\S")  # `\S` and `str.strip` agree on what is blank (`str.isspace`)
_LINE_BREAK = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # `str.splitlines`'

# Characters of a numbered listing's head a preview reads for its first line naming something
LISTING_HEAD_CHARS = 800


def _listing_line(head: list[str]) -> str:
    """The first line of a numbered listing's `head` (`summarize.numbered_listing`) that
    names something, as its code, stripped: what a preview of it shows (`# VSLA Status`, not
    `1→# VSLA`; ` * @file tensor.h`, not `1→/**`); its first line's code when none does."""
    code = [code_line(line).strip() for line in head if line.strip()]
    return next((line for line in code if _NAMES.search(line)), code[0])


def first_nonblank(text: str) -> str:
    """`text`'s first line (as `str.splitlines` cuts them) that is not blank, stripped; read
    up to its end only. Every line break is blank, so the line holding the first character
    that is not is that line, and it starts there once stripped. A step reads the
    placeholder of every old turn (`compress._old_turn`): splitting a whole output into
    lines for its first one cost the time of its length (bench/README.md, "part
    thirty-eight")."""
    start = _NONBLANK.search(text)
    if start is None:
        return ""
    end = _LINE_BREAK.search(text, start.end())
    return text[start.start():end.start() if end is not None else len(text)].rstrip()


def placeholder(item: Item) -> str:
    """What a masked item is sent as: the start of its first line, cut as a pointer's, and
    its kind where its message's role does not tell it (a retrieved document inside a
    message). A long session's late calls carry hundreds of these (the 300-call synthetic
    session: 233 a late call, 5.1% of what the client sent when each named the item id,
    which means nothing to the model, its tokens and 100 characters of its first line; the
    kind a tool message's role already gives was 12 more characters each)."""
    kind = "" if item.kind in ROLE_KINDS else f"{item.kind} "
    return f"[ctxgate: {kind}omitted {excerpt(item, POINTER_EXCERPT)}]"


def placeholder_saves(item: Item, chars: int) -> bool:
    """Whether `item`'s text is more than `chars` characters longer than its placeholder.
    A placeholder is at most `_PLACEHOLDER_MAX` characters and its kind's (its excerpt:
    POINTER_EXCERPT and an ellipsis): a longer text is not measured against it (a step
    asks this of every old user turn, `compress._old_turn`)."""
    kind = 0 if item.kind in ROLE_KINDS else len(item.kind) + 1
    if len(item.text) > _PLACEHOLDER_MAX + kind + chars:
        return True
    return len(item.text) > len(placeholder(item)) + chars


GIST = "gist"  # a masked turn's decision arg: its placeholder lists the values it named
# A digest's decision arg: its value list names a value that ends a sentence with its period
# (`summarize.values`' `periods`), whatever the item's own `periods`: an agent's restated
# turn (`compress._restated_turns`), whose log lines a later turn re-quotes (`…-05-13.`).
PERIODS = "periods"
GIST_VALUES = 12  # values a turn's gist lists at most


def gist(item: Item, known: frozenset[str] = frozenset()) -> str:
    """What an old conversational turn is masked as: its placeholder and the notable values
    it named (ids, dates, amounts a later step may re-type) that the model sees anyway only
    if `known` has them. Deterministic in the item's text and `known`."""
    periods = item.clock.json_steps
    named = [v for v in values(item.text, periods)
             if notable(v) and v not in known][:GIST_VALUES]
    head = placeholder(item)
    return f"{head[:-1]}; mentions: {' '.join(named)}]" if named else head


def value_list(item: Item, known: frozenset[str] = frozenset()) -> str:
    """What a result rewritten at the tail of a run of one task is masked as
    (`engine._tail_masks`): its placeholder and every notable value it names that `known`
    lacks (`summarize.every_value`), uncapped: read once and gone from the next call on,
    its names and line numbers are what the agent's next commands re-type (a `sed` edit's
    line numbers, the function it patches), where a digest's list stops at its cap."""
    named = every_value(item.text, known)
    head = placeholder(item)
    return f"{head[:-1]}; mentions: {' '.join(named)}]" if named else head


def kept_cells(item: Item, focus: frozenset[str], seen: frozenset[str] = frozenset(),
               names: bool = False) -> str | None:
    """What an aged MCP content block is masked as (None: a plain placeholder): its
    placeholder and the short cells of its payload's records that carry the task's and the
    latest calls' terms (`summarize.kept_fields`), which the model does not read above
    (`seen`). Made once, when the mask is decided (the focus moves on); the decision keeps
    it. A form's question, a sheet's header, an e-mail address an agent fills in many steps
    after it read them (bench/README.md, "What a masked content block keeps"). With `names`,
    also the cells naming its records (ids, names, addresses, codes, links), whichever
    terms they carry (`summarize.MASKED_RECORD_CHARS_PER_CHAR`)."""
    cells = kept_fields(item.text, focus, seen, names=names)
    if not cells:
        return None
    return f"{placeholder(item)[:-1]}; mentions: {'; '.join(cells)}]"


# Kinds a message's role names already (a tool message is a tool result): a placeholder
# leaves them out.
ROLE_KINDS = frozenset({"system", "user", "assistant", "tool_call", "tool_result"})


# Characters of its first line a pointer quotes to name the copy it stands for. Issue-7
# yardstick, tune (bench/README.md, "Repeated lines on arrival"): intercode's late calls
# 41.4 / 41.7 / 42.0 / 42.2% at 32 / 24 / 16 / 8 (its outputs repeat often and are short),
# the other corpora within 0.1 point; 16 still names most copies apart.
POINTER_EXCERPT = 16
_PLACEHOLDER_MAX = len("[ctxgate: omitted ]") + POINTER_EXCERPT + 1  # `placeholder`'s, but its kind


def excerpt(item: Item, chars: int) -> str:
    """The start of `item`'s first line, `chars` long at most (… when cut)."""
    first = first_line(item)
    return first[:chars] + ("…" if len(first) > chars else "")


def pointer(rep: Item, near: bool = False) -> str:
    """What a duplicate of `rep` is sent as: words the model can follow back to the copy it
    sees (an item id means nothing to it), fixed when decided; short, since repeats are
    often short outputs."""
    same = "nearly repeats" if near else "repeats"
    return f"[ctxgate: {same} an earlier {rep.kind.replace('_', ' ')}: " \
        f"{excerpt(rep, POINTER_EXCERPT)}]"


def rewritten_text(
    item: Item, decision: Decision, known: frozenset[str] = frozenset()
) -> str | None:
    """`item`'s text under `decision` (None: dropped). An assistant turn of an agent whose
    calls' results come back as system messages (`Clock.system_results`) keeps its markup
    (`summarize.markup`) in whatever it becomes: such a harness's result names no call
    (`Saved to main.py`), so the turn's tags are the only record of the format the agent
    writes its next call in, and the next call writes them again (gptme queues, tune:
    463 of the 527 values lost were closing tags of aged replies; bench/README.md, "Aged
    replies keep their markup")."""
    text = _rewritten_text(item, decision, known)
    if text is None or item.kind != "assistant" or not item.clock.system_results:
        return text
    skeleton = markup(item.text)
    return f"{text}\n{skeleton}" if skeleton and skeleton not in text else text


def _rewritten_text(item: Item, decision: Decision, known: frozenset[str]) -> str | None:
    method = decision.method
    if decision.text is not None:
        return decision.text
    if method == "drop":
        return None
    if method == "mask":
        return gist(item, known) if decision.arg == GIST else placeholder(item)
    if method == "dedup":
        return f"[ctxgate: same content as {decision.arg}]"
    if method == "strip" and decision.arg:
        return re.sub(decision.arg, "", item.text)
    if method == "summary":
        return summarize(item.text, item.kind, decision.level, known,
                         periods=item.periods or decision.arg == PERIODS)
    if method == "args":  # only the tool calls' arguments are cut: the text stays
        return item.text
    raise ValueError(f"unknown decision method {method!r}")


Applied = tuple[str | None, int]  # an item's text under a decision (None: dropped), tokens
AppliedMemo = MutableMapping[tuple[str, Decision, str], Applied]


def apply_decision(
    item: Item,
    decision: Decision,
    counter: TokenCounter,
    encoding: str,
    known: frozenset[str] = frozenset(),
    memo: AppliedMemo | None = None,
) -> Item | None:
    """The item as it will be sent, or None when dropped. Never makes an item longer.

    `known`: values the model sees anyway (the session's system prompt and task), which a
    summary need not list; constant per session, so a re-applied decision renders the same.
    `memo` keeps, per (item id, decision, encoding), the rewritten text and its tokens:
    re-applying a decision costs one lookup."""
    if not item.rewritable and decision.method not in ("drop", "args"):
        return item
    key = (item.id, decision, encoding)
    hit = memo.get(key) if memo is not None else None
    if hit is None:
        text = rewritten_text(item, decision, known)
        hit = (text, 0 if text is None else counter.count(text, encoding))
        if memo is not None:
            memo[key] = hit
    text, text_tokens = hit
    if text is None:
        return None
    fixed = item.fixed_tokens - (cut_calls(decision).tokens if decision.method == "args" else 0)
    tokens = text_tokens + fixed
    if tokens >= item.tokens:
        return item
    return _rewritten(item, text, tokens, fixed)


_ITEM_FIELDS = tuple(f.name for f in fields(Item))
_set = object.__setattr__


def _rewritten(item: Item, text: str, tokens: int, fixed: int) -> Item:
    """`replace(item, text=text, tokens=tokens, fixed_tokens=fixed)` at half the cost:
    every session's decided items are re-applied on each of its step calls."""
    new = object.__new__(Item)
    for name in _ITEM_FIELDS:
        _set(new, name, getattr(item, name))
    _set(new, "text", text)
    _set(new, "tokens", tokens)
    _set(new, "fixed_tokens", fixed)
    return new


@dataclass(frozen=True)
class CutCalls:
    """What an `args` decision (the budget ladder's rung before a drop) sends of its
    message's tool calls: per call its arguments (None: as sent), and the tokens saved."""

    index: int  # the message's index in the client's messages
    arguments: tuple[str | None, ...]
    tokens: int

    def dump(self) -> str:
        return orjson.dumps([self.index, self.arguments, self.tokens]).decode()


def cut_calls(decision: Decision) -> CutCalls:
    """The cut an `args` decision carries (in its `arg`)."""
    index, arguments, tokens = orjson.loads(decision.arg or "[0, [], 0]")
    return CutCalls(int(index), tuple(arguments), int(tokens))


def apply_decisions(
    items: Iterable[Item],
    decisions: Mapping[str, Decision],
    counter: TokenCounter,
    encoding: str,
    known: frozenset[str],
    memo: AppliedMemo | None = None,
) -> list[Item]:
    """The items as sent under a session's remembered decisions (pinned ones as they are)."""
    final: list[Item] = []
    for item in items:
        decision = decisions.get(item.id)
        if decision is None or (item.pinned and decision.method != "dedup"):
            # a pinned item is sent as is, unless it repeats another (cluster.on_arrival)
            final.append(item)
            continue
        new = apply_decision(item, decision, counter, encoding, known, memo)
        if new is not None:
            final.append(new)
    return final


def reapply(
    items: Iterable[Item],
    decisions: Mapping[str, Decision],
    earlier: Mapping[str, Decision],
    applied: Iterable[Item],
    counter: TokenCounter,
    encoding: str,
    known: frozenset[str],
    memo: AppliedMemo | None = None,
) -> list[Item]:
    """`apply_decisions(items, decisions, ...)`, given `applied`, what it returned for the
    same items under `earlier` decisions: an item whose decision is the same is taken from
    there (a step changes few of a session's decisions), any other applied anew."""
    before = {item.id: item for item in applied}
    final: list[Item] = []
    for item in items:
        decision, old = decisions.get(item.id), earlier.get(item.id)
        if decision is old or decision == old:
            same = before.get(item.id)
            if same is not None:  # absent: dropped under that decision
                final.append(same)
        else:
            final += apply_decisions((item,), decisions, counter, encoding, known, memo)
    return final


def changed_decisions(
    decisions: Mapping[str, Decision], earlier: Mapping[str, Decision]
) -> set[str]:
    """The ids whose decision in `decisions` is not `earlier`'s (made, changed or undone)."""
    get = earlier.get
    made = {item_id for item_id, d in decisions.items()
            if d is not (old := get(item_id)) and d != old}
    return made | (earlier.keys() - decisions.keys())


def reapply_changed(
    items: Sequence[Item],
    decisions: Mapping[str, Decision],
    changed: Collection[str],
    applied: Sequence[Item],
    originals: Mapping[str, Item],
    counter: TokenCounter,
    encoding: str,
    known: frozenset[str],
    memo: AppliedMemo | None = None,
) -> list[Item] | None:
    """`reapply(items, decisions, earlier, applied, ...)` given the ids whose decision is not
    `earlier`'s (`changed`, `changed_decisions`; `originals`: `items` by id): `applied` with
    only those items applied anew and spliced in at their places, found by message (both
    lists run in message order, a message's items in `items`' order), not by a pass over
    every item. An id of `changed` that is no item of `items` changes nothing, as there.
    None when `applied` is not such a list (an item of a message that is not among that
    message's items): the caller re-applies in full."""
    if not changed:
        return list(applied)
    # `applied[from:to]` replaced by `new`, ordered by place: (from, message, rank, to, new)
    edits: list[tuple[int, int, int, int, list[Item]]] = []
    for item_id in changed:
        item = originals.get(item_id)
        if item is None:
            continue
        m = item.message_index
        lo = bisect_left(items, m, key=_message_index)
        hi = bisect_right(items, m, lo=lo, key=_message_index)
        group = [x.id for x in items[lo:hi]]
        if item_id not in group:
            continue
        rank = {x: k for k, x in enumerate(group)}
        at = bisect_left(applied, m, key=_message_index)
        end = bisect_right(applied, m, lo=at, key=_message_index)
        mine = rank[item_id]
        if any(x.id not in rank for x in applied[at:end]):
            return None
        while at < end and rank[applied[at].id] < mine:
            at += 1
        taken = at + 1 if at < end and applied[at].id == item_id else at
        edits.append((at, m, mine, taken, apply_decisions(
            (item,), decisions, counter, encoding, known, memo)))
    edits.sort(key=lambda e: e[:3])
    out: list[Item] = []
    pos = 0
    for lo, _, _, hi, new in edits:
        out += applied[pos:lo]
        out += new
        pos = hi
    out += applied[pos:]
    return out


def _message_index(item: Item) -> int:
    return item.message_index


def same_texts(a: Sequence[Item], b: Sequence[Item]) -> bool:
    """Whether two fittings of one call send the same items with the same texts, so they
    render and log alike (scores and ages, which neither does, may differ). The very same
    items (most of a step's) are passed over at C speed."""
    if len(a) != len(b):
        return False
    if all(map(is_, a, b)):
        return True
    return all(
        x.id == y.id and x.tokens == y.tokens and (x.text is y.text or x.text == y.text)
        for x, y in zip(a, b, strict=True)
    )


def drop_events(
    original: list[Item], final: list[Item], decisions: Mapping[str, Decision]
) -> list[DropEvent]:
    """One event per item not sent as the client sent it, in the items' order."""
    kept = {item.id: item for item in final}
    events = []
    for item in original:
        after = kept.get(item.id)
        if after is not None and after.text == item.text and after.tokens == item.tokens:
            continue
        decision = decisions[item.id]
        events.append(
            DropEvent(
                stage=cast(Stage, decision.stage),
                action=cast(Action, decision.action),
                reason=decision.reason,
                item_id=item.id,
                kind=item.kind,
                message_index=item.message_index,
                tokens_before=item.tokens,
                tokens_after=after.tokens if after else 0,
                kept_as=decision.arg if decision.method == "dedup" else None,
                text=item.text,
                step=decision.step,
            )
        )
    return events
