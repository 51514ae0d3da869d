"""Repeated lines on arrival: runs of a new output's lines that the model reads verbatim above.

Agents re-read what changed little: a web page after a click keeps its menus and most of its
content, a re-run listing differs in a line or two, a file window scrolled by a few lines
overlaps the last one. Such an output is no exact repeat (`cluster.arrival_duplicates` sends
those as pointers), but most of its lines are. With `cluster.arrival_lines`, each run of
consecutive lines that all occur, as they are, in one item the model still reads verbatim
above (`arrival_min_chars` characters or more) goes out as one marker naming that item by
its first line. Lossless (the lines are in the same request), and free for the prompt cache:
the output was never sent before, and the decision is remembered, so every later call sends
it the same way. When a later step ages the output, it is digested from its original text.

With `cluster.arrival_json`, a new output that is JSON laid out with spaces or line breaks
goes out without the whitespace outside its strings (`minified`): the same JSON value, every
string byte for byte, 8-10% fewer characters on tau-bench's reservation records. Like a
marker, it is decided on the output's first call, so no sent prefix changes, and the output
still ages from its original text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping

from gateway.context.apply import excerpt
from gateway.context.items import Item
from gateway.context.session import Decision

ARRIVAL_KINDS = frozenset({"tool_result", "user"})  # outputs and observations, never a turn
REPEATED_LINES = "repeated_lines"  # a dedup of some lines only: the item may still age
MINIFIED_JSON = "minified_json"  # JSON sent without its layout: the item may still age
MINIFIED_KEPT = "minified_kept"  # aged, but kept minified: its digest was hardly shorter
# Arrival rewrites after which an item still ages (steps.undecided)
STILL_AGES = frozenset({REPEATED_LINES, MINIFIED_JSON})
# A JSON string (escapes included) or a run of whitespace outside one
_JSON_SPACE = re.compile(r'("(?:[^"\\]|\\.)*")|\s+')

# Characters of the named item's first line a marker quotes: more than an exact repeat's
# pointer (apply.POINTER_EXCERPT), since the marker's lines are only part of the output.
MARKER_EXCERPT = 32

LineIndex = dict[str, Item]  # a non-blank line -> the first verbatim item that has it
# Before a line of the task statement in a `LineIndex` (`index_lines`): such a line is
# read only by a text that opens as the statement does
GOAL_LINE = "\x00goal\x00"


def arrival_item(item: Item, min_chars: int, marked: Collection[int]) -> bool:
    """Whether repeats on arrival look at `item`: an output or a user turn of `min_chars`
    or more, not in a message a wire adapter pinned. The task statement is one they may
    point to (`arrival_target`), never one they rewrite (`arrival_new`)."""
    return (len(item.text) >= min_chars and item.kind in ARRIVAL_KINDS
            and item.message_index not in marked)


def arrival_turn(item: Item, min_chars: int, marked: Collection[int]) -> bool:
    """Whether `item` is an assistant turn whose lines a new output's runs of lines may
    point to (`ClusterOptions.arrival_from_turns`); the turn itself goes as written."""
    return (item.kind == "assistant" and len(item.text) >= min_chars
            and item.message_index not in marked)


def arrival_new(item: Item) -> bool:
    """Whether a repeat on arrival may rewrite `item` (an `arrival_item` of the call's new
    messages): not the task statement, which the model reads as the client wrote it. A
    queue's later task that re-sends it (an agent's worked example and instructions before
    each task: OpenHands' CodeAct) points to it instead (bench/README.md, "The task
    statement as a copy repeats on arrival point to")."""
    return item.rewritable and not item.goal


def verbatim_index(
    items: list[Item], decisions: Mapping[str, Decision], min_chars: int,
    marked: Collection[int], turns: bool = False,
) -> LineIndex:
    """The lines of the items (as sent) that repeats on arrival may point to: those sent
    as the client sent them. `turns` (`ClusterOptions.arrival_from_turns`): the assistant's
    turns too, each line under the latest item that has it, as `cluster.arrival_duplicates`
    indexes them."""
    index: LineIndex = {}
    for item in items:
        if item.id not in decisions and (arrival_item(item, min_chars, marked) or (
                turns and arrival_turn(item, min_chars, marked))):
            index_lines(index, item, latest=turns)
    return index


def verbatim_items(
    items: list[Item], final: list[Item], decisions: Mapping[str, Decision], min_chars: int,
    marked: Collection[int],
) -> dict[str, Item]:
    """The items (`final`: as sent; `items`: as parsed) that a repeat on arrival is pointed
    to, by their original text, as `cluster.arrival_duplicates` finds them: the first sent
    as the client sent it, or minified."""
    found: dict[str, Item] = {}
    originals = {i.id: i for i in items}
    for item in final:
        made = decisions.get(item.id)
        if made is not None and made.reason != MINIFIED_JSON:
            continue
        original = originals.get(item.id, item)
        if arrival_item(original, min_chars, marked) and (
                made is not None or item.text == original.text):
            found.setdefault(original.text, item)
    return found


def index_lines(index: LineIndex, item: Item, latest: bool = False) -> None:
    """Add `item`'s lines to `index` (earlier items keep the lines they had first; with
    `latest`, a line goes to the latest item that has it: a state re-sent whole, edited,
    is one run of the newest copy rather than runs broken wherever a line is older). The
    task statement's lines go under keys of their own (`GOAL_LINE` before the line): a run
    of an output's lines repeats the outputs it came from, as before, and only a text that
    opens as the statement does reads them (`_runs`)."""
    prefix = GOAL_LINE if item.goal else ""
    for line in item.text.splitlines():
        if line.strip():
            if latest:
                index[prefix + line] = item
            else:
                index.setdefault(prefix + line, item)


