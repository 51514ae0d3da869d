"""Decode time per call of a recorded session's bodies written in the openai SDK's member
order (`model`, `messages`, then `tools`, `tool_choice`), through the gateway's
`BodyCache` as its routes decode them (bench/README.md, "Bodies with their tools after
the messages").

    python -m bench.body_order --session /tmp/toolathlon/toolathlon-claude-4.5-sonnet-queue

The longest session of the folder's `sessions.jsonl`; each call's body is the history up
to it. Prints the calls the cache keeps (64 KiB to 1 MiB: `bodies.MIN_BYTES`,
`MAX_BODY_BYTES`), how many it resumed from the session's previous body, and the median
decode time of those calls and of the last 20 of them.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

from gateway.api.asgi import parse_json_object
from gateway.api.bodies import MAX_BODY_BYTES, MIN_BYTES, BodyCache
from gateway.context.replay import calls_from_messages


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--session", type=Path, required=True, help="a corpus folder")
    args = parser.parse_args(argv)
    lines = (args.session / "sessions.jsonl").read_bytes().splitlines()
    rows = [orjson.loads(line) for line in lines]
    session = max(rows, key=lambda row: len(row["messages"]))
    tools = session.get("tools") or []
    raws = [orjson.dumps({"model": "gpt-4o", "messages": call["messages"], "tools": tools,
                          "tool_choice": "auto"})
            for call in calls_from_messages(session["messages"], "gpt-4o")]
    cache, kept = BodyCache(), []
    for raw in raws:
        start = time.perf_counter()
        cache.decode_traced("t", raw, parse_json_object)
        if MIN_BYTES <= len(raw) < MAX_BODY_BYTES:
            kept.append(time.perf_counter() - start)
    print(f"{args.session.name}: {len(raws)} calls, {len(tools)} tools; {len(kept)} calls of "
          f"64 KiB-1 MiB, {cache.resumed} resumed; decode median "
          f"{statistics.median(kept) * 1e3:.3f} ms, last 20 of them "
          f"{statistics.median(kept[-20:]) * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
