"""Decode time per call of a recorded session's bodies written in the openai SDK's member
order (`model`, `messages`, then `tools`, `tool_choice`), through the gateway's
`BodyCache` as its routes decode them (bench/README.md, "Bodies with their tools after
the messages").

    python -m bench.body_order --session /tmp/toolathlon/toolathlon-claude-4.5-sonnet-queue

The longest session of the folder's `sessions.jsonl`; each call's body is the history up
to it, decoded as the routes decode it: under a megabyte (`MAX_BODY_BYTES`) as on the loop,
from it on as on the fitting thread (`parse_large`, and `off_loop` where the checkout has it:
bodies of a megabyte and more resumed too, bench/README.md "Per-call time on long
sessions, part thirty-two"). Prints, for the calls of 64 KiB to 1 MiB (`bodies.MIN_BYTES`)
and for those of 1 MiB and more, how many the cache resumed from the session's previous
body, and the median decode time of those calls and of the last 20 of them. Run it from
another checkout with
`PYTHONPATH=DIR python bench/body_order.py ...` to time that checkout's cache.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from gateway.api.asgi import parse_json_object
from gateway.api.bodies import MAX_BODY_BYTES, MIN_BYTES, BodyCache
from gateway.api.pieces import parse_large
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
    off_loop: dict[str, Any] = ({"off_loop": True} if "off_loop" in inspect.signature(
        BodyCache.decode_traced).parameters else {})
    cache = BodyCache()
    times: dict[bool, list[float]] = {False: [], True: []}  # by large
    resumed: dict[bool, int] = {False: 0, True: 0}
    for raw in raws:
        large = len(raw) >= MAX_BODY_BYTES
        before = cache.resumed
        start = time.perf_counter()
        if large:
            cache.decode_traced("t", raw, parse_large, **off_loop)
        else:
            cache.decode_traced("t", raw, parse_json_object)
        if len(raw) >= MIN_BYTES:
            times[large].append(time.perf_counter() - start)
            resumed[large] += cache.resumed - before
    print(f"{args.session.name}: {len(raws)} calls, {len(tools)} tools"
          f"{'' if off_loop else ' (a checkout without off_loop)'}")
    for large, label in ((False, "64 KiB-1 MiB"), (True, "1 MiB and more")):
        kept = times[large]
        if kept:
            print(f"  {len(kept)} calls of {label}, {resumed[large]} resumed; decode median "
                  f"{statistics.median(kept) * 1e3:.3f} ms, last 20 of them "
                  f"{statistics.median(kept[-20:]) * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
