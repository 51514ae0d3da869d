"""The gateway's own steps, each one's CPU per call, early in a long session and late in it
(issue 7: per-call time grows with the new content only).

The whole gateway app runs in this process (`gateway.app.Gateway`, worker off, a real
embedded Redis, an upstream answered in process as `bench/memgrowth.py`'s), driven through
`httpx.ASGITransport` with the 300-call synthetic session of `bench/gateway_growth.py`.
Each named step (a function of the gateway, wrapped here) is timed by the CPU time of the
thread it runs on (`time.thread_time`; a coroutine's only while it runs, not while it
waits), summed over the first `--edge` calls and over the last, per call: what grows from
the one to the other is what grows with the history. Steps nest (a route's total holds its
parts); the times are inclusive. What this cannot see, since no socket is involved:
reading the request's bytes from the client and writing them to the upstream
(`bench/gateway_growth.py` measures those through a real server).

    python -m bench.gateway_steps [--bypass] [--edge 20] [--repeat 3]
    python -m bench.gateway_steps --queue /tmp/toolathlon/toolathlon-deepseek-v3.2-exp-queue
        # the longest session of a corpus folder (JSONL), each call as the replay sends it
    PYTHONPATH=/path/to/other/checkout python -m bench.gateway_steps ...  # its steps
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import httpx
import orjson

# (module, attribute path) of each step; a missing one (another checkout) is left out.
STEPS = [
    ("gateway.api.route", "Route.__call__"),
    ("gateway.api.managed", "ManagedRoute.__call__"),
    ("gateway.api.managed", "read_body"),
    ("gateway.api.bodies", "BodyCache.resume"),
    ("gateway.api.bodies", "BodyCache.decode"),
    ("gateway.api.bodies", "BodyCache.resume_traced"),
    ("gateway.api.bodies", "BodyCache.decode_traced"),
    ("gateway.api.fitting", "parse_json_object"),
    ("gateway.api.fitting", "Fitting.prepare"),
    ("gateway.api.fitting", "Fitting.parse_as_is"),
    ("gateway.wire.chat", "validate_chat_request"),
    ("gateway.api.fitting", "_prepare"),
    ("gateway.wire.messages", "Messages.validate"),
    ("gateway.wire.responses", "Responses.validate"),
    ("gateway.wire.messages", "Messages.view"),
    ("gateway.wire.responses", "Responses.view"),
    ("gateway.api.fitting", "_view"),
    ("gateway.context.engine", "ContextEngine.fit"),
    ("gateway.wire.messages", "Messages.render"),
    ("gateway.wire.responses", "Responses.render"),
    ("gateway.api.bodies", "BodyEncoder.dumps"),
    ("gateway.api.fitting", "_render"),
    ("gateway.api.managed", "ManagedRoute._relay"),
    ("gateway.upstream.client", "Upstream.open"),
    ("gateway.api.managed", "managed_headers"),
    ("gateway.api.route", "Route._record"),
    ("gateway.api.managed", "ManagedRoute.after_response"),
    ("gateway.api.fitting", "_observe_sent"),
    ("gateway.context.engine", "ContextEngine.observe_sent"),
    ("gateway.context.engine", "ContextEngine.observe"),
    ("gateway.api.managed", "ManagedRoute._record"),
    ("gateway.api.fitting", "_trace_parts"),
    ("gateway.api.fitting", "unmarked"),
    ("gateway.observability.explain", "AccountPieces.of"),
    ("gateway.learner.traces", "TraceSink.publish"),
    ("gateway.learner.traces", "TraceSink._write"),
    ("gateway.api.fitting", "Fitting.release"),
]
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses",
         "messages": "/v1/messages"}
CPU: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)
ON = [False]


class _Timed:
    """An awaitable driving `coro`, its CPU counted only while it runs."""

    def __init__(self, coro: Any, name: str) -> None:
        self._coro, self._name = coro, name

    def __await__(self) -> Generator[Any, Any, Any]:
        value, error, spent = None, None, 0.0
        try:
            while True:
                started = time.thread_time()
                try:
                    step = (self._coro.throw(error) if error is not None
                            else self._coro.send(value))
                except StopIteration as done:
                    spent += time.thread_time() - started
                    return done.value
                spent += time.thread_time() - started
                try:
                    value, error = (yield step), None
                except BaseException as thrown:  # passed on to the coroutine
                    value, error = None, thrown
        finally:
            if ON[0]:
                CPU[self._name] += spent
                CALLS[self._name] += 1


class WireUpstream(httpx.AsyncBaseTransport):
    """The model in process, answering each wire format in its own shape (the stub
    upstream's objects: `tests/stub_wire.py`)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        from tests import stub_wire

        body = orjson.loads(await request.aread())
        answer = (stub_wire.response_object(body) if request.url.path.endswith("/responses")
                  else stub_wire.message_object(body))
        return httpx.Response(200, stream=httpx.ByteStream(orjson.dumps(answer)),
                              headers={"content-type": "application/json"})


def _wrap(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(function):
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            return await _Timed(function(*args, **kwargs), name)
        return timed_async

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            if ON[0]:
                CPU[name] += time.thread_time() - started
                CALLS[name] += 1
    return timed


def install(extra: list[str]) -> list[str]:
    """Wrap every step this checkout has (and `module:path` ones); the names wrapped."""
    wrapped = []
    for module_name, path in [*STEPS, *(tuple(e.split(":")) for e in extra)]:
        owner: Any = importlib.import_module(module_name)
        *parents, attribute = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent, None)
        function = getattr(owner, attribute, None) if owner is not None else None
        if function is None:
            continue
        setattr(owner, attribute, _wrap(path, function))
        wrapped.append(path)
    return wrapped


def _queue_calls(folder: Path) -> list[dict[str, Any]]:
    """The calls of the longest session (most calls) of a corpus folder in the JSONL format,
    each as `bench/timing.py --queue` sends it (the SDK's order: the model first)."""
    from bench.corpora import jsonl
    from bench.corpus_run import request
    from bench.yardstick import call_ends

    session = max(jsonl(folder.name, folder.parent), key=lambda s: len(call_ends(s.messages)))
    calls = [request(session, end) for end in call_ends(session.messages)]
    return [call if "model" in call else {"model": "gpt-4o-mini", **call} for call in calls]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench.memgrowth import Upstream
    from bench.wire_convert import CONVERTERS
    from gateway.app import Gateway
    from gateway.context.replay import calls_from_messages
    from gateway.settings import load_settings
    from gateway.store.embedded import EmbeddedRedis
    from tests.sessions import synthetic_session

    wrapped = install(args.step)
    if args.queue is not None:
        calls = _queue_calls(args.queue)
    else:
        calls = calls_from_messages(synthetic_session(args.seed, args.turns)[1], "gpt-4o-mini")
    convert = CONVERTERS.get(args.format, lambda call: call)
    bodies = [orjson.dumps(convert(call)) for call in calls]
    path = PATHS[args.format]
    edges = {"first": range(args.edge), "last": range(len(calls) - args.edge, len(calls))}
    tmp = Path(tempfile.mkdtemp(prefix="bench-gateway-steps-"))
    store = EmbeddedRedis(tmp / "redis").start()
    out: dict[str, Any] = {}
    try:
        for repeat in range(args.repeat):
            settings = load_settings(redis_url=store.url, worker="off",
                                     data_dir=tmp / f"data{repeat}",
                                     drop_log=str(tmp / f"drops{repeat}.jsonl"),
                                     log_level="warning", upstream_url="http://upstream.test/v1",
                                     anthropic_upstream_url="http://upstream.test")
            app = Gateway(settings, transport=WireUpstream() if args.format != "chat"
                          else Upstream())
            await app.startup()
            try:
                await app.services.warm.wait()
                headers = {"authorization": "Bearer sk-bench-steps-0000",
                           "x-ctxgate-session-id": f"steps-{args.seed}-{repeat}",
                           "content-type": "application/json"}
                if args.bypass:
                    headers["x-ctxgate-bypass"] = "true"
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport,
                                             base_url="http://gateway.test") as client:
                    for n, body in enumerate(bodies):
                        edge = next((e for e, span in edges.items() if n in span), None)
                        if edge and n == edges[edge][0]:
                            CPU.clear()
                            CALLS.clear()
                            ON[0] = True
                        response = await client.post(path, content=body,
                                                     headers=headers)
                        assert response.status_code == 200, response.text
                        await asyncio.sleep(0.01)  # the trace's task, after the response
                        if edge and n == edges[edge][-1]:
                            ON[0] = False
                            row = out.setdefault(edge, {})
                            for name in wrapped:
                                row.setdefault(name, []).append(
                                    1000 * CPU[name] / args.edge)
            finally:
                await app.shutdown()
    finally:
        store.stop()
    return {edge: {name: round(statistics.median(values), 3) for name, values in row.items()}
            for edge, row in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--edge", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3, help="sessions; medians reported")
    parser.add_argument("--bypass", action="store_true", help="send x-ctxgate-bypass")
    parser.add_argument("--format", choices=sorted(PATHS), default="chat",
                        help="send the session in this wire format (bench/wire_convert.py)")
    parser.add_argument("--queue", type=Path, default=None,
                        help="the longest session of this corpus folder instead")
    parser.add_argument("--step", action="append", default=[],
                        help="another step to time, as module:Class.function")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print(f"{'CPU ms/call (median of repeats)':44} {'first':>8} {'last':>8} {'grew':>8}")
    for name in result["first"]:
        first, last = result["first"][name], result["last"][name]
        print(f"{name:44} {first:8.3f} {last:8.3f} {last - first:+8.3f}")


if __name__ == "__main__":
    main()
