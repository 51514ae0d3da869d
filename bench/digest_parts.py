"""Which parts of the engine's digests of tool outputs supply a value a later call needs,
and what each part costs (issue 7: cost @0.1 not behind masking keep-1 on short runs).

Replays a split call by call through the engine (shipped config, no playbook) as
`bench.cost_terms` does. In every forwarded call, each observation the engine rewrote (a
tool result or later user turn whose text differs from the client's) is split into parts:
its kept lines (`line:first`, `line:other`), its `[…n lines]` markers, and the list lines
it appends (`[omitted fields: …]`, `[records: …]`, `[omitted text mentions: …]`), a list
line's items also classed by position in the list and by form. A needed value of the call
(the yardstick's, `bench/yardstick.py`) is *supplied* by a part kind when the forwarded
call holds it only in parts of that kind (nowhere else: not in a message sent as it came,
not in another kind of part). Per kind it prints the characters forwarded (summed over the
calls that forward them, and as points of no gateway's cost @0.1 at the cached rate) and
the values supplied (count, and points of the yardstick's recall).

    .venv/bin/python -m bench.digest_parts --corpora /tmp/toolathlon \
        --corpus toolathlon-claude-4.5-sonnet --split tune [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import corpora
from bench.corpus_run import TENANT, call_request
from bench.yardstick import billed, cached_chars, haystack, needed_values, serialized, text_content
from gateway.context.engine import CallContext
from gateway.context.replay import engine_for
from gateway.settings import Settings

RATE = 0.1
_LIST = re.compile(
    r"^\[(omitted fields|records|omitted text mentions): (.*?)(?: \(\+\d+ more\))?\]$")
_MARKER = re.compile(r"^\[…\d+ lines\]$")
_SPLIT = {"omitted fields": "; ", "records": "; ", "omitted text mentions": " "}
POSITIONS = ((0, 4), (5, 9), (10, 19), (20, 39), (40, None))
OFFSETS = ((0, 239), (240, 599), (600, 1199), (1200, 2399), (2400, None))  # chars into a list


def _offset(i: int) -> str:
    lo, hi = next((lo, hi) for lo, hi in OFFSETS if hi is None or i <= hi)
    return f"{lo}+" if hi is None else f"{lo}-{hi}"


def _position(i: int) -> str:
    lo, hi = next((lo, hi) for lo, hi in POSITIONS if hi is None or i <= hi)
    return f"{lo}+" if hi is None else f"{lo}-{hi}"


def _form(item: str) -> str:
    if re.fullmatch(r"-?[\d.,:%$-]+", item):
        return "number"
    if item.startswith(("http://", "https://")) or "@" in item:
        return "link"
    if " " in item:
        return "words"
    if re.search(r"\d", item):
        return "token+digit"
    return "token"


def parts(digest: str) -> Iterator[tuple[str, str, list[tuple[str, str]]]]:
    """(kind, text, items) per line of a digest; items: (item class, text) of a list line."""
    for i, line in enumerate(digest.split("\n")):
        m = _LIST.match(line)
        if m:
            label, body = m.group(1), m.group(2)
            items = body.split(_SPLIT[label])
            at = list(itertools.accumulate((len(it) + 2 for it in items), initial=0))
            yield (label, line + "\n",
                   [(f"{label} @{_position(k)}", it) for k, it in enumerate(items)]
                   + [(f"{label} ^{_offset(at[k])}", it) for k, it in enumerate(items)]
                   + [(f"{label} ~{_form(it)}", it) for it in items])
        elif _MARKER.match(line):
            yield "marker", line + "\n", []
        elif line.startswith("[ctxgate:"):
            yield "placeholder", line + "\n", []
        elif line[:1] in "[{" and (value := _json_value(line)) is not None:
            items: list[tuple[str, str]] = []
            _json_items(value, items, 0)
            yield "line:json", line + "\n", items
        else:
            yield ("line:first" if i == 0 else "line:other"), line + "\n", []


def _json_value(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _json_items(value: Any, out: list[tuple[str, str]], depth: int) -> None:
    """(class, text) of a JSON digest's keys and leaves."""
    if isinstance(value, dict):
        for k, v in value.items():
            out.append(("json key", f'"{k}":'))
            _json_items(v, out, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _json_items(v, out, depth + 1)
    elif isinstance(value, str):
        cls = ("json more" if value.startswith("… ") and value.endswith(" more")
               else "json cut str" if value.endswith(" chars)") and "… (" in value
               else "json str<=20" if len(value) <= 20 else "json str>20")
        out.append((cls, f'"{value}",'))
    else:
        out.append(("json scalar", f"{json.dumps(value)},"))


def _rewritten(fitted: Sequence[dict[str, Any]], sent: Sequence[dict[str, Any]],
               plan: Sequence[int]) -> list[bool]:
    out = []
    for j, m in enumerate(fitted):
        src = sent[plan[j]] if j < len(plan) and plan[j] < len(sent) else None
        out.append(src is not None and m.get("role") in ("tool", "user") and j > 1
                   and text_content(m.get("content")) != text_content(src.get("content"))
                   and not m.get("tool_calls"))
    return out


async def session_parts(engine: Any, name: str, session: corpora.Session,
                        acc: dict[str, Any]) -> None:
    headers = {"x-ctxgate-session-id": f"{name}:{session.id}"}
    last: list[str] | None = None
    for k, (sent, reply) in enumerate(corpora.session_calls(session)):
        body = call_request(session, sent)
        fitted = await engine.fit(body, CallContext(tenant=TENANT, trace_id=f"d{k}",
                                                    headers=headers))
        fwd = fitted.body["messages"]
        ser = serialized(sent)
        acc["base"] += billed(sum(map(len, ser)), cached_chars(last, ser), RATE)
        last = ser
        plan = [i for i, _ in fitted.plan] if fitted.plan else list(range(len(fwd)))
        rew = _rewritten(fwd, sent, plan)
        others = haystack([m for m, r in zip(fwd, rew, strict=True) if not r])
        digest_parts = []
        for j, (m, r) in enumerate(zip(fwd, rew, strict=True)):
            if not r:
                continue
            text = text_content(m.get("content"))
            if len(text) > 0.9 * len(text_content(sent[plan[j]].get("content"))):
                digest_parts.append(("near-whole", text, []))  # a strip, not a digest
            else:
                digest_parts.extend(parts(text))
        for m, r in zip(fwd[:-1], rew[:-1], strict=True):
            if not r and m.get("role") == "tool":
                acc["chars"]["verbatim tool output"] += len(text_content(m.get("content")))
                acc["n"]["verbatim tool output"] += 1
        seen = haystack(fwd)
        for kind, text, items in digest_parts:
            if kind in _SPLIT:  # an item the call forwards more than once
                for it in items[: len(items) // 3]:
                    if seen.count(it[1]) > 1:
                        acc["chars"][f"{kind} =repeated"] += len(it[1]) + 2
                        acc["n"][f"{kind} =repeated"] += 1
            acc["chars"][kind] += len(text)
            acc["n"][kind] += 1
            for cls, it in items:
                acc["chars"][cls] += len(it) + (0 if cls.startswith("json") else 2)
                acc["n"][cls] += 1
        needed = needed_values(reply, sent)
        if not needed:
            continue
        acc["calls"] += 1
        for v in needed:
            if v in others:
                continue
            kinds = {kind for kind, text, _ in digest_parts if v in text}
            if len(kinds) != 1:
                acc["lost" if not kinds else "shared"] += 1
                continue
            kind = kinds.pop()
            acc["values"][kind] += 1
            acc["points"][kind] += 100 / len(needed)
            classes = {cls for kd, _, items in digest_parts if kd == kind
                       for cls, it in items if v in it}
            for cls in classes:
                acc["values"][cls] += 1
                acc["points"][cls] += 100 / len(needed)
            if kind in _SPLIT and len(acc["examples"][kind]) < 40:
                acc["examples"][kind].append(v)


def new_acc() -> dict[str, Any]:
    return {"base": 0.0, "calls": 0, "lost": 0, "shared": 0,
            "chars": defaultdict(int), "n": defaultdict(int), "values": defaultdict(int),
            "points": defaultdict(float), "examples": defaultdict(list)}


def table(name: str, acc: dict[str, Any]) -> str:
    calls = acc["calls"] or 1
    rows = [f"### {name}: {acc['calls']} calls with needed values; shared between kinds "
            f"{acc['shared']}, not forwarded {acc['lost']}\n",
            "| part | n | chars forwarded | size @0.1 (pts) | values supplied | recall (pts) |",
            "|---|---|---|---|---|---|"]
    for kind in sorted(acc["chars"], key=lambda k: (k.split(" ")[0], k)):
        ch = acc["chars"][kind]
        rows.append(f"| {kind} | {acc['n'][kind]} | {ch:,} | {100 * RATE * ch / acc['base']:.2f} "
                    f"| {acc['values'][kind]} | {acc['points'][kind] / calls:.3f} |")
    return "\n".join(rows) + "\n"


async def run(names: Sequence[str], root: Path, split: str, out: Path | None) -> None:
    with engine_for(Settings()) as engine:
        report = {}
        for name in names:
            acc = new_acc()
            for s in corpora.load(name, root):
                if split in ("all", s.split):
                    await session_parts(engine, name, s, acc)
            print(table(f"{name} ({split})", acc), flush=True)
            report[name] = acc
    if out is not None:
        out.write_text(json.dumps(report, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=corpora.CORPORA)
    parser.add_argument("--corpus", action="append", required=True)
    parser.add_argument("--split", choices=("all", "tune", "holdout"), default="tune")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    asyncio.run(run(args.corpus, args.corpora, args.split, args.json))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
