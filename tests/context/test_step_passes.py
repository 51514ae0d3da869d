"""What a compaction step does over the whole history, done cheaper and the same
(bench/README.md, "Per-call time on long sessions, part thirty-nine"): the cluster stage's
sketches and band index answer as datasketch's `MinHash` and `MinHashLSH` do (a step
re-inserted every candidate of the history, and a new text's sketch hashed each shingle
through a Python call); an old user turn's placeholder is measured only when it can be
as long as the turn."""

from __future__ import annotations

import random
from dataclasses import replace

from datasketch import MinHash, MinHashLSH
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.context.apply import placeholder, placeholder_saves
from gateway.context.items import parse_request
from gateway.context.stages.cluster import (
    _PERMUTATIONS,
    _SCHEME,
    _WIDTH,
    NUM_PERM,
    _Bands,
    _minhash,
)
from gateway.context.tokens import TokenCounter

_WORDS = st.sampled_from(["a", "bb", "é", "x_1", "日本", "{", "}", "0", "path/to"])
_BLANK = st.sampled_from([" ", "\n", "\t", "\u00a0", "\u2028", "  "])


def _datasketch(text: str) -> MinHash:
    """`text`'s sketch as datasketch makes it (its default SHA-1 hash, one call a shingle)."""
    words = text.split()
    shingles = {" ".join(words[i : i + 5]).encode() for i in range(max(len(words) - 4, 1))}
    sketch = MinHash(num_perm=NUM_PERM, seed=7, permutations=_PERMUTATIONS, scheme=_SCHEME)
    sketch.update_batch(list(shingles))
    return sketch


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_WORDS, _BLANK), max_size=40).map(
    lambda parts: "".join(w + b for w, b in parts)))
def test_a_sketch_is_datasketchs(text: str) -> None:
    """Fewer than five words (one shingle of all of them, or none: the empty one) and more,
    blanks of every kind between them."""
    assert _minhash(text, {}) == _datasketch(text).hashvalues.tobytes()


def _texts(seed: int, n: int) -> list[str]:
    """`n` texts of 60 words, each a copy of one of a few originals with a few words changed
    (near duplicates at every distance), or a new one."""
    rng = random.Random(seed)
    vocab = [f"w{k}" for k in range(400)]
    bases = [[rng.choice(vocab) for _ in range(60)] for _ in range(4)]
    out = []
    for _ in range(n):
        words = list(rng.choice(bases)) if rng.random() < 0.8 else [
            rng.choice(vocab) for _ in range(60)]
        for _ in range(rng.randrange(0, 6)):
            words[rng.randrange(60)] = rng.choice(vocab)
        out.append(" ".join(words))
    return out


def test_the_band_index_answers_as_minhashlsh() -> None:
    """Interleaved inserts and queries, at three thresholds' layouts: the same keys found
    (the stage takes the least), and some found at each (near duplicates do collide)."""
    for threshold in (0.8, 0.85, 0.9):
        lsh = MinHashLSH(threshold=threshold, num_perm=NUM_PERM)
        bands = _Bands((lsh.b, lsh.r), _WIDTH)
        memo: dict[str, bytes] = {}
        found = 0
        for k, text in enumerate(_texts(int(threshold * 100), 300)):
            sketch = _minhash(text, memo)
            near = bands.query(sketch)
            assert near == set(lsh.query(_datasketch(text)))
            found += bool(near)
            key = f"{k:09d}0000|i{k}"
            bands.insert(key, sketch)
            lsh.insert(key, _datasketch(text))
        assert found > 20


_ITEM = parse_request({"messages": [{"role": "user", "content": "x"}]}, TokenCounter(),
                      "o200k_base").items[0]
_LINES = st.lists(st.sampled_from(["", " ", "\n", "ab", "é" * 7, "x" * 20, '{"type":"text",',
                                   '"text":"a b"}', "[", "\u2028"]), max_size=12).map("".join)


@settings(max_examples=3000, deadline=None)
@given(_LINES, st.sampled_from(["user", "tool_result", "document", "x"]),
       st.integers(0, 40))
def test_a_placeholder_is_measured_only_when_it_can_be_as_long(
        text: str, kind: str, chars: int) -> None:
    item = replace(_ITEM, text=text, kind=kind)  # type: ignore[arg-type]
    assert placeholder_saves(item, chars) == (len(text) > len(placeholder(item)) + chars)
