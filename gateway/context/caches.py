"""The context engine's memos, each named and bounded in this one place.

Each maps content to what was computed from it (a message's items, a rewritten text, a
MinHash...), so a hit is always right and an eviction only costs the work again. All are
least-recently-used caches (`LRU`): a hit keeps an entry, the coldest goes first.
One `ContextCaches` lives on the engine for its lifetime and is passed where it is needed.
Those that hold texts (a message's, a rewritten one) are bounded by their texts' size too
(`SizedLRU`): an agent's tool results run to tens of kilobytes each, and a bound by count
alone would let 100,000 of them stay (measured: bench/memgrowth.py, bench/README.md "Soak").
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from gateway.context.items import Part
    from gateway.context.session import Decision

PARTS = 100_000  # a message's items by position and content: a seen message is a lookup
REWRITTEN = 200_000  # an item's text and tokens under a decision: re-applying costs a lookup
STALE = 100_000  # whether a stale pattern occurs in an item
KNOWN = 10_000  # values of a session's constant context (system prompt, task statement)
VALUES = 100_000  # values of a text, for summaries that skip what the model has read
MINHASH = 50_000  # a text's MinHash (its hash values' bytes), for near duplicates
NORMAL = 50_000  # a text's digest with its whitespace normalised (cluster's exact duplicates)
LSH_PARAMS = 64  # MinHash LSH band layout per threshold (one per class setting)
# the values of the items before a step's first decision, counted (`base.decide`), by the
# session's constant values: the next step's head differs from it by a few texts
SEEN_HEADS = 16
# Bytes of text (as characters: exact for ASCII) each text-holding memo keeps at most, with
# ENTRY_BYTES per entry for the objects around the text.
PARTS_BYTES = 128 << 20
REWRITTEN_BYTES = 64 << 20
VALUES_BYTES = 64 << 20
NORMAL_BYTES = 32 << 20
KNOWN_BYTES = 16 << 20  # a session's constant context has ~100 values: ~5 kB an entry
# a long session's head holds its history's texts (up to ~1 MB): the memo keeps them alive
# until evicted, so it is bounded by their size too, not by SEEN_HEADS alone
SEEN_HEADS_BYTES = 64 << 20
ENTRY_BYTES = 200
TEXT_BYTES = 64  # a short text's own object, and its slot, inside a tuple or a set

K = TypeVar("K")
V = TypeVar("V")


def text_bytes(*parts: object) -> int:
    """The size of the texts in `parts` (texts, bytes, or tuples, lists and sets of them,
    one level deep, each of those texts with TEXT_BYTES for its object), plus ENTRY_BYTES."""
    size = ENTRY_BYTES
    for part in parts:
        if isinstance(part, str | bytes):
            size += len(part)
        elif isinstance(part, tuple | list | frozenset | set):
            size += sum(len(x) + TEXT_BYTES for x in part if isinstance(x, str | bytes))
    return size


def _parts_bytes(key: tuple[Any, ...], parts: list[Part]) -> int:
    return text_bytes(key) + sum(len(part[3]) for part in parts)


class LRU(MutableMapping[K, V]):
    """A least-recently-used map bounded by `maxsize` entries: past it the coldest go
    first; a hit makes an entry the most recent. cachetools' `LRUCache` semantics on one C
    `OrderedDict`: a hit costs a lookup and a move, where cachetools' layers of Python calls
    cost five times as much, and a step call looks up every item of its session."""

    def __init__(self, maxsize: int) -> None:
        self._data: OrderedDict[K, V] = OrderedDict()
        self._sizes: dict[K, int] | None = None  # per entry, when sized (`SizedLRU`)
        self.maxsize = maxsize
        self.currsize = 0

    def get(self, key: K, default: V | None = None) -> V | None:  # type: ignore[override]
        data = self._data
        try:
            value = data[key]
            data.move_to_end(key)
        except KeyError:
            return default
        return value

    def __getitem__(self, key: K) -> V:
        value = self._data[key]
        self._data.move_to_end(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __setitem__(self, key: K, value: V) -> None:
        self._store(key, value, 1)

    def _store(self, key: K, value: V, size: int) -> None:
        if key in self._data:
            del self[key]
        while self._data and self.currsize + size > self.maxsize:
            self.popitem()
        self._data[key] = value
        if self._sizes is not None:
            self._sizes[key] = size
        self.currsize += size

    def __delitem__(self, key: K) -> None:
        del self._data[key]
        self.currsize -= 1 if self._sizes is None else self._sizes.pop(key)

    def popitem(self) -> tuple[K, V]:
        """The coldest entry, removed."""
        key, value = self._data.popitem(last=False)
        self.currsize -= 1 if self._sizes is None else self._sizes.pop(key)
        return key, value

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


class SizedLRU(LRU[K, V]):
    """An LRU bounded by entries and by the size of what they hold (`size_of(key, value)`,
    estimated): the coldest entries go first past either bound; an entry larger than the
    whole size bound is not kept."""

    def __init__(self, max_entries: int, max_bytes: int,
                 size_of: Callable[[Any, Any], int] = text_bytes) -> None:
        super().__init__(maxsize=max_bytes)
        self._sizes = {}
        self.max_entries = max_entries
        self._size_of = size_of

    def __setitem__(self, key: K, value: V) -> None:
        size = self._size_of(key, value)
        if size > self.maxsize:
            return
        self._store(key, value, size)
        while len(self) > self.max_entries:
            self.popitem()


def _lru(size: int) -> Callable[[], LRU[Any, Any]]:
    return lambda: LRU(maxsize=size)


def _seen_head_bytes(key: frozenset[str], head: SeenHead) -> int:
    """A `SeenHead`'s size: its key's values, its texts and its counted values."""
    return text_bytes(key, tuple(head.texts), tuple(head.counts))


def _sized(entries: int, max_bytes: int,
           size_of: Callable[[Any, Any], int] = text_bytes) -> Callable[[], SizedLRU[Any, Any]]:
    return lambda: SizedLRU(entries, max_bytes, size_of)


@dataclass(frozen=True, slots=True)
class SeenHead:
    """A run of items' texts (with their multiplicity) and how many of them hold each value:
    a later run is counted from it by the texts that left and came (`base._head_values`).
    Never changed once made (a fit on another thread may read it)."""

    texts: Counter[str]
    counts: Counter[str]


@dataclass(frozen=True, slots=True)
class ContextCaches:
    parts: LRU[tuple[Any, ...], list[Part]] = field(
        default_factory=_sized(PARTS, PARTS_BYTES, _parts_bytes))
    rewritten: LRU[tuple[str, Decision, str], tuple[str | None, int]] = field(
        default_factory=_sized(REWRITTEN, REWRITTEN_BYTES))
    stale: LRU[tuple[str, str], bool] = field(default_factory=_lru(STALE))
    known: LRU[str, frozenset[str]] = field(default_factory=_sized(KNOWN, KNOWN_BYTES))
    values: LRU[str, frozenset[str]] = field(default_factory=_sized(VALUES, VALUES_BYTES))
    minhash: LRU[str, bytes] = field(default_factory=_lru(MINHASH))
    normal: LRU[str, str] = field(default_factory=_sized(NORMAL, NORMAL_BYTES))
    lsh_params: LRU[float, tuple[int, int]] = field(default_factory=_lru(LSH_PARAMS))
    seen_heads: LRU[frozenset[str], SeenHead] = field(
        default_factory=_sized(SEEN_HEADS, SEEN_HEADS_BYTES, _seen_head_bytes))
