"""Capacity model: Redis commands, round trips and CPU per managed call, feedback and merge.

    .venv/bin/python -m bench.capacity [--sessions 40] [--long 2] [--turns 100] [--json OUT]

Starts an embedded Redis, the scripted upstream (`bench/upstream.py`) and `ctxgate serve`
(worker off, as `bench/servers.py` starts it for the overhead benchmark) and puts a
counting TCP proxy between the gateway and Redis. The proxy parses the RESP the gateway
sends: it counts the commands the gateway issues (by name), the round trips (a round trip is
each time a connection sends after Redis has answered, so a pipeline counts once) and the
bytes either way. Redis's own `INFO commandstats` / `INFO stats` (total_commands_processed,
which also counts the commands a Lua script runs) and `INFO cpu` are read on a direct
connection (not through the proxy) before and after every call, after the call's trace
write has landed. Calls run one at a time:

- *new session*: the first call of a session (system + task, `x-ctxgate-session-id`);
- *open session*: that session's next call (one tool exchange more), no compaction step;
- *long session*: `--long` synthetic 100-turn coding sessions (`tests/sessions.py`, ~1.2k
  tokens a turn) replayed call by call with a 12,000-token budget; each call is classed by
  its drop-log line as a *step call* (the engine took a new compaction step: new decisions)
  or not;
- *feedback*: `POST /v1/feedback` on the new-session calls' trace ids;
- *merge*: `PlaybookStore.merge` of a typical delta (one ADD, two TAGs) through the proxy,
  as a worker applies a Curator's output.

Figures are medians per call (the gateway flushes its forecast counts once a second, which
lands in some calls; the idle rate is reported on its own). CPU per call is Redis's
(`used_cpu_user + used_cpu_sys`) and the gateway process's (`/proc/PID/stat`), each over a
whole phase divided by its calls: at one call at a time this includes idle wake-ups, so it
over-states the cost per call under load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis

from bench.servers import free_port, start_ctxgate, start_upstream
from gateway.context.replay import calls_from_messages
from gateway.store.embedded import EmbeddedRedis
from tests.sessions import synthetic_session

KEY = "sk-bench-capacity"
BUDGET = 12_000
SETTLE_S = 0.05  # after a response: the trace is written by a task that follows it
TICK = os.sysconf("SC_CLK_TCK")


# --- the counting proxy ---------------------------------------------------------------------

@dataclass
class Tally:
    commands: Counter[str] = field(default_factory=Counter)
    round_trips: int = 0
    bytes_out: int = 0  # gateway -> Redis
    bytes_in: int = 0  # Redis -> gateway

    def copy(self) -> Tally:
        return Tally(Counter(self.commands), self.round_trips, self.bytes_out, self.bytes_in)

    def minus(self, before: Tally) -> Tally:
        return Tally(self.commands - before.commands, self.round_trips - before.round_trips,
                     self.bytes_out - before.bytes_out, self.bytes_in - before.bytes_in)


class _Resp:
    """Splits a client's byte stream into commands (arrays of bulk strings)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[str]:
        self.buf += data
        names: list[str] = []
        while True:
            parsed = self._one()
            if parsed is None:
                return names
            names.append(parsed)

    def _one(self) -> str | None:
        buf = self.buf
        end = buf.find(b"\r\n")
        if end < 0:
            return None
        if buf[:1] != b"*":  # inline command (never sent by redis-py)
            name = bytes(buf[:end]).split(b" ", 1)[0].decode().upper()
            del buf[:end + 2]
            return name
        n, pos, name = int(buf[1:end]), end + 2, ""
        for i in range(n):
            end = buf.find(b"\r\n", pos)
            if end < 0:
                return None
            size = int(buf[pos + 1:end])
            if len(buf) < end + 2 + size + 2:
                return None
            if i == 0:
                name = bytes(buf[end + 2:end + 2 + size]).decode().upper()
            pos = end + 2 + size + 2
        del buf[:pos]
        return name


