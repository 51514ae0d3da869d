"""The processes the overhead benchmark measures: upstream, ctxgate, LiteLLM's proxy.

Every process is started on loopback, pinned to the cores it is given, and stopped by the
`contextlib.ExitStack` that started it (SIGTERM, then SIGKILL after a grace period).
LiteLLM's proxy runs from its own venv, `bench/.litellm-venv`, which is created on first
use with pip from PyPI; nothing else is downloaded at run time.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from tests.harness import wait_until_up

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
LITELLM_VENV = BENCH_DIR / ".litellm-venv"
# The version measured in bench/README.md; `--litellm-spec` overrides it.
LITELLM_SPEC = "litellm[proxy]==1.108.7"
# A proxy benchmark has no use for these; their presence means a CUDA/ML stack was pulled.
_HEAVY = ("torch", "nvidia-", "triton", "tensorflow", "jax")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A started process and the base URL it answers on."""

    name: str
    process: subprocess.Popen[bytes]
    base_url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid


def _child_setup(cpus: set[int] | None) -> Callable[[], None]:
    """In the child: its cores, and SIGTERM when this process dies without stopping it."""

    def setup() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PDEATHSIG

    return setup


def start(stack: contextlib.ExitStack, name: str, command: list[str], *, port: int,
          health: str, env: dict[str, str], cpus: set[int] | None, log_dir: Path,
          cwd: Path = REPO, timeout_s: float | None = None) -> Server:
    """Start `command`, register its stop on `stack`, and wait until `health` answers 200.

    The wait is bounded by the process's work, as the tests' is (`tests/harness.py`'s
    `wait_until_up`): it fails when the process exits, has used 90 CPU-s, or has used none
    for 60 s; not by the wall clock, which a loaded machine stretches 10x and more
    (`ctxgate serve` loads its embedding model, ~15 CPU-s, before it listens). `timeout_s`:
    a wall bound as well, for a caller that wants one."""
    log = log_dir / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=cwd, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, preexec_fn=_child_setup(cpus),
            start_new_session=True)
    server = Server(name, process, f"http://127.0.0.1:{port}", log)
    stack.callback(stop, server)
    wait_until_up(server.base_url + health, process, log, timeout_s, name=name,
                  answered=lambda status: status == 200)
    return server


def stop(server: Server, grace_s: float = 10.0) -> None:
    """SIGTERM the process group it leads, SIGKILL what is left after `grace_s`."""
    process = server.process
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
    # Children that outlived their leader (e.g. an embedded Redis) share its group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def start_upstream(stack: contextlib.ExitStack, cpus: set[int] | None,
                   log_dir: Path) -> Server:
    port = free_port()
    return start(stack, "upstream", [sys.executable, "-m", "bench.upstream", str(port)],
                 port=port, health="/v1/models", env={}, cpus=cpus, log_dir=log_dir)


def start_ctxgate(stack: contextlib.ExitStack, name: str, *, upstream: Server, redis_url: str,
                  transport: str, cpus: set[int] | None, log_dir: Path) -> Server:
    """`ctxgate serve` as `make run` starts it, minus the in-process worker and stdout logs."""
    port = free_port()
    env = {
        "CTXGATE_UPSTREAM_URL": upstream.base_url + "/v1",
        "CTXGATE_ANTHROPIC_UPSTREAM_URL": upstream.base_url,  # /v1/messages: no /v1 here
        "CTXGATE_REDIS_URL": redis_url,
        "CTXGATE_PORT": str(port),
        "CTXGATE_HOST": "127.0.0.1",
        "CTXGATE_WORKER": "off",
        "CTXGATE_DROP_LOG": str(log_dir / f"{name}-drops.jsonl"),
        "CTXGATE_LOG_LEVEL": "warning",
        "CTXGATE_UPSTREAM_TRANSPORT": transport,
        "CTXGATE_DATA_DIR": str(log_dir / f"{name}-data"),
    }
    return start(stack, name, [sys.executable, "-m", "gateway", "serve"], port=port,
                 health="/healthz", env=env, cpus=cpus, log_dir=log_dir)


def ensure_litellm(spec: str = LITELLM_SPEC, python: str = "python3") -> Path:
    """The LiteLLM venv's `litellm` command, creating the venv on first use."""
    command = LITELLM_VENV / "bin" / "litellm"
    marker = LITELLM_VENV / ".installed"
    if command.exists() and marker.exists() and marker.read_text() == spec:
        return command
    pip = [str(LITELLM_VENV / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    if not (LITELLM_VENV / "bin" / "python").exists():
        interpreter = shutil.which(python) or sys.executable
        subprocess.run([interpreter, "-m", "venv", str(LITELLM_VENV)], check=True)
    report = LITELLM_VENV / "install-report.json"
    subprocess.run([*pip, "install", "-q", "--dry-run", "--report", str(report), spec],
                   check=True)
    names = [item["metadata"]["name"].lower()
             for item in orjson.loads(report.read_bytes())["install"]]
    heavy = sorted(n for n in names if n.startswith(_HEAVY))
    if heavy:
        raise RuntimeError(f"{spec} would install {heavy}; pin or exclude them first")
    subprocess.run([*pip, "install", "-q", spec], check=True)
    marker.write_text(spec)
    return command


LITELLM_CONFIG = """\
model_list:
  - model_name: {model}
    litellm_params:
      model: openai/{model}
      api_base: {api_base}
      api_key: sk-bench-upstream
litellm_settings:
  set_verbose: false
  json_logs: false
  telemetry: false
"""


def start_litellm(stack: contextlib.ExitStack, command: Path, *, upstream: Server, model: str,
                  cpus: set[int] | None, log_dir: Path) -> tuple[Server, str]:
    """LiteLLM's proxy, one worker, one model mapped to the upstream; returns its key too.

    It refuses to start without a master key, so it gets a random one (checked on every
    request, as in any real deployment); the cost map is the packaged one, not fetched.
    """
    port = free_port()
    config = log_dir / "litellm.yaml"
    config.write_text(LITELLM_CONFIG.format(model=model, api_base=upstream.base_url + "/v1"))
    key = "sk-" + secrets.token_hex(32)
    env = {"LITELLM_MASTER_KEY": key, "LITELLM_LOG": "ERROR",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"}
    server = start(stack, "litellm", [str(command), "--config", str(config), "--host",
                                      "127.0.0.1", "--port", str(port), "--num_workers", "1",
                                      "--telemetry", "False"],
                   port=port, health="/health/liveliness", env=env, cpus=cpus,
                   log_dir=log_dir, cwd=log_dir)
    return server, key
