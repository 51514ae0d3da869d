"""Live fidelity signals: what one call's compaction cost the agent, from traffic alone.

When call n+1 of a session arrives, its history holds the assistant turn that answered
call n; the session's state holds what the gateway forwarded for call n (`lost`: each
message of call n not forwarded as sent, with the text that went in its place or None
when dropped) and an index of the session's earlier tool calls. From those, per turn:

- *recall*: of the turn's needed values (`needed.py`, the yardstick's definition: action
  values that occur in an earlier non-system message), the share present as substrings in
  what was forwarded for call n (its messages as rendered, plus the playbook block);
- *refetch*: of the turn's tool calls, those that repeat an earlier call of the session
  whose every result the gateway had digested or dropped in call n. A call *repeats* an
  earlier one when both have the same tool name and near-same arguments: the sets of
  `[A-Za-z0-9_./:-]+` tokens of their argument values (the raw string when not JSON) have
  a Jaccard similarity of at least 0.8 (exact when the two sets have at most 16 tokens
  together, else estimated from bottom-16 MinHash sketches of 32-bit token hashes).

Modes: `managed` (the engine fitted call n), `bypass` (`x-ctxgate-bypass`) and `unmanaged`
(the engine failed and call n went out as sent). In the last two nothing was lost, so
recall is the ceiling (1) and every repeat counts as a refetch: the agent's natural rate,
the baseline a managed class's refetch is compared with.

Cost: each of the turn's values is searched from call n's latest message back, until a
message forwarded as sent holds it (what was rewritten is searched only for a value found
nowhere else); the tool-call index (the latest 256 calls, a 16-hash sketch each) is
decoded, extended with the new turns' calls only, and stored with the session; `lost` is
stored only when it changes (at compaction steps).
"""

from __future__ import annotations

import hashlib
import re
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import orjson

from gateway.context.calls import common_start
from gateway.context.needed import (
    SEPARATOR,
    action_values,
    arguments,
    is_system,
    join,
    searchable_text,
    tool_calls,
    tool_name,
)
from gateway.context.render import Plan
from gateway.context.session import CALL_RUN, LOST_RUN, SessionState, run_hash

MODES = ("managed", "bypass", "unmanaged")
_SEPARATOR = SEPARATOR.encode()
NEAR_SAME = 0.8
SKETCH_SIZE = 16
MAX_INDEXED_CALLS = 256
_TOKEN = re.compile(r"[A-Za-z0-9_./:-]+")
# Two sketches near enough (`_may_be_near`) differ in at most (1 - NEAR_SAME) * SKETCH_SIZE
# hashes of either (3): any 4 hashes of one hold one of the other's (`CallIndex`).
FILED_HASHES = int((1 - NEAR_SAME) * SKETCH_SIZE) + 1


@dataclass(frozen=True)
class CallSignals:
    """One call's signals: of the `needed` values the assistant's next action used that
    occurred earlier in the client's history, `found` were in what the gateway forwarded; of
    its `tool_calls`, `refetches` repeated an earlier call whose result had been compacted.
    `mode` is managed | bypass | unmanaged (bypass and unmanaged are the baseline).

    In bypass and unmanaged mode nothing was compacted, so `refetches` counts every repeat
    (the agent's natural rate); `repeats` counts every repeat in every mode, so a managed
    class's repeat rate can also be set against its baseline's like for like."""

    task_class: str
    mode: str
    needed: int
    found: int
    tool_calls: int
    refetches: int
    repeats: int = 0

    def to_log(self) -> dict[str, int]:
        """The drop log call line's `fidelity` object."""
        return {"needed": self.needed, "found": self.found, "tool_calls": self.tool_calls,
                "refetches": self.refetches, "repeats": self.repeats}


@dataclass(frozen=True, slots=True)
class IndexedCall:
    """An earlier tool call of the session, as the refetch signal compares it."""

    name: str
    sketch: tuple[int, ...]
    result: int  # the message index of its result; -1 when it has none


