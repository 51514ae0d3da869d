"""A step's `decide` reads the values of the items before its first decision counted from
the session's last step (`base._head_values`, `caches.SeenHead`; bench/README.md, "Per-call
time on long sessions, part forty"): the same set as the union item by item it replaced,
whatever texts left, came, changed or repeat between steps, and the same decisions."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.context.caches import ContextCaches
from gateway.context.items import Item, parse_request
from gateway.context.session import Decision
from gateway.context.stages import base as stage_base
from gateway.context.summarize import values
from gateway.context.taskclass import task_class
from gateway.context.tokens import TokenCounter

_COUNTER = TokenCounter()


def _text(rng: random.Random) -> str:
    """A turn of prose with a few values (paths, numbers, identifiers), often one of a few
    repeated texts."""
    if rng.random() < 0.2:
        return rng.choice(["ok", "Run `ls src/app.py` again.", "exit code 1 at line 42"])
    words = [rng.choice(["the", "file", "call", "then", "fix", "read"]) for _ in range(6)]
    words += [rng.choice([f"src/m{rng.randrange(30)}.py", str(rng.randrange(10**6)),
                          f"order_{rng.randrange(50)}", f"#W{rng.randrange(99)}"])
              for _ in range(rng.randrange(1, 5))]
    rng.shuffle(words)
    return " ".join(words)


def _items(messages: list[dict[str, Any]]) -> list[Item]:
    return parse_request({"messages": messages}, _COUNTER, "o200k_base").items


def _ctx(items: list[Item], messages: list[dict[str, Any]], caches: ContextCaches,
         known: frozenset[str]) -> stage_base.StageContext:
    return stage_base.StageContext(
        task_class=task_class("t", {}), counter=_COUNTER, encoding="o200k_base",
        embedder=None, fixed_tokens=0, horizon=len(items), query="",
        originals={i.id: i for i in items}, decisions={}, messages=messages,
        caches=caches, known=known,
    )


def _steps(seed: int) -> list[list[dict[str, Any]]]:
    """A session's messages at each of 12 steps: a few turns more each step, and now and then
    an early run replaced by one note (a fold) or an early turn rewritten."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Task: fix src/app.py"}]
    out = []
    for _ in range(12):
        for _ in range(rng.randrange(2, 9)):
            role = "assistant" if messages[-1]["role"] == "user" else "user"
            messages.append({"role": role, "content": _text(rng)})
        if rng.random() < 0.3 and len(messages) > 8:
            at = rng.randrange(1, len(messages) - 6) | 1
            del messages[at:at + 2]  # a fold: one exchange gone
        if rng.random() < 0.3 and len(messages) > 3:
            at = rng.randrange(1, len(messages))
            messages[at] = {**messages[at], "content": _text(rng)}
        out.append([dict(m) for m in messages])
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.booleans())
def test_a_heads_values_are_its_texts_union(seed: int, one_known: bool) -> None:
    """Each step's head (its items up to a random first decision), counted from the last
    step's on one engine's memo, holds exactly the union of its texts' values, and each
    value's count is how many of its texts hold it (as counted from nothing)."""
    rng = random.Random(seed)
    caches = ContextCaches()
    for messages in _steps(seed):
        items = _items(messages)
        head = rng.randrange(0, len(items) + 1)
        known = frozenset() if one_known else frozenset({str(rng.randrange(3))})
        counts = stage_base._head_values(items, head, _ctx(items, messages, caches, known))
        union: set[str] = set()
        for item in items[:head]:
            union |= set(values(item.text))
        assert set(counts) == union
        assert counts == Counter(
            v for item in items[:head] for v in set(values(item.text)))


def test_a_step_counts_its_head_from_the_last_step_and_decides_the_same() -> None:
    """Over a session's steps, `decide` with the engine's memo (each head counted from the
    last one: its entry replaced) gives the decisions and items it gives with empty memos,
    summaries that leave out what was read above included."""
    warm = ContextCaches()
    reused = 0
    for messages in _steps(7):
        items = _items(messages)
        talk = [i for i in items if i.kind == "assistant"]
        chosen = {i.id: Decision("compress", "compress", "aged", "summary", 3)
                  for i in talk[-3:]}
        before = warm.seen_heads.get(frozenset())
        got = stage_base.decide(items, chosen, _ctx(items, messages, warm, frozenset()))
        cold = stage_base.decide(items, chosen,
                                 _ctx(items, messages, ContextCaches(), frozenset()))
        assert got.decisions == cold.decisions
        assert [(i.id, i.text) for i in got.items] == [(i.id, i.text) for i in cold.items]
        after = warm.seen_heads.get(frozenset())
        assert after is not None and after is not before
        reused += before is not None
    assert reused == 11
