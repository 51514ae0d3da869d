"""`ctxgate serve` names the configuration file it runs on, and says loudly when it found
none: started away from `config/gateway.yaml` without `CTXGATE_CONFIG`, a gateway would
otherwise run on the built-in defaults unnoticed (bench/README.md, gen46's section).

The real entry point in its own process, stopped as soon as its start-up log says which."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
CTXGATE = Path(sys.executable).parent / "ctxgate"


def start_up_config_line(cwd: Path, **env: str) -> dict[str, object]:
    """The first log record of `ctxgate serve` that names its configuration."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CTXGATE_")}
    environ.update(CTXGATE_DATA_DIR=str(cwd / "data"), CTXGATE_PORT="0", **env)
    proc = subprocess.Popen([str(CTXGATE), "serve"], cwd=cwd, env=environ,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            record = orjson.loads(line) if line.startswith(b"{") else {}
            if "config" in record:
                return record
        raise AssertionError(f"no configuration line; exit code {proc.poll()}")
    finally:
        proc.kill()
        proc.wait()


def test_no_configuration_file_is_a_warning_naming_the_path(tmp_path: Path) -> None:
    record = start_up_config_line(tmp_path)
    assert record["level"] == "warning"
    assert record["config"] is None
    assert "no configuration file at config/gateway.yaml" in str(record["msg"])
    assert str(tmp_path) in str(record["msg"]) and "CTXGATE_CONFIG" in str(record["msg"])


def test_the_configuration_file_in_use_is_named(tmp_path: Path) -> None:
    record = start_up_config_line(tmp_path, CTXGATE_CONFIG=str(REPO / "config/gateway.yaml"))
    assert record["level"] == "info"
    assert record["config"] == str(REPO / "config" / "gateway.yaml")
    assert record["models_file"] == str(REPO / "config" / "models.yaml")