def _scalars(value: Any) -> Iterator[str]:
    if isinstance(value, Mapping):
        for v in value.values():
            yield from _scalars(v)
    elif isinstance(value, list):
        for v in value:
            yield from _scalars(v)
    elif value is not None:
        yield str(value)


def call_sketch(call: Mapping[str, Any]) -> tuple[int, ...]:
    """The bottom-16 sketch of a tool call's argument tokens (32-bit hashes, ascending)."""
    raw, parsed = arguments(call)
    text = raw if parsed is None else "\n".join(_scalars(parsed))
    hashes = {
        int.from_bytes(hashlib.blake2b(t.encode(), digest_size=4).digest(), "big")
        for t in set(_TOKEN.findall(text))
    }
    return tuple(sorted(hashes)[:SKETCH_SIZE])


def similarity(a: Sequence[int], b: Sequence[int]) -> float:
    """Jaccard similarity of two token sets from their sketches (two empty sets: 1)."""
    if a == b:
        return 1.0
    set_a, set_b = set(a), set(b)
    union = sorted(set_a | set_b)[:SKETCH_SIZE]
    return sum(x in set_a and x in set_b for x in union) / len(union)


def _may_be_near(a: set[int], b: Sequence[int]) -> bool:
    """False when `similarity` of sketches `a` (as a set) and `b` is surely under
    NEAR_SAME: it counts at most the shared hashes over at most SKETCH_SIZE of the union
    (one C-speed intersection)."""
    shared = len(a.intersection(b))
    return shared >= NEAR_SAME * min(SKETCH_SIZE, len(a) + len(b) - shared)


def _results(messages: Sequence[Mapping[str, Any]], start: int) -> dict[Any, int]:
    """Tool-call id → index of its result, for the results after messages[start]."""
    out: dict[Any, int] = {}
    for i in range(start + 1, len(messages)):
        msg = messages[i]
        if msg.get("role") == "assistant":
            break
        if msg.get("role") == "tool" and "tool_call_id" in msg:
            out.setdefault(msg["tool_call_id"], i)
    return out


def index_calls(
    messages: Sequence[Mapping[str, Any]], start: int, calls: list[IndexedCall]
) -> list[IndexedCall]:
    """`calls` with those of the assistant turns in messages[start:] (the latest 256)."""
    return [*calls, *new_calls(messages, start)][-MAX_INDEXED_CALLS:]


def new_calls(messages: Sequence[Mapping[str, Any]], start: int) -> list[IndexedCall]:
    """The tool calls of the assistant turns in messages[start:]."""
    calls: list[IndexedCall] = []
    for i in range(start, len(messages)):
        msg = messages[i]
        made = tool_calls(msg) if msg.get("role") == "assistant" else []
        if not made:
            continue
        results = _results(messages, i)
        calls += [IndexedCall(tool_name(c), call_sketch(c), results.get(c.get("id"), -1))
                  for c in made]
    return calls


def _digest(msg: Mapping[str, Any]) -> str:
    try:
        return hashlib.blake2b(orjson.dumps(msg), digest_size=8).hexdigest()
    except TypeError:  # not JSON: no continuation can be told
        return ""


