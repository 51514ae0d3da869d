"""`python -m bench.large`: does one large request hold up everybody else's?

One gateway (`ctxgate serve`, worker off, shipped config, embedded Redis) in front of the
benchmark upstream (bench/upstream.py). A probe sends small managed chat calls back to back
on one connection: first alone (the baseline), then while one large request is in flight —
N short user messages (`m0` ... `mN-1`, as in issue 10) in the `default` class, over its
budget, so the engine must fit them. For each N: the large request's time to answer (or
"none within the timeout"), and the probe's p50/p99/max during it against the baseline,
and for `--after-s` once it is answered (its trace is built then: on the fitting thread
for a large call, fitted or sent unmanaged). `--bypass` sends the large request with
`x-ctxgate-bypass: true`: parsed, observed and freed on the fitting thread all the same.
Target (issue 10): no probe waits more than 50 ms longer than without the large request.

A large request still unanswered at the timeout leaves the gateway busy (fitting runs on
its event loop on main as of this writing): the gateway is restarted before the next size.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench import servers
from gateway.store.embedded import EmbeddedRedis

SIZES = [1_000, 10_000, 20_000, 50_000, 100_000]
PROBE = orjson.dumps({"model": "gpt-4o-mini", "messages": [
    {"role": "system", "content": "You are a helpful support agent."},
    {"role": "user", "content": "Is there a status page?"}]})
HEADERS = {"authorization": "Bearer sk-bench-large", "content-type": "application/json"}


def large_body(n: int) -> bytes:
    return orjson.dumps({"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": f"m{i}"} for i in range(n)]})


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(latencies: list[float]) -> dict[str, Any]:
    ms = [x * 1000 for x in latencies]
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 1),
            "p99_ms": round(percentile(ms, 0.99), 1), "max_ms": round(max(ms), 1)}


def probe_until(url: str, stop: threading.Event, out: list[float], errors: list[str]) -> None:
    with httpx.Client(timeout=600) as client:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                answer = client.post(f"{url}/v1/chat/completions", content=PROBE,
                                     headers=HEADERS)
                if answer.status_code != 200:
                    errors.append(str(answer.status_code))
            except httpx.HTTPError as exc:
                errors.append(type(exc).__name__)
                if stop.is_set():
                    return
            out.append(time.perf_counter() - started)


def baseline(url: str, seconds: float) -> dict[str, Any]:
    stop, latencies, errors = threading.Event(), [], []  # type: ignore[var-annotated]
    thread = threading.Thread(target=probe_until, args=(url, stop, latencies, errors))
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()
    return {**summary(latencies), "errors": len(errors)}


def one_large(url: str, n: int, timeout_s: float, after_s: float, bypass: bool = False
              ) -> dict[str, Any]:
    body = large_body(n)
    stop, latencies, errors = threading.Event(), [], []  # type: ignore[var-annotated]
    thread = threading.Thread(target=probe_until, args=(url, stop, latencies, errors))
    thread.start()
    time.sleep(0.5)  # the probe is running before the large request lands
    started = time.perf_counter()
    result: dict[str, Any] = {"messages": n, "body_mb": round(len(body) / 1e6, 2)}
    try:
        answer = httpx.post(f"{url}/v1/chat/completions", content=body, timeout=timeout_s,
                            headers={**HEADERS, **({"x-ctxgate-bypass": "true"} if bypass
                                                   else {})})
        result.update(status=answer.status_code,
                      answer_s=round(time.perf_counter() - started, 2),
                      tokens_before=answer.headers.get("x-ctxgate-tokens-before"),
                      tokens_after=answer.headers.get("x-ctxgate-tokens-after"),
                      dropped=answer.headers.get("x-ctxgate-dropped-items"),
                      task_class=answer.headers.get("x-ctxgate-task-class"))
        finished = True
    except httpx.TimeoutException:
        result.update(status=None, answer_s=f">{timeout_s:g}")
        finished = False
    stop.set()
    thread.join(timeout=5 if not finished else None)
    result["probe_during"] = {**summary(latencies), "errors": len(errors),
                              "still_waiting": thread.is_alive()}
    result["busy"] = not finished
    if finished and after_s > 0:
        result["probe_after"] = baseline(url, after_s)
    return result


def start_gateway(stack: contextlib.ExitStack, upstream: servers.Server, redis_url: str,
                  log_dir: Path, name: str, fit_timeout_s: float | None) -> servers.Server:
    port = servers.free_port()
    env = {"CTXGATE_UPSTREAM_URL": upstream.base_url + "/v1", "CTXGATE_REDIS_URL": redis_url,
           "CTXGATE_PORT": str(port), "CTXGATE_HOST": "127.0.0.1", "CTXGATE_WORKER": "off",
           "CTXGATE_DROP_LOG": str(log_dir / f"{name}-drops.jsonl"),
           "CTXGATE_LOG_LEVEL": "warning", "CTXGATE_DATA_DIR": str(log_dir / f"{name}-data"),
           "HF_HUB_OFFLINE": "1"}
    if fit_timeout_s is not None:
        env["CTXGATE_FIT_TIMEOUT_S"] = str(fit_timeout_s)
    return servers.start(stack, name, [sys.executable, "-m", "gateway", "serve"], port=port,
                         health="/readyz", env=env, cpus=None, log_dir=log_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--timeout-s", type=float, default=90.0)
    parser.add_argument("--baseline-s", type=float, default=5.0)
    parser.add_argument("--after-s", type=float, default=2.0,
                        help="probe for this long once the large request is answered")
    parser.add_argument("--fit-timeout-s", type=float, default=None,
                        help="CTXGATE_FIT_TIMEOUT_S for the gateway (default: its own, 1 s)")
    parser.add_argument("--bypass", action="store_true",
                        help="send the large request with x-ctxgate-bypass: true")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="bench-large-"))
    redis = EmbeddedRedis(log_dir / "redis").start()
    results: list[dict[str, Any]] = []
    try:
        with contextlib.ExitStack() as stack:
            upstream = servers.start_upstream(stack, None, log_dir)
            gateway = start_gateway(stack, upstream, redis.url, log_dir, "ctxgate-0",
                                    args.fit_timeout_s)
            base = baseline(gateway.base_url, args.baseline_s)
            print("baseline", base, flush=True)
            for index, n in enumerate(args.sizes):
                result = one_large(gateway.base_url, n, args.timeout_s, args.after_s,
                                   args.bypass)
                for phase in ("during", "after"):
                    probe = result.get(f"probe_{phase}", {})
                    if probe.get("n") and base.get("n"):
                        result[f"p99_added_{phase}_ms"] = round(
                            probe["p99_ms"] - base["p99_ms"], 1)
                print(orjson.dumps(result).decode(), flush=True)
                results.append(result)
                if result["busy"]:  # still fitting: a fresh gateway for the next size
                    servers.stop(gateway, grace_s=2)
                    gateway = start_gateway(stack, upstream, redis.url, log_dir,
                                            f"ctxgate-{index + 1}", args.fit_timeout_s)
    finally:
        redis.stop()
    if args.out:
        args.out.write_bytes(orjson.dumps({"baseline": base, "large": results},
                                          option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