def _marker(n: int, rep: Item) -> str:
    return (f"[ctxgate: {n} lines as in an earlier {rep.kind.replace('_', ' ')}: "
            f"{excerpt(rep, MARKER_EXCERPT)}]")


def _runs(lines: list[str], index: LineIndex) -> list[tuple[int, int, Item]]:
    """Maximal runs [start, end) of lines each blank or found in one same item (a run
    starts and ends on a found line). A line the task statement alone has counts only in
    a text that opens as that statement does (its first line: a queue's later task that
    re-sends the harness's template, `_opens_as`), never in an output; there it comes
    first, so the template's lines make one run rather than break where an output of an
    earlier task has one of them too."""
    head = next((line.strip() for line in lines if line.strip()), "")
    opens: dict[str, bool] = {}

    def found(line: str) -> Item | None:
        goal = index.get(GOAL_LINE + line)
        if goal is not None:
            same = opens.get(goal.id)
            if same is None:
                same = opens[goal.id] = _opens_as(goal.text, head)
            if same:
                return goal
        return index.get(line)

    runs = []
    i, n = 0, len(lines)
    while i < n:
        rep = found(lines[i]) if lines[i].strip() else None
        if rep is None:
            i += 1
            continue
        end = j = i + 1
        while j < n and (not lines[j].strip() or found(lines[j]) is rep):
            j += 1
            if lines[j - 1].strip():
                end = j
        runs.append((i, end, rep))
        i = end
    return runs


def _opens_as(text: str, head: str) -> bool:
    """Whether `text`'s first non-blank line, stripped, is `head` (`items.first_line`,
    without copying the rest of a long task statement)."""
    start = len(text) - len(text.lstrip()) if text[:1].isspace() else 0
    if not head or not text.startswith(head, start):
        return False
    rest = text[start + len(head): start + len(head) + 200]
    return rest.split("\n", 1)[0].strip() == ""


def without_repeated_lines(
    text: str, index: LineIndex, min_chars: int
) -> tuple[str, Item] | None:
    """`text` with each run of repeated lines of `min_chars` or more replaced by a marker,
    and the item the longest run repeats; None when no run is that long."""
    lines = text.splitlines()
    out: list[str] = []
    kept_to = 0
    best: tuple[int, Item] | None = None
    for start, end, rep in _runs(lines, index):
        chars = sum(len(line) + 1 for line in lines[start:end])
        if chars < min_chars:
            continue
        out += lines[kept_to:start]
        out.append(_marker(end - start, rep))
        kept_to = end
        if best is None or chars > best[0]:
            best = (chars, rep)
    if best is None:
        return None
    out += lines[kept_to:]
    new = "\n".join(out)
    return (new, best[1]) if len(new) < len(text) else None


def lines_decision(text: str, index: LineIndex, min_chars: int) -> Decision | None:
    """The decision that sends `text` without its runs of repeated lines, if it has any."""
    cut = without_repeated_lines(text, index, min_chars)
    if cut is None:
        return None
    return Decision("cluster", "dedup", REPEATED_LINES, "dedup", arg=cut[1].id, text=cut[0])


def minified(text: str) -> str | None:
    """`text` without the whitespace outside its strings and without its objects' null
    members when it is a JSON object or array that has either (the same value but for the
    members whose value is null, every string as it was), else None. A null member names
    no value a later call can use (an order's `"cancel_reason":null`, `"return_items":null`:
    a fifth of a tau2 retail order record), and leaving it out on arrival changes nothing
    already sent (bench/README.md, "Short runs' cost with prompt caching: where the gap to
    keep-1 goes")."""
    head = text.lstrip()[:1]
    if head not in ("{", "[") or not (":null" in text or ": null" in text
                                      or any(c in text for c in " \n\t\r")):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    out = _JSON_SPACE.sub(lambda m: m.group(1) or "", text)
    if ":null" in out:
        bare = _without_nulls(out)
        if bare != out and json.loads(bare) == _nulls_left_out(value):
            out = bare
    return out if len(out) < len(text) else None


_NULL_MEMBER = re.compile(r'("(?:[^"\\]|\\.)*")|([{,])"(?:[^"\\]|\\.)*":null(?=[,}])')
_OPEN_COMMA = re.compile(r'("(?:[^"\\]|\\.)*")|\{,')


def _without_nulls(out: str) -> str:
    """Minified JSON `out` without its objects' null members, every string as it was: a
    member led by a comma goes with it; an object's first one leaves its comma, taken
    after (`{"a":null,"b":1}` -> `{,"b":1}` -> `{"b":1}`)."""
    bare = _NULL_MEMBER.sub(lambda m: m.group(1) or ("{" if m.group(2) == "{" else ""), out)
    return _OPEN_COMMA.sub(lambda m: m.group(1) or "{", bare)


def _nulls_left_out(value: object) -> object:
    """The JSON value without its objects' null members (arrays keep their nulls)."""
    if isinstance(value, dict):
        return {k: _nulls_left_out(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_nulls_left_out(v) for v in value]
    return value


def minified_decision(text: str) -> Decision | None:
    """The decision that sends a new output's JSON without its layout, if it has any."""
    out = minified(text)
    if out is None:
        return None
    return Decision("cluster", "compress", MINIFIED_JSON, "dedup", text=out)
