"""A large content block whose digest lists its fields or records lists no more other values
than a short output's digest does (`MENTION_CAP`, not one per MENTION_CHARS_PER_VALUE of its
length): the fields and records lines name what an agent picks from it, and the value list's
long tail past them supplied no value a later call used on Toolathlon (bench/README.md,
"Session 67, size67"). A long plain-text output keeps the long list."""

from __future__ import annotations

import re

import orjson

from gateway.context.summarize import MENTION_CAP, MENTION_CHARS_PER_VALUE, summarize

RUNS = [
    {"id": f"run-{n:03d}", "name": f"Nightly build {n}", "state": "finished",
     "metrics": {"loss": 0.5 + n / 1000, "step": 1000 + n, "tag": f"exp_{n}_v2"},
     "notes": f"Rebased on release_{n}.4 after the flaky test_io_{n} failed twice"}
    for n in range(60)
]
PAYLOAD = orjson.dumps(RUNS, option=orjson.OPT_INDENT_2).decode()


def block(text: str) -> str:
    return orjson.dumps({"type": "text", "text": text, "annotations": None}).decode()


def mentioned(digest: str) -> list[str]:
    m = re.search(r"^\[omitted text mentions: (.*?)(?: \(\+\d+ more\))?\]$", digest, re.M)
    return m.group(1).split(" ") if m else []


def test_a_listed_blocks_value_list_stays_at_the_cap() -> None:
    assert len(PAYLOAD) // MENTION_CHARS_PER_VALUE > 2 * MENTION_CAP[3]
    out = summarize(block(PAYLOAD), "tool_result", 3)
    assert "[records:" in out and "run-000" in out  # its records are named
    assert 0 < len(mentioned(out)) <= MENTION_CAP[3]


def test_a_long_plain_output_keeps_its_long_value_list() -> None:
    text = "\n".join(f"step {n}: wrote out/exp_{n}_v2.ckpt after release_{n}.4 (test_io_{n})"
                     for n in range(200))
    out = summarize(text, "tool_result", 3)
    assert "[records:" not in out and "[omitted fields:" not in out
    assert len(mentioned(out)) > 2 * MENTION_CAP[3]
