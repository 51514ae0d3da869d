"""Load generators for the overhead benchmark: wrk (preferred) and a Python fallback.

wrk is C with LuaJIT: one thread holds 16 keep-alive connections at tens of thousands of
requests per second while using a fraction of a core, so it is never what limits a Python
proxy. The Lua script is generated per run: it cycles through the request mix, fills each
body's `{n}` with a number unique to the run, and prints its summary as one JSON line.

The Python fallback (aiohttp, one task per connection) is for machines without wrk. It
costs far more CPU per request than wrk and shares the load generator's core, so its
numbers are lower bounds; reports say which generator produced them.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

CHAT_PATH = "/v1/chat/completions"


@dataclass
class Load:
    """What to send: the mix's bodies split at `{n}`, and the headers of every request."""

    parts: list[tuple[bytes, bytes]]
    headers: dict[str, str]
    first_number: int = 0  # `{n}` starts here, so no two runs send the same turn
    path: str = CHAT_PATH  # the route every request is posted to

    @classmethod
    def of(cls, bodies: Sequence[bytes], headers: dict[str, str], first_number: int,
           path: str = CHAT_PATH) -> Load:
        parts = []
        for body in bodies:
            head, _, tail = body.partition(b"{n}")
            parts.append((head, tail))
        return cls(parts, headers, first_number, path)

    def body(self, index: int) -> bytes:
        head, tail = self.parts[index % len(self.parts)]
        return head + str(self.first_number + index + 1).encode() + tail


@dataclass
class RunResult:
    """One measured run of one load generator against one URL."""

    generator: str
    connections: int
    seconds: float
    requests: int
    errors: dict[str, int]
    latency_ms: dict[str, float]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rps": round(self.rps, 1)}


_LUA = """
local parts = {
%(parts)s
}
local headers = {
%(headers)s
}
local i, n = 0, %(first)d
request = function()
  i = i %% #parts + 1
  n = n + 1
  local p = parts[i]
  return wrk.format("POST", "%(path)s", headers, p[1] .. n .. p[2])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\\n@@RESULT {"requests": %%d, "duration_us": %%d, "connect": %%d, "read": %%d, ' ..
    '"write": %%d, "status": %%d, "timeout": %%d, "mean": %%.1f, "max": %%d, ' ..
    '"p50": %%d, "p90": %%d, "p99": %%d, "p999": %%d}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.max, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
end
"""


def _lua_string(data: bytes) -> str:
    text = data.decode()
    if "]==]" in text:
        raise ValueError("a request body contains the Lua long-bracket terminator ]==]")
    return f"[==[{text}]==]"


def wrk_script(load: Load) -> str:
    parts = ",\n".join(f"  {{{_lua_string(h)}, {_lua_string(t)}}}" for h, t in load.parts)
    headers = ",\n".join(f'  [ {_lua_string(k.encode())} ] = {_lua_string(v.encode())}'
                         for k, v in load.headers.items())
    return _LUA % {"parts": parts, "headers": headers, "first": load.first_number,
                   "path": load.path}


def find_wrk() -> str | None:
    return shutil.which("wrk")


def install_wrk() -> str | None:
    """Debian's wrk, through apt-get (the benchmark's only system package)."""
    if shutil.which("apt-get") is None:
        return None
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "wrk"]):
        subprocess.run(command, check=False, stdout=subprocess.DEVNULL, timeout=600)
    return find_wrk()


def run_wrk(wrk: str, base_url: str, load: Load, connections: int, seconds: float,
            cpus: set[int] | None) -> RunResult:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(wrk_script(load))
    try:
        command = [wrk, "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s",
                   "--timeout", "30s", "-s", script.name, base_url + load.path]
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=seconds + 60, check=False,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    finally:
        Path(script.name).unlink(missing_ok=True)
    line = next((x for x in completed.stdout.splitlines() if x.startswith("@@RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk gave no result: {completed.stdout[-500:]}"
                           f"{completed.stderr[-500:]}")
    raw = orjson.loads(line.removeprefix("@@RESULT "))
    errors = {k: raw[k] for k in ("connect", "read", "write", "status", "timeout")}
    latency = {k: raw[k] / 1000 for k in ("mean", "p50", "p90", "p99", "p999", "max")}
    return RunResult("wrk", connections, raw["duration_us"] / 1e6, raw["requests"],
                     errors, latency)


def run_python(base_url: str, load: Load, connections: int, seconds: float) -> RunResult:
    """The fallback generator, in this process (which the caller has pinned)."""
    return asyncio.run(_python_load(base_url, load, connections, seconds))


async def _python_load(base_url: str, load: Load, connections: int,
                       seconds: float) -> RunResult:
    import aiohttp

    latencies: list[float] = []
    errors = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    counter = iter(range(10**9))
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=connections)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            while time.perf_counter() < deadline:
                body = load.body(next(counter))
                started = time.perf_counter()
                try:
                    async with session.post(base_url + load.path, data=body,
                                            headers=load.headers) as response:
                        await response.read()
                        if response.status >= 400:
                            errors["status"] += 1
                except (aiohttp.ClientError, TimeoutError):
                    errors["read"] += 1
                    continue
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        elapsed = time.perf_counter() - started
    return RunResult("python", connections, elapsed, len(latencies), errors,
                     _percentiles_ms(latencies))


def _percentiles_ms(latencies: list[float]) -> dict[str, float]:
    if len(latencies) < 2:
        return {k: 0.0 for k in ("mean", "p50", "p90", "p99", "p999", "max")}
    cuts = statistics.quantiles(latencies, n=1000, method="inclusive")
    return {"mean": statistics.fmean(latencies) * 1000, "p50": cuts[499] * 1000,
            "p90": cuts[899] * 1000, "p99": cuts[989] * 1000, "p999": cuts[998] * 1000,
            "max": max(latencies) * 1000}
