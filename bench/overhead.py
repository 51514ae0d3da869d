"""`python -m bench.overhead`: what ctxgate costs in the path of a call, against LiteLLM.

One run measures the same request mix (`bench/mix.py`) against the scripted upstream
directly, through ctxgate (bypass and engine, upstream transport aiohttp; bypass again with
httpx's own pool) and through LiteLLM's proxy (one worker, from `bench/.litellm-venv`), at
1 and 16 connections; and the same mix converted to the Responses and Messages formats
against `/v1/responses` and `/v1/messages` (directly, ctxgate bypass and engine), so the
three routes are compared side by side in one run. On two or more cores the proxy under
test (with its Redis) gets core 1 and the upstream, wrk and this script share core 0, so
the proxy's core is its own and nothing it waits for competes with it.

Rounds interleave the targets (round 1: every target at every connection count, then
round 2, ...) and each figure is the median over rounds, so a burst of other work on the
machine hits every target alike; CPU time used by processes that are not part of the
benchmark is measured during every run and reported ("other load").

Results: a markdown table on stdout and in the Overhead section of `bench/README.md`,
and everything as JSON under `bench/results/`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from bench import loadgen, mix, servers
from bench.report import Row, render_markdown, update_readme

RESULTS_DIR = servers.BENCH_DIR / "results"
README = servers.BENCH_DIR / "README.md"
CLIENT_KEY = "sk-bench-client"


@dataclass
class Target:
    """One thing to measure: a base URL, the headers it needs, the processes behind it."""

    name: str
    base_url: str
    headers: dict[str, str]
    pids: dict[str, int]  # the processes whose CPU time is the target's: name -> pid
    gateway: bool = False
    expect_class: str | None = None  # ctxgate's x-ctxgate-task-class: "bypass" or not
    route: str = "chat"  # a key of mix.ROUTES: the path and wire format of the mix sent
    runs: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return mix.ROUTES[self.route]


def named(name: str, route: str) -> str:
    """A target's name on a route: `engine` on chat, `engine:responses` on the others."""
    return name if route == "chat" else f"{name}:{route}"


