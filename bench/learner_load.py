"""`python -m bench.learner_load`: does the in-process learner slow requests down?

Two gateways run side by side on one embedded Redis (databases 1 and 2, so each has its own
trace stream): one with `worker: inprocess` (the default: its learner is a child process),
one with `worker: off`. Both use the shipped `config/gateway.yaml`; the learner's LLM is the
scripted test upstream (`tests/upstream_stub.py`, at idle priority: it stands in for a remote
service), answering every Reflector and Curator call at once with a valid reflection and
the same ADD (the worst case: the learner is never waiting on a slow LLM), so each learning
job runs the whole
path: load the trace, judge it, reflect, curate, check for near-duplicates (the embedding
model is loaded in the learner on the first check), merge.

Each round, per gateway: a fresh gateway process is started, warmed for 2 s (its learner
loads its model on the jobs this queues, and the queue is drained), then a burst of managed
calls (the overhead benchmark's mix, wrk at 16 connections; one call in eight ends with a
failing tool result, i.e. a learning job) runs while one connection probes with a small
managed chat call, then the same probe alone for as long again, while the in-process
learner works through what the burst queued; then the gateway is stopped. The probe also
runs against the upstream directly; *added latency* is the probe's median through the
gateway minus the direct median of the same round. A gateway is started for every
measurement because two processes of one configuration differ by several percent in CPU
per request (`--control` measures that: a second `worker: off` gateway, whose ratio to
`off` is what noise alone gives); a process kept for every round would put its own luck
into every ratio. Rounds rotate the order of the gateways; figures are medians over rounds.
On two or more cores the gateways (and the learner they start) share core 1; the upstreams,
Redis, wrk and the probe get core 0.

`--unthrottled` adds a third gateway, `worker: inprocess` with its learner's CPU budget
lifted (`learner.max_cpu_share` and `learner.busy_cpu_share` 1: the learner as it ran
before the budget), measured in the same rounds, so the budget's effect is seen side by
side under the same conditions.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import redis
import yaml

from bench import loadgen, mix, servers
from bench.overhead import CLIENT_KEY, CpuClock, pick_loadgen

REFLECTOR, CURATOR = "bench-reflector", "bench-curator"
LESSON = "Give config loaders a default for every optional key before reading it."
PROBE = orjson.dumps({"model": mix.MODEL, "messages": [
    {"role": "system", "content": mix.SUPPORT_SYSTEM},
    {"role": "user", "content": "Is there a status page? (probe {n})"}]})


def start_learner_llm(stack: contextlib.ExitStack, cpus: set[int] | None,
                      log_dir: Path) -> servers.Server:
    """The scripted upstream of the tests, answering the learner's two calls.

    It stands in for a remote LLM, whose CPU is not this machine's: it runs at SCHED_IDLE,
    so serving the learner never takes CPU from the upstream the probe goes through."""
    port = servers.free_port()
    server = servers.start(stack, "learner-llm", [sys.executable, "-m", "tests.upstream_stub",
                                                  str(port)],
                           port=port, health="/_events", env={}, cpus=cpus, log_dir=log_dir)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(server.pid, os.SCHED_IDLE, os.sched_param(0))
    reflection = {"reasoning": "r", "error_identification": "KeyError on a missing key",
                  "root_cause_analysis": "no default", "correct_approach": "default it",
                  "key_insight": LESSON, "bullet_tags": []}
    curation = {"reasoning": "r", "operations": [
        {"type": "ADD", "section": "common_mistakes", "content": LESSON}]}
    for model, answer in ((REFLECTOR, reflection), (CURATOR, curation)):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("POST", "/_script", body=orjson.dumps(
            {"model": model, "responses": [{"content": orjson.dumps(answer).decode()}]}))
        connection.getresponse().read()
        connection.close()
    return server


def unthrottled_config(log_dir: Path) -> Path:
    """The shipped config with the learner's CPU budget lifted (a whole core, busy or not)."""
    config = yaml.safe_load((servers.REPO / "config" / "gateway.yaml").read_text())
    config["learner"].update(max_cpu_share=1.0, busy_cpu_share=1.0)
    path = log_dir / "unthrottled.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start_gateway(stack: contextlib.ExitStack, name: str, worker: str, *, upstream: str,
                  learner_llm: str, redis_url: str, cpus: set[int] | None,
                  log_dir: Path, config: Path | None = None) -> servers.Server:
    port = servers.free_port()
    env = {
        "CTXGATE_UPSTREAM_URL": upstream + "/v1", "CTXGATE_REDIS_URL": redis_url,
        "CTXGATE_PORT": str(port), "CTXGATE_HOST": "127.0.0.1", "CTXGATE_WORKER": worker,
        "CTXGATE_LEARNER_URL": learner_llm + "/v1", "CTXGATE_REFLECTOR_MODEL": REFLECTOR,
        "CTXGATE_CURATOR_MODEL": CURATOR, "CTXGATE_LOG_LEVEL": "warning",
        "CTXGATE_DROP_LOG": str(log_dir / f"{name}-drops.jsonl"),
        "CTXGATE_DATA_DIR": str(log_dir / f"{name}-data"), "HF_HUB_OFFLINE": "1",
        **({"CTXGATE_CONFIG": str(config)} if config else {}),
    }
    return servers.start(stack, name, [sys.executable, "-m", "gateway", "serve"], port=port,
                         health="/readyz", env=env, cpus=cpus, log_dir=log_dir)


