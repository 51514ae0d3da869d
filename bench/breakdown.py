"""Where a late call's characters go, under the engine and under masking keep-1.

Per corpus and split: the mean over late calls (the yardstick's, `bench/yardstick.py`) of
each kind's forwarded characters as a share of the call as sent, so that the kinds add up
to 1 − late reduction. Kinds: the system prompt, the task (first user message), later
user turns, tool outputs sent as they came, tool outputs rewritten (digest, pointer,
placeholder), assistant text, tool-call JSON.

    .venv/bin/python -m bench.breakdown [--corpus NAME ...] [--split tune|holdout|all]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import corpora
from bench.baselines import mask_keep
from bench.corpus_run import late_fits
from bench.yardstick import text_content

KINDS = ("system", "task", "user", "output verbatim", "output rewritten", "assistant text",
         "tool-call JSON")


def kinds_of(
    sent: Sequence[Mapping[str, Any]], forwarded: Sequence[Mapping[str, Any]]
) -> dict[str, int]:
    """Characters of `forwarded` by kind (message order and count may differ from `sent`:
    a message is matched to its sent twin by identity of role and tool-call ids)."""
    first_user = next((i for i, m in enumerate(sent) if m.get("role") == "user"), -1)
    sent_texts = {text_content(m.get("content")) for m in sent}
    out = dict.fromkeys(KINDS, 0)
    for m in forwarded:
        role, text = m.get("role"), text_content(m.get("content"))
        calls = m.get("tool_calls")
        if role in ("system", "developer"):
            out["system"] += len(text)
        elif role == "user" and first_user >= 0 and m.get("content") == sent[first_user].get(
            "content"
        ):
            out["task"] += len(text)
        elif role == "assistant":
            out["assistant text"] += len(text)
            out["tool-call JSON"] += len(json.dumps(calls)) if calls else 0
        elif role == "user" and not any(x.get("role") == "assistant" for x in sent):
            out["task"] += len(text)
        else:
            out["output verbatim" if text in sent_texts else "output rewritten"] += len(text)
    return out


async def breakdown(
    name: str, sessions: list[corpora.Session], split: str, keep: int = 1
) -> dict[str, Any]:
    masking = f"keep-{keep}"
    sums = {m: dict.fromkeys(KINDS, 0.0) for m in ("none", "ctxgate", masking)}
    n = 0
    async for prefix, fitted, total in late_fits(name, sessions, split):
        n += 1
        candidates = {"none": prefix, "ctxgate": fitted.body["messages"],
                      masking: mask_keep(prefix, keep)}
        for method, fwd in candidates.items():
            for kind, chars in kinds_of(prefix, fwd).items():
                sums[method][kind] += chars / total
    return {"calls": n, **{m: {k: 100 * v / max(n, 1) for k, v in s.items()} for m, s in
                           sums.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=corpora.CORPORA)
    parser.add_argument("--corpus", action="append",
                        choices=(*corpora.JSONL_CORPORA, "swe-agent", "synthetic"),
                        help="synthetic: the 300-call synthetic session of seed 0")
    parser.add_argument("--split", choices=("all", "tune", "holdout"), default="tune")
    parser.add_argument("--keep", type=int, default=1, help="the masking setting beside")
    args = parser.parse_args()
    methods = ("none", "ctxgate", f"keep-{args.keep}")
    for name in args.corpus or corpora.JSONL_CORPORA:
        sessions = ([corpora.synthetic_session(0, 300)] if name == "synthetic"
                    else corpora.load(name, args.corpora))
        result = asyncio.run(breakdown(name, sessions, args.split, args.keep))
        print(f"\n## {name} ({args.split}, {result['calls']} late calls): % of the call as sent")
        print(f"| kind | {' | '.join(methods)} |")
        print("|---|---:|---:|---:|")
        for kind in (*KINDS, "total"):
            cells = [sum(result[m].values()) if kind == "total" else result[m][kind]
                     for m in methods]
            print(f"| {kind} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
