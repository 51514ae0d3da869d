"""Old finished tool exchanges folded into a gateway note (long sessions).

On a long agent session, once old outputs are digests and placeholders, what is left of an
old exchange is mostly its structure: a Chat tool call's fixed JSON (`{"id", "type":
"function", "function": {"name", "arguments": "{\\"key\\": ...}"}}`) is ~100 characters
before any value, and its result message adds its own (tau-bench's 300-call ticket
queues: nothing that keeps old calls as calls got past ~72% smaller; bench/README.md,
"Old exchanges folded").

A *run* is one or more finished exchanges (an assistant message with tool calls, every
call answered by the tool messages right after it) between a user message and the
assistant's reply that closes the turn. A run behind the session's horizon
(`SessionState.horizon`, which only moves at a compaction step) is folded: its messages
leave the request, and the user message before it carries a note that says so, one line
per call with its name, its arguments' values and what its result was sent as (digest,
placeholder or text):

    {the user's message}
    [ctxgate: calls after this, folded]
    get_reservation_details(ABC123) → omitted; mentions: HAT001, 2024-05-01

The note is the gateway's, in a user message, in the placeholder style the engine uses
(`[ctxgate: …]`): it does not read as one of the model's own turns, so it does not invite
the model to answer with calls written as prose; roles still alternate (user, then the
assistant's reply) in every wire format, and no call is left without its result or a
result without its call (a run goes whole). A run with anything the gateway must not
rewrite (a pinned message: signed thinking, an opaque block; non-text content; a call
unanswered) stays as it is.

The second level (`fold_turns`): once folded, what is left of an old turn is a line or two
(a placeholder of the user's text, a one-sentence gist of the reply, the note), ~80
characters a message; an agent that walks a customer through settings by talk has hundreds
of such turns (tau2-bench telecom's queues: ~210 a late call, bench/README.md, "Telecom
ticket queues stop at ~69% late"). Two or more consecutive closed turns behind the horizon
(a user message and the assistant's reply without calls, neither pinned; the exchanges the
first level folded inside them included) go as one user message, the last turn's reply kept
after it so roles still alternate:

    [ctxgate: 3 turns folded]
    555-123-2002
    get_customer_by_phone(555-123-2002) → omitted
    P1001 5GB.

It keeps every value a placeholder or note names: a placeholder's mentions, a user text the
engine sent as it is (a digest: the lines it kept and its mentions, `digest_values`), the
fold notes' call lines (without their header; a free-text value of 160+ characters of
arguments cut to its start and its values), the words of a reply that carry a notable value
(`summarize.notable`), as written; a placeholder's excerpt, a digest's cuts and its lists of
omitted fields and records, and a reply's other words go. A line already in the note, or in an
earlier turns note of the call, is not repeated, nor a value it already has, nor a call
already there whose result named nothing new (bench/README.md, "Turns notes that repeat
nothing": telecom-4o's queue 71.4 -> 76.3% late). Every client message from the first
user message to the kept reply gets one event, reason `folded_turns` (the first
`compress`, down to the note's tokens, the others `drop`), replacing the ones they had.

In a text-tool agent's session the user gave later tasks (a queue: each task's statement
opens as the first one's, `Layout.task_starts`; an agent calling tools through the API is
left out, its notes keep every call's values), the fold stops at the start of the task the
horizon is in until the horizon is `mask_current_turns` turns into it (`task_bound`): a
young task the agent is still working on stays as its aged digests and masks, and a step
inside it does not fold its latest block anew, which broke the cached prefix from that
block on at every step (bench/README.md, "The fold leaves the current task alone").

In an API agent's queue on a later task (`Clock.task_statement`), the earlier tasks' runs
are noted with their call lines short as a turns note's are (`short_call`: values past
`LONG_ARGS` characters, their free text — a script, a message — cut to its start and the
words that carry a value): the current task's own runs keep every value. A done task's
scripts sent as tool-call arguments made its notes 30k characters and more, the room a
later task's calls then paid for (Toolathlon queues: cost @0.1 +0.1 to +2.4 points, recall
the same on every split; bench/README.md, "Toolathlon queues' recall, part thirty-one").

Folding depends only on the forwarded messages and the horizon, so between steps every
call folds the same runs into the same bytes (the prefix cache holds); `FoldMemo` keeps
the last call's result so a call between steps reads only its new messages. The drop log
still adds up: each folded message's events are replaced by one `compress` event (the
assistant message: down to its note lines' tokens) or `drop` event (a result: down to 0),
reason `folded_exchange`.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from operator import attrgetter, is_
from typing import Any

import orjson

from gateway.context.items import PINNED
from gateway.context.quoting import first_quote_edit, spent_texts
from gateway.context.render import Plan, with_content
from gateway.context.summarize import notable, shell_commands, values
from gateway.observability.droplog import Action, DropEvent, Kind

FOLD_REASON = "folded_exchange"
FOLD_HEAD = "[ctxgate: calls after this, folded]"  # on every note: kept short
TURNS_REASON = "folded_turns"  # a run of old turns folded into one note (fold_turns)
FOLD_REASONS = frozenset({FOLD_REASON, TURNS_REASON})
MIN_TURNS = 2  # turns a turns run folds at least (one turn gains nothing)
# A turns run starts no turn past a multiple of this many client messages from its first:
# a step's horizon changes only the run of its own block, the older ones stay byte for byte
# (one run from the session's start made every step re-send the whole call: tau2-bench
# retail-4.1 queues' cost @0.1 64.5 -> 58.5%; bench/README.md, "Old turns folded").
TURNS_BLOCK = 64
# An aged reply's code words a turns note names (a reply of a queue's earlier task only,
# `fold_turns`): those the agent's code typed in at least this many replies so far
# (`code_words`)
TYPED = 2
CODE_WORDS = 2  # and at most this many a note, the most typed first
# past those, up to this many a note of the words typed in at least `TYPED_MORE` replies
CODE_MORE = 4
TYPED_MORE = 3
# An agent that retypes its ended tasks' code words: of the code words (`code_words`) of each
# ended task, the share its replies of the next task typed again, over at least
# `RETYPED_WORDS` words. From `RETYPED_SHARE` on, an aged reply's note names every code word
# of it (no `TYPED` count, no cap): DA-Code's data-science agent retypes 29% of the words it
# typed once in a task in the very next one (`random_state`, `./load_data.py`; a queue's
# share 11-58%), mini-SWE-agent 6% (its tasks are other repositories; 18 of its 442 later
# tasks pass) (bench/README.md, "An agent that retypes its ended tasks' words").
RETYPED_SHARE = 0.15
RETYPED_WORDS = 20
TURNS_HEAD = re.compile(r"\[ctxgate: \d+ turns folded\]")  # a turns note's first line
_DIGEST_ONLY = re.compile(r"\[…\d+ lines\]")  # a digest's cut: it names nothing
# A digest's list of what it left out (`summarize._mentions`, `_with_line`), and its count of
# the rest
_LIST_LINE = re.compile(r"\[(omitted text mentions|omitted fields|records): (.*)\]")
_MORE = re.compile(r" \(\+\d+ more\)$")
_PLACEHOLDER = "[ctxgate: "

# Per client message index: its head item's id and its tokens as the client sent it.
Original = Callable[[int], tuple[str, int]]


@dataclass(frozen=True, slots=True)
class Run:
    """A foldable run: forwarded positions `user` (the message that carries the note) and
    `start`..`end` (exclusive: the exchanges' messages)."""

    user: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Folded:
    messages: list[Mapping[str, Any]]
    plan: Plan
    events: list[DropEvent]
    delta: int  # tokens_after change: the note's tokens less the folded messages'
    # the client message indexes whose events took the latest step among the call's events
    # (a run with no events of its own, or a turns run over one): folding the same messages
    # with a later step numbers them by that one (`renumbered`)
    floating: frozenset[int] = frozenset()


def _calls(msg: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    calls = msg.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return None
    if not all(isinstance(c, Mapping) and isinstance(c.get("id"), str)
               and isinstance(c.get("function"), Mapping) for c in calls):
        return None
    return calls


def _exchange_end(messages: Sequence[Mapping[str, Any]], k: int) -> int | None:
    """Where the finished exchange starting at messages[k] ends (exclusive), or None when
    messages[k] does not start one the gateway may fold."""
    msg = messages[k]
    if msg.get("role") != "assistant" or msg.get(PINNED):
        return None
    content = msg.get("content")
    calls = _calls(msg)
    if calls is None or not (content is None or isinstance(content, str)):
        return None
    ids = [str(c["id"]) for c in calls]
    if len(set(ids)) != len(ids):
        return None
    end = k + 1 + len(ids)
    if end > len(messages):
        return None
    answered = []
    for result in messages[k + 1:end]:
        if (result.get("role") != "tool" or result.get(PINNED)
                or not isinstance(result.get("content"), str)):
            return None
        answered.append(str(result.get("tool_call_id")))
    return end if sorted(answered) == sorted(ids) else None


def find_runs(messages: Sequence[Mapping[str, Any]], indexes: Sequence[int], horizon: int,
              start: int = 0) -> list[Run]:
    """The foldable runs of `messages` (message k is the client's `indexes[k]`) whose
    closing reply is a client message before `horizon`, looking from position `start`."""
    runs = []
    k, n = start, len(messages)
    while k < n and indexes[k] < horizon:
        msg = messages[k]
        if msg.get("role") != "user" or msg.get(PINNED) or not isinstance(
                msg.get("content"), str):
            k += 1
            continue
        j = k + 1
        while j < n:
            end = _exchange_end(messages, j)
            if end is None:
                break
            j = end
        reply = messages[j] if j < n else None
        if (j > k + 1 and reply is not None and reply.get("role") == "assistant"
                and not reply.get("tool_calls") and not reply.get(PINNED)
                and indexes[j] < horizon):
            runs.append(Run(k, k + 1, j))
        k = max(j, k + 1)
    return runs


def _value(value: Any) -> list[str]:
    """A JSON value's leaves, in order: strings as they are, the rest as JSON."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _value(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _value(v)]
    if isinstance(value, str):
        return [value]
    return [orjson.dumps(value).decode()]


def sent_as(text: str) -> str:
    """A result or a turn's text as the note shows it: a placeholder (`apply.placeholder`,
    `apply.gist`) as `omitted` and the values it names, without its excerpt of the start
    (the call's line names what it was) or its `[ctxgate: …]` frame (the note has one)."""
    if not (text.startswith(_PLACEHOLDER) and text.endswith("]")
            and text.count(_PLACEHOLDER) == 1):
        return text
    inner = text[len(_PLACEHOLDER):-1]
    head, sep, named = inner.rpartition("; mentions: ")
    if " omitted " not in f" {head or inner}"[:40]:
        return inner
    return f"omitted; mentions: {named}" if sep else "omitted"


def call_line(call: Mapping[str, Any], result: str) -> str:
    """One call as the note shows it: its name, its arguments' values, its result as sent
    (`sent_as`)."""
    function = call["function"]
    raw = function.get("arguments")
    try:
        parsed = orjson.loads(raw) if isinstance(raw, str) and raw else {}
    except orjson.JSONDecodeError:
        parsed = raw
    values = ", ".join(_value(parsed)) if isinstance(parsed, dict | list) else str(parsed)
    line = f"{function.get('name', '')}({values})"
    result = sent_as(result)
    return f"{line} → {result}" if result else line


def note_lines(messages: Sequence[Mapping[str, Any]], run: Run,
               short: bool = False) -> list[tuple[int, str]]:
    """Per assistant message of the run (its position): its part of the note; `short`:
    its call lines short (`short_call`), as a turns note's are."""
    out = []
    k = run.start
    while k < run.end:
        msg = messages[k]
        calls = _calls(msg) or []
        results = {str(m.get("tool_call_id")): str(m.get("content"))
                   for m in messages[k + 1:k + 1 + len(calls)]}
        lines = [f"\n{FOLD_HEAD}"] if k == run.start else []
        said = sent_as(str(msg.get("content") or "").strip())
        if said and said != "omitted":  # a turn's placeholder naming nothing says nothing
            lines.append(f"\n(assistant) {said}")
        for c in calls:
            line = call_line(c, results[str(c["id"])])
            lines.append(f"\n{short_call(line) if short else line}")
        out.append((k, "".join(lines)))
        k += 1 + len(calls)
    return out


# Per message of a run: its head item's id, its tokens as the client sent it, its part of
# the note (None: a result) and that part's tokens.
RunParts = list[tuple[str, int, str | None, int]]
RunCache = dict[int, tuple[tuple[Mapping[str, Any], ...], RunParts]]
UserCopies = dict[tuple[str, int], Mapping[str, Any]]  # (fold, client index) -> user message


# The events a fold made for the messages it folded, by client index: the last fold's, and
# this one's (`_event`).
FoldEvents = tuple[dict[int, DropEvent], dict[int, DropEvent]]


def _event(made: FoldEvents | None, i: int, action: Action, reason: str, item_id: str,
           kind: Kind, before: int, after: int, text: str, step: int) -> DropEvent:
    """Client message `i`'s fold event: the last fold's very object when it is equal (a
    step folds the same old messages again: the drop log then resumes past them by
    identity, and no event is built anew), put in `made`'s second map."""
    if made is None:
        return DropEvent(stage="compress", action=action, reason=reason, item_id=item_id,
                         kind=kind, message_index=i, tokens_before=before, tokens_after=after,
                         text=text, step=step)
    old = made[0].get(i)
    if (old is None or old.step != step or old.tokens_after != after
            or old.tokens_before != before or old.action != action or old.reason != reason
            or old.item_id != item_id or old.kind != kind or old.text != text):
        old = DropEvent(stage="compress", action=action, reason=reason, item_id=item_id,
                        kind=kind, message_index=i, tokens_before=before, tokens_after=after,
                        text=text, step=step)
    made[1][i] = old
    return old


def _user_copy(msg: Mapping[str, Any], key: tuple[str, int], text: str,
               users: tuple[UserCopies, UserCopies] | None) -> Mapping[str, Any]:
    """`msg` sent with `text` (its note added): an earlier fold's very copy when it is that
    (`users`: the earlier fold's copies, and this one's, which it is added to)."""
    if users is None:
        return {**msg, "content": text}
    copy = users[1][key] = with_content(msg, text, users[0].get(key))
    return copy


def _run_parts(messages: Sequence[Mapping[str, Any]], entries: Plan, run: Run,
               original: Original, count: Callable[[str], int], cache: RunCache,
               made: RunCache, short_before: int = -1) -> RunParts:
    """`run`'s parts, taken from `cache` when its messages are the very objects they were
    made from (a step re-renders only what it changed), else made; put in `made`. A run
    that ends before client message `short_before` has its call lines short (its parts
    cached apart: a later task's statement makes an earlier run's notes short)."""
    short = entries[run.end - 1][0] < short_before
    key = -1 - entries[run.start][0] if short else entries[run.start][0]
    msgs = tuple(messages[run.start:run.end])
    known = cache.get(key)
    if known is not None and len(known[0]) == len(msgs) and all(map(is_, known[0], msgs)):
        made[key] = known
        return known[1]
    lines = dict(note_lines(messages, run, short))
    parts: RunParts = []
    for k in range(run.start, run.end):
        item_id, before = original(entries[k][0])
        text = lines.get(k)
        parts.append((item_id, before, text, count(text) if text is not None else 0))
    made[key] = (msgs, parts)
    return parts


def fold_runs(
    messages: Sequence[Mapping[str, Any]],
    entries: Plan,
    events: Sequence[DropEvent],
    runs: Sequence[Run],
    original: Original,
    count: Callable[[str], int],
    cache: RunCache | None = None,
    users: tuple[UserCopies, UserCopies] | None = None,
    short_before: int = -1,
    made_events: FoldEvents | None = None,
) -> tuple[Folded, RunCache]:
    """`messages` with `runs` folded: the messages, their plan (`entries`: the plan
    `messages` were rendered by, one entry per message), the events with each folded
    message's replaced, and the change to the call's tokens; and the runs' parts made
    (`cache`: those of an earlier fold, taken where their messages are the same).
    `users`: an earlier fold's user messages with their notes (by `_user_copy`'s keys), each
    taken again where it is the copy this fold makes (`render.with_content`), and where this
    fold's go. `short_before`: the runs ending before this client message have their call
    lines short (`short_call`; -1: none). `made_events`: as `_event` takes them."""
    by_index: dict[int, list[DropEvent]] = {}
    for event in events:
        if event.message_index is not None:
            by_index.setdefault(event.message_index, []).append(event)
    latest = max((e.step for e in events), default=0)
    notes: dict[int, tuple[int, str]] = {}  # user position -> end of its run, its note
    new_events: dict[int, DropEvent] = {}
    made: RunCache = {}
    delta = 0
    floating: set[int] = set()
    for run in runs:
        parts = _run_parts(messages, entries, run, original, count, cache or {}, made,
                           short_before)
        olds = [by_index.get(entries[k][0], ()) for k in range(run.start, run.end)]
        step = max((e.step for old in olds for e in old), default=-1)
        if step < 0:
            step = latest
            floating.update(entries[k][0] for k in range(run.start, run.end))
        for k, (item_id, before, text, after), old in zip(
                range(run.start, run.end), parts, olds, strict=True):
            i = entries[k][0]
            msg = messages[k]
            new_events[i] = _event(
                made_events, i, "compress" if text is not None else "drop", FOLD_REASON,
                item_id, "tool_call" if msg.get("role") == "assistant" else "tool_result",
                before, after, str(msg.get("content") or ""), step)
            delta += after - (before - sum(e.tokens_saved for e in old))
        notes[run.user] = (run.end, "".join(p[2] for p in parts if p[2] is not None))
    out_messages: list[Mapping[str, Any]] = []
    plan: Plan = []
    k, n = 0, len(messages)
    for user in sorted(notes):
        out_messages += messages[k:user]
        plan += entries[k:user]
        end, note = notes[user]
        text = str(messages[user].get("content")) + note
        out_messages.append(_user_copy(messages[user], ("runs", entries[user][0]), text, users))
        plan.append((entries[user][0], text))
        k = end
    out_messages += messages[k:n]
    plan += entries[k:n]
    out_events = [e for e in events if e.message_index not in new_events]
    out_events += new_events.values()
    out_events.sort(key=lambda e: -1 if e.message_index is None else e.message_index)
    return Folded(out_messages, plan, out_events, delta, frozenset(floating)), made


def _turn(messages: Sequence[Mapping[str, Any]], indexes: Sequence[int], k: int,
          horizon: int) -> bool:
    """Whether messages[k] and messages[k + 1] are a closed turn behind `horizon` that a
    turns run may take: a user message (text, a fold note's included) and the assistant's
    reply to it, without calls, neither pinned."""
    if k + 1 >= len(messages) or indexes[k + 1] >= horizon:
        return False
    user, reply = messages[k], messages[k + 1]
    text = user.get("content")
    if user.get("role") != "user" or user.get(PINNED) or not isinstance(text, str):
        return False
    said = reply.get("content")
    return (reply.get("role") == "assistant" and not reply.get(PINNED)
            and not reply.get("tool_calls") and (said is None or isinstance(said, str)))


def find_turn_runs(messages: Sequence[Mapping[str, Any]], indexes: Sequence[int],
                   horizon: int) -> list[Run]:
    """Runs of `MIN_TURNS` or more consecutive closed turns behind `horizon` (message k is
    the client's `indexes[k]`): `user` the first turn's user message (it carries the
    note), `start`..`end` the messages that leave, `end` the last turn's reply (it stays,
    so roles still alternate)."""
    runs = []
    k, n = 0, len(messages)
    while k < n and indexes[k] < horizon:
        j, block = k, indexes[k] // TURNS_BLOCK
        while _turn(messages, indexes, j, horizon) and indexes[j] // TURNS_BLOCK == block:
            j += 2
        if (j - k) // 2 >= MIN_TURNS:
            runs.append(Run(k, k + 1, j - 1))
        k = max(j, k + 1)
    return runs


_CALL_LINE = re.compile(r"([^\s(]+)\((.*?)\)(?: → (.*))?", re.S)  # name(values) → result
_FRAME = "\"'`*()[]{}<>,;!?"  # around a word: markup and punctuation, not part of a value
_OPENER = {")": "(", "]": "[", "}": "{", ">": "<"}  # a closing bracket: the one it closes
LONG_ARGS = 160  # a call line's values past this many characters: its prose pieces cut
PROSE_PIECE = 40  # a value (a piece between ", ") longer than this is cut to its values
_POINTER = ("repeats an earlier ", "nearly repeats an earlier ")  # `apply.pointer`, framed off
WORDS_CACHED = 16_384  # distinct words whose value (`_value_word`) is kept, each of at most
WORD_CHARS = 100  # characters (~5 MB in all); a longer word (a blob) is searched every time


@dataclass(slots=True)
class Earlier:
    """What the call's turns notes before this one have (`fold_turns` reads them in order):
    their text and their lines. A later note does not repeat them."""

    text: str = ""
    lines: set[str] = field(default_factory=set)

    def take(self, note: str) -> None:
        self.text += "\n" + note
        self.lines.update(note.split("\n")[1:])


def _adds_nothing(line: str, known: Callable[[str], bool]) -> bool:
    """Whether a fold note's call line names nothing that is not `known` already: the call
    (its name and values) is, and its result was sent as a placeholder whose values are
    too, or as a pointer to an earlier copy."""
    m = _CALL_LINE.fullmatch(line)
    if m is None or not known(f"{m.group(1)}({m.group(2)})"):
        return False
    result = m.group(3) or ""
    if result == "omitted" or result.startswith(_POINTER):
        return True
    named = result.removeprefix("omitted; mentions: ")
    return named != result and all(map(known, named.split()))


def _unframed(word: str) -> str:
    """`word` without the markup and punctuation around it (`(x)` → `x`), but for a closing
    bracket that closes one opened inside it: `f(x),` → `f(x)`, `click[B0X]` as written."""
    head = word.lstrip(_FRAME)
    end = len(head.rstrip(_FRAME))
    for at in range(end, len(head)):
        opener = _OPENER.get(head[at])
        if opener and head.count(opener, 0, at) > head.count(head[at], 0, at):
            end = at + 1
    return head[:end]


def _value_word(word: str) -> str | None:
    """`word` (one of a text's whitespace-split words) without its frame (`_unframed`),
    or None when it carries no notable value."""
    unframed = _unframed(word)
    return unframed if any(notable(v) for v in values(unframed)) else None


# A pure function of the word, and a step's fold notes read the same words again and again
# (a script's names and paths: 2,000 distinct words in 31,000 on the Toolathlon deepseek
# queue's longest session): each distinct short word is framed and searched once
# (bench/README.md, "part thirty-eight").
_known_word = functools.lru_cache(maxsize=WORDS_CACHED)(_value_word)


def value_words(text: str) -> list[str]:
    """The words of `text` that carry a notable value (`summarize.notable`), as written
    but for the markup and punctuation around them (`4G/5G.` keeps its period and
    `click[B0X]` its bracket: a value is re-typed as it was written), once each."""
    words = (_known_word(w) if len(w) <= WORD_CHARS else _value_word(w) for w in text.split())
    return list(dict.fromkeys(w for w in words if w is not None))


_PATTERN = re.compile(r"/[A-Za-z_]")  # a slash opening a name: `/def`, `:/if`, `/DEBUG:/d`


def pattern_words(reply: str) -> list[str]:
    """The words of a shell turn's command lines (a masked turn's `$ ` lines, its fenced
    shell blocks' first lines, `summarize.shell_commands`) that open a `sed`/`grep` pattern
    or address on a name (`sed -n '/def parse_expr/,/return/p'`: `/def`; `s/Q):/if x/`) and
    carry no notable value besides, as written but for their frame, once each. The value
    search (`value_words`) reads `/def` as the plain word `def` and leaves it out, though
    the agent re-types its way of finding code in its next tasks (mini-SWE-agent queues:
    `/def`, `/class`, `:/if` 0.06 point of the earlier tasks' loss; bench/README.md,
    "mini-SWE-agent queues' recall, part 3")."""
    lines = [line for line in reply.splitlines() if line.startswith("$ ")]
    words = (_unframed(w) for line in [*lines, *shell_commands(reply)] for w in line.split())
    return list(dict.fromkeys(w for w in words if _PATTERN.search(w) and _value_word(w) is None))


_NAME_CUT = re.compile(r"[^\w./-]+")  # what joins a code word's names: `=`, `(`, quotes
_COMPOUND = re.compile(r"[A-Za-z][_./]\w|\w[_./][A-Za-z]")  # `test_size`, `df.fit`, `./a.py`
_CALLS = re.compile(r"\w\(")  # a line outside a fence that calls something: `f(x=1)`


@functools.lru_cache(maxsize=4096)
def code_words(reply: str) -> tuple[str, ...]:
    """The words that carry a notable value (`value_words`) of a reply's code lines as the
    client sent it: its fenced blocks' lines and the lines outside a fence that call
    something (a text action, `run(file="./a.py")`), once each. A turns note reads the
    reply as last sent, which an aged reply's placeholder or digest had cut to nothing: the
    agent re-types its own code words (`random_state`, `test_size`, its script names) in
    its next tasks (DA-Code queues; bench/README.md, "A turns note keeps its code words")."""
    lines: list[str] = []
    fenced = False
    for line in reply.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced or _CALLS.search(line):
            lines.append(line)
    return tuple(dict.fromkeys(
        n for w in value_words("\n".join(lines)) for n in _NAME_CUT.split(w)
        if _COMPOUND.search(n) and _value_word(n) is not None))


def short_call(line: str) -> str:
    """A fold note's call line whose values run past `LONG_ARGS` characters, its free text
    (a summary, a message: a value past `PROSE_PIECE` characters, and the lower-case pieces
    with a space right after it, which its own commas split off) cut to its start and the
    words that carry a value; the other values (names, ids, dates) stay whole."""
    m = _CALL_LINE.fullmatch(line)
    if m is None or len(m.group(2)) <= LONG_ARGS:
        return line
    out: list[str] = []
    prose: list[str] | None = None  # the free text being cut: its start, then its values
    for piece in m.group(2).split(", "):
        if len(piece) > PROSE_PIECE or (prose is not None and " " in piece
                                        and piece[0].islower()):
            if prose is None:
                start = piece[:PROSE_PIECE].rpartition(" ")[0] or piece[:PROSE_PIECE]
                prose = [f"{start}…"]
                out.append("")
                piece = piece[len(start):]
            prose += (w for w in value_words(piece) if w not in prose)
            out[-1] = " ".join(prose)
        else:
            prose = None
            out.append(piece)
    result = m.group(3)
    return f"{m.group(1)}({', '.join(out)})" + (f" → {result}" if result is not None else "")


def digest_values(text: str) -> str | None:
    """What a turns note sends of a digest (`summarize`'s: a text with a `[…N lines]` cut or
    a list of what it left out; None: `text` is none): the lines it kept, as they are; the
    values its mention list names go on the note's values line (`turns_note`), as a
    placeholder's do; its cuts and its lists of omitted fields and records go. A turns note
    is what is left of turns the agent acted on long ago (a queue's earlier tasks, mostly):
    a digest kept whole there re-sent a 32k page's ~8k of field and record lists on every
    later call (TapeAgents' GAIA queues: 13 pages of one old task, a 56k note;
    bench/README.md, "Digests in a turns note")."""
    lines = text.split("\n")
    if not any(_DIGEST_ONLY.fullmatch(line) or _LIST_LINE.fullmatch(line) for line in lines):
        return None
    return "\n".join(line for line in lines
                     if not _DIGEST_ONLY.fullmatch(line) and not _LIST_LINE.fullmatch(line))


def mentioned(text: str) -> list[str]:
    """The values a digest's mention list names (`[omitted text mentions: a b (+N more)]`)."""
    return [v for line in text.split("\n") if (listed := _LIST_LINE.fullmatch(line))
            and listed.group(1) == "omitted text mentions"
            for v in _MORE.sub("", listed.group(2)).split()]


# A fold note's line that opens an entry (`note_lines`): a call line (`name(`) or a said text
_ENTRY = re.compile(r"[^\s(]+\(|\(assistant\) ")
_RESULT = ") → "  # where a call line's values end and its result starts (`call_line`)
# Lines of a call's text (a file written whole, a script) a turns note leaves out when the
# call's notes already have them as one run: this many or more, this many characters or
# more (a short run, `    fi` and a blank line, is in every script: left out, it cut the
# quotes around it)
QUOTED_BLOCK = 3
QUOTED_CHARS = 100


def _code(raw: Sequence[str], i: int) -> bool:
    """Whether the lines of `raw` from `i` to the next entry (`_ENTRY`) have an indented
    one: a text of code, which a later edit quotes with its indentation."""
    for line in raw[i:]:
        if _ENTRY.match(line):
            return False
        if line[:1] in (" ", "\t") and line.strip():
            return True
    return False


def _block_end(raw: Sequence[str], i: int, seen: set[str],
               known: Callable[[str], bool]) -> int:
    """The end of the longest run of `raw`'s lines from `i` that are continuation lines
    (no entry opens there), all `seen`, and together `known` as one text, when it spans
    `QUOTED_BLOCK` lines and `QUOTED_CHARS` characters or more; else `i`."""
    j = i
    while (j < len(raw) and raw[j] in seen and not _ENTRY.match(raw[j])
           and (j + 1 - i < QUOTED_BLOCK or known("\n".join(raw[i:j + 1])))):
        j += 1
    while j - i >= QUOTED_BLOCK and not known("\n".join(raw[i:j])):
        j -= 1
    long = j - i >= QUOTED_BLOCK and sum(len(line.strip()) for line in raw[i:j]) >= QUOTED_CHARS
    return j if long else i


def _spent_lines(raw: Sequence[str], spent: Sequence[tuple[str, bool]]) -> set[int]:
    """The lines of `raw` (a fold note's) inside the `spent` texts where a call's values
    have them as one: opened by the call or by the value before (`(`, `, `), followed by
    another value (`, `; an edit's quote comes before the text put in its place, which may
    begin with it) or, when no value follows, by the call's end; all but the first and
    last line, which share a line with the values beside it."""
    gone: set[int] = set()
    for text, followed in spent:
        parts = text.split("\n")
        size = len(parts)
        if size < 3:
            continue
        ends = (f"{parts[-1]}, ",) if followed else (f"{parts[-1]}, ", f"{parts[-1]})")
        for p in range(len(raw) - size + 1):
            if (raw[p].endswith((f"({parts[0]}", f", {parts[0]}"))
                    and raw[p + 1:p + size - 1] == parts[1:-1]
                    and raw[p + size - 1].startswith(ends)):
                gone.update(range(p + 1, p + size - 1))
    return gone


def turns_note(messages: Sequence[Mapping[str, Any]], run: Run,
               earlier: Earlier | None = None, written: Sequence[str] = (),
               typed: Mapping[str, int] | None = None, every: bool = False,
               quoted: bool = False, spent: Sequence[tuple[str, bool]] = ()) -> str:
    """What a turns run is sent as: a header and what its turns named, once each in the
    call (`earlier`: the call's turns notes before it) — a user text as sent (a
    placeholder: only the values it mentions; a digest: its kept lines and its mentions,
    `digest_values`), the
    fold notes' lines (a call already there whose result named nothing new: gone), the
    words of a reply that carry a notable value (`summarize.notable`), as written; the
    rest of a reply's words and a placeholder's excerpt go. `written`: the run's messages
    as the client sent them (from `run.user`; empty: not known): a reply sent aged also
    names its code words as written (`code_words`) that are `typed` (in two replies'
    code so far: what the agent types again; its scripts' one-off names rarely), at most
    `CODE_WORDS` (`CODE_MORE`) a note; `every`: all of them (an agent that retypes its
    earlier tasks' words, `retyped`). `quoted`: an agent that edits by exact text
    (`quoting.first_quote_edit`): its calls' code texts go quotable (`add_calls`), but
    for the `spent` ones (`quoting.spent_texts`: an edit's quote, a command)."""
    before = earlier or Earlier()
    lines: list[str] = []
    seen: set[str] = set(before.lines)
    note = ""
    code: list[str] = []  # the aged replies' typed code words (`written`)
    times = typed or {}

    def add(line: str) -> None:
        nonlocal note
        if line and line not in seen:
            seen.add(line)
            lines.append(line)
            note += "\n" + line

    def known(value: str) -> bool:
        return value in note or value in before.text

    def add_calls(raw: list[str]) -> None:
        """A fold note's lines, `quoted`: an entry's first line (a call, a said text) as
        the base sends it (once in the call, stripped); the further lines of a call's
        values that are code (`_code`) as written, indentation, blank and repeated lines
        kept, but for a run the call's notes already have as one text (`_block_end`): a
        run of lines kept stays a substring of the text. The rest as the base."""
        nonlocal note
        in_call = False
        i, n = 0, len(raw)
        gone = _spent_lines(raw, spent)
        while i < n:
            line = raw[i]
            if (not line and not in_call) or _ENTRY.match(line):
                # a call's values: its text up to its result (`call_line`'s ` → `), when
                # it is code (an indented line before the next entry)
                in_call = (bool(line) and not line.startswith("(assistant) ")
                           and _RESULT not in line and _code(raw, i + 1))
                stripped = line.strip()
                if not _adds_nothing(stripped, known):
                    add(short_call(stripped))
                i += 1
                continue
            if not in_call:
                add(line.strip())
                i += 1
                continue
            j = _block_end(raw, i, seen, known)
            if j > i:
                in_call = not any(_RESULT in x for x in raw[i:j])
                i = j
                continue
            if i in gone:  # a spent text's line: as the base sends it
                in_call = _RESULT not in line
                add(line.strip())
                i += 1
                continue
            seen.add(line)
            lines.append(line)
            note += "\n" + line
            in_call = _RESULT not in line
            i += 1

    for k in range(run.user, run.end, 2):
        text = str(messages[k].get("content"))
        head, _, calls = text.partition(f"\n{FOLD_HEAD}")
        said = sent_as(head.strip())
        named: list[str] = []
        if said.startswith("omitted; mentions: "):
            named += said.removeprefix("omitted; mentions: ").split()
        elif (kept := digest_values(said)) is not None:
            add(kept)
            named += mentioned(said)
        elif said != "omitted":
            add(said)
        if quoted:
            add_calls(calls.split("\n"))
        else:
            for line in calls.split("\n"):
                line = line.strip()
                if not _adds_nothing(line, known):
                    add(short_call(line))
        add(" ".join(dict.fromkeys(v for v in named if not known(v))))
        reply = str(messages[k + 1].get("content") or "")
        words = [*value_words(reply), *pattern_words(reply)]
        add(" ".join(w for w in dict.fromkeys(words) if not known(w)))
        client = written[k + 1 - run.user] if k + 1 - run.user < len(written) else reply
        if client != reply:
            code += (w for w in code_words(client) if w in times)
    code = [w for w in dict.fromkeys(code) if not known(w)]
    ranked = sorted(code, key=lambda w: -times[w])
    add(" ".join(w for n, w in enumerate(ranked) if every or (
        n < CODE_MORE and (n < CODE_WORDS or times[w] >= TYPED_MORE))))
    return f"[ctxgate: {(run.end - run.user + 1) // 2} turns folded]{note}"  # TURNS_HEAD


# A turns run's note and its tokens by what `turns_note` reads: the call's earlier turns
# notes and the contents of the run's messages, its user message to its last reply.
NoteCache = dict[tuple[Any, ...], tuple[str, int]]


def _turns_note(messages: Sequence[Mapping[str, Any]], run: Run, count: Callable[[str], int],
                cache: NoteCache | None, made: NoteCache | None,
                earlier: Earlier, written: Sequence[str] = (),
                typed: Mapping[str, int] | None = None,
                every: bool = False, quoted: bool = False,
                spent: Sequence[tuple[str, bool]] = ()) -> tuple[str, int]:
    """`turns_note` of `run` and its tokens, taken from `cache` when the run's contents and
    the notes before it are the ones it was made from (a step re-makes only the notes of
    the runs it changed and after: the older blocks' stay byte for byte), else made; put
    in `made`."""
    key = (earlier.text, *(m.get("content") for m in messages[run.user:run.end + 1]),
           *written, *sorted((typed or {}).items()), every, quoted, tuple(spent))
    known = cache.get(key) if cache is not None else None
    if known is None:
        text = turns_note(messages, run, earlier, written, typed, every, quoted, spent)
        known = (text, count(text))
    if made is not None:
        made[key] = known
    return known


def retyped(client: Sequence[Mapping[str, Any]], starts: Sequence[int],
            task: int) -> list[bool]:
    """Per task of a queue up to the current one (`starts`: each later task's first client
    message, `Layout.task_starts`; `task`: the current one's), whether by then the agent
    had shown it retypes its ended tasks' code words: of the code words (`code_words`) of
    each task before it, the share the next task's replies typed again is at least
    `RETYPED_SHARE`, over `RETYPED_WORDS` words or more. It reads only tasks that have
    ended, so a task's answer stays as the queue goes on (its notes do not change)."""
    tasks: list[set[str]] = [set() for _ in range(bisect_right(starts, task) + 1)]
    for i, message in enumerate(client[:task]):
        if message.get("role") == "assistant":
            tasks[bisect_right(starts, i)].update(code_words(str(message.get("content") or "")))
    out = [False]
    words = again = 0
    for before, after in pairwise(tasks[:-1]):
        words += len(before)
        again += len(before & after)
        out.append(words >= RETYPED_WORDS and again >= RETYPED_SHARE * words)
    return out


def fold_turns(folded: Folded, runs: Sequence[Run], original: Original,
               count: Callable[[str], int], cache: NoteCache | None = None,
               made: NoteCache | None = None,
               users: tuple[UserCopies, UserCopies] | None = None,
               made_events: FoldEvents | None = None,
               client: Sequence[Mapping[str, Any]] = (), task: int = -1,
               starts: Sequence[int] = ()) -> Folded:
    """`folded` with each turns run's messages but its last reply gone and its first user
    message sent as the run's note (`turns_note`); every client message from that one to
    the last reply (the exchanges an earlier fold took included) gets one event, reason
    `folded_turns`: the first `compress`, down to the note's tokens, the others `drop`.
    `cache`: the notes of an earlier fold, by their runs' contents; the notes this fold
    made or took go in `made`. `users`, `made_events`: as `fold_runs` takes them.
    `client`: the client's messages; `task`: a queue's current task's start (client index,
    `Layout.task_starts`; -1: the first task). A reply before it, of a task that has ended,
    is noted with its typed code words as written (`turns_note`): the agent retypes an
    earlier task's names in the next ones (DA-Code queues), while inside one task its
    recent code still carries them: words added there cost AutoCodeRover's queues up to
    0.13 point of cost @0.1 for no recall (bench/README.md, "Code words of a queue's
    earlier tasks only"). `starts`: every later task's start (`Layout.task_starts`): an
    agent that retypes its ended tasks' words gets all of an aged reply's noted."""
    messages, plan = folded.messages, folded.plan
    by_index: dict[int, list[DropEvent]] = {}
    for event in folded.events:
        if event.message_index is not None:
            by_index.setdefault(event.message_index, []).append(event)
    latest = max((e.step for e in folded.events), default=0)
    new_events: dict[int, DropEvent] = {}
    notes: dict[int, tuple[int, str]] = {}
    delta = folded.delta
    floating = set(folded.floating)
    earlier = Earlier()
    times: dict[str, int] = {}  # per code word: the client replies so far whose code has it
    read = 0  # the client messages `times` has counted
    shown = retyped(client, starts, task) if client and starts else []
    edited = first_quote_edit(client, plan[runs[-1].end][0] + 1) if client and runs else -1
    for run in runs:
        first, last = plan[run.user][0], plan[run.end][0]
        written: tuple[str, ...] = ()
        typed: dict[str, int] = {}
        every = False
        if client and first < task:
            every = bool(shown) and shown[bisect_right(starts, first)]
            written = tuple(str((client[plan[p][0]] if plan[p][0] < task else messages[p])
                                .get("content") or "") for p in range(run.user, run.end + 1))
            for reply in client[read:plan[run.end][0] + 1]:
                if reply.get("role") == "assistant":
                    for word in code_words(str(reply.get("content") or "")):
                        times[word] = times.get(word, 0) + 1
            read = max(read, plan[run.end][0] + 1)
            typed = {w: times[w] for text in written[1::2] for w in code_words(text)
                     if every or times.get(w, 0) >= TYPED}
        quoted = 0 <= edited <= last
        spent = spent_texts(client, first, last + 1) if quoted else []
        text, tokens = _turns_note(messages, run, count, cache, made, earlier, written,
                                   typed, every, quoted, spent)
        olds: dict[int, Sequence[DropEvent]] = {
            i: by_index.get(i, []) for i in range(first, last)}
        heads = {i: original(i) for i in range(first, last)}
        sent = {plan[p][0]: messages[p] for p in range(run.user, run.end)}
        now = sum(heads[i][1] - sum(e.tokens_saved for e in olds[i]) for i in olds)
        if tokens >= now:
            continue
        step = max((e.step for old in olds.values() for e in old), default=-1)
        if step < 0 or not floating.isdisjoint(olds):  # the latest step, or one taken from it
            step = latest
            floating.update(olds)
        for i in range(first, last):
            item_id, before = heads[i]
            msg = sent.get(i)  # None: an exchange an earlier fold took (it has events)
            kind: Kind = olds[i][0].kind if olds[i] else (
                "user" if msg is not None and msg.get("role") == "user" else "assistant")
            new_events[i] = _event(
                made_events, i, "compress" if i == first else "drop", TURNS_REASON, item_id,
                kind, before, tokens if i == first else 0,
                str(msg.get("content") or "") if msg is not None else "", step)
        delta += tokens - now
        notes[run.user] = (run.end, text)
        earlier.take(text)
    if not notes:
        return folded
    out_messages: list[Mapping[str, Any]] = []
    out_plan: Plan = []
    k = 0
    for user in sorted(notes):
        out_messages += messages[k:user]
        out_plan += plan[k:user]
        end, text = notes[user]
        out_messages.append(_user_copy(messages[user], ("turns", plan[user][0]), text, users))
        out_plan.append((plan[user][0], text))
        k = end
    out_messages += messages[k:]
    out_plan += plan[k:]
    out_events = [e for e in folded.events if e.message_index not in new_events]
    out_events += new_events.values()
    out_events.sort(key=lambda e: -1 if e.message_index is None else e.message_index)
    return Folded(out_messages, out_plan, out_events, delta, frozenset(floating))


@dataclass
class FoldMemo:
    """The last call's fold, kept with the session's prefix: a call between steps (the same
    horizon, its forwarded messages the last call's extended, the drop events of the
    messages before the horizon the same) takes it and appends its new messages, which
    are all after the horizon (its plan grows in place, as the prefix's does). A step's
    call takes the parts of each run whose messages it sends as the same objects."""

    horizon: int = -1
    source: list[Mapping[str, Any]] = field(default_factory=list)
    events: Sequence[DropEvent] | None = None
    folded: Folded | None = None  # None: nothing to fold, while the rest holds
    # the latest step among the call's events that `folded`'s floating events carry
    # (`Folded.floating`); None: it has none, whatever the latest step
    latest: int | None = None
    head_step: int = 0  # the latest step among the events before the horizon (`events`')
    runs: RunCache = field(default_factory=dict)
    notes: NoteCache = field(default_factory=dict)  # the last fold's turns notes
    # per client message index: the message, the encoding, its `Original` (a step's fold
    # reads every folded message's: a message object seen before is a lookup)
    heads: dict[int, tuple[Mapping[str, Any], str, tuple[str, int]]] = field(
        default_factory=dict)
    # the last fold's user messages with their notes, by client index: a step's fold that
    # makes the very same copy sends that one again (the body encoder's runs and the short
    # ids' memo go by identity)
    users: UserCopies = field(default_factory=dict)
    # the last fold's events of the messages it folded, by client index, of each level
    # (`fold_runs`', `fold_turns`'): a step's fold that makes an equal one sends that one
    # again (`_event`)
    made: tuple[dict[int, DropEvent], dict[int, DropEvent]] = field(
        default_factory=lambda: ({}, {}))

    def original(self, messages: Sequence[Mapping[str, Any]], encoding: str,
                 head: Callable[[int], tuple[str, int]]) -> Original:
        """`head` (message i's `Original`), taken from the memo for a message it was
        computed for (the same object, held here, and encoding)."""
        heads = self.heads

        def original(i: int) -> tuple[str, int]:
            msg = messages[i]
            known = heads.get(i)
            if known is not None and known[0] is msg and known[1] == encoding:
                return known[2]
            found = head(i)
            heads[i] = (msg, encoding, found)
            return found

        return original


def _head(events: Sequence[DropEvent], horizon: int) -> int:
    """How many of `events` (in message order) are of messages before `horizon`."""
    return bisect_left(events, horizon, key=lambda e: -1 if e.message_index is None
                       else e.message_index)


def _same_head(old: Sequence[DropEvent] | None, events: Sequence[DropEvent],
               horizon: int) -> bool:
    """Whether `events` have the very `old` events for the messages before `horizon`, or
    equal ones (a call that rendered those messages' events anew, as a full path's call
    between steps does from its prefix's last mark): folding them again would fold the
    same, but for the step its floating events take (`renumbered`)."""
    if old is events:
        return True
    if old is None:
        return False
    p = _head(old, horizon)
    if _head(events, horizon) != p:
        return False
    # one list compare: it takes the very same event as equal without comparing its fields
    # (C speed, as a walk of identities was not: a Python-level call per pair)
    return old[:p] == events[:p]


_step = attrgetter("step")


def renumbered(folded: Folded, events: Sequence[DropEvent], latest: int) -> list[DropEvent]:
    """`events` (`folded`'s, of the messages before its horizon) with its floating events
    numbered by `latest`, as folding them again with that latest step numbers them: a
    call's fold is numbered by the call's own events, whichever path rendered them."""
    floating = folded.floating
    return [replace(e, step=latest) if e.message_index in floating and e.step != latest
            else e for e in events]


def _same_start(source: list[Mapping[str, Any]], messages: list[Mapping[str, Any]]) -> bool:
    """Whether `messages` start with `source`: the very objects (a session's calls through
    the chat route), else equal ones (a wire adapter's view is made anew for every call:
    comparing is far cheaper than folding again). One list compare takes both: it takes the
    very same message as equal without comparing it (C speed, as a walk of identities,
    a Python-level call per pair, was not)."""
    return source == messages[:len(source)]


def fold(
    messages: list[Mapping[str, Any]],
    plan: Plan | None,
    events: list[DropEvent],
    horizon: int,
    original: Original,
    count: Callable[[str], int],
    memo: FoldMemo,
    gate: Callable[[], bool] = lambda: True,
    short_before: int = -1,
    client: Sequence[Mapping[str, Any]] = (),
    task: int = -1,
    starts: Sequence[int] = (),
) -> Folded | None:
    """The forwarded `messages` (rendered by `plan`; None: all as sent) with the runs
    behind `horizon` folded, or None when there is none or `gate` (asked only when the
    horizon or the messages before it changed) says no. `memo` is read and updated.
    `short_before`: an API agent's queue's current task statement (client index, -1:
    none), the runs before it noted with their call lines short (`short_call`).
    `client`, `task`: the client's messages and a queue's current task's start, the runs'
    replies before it noted with their code words (`fold_turns`)."""
    n, last = len(memo.source), memo.folded
    if (memo.horizon == horizon and 0 < n <= len(messages)
            and _same_start(memo.source, messages)
            and _same_head(memo.events, events, horizon)):
        if last is not None and (len(messages) > n or memo.events is not events):
            last.plan.extend(_entries(plan, n, len(messages)))
            kept = last.events[:_head(last.events, horizon)]
            p = _head(events, horizon)
            if memo.latest is not None and memo.events is not events:
                # numbered by this call's latest step, as a fold made anew numbers them (the
                # events before the horizon are the memo's: only the later ones are read)
                latest = max(memo.head_step, max(map(_step, events[p:]), default=0))
                if latest != memo.latest:
                    kept, memo.latest = renumbered(last, kept, latest), latest
            last = replace(last, messages=last.messages + messages[n:],
                           events=last.events if memo.events is events else kept + events[p:])
        memo.source, memo.folded, memo.events = list(messages), last, events
        return last
    memo.horizon, memo.events, memo.source, memo.folded = horizon, events, list(messages), None
    memo.latest = None
    if not gate():
        return None
    entries = _entries(plan, 0, len(messages))
    runs = find_runs(messages, [i for i, _ in entries], horizon)
    folded = Folded(messages, entries, events, 0)
    # the last fold's note copies, and this one's (only these are kept)
    users: tuple[UserCopies, UserCopies] = (memo.users, {})
    memo.users = users[1]
    made: tuple[FoldEvents, FoldEvents] = ((memo.made[0], {}), (memo.made[1], {}))
    memo.made = (made[0][1], made[1][1])  # likewise its events
    if runs:
        folded, memo.runs = fold_runs(messages, entries, events, runs, original, count,
                                      memo.runs, users, short_before, made[0])
    turn_runs = find_turn_runs(folded.messages, [i for i, _ in folded.plan], horizon)
    if turn_runs:
        notes: NoteCache = {}
        folded = fold_turns(folded, turn_runs, original, count, memo.notes, notes, users,
                            made[1], client, task, starts)
        memo.notes = notes
    if folded.messages is messages:
        return None
    memo.folded = folded
    if folded.floating:
        memo.latest = max(map(_step, events), default=0)
        memo.head_step = max(map(_step, events[:_head(events, horizon)]), default=0)
    return folded


def task_bound(horizon: int, task_starts: Sequence[int], turns: Sequence[int],
               least: int | None) -> int:
    """The client message the fold stops before: the start of the later task the horizon
    is in (`task_starts`: each later task's first message, in order, `Layout.task_starts`)
    while the horizon is fewer than `least` assistant turns into it (`turns`: the assistant
    messages' indexes; `least`: `mask_current_turns`, the age at which the current task's
    items join the mask batches; None: no bound), else the horizon itself, as on the first
    task. A task the agent is still working on is not folded while young: its blocks stay
    as its aged digests and masks, and a step inside it does not fold its latest block
    anew. The bound moves only with the horizon (a task that starts after it does not move
    it), so between steps the fold stays byte for byte."""
    k = bisect_left(task_starts, horizon) - 1  # the latest start before the horizon
    if least is None or k < 0:
        return horizon
    start = task_starts[k]
    if bisect_left(turns, horizon) - bisect_left(turns, start) >= least:
        return horizon
    return start


def _entries(plan: Plan | None, start: int, end: int) -> Plan:
    if plan is None:
        return [(i, None) for i in range(start, end)]
    return list(plan[start:end])