def route_headers(route: str) -> dict[str, str]:
    """The client's credentials as that API's SDK sends them."""
    if route == "messages":
        return {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"}
    return {"authorization": f"Bearer {CLIENT_KEY}"}


class CpuClock:
    """CPU seconds used by the whole machine, by our processes, and by one target's."""

    def __init__(self, our_pids: list[int]) -> None:
        self._hz = os.sysconf("SC_CLK_TCK")
        self._ours = our_pids

    def machine_busy(self) -> float:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return (sum(fields[:8]) - idle) / self._hz

    def of(self, pids: list[int]) -> float:
        total = 0.0
        for pid in pids:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / self._hz
        return total

    def ours(self) -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # wrk, once waited for
        return (self.of(self._ours) + own.ru_utime + own.ru_stime + kids.ru_utime
                + kids.ru_stime)


def _connection(base_url: str, timeout_s: float) -> http.client.HTTPConnection:
    parts = urlsplit(base_url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port,
                                      timeout=timeout_s)


def _request(base_url: str, path: str, body: bytes,
             headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    connection = _connection(base_url, timeout_s=120)
    try:
        connection.request("POST", path, body=body,
                           headers={**headers, "content-type": "application/json"})
        response = connection.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        connection.close()


# Per route: the last event of a whole stream, and a key every whole answer has.
FINISHED = {"chat": (b"data: [DONE]", "choices"),
            "responses": (b"event: response.completed", "output"),
            "messages": (b"event: message_stop", "content")}


def check_target(target: Target, bodies: list[bytes]) -> None:
    """Every request of the mix answers 200 with a whole answer or a whole stream."""
    last_event, key = FINISHED[target.route]
    for index, template in enumerate(bodies):
        body = template.replace(b"{n}", b"check-%d" % index)
        status, headers, data = _request(target.base_url, target.path, body, target.headers)
        if status != 200:
            raise RuntimeError(f"{target.name}: mix[{index}] answered {status}: {data[:300]!r}")
        if orjson.loads(body).get("stream"):
            if last_event not in data:
                raise RuntimeError(f"{target.name}: mix[{index}] stream did not finish")
        elif key not in orjson.loads(data):
            raise RuntimeError(f"{target.name}: mix[{index}] is not a whole answer")
        if target.expect_class is not None:
            got = headers.get("x-ctxgate-task-class")
            if (got == "bypass") != (target.expect_class == "bypass"):
                raise RuntimeError(f"{target.name}: mix[{index}] went through as {got!r}")


def scrape_overhead(base_url: str, endpoint: str) -> tuple[float, float, dict[float, float]]:
    """ctxgate_overhead_seconds for one route: (count, sum, {le: cumulative})."""
    from prometheus_client.parser import text_string_to_metric_families

    connection = _connection(base_url, timeout_s=10)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    count, total, buckets = 0.0, 0.0, {}
    for family in text_string_to_metric_families(text):
        if family.name != "ctxgate_overhead_seconds":
            continue
        for sample in family.samples:
            if sample.labels.get("endpoint") != endpoint:
                continue
            if sample.name.endswith("_count"):
                count = sample.value
            elif sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_bucket"):
                buckets[float(sample.labels["le"])] = sample.value
    return count, total, buckets


def overhead_between(before: tuple[float, float, dict[float, float]],
                     after: tuple[float, float, dict[float, float]]) -> dict[str, float]:
    """Mean and (bucket-interpolated) median gateway overhead of the requests in between."""
    count = after[0] - before[0]
    if count <= 0:
        return {}
    mean_ms = (after[1] - before[1]) / count * 1000
    half, lower_le, lower_n = count / 2, 0.0, 0.0
    median_ms = float("nan")
    for le in sorted(after[2]):
        n = after[2][le] - before[2].get(le, 0.0)
        if n >= half:
            width = (le - lower_le) if le != float("inf") else 0.0
            share = (half - lower_n) / (n - lower_n) if n > lower_n else 0.0
            median_ms = (lower_le + width * share) * 1000
            break
        lower_le, lower_n = le, n
    return {"mean_ms": round(mean_ms, 3), "p50_ms": round(median_ms, 3), "count": count}


def measure(target: Target, load: loadgen.Load, connections: int, seconds: float,
            wrk: str | None, cpus: set[int] | None, clock: CpuClock) -> dict[str, Any]:
    before = scrape_overhead(target.base_url, target.path) if target.gateway else None
    busy, ours = clock.machine_busy(), clock.ours()
    theirs = {name: clock.of([pid]) for name, pid in target.pids.items()}
    started = time.monotonic()
    if wrk is not None:
        result = loadgen.run_wrk(wrk, target.base_url, load, connections, seconds, cpus)
    else:
        result = loadgen.run_python(target.base_url, load, connections, seconds)
    elapsed = time.monotonic() - started
    other = (clock.machine_busy() - busy) - (clock.ours() - ours)
    run = result.as_dict()
    used = {name: (clock.of([pid]) - theirs[name]) / elapsed
            for name, pid in target.pids.items()}
    run["target_cpu_cores"] = round(sum(used.values()), 3)
    run["cpu_cores_by_process"] = {name: round(cores, 3) for name, cores in used.items()}
    run["other_load_cores"] = round(max(other, 0.0) / elapsed, 3)
    if before is not None:
        run["gateway_overhead"] = overhead_between(
            before, scrape_overhead(target.base_url, target.path))
    return run


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0,
                        help="seconds per measured run (default 10)")
    parser.add_argument("--warmup", type=float, default=5.0,
                        help="seconds of warm-up per target at the highest connection count")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds; figures are medians over rounds")
    parser.add_argument("--connections", default="1,16")
    parser.add_argument("--targets", default="direct,litellm,bypass,engine,bypass-httpx",
                        help="comma-separated subset of the default")
    parser.add_argument("--routes", default="chat,responses,messages",
                        help="routes the mix is sent to, each in its own format (direct, "
                             "bypass and engine on each; LiteLLM and httpx on chat only)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    parser.add_argument("--nice", type=int, default=0,
                        help="niceness of every benchmark process (root may go below 0 so "
                             "that other work on a shared machine perturbs the runs less)")
    parser.add_argument("--loadgen", choices=("wrk", "python"), default="wrk",
                        help="wrk (installed with apt-get if missing) or the Python fallback")
    parser.add_argument("--mix", choices=("all", "whole", "stream"), default="all",
                        help="the whole mix, or only its non-streaming or streaming requests")
    parser.add_argument("--litellm-spec", default=servers.LITELLM_SPEC)
    parser.add_argument("--from-json", metavar="FILE",
                        help="render the table of a saved results file instead of measuring")
    parser.add_argument("--no-readme", action="store_true",
                        help="do not rewrite the results in bench/README.md")
    args = parser.parse_args(argv)
    if not (1 <= args.rounds <= 10 and 1 <= args.duration <= 120 and 0 <= args.warmup <= 60):
        parser.error("keep --rounds in 1..10, --duration in 1..120, --warmup in 0..60")
    return args


def pick_loadgen(choice: str) -> str | None:
    if choice == "python":
        return None
    wrk = loadgen.find_wrk() or (loadgen.install_wrk() if os.geteuid() == 0 else None)
    if wrk is None:
        print("wrk not found and not installable: falling back to the Python load "
              "generator (its figures are lower bounds)", file=sys.stderr)
    return wrk


def build_targets(stack: contextlib.ExitStack, names: list[str], routes: list[str],
                  args: argparse.Namespace, sut: set[int] | None, gen: set[int] | None,
                  log_dir: Path) -> list[Target]:
    """The targets named, on each route (LiteLLM and the httpx transport: chat only),
    ordered by name, then route; one upstream and one ctxgate per transport serve them all."""
    from gateway.store.embedded import EmbeddedRedis

    upstream = servers.start_upstream(stack, gen, log_dir)
    targets: list[Target] = []
    if "direct" in names:
        targets += [Target(named("direct", r), upstream.base_url, route_headers(r),
                           {"upstream": upstream.pid}, route=r) for r in routes]
    if "litellm" in names:
        command = servers.ensure_litellm(args.litellm_spec)
        proxy, key = servers.start_litellm(stack, command, upstream=upstream, model=mix.MODEL,
                                           cpus=sut, log_dir=log_dir)
        targets.append(Target("litellm", proxy.base_url, {"authorization": f"Bearer {key}"},
                              {"litellm": proxy.pid}))
    gateways = {"aiohttp": any(n in names for n in ("bypass", "engine")),
                "httpx": any(n in names for n in ("bypass-httpx", "engine-httpx"))}
    if any(gateways.values()):
        redis = EmbeddedRedis(log_dir / "redis").start()
        stack.callback(redis.stop)
        assert redis.process is not None
        if sut:
            os.sched_setaffinity(redis.process.pid, sut)
        for transport, wanted in gateways.items():
            if not wanted:
                continue
            gw = servers.start_ctxgate(stack, f"ctxgate-{transport}", upstream=upstream,
                                       redis_url=redis.url, transport=transport, cpus=sut,
                                       log_dir=log_dir)
            pids = {"ctxgate": gw.pid, "redis": redis.process.pid}
            suffix = "" if transport == "aiohttp" else "-httpx"
            for r in routes if transport == "aiohttp" else ["chat"]:
                if f"bypass{suffix}" in names:
                    targets.append(Target(named(f"bypass{suffix}", r), gw.base_url,
                                          {**route_headers(r), "x-ctxgate-bypass": "true"},
                                          pids, gateway=True, expect_class="bypass", route=r))
                if f"engine{suffix}" in names:
                    targets.append(Target(named(f"engine{suffix}", r), gw.base_url,
                                          route_headers(r), pids, gateway=True,
                                          expect_class="engine", route=r))
    order = {name: i for i, name in enumerate(names)}
    return sorted(targets, key=lambda t: (order[t.name.split(":")[0]], routes.index(t.route)))


def run(args: argparse.Namespace) -> dict[str, Any]:
    names = [n.strip() for n in args.targets.split(",") if n.strip()]
    known = {"direct", "litellm", "bypass", "engine", "bypass-httpx", "engine-httpx"}
    if unknown := set(names) - known:
        raise SystemExit(f"unknown targets: {sorted(unknown)}")
    levels = sorted({int(c) for c in args.connections.split(",")})
    cores = os.cpu_count() or 1
    pin = not args.no_pin and cores >= 2
    sut, gen = ({1}, {0}) if pin else (None, None)
    if gen:
        os.sched_setaffinity(0, gen)
    if args.nice:  # inherited by every process started below
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)
    wrk = pick_loadgen(args.loadgen)
    routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    if unknown := set(routes) - set(mix.ROUTES):
        raise SystemExit(f"unknown routes: {sorted(unknown)}")
    bodies = {route: mix.bodies(args.mix, route) for route in routes or ["chat"]}
    log_dir = Path(tempfile.mkdtemp(prefix="ctxgate-bench-"))
    started = datetime.datetime.now(datetime.UTC)
    with contextlib.ExitStack() as stack:
        targets = build_targets(stack, names, routes or ["chat"], args, sut, gen, log_dir)
        measure_all(targets, bodies, levels, args, wrk, gen)
    return {
        "date": started.isoformat(timespec="seconds"),
        "machine": {"cores": cores, "cpu": _cpu_model(), "python": platform.python_version(),
                    "kernel": platform.release()},
        "settings": {"duration_s": args.duration, "warmup_s": args.warmup,
                     "rounds": args.rounds, "connections": levels, "pinned": pin,
                     "nice": args.nice,
                     "proxy_core": sorted(sut) if sut else None,
                     "loadgen_core": sorted(gen) if gen else None,
                     "loadgen": "wrk " + _wrk_version(wrk) if wrk else "python (aiohttp)",
                     "litellm": args.litellm_spec if "litellm" in names else None,
                     "mix": f"{args.mix} ({len(next(iter(bodies.values())))} requests)",
                     "routes": routes,
                     "command": " ".join(["python -m bench.overhead", *sys.argv[1:]])},
        "targets": {t.name: {str(c): runs for c, runs in t.runs.items()} for t in targets},
        "rows": [row.as_dict() for row in summarise(targets, levels)],
    }


