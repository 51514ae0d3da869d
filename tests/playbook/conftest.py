"""Playbook test fixtures: a Redis client on the session's embedded server, a fresh tenant."""

from __future__ import annotations

import uuid
import zlib
from collections.abc import AsyncIterator, Sequence

import numpy as np
import pytest
import redis.asyncio as aioredis

from gateway.embeddings import Vectors


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def tenant() -> str:
    return "t" + uuid.uuid4().hex[:10]


class WordEmbedder:
    """A deterministic bag-of-words embedder: same words -> cosine 1, disjoint -> 0.

    Buckets come from CRC-32, not `hash()`: a str hash changes with every process
    (PYTHONHASHSEED), so two words would collide in one run in 256 and a test of distinct
    lessons would flake.
    """

    async def warm(self) -> None:
        """Nothing to load (the worker warms its embedder before it takes entries)."""

    async def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), 256), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, zlib.crc32(word.strip(".,;:").encode()) % 256] += 1.0
            norm = float(np.linalg.norm(out[row]))
            if norm:
                out[row] /= norm
        return out