class Probe:
    """One keep-alive connection sending the probe call back to back, in a thread."""

    def __init__(self, base_url: str) -> None:
        self._url = base_url
        self._stop = threading.Event()
        self.samples: list[tuple[float, float, float | None]] = []  # (t, seconds, overhead)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        port = int(self._url.rsplit(":", 1)[1])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        n = 0
        headers = {"authorization": f"Bearer {CLIENT_KEY}", "content-type": "application/json"}
        while not self._stop.is_set():
            n += 1
            body = PROBE.replace(b"{n}", str(n).encode())
            started = time.perf_counter()
            connection.request("POST", loadgen.CHAT_PATH, body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            took = time.perf_counter() - started
            overhead = response.getheader("x-ctxgate-overhead-ms")
            self.samples.append((time.monotonic(), took,
                                 float(overhead) if overhead is not None else None))
        connection.close()

    def between(self, start: float, end: float) -> dict[str, float]:
        inside = [s for s in self.samples if start <= s[0] <= end]
        latency = sorted(s[1] * 1000 for s in inside)
        overhead = sorted(s[2] for s in inside if s[2] is not None)
        if len(latency) < 2:
            return {"n": len(latency)}
        cuts = statistics.quantiles(latency, n=100, method="inclusive")
        out = {"n": len(latency), "p50_ms": statistics.median(latency), "p99_ms": cuts[98]}
        if overhead:
            out["overhead_p50_ms"] = statistics.median(overhead)
        return out


def learner_backlog(client: redis.Redis) -> int:
    """Entries of the trace stream not yet acknowledged by the learners."""
    try:
        groups: Any = client.xinfo_groups("ctxgate:traces")
    except redis.ResponseError:
        return int(client.exists("ctxgate:traces"))
    for group in groups:
        if group["name"] in (b"learners", "learners"):
            # Redis 6 reports no `lag`: count what was never delivered ourselves
            last = group["last-delivered-id"]
            last = last.decode() if isinstance(last, bytes) else last
            undelivered = len(client.xrange("ctxgate:traces", f"({last}", "+", count=100_000))
            return int(group["pending"]) + undelivered
    return int(client.xlen("ctxgate:traces"))


def drain(clients: list[redis.Redis], limit_s: float) -> float:
    """Wait (at most `limit_s`) until the learners' queues are empty; the seconds waited."""
    started = time.monotonic()
    while (any(learner_backlog(c) for c in clients)
           and time.monotonic() - started < limit_s):
        time.sleep(0.5)
    return time.monotonic() - started


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as listing:
                found += [int(x) for x in listing.read().split()]
    return found


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
            total += next((int(line.split()[1]) for line in status
                           if line.startswith("VmRSS:")), 0)
    return round(total / 1024, 1)


def measure(gateway: servers.Server, direct: str, load: loadgen.Load, args: argparse.Namespace,
            wrk: str | None, gen: set[int] | None, clock: CpuClock) -> dict[str, Any]:
    """One burst with the probe running, then the probe alone; and the direct probe."""
    with Probe(direct) as probe:
        time.sleep(args.seconds / 2)
    baseline = probe.between(0, float("inf"))
    pids = {"gateway": [gateway.pid], "learner": children_of(gateway.pid)}
    cpu = {name: clock.of(p) for name, p in pids.items()}
    busy, ours = clock.machine_busy(), clock.ours()
    with Probe(gateway.base_url) as probe:
        time.sleep(0.5)
        burst_start = time.monotonic()
        if wrk is not None:
            burst = loadgen.run_wrk(wrk, gateway.base_url, load, args.connections, args.seconds,
                                    gen)
        else:
            burst = loadgen.run_python(gateway.base_url, load, args.connections, args.seconds)
        burst_end = time.monotonic()
        time.sleep(args.seconds)
        after_end = time.monotonic()
    elapsed = after_end - burst_start
    result: dict[str, Any] = {
        "direct": baseline,
        "during": probe.between(burst_start, burst_end),
        "after": probe.between(burst_end, after_end),
        "burst": {"requests": burst.requests, "rps": round(burst.rps, 1),
                  "errors": sum(burst.errors.values())},
        "cpu_cores": {name: round((clock.of(p) - cpu[name]) / elapsed, 3)
                      for name, p in pids.items()},
        "rss_mb": {name: rss_mb(p) for name, p in pids.items()},
        # CPU used by processes that are not part of this benchmark (a shared machine)
        "other_load_cores": round(max((clock.machine_busy() - busy) - (clock.ours() - ours),
                                      0.0) / elapsed, 3),
    }
    for phase in ("during", "after"):
        if "p50_ms" in result[phase] and "p50_ms" in baseline:
            result[phase]["added_ms"] = result[phase]["p50_ms"] - baseline["p50_ms"]
    return result


def variants(args: argparse.Namespace, log_dir: Path) -> dict[str, tuple[str, int, Path | None]]:
    """Gateway name -> (worker, Redis database, config file or the shipped one)."""
    found: dict[str, tuple[str, int, Path | None]] = {"inprocess": ("inprocess", 1, None),
                                                      "off": ("off", 2, None)}
    if args.unthrottled:
        found["unthrottled"] = ("inprocess", 3, unthrottled_config(log_dir))
    if args.control:
        found["off-b"] = ("off", 4, None)
    return found


def share_playbooks(base: str, kinds: dict[str, tuple[str, int, Path | None]]) -> int:
    """Give every gateway the playbooks the first in-process learner learned in the warm-up.

    Without this only the gateways whose learner runs inject a playbook block into their
    calls (the `off` one never learns), so the comparison would weigh the playbook's
    injection (a feature, whoever learns the lessons) as if it were the learner's CPU."""
    dbs = [db for worker, db, _ in kinds.values()]
    source = next(db for worker, db, _ in kinds.values() if worker == "inprocess")
    copied = 0
    with contextlib.closing(redis.Redis.from_url(f"{base}/{source}")) as src:
        keys = [k for k in src.scan_iter(match="*:pb:*", count=1000) if b":pb:delta:" not in k]
        for db in dbs:
            if db == source:
                continue
            with contextlib.closing(redis.Redis.from_url(f"{base}/{db}")) as dst:
                for key in keys:
                    dumped = src.dump(key)
                    if dumped is not None:
                        dst.restore(key, 0, dumped, replace=True)
                        copied += 1
    return copied


class Bench:
    """The servers every measurement shares, and a fresh gateway for each measurement.

    A gateway is started for each measurement and stopped after it: two processes of one
    configuration differ by several percent in CPU a request (hash seeds, memory layout;
    `--control` measures it), so a gateway kept for every round would carry its own
    process's luck into every ratio. The Redis databases (and the playbooks learned in
    them) carry over; the trace stream is emptied between measurements, so each learner
    starts with only what its own warm-up and burst queue."""

    def __init__(self, stack: contextlib.ExitStack, args: argparse.Namespace,
                 log_dir: Path, sut: set[int] | None, gen: set[int] | None) -> None:
        from gateway.store.embedded import EmbeddedRedis

        self.args, self.log_dir, self.sut, self.gen = args, log_dir, sut, gen
        self.kinds = variants(args, log_dir)
        self.upstream = servers.start_upstream(stack, gen, log_dir)
        self.learner_llm = start_learner_llm(stack, gen, log_dir)
        self.store = EmbeddedRedis(log_dir / "redis").start()
        stack.callback(self.store.stop)
        self.base = self.store.url.rsplit("/", 1)[0]
        self.bodies = mix.bodies("all")
        self.headers = {"authorization": f"Bearer {CLIENT_KEY}",
                        "content-type": "application/json"}
        self.wrk = pick_loadgen(args.loadgen)
        self.started = 0

    def client(self, name: str) -> redis.Redis:
        return redis.Redis.from_url(f"{self.base}/{self.kinds[name][1]}")

    def warm(self, name: str, stack: contextlib.ExitStack) -> tuple[servers.Server, float]:
        """A fresh gateway, warmed (caches, and its learner's model loaded by the jobs the
        warm-up queues) and its learner's queue drained; and the seconds that drain took."""
        worker, db, config = self.kinds[name]
        self.started += 1
        gateway = start_gateway(stack, f"ctxgate-{name}-{self.started}", worker,
                                upstream=self.upstream.base_url,
                                learner_llm=self.learner_llm.base_url,
                                redis_url=f"{self.base}/{db}", cpus=self.sut,
                                log_dir=self.log_dir, config=config)
        loadgen.run_python(gateway.base_url, loadgen.Load.of(
            self.bodies, self.headers, 90_000_000 + self.started * 100_000), 2, 2.0)
        with contextlib.closing(self.client(name)) as client:
            waited = drain([client] if worker == "inprocess" else [], self.args.drain_limit)
        return gateway, waited

    def measurement(self, name: str, first_number: int) -> dict[str, Any]:
        with contextlib.ExitStack() as stack:
            gateway, waited = self.warm(name, stack)
            seeded = share_playbooks(self.base, self.kinds)  # what was learned so far, to all
            ours = [self.upstream.pid, self.learner_llm.pid, gateway.pid,
                    *children_of(gateway.pid),
                    *([self.store.process.pid] if self.store.process else [])]
            load = loadgen.Load.of(self.bodies, self.headers, first_number=first_number)
            result = measure(gateway, self.upstream.base_url, load, self.args, self.wrk,
                             self.gen, CpuClock(ours))
            with contextlib.closing(self.client(name)) as client:
                result["learner_backlog_after"] = (learner_backlog(client)
                                                   if self.kinds[name][0] == "inprocess"
                                                   else 0)
                result["drained_before_s"] = round(waited, 1)
                result["playbook_keys_shared"] = seeded
        with contextlib.closing(self.client(name)) as client:
            client.delete("ctxgate:traces")  # its learner is gone: the next one starts afresh
        return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    pin = not args.no_pin and (os.cpu_count() or 1) >= 2
    sut, gen = ({1}, {0}) if pin else (None, None)
    if gen:
        os.sched_setaffinity(0, gen)
    log_dir = Path(tempfile.mkdtemp(prefix="ctxgate-learner-bench-"))
    started = datetime.datetime.now(datetime.UTC)
    with contextlib.ExitStack() as stack:
        bench = Bench(stack, args, log_dir, sut, gen)
        names = list(bench.kinds)
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        warm_up_s = 0.0
        for name in names:  # the in-process learner first: the playbooks all start from;
            with contextlib.ExitStack() as first:  # then every database's embedding cache
                warm_up_s += bench.warm(name, first)[1]
        for round_no in range(args.rounds):
            order = names[round_no % len(names):] + names[:round_no % len(names)]
            for name in order:
                number = (round_no * len(names) + order.index(name)) * 10_000_000
                result = bench.measurement(name, number)
                results[name].append(result)
                print(f"round {round_no + 1} {name}: {orjson.dumps(result).decode()}",
                      file=sys.stderr)
    return {"started": started.isoformat(timespec="seconds"), "cores": os.cpu_count(),
            "pinned": pin, "loadgen": "wrk" if bench.wrk else "python", "args": vars(args),
            "warm_up_drain_s": round(warm_up_s, 1), "gateways_started": bench.started,
            "results": results}


def _median(runs: list[dict[str, Any]], *path: str) -> float:
    values = []
    for run in runs:
        value: Any = run
        for key in path:
            value = value.get(key, {}) if isinstance(value, dict) else {}
        if isinstance(value, int | float):
            values.append(float(value))
    return statistics.median(values) if values else float("nan")


def table(report: dict[str, Any]) -> str:
    rows = ["| learner | added p50 during burst | added p50 after | probe p99 during | "
            "probe p99 after | gateway overhead p50 during / after | burst rps | "
            "learner CPU (cores) | other load (cores) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for worker, runs in report["results"].items():
        rows.append(
            f"| {worker} | +{_median(runs, 'during', 'added_ms'):.2f} ms | "
            f"+{_median(runs, 'after', 'added_ms'):.2f} ms | "
            f"{_median(runs, 'during', 'p99_ms'):.2f} ms | "
            f"{_median(runs, 'after', 'p99_ms'):.2f} ms | "
            f"{_median(runs, 'during', 'overhead_p50_ms'):.2f} / "
            f"{_median(runs, 'after', 'overhead_p50_ms'):.2f} ms | "
            f"{_median(runs, 'burst', 'rps'):.0f} | "
            f"{_median(runs, 'cpu_cores', 'learner'):.2f} | "
            f"{_median(runs, 'other_load_cores'):.2f} |")
    off = report["results"]["off"]
    labels = {"inprocess": "In-process", "unthrottled": "In-process unthrottled",
              "off-b": "Control (a second `worker: off` gateway)"}
    for name, label in labels.items():
        runs = report["results"].get(name)
        if runs is None:
            continue
        for phase in ("during", "after"):  # paired: the gateways of one round, back to back
            ratios = [a[phase]["added_ms"] / b[phase]["added_ms"]
                      for a, b in zip(runs, off, strict=True)
                      if a[phase].get("added_ms") and b[phase].get("added_ms")]
            if ratios:
                rows.append(f"\n{label} against off, {phase} the burst, per round: "
                            + ", ".join(f"{r:.2f}" for r in ratios)
                            + f" (median {statistics.median(ratios):.2f}).")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.learner_load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0,
                        help="burst length, and the probe-alone phase after it (default 8)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--drain-limit", type=float, default=120.0,
                        help="longest wait for the learner's queue before a measurement")
    parser.add_argument("--loadgen", choices=("auto", "python"), default="auto")
    parser.add_argument("--no-pin", action="store_true")
    parser.add_argument("--unthrottled", action="store_true",
                        help="also measure an in-process learner without its CPU budget")
    parser.add_argument("--control", action="store_true",
                        help="also measure a second `worker: off` gateway: the ratio two "
                             "gateways of one configuration show (the benchmark's own noise)")
    parser.add_argument("--json", type=Path, help="write every figure here as JSON")
    args = parser.parse_args(argv)
    report = run(args)
    if args.json:
        args.json.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2,
                                           default=str))
    print(table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
