"""Real processes on loopback for integration tests: the scripted upstream and the gateway.

Each is started once per test session (see conftest.py) and driven over HTTP.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# What a start may cost before it must be up: `ctxgate serve` loads its embedding model
# (~8-11 CPU-s) before it listens, ~15 CPU-s in all; a start is bounded by this work, not by
# the wall clock, which a loaded CI machine stretches 10x and more (bench/README.md, "CI
# reliability: the gateway's model load").
START_CPU_S = 90.0
# How long a start may go without using any CPU: it waits on something that will not come.
START_STALLED_S = 60.0


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process `pid` has used (Linux: /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def wait_until_up(url: str, process: subprocess.Popen[bytes], log: Path,
                  timeout_s: float | None = None, *, name: str = "",
                  answered: Callable[[int], bool] = lambda status: status < 500) -> float:
    """Until `url` answers with a status `answered` accepts (default: below 500; `/readyz`
    is 503 until ready); returns the seconds that took. A start fails when the process
    exits, uses `START_CPU_S` of CPU, or uses none for `START_STALLED_S`; with `timeout_s`,
    also when that much wall time passes (otherwise the caller's own bound, e.g. a test's
    timeout, bounds the wall time: a busy machine only slows the start, it does not break
    it). A failure kills the process and says which process (`name`), why, after how long,
    at what load, and how its log ends."""
    what = name or url
    started = time.monotonic()
    progress = (started, cpu_seconds(process.pid))
    failure = ""
    while not failure:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode} after "
                               f"{time.monotonic() - started:.0f} s, before {url} answered; "
                               f"its log ({log}) ends:\n{_tail(log)}")
        try:
            if answered(httpx.get(url, timeout=1.0).status_code):
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
        now = time.monotonic()
        try:
            used = cpu_seconds(process.pid)
        except (OSError, IndexError, ValueError):
            continue  # it exited: the next round says so
        if used > progress[1] + 0.01:
            progress = (now, used)
        if used > START_CPU_S:
            failure = f"it used {used:.1f} CPU-s (a start takes ~15; bound {START_CPU_S:.0f})"
        elif now - progress[0] > START_STALLED_S:
            failure = f"it used no CPU for {now - progress[0]:.0f} s (waiting on something)"
        elif timeout_s is not None and now - started > timeout_s:
            failure = f"it took over {timeout_s:.0f} s (the caller's wall bound)"
    process.kill()
    raise RuntimeError(f"{what} did not come up at {url}: {failure}; killed after "
                       f"{time.monotonic() - started:.0f} s at load {os.getloadavg()[0]:.1f}; "
                       f"its log ({log}) ends:\n{_tail(log)}")


def _tail(log: Path, chars: int = 3000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:] or "(empty)"
    except OSError as exc:
        return f"(unreadable: {exc})"


# A process spawned ahead of its tests (tests/conftest.py's `ModuleGateways`) loads its model
# at this niceness: on two cores it takes the CPU the running tests leave idle (pytest waiting
# on a server, a sleep), not theirs; set back to 0 (`unnice`) when its tests begin.
AHEAD_NICENESS = 10


def spawn_niced(args: list[str], niceness: int = 0, **popen: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(args, **popen)`, the child at `niceness` (0: as this process), by
    coreutils' `nice`, which execs it: the same pid (no `preexec_fn`: unsafe with threads)."""
    nice = shutil.which("nice") if niceness else None
    return subprocess.Popen([nice, "-n", str(niceness), *args] if nice else args, **popen)


def unnice(pid: int) -> bool:
    """Every thread of process `pid` back to niceness 0 (Linux's niceness is per thread);
    False if not allowed (lowering a niceness needs root or CAP_SYS_NICE): it then stays
    niced, which only slows it while other processes want the CPU."""
    try:
        tasks = [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return False
    try:
        for task in tasks:
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.setpriority(os.PRIO_PROCESS, task, 0)
    except PermissionError:
        return False
    return True


def listening(url: str) -> bool:
    """Whether something accepts a TCP connection at `url`'s host and port (`ctxgate serve`
    listens only once its embedding model is loaded)."""
    host, _, port = url.split("://", 1)[-1].split("/", 1)[0].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.2):
            return True
    except OSError:
        return False


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


LEARNER_MODELS = frozenset({"reflector-stub", "curator-stub"})  # tests/conftest.py's


def _from_learner(raw: bytes) -> bool:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return isinstance(body, dict) and body.get("model") in LEARNER_MODELS


