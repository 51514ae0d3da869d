"""The context engine's memos, each named and bounded in this one place.

Each maps content to what was computed from it (a message's items, a rewritten text, a
MinHash...), so a hit is always right and an eviction only costs the work again. All are
least-recently-used caches from `cachetools`: a hit keeps an entry, the coldest goes first.
One `ContextCaches` lives on the engine for its lifetime and is passed where it is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache

if TYPE_CHECKING:
    from datasketch import MinHash

    from gateway.context.items import Part
    from gateway.context.session import Decision

PARTS = 100_000  # a message's items by position and content: a seen message is a lookup
REWRITTEN = 200_000  # an item's text and tokens under a decision: re-applying costs a lookup
STALE = 100_000  # whether a stale pattern occurs in an item
KNOWN = 10_000  # values of a session's constant context (system prompt, task statement)
VALUES = 100_000  # values of a text, for summaries that skip what the model has read
MINHASH = 50_000  # a text's MinHash, for near duplicates
LSH_PARAMS = 64  # MinHash LSH band layout per threshold (one per class setting)


def _lru(size: int) -> Callable[[], LRUCache[Any, Any]]:
    return lambda: LRUCache(maxsize=size)


@dataclass(frozen=True, slots=True)
class ContextCaches:
    parts: LRUCache[tuple[Any, ...], list[Part]] = field(default_factory=_lru(PARTS))
    rewritten: LRUCache[tuple[str, Decision, str], tuple[str | None, int]] = field(
        default_factory=_lru(REWRITTEN))
    stale: LRUCache[tuple[str, str], bool] = field(default_factory=_lru(STALE))
    known: LRUCache[str, frozenset[str]] = field(default_factory=_lru(KNOWN))
    values: LRUCache[str, frozenset[str]] = field(default_factory=_lru(VALUES))
    minhash: LRUCache[str, MinHash] = field(default_factory=_lru(MINHASH))
    lsh_params: LRUCache[float, tuple[int, int]] = field(default_factory=_lru(LSH_PARAMS))
