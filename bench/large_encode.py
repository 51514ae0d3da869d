"""`python -m bench.large_encode`: what encoding a fitted body of a megabyte or more costs,
the large encoder's runs (`Fitting.large_encoder`) against `orjson.dumps` of the whole body
(main's way), on the same bodies in the same process.

The longest session of a corpus folder (`--queue`, default the Toolathlon claude queue's)
is sent through `Fitting.prepare` in line (the fitting thread's path run on the same loop,
as `bench/same_output.py --cache` runs it), in each `--wire` format. Every time the large
encoder encodes a body, the body is also encoded whole by orjson, the two in alternating
order; both must give the same bytes. Per format: the calls encoded, the fitted body's
size and message count, the medians and means of both over the last `--edge` calls, and the
runs reused and encoded.

    python -m bench.large_encode [--queue DIR/NAME] [--wire chat --wire messages ...]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import orjson

from bench.same_output import _InLine, _sessions
from bench.wire_convert import CONVERTERS
from gateway.api.fitting import Fitting
from gateway.api.route import Call
from gateway.auth import Principal
from gateway.context.replay import build_engine
from gateway.settings import Settings
from gateway.wire.chat import ChatCompletions
from gateway.wire.messages import Messages
from gateway.wire.responses import Responses

QUEUE = Path("/tmp/toolathlon/toolathlon-claude-4.5-sonnet-queue")
WIRES = {"chat": ChatCompletions, "messages": Messages, "responses": Responses}


async def measure(queue: Path, wire_name: str, edge: int) -> dict[str, Any]:
    sessions = _sessions(queue.parent, False, [queue.name])
    name, calls, _ = max(sessions, key=lambda s: len(s[1]))
    wire: Any = WIRES[wire_name]()
    convert = CONVERTERS.get(wire_name, lambda body: body)
    engine = build_engine(Settings())
    fitting = Fitting(engine, engine.metrics, 600.0, thread=_InLine(engine))  # type: ignore[arg-type]
    encoder = fitting.large_encoder
    timed: list[tuple[float, float, int, int]] = []  # runs, whole (ms), bytes, messages
    plain = encoder.dumps

    def dumps(body: dict[str, Any], name: str = "messages", tenant: str = "") -> bytes:
        order = len(timed) % 2
        if order:
            start = time.perf_counter()
            whole = orjson.dumps(body)
            mid = time.perf_counter()
            out = plain(body, name, tenant)
            end = time.perf_counter()
            runs, alone = end - mid, mid - start
        else:
            start = time.perf_counter()
            out = plain(body, name, tenant)
            mid = time.perf_counter()
            whole = orjson.dumps(body)
            end = time.perf_counter()
            runs, alone = mid - start, end - mid
        assert out == whole, "the runs' encoding differs from orjson's"
        items = body.get(name)
        timed.append((1000 * runs, 1000 * alone, len(out),
                      len(items) if isinstance(items, list) else 0))
        return out

    encoder.dumps = dumps  # type: ignore[method-assign]
    for n, chat in enumerate(calls):
        raw = orjson.dumps(convert(chat))
        call = Call({"x-ctxgate-session-id": name}, f"{name}-{n}", time.perf_counter(),
                    Principal("bench", None))
        prepared = await fitting.prepare(wire, raw, call)
        call.fitted = prepared.fitted
        del prepared
        fitting.release(call)
    if engine.embedder is not None:
        engine.embedder.close()
    last = timed[-edge:]
    return {"session": name, "calls": len(calls), "encoded": len(timed),
            "bytes_last": last[-1][2] if last else 0, "items_last": last[-1][3] if last else 0,
            "runs_median_ms": statistics.median(t[0] for t in last) if last else None,
            "whole_median_ms": statistics.median(t[1] for t in last) if last else None,
            "runs_mean_ms": statistics.mean(t[0] for t in last) if last else None,
            "whole_mean_ms": statistics.mean(t[1] for t in last) if last else None,
            "reused": encoder.reused, "runs_encoded": encoder.encoded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", type=Path, default=QUEUE)
    parser.add_argument("--wire", action="append", choices=sorted(WIRES))
    parser.add_argument("--edge", type=int, default=20)
    args = parser.parse_args()
    for wire in args.wire or sorted(WIRES):
        result = asyncio.run(measure(args.queue, wire, args.edge))
        print(wire, orjson.dumps(result).decode(), flush=True)


if __name__ == "__main__":
    main()
