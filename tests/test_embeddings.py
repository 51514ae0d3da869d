"""The embedder's memo of vectors is bounded by bytes as well as by count, and a batch larger
than the memo still gets every vector (vectors come from the Redis cache: no model load)."""

from __future__ import annotations

import tracemalloc
import uuid
from collections.abc import AsyncIterator

import numpy as np
import pytest
import redis.asyncio as aioredis

from gateway.embeddings import (
    DIM,
    VECTORS_BYTES,
    VECTORS_CACHED,
    Embedder,
    content_hash,
    vector_bytes,
)
from gateway.store import keys


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


def vector(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


@pytest.mark.parametrize("bound", [2 << 20, VECTORS_BYTES], ids=["2MiB", "shipped-64MiB"])
def test_the_byte_bound_holds_in_real_memory(bound: int) -> None:
    """Past its byte bound the memo sheds the coldest vectors, and what it keeps costs no
    more memory (traced) than the bound, well before the count bound is reached: at a small
    bound, and at the shipped one (VECTORS_BYTES, VECTORS_CACHED)."""
    embedder = Embedder("unused-model", cache_bytes=bound)
    try:
        kept = bound // vector_bytes(content_hash("x"), vector(0))
        assert kept < VECTORS_CACHED  # the bytes bind, not the count
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for n in range(2 * kept):
            embedder._remember(content_hash(f"text {n}"), vector(n))
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        cache = embedder._cache
        print(f"bound {bound} B: {len(cache)} vectors, counted {cache.currsize} B, "
              f"traced {held} B ({held / bound:.3f} of the bound)")
        assert len(cache) == kept and cache.currsize <= bound
        assert held <= 1.05 * bound, f"{held} bytes held for a bound of {bound}"
        assert embedder.cached(f"text {2 * kept - 1}") is not None  # the newest stay
        assert embedder.cached("text 0") is None  # the coldest went first
    finally:
        embedder.close()


async def test_a_batch_larger_than_the_memo_gets_every_vector(redis: aioredis.Redis) -> None:
    model = f"unused-model-{uuid.uuid4().hex[:6]}"  # its own keys in the shared Redis
    small = 10 * vector_bytes(content_hash("x"), vector(0))
    embedder = Embedder(model, redis, cache_bytes=small)
    try:
        texts = [f"text {n}" for n in range(40)]
        tag = content_hash(model)[:8]
        await redis.mset({keys.embedding(tag, content_hash(t)): vector(n).tobytes()
                          for n, t in enumerate(texts)})
        got = await embedder.embed(texts)
        assert got.shape == (40, DIM)
        for n in (0, 17, 39):
            assert np.array_equal(got[n], vector(n))
        assert len(embedder._cache) == 10 and embedder._cache.currsize <= small
    finally:
        embedder.close()


async def test_the_model_runs_short_batches_on_one_thread(embedder: Embedder) -> None:
    """A rerank's new texts are mostly short with a few at the 256-token cut; the model's
    batches hold at most EMBED_BATCH texts, so a short text is not padded to a long one's
    length beyond its own batch, and torch runs on EMBED_THREADS threads (bench/README.md,
    "Per-call time on long sessions, part eighteen"). The vectors are the model's own."""
    import torch

    from gateway.embeddings import EMBED_BATCH, EMBED_THREADS

    model = embedder._load()
    shapes: list[tuple[int, int]] = []
    # the word embeddings see each batch's token ids, padded: (texts, tokens)
    words = next(m for m in model.modules() if isinstance(m, torch.nn.Embedding))
    hook = words.register_forward_hook(
        lambda _m, args, _out: shapes.append(tuple(args[0].shape))
    )
    tag = uuid.uuid4().hex[:8]
    texts = [f"a long text {tag} " + "word " * 400, *(f"short text {n} {tag}" for n in range(19))]
    try:
        vectors = await embedder.embed(texts)
    finally:
        hook.remove()
    # torch's thread count is the calling thread's: the embedding thread runs on one
    pool = (embedder._owner or embedder)._pool
    assert pool.submit(torch.get_num_threads).result() == EMBED_THREADS
    assert sum(n for n, _ in shapes) == len(texts)
    assert all(n <= EMBED_BATCH for n, _ in shapes), shapes
    assert max(length for _, length in shapes) == 256  # the long text is cut, not dropped
    # the long text pads only its own batch: the 19 short ones cost far less than 19 x 256
    slots = sum(n * length for n, length in shapes)
    assert slots <= EMBED_BATCH * 256 + (len(texts) - EMBED_BATCH) * 32, shapes
    assert vectors.shape == (20, DIM)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