@dataclass(frozen=True, slots=True)
class Record:
    """What the session's state says of its last call."""

    count: int  # its messages
    last: str  # digest of its last message
    first: int  # the number of calls[0] among the session's tool calls (counted from 0)
    calls: list[IndexedCall]
    lost: dict[int, str | None]

    @classmethod
    def load(cls, state: SessionState, seen: Haystack | None = None) -> Record | None:
        if not state.fidelity:
            return None
        if (seen is not None and seen.record_raw == state.fidelity
                and seen.record_runs == state.indexed_runs):
            count, last, first, calls = seen.record  # what an earlier call of this process wrote
        else:
            raw = orjson.loads(state.fidelity)
            count, last, first = int(raw["n"]), str(raw["last"]), int(raw.get("first", 0))
            if "calls" in raw:  # stored in one list (before runs)
                calls = [IndexedCall(n, tuple(s), r) for n, s, r in raw["calls"]]
            else:
                read = _read_runs(state.indexed_runs, first, int(raw["k"]))
                if read is None:  # a run is missing: as if there were no record
                    return None
                calls = read
        if seen is not None and seen.lost_raw is not None and seen.lost_raw == state.lost:
            lost = seen.lost  # decoded by an earlier call: `lost` changes at steps only
        else:
            decoded = orjson.loads(state.lost) if state.lost else {}
            lost = {int(i): text for i, text in decoded.items()}
            if seen is not None:
                seen.lost_raw, seen.lost = state.lost, lost
        return cls(count, last, first, calls, lost)

    def continued_by(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """Whether `messages` extend the last call's (its last message unchanged)."""
        n = self.count
        return 0 < n <= len(messages) and bool(self.last) and _digest(messages[n - 1]) == self.last


def _read_runs(runs: Mapping[int, bytes], first: int, k: int) -> list[IndexedCall] | None:
    """The `k` calls numbered from `first`, from their runs (None: some are missing)."""
    calls: list[IndexedCall] = []
    for run in sorted(runs):
        start, entries = orjson.loads(runs[run])
        skip = max(0, first - start)
        calls += [IndexedCall(n, tuple(s), r) for n, s, r in entries[skip:]]
    return calls if len(calls) == k else None


def call_runs(calls: list[IndexedCall], first: int, before: Mapping[int, bytes],
              new_from: int) -> dict[int, bytes]:
    """The runs of CALL_RUN calls (`[number of its first entry, entries]`, by the calls'
    numbers) covering `calls`, numbered from `first`: a run holding no call from `new_from`
    on keeps its bytes from `before` (not serialised again, and not written again: the
    session store writes the runs whose bytes changed)."""
    runs: dict[int, bytes] = {}
    end = first + len(calls)
    for run in range(first // CALL_RUN, (end - 1) // CALL_RUN + 1) if calls else ():
        kept = before.get(run)
        if kept is not None and (run + 1) * CALL_RUN <= new_from:
            runs[run] = kept
            continue
        lo, hi = max(run * CALL_RUN, first), min((run + 1) * CALL_RUN, end)
        runs[run] = orjson.dumps(
            [lo, [[c.name, c.sketch, c.result] for c in calls[lo - first:hi - first]]])
    return runs


def lost_messages(count: int, plan: Plan | None, start: int = 0) -> dict[int, str | None]:
    """Per message of a call not forwarded as sent: its new text, or None when dropped
    (`start`: of messages[start:count], `plan` holding the entries of those only)."""
    if plan is None:
        return {}
    lost: dict[int, str | None] = dict.fromkeys(range(start, count))
    for i, text in plan:
        if text is None:
            del lost[i]
        else:
            lost[i] = text
    return lost


def recall_counts(
    turn: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], count: int,
    lost: Mapping[int, str | None], extra: str = "", haystack: Haystack | None = None,
) -> tuple[int, int]:
    """(needed, found) of `turn` against the call made of messages[:count], as forwarded
    under `lost` with `extra` (the playbook block). Each value is looked for from the latest
    message back and is settled at its first occurrence in a message forwarded as sent,
    so a value the agent just saw costs a few messages, not the history. With `haystack`,
    which keeps the messages' searchable texts between a session's calls, joined, the
    messages are not walked: its joined text is scanned back at C speed from occurrence to
    occurrence (`Haystack.holders`), a value in no message costing one scan."""
    values = action_values(turn)
    if not values:
        return 0, 0
    texts: Mapping[int, str | None] | Sequence[str | None] = (
        _Lazy(messages) if haystack is None else haystack.cover(messages, count))
    rewritten: str | None = None  # what went in place of lost messages, system and block
    needed = found = 0
    for value in values:
        seen = kept = False
        if haystack is not None and value:
            seen, kept = haystack.holders(value, lost)
        # from the end: a value the agent just saw is found in the last few messages
        for i in range(count - 1, -1, -1) if haystack is None or not value else ():
            text = texts[i]
            if text is None:  # a system message
                continue
            if value in text:
                seen = True
                if i not in lost:
                    kept = True
                    break
        if not seen:
            continue
        needed += 1
        if not kept and rewritten is None:
            rewritten = _rewritten(messages, count, lost, extra, haystack)
        found += kept or value in (rewritten or "")
    return needed, found


def _rewritten(
    messages: Sequence[Mapping[str, Any]], count: int, lost: Mapping[int, str | None],
    extra: str, haystack: Haystack | None = None,
) -> str:
    """What was forwarded besides the non-system messages sent as is. With `haystack`,
    each message's searchable text (as sent or as rewritten) is read once per text."""
    if haystack is None:
        system, memo = [i for i in range(count) if is_system(messages[i])], {}
    else:
        system, memo = [i for i in haystack.system if i < count], haystack.rewrites
    parts = [_searchable(memo, messages, i, None) for i in system]
    parts += [_searchable(memo, messages, i, text)
              for i, text in sorted(lost.items()) if text is not None and i < count]
    if extra:
        parts.append(extra)
    return join(parts)


def _searchable(
    memo: dict[int, tuple[str | None, str]], messages: Sequence[Mapping[str, Any]], i: int,
    text: str | None,
) -> str:
    """The searchable text of messages[i] sent as is (`text` None) or with `text`."""
    known = memo.get(i)
    if known is not None and known[0] == text:
        return known[1]
    found = searchable_text(messages[i] if text is None else {**messages[i], "content": text})
    memo[i] = (text, found)
    return found


def _json(lost: Mapping[int, str | None]) -> bytes:
    """`lost`'s JSON as the session stores it (the keys in their order)."""
    return orjson.dumps({str(i): text for i, text in lost.items()})


def _appended(raw: bytes | None, lost: Mapping[int, str | None]) -> bytes | None:
    """The JSON of a non-empty `lost` map whose JSON is `raw` with `lost`'s entries added
    after its own (None: `raw` unknown). orjson writes an object as `{` + its entries
    joined by `,` + `}`, so the two objects' entries join as one."""
    return None if raw is None else raw[:-1] + b"," + _json(lost)[1:]


class Haystack:
    """The searchable texts of a session's messages[:count], kept from call to call so a
    call reads only the messages added since (the engine keeps it with the session's prefix,
    `prefix.py`, which has checked those messages are byte for byte the ones read before),
    all of them joined for a one-pass test of values found nowhere; and the session's `lost`
    and fidelity record as this process last wrote or decoded them (read again only when
    the state holds other bytes: another replica's)."""

    def __init__(self) -> None:
        self.texts: list[str | None] = []  # per message; None: a system message
        # The non-system messages' texts in UTF-8 (surrogates passed), joined by SEPARATOR:
        # a bytearray grows in place, so a call appends its new messages' bytes only (a
        # `str` was copied whole on every call). UTF-8 is self-synchronising: a value's
        # bytes occur in it exactly where the value occurs in the joined text.
        self.joined = bytearray()
        # where each non-system message's text starts in `joined`, its length there, and
        # its index
        self.starts: list[int] = []
        self.sizes: list[int] = []
        self.slots: list[int] = []
        self.system: list[int] = []  # the system messages' indexes
        # per message: the text it was last forwarded as (None: as sent) and that message's
        # searchable text (`_rewritten`)
        self.rewrites: dict[int, tuple[str | None, str]] = {}
        self.lost_raw: bytes | None = None
        self.lost: dict[int, str | None] = {}
        self.record_raw: bytes | None = None  # the session's fidelity record, as last written
        self.record_runs: Mapping[int, bytes] = {}  # its runs of calls, as last written
        self.record: tuple[int, str, int, list[IndexedCall]] = (0, "", 0, [])
        self.calls = CallIndex()  # the record's calls by sketch hash
        # The `lost` of the last call this process remembered, with the plan (an object
        # that only grows: the prefix's) and message count it was found from, and its JSON.
        self.plan: Plan | None = None
        self.planned = 0  # entries of `plan` read
        self.count = 0
        self.found: dict[int, str | None] = {}
        self.found_raw: bytes | None = None
        self.visited = 0  # plan entries the latest `lost_after` read
        # `found`'s JSON cut into its stored runs (`session.lost_runs`) with their hashes,
        # right for the messages before `runs_stale` (`found` changed from there since).
        self.runs: dict[int, bytes] = {}
        self.run_hashes: dict[int, bytes] = {}
        self.runs_stale = 0
        # `_kept_runs`' last answer: for which `lost` (and its size) and texts read
        self._runs_for: tuple[Mapping[int, str | None], int, int,
                              list[tuple[int, int]]] | None = None
        self.scans = 0  # searches of `joined` by `holders` (read by tests and benches)

    def lost_after(self, count: int, plan: Plan | None) -> tuple[dict[int, str | None], bool]:
        """`lost_messages(count, plan)`, and whether `found_raw` is its JSON (it is the one
        found last). A plan that extends the one read before (the same object, grown: the
        session's prefix keeps it so between steps) is read from where the last call
        stopped, and the JSON of what it adds is appended to the last one's (its messages
        come after all those found before)."""
        if (plan is None or plan is not self.plan or len(plan) < self.planned
                or count < self.count):
            spliced = self._spliced(count, plan)
            found, raw, bound = (spliced if spliced is not None
                                 else (lost_messages(count, plan), None, 0))
            self.runs_stale = min(self.runs_stale, bound)
            self.plan, self.planned, self.count = plan, len(plan or ()), count
            self.found, self.found_raw, self.visited = found, raw, len(plan or ())
            return found, raw is not None
        added = plan[self.planned:]
        self.visited = len(added)
        lost: dict[int, str | None] = dict.fromkeys(range(self.count, count))
        for i, text in added:
            if i < self.count:  # not an extension after all
                self.plan = None
                return self.lost_after(count, plan)
            if text is None:
                del lost[i]
            else:
                lost[i] = text
        if lost:
            self.runs_stale = min(self.runs_stale, self.count)
            raw = _appended(self.found_raw, lost) if self.found else _json(lost)
            self.found, self.found_raw = {**self.found, **lost}, raw
        self.planned, self.count = len(plan), count
        return self.found, not lost or self.found_raw is not None

    def _spliced(
        self, count: int, plan: Plan | None
    ) -> tuple[dict[int, str | None], bytes, int] | None:
        """`lost_messages(count, plan)`, its JSON and the message from which it may differ
        from the last found, for a plan that is not the last one extended (a step's), or
        None: what the last found before the first message the two plans render otherwise
        is kept (the keys run in order; `,"` occurs in no JSON string, so the JSON is cut at
        the first key kept no more)."""
        old, raw = self.plan, self.found_raw
        if plan is None or old is None or raw is None or count < self.count:
            return None
        old = old[: self.planned]
        m = common_start(old, plan)
        bound = min(old[m][0] if m < len(old) else self.count,
                    plan[m][0] if m < len(plan) else count)
        keys = list(self.found)
        n = bisect_left(keys, bound)
        if not n:
            return None
        found = dict(islice(self.found.items(), n))
        tail = lost_messages(count, plan[m:], bound)
        found.update(tail)
        cut = len(raw) - 1 if n == len(keys) else raw.index(b',"%d":' % keys[n])
        added = orjson.dumps({str(i): text for i, text in tail.items()})[1:] if tail else b"}"
        return found, raw[:cut] + (b"," + added if tail else added), bound

    def found_runs(self) -> tuple[dict[int, bytes], dict[int, bytes]]:
        """`session.lost_runs` of `found`'s JSON and their `run_hashes`: the runs before
        the first message whose entry changed since the last call of this are kept, the
        others made from `found` (its keys run in order, as in its JSON)."""
        first = self.runs_stale // LOST_RUN
        runs = {run: raw for run, raw in self.runs.items() if run < first}
        hashes = {run: self.run_hashes[run] for run in runs}
        grouped: dict[int, dict[str, str | None]] = {}
        start = bisect_left(list(self.found), first * LOST_RUN)
        for i, text in islice(self.found.items(), start, None):
            grouped.setdefault(i // LOST_RUN, {})[str(i)] = text
        for run, entries in grouped.items():
            runs[run] = raw = orjson.dumps(entries)
            hashes[run] = run_hash(raw)
        self.runs, self.run_hashes, self.runs_stale = runs, hashes, sys.maxsize
        return runs, hashes

    def cover(self, messages: Sequence[Mapping[str, Any]], count: int) -> list[str | None]:
        """The texts of messages[:count] (what they held so far must be those messages')."""
        if count < len(self.texts):  # a shorter history than the one read: read it anew
            self.texts, self.joined, self.system, self.rewrites = [], bytearray(), [], {}
            self.starts, self.sizes, self.slots = [], [], []
            self._runs_for = None
        start = len(self.texts)
        added = [None if is_system(m) else searchable_text(m) for m in messages[start:count]]
        if added:
            self.system += [start + k for k, text in enumerate(added) if text is None]
            self.texts += added
            joined = self.joined
            for k, text in enumerate(added, start):
                if text is not None:
                    raw = text.encode("utf-8", "surrogatepass")
                    if self.starts:
                        joined += _SEPARATOR
                    self.starts.append(len(joined))
                    self.sizes.append(len(raw))
                    self.slots.append(k)
                    joined += raw
        return self.texts

    def holders(self, value: str, lost: Mapping[int, str | None]) -> tuple[bool, bool]:
        """Whether a message `cover` read holds `value` (a non-empty text), and whether one
        outside `lost` does: `joined` searched from the end at C speed to the latest
        occurrence inside one message (one spanning two messages counts for neither); when
        that message is lost, only the messages before it outside `lost` are searched
        further (`_kept_before`), not every lost message that holds the value: late in a
        session most messages are lost and a value the agent re-types from an old output
        occurs in many of them (a scan per such message, back to the history's start)."""
        joined, starts, sizes = self.joined, self.starts, self.sizes
        raw = value.encode("utf-8", "surrogatepass")
        n, end = len(raw), len(joined)
        while True:
            self.scans += 1
            pos = joined.rfind(raw, 0, end)
            if pos < 0:
                return False, False
            k = bisect_right(starts, pos) - 1
            if pos + n <= starts[k] + sizes[k]:
                break
            end = pos + n - 1
        if self.slots[k] not in lost:
            return True, True
        return True, self._kept_before(raw, k, lost)

    def _kept_before(self, raw: bytes, k: int, lost: Mapping[int, str | None]) -> bool:
        """Whether one of the texts before the k-th (a lost message's) outside `lost`
        holds `raw`: each run of consecutive such texts searched back on its own, from the
        latest run (the lost texts between runs are not searched), an occurrence counted
        only inside one text."""
        joined, starts, sizes = self.joined, self.starts, self.sizes
        runs = self._kept_runs(lost)  # runs of texts outside `lost`: (first, last)
        n = len(raw)
        for r in range(bisect_left(runs, (k, k)) - 1, -1, -1):
            first, last = runs[r]
            lo, end = starts[first], starts[last] + sizes[last]
            while end - lo >= n:
                self.scans += 1
                pos = joined.rfind(raw, lo, end)
                if pos < 0:
                    break
                at = bisect_right(starts, pos) - 1
                if pos + n <= starts[at] + sizes[at]:
                    return True
                end = pos + n - 1
        return False

    def _kept_runs(self, lost: Mapping[int, str | None]) -> list[tuple[int, int]]:
        """The runs of consecutive texts (first, last, as indexes of `starts`) whose
        messages are outside `lost`, in order; kept for the very `lost` object and texts
        read (a call's `lost` is a new mapping whenever it changes: `lost_after`,
        `Record.load`), so each call's values share one walk of the texts."""
        memo = self._runs_for
        if memo is not None and memo[0] is lost and memo[1] == len(self.slots) \
                and memo[2] == len(lost):
            return memo[3]
        runs: list[tuple[int, int]] = []
        first = -1
        for k, i in enumerate(self.slots):
            if i in lost:
                if first >= 0:
                    runs.append((first, k - 1))
                    first = -1
            elif first < 0:
                first = k
        if first >= 0:
            runs.append((first, len(self.slots) - 1))
        self._runs_for = (lost, len(self.slots), len(lost), runs)
        return runs


class _Lazy(dict[int, str | None]):
    """Messages' searchable texts, each read when first asked for (no `Haystack` kept)."""

    def __init__(self, messages: Sequence[Mapping[str, Any]]) -> None:
        super().__init__()
        self.messages = messages

    def __missing__(self, i: int) -> str | None:
        msg = self.messages[i]
        text = self[i] = None if is_system(msg) else searchable_text(msg)
        return text


def _keys(call: IndexedCall) -> set[tuple[str, int | None]]:
    """Where `CallIndex` files a call: its name with each of its sketch's first
    FILED_HASHES hashes (None: an empty sketch)."""
    sketch = call.sketch[:FILED_HASHES]
    return {(call.name, h) for h in sketch} if sketch else {(call.name, None)}


class CallIndex:
    """The numbers of one list of indexed calls (`of`, numbered from `first`) by tool name
    and a few hashes of their sketches (`_keys`). A call near another (`_may_be_near`) has
    one of those hashes among its own, or both sketches are empty, so `refetch_counts`
    compares a new call with the calls filed under its hashes only, not with every call of
    the window. Kept with the session's `Haystack` and moved on with the calls each call
    adds (`update`); used only for the very list it indexes."""

    def __init__(self) -> None:
        self.of: list[IndexedCall] | None = None
        self.first = 0
        self.by: dict[tuple[str, int | None], list[int]] = {}

    def update(self, earlier: list[IndexedCall], calls: list[IndexedCall], first: int) -> None:
        """Index `calls` (numbered from `first`): `earlier` and the calls added after it,
        the oldest left out. Read from where the list indexed last ended when `earlier` is
        that list, else whole."""
        old, old_first = self.of, self.first
        self.of, self.first = calls, first
        if old is None or earlier is not old or first > old_first + len(old):
            self._rebuild()
            return
        for n in range(old_first, first):  # left the window: the oldest of each list
            for key in _keys(old[n - old_first]):
                numbers = self.by[key]
                if numbers[0] != n:
                    self._rebuild()
                    return
                del numbers[0]
                if not numbers:
                    del self.by[key]
        for n in range(old_first + len(old), first + len(calls)):
            self._add(n)

    def _rebuild(self) -> None:
        self.by = {}
        for n in range(self.first, self.first + len(self.of or ())):
            self._add(n)

    def _add(self, n: int) -> None:
        assert self.of is not None
        for key in _keys(self.of[n - self.first]):
            self.by.setdefault(key, []).append(n)

    def near(self, earlier: Sequence[IndexedCall], name: str,
             sketch: tuple[int, ...]) -> list[IndexedCall] | None:
        """The calls of `earlier` that may be near a call of `name` with `sketch`, in
        order; None when `earlier` is not the list indexed."""
        if earlier is not self.of:
            return None
        keys = [(name, h) for h in sketch] if sketch else [(name, None)]
        numbers = sorted({n for key in keys for n in self.by.get(key, ())})
        return [earlier[n - self.first] for n in numbers]


def refetch_counts(
    turn: Mapping[str, Any], earlier: Sequence[IndexedCall], lost: Mapping[int, str | None],
    index: CallIndex | None = None,
) -> tuple[int, int, int]:
    """(tool calls, repeats, refetches) of `turn`: a repeat matches an earlier call; a
    refetch is a repeat all of whose matches' results were lost. `index`: the calls of
    `earlier` by sketch hash (`CallIndex`), so only those that may match are compared."""
    made = tool_calls(turn)
    repeats = refetches = 0
    for call in made:
        name, sketch = tool_name(call), call_sketch(call)
        mine = set(sketch)
        near = index.near(earlier, name, sketch) if index is not None else None
        matches = [c for c in (earlier if near is None else near)
                   if c.name == name and _may_be_near(mine, c.sketch)
                   and similarity(c.sketch, sketch) >= NEAR_SAME]
        if matches:
            repeats += 1
            refetches += all(c.result in lost for c in matches)
    return len(made), repeats, refetches


def observe(
    state: SessionState, messages: Sequence[Mapping[str, Any]], plan: Plan | None, *,
    task_class: str, mode: str, extra: str = "", haystack: Haystack | None = None,
) -> CallSignals | None:
    """The signals of the turn that answered the session's last call (None: no such turn
    in `messages`), and the state updated to remember this call (`plan`: how it renders;
    None: as sent). `haystack`: what an earlier call of the session read of these same
    messages (see `Haystack`), extended here."""
    if not messages:
        return None
    record = Record.load(state, haystack)
    signals = None
    before: Mapping[int, bytes] = {}
    # Calls are numbered from the session's first: a new history's go after the old ones.
    new_from = 0 if record is None else record.first + len(record.calls)
    if record is None or not record.continued_by(messages):
        earlier, added = [], new_calls(messages, 0)
    else:
        count = record.count
        if count < len(messages) and messages[count].get("role") == "assistant":
            turn = messages[count]
            needed, found = recall_counts(turn, messages, count, record.lost, extra,
                                          haystack)
            made, repeats, refetches = refetch_counts(
                turn, record.calls, record.lost, haystack.calls if haystack else None)
            signals = CallSignals(task_class, mode, needed, found, made,
                                  refetches if mode == "managed" else repeats, repeats)
        earlier, added = record.calls, new_calls(messages, count)
        before = state.indexed_runs
    calls = [*earlier, *added][-MAX_INDEXED_CALLS:]
    first = new_from + len(added) - len(calls)
    if haystack is not None:
        haystack.calls.update(earlier, calls, first)
    _remember(state, messages, plan, (first, calls, call_runs(calls, first, before, new_from)),
              haystack)
    return signals


def _remember(
    state: SessionState, messages: Sequence[Mapping[str, Any]], plan: Plan | None,
    indexed: tuple[int, list[IndexedCall], dict[int, bytes]], haystack: Haystack | None = None,
) -> None:
    """`state` remembering this call: its record (`indexed`: the calls' first number, the
    calls and their runs) and, when it changed, `lost`."""
    last, (first, calls, runs) = _digest(messages[-1]), indexed
    state.fidelity = orjson.dumps({"n": len(messages), "last": last, "first": first,
                                   "k": len(calls)})
    state.indexed_runs = runs
    state.dirty.add("fidelity")
    if haystack is not None:
        haystack.record_raw, haystack.record_runs = state.fidelity, runs
        haystack.record = (len(messages), last, first, calls)
    if haystack is None:
        lost, same = lost_messages(len(messages), plan), False
    else:
        lost, same = haystack.lost_after(len(messages), plan)
    if same and haystack is not None and haystack.found_raw is not None:
        raw: bytes | None = haystack.found_raw  # what the last call found: its JSON
    else:
        raw = orjson.dumps({str(i): text for i, text in lost.items()}) if lost else None
        if haystack is not None and lost is haystack.found:
            haystack.found_raw = raw
    if raw != (state.lost or None):
        state.lost = raw
        state.dirty.add("lost")
        if haystack is not None and raw is not None and lost is haystack.found:
            state.lost_split = (raw, *haystack.found_runs())
    if haystack is not None:  # the next call need not decode what this one wrote
        haystack.lost_raw, haystack.lost = raw, lost
