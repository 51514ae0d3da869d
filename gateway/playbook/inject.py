"""Injection: the playbook block of a session, chosen once and pinned.

The first call of a session ranks the active bullets by relevance to the request (plus a
little for their track record), keeps what fits the class's cap, renders it, and pins the
result in the session's hash. Every later call of the session is one HGET and gets the same
bytes, so the provider's prompt cache keeps working; new bullets reach new sessions only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import orjson

from gateway.context.injection import InjectedBlock
from gateway.context.session import PLAYBOOK_PIN_FIELD
from gateway.playbook.bullet import Bullet
from gateway.playbook.config import validate
from gateway.playbook.render import fit_to_cap, render_block
from gateway.playbook.store import PlaybookStore
from gateway.playbook.tokens import count_tokens
from gateway.services import Services
from gateway.store import keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.embeddings import Vectors
    from gateway.observability.metrics import Metrics

PIN_FIELD = PLAYBOOK_PIN_FIELD.decode()  # in the session hash, beside the engine's state
_NONE = b"{}"  # pinned "no playbook" (the session started with an empty one)
TRACK_RECORD_WEIGHT = 0.15
QUERY_CHARS = 1500


class TextEmbedder(Protocol):
    async def embed(self, texts: Sequence[str]) -> Vectors: ...


def rank(
    bullets: Sequence[Bullet], query_vec: Vectors | None, vecs: Vectors | None
) -> list[Bullet]:
    """Most relevant first: cosine to the query plus a bounded track-record bonus."""

    def track(b: Bullet) -> float:
        return TRACK_RECORD_WEIGHT * math.tanh((b.helpful - b.harmful) / 3.0)

    if query_vec is None or vecs is None or len(bullets) == 0:
        scores = [track(b) for b in bullets]
    else:
        cosine = vecs @ query_vec
        scores = [float(c) + track(b) for c, b in zip(cosine, bullets, strict=True)]
    order = sorted(range(len(bullets)), key=lambda i: (-scores[i], bullets[i].id))
    return [bullets[i] for i in order]


class PlaybookInjector:
    """The engine's PlaybookSource: one pinned block per session."""

    def __init__(
        self,
        redis: aioredis.Redis,
        embedder: TextEmbedder | None = None,
        metrics: Metrics | None = None,
        store: PlaybookStore | None = None,
    ) -> None:
        self._redis = redis
        self._embedder = embedder
        self._metrics = metrics
        self._store = store or PlaybookStore(redis)

    @classmethod
    def from_services(cls, services: Services) -> PlaybookInjector:
        """The app's injector; validates the playbook settings (start-up fails if bad)."""
        validate(services.settings)
        return cls(services.redis, services.embedder, services.metrics)

    async def block_for_session(
        self, tenant: str, task_class: str, session_id: str, query: str, cap_tokens: int
    ) -> InjectedBlock | None:
        session_key = keys.session(tenant, session_id)
        pinned = await self._redis.hget(session_key, PIN_FIELD)
        if pinned is not None:
            return _decode(pinned)
        block = await self._choose(tenant, task_class, query, cap_tokens)
        encoded = _encode(block)
        if not await self._redis.hsetnx(session_key, PIN_FIELD, encoded):
            # Another replica pinned this session first: use its block, not ours.
            return _decode(await self._redis.hget(session_key, PIN_FIELD) or _NONE)
        if block is not None and self._metrics is not None:
            self._metrics.playbook_injected_tokens.labels(task_class).observe(block.tokens)
        return block

    def pinned_block(self, pin: bytes) -> InjectedBlock | None:
        return _decode(pin)

    async def _choose(
        self, tenant: str, task_class: str, query: str, cap_tokens: int
    ) -> InjectedBlock | None:
        active = [b for b in await self._store.bullets(tenant, task_class) if b.status == "active"]
        if not active or cap_tokens <= 0:
            return None
        everything = render_block(active)
        if count_tokens(everything) <= cap_tokens:  # all of it fits: no ranking to do
            return InjectedBlock(everything, sorted(b.id for b in active),
                                 count_tokens(everything))
        query_vec, vecs = None, None
        if self._embedder is not None and query.strip():
            # The model reads 256 tokens at most: embed the request's latest words only.
            embedded = await self._embedder.embed(
                [query[-QUERY_CHARS:], *(b.content for b in active)])
            query_vec, vecs = embedded[0], embedded[1:]
        chosen = fit_to_cap(rank(active, query_vec, vecs), cap_tokens)
        if not chosen:
            return None
        text = render_block(chosen)
        return InjectedBlock(text, sorted(b.id for b in chosen), count_tokens(text))


def _encode(block: InjectedBlock | None) -> bytes:
    if block is None:
        return _NONE
    return orjson.dumps({"text": block.text, "ids": block.bullet_ids, "tokens": block.tokens})


def _decode(raw: bytes | str) -> InjectedBlock | None:
    record = orjson.loads(raw)
    if not record:
        return None
    return InjectedBlock(record["text"], list(record["ids"]), int(record["tokens"]))

