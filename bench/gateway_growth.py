"""What grows outside the engine through the gateway (issue 7: per-call time grows with the
new content only): the 300-call synthetic session replayed through a real gateway, Redis
behind a counting proxy (`bench/capacity.py`), and for the first and the last `--edge`
calls, per call: the gateway's `x-ctxgate-overhead-ms`, the bytes sent to and read from
Redis by command and key kind, and (`--profile DIR`) a cProfile of the gateway's event-loop
thread over those calls only (switched on and off by signals), to compare function by
function; or (`--pyspy DIR`) py-spy's samples of every thread of the gateway over those
calls (the fitting thread's work included, native frames too), compared function by
function as samples per call.

    python -m bench.gateway_growth [--turns 300] [--edge 20] [--profile /tmp/prof]
    python -m bench.gateway_growth --tree /tmp/base ...   # another checkout's gateway
    python -m bench.gateway_growth --pyspy /tmp/spy [--bypass]
    python -m bench.gateway_growth --format responses|messages   # the other wire formats
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import httpx
import orjson

from bench import capacity
from bench.capacity import CountingProxy
from bench.wire_convert import CONVERTERS
from gateway.context.replay import calls_from_messages
from gateway.store.embedded import EmbeddedRedis
from tests.harness import Upstream, free_port, stop, wait_until_up
from tests.sessions import synthetic_session

MODEL = "gpt-4o-mini"
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses",
         "messages": "/v1/messages"}
ITEMS = {"chat": "messages", "responses": "input", "messages": "messages"}
SETTLE_S = 0.05  # the trace is written by a task that follows the response
# Run in the gateway's process: SIGUSR1 starts the profiler (the event loop's thread),
# SIGUSR2 stops it and dumps to the file named in CTXGATE_GROWTH_PROFILE, with a number.
LAUNCHER = """
import cProfile, os, runpy, signal, sys
profile, dumps = cProfile.Profile(), [0]
def on(*_): profile.enable()
def off(*_):
    profile.disable(); dumps[0] += 1
    profile.dump_stats(f"{os.environ['CTXGATE_GROWTH_PROFILE']}.{dumps[0]}")
    profile.clear()
signal.signal(signal.SIGUSR1, on); signal.signal(signal.SIGUSR2, off)
sys.argv = ["gateway", "serve"]
runpy.run_module("gateway", run_name="__main__")
"""


class _SizedResp(capacity._Resp):
    """The proxy's command splitter, also tallying each command's bytes by name and key kind."""

    sizes: ClassVar[Counter[str]] = Counter()
    counts: ClassVar[Counter[str]] = Counter()

    def _one(self) -> str | None:
        before = bytes(self.buf)
        name = super()._one()
        if name is not None:
            size = len(before) - len(self.buf)
            key = before[:size].split(b"\r\n")
            kind = _kind(key[4].decode(errors="replace")) if len(key) > 4 else ""
            _SizedResp.sizes[f"{name} {kind}"] += size
            _SizedResp.counts[f"{name} {kind}"] += 1
        return name


def _kind(key: str) -> str:
    """A key's kind: its parts with tenant, hashes and ids left out."""
    parts = [p for p in key.split(":") if not p.startswith("{") and p != "ctxgate"]
    return ":".join(p for p in parts[:2] if not any(c.isdigit() for c in p[:12]))


