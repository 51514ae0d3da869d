"""Outputs the agent is still drawing from: plan-aware retention of old tool results.

An agent that fills in forms, spreadsheets or e-mails from a table it read earlier copies
the table's values into its tool calls one call at a time: the 50 course names of a
listing, re-typed row by row over the next 20 calls. Aged by its position alone, that
table becomes a digest at the next step and its remaining rows are gone from the calls
that still need them (bench/README.md, "Toolathlon recall": 59% of the values missed there
are plain words and phrases copied from results 3-20+ calls back).

The signal is the session's own history: the values of the agent's latest tool calls'
arguments (string leaves of `MIN_VALUE`+ characters with a letter, or of `MIN_DIGITS`+
digits: a short bare number — a page size, a count, an element id — names no source, but a
course code, an order or phone number copied from a listing does) found in an older tool
result, as the client sent it. Each value is credited to the latest result before its
call that holds it (where the agent read it), and a turn also credits an older short result
holding `MIN_SHARED` of its values (a list whose entry it re-read in a newer print; counted
only beside a turn that read that result itself); a result credited by `MIN_TURNS` of the last
`turns` calls that made tool calls is *drawn from*, and a step leaves it as it is, so it
keeps its unused values until the agent stops drawing from it; the next step after that ages
it as usual.

On a later task of an API agent's queue (`later_task_outputs`), one turn is enough: a result
of the current task from which the agent's newest tool-calling turn copied `LATEST_VALUES`
values (as their latest holder) is drawn from while that turn is the newest. There the
agent fills records one call at a time from an output it has just read (the oil-price
summary's table, then its trades), and the step that comes right after its first row
digested the rows left (bench/README.md, "Toolathlon queues' recall, part thirty-two").

Only results still undecided (never aged) are read, with the ones since the horizon: a step
reads the outputs of the turns since the last step and those it kept, never the whole
history (per-call time grows with new content only).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from gateway.context.focus import _argument_leaves
from gateway.context.items import Item, content_text

MIN_VALUE = 4  # characters of an argument value that counts (the yardstick's needed values)
MAX_VALUE = 300  # longer values (a composed body, a script) are the agent's, not copied
# A value without a letter counts when it holds this many digits: an identifier (`61410004`,
# a course code the agent searches for one a call), not a size or a count (`5000`, `10`).
MIN_DIGITS = 6
# Turns (of the last `turns`) that must draw from a result: one copy of one value is a
# look-up, two are the agent working through it.
MIN_TURNS = 2
# An older result holding this many of one turn's values is drawn from too, besides the
# latest holder each value is credited to: a list the agent works through whose entry it
# re-read from a newer print of that entry (a script's 4 pending updates, the first one
# shown again in a payload check) is still the list it copies the next entries from.
# Only a short one (a few records), and only beside a turn that read a value there as its
# latest holder: a long listing, or an output whose values newer ones repeat, is kept by
# the turns that read them there, as before (kept on any size, the Toolathlon claude
# queues' cost @0.1 fell 0.3 tune and 0.2 holdout points; without the direct read, the
# deepseek runs' holdout 0.2). Three values: an entry is its key and fields (the update's
# page, run and best step); two are a reference pair a newer record names as well (a
# customer id and the line id the turn read in a bill record: at 2 the customer record,
# a hub naming every line and bill, was kept whole at each such call, tau2 telecom
# queues' tune cost @0.1 −0.4 for no recall).
MIN_SHARED = 3
SHARED_MAX_CHARS = 1000
# The agent's own turns it works from: a plan or a list of records it compiled in its prose
# (`1. Angela Moore - Email: …`) and then re-types one record a call. Credited besides the
# result the value was read in (that result's credit is unchanged), when the turn is newer
# than it. Its prose at least this long: a short remark restating one value is not a list.
OWN_KINDS = frozenset({"assistant", "tool_call"})
OWN_MIN_CHARS = 200
# Values the newest tool-calling turn must copy from one of the current task's results, on
# a later task of an API agent's queue, for that result to be drawn from on that turn alone.
LATEST_VALUES = 2


def recent_values(
    messages: Sequence[Mapping[str, Any]], turns: int
) -> list[tuple[int, list[str]]]:
    """(message index, argument values) of the last `turns` assistant messages with tool
    calls, newest first; reads back from the end only as far as those."""
    out: list[tuple[int, list[str]]] = []
    for index in range(len(messages) - 1, -1, -1):
        if len(out) >= turns:
            break
        msg = messages[index]
        if msg.get("role") != "assistant":
            continue
        calls = msg.get("tool_calls") or ()
        found: list[str] = []
        for call in calls:
            fn = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(fn, Mapping):
                continue
            for leaf in _argument_leaves(str(fn.get("arguments") or "")):
                leaf = leaf.strip()
                if (MIN_VALUE <= len(leaf) <= MAX_VALUE and leaf not in found
                        and _names_a_source(leaf)):
                    found.append(leaf)
        if calls:
            out.append((index, found))
    return out


def _names_a_source(value: str) -> bool:
    """A letter, or `MIN_DIGITS` digits: a value that points to where it was read."""
    return (any(ch.isalpha() for ch in value)
            or sum(ch.isdigit() for ch in value) >= MIN_DIGITS)


def drawn_from(
    sources: Sequence[Item], messages: Sequence[Mapping[str, Any]], turns: int,
    known: frozenset[str] = frozenset(),
    eager: Collection[str] = frozenset(),
    latest: Collection[str] = frozenset(),
) -> set[str]:
    """Ids of the tool results in `sources` that `MIN_TURNS` of the last `turns`
    tool-calling turns drew a value from: each value of those turns' arguments (not one of
    `known`: the session's system prompt and task values) credits the latest source before
    its turn whose text holds it. `sources`: the candidate results in message order (the
    caller passes only those still undecided, so this reads new content only). `eager`: ids
    of results one such turn makes drawn from (a document the task names, `steps.source_block`:
    the agent copying from it once is working through it, as the task said). `latest`:
    ids of results the newest such turn makes drawn from when it copied `LATEST_VALUES` of
    its values from one of them (`later_task_outputs`)."""
    if turns <= 0 or not sources:
        return set()
    results = [item for item in sources if item.kind == "tool_result"]
    own = [item for item in sources if item.kind in OWN_KINDS
           and len(item.text) >= OWN_MIN_CHARS]
    if not results and not own:
        return set()
    credits: dict[str, int] = {}  # id -> turns that drew from it
    direct: set[str] = set()  # ids a turn read a value in (its latest holder)
    newest: set[str] = set()  # ids the newest turn copied LATEST_VALUES values from
    for pos, (index, found) in enumerate(recent_values(messages, turns)):
        before = [item for item in results if item.message_index < index]
        mine = [item for item in own if item.message_index < index]
        hit: set[str] = set()
        copied: dict[str, int] = {}  # id -> values this turn read there (latest holder)
        shared: dict[str, int] = {}  # id -> values of this turn an older holder also has
        for value in found:
            if value in known:
                continue
            read = -1
            for item in reversed(before):
                if value not in item.text:
                    continue
                if read < 0:
                    hit.add(item.id)
                    copied[item.id] = copied.get(item.id, 0) + 1
                    read = item.message_index
                elif len(item.text) <= SHARED_MAX_CHARS:
                    shared[item.id] = shared.get(item.id, 0) + 1
            for item in reversed(mine):
                # the agent's own list, written after the result it read the value in
                if item.message_index < read:
                    break
                if value in item.text:
                    if not _user_restated(messages, value, item.message_index, index):
                        hit.add(item.id)
                    break
        for item_id in hit:
            credits[item_id] = credits.get(item_id, 0) + 1
            direct.add(item_id)
        if pos == 0 and latest:
            newest = {i for i, n in copied.items() if n >= LATEST_VALUES and i in latest}
        for item_id, n in shared.items():
            if n >= MIN_SHARED and item_id not in hit:
                credits[item_id] = credits.get(item_id, 0) + 1
    least = min(MIN_TURNS, turns)
    # an older holder's credit counts only beside a turn that read the output itself
    return {item_id for item_id, n in credits.items()
            if (n >= least and item_id in direct) or item_id in eager} | newest


def _user_restated(
    messages: Sequence[Mapping[str, Any]], value: str, start: int, end: int
) -> bool:
    """Whether a user message between `start` and `end` holds `value`: the agent took it from
    the user's newer message (a customer confirming the order and items the agent's summary
    listed), not from its own turn."""
    return any(messages[i].get("role") == "user"
               and value in content_text(messages[i].get("content"))
               for i in range(start + 1, min(end, len(messages))))



def later_task_outputs(sources: Sequence[Item]) -> set[str]:
    """Ids of the tool results in `sources` of the current task when it is a later task of an
    API agent's queue (after `Clock.task_statement`, with `Clock.api_calls`): the results
    whose newest copy makes them drawn from (`drawn_from`'s `latest`). Empty on a first
    task, a single run, a conversation and a text-tool agent's session."""
    return {item.id for item in sources
            if item.kind == "tool_result" and item.clock.api_calls
            and 0 <= item.clock.task_statement < item.message_index}