def measure_all(targets: list[Target], bodies: dict[str, list[bytes]], levels: list[int],
                args: argparse.Namespace, wrk: str | None, gen: set[int] | None) -> None:
    """Check every target, warm each up, then measure in interleaved rounds (into
    `target.runs`)."""
    clock = CpuClock(sorted({pid for t in targets for pid in t.pids.values()}))
    for target in targets:
        check_target(target, bodies[target.route])
    number = 0
    for target in targets:  # warm-up: pools, caches, the embedding model, JIT-less paths
        number += 10_000_000
        load = loadgen.Load.of(bodies[target.route], target.headers, number, target.path)
        measure(target, load, max(levels), args.warmup, wrk, gen, clock)
    for round_index in range(args.rounds):
        for target in targets:
            for connections in levels:
                number += 10_000_000
                load = loadgen.Load.of(bodies[target.route], target.headers, number,
                                       target.path)
                result = measure(target, load, connections, args.duration, wrk, gen, clock)
                target.runs.setdefault(connections, []).append(result)
                print(f"round {round_index + 1} {target.name:>18} c={connections:<3} "
                      f"{result['rps']:>9.1f} req/s  p50 {result['latency_ms']['p50']:.2f}"
                      f" ms  other load {result['other_load_cores']:.2f} cores",
                      file=sys.stderr, flush=True)


