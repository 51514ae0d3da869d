"""What is left of a late call: forwarded characters by role and kind (long sessions).

Per corpus: the mean over late calls (the yardstick's, `bench/yardstick.py`) of each
kind's characters as a share of the call as sent, as sent and as forwarded by the engine
(shipped config, every call of a session fitted in order, as `bench/breakdown.py`). Unlike
`bench/breakdown.py`, user messages are split into fold notes, a note's carrier text,
gists and verbatim turns, and assistant messages into replies and calls (bench/README.md,
"Telecom ticket queues stop at ~69% late").

    .venv/bin/python -m bench.residue --corpora /tmp/tau2 --corpus tau2-telecom-gpt-4.1-queue
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import corpora
from bench.corpus_run import late_fits
from bench.yardstick import text_content
from gateway.context.fold import FOLD_HEAD, TURNS_HEAD

NOTE = FOLD_HEAD


def kinds_of(sent: Sequence[Mapping[str, Any]],
             forwarded: Sequence[Mapping[str, Any]]) -> Counter[str]:
    """Characters of `forwarded` by kind (verbatim: the text is one of `sent`'s)."""
    sent_texts = {text_content(m.get("content")) for m in sent}
    out: Counter[str] = Counter()
    for m in forwarded:
        role, text = m.get("role"), text_content(m.get("content"))
        calls = m.get("tool_calls")
        same = "verbatim" if text in sent_texts else "rewritten"
        if role in ("system", "developer"):
            out["system"] += len(text)
        elif role == "user" and TURNS_HEAD.match(text):
            out["user: turns note"] += len(text)
        elif role == "user" and NOTE in text:
            out["user: note's carrier text"] += text.index(NOTE)
            out["user: fold note"] += len(text) - text.index(NOTE)
        elif role == "user":
            out[f"user: {same}"] += len(text)
        elif role == "assistant" and calls:
            out["assistant: text beside calls"] += len(text)
            out["assistant: tool-call JSON"] += len(json.dumps(calls))
        elif role == "assistant":
            out[f"assistant: reply {same}"] += len(text)
        else:
            out[f"tool: {same}"] += len(text)
    return out


async def residue(name: str, sessions: list[corpora.Session]) -> dict[str, Any]:
    sent_sum: Counter[str] = Counter()
    fwd_sum: Counter[str] = Counter()
    n = 0
    async for prefix, fitted, total in late_fits(name, sessions):
        n += 1
        for kind, chars in kinds_of(prefix, prefix).items():
            sent_sum[kind] += chars / total
        for kind, chars in kinds_of(prefix, fitted.body["messages"]).items():
            fwd_sum[kind] += chars / total
    kinds = sorted(set(sent_sum) | set(fwd_sum), key=lambda x: -fwd_sum[x])
    return {"calls": n, "rows": [(kind, 100 * sent_sum[kind] / max(n, 1),
                                  100 * fwd_sum[kind] / max(n, 1)) for kind in kinds]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=corpora.CORPORA)
    parser.add_argument("--corpus", action="append", required=True)
    args = parser.parse_args()
    for name in args.corpus:
        result = asyncio.run(residue(name, corpora.load(name, args.corpora)))
        print(f"\n## {name} ({result['calls']} late calls): % of the call as sent")
        print("| kind | sent | forwarded |\n|---|---:|---:|")
        for kind, sent, fwd in result["rows"]:
            print(f"| {kind} | {sent:.1f} | {fwd:.1f} |")
        print(f"| total | 100.0 | {sum(r[2] for r in result['rows']):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