@dataclass
class Upstream:
    """The scripted upstream stub (tests/upstream_stub.py) in its own process."""

    url: str
    process: subprocess.Popen[bytes]

    @classmethod
    def start(cls, workdir: Path) -> Upstream:
        port = free_port()
        log = workdir / "upstream.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.upstream_stub", str(port)], cwd=ROOT,
            stdout=log.open("wb"), stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        wait_until_up(f"{url}/_events", process, log, name=f"the scripted upstream ({url})")
        return cls(url, process)

    def requests(self) -> list[dict[str, Any]]:
        recorded: list[dict[str, Any]] = httpx.get(f"{self.url}/_requests").json()
        for request in recorded:
            request["body"] = base64.b64decode(request.pop("body_b64"))
        return recorded

    def client_requests(self) -> list[dict[str, Any]]:
        """The requests the gateway forwarded for clients: the in-process learner's calls
        to the same stub (its models, `LEARNER_MODELS`) are left out, since they may arrive
        at any time (a session a test before sent is still being learned from)."""
        return [request for request in self.requests() if not _from_learner(request["body"])]

    def last_body(self) -> dict[str, Any]:
        """The last request body the gateway forwarded for a client."""
        forwarded = self.client_requests()
        if not forwarded:
            raise AssertionError("the upstream received no client request")
        body: dict[str, Any] = orjson.loads(forwarded[-1]["body"])
        return body

    def clear(self) -> None:
        httpx.delete(f"{self.url}/_requests")

    def events(self) -> dict[str, int]:
        events: dict[str, int] = httpx.get(f"{self.url}/_events").json()
        return events

    def calls(self, model: str) -> list[float]:
        """When the chat calls for `model` arrived (unix time), since the stub started."""
        calls: dict[str, list[float]] = httpx.get(f"{self.url}/_calls").json()
        return calls.get(model, [])

    def script(self, model: str, responses: list[dict[str, Any]]) -> None:
        httpx.post(f"{self.url}/_script", json={"model": model, "responses": responses})


@dataclass
class Gateway:
    """`ctxgate serve` in its own process, configured by environment."""

    url: str
    process: subprocess.Popen[bytes]
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    admin_key: str = "test-admin-key"
    noted: dict[str, Any] = field(default_factory=dict)  # what its start noted for its tests

    @classmethod
    def start(cls, workdir: Path, env: dict[str, str], args: list[str] | None = None,
              wait_path: str = "/healthz", timeout_s: float | None = None,
              name: str = "") -> Gateway:
        server = cls.spawn(workdir, env, args)
        server.wait_up(wait_path, timeout_s, name)
        return server

    @classmethod
    def spawn(cls, workdir: Path, env: dict[str, str],
              args: list[str] | None = None, *, niceness: int = 0) -> Gateway:
        """The process started, not yet waited for (`wait_up`); `niceness` > 0 for one
        spawned ahead of its tests (`spawn_niced`)."""
        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        full_env = {**os.environ, "CTXGATE_PORT": str(port), "CTXGATE_HOST": "127.0.0.1",
                    "CTXGATE_DATA_DIR": str(workdir / "data"),
                    "CTXGATE_DROP_LOG": str(workdir / "drops.jsonl"),
                    "CTXGATE_ADMIN_KEY": "test-admin-key", "HF_HUB_OFFLINE": "1", **env}
        log = workdir / "gateway.log"
        process = spawn_niced(
            [sys.executable, "-m", "gateway", "serve", *(args or [])], niceness, cwd=ROOT,
            env=full_env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        return cls(f"http://127.0.0.1:{port}", process, workdir, full_env)

    def wait_up(self, path: str = "/healthz", timeout_s: float | None = None,
                name: str = "") -> float:
        """Until `path` answers (`wait_until_up`); the seconds that took."""
        return wait_until_up(f"{self.url}{path}", self.process, self.workdir / "gateway.log",
                             timeout_s, name=name or f"`ctxgate serve` ({self.url})")

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def log(self) -> str:
        return (self.workdir / "gateway.log").read_text()

    def drops(self) -> list[dict[str, Any]]:
        path = self.workdir / "drops.jsonl"
        if not path.exists():
            return []
        return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics").text

    def explained(self, trace_id: str, timeout_s: float = 10) -> dict[str, Any]:
        """`GET /admin/traces/{trace_id}`, once the trace's background write has landed."""
        headers = {"authorization": f"Bearer {self.admin_key}"}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            response = httpx.get(f"{self.url}/admin/traces/{trace_id}", headers=headers)
            if response.status_code == 200:
                explained: dict[str, Any] = response.json()
                return explained
            assert response.status_code == 404, response.text
            time.sleep(0.05)
        raise AssertionError(f"no account of {trace_id}")

    def metric(self, name: str, **labels: str) -> float:
        """The value of one sample of the gateway's /metrics (0 when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        total = 0.0
        for family in text_string_to_metric_families(self.metrics()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v
                                               for k, v in labels.items()):
                    total += sample.value
        return total