class CountingProxy:
    """A loopback TCP proxy to Redis, in a thread of its own, tallying what passes."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.tally = Tally()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._run, daemon=True).start()
        self._ready.wait(10)

    def snapshot(self) -> Tally:
        with self._lock:
            return self.tally.copy()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._client, "127.0.0.1", self.port)
        self._ready.set()
        async with server:
            await server.serve_forever()

    async def _client(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        s_reader, s_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        state = {"last": "s"}
        resp = _Resp()

        async def upstream() -> None:  # gateway -> Redis
            while data := await c_reader.read(65536):
                with self._lock:
                    if state["last"] != "c":
                        self.tally.round_trips += 1
                    state["last"] = "c"
                    self.tally.bytes_out += len(data)
                    self.tally.commands.update(resp.feed(data))
                s_writer.write(data)
                await s_writer.drain()
            s_writer.close()

        async def downstream() -> None:  # Redis -> gateway
            while data := await s_reader.read(65536):
                with self._lock:
                    state["last"] = "s"
                    self.tally.bytes_in += len(data)
                c_writer.write(data)
                await c_writer.drain()
            c_writer.close()

        with contextlib.suppress(ConnectionError, OSError):
            await asyncio.gather(upstream(), downstream())


# --- Redis and process counters --------------------------------------------------------------

@dataclass
class Sample:
    proxy: Tally
    executed: Counter[str]  # INFO commandstats calls, Lua's inner commands included
    total: int  # INFO stats total_commands_processed
    redis_cpu: float
    gateway_cpu: float
    at: float
    memory: int  # INFO memory used_memory


class Meter:
    def __init__(self, proxy: CountingProxy, direct: redis.Redis, gateway_pid: int) -> None:
        self.proxy, self.direct, self.gateway_pid = proxy, direct, gateway_pid

    def sample(self) -> Sample:
        stats = self.direct.info("commandstats")
        executed = Counter({name.removeprefix("cmdstat_"): int(v["calls"])
                            for name, v in stats.items()})
        total = int(self.direct.info("stats")["total_commands_processed"])
        cpu = self.direct.info("cpu")
        fields = Path(f"/proc/{self.gateway_pid}/stat").read_text().rsplit(")", 1)[1].split()
        gateway_cpu = (int(fields[11]) + int(fields[12])) / TICK
        memory = int(self.direct.info("memory")["used_memory"])
        return Sample(self.proxy.snapshot(), executed, total,
                      float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), gateway_cpu,
                      time.monotonic(), memory)


@dataclass
class Delta:
    proxy: Tally
    executed: Counter[str]
    total: int


def delta(after: Sample, before: Sample) -> Delta:
    executed = after.executed - before.executed
    executed.pop("info", None)  # the meter's own reads
    info_calls = after.executed["info"] - before.executed["info"]
    return Delta(after.proxy.minus(before.proxy), executed, after.total - before.total - info_calls)


@dataclass
class Phase:
    name: str
    deltas: list[Delta] = field(default_factory=list)
    redis_cpu: float = 0.0
    gateway_cpu: float = 0.0
    seconds: float = 0.0
    memory: int = 0

    def row(self) -> dict[str, Any]:
        n = len(self.deltas)
        if not n:
            return {"phase": self.name, "calls": 0}
        issued = [sum(d.proxy.commands.values()) for d in self.deltas]
        executed = [d.total for d in self.deltas]
        trips = [d.proxy.round_trips for d in self.deltas]
        names: Counter[str] = Counter()
        for d in self.deltas:
            names.update(d.proxy.commands)
        return {
            "phase": self.name, "calls": n,
            "commands issued (median)": statistics.median(issued),
            "commands issued (mean)": round(statistics.mean(issued), 2),
            "commands executed incl. Lua (median)": statistics.median(executed),
            "round trips (median)": statistics.median(trips),
            "round trips (mean)": round(statistics.mean(trips), 2),
            "bytes to Redis (median)": statistics.median(d.proxy.bytes_out for d in self.deltas),
            "bytes from Redis (median)": statistics.median(d.proxy.bytes_in for d in self.deltas),
            "redis CPU us/call": round(1e6 * self.redis_cpu / n, 1),
            "gateway CPU ms/call": round(1e3 * self.gateway_cpu / n, 2),
            "redis memory bytes/call": round(self.memory / n),
            "issued per call, by name": {k: round(v / n, 2) for k, v in names.most_common()},
        }


class Run:
    def __init__(self, meter: Meter, gateway: str) -> None:
        self.meter = meter
        self.http = httpx.Client(base_url=gateway, timeout=60,
                                 headers={"authorization": f"Bearer {KEY}"})

    def measure(self, phase: Phase, action: Any) -> Any:
        before = self.meter.sample()
        result = action()
        time.sleep(SETTLE_S)
        after = self.meter.sample()
        phase.deltas.append(delta(after, before))
        phase.redis_cpu += after.redis_cpu - before.redis_cpu
        phase.gateway_cpu += after.gateway_cpu - before.gateway_cpu
        phase.seconds += after.at - before.at
        phase.memory += after.memory - before.memory
        return result

    def chat(self, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
        response = self.http.post("/v1/chat/completions", json=body, headers=headers)
        response.raise_for_status()
        return response


def _last_call_line(drop_log: Path, trace_id: str) -> dict[str, Any]:
    for raw in reversed(drop_log.read_bytes().splitlines()):
        line = orjson.loads(raw)
        if line.get("event") == "context.call" and line.get("trace_id") == trace_id:
            return dict(line)
    return {}


def _new_decisions(line: dict[str, Any]) -> int:
    value = line.get("new_decisions") or 0
    return len(value) if isinstance(value, list) else int(value)


class Merger:
    """A worker's merge of one Curator delta (one ADD, two TAGs), on one kept connection."""

    def __init__(self, url: str) -> None:
        import redis.asyncio as aioredis

        from gateway.playbook.store import PlaybookStore

        self.loop = asyncio.new_event_loop()
        self.client = aioredis.Redis.from_url(url)
        self.store = PlaybookStore(self.client)
        self.n = 0

    def merge(self) -> None:
        from gateway.playbook.bullet import Operation

        i, self.n = self.n, self.n + 1
        self.loop.run_until_complete(self.store.merge("bench-capacity", "coding_agent", [
            Operation("ADD", f"cap:{i}:a", section="others", content=f"lesson {i}"),
            Operation("TAG", f"cap:{i}:t1", id="others-00001", helpful=1),
            Operation("TAG", f"cap:{i}:t2", id="others-00001", harmful=1),
        ]))

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="ctxgate-capacity-"))
    server = EmbeddedRedis(tmp / "redis").start()
    proxy = CountingProxy(server.port)
    direct = redis.Redis(host="127.0.0.1", port=server.port)
    results: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        stack.callback(server.stop)
        upstream = start_upstream(stack, None, tmp)
        gateway = start_ctxgate(stack, "ctxgate", upstream=upstream,
                                redis_url=f"redis://127.0.0.1:{proxy.port}/0",
                                transport="aiohttp", cpus=None, log_dir=tmp)
        deadline = time.monotonic() + 300
        while httpx.get(gateway.base_url + "/readyz").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway never became ready")
            time.sleep(0.5)
        drop_log = tmp / "ctxgate-drops.jsonl"
        meter = Meter(proxy, direct, gateway.pid)
        bench = Run(meter, gateway.base_url)
        # Warm-up: one long session's first calls, outside any phase.
        _, warm, _ = synthetic_session(99, turns=8)
        for body in calls_from_messages(warm, "gpt-4o-mini"):
            bench.chat(body, {"x-ctxgate-session-id": "warm"})
        time.sleep(1.5)

        phases = {name: Phase(name) for name in
                  ("new session", "open session", "long: step call", "long: no step",
                   "feedback", "merge")}
        traces: list[str] = []
        sessions = []
        for k in range(args.sessions):
            _, messages, _ = synthetic_session(1000 + k, turns=2)
            sessions.append((f"cap-{uuid.uuid4().hex[:10]}",
                             calls_from_messages(messages, "gpt-4o-mini")))
        for sid, calls in sessions:
            response = bench.measure(phases["new session"], lambda: bench.chat(
                calls[0], {"x-ctxgate-session-id": sid}))  # noqa: B023
            traces.append(response.headers["x-ctxgate-trace-id"])
        for sid, calls in sessions:
            bench.measure(phases["open session"], lambda: bench.chat(
                calls[1], {"x-ctxgate-session-id": sid}))  # noqa: B023
        steps_seen = []
        for k in range(args.long):
            _, messages, _ = synthetic_session(2000 + k, turns=args.turns)
            sid = f"long-{uuid.uuid4().hex[:10]}"
            headers = {"x-ctxgate-session-id": sid, "x-ctxgate-budget-tokens": str(BUDGET),
                       "x-ctxgate-task-class": "coding_agent"}
            for body in calls_from_messages(messages, "gpt-4o-mini")[1:]:
                probe = Phase("probe")
                response = bench.measure(probe, lambda: bench.chat(body, headers))  # noqa: B023
                line = _last_call_line(drop_log, response.headers["x-ctxgate-trace-id"])
                step = _new_decisions(line) > 0
                steps_seen.append(step)
                target = phases["long: step call" if step else "long: no step"]
                target.deltas += probe.deltas
                target.redis_cpu += probe.redis_cpu
                target.gateway_cpu += probe.gateway_cpu
                target.memory += probe.memory
        for trace_id in traces:
            bench.measure(phases["feedback"], lambda: bench.http.post(
                "/v1/feedback", json={"trace_id": trace_id, "outcome": "success"}  # noqa: B023
            ).raise_for_status())
        merger = Merger(f"redis://127.0.0.1:{proxy.port}/0")
        merger.merge()  # connects and loads the script, outside the phase
        for _ in range(args.merges):
            bench.measure(phases["merge"], merger.merge)
        merger.close()
        # What an idle gateway sends on its own (the once-a-second forecast flush and so on),
        # and what Redis burns idle (serverCron, AOF): subtracted from the batches below.
        idle_before = meter.sample()
        time.sleep(args.idle)
        idle_after = meter.sample()
        idle = delta(idle_after, idle_before)
        idle_cpu_s = (idle_after.redis_cpu - idle_before.redis_cpu) / args.idle
        results["batches"] = [
            batch(meter, gateway.base_url, kind, args.batch, args.concurrency, idle_cpu_s)
            for kind in ("new session", "open session")]

        results["phases"] = [p.row() for p in phases.values()]
        results["step share of long-session calls"] = round(
            sum(steps_seen) / max(1, len(steps_seen)), 3)
        results["idle gateway, per second"] = {
            "commands issued": round(sum(idle.proxy.commands.values()) / args.idle, 2),
            "round trips": round(idle.proxy.round_trips / args.idle, 2),
            "by name": dict(idle.proxy.commands)}
        results["redis"] = direct.info("server")["redis_version"]
        results["load average"] = os.getloadavg()
        results["cores"] = os.cpu_count()
        results["when"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    direct.close()
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def batch(meter: Meter, gateway: str, kind: str, n: int, concurrency: int,
          idle_cpu_s: float) -> dict[str, Any]:
    """`n` calls at `concurrency`, one sample either side: CPU and rate under load.

    *new session*: the first call of `n` new sessions; *open session*: the next call of
    each (sessions made, untimed, just before)."""
    bodies = []
    for k in range(n):
        _, messages, _ = synthetic_session(5000 + k, turns=2)
        bodies.append((f"batch-{uuid.uuid4().hex[:10]}",
                       calls_from_messages(messages, "gpt-4o-mini")))

    async def send(index: int) -> None:
        async with httpx.AsyncClient(base_url=gateway, timeout=120,
                                     headers={"authorization": f"Bearer {KEY}"}) as client:
            queue = asyncio.Queue[tuple[str, dict[str, Any]]]()
            for sid, calls in bodies:
                queue.put_nowait((sid, calls[index]))

            async def one() -> None:
                while not queue.empty():
                    sid, body = queue.get_nowait()
                    response = await client.post("/v1/chat/completions", json=body,
                                                 headers={"x-ctxgate-session-id": sid})
                    response.raise_for_status()

            await asyncio.gather(*(one() for _ in range(concurrency)))

    if kind == "open session":
        asyncio.run(send(0))
        time.sleep(1.5)
    before = meter.sample()
    asyncio.run(send(0 if kind == "new session" else 1))
    time.sleep(SETTLE_S)
    after = meter.sample()
    seconds = after.at - before.at
    d = delta(after, before)
    redis_cpu = after.redis_cpu - before.redis_cpu - idle_cpu_s * seconds
    return {
        "batch": kind, "calls": n, "concurrency": concurrency,
        "calls/s": round(n / seconds, 1),
        "commands issued/call": round(sum(d.proxy.commands.values()) / n, 2),
        "round trips/call": round(d.proxy.round_trips / n, 2),
        "commands executed/call": round(d.total / n, 2),
        "redis CPU us/call (idle subtracted)": round(1e6 * redis_cpu / n, 1),
        "redis calls/s per core at 100%": round(n / redis_cpu) if redis_cpu > 0 else None,
        "gateway CPU ms/call": round(1e3 * (after.gateway_cpu - before.gateway_cpu) / n, 2),
        "gateway calls/s per core": round(n / (after.gateway_cpu - before.gateway_cpu)),
        "redis memory bytes/call": round((after.memory - before.memory) / n),
    }


def print_table(results: dict[str, Any]) -> None:
    cols = ["calls", "commands issued (median)", "commands issued (mean)",
            "commands executed incl. Lua (median)", "round trips (median)",
            "round trips (mean)", "bytes to Redis (median)", "bytes from Redis (median)",
            "redis CPU us/call", "gateway CPU ms/call", "redis memory bytes/call"]
    print("| per | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for row in results["phases"]:
        print(f"| {row['phase']} | " + " | ".join(str(row.get(c, "")) for c in cols) + " |")
    print()
    for row in results["phases"]:
        print(f"- {row['phase']}: {row.get('issued per call, by name')}")
    for row in results["batches"]:
        print(f"- batch: {row}")
    for key in ("step share of long-session calls", "idle gateway, per second", "redis",
                "load average", "cores", "when"):
        print(f"- {key}: {results[key]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--long", type=int, default=2, help="long sessions replayed")
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--merges", type=int, default=40)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle measured")
    parser.add_argument("--batch", type=int, default=400, help="calls per load batch")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the logs and Redis data")
    args = parser.parse_args()
    results = run(args)
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print_table(results)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
