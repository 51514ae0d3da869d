"""The engine's memos stay within their bounds: entries, and the size of the texts held."""

from __future__ import annotations

from collections import Counter

from gateway.context.caches import (
    ENTRY_BYTES,
    LRU,
    SEEN_HEADS,
    SEEN_HEADS_BYTES,
    TEXT_BYTES,
    ContextCaches,
    SeenHead,
    SizedLRU,
    text_bytes,
)
from gateway.context.tokens import TokenCounter


def test_the_size_bound_evicts_the_coldest() -> None:
    cache: SizedLRU[str, int] = SizedLRU(100, 3 * (ENTRY_BYTES + 1000))
    for name in "abc":
        cache[name * 1000] = 1
    assert cache.get("a" * 1000) == 1  # "a" is now the most recently used
    cache["d" * 1000] = 1
    assert set(cache) == {"a" * 1000, "c" * 1000, "d" * 1000}
    assert cache.currsize == 3 * (ENTRY_BYTES + 1000)


def test_the_entry_bound_holds_for_small_entries() -> None:
    cache: SizedLRU[str, int] = SizedLRU(3, 10**9)
    for n in range(10):
        cache[str(n)] = n
    assert sorted(cache) == ["7", "8", "9"]


def test_an_entry_larger_than_the_size_bound_is_not_kept() -> None:
    cache: SizedLRU[str, int] = SizedLRU(10, 5000)
    cache["small"] = 1
    cache["x" * 10_000] = 2  # no ValueError: the call still gets its answer
    assert list(cache) == ["small"]


def test_text_bytes_counts_the_texts_of_keys_and_values() -> None:
    assert text_bytes("abc", 5) == ENTRY_BYTES + 3
    texts = ENTRY_BYTES + 2 + 3 + 9 + 3 * TEXT_BYTES
    assert text_bytes(("id", 3, "enc"), ("rewritten", 7)) == texts
    assert text_bytes("t", frozenset({"ab", "cde"})) == ENTRY_BYTES + 1 + 5 + 2 * TEXT_BYTES


def test_token_counts_of_long_texts_stay_within_the_size_bound() -> None:
    counter = TokenCounter(cache_bytes=20 * (ENTRY_BYTES + 5000))  # small, to test quickly
    for n in range(100):
        text = f"{n:05d}" + " word" * 999
        assert counter.count(text, "cl100k_base") > 900
    cache = counter._caches["cl100k_base"]
    assert len(cache) <= 20 and cache.currsize <= cache.maxsize
    assert counter.count(f"{99:05d}" + " word" * 999, "cl100k_base") > 900


def test_the_lru_keeps_the_most_recently_used() -> None:
    cache: LRU[str, int] = LRU(3)
    for n, name in enumerate("abc"):
        cache[name] = n
    assert cache.get("a") == 0 and cache["b"] == 1  # "c" is now the coldest
    cache["d"] = 3
    assert list(cache) == ["a", "b", "d"] and cache.currsize == 3
    assert cache.get("c") is None and "c" not in cache
    cache["a"] = 9  # replaced: no eviction, most recent
    assert list(cache) == ["b", "d", "a"] and cache["a"] == 9 and len(cache) == 3
    del cache["b"]
    assert cache.currsize == 2 and cache.popitem() == ("d", 3)


def test_a_replaced_entry_is_sized_anew() -> None:
    cache: SizedLRU[str, str] = SizedLRU(10, 3 * (ENTRY_BYTES + 100))
    cache["k"] = "x" * 100
    cache["k"] = "x" * 10
    assert cache.currsize == ENTRY_BYTES + 1 + 10
    del cache["k"]
    assert cache.currsize == 0 and len(cache) == 0


def test_a_step_head_memo_is_bounded_by_the_size_of_the_texts_it_holds() -> None:
    """`seen_heads` keeps a session's history texts alive until evicted: a few long sessions
    fill its byte bound before its 16 entries (the texts held are counted, not only entries)."""
    caches = ContextCaches()
    text_size = SEEN_HEADS_BYTES // 4  # each head holds a quarter of the bound in texts
    for n in range(SEEN_HEADS):
        texts = Counter({f"{n}-{k}-" + "x" * (text_size // 8): 1 for k in range(8)})
        caches.seen_heads[frozenset({f"session-{n}"})] = SeenHead(texts, Counter({"value": 8}))
    assert 1 <= len(caches.seen_heads) < 4  # the byte bound evicted, not the entry count
    assert caches.seen_heads.currsize <= SEEN_HEADS_BYTES
    assert frozenset({f"session-{SEEN_HEADS - 1}"}) in caches.seen_heads  # the newest stays