def summarise(targets: list[Target], levels: list[int]) -> list[Row]:
    """Medians over rounds, with ratios to LiteLLM (chat) and added median latency vs the
    upstream directly on the same route."""
    def median(runs: list[dict[str, Any]], *path: str) -> float:
        values = []
        for run in runs:
            value: Any = run
            for key in path:
                value = value.get(key, {}) if isinstance(value, dict) else {}
            if isinstance(value, int | float):
                values.append(float(value))
        return statistics.median(values) if values else float("nan")

    rows = []
    by_name = {t.name: t for t in targets}
    for target in targets:
        for c in levels:
            runs = target.runs.get(c, [])
            rows.append(Row(
                target=target.name, connections=c, rps=median(runs, "rps"),
                p50_ms=median(runs, "latency_ms", "p50"), p99_ms=median(runs, "latency_ms", "p99"),
                errors=sum(sum(r["errors"].values()) for r in runs),
                cpu_cores=median(runs, "target_cpu_cores"),
                rps_per_core=statistics.median(
                    [r["rps"] / r["target_cpu_cores"] for r in runs if r["target_cpu_cores"]]
                    or [math.nan]),
                other_load=max((r["other_load_cores"] for r in runs), default=0.0),
                overhead_mean_ms=median(runs, "gateway_overhead", "mean_ms"),
                overhead_p50_ms=median(runs, "gateway_overhead", "p50_ms"),
            ))
    index = {(r.target, r.connections): r for r in rows}
    for row in rows:
        litellm = index.get(("litellm", row.connections))
        # the upstream answering directly on the row's own route
        route = row.target.partition(":")[2] or "chat"
        direct = index.get((named("direct", route), row.connections))
        if litellm is not None and "litellm" in by_name and litellm.rps > 0:
            row.vs_litellm = row.rps / litellm.rps
        if direct is not None:
            row.added_p50_ms = row.p50_ms - direct.p50_ms
    return rows


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _wrk_version(wrk: str) -> str:
    completed = subprocess.run([wrk, "--version"], capture_output=True, text=True, check=False)
    first = (completed.stdout or completed.stderr).splitlines()
    return first[0].split(" [")[0].removeprefix("wrk ") if first else "?"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json:  # re-summarise and re-render a saved run, measuring nothing
        path = Path(args.from_json)
        results = orjson.loads(path.read_bytes())
        targets = [Target(name, "", {}, {}, runs={int(c): r for c, r in by_c.items()})
                   for name, by_c in results["targets"].items()]
        results["rows"] = [row.as_dict() for row in
                           summarise(targets, results["settings"]["connections"])]
    else:
        results = run(args)
        RESULTS_DIR.mkdir(exist_ok=True)
        stamp = results["date"].replace(":", "").replace("-", "")
        path = RESULTS_DIR / f"overhead-{stamp}.json"
        path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    table = render_markdown(results)
    print(table)
    print(f"\nresults: {path}", file=sys.stderr)
    if not args.no_readme:
        update_readme(README, table)
        print(f"table written to {README}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