def _start_gateway(tree: Path, tmp: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes],
                                                                           str]:
    port = free_port()
    full = {**os.environ, "CTXGATE_PORT": str(port), "CTXGATE_HOST": "127.0.0.1",
            "CTXGATE_DATA_DIR": str(tmp / "data"), "CTXGATE_DROP_LOG": str(tmp / "drops.jsonl"),
            "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(tree), **env}
    log = tmp / "gateway.log"
    process = subprocess.Popen([sys.executable, "-c", LAUNCHER], cwd=tree, env=full,
                               stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_until_up(f"{url}/readyz", process, log, 600)
    return process, url


def run(args: argparse.Namespace) -> dict[str, Any]:
    calls = calls_from_messages(synthetic_session(args.seed, args.turns)[1], MODEL)
    if args.format in CONVERTERS:  # Anthropic's API wants `max_tokens`
        extra = {"max_tokens": 1024} if args.format == "messages" else {}
        calls = [{**CONVERTERS[args.format](call), **extra} for call in calls]
    edges = {"first": range(args.edge), "last": range(len(calls) - args.edge, len(calls))}
    out: dict[str, Any] = {"calls": len(calls)}
    with tempfile.TemporaryDirectory() as raw_tmp, contextlib.ExitStack() as stack:
        tmp = Path(raw_tmp)
        store = EmbeddedRedis(tmp / "redis").start()
        stack.callback(store.stop)
        capacity._Resp = _SizedResp  # type: ignore[misc]
        proxy = CountingProxy(store.port)
        upstream = Upstream.start(tmp)
        stack.callback(stop, upstream.process)
        profile = str(args.profile / "gateway") if args.profile else str(tmp / "p")
        process, url = _start_gateway(args.tree, tmp, {
            "CTXGATE_UPSTREAM_URL": f"{upstream.url}/v1", "CTXGATE_WORKER": "off",
            "CTXGATE_ANTHROPIC_UPSTREAM_URL": upstream.url,
            "CTXGATE_REDIS_URL": f"redis://127.0.0.1:{proxy.port}/0",
            "CTXGATE_GROWTH_PROFILE": profile})
        stack.callback(stop, process)
        headers = {"authorization": "Bearer sk-bench-growth-0000",
                   "x-ctxgate-session-id": f"growth-{args.seed}"}
        if args.bypass:  # the floor: the same bodies read, forwarded and metered, not fitted
            headers["x-ctxgate-bypass"] = "true"
        every: list[tuple[int, int, float]] = []  # each call: body bytes, new bytes, overhead
        with httpx.Client(timeout=60) as client:
            for n, body in enumerate(calls):
                edge = next((name for name, span in edges.items() if n in span), None)
                if edge and n == edges[edge][0]:
                    _SizedResp.sizes.clear()
                    _SizedResp.counts.clear()
                    before, ms, cpu = proxy.snapshot(), [], _cpu_s(process.pid)
                    sent, waited = 0, []
                    if args.profile:
                        process.send_signal(signal.SIGUSR1)
                        time.sleep(0.2)
                    if args.pyspy:
                        spy = _spy(process.pid, args.pyspy / f"{edge}.txt")
                content = json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                                     allow_nan=False).encode()  # httpx's `json=`, timed apart
                posted = time.perf_counter()
                response = client.post(f"{url}{PATHS[args.format]}", content=content,
                                       headers={**headers, "content-type": "application/json"})
                if edge:
                    waited.append(1000 * (time.perf_counter() - posted))
                assert response.status_code == 200, response.text
                time.sleep(SETTLE_S)
                every.append((len(content), len(content) - (every[-1][0] if every else 0),
                              float(response.headers["x-ctxgate-overhead-ms"])))
                if edge:
                    ms.append(float(response.headers["x-ctxgate-overhead-ms"]))
                    sent += len(content)
                if edge and n == edges[edge][-1]:
                    if args.profile:
                        process.send_signal(signal.SIGUSR2)
                        time.sleep(0.5)
                    if args.pyspy:
                        spy.send_signal(signal.SIGINT)
                        spy.wait(30)
                    out[edge] = _edge(proxy.snapshot().minus(before), ms, args.edge)
                    out[edge]["client ms/call (median)"] = round(statistics.median(waited), 3)
                    out[edge]["client body bytes/call"] = round(sent / args.edge)
                    out[edge]["gateway CPU ms/call"] = round(
                        1000 * (_cpu_s(process.pid) - cpu) / args.edge, 2)
                    out[edge]["stored at its last call"] = _stored(store.port, response)
        out["output"] = _output(upstream, tmp / "drops.jsonl", ITEMS[args.format])
    out["per call"] = per_call(every)
    return out


def per_call(every: list[tuple[int, int, float]]) -> dict[str, float]:
    """Every call's overhead fitted as fixed + per new KB + per KB of the whole body (least
    squares over all calls, and over the calls under 3x the median residual again)."""
    import numpy as np

    data = np.array(every, dtype=float)
    design = np.column_stack([np.ones(len(data)), data[:, 1] / 1024, data[:, 0] / 1024])
    keep = np.ones(len(data), dtype=bool)
    for _ in range(2):
        coef = np.linalg.lstsq(design[keep], data[keep, 2], rcond=None)[0]
        residual = np.abs(design @ coef - data[:, 2])
        keep = residual <= 3 * np.median(residual)
    return {"fixed ms": round(float(coef[0]), 3), "ms per new KB": round(float(coef[1]), 4),
            "ms per KB of body": round(float(coef[2]), 5),
            "calls fitted": int(keep.sum()), "calls": len(data)}


def _spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling every thread of `pid` (1 kHz, not pausing it: native frames would)
    into `out` until SIGINT."""
    spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-p",
                            str(pid), "-r", "1000", "-t", "--nonblocking", "-f", "raw",
                            "-o", str(out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the first call
    return spy


def compare_spies(directory: Path, calls: int, top: int) -> None:
    """Functions by samples per call (1 sample = 1 ms of a thread not idle), inclusive, in the
    first edge and the last: those whose share grew most."""
    tallies = []
    for edge in ("first", "last"):
        inclusive: Counter[str] = Counter()
        for line in (directory / f"{edge}.txt").read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = {f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1]
                      for f in stack.split(";")[1:]}
            for frame in frames:
                inclusive[frame] += int(count)
        tallies.append(inclusive)
    first, last = tallies
    print("ms/call first -> last | function (inclusive, every thread)")
    for frame in sorted(last, key=lambda f: first[f] - last[f])[:top]:
        print(f"{first[frame] / calls:7.2f} -> {last[frame] / calls:7.2f} | {frame}")


def _output(upstream: Upstream, drops: Path, items: str = "messages") -> dict[str, str]:
    """SHA-256 of what went upstream (every request's messages) and of the drop log (its
    trace ids and times left out): the same in two checkouts when behaviour is unchanged."""
    sent = hashlib.sha256()
    for request in upstream.requests():
        sent.update(orjson.dumps(orjson.loads(request["body"]).get(items)))
    logged = hashlib.sha256()
    for line in drops.read_bytes().splitlines() if drops.exists() else []:
        event = {k: v for k, v in orjson.loads(line).items() if k not in ("ts", "trace_id")}
        logged.update(orjson.dumps(event, option=orjson.OPT_SORT_KEYS))
    return {"forwarded messages": sent.hexdigest(), "drop log": logged.hexdigest()}


def _cpu_s(pid: int) -> float:
    """The process's user + system CPU time (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stored(port: int, response: httpx.Response) -> dict[str, int]:
    """Bytes of the session hash's fields (decisions summed) and of the call's trace."""
    import redis

    direct = redis.Redis(port=port)
    sizes: Counter[str] = Counter()
    for key in direct.scan_iter(match="*:session:*"):
        for name, value in direct.hgetall(key).items():
            sizes["session " + ("d:*" if name.startswith(b"d:") else name.decode())] += len(value)
    trace_id = response.headers["x-ctxgate-trace-id"]
    for key in direct.scan_iter(match=f"*:trace:{trace_id}"):
        for name, value in direct.hgetall(key).items():
            sizes[f"trace {name.decode()}"] += len(value)
    return dict(sizes.most_common())


def _edge(tally: Any, ms: list[float], n: int) -> dict[str, Any]:
    return {"overhead ms (median)": statistics.median(ms),
            "overhead ms (mean)": round(statistics.fmean(ms), 2),
            "bytes to Redis/call": round(tally.bytes_out / n),
            "bytes from Redis/call": round(tally.bytes_in / n),
            "commands/call": round(sum(tally.commands.values()) / n, 2),
            "round trips/call": round(tally.round_trips / n, 2),
            "bytes/call by command": {k: round(v / n) for k, v in
                                      _SizedResp.sizes.most_common()},
            "commands/call by command": {k: round(v / n, 2) for k, v in
                                         _SizedResp.counts.most_common()}}


def compare_profiles(directory: Path, top: int) -> None:
    """The functions whose own time per call grew most from the first edge to the last."""
    first, last = (pstats.Stats(str(directory / f"gateway.{i}")).stats  # type: ignore[attr-defined]
                   for i in (1, 2))
    rows = []
    for func, (_, calls, own, cum, _) in last.items():
        _, calls0, own0, cum0, _ = first.get(func, (0, 0, 0.0, 0.0, {}))
        rows.append((own - own0, cum - cum0, func, calls0, calls, own0, own, cum0, cum))
    rows.sort(key=lambda r: -r[0])
    print("own s first -> last | cum s first -> last | calls | function")
    for _, _, func, calls0, calls, own0, own, cum0, cum in rows[:top]:
        print(f"{own0:7.3f} -> {own:7.3f} | {cum0:7.3f} -> {cum:7.3f} | {calls0} -> {calls} | "
              f"{func[0].split('/')[-1]}:{func[1]} {func[2]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=Path.cwd(), help="checkout to run")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--edge", type=int, default=20)
    parser.add_argument("--profile", type=Path, help="dump the edges' cProfiles here")
    parser.add_argument("--pyspy", type=Path, help="dump the edges' py-spy samples here")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--format", choices=sorted(PATHS), default="chat",
                        help="send the session in this wire format (bench/wire_convert.py)")
    parser.add_argument("--bypass", action="store_true",
                        help="send x-ctxgate-bypass: the floor every gateway pays per call")
    args = parser.parse_args()
    for directory in (args.profile, args.pyspy):
        if directory:
            directory.mkdir(parents=True, exist_ok=True)
    result = run(args)
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    if args.profile:
        compare_profiles(args.profile, args.top)
    if args.pyspy:
        compare_spies(args.pyspy, args.edge, args.top)


if __name__ == "__main__":
    main()
