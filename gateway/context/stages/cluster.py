"""cluster: exact and near duplicates keep one representative.

Exact: same text once whitespace is normalised. Near: MinHash (datasketch) Jaccard over word
5-shingles at or above `near_threshold` (default 0.85), for texts of `min_chars` or more.
The representative is a pinned copy if there is one, else the earliest, so the rendered
prefix stays as it was; the others become a one-line pointer to it (the message stays, so
tool calls and results stay paired).

On arrival (`on_arrival`, every call, step or not): an item of the call's newest messages
that repeats, byte for byte, an item sent verbatim above it becomes a pointer at once, pinned
or not. Nothing is lost (the copy the pointer names is in the same request), and nothing
sent before changes: agents that repeat a command get the same output again and again.
With `arrival_lines`, a new item whose runs of lines repeat such an item's goes out with
each run as a one-line marker (`lines.py`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, MutableMapping
from hashlib import sha1 as _sha1
from typing import Any

import numpy as np
from datasketch import MinHash, MinHashLSH

from gateway.context.apply import POINTER_EXCERPT, pointer
from gateway.context.forecast import Budget
from gateway.context.items import Item, appended_observation, appended_result
from gateway.context.lines import (
    MINIFIED_JSON,
    LineIndex,
    arrival_item,
    arrival_new,
    arrival_turn,
    index_lines,
    lines_decision,
    minified_decision,
)
from gateway.context.quoting import keeps_layout
from gateway.context.session import Decision
from gateway.context.stages.base import StageContext, StageResult, decide
from gateway.context.taskclass import ClusterOptions

NUM_PERM = 64
# The reason of a turn whose appended result went out as a pointer (`_observation_repeat`)
REPEATED_RESULT = "repeated_result"
_WORD = re.compile(r"\S+")


def _permutations() -> tuple[Any, str]:
    """The hash permutations every sketch uses (seed 7), drawn once, read-only: drawing
    them costs each new MinHash ~30 times its own construction."""
    template = MinHash(num_perm=NUM_PERM, seed=7)
    template.permutations.setflags(write=False)
    return template.permutations, template.scheme


_PERMUTATIONS, _SCHEME = _permutations()
_WIDTH = MinHash(num_perm=NUM_PERM, seed=7, permutations=_PERMUTATIONS,
                 scheme=_SCHEME).hashvalues.itemsize  # bytes per hash value


def _normal(text: str, memo: MutableMapping[str, str] | None = None) -> str:
    """A digest of `text` with its whitespace normalised; `memo`: by text (a step reads
    every candidate of the session's history again, the same text objects)."""
    found = memo.get(text) if memo is not None else None
    if found is None:
        found = hashlib.blake2b(" ".join(text.split()).encode(), digest_size=12).hexdigest()
        if memo is not None:
            memo[text] = found
    return found


def _minhash(text: str, memo: MutableMapping[str, bytes], key: str | None = None) -> bytes:
    """`text`'s sketch (its MinHash's hash values, as bytes), by its normal digest (`key`,
    when known). Each shingle's SHA-1 is taken as datasketch's `sha1_hash32` takes it (the
    digest's first 4 bytes, little-endian), in one pass: that function's per-shingle Python
    call was most of a new sketch's time."""
    key = _normal(text) if key is None else key
    found = memo.get(key)
    if found is None:
        # each word encoded once: a shingle's bytes are its five words' joined by b" "
        words = [word.encode() for word in _WORD.findall(text)]
        shingles = ({b" ".join(words)} if len(words) < 5 else
                    set(map(b" ".join, zip(words, words[1:], words[2:], words[3:], words[4:],
                                           strict=False))))
        hashes = np.frombuffer(b"".join([_sha1(s).digest()[:4] for s in shingles]), "<u4")
        sketch = MinHash(num_perm=NUM_PERM, seed=7, hashfunc=int,
                         permutations=_PERMUTATIONS, scheme=_SCHEME)
        sketch.update_batch(hashes.tolist())
        # Kept lean: its hash values only, not the 1 kB of permutations every MinHash has.
        found = memo[key] = sketch.hashvalues.tobytes()
    return found


class _Bands:
    """A MinHash LSH index as datasketch's `MinHashLSH` (with `layout`: `b` bands of `r`
    values) answers it: the keys of the sketches sharing a band with the one asked about.
    Each band is a slice of a sketch's bytes (`_minhash`) and each table a dict: an insert
    is `b` dict updates, not datasketch's byte swaps and storage calls (a step inserts
    every candidate of the history again)."""

    def __init__(self, layout: tuple[int, int], width: int) -> None:
        b, r = layout
        self.ranges = [(i * r * width, (i + 1) * r * width) for i in range(b)]
        self.tables: list[dict[bytes, list[str]]] = [{} for _ in range(b)]

    def insert(self, key: str, sketch: bytes) -> None:
        for (start, end), table in zip(self.ranges, self.tables, strict=True):
            table.setdefault(sketch[start:end], []).append(key)

    def query(self, sketch: bytes) -> set[str]:
        near: set[str] = set()
        for (start, end), table in zip(self.ranges, self.tables, strict=True):
            near.update(table.get(sketch[start:end], ()))
        return near


async def cluster_items(items: list[Item], budget: Budget, ctx: StageContext) -> StageResult:
    opts = ctx.task_class.stages.cluster or ClusterOptions()
    min_chars, threshold = opts.min_chars, opts.near_threshold
    candidates = [item for item in items if len(item.text) >= min_chars and item.rewritable]
    # Pinned copies first: they are the representatives when they have duplicates.
    candidates.sort(key=lambda item: (not item.pinned, item.message_index, item.segment))
    memo = ctx.caches.minhash
    # Finding the band layout for a threshold integrates numerically: do it once.
    layouts = ctx.caches.lsh_params
    layout = layouts.get(threshold)
    if layout is None:
        lsh = MinHashLSH(threshold=threshold, num_perm=NUM_PERM)
        layout = (lsh.b, lsh.r)
    layouts[threshold] = layout
    lsh_index = _Bands(layout, _WIDTH)
    exact: dict[str, str] = {}
    chosen: dict[str, Decision] = {}
    by_id = {item.id: item for item in candidates}
    named = _named_statements(candidates, ctx)
    for item in candidates:
        digest = _normal(item.text, ctx.caches.normal)
        mh = _minhash(item.text, memo, digest)
        # only an item the step may change asks what it repeats (late in a session most
        # are decided already: they only join the index, as they did)
        if (not item.pinned and item.id not in ctx.decisions and item.message_index < ctx.horizon
                and item.id not in named):
            rep = exact.get(digest)
            reason = "duplicate"
            if rep is None:
                near = lsh_index.query(mh)
                rep = min(near) if near else None
                reason = "near_duplicate"
            if rep is not None:
                rep_item = by_id[rep.split("|")[1]]
                chosen[item.id] = Decision(
                    "cluster", "dedup", reason, "dedup", arg=rep_item.id,
                    text=pointer(rep_item, reason == "near_duplicate"))
                continue
        key = f"{item.message_index:09d}{item.segment:04d}|{item.id}"
        exact.setdefault(digest, key)
        lsh_index.insert(key, mh)
    return decide(items, chosen, ctx)




def _named_statements(candidates: list[Item], ctx: StageContext) -> set[str]:
    """The ids of the task statement's items that a repeat on arrival points to (a queue's
    later task re-sending its template, `lines.arrival_new`): they stay as sent, the copy
    those pointers and markers name, rather than become a pointer to a later copy."""
    goals = {item.id for item in candidates if item.goal}
    if not goals:
        return set()
    return {made.arg for made in ctx.decisions.values()
            if made.stage == "cluster" and made.arg in goals}


def arrival_duplicates(
    items: list[Item], ctx: StageContext, start: int, marked: Collection[int] = (),
    over: bool = False, newest: int | None = None,
) -> StageResult:
    """Tool results and user turns of messages from `start` on that repeat, exactly, one
    rendered verbatim before them (`items`: as they will be sent) become pointers to it.
    `marked`: messages a wire adapter pinned (opaque or signed content), never rewritten.
    With `arrival_json`, a new one that is JSON laid out with whitespace goes out without
    it (`lines.minified`), except on a call over its budget (`over`: the ladder's cut) and
    in a message before `newest` (the call's new messages: one before, looked at again in
    case the client edited it, was left as it is where the previous call was over)."""
    opts = ctx.task_class.stages.cluster
    if opts is None or not opts.on_arrival:
        return StageResult(items, {})
    minify = opts.arrival_json and not over
    verbatim: dict[str, Item] = {}  # text -> the first copy sent as is (or minified)
    observed: dict[str, Item] = {}  # a result appended to a turn -> its first turn sent as is
    lines: LineIndex | None = {} if opts.arrival_lines else None
    chosen: dict[str, Decision] = {}
    decided = ctx.decisions
    # an item with a decision is neither new nor sent as is: it changes nothing below,
    # unless it is sent minified (the same JSON: a repeat of it may point to it)
    for item in items:
        made = decided.get(item.id)
        if made is not None and made.reason != MINIFIED_JSON:
            continue
        original = ctx.originals.get(item.id, item)
        if original.kind == "assistant":
            cut = _observation_repeat(item, original, made, observed, opts.arrival_min_chars,
                                      marked, item.message_index >= start)
            if cut is not None:
                chosen[item.id] = cut
                continue
        if not arrival_item(original, opts.arrival_min_chars, marked):
            if lines is not None and opts.arrival_from_turns and made is None and (
                    item.text == original.text
                    and arrival_turn(original, opts.arrival_min_chars, marked)):
                index_lines(lines, item, latest=True)  # a target, never rewritten
            continue
        if made is not None:
            verbatim.setdefault(original.text, item)
            continue
        new = item.message_index >= start and arrival_new(item)
        rep = verbatim.get(original.text)
        if new and rep is not None:
            chosen[item.id] = Decision("cluster", "dedup", "duplicate", "dedup", arg=rep.id,
                                       text=pointer(rep))
            continue
        cut = lines_decision(original.text, lines, opts.arrival_min_chars) if (
            new and lines) else None
        if cut is None and new and minify and (newest is None or item.message_index >= newest):
            cut = minified_decision(original.text)
            if cut is not None and keeps_layout(ctx.messages, item.message_index):
                cut = None  # an exact-text editor's file: its lines are edit anchors
            if cut is not None:
                verbatim.setdefault(original.text, item)
        if cut is not None:
            chosen[item.id] = cut
        elif item.text == original.text:
            verbatim.setdefault(original.text, item)
            if lines is not None:
                index_lines(lines, item, latest=opts.arrival_from_turns)
    return decide(items, chosen, ctx)


def _observation_repeat(
    item: Item, original: Item, made: Decision | None, observed: dict[str, Item],
    min_chars: int, marked: Collection[int], new: bool,
) -> Decision | None:
    """An assistant turn that carries the result its harness appended to it
    (`items.appended_observation`: a ReAct agent's `Observation:` in its own turn): when the
    turn is new and that result (`min_chars` or more) repeats, exactly, one a turn sent as
    is above it carries, the result goes out as a pointer to that turn and the agent's own
    words stay (an agent that re-runs an action gets the same output appended again; the
    copy named is in the same request). Otherwise a turn sent as is is recorded in
    `observed` as a copy later repeats may name."""
    if made is not None or item.text != original.text or not original.rewritable or (
            original.message_index in marked):
        return None
    if not appended_result(original.text, min_chars):
        return None
    at = appended_observation(original.text)
    result = original.text[at:]
    rep = observed.get(result)
    if new and rep is not None:
        label, output = result.split(":", 1)
        first = output.strip().split("\n", 1)[0]
        quoted = first[:POINTER_EXCERPT] + ("…" if len(first) > POINTER_EXCERPT else "")
        return Decision("cluster", "dedup", REPEATED_RESULT, "dedup", arg=rep.id,
                        text=f"{original.text[:at]}{label}: [ctxgate: repeats the result an "
                             f"earlier turn carries: {quoted}]")
    observed.setdefault(result, item)
    return None
