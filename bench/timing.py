"""Time per call over long sessions, first 20 calls against the last 20 (issue 7: per-call
time grows with the new content only), for this checkout and optionally another one (the
code before a change) in the same run, rounds interleaved so that both see the same load.

Run through `bench/replay.py --timing [--against DIR] [--rounds N] [--turns N]
[--seeds N] [--web N] [--queue DIR/NAME ...] [--longest N] [--gateway [--wire F ...]]`;
`--wire chat|responses|messages` (repeatable) sends the gateway's calls in that wire format
(converted by `bench.wire_convert` before the clock starts); `--bypass` sends them with
`x-ctxgate-bypass: true` (forwarded as sent: what is left is the gateway's parse, validation
and observation of the body); `--queue` adds the
`--longest` sessions (most calls) of a corpus folder in the JSONL format (e.g. the converted
queues in /tmp), each call sent as the replay sends it (`bench.corpus_run.request`).
Each measurement runs in a child process started from the checkout it measures (`--tree`),
so this file imports nothing of the project at module level and uses only what every
checkout has: `tests.sessions` (the synthetic 300-call sessions), `bench.corpora` and
`bench.corpus_run` (the corpus sessions and their calls), `gateway.context.replay` (the
engine as `ctxgate replay` builds it: in-memory sessions, the drop log to /dev/null), and
`tests.harness` (a real gateway with embedded Redis and the scripted upstream). Per call the
child records the engine's `fit` time (wall clock, and the process's CPU time, which other
processes on a loaded machine disturb far less), or the gateway's `x-ctxgate-overhead-ms`
and the client's round trip, and whether the call's forwarded messages extend the previous
call's (a call between compaction steps) or not (a step call). Figures are means and
medians; the medians are the ones to read on a loaded machine.

    python bench/timing.py --child engine|gateway --tree DIR [--turns N] [--seeds N] [--web N]
        [--corpora DIR] [--queue DIR/NAME ...] [--longest N] [--format F] [--bypass]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve()
EDGE = 20  # calls at each end of a session
WARM_TURNS = 40  # a first session, not measured: classifier, embedder, caches warm
MODEL = "gpt-4o-mini"  # a model the gateway requires, with an exact tokenizer


def _sessions(turns: int, seeds: int, web: int, corpora: Path | None,
              queues: Sequence[Path] = (), longest: int = 2
              ) -> list[tuple[str, list[dict[str, Any]]]]:
    """The warm-up session, then `seeds` synthetic sessions of `turns` turns, the `web`
    longest web-browsing sessions of the shared corpora (`../shared/corpora/`) and the
    `longest` sessions of each corpus folder in `queues`."""
    from gateway.context.replay import calls_from_messages
    from tests.sessions import synthetic_session

    out = [("warm", calls_from_messages(synthetic_session(99, WARM_TURNS)[1], MODEL))]
    for seed in range(seeds):
        out.append((f"synthetic-{seed}-{turns}",
                    calls_from_messages(synthetic_session(seed, turns)[1], MODEL)))
    if web and corpora is not None:
        from bench.corpora import jsonl

        longest = sorted(jsonl("webchorearena", corpora), key=lambda s: -len(s.messages))[:web]
        for session in longest:
            calls = calls_from_messages(session.messages, MODEL)
            if session.tools:
                calls = [{**body, "tools": session.tools} for body in calls]
            out.append((session.id, calls))
    if queues:
        from bench.corpora import jsonl
        from bench.corpus_run import request
        from bench.yardstick import call_ends

        for folder in queues:
            loaded = jsonl(folder.name, folder.parent)
            ranked = sorted(loaded, key=lambda s: -len(call_ends(s.messages)))[:longest]
            for session in ranked:
                ends = call_ends(session.messages)
                out.append((session.id, [request(session, end) for end in ends]))
    return out


def _extends(previous: list[Any] | None, forwarded: list[Any]) -> bool | None:
    return None if previous is None else forwarded[: len(previous)] == previous


async def _engine_child(turns: int, seeds: int, web: int, corpora: Path | None,
                        queues: Sequence[Path] = (), longest: int = 2) -> dict[str, Any]:
    from gateway.context.engine import CallContext
    from gateway.context.replay import build_engine
    from gateway.settings import Settings

    engine = build_engine(Settings())
    assert engine.embedder is not None
    await engine.embedder.embed(["warm up"])
    # As the gateway does once warm (app.py): the model's ~500k long-lived objects out of
    # the collector's sight, else every full collection walks them within some call's time.
    gc.collect()
    gc.freeze()
    out: dict[str, Any] = {}
    for name, calls in _sessions(turns, seeds, web, corpora, queues, longest):
        ms, cpu, between, previous = [], [], [], None
        for n, body in enumerate(calls):
            call = CallContext("bench", f"{name}-{n}", {"x-ctxgate-session-id": name})
            start, start_cpu = time.perf_counter(), time.process_time()
            fitted = await engine.fit(body, call)
            ms.append(1000 * (time.perf_counter() - start))
            cpu.append(1000 * (time.process_time() - start_cpu))
            forwarded = fitted.body["messages"]
            between.append(_extends(previous, forwarded))
            previous = list(forwarded)
        out[name] = {"ms": ms, "cpu_ms": cpu, "between": between}
    engine.embedder.close()
    out.pop("warm")
    return out


@contextlib.contextmanager
def gateway_stack(tmp: Path, timeout_s: float = 600.0) -> Iterator[Any]:
    """Embedded Redis, the scripted upstream and a gateway on them (learner worker off),
    from the checkout first on `sys.path`; yields the `tests.harness.Gateway`. The wait
    allows for loading the embedding model on a busy machine."""
    from gateway.store.embedded import EmbeddedRedis
    from tests.harness import Gateway, Upstream, stop

    with contextlib.ExitStack() as stack:
        redis = EmbeddedRedis(tmp / "redis").start()
        stack.callback(redis.stop)
        upstream = Upstream.start(tmp)
        stack.callback(stop, upstream.process)
        gateway = Gateway.start(tmp / "gw", {
            "CTXGATE_UPSTREAM_URL": f"{upstream.url}/v1", "CTXGATE_REDIS_URL": redis.url,
            "CTXGATE_ANTHROPIC_UPSTREAM_URL": upstream.url,  # `--wire messages`
            "CTXGATE_WORKER": "off"}, wait_path="/readyz", timeout_s=timeout_s)
        stack.callback(stop, gateway.process)
        yield gateway


def _gateway_child(turns: int, seeds: int, web: int, corpora: Path | None,
                   queues: Sequence[Path] = (), longest: int = 2,
                   wire: str = "chat", bypass: bool = False) -> dict[str, Any]:
    import httpx

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, gateway_stack(Path(tmp)) as gateway, \
            httpx.Client(timeout=60) as client:
        for name, calls in _sessions(turns, seeds, web, corpora, queues, longest):
            out[name] = _post_session(client, gateway.base_url, name, calls, wire, bypass)
    out.pop("warm")
    return out


WIRE_PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}


def _post_session(client: Any, base_url: str, name: str, calls: list[dict[str, Any]],
                  wire: str = "chat", bypass: bool = False) -> dict[str, Any]:
    """The session's calls posted in turn (`wire`: each converted to that format by
    `bench.wire_convert`, as `bench/replay.py --format` sends it, and posted to its route;
    converted before the clock starts)."""
    headers = {"authorization": "Bearer sk-bench-timing-0000", "x-ctxgate-session-id": name}
    if wire == "messages":
        headers = {"x-api-key": "sk-bench-timing-0000", "anthropic-version": "2023-06-01",
                   "x-ctxgate-session-id": name}
    if bypass:
        headers["x-ctxgate-bypass"] = "true"
    ms, trip, between, previous = [], [], [], None
    for body in calls:
        # A corpus queue's calls name no model (`corpus_run.request`): the SDK's order.
        sent = body if "model" in body else {"model": MODEL, **body}
        if wire != "chat":
            from bench.wire_convert import CONVERTERS

            sent = CONVERTERS[wire](sent)
            if wire == "messages" and "max_tokens" not in sent:
                sent["max_tokens"] = 1024  # the Messages API requires it
        raw = orjson.dumps(sent)
        start = time.perf_counter()
        response = client.post(f"{base_url}{WIRE_PATHS[wire]}", content=raw,
                               headers={**headers, "content-type": "application/json"})
        trip.append(1000 * (time.perf_counter() - start))
        if response.status_code != 200:
            raise RuntimeError(f"call {len(ms)}: {response.status_code} {response.text[:300]}")
        ms.append(float(response.headers["x-ctxgate-overhead-ms"]))
        dropped = int(response.headers["x-ctxgate-dropped-items"])
        # No forwarded body to compare over HTTP: a step is a call whose drop count moved
        # by more than what its new messages could add.
        between.append(None if previous is None else dropped == previous)
        previous = dropped
    return {"ms": ms, "round_trip_ms": trip, "between": between}


def child_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", choices=("engine", "gateway"), required=True)
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--web", type=int, default=0)
    parser.add_argument("--corpora", type=Path)
    parser.add_argument("--queue", type=Path, action="append", default=[])
    parser.add_argument("--longest", type=int, default=2)
    parser.add_argument("--format", choices=sorted(WIRE_PATHS), default="chat")
    parser.add_argument("--bypass", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.tree.resolve()))
    if args.child == "engine":
        result = asyncio.run(_engine_child(args.turns, args.seeds, args.web, args.corpora,
                                           args.queue, args.longest))
    else:
        result = _gateway_child(args.turns, args.seeds, args.web, args.corpora, args.queue,
                                args.longest, args.format, args.bypass)
    sys.stdout.buffer.write(orjson.dumps(result))


def _run_child(kind: str, tree: Path, turns: int, seeds: int, web: int, corpora: Path,
               queues: Sequence[Path] = (), longest: int = 2,
               wire: str = "chat", bypass: bool = False) -> dict[str, Any]:
    extra = [a for q in queues for a in ("--queue", str(q.resolve()))]
    if wire != "chat":  # the gateway child's (the engine alone has no wire format)
        extra += ["--format", wire]
    if bypass and kind == "gateway":
        extra.append("--bypass")
    done = subprocess.run(
        [sys.executable, str(HERE), "--child", kind, "--tree", str(tree), "--turns", str(turns),
         "--seeds", str(seeds), "--web", str(web), "--corpora", str(corpora.resolve()),
         "--longest", str(longest), *extra],
        cwd=tree, capture_output=True, check=False, env={**os.environ, "PYTHONPATH": ""})
    if done.returncode != 0:
        raise RuntimeError(f"timing child in {tree} failed:\n{done.stderr.decode()[-3000:]}")
    result: dict[str, Any] = orjson.loads(done.stdout)
    return result


def _mean(values: list[float]) -> float:
    return statistics.mean(values) if values else float("nan")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarise(session: dict[str, Any], key: str = "ms") -> dict[str, float]:
    """First and last 20 calls' mean ms, and the same for calls between steps and for step
    calls apart (the session's first call, which has no previous one, left out of both);
    the `_med` figures are medians of the same calls."""
    ms, between = session[key], session["between"]
    calm = [t for t, b in zip(ms, between, strict=True) if b]
    steps = [t for t, b in zip(ms, between, strict=True) if b is False]
    first, last = _mean(ms[:EDGE]), _mean(ms[-EDGE:])
    return {"first": first, "last": last, "ratio": last / first,
            "calm_first": _mean(calm[:EDGE]), "calm_last": _mean(calm[-EDGE:]),
            "step_first": _mean(steps[:5]), "step_last": _mean(steps[-5:]),
            "steps": float(len(steps)),
            "first_med": _median(ms[:EDGE]), "last_med": _median(ms[-EDGE:]),
            "calm_first_med": _median(calm[:EDGE]), "calm_last_med": _median(calm[-EDGE:]),
            "step_first_med": _median(steps[:EDGE]), "step_last_med": _median(steps[-EDGE:]),
            "calls": float(len(ms))}


def run_timing(trees: list[tuple[str, Path]], kinds: list[str], rounds: int, turns: int,
               seeds: int, web: int, corpora: Path, queues: Sequence[Path] = (),
               longest: int = 2, wires: Sequence[str] = ("chat",),
               bypass: bool = False) -> dict[str, Any]:
    """Every (kind, tree) measured once per round, in turn; per session, each figure's
    median over rounds."""
    load = [os.getloadavg()]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for kind, wire in [(k, w) for k in kinds for w in (wires if k == "gateway"
                                                             else ("chat",))]:
            for label, tree in trees:
                result = _run_child(kind, tree, turns, seeds, web, corpora, queues, longest,
                                    wire, bypass)
                name = kind if wire == "chat" else f"{kind}-{wire}"
                runs.setdefault((name, label), []).append(result)
    load.append(os.getloadavg())
    table: dict[str, Any] = {}
    for (kind, label), results in runs.items():
        keys = ["ms", "round_trip_ms"] if kind.startswith("gateway") else ["ms", "cpu_ms"]
        for key in keys:
            for session in results[0]:
                per_round = [summarise(r[session], key) for r in results]
                table[f"{kind}|{key}|{session}|{label}"] = {
                    name: statistics.median(s[name] for s in per_round) for name in per_round[0]}
    return {"load": load, "rounds": rounds, "rows": table}


def print_timing(report: dict[str, Any]) -> None:
    load = " → ".join(", ".join(f"{x:.1f}" for x in avg) for avg in report["load"])
    print(f"\n### Time per call, first {EDGE} calls vs last {EDGE} (median of "
          f"{report['rounds']} interleaved rounds; load average {load})")
    head = ("measured", "session", "code", f"first {EDGE} ms", f"last {EDGE} ms", "last/first",
            "between steps: first / last ms", "step calls: first 5 / last 5 ms", "steps",
            "median first / last ms", "between steps, median first / last ms (ratio)",
            f"step calls, median first / last {EDGE} ms")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for key, r in report["rows"].items():
        kind, what, session, label = key.split("|")
        gateway, _, wire = kind.partition("-")
        measured = {"engine|ms": "engine.fit", "engine|cpu_ms": "engine.fit CPU",
                    "gateway|ms": "gateway overhead-ms",
                    "gateway|round_trip_ms": "gateway round trip"}[f"{gateway}|{what}"] + (
                        f" ({wire})" if wire else "")
        cells = [measured, session, label, f"{r['first']:.2f}", f"{r['last']:.2f}",
                 f"{r['ratio']:.2f}x", f"{r['calm_first']:.2f} / {r['calm_last']:.2f}",
                 f"{r['step_first']:.2f} / {r['step_last']:.2f}", f"{r['steps']:.0f}"]
        if "calm_first_med" in r:  # a report written before the medians were kept has none
            cells += [f"{r['first_med']:.2f} / {r['last_med']:.2f}",
                      f"{r['calm_first_med']:.2f} / {r['calm_last_med']:.2f} "
                      f"({r['calm_last_med'] / r['calm_first_med']:.2f}x)",
                      f"{r['step_first_med']:.2f} / {r['step_last_med']:.2f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    child_main(sys.argv[1:])
