"""Where the engine's cost with prompt caching goes, against masking keep-1 (issue 7).

Replays a corpus call by call through the engine (shipped config, no playbook) and bills
every forwarded message as the yardstick does (`bench/yardstick.py`): the characters that
repeat the previous call's forwarded serialization from its start at the cached rate, the
rest in full. Two tables, each beside keep-1 on the same calls:

- *by message*: what the billed characters were — the system prompt, the task statement
  (first user turn), assistant turns and observations (tool results, later user turns),
  each as sent (`verbatim`), rewritten (`changed`: digest, strip, pointer), a keep-1
  placeholder, or the call's latest exchange (`latest`) — fresh or cached;
- *by call*: calls that only append (`append`), the first call of a session, and calls that
  change the prefix, named by the decisions the call took (stage:method:reason).

    .venv/bin/python -m bench.cost_gap [--corpora DIR] [--corpus swe-agent] [--split tune]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import corpora
from bench.baselines import mask_keep, placeholder
from bench.corpus_run import request
from bench.yardstick import call_ends, common_prefix_chars, serialized
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.replay import engine_for
from gateway.settings import Settings

RATE = 0.1
Message = Mapping[str, Any]


def _calls(message: Message) -> list[Any]:
    return [call.get("function") for call in message.get("tool_calls") or []]


def _unchanged(sent: Message, original: Message) -> bool:
    """Sent as the client sent it: the same content and the same calls, whatever ids the
    engine gave them (it renames a `tool_call_id` the client repeated, for one)."""
    return sent.get("content") == original.get("content") and _calls(sent) == _calls(original)


def category(index: int, sent: Message, messages: Sequence[Message]) -> str:
    """What a forwarded message is (`index`: its place in the client's `messages`)."""
    role = messages[index].get("role")
    if role in ("system", "developer"):
        return "system"
    before = messages[:index]
    if role == "user" and not any(m.get("role") == "assistant" for m in before):
        kind = "task"
    else:
        kind = "assistant" if role == "assistant" else "observation"
    if index >= len(messages) - 2 and kind != "task":
        return f"{kind} latest"
    if _unchanged(sent, messages[index]):
        return f"{kind} verbatim"
    if sent.get("content") == placeholder(messages[index])["content"]:
        return f"{kind} placeholder"
    return f"{kind} changed"


def bill(
    sent: Sequence[Message], indexes: Sequence[int], messages: Sequence[Message],
    previous: Sequence[str] | None, into: Counter[str],
) -> list[str]:
    """Add each forwarded message's billed characters to `into` by category; the call's
    serialization (the next call's `previous`)."""
    ser = serialized(sent)
    before = previous or []
    shared = previous is not None  # still inside the previous call's prefix
    for i, (msg, text) in enumerate(zip(sent, ser, strict=True)):
        name = category(indexes[i], msg, messages)
        if shared and i < len(before) and before[i] == text:
            into[f"{name}, cached"] += RATE * len(text)
            continue
        same = common_prefix_chars(before[i], text) if shared and i < len(before) else 0
        shared = False
        into[f"{name}, fresh"] += len(text) - same + RATE * same
    return ser


async def session_gap(
    engine: ContextEngine, session: corpora.Session, messages_by: Counter[str],
    calls_by: Counter[str], counts: Counter[str],
) -> None:
    """One session's calls billed into the two tables (keys prefixed `engine|` / `keep-1|`)."""
    previous: dict[str, list[str] | None] = {"engine": None, "keep-1": None}
    headers = {"x-ctxgate-session-id": f"cost-gap:{session.id}"}
    known: dict[str, Any] = {}
    for k, end in enumerate(call_ends(session.messages)):
        body = request(session, end)
        fitted = await engine.fit(body, CallContext("bench", f"gap-{k}", headers))
        messages = body["messages"]
        state = await engine.sessions.load("bench", headers["x-ctxgate-session-id"])
        new = Counter(f"{d.stage}:{d.method}:{d.reason}" for i, d in state.decisions.items()
                      if known.get(i) != d)
        known = dict(state.decisions)
        indexes = [i for i, _ in fitted.plan] if fitted.plan else list(range(len(messages)))
        last = previous["engine"]
        stable = last is not None and serialized(fitted.body["messages"])[: len(last)] == last
        cause = "first call" if last is None else "append" if stable else (
            "prefix change: " + (", ".join(sorted(new)) or "no new decision"))
        for name, sent, idx in (("engine", fitted.body["messages"], indexes),
                                ("keep-1", mask_keep(messages, 1), range(len(messages)))):
            part: Counter[str] = Counter()
            previous[name] = bill(sent, list(idx), messages, previous[name], part)
            messages_by.update({f"{name}|{key}": v for key, v in part.items()})
            calls_by[f"{name}|{cause}"] += sum(part.values())
        counts[cause] += 1


def print_gap(messages_by: Counter[str], calls_by: Counter[str], counts: Counter[str]) -> None:
    print(f"| billed characters @{RATE} | engine | keep-1 | engine − keep-1 |\n|---|---|---|---|")
    keys = sorted({k.split("|", 1)[1] for k in messages_by})
    for key in keys:
        e, m = messages_by[f"engine|{key}"], messages_by[f"keep-1|{key}"]
        print(f"| {key} | {e:,.0f} | {m:,.0f} | {e - m:+,.0f} |")
    total_e = sum(v for k, v in messages_by.items() if k.startswith("engine|"))
    total_m = sum(v for k, v in messages_by.items() if k.startswith("keep-1|"))
    print(f"| **total** | {total_e:,.0f} | {total_m:,.0f} | {total_e - total_m:+,.0f} |\n")
    print("| calls | n | engine | keep-1 | engine − keep-1 |\n|---|---|---|---|---|")
    for cause, n in counts.most_common():
        e, m = calls_by[f"engine|{cause}"], calls_by[f"keep-1|{cause}"]
        print(f"| {cause} | {n} | {e:,.0f} | {m:,.0f} | {e - m:+,.0f} |")


async def run(names: Sequence[str], root: Path, split: str) -> None:
    with engine_for(Settings()) as engine:
        for name in names:
            sessions = [s for s in corpora.load(name, root) if split in ("all", s.split)]
            tables: tuple[Counter[str], Counter[str], Counter[str]] = (
                Counter(), Counter(), Counter())
            for session in sessions:
                await session_gap(engine, session, *tables)
            print(f"### {name} ({split}, {len(sessions)} sessions)\n")
            print_gap(*tables)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, default=corpora.CORPORA)
    parser.add_argument("--corpus", action="append",
                        help="a shared corpus or a converted folder under --corpora")
    parser.add_argument("--split", choices=("all", "tune", "holdout"), default="all")
    args = parser.parse_args()
    asyncio.run(run(args.corpus or ["swe-agent"], args.corpora, args.split))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
