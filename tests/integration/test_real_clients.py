"""The real agent CLIs from npm (`@openai/codex`, `@anthropic-ai/claude-code`) run a
multi-step task through ctxgate against the stub upstream, and finish.

The stub's `stub-agent-N` model asks the client's own shell tool for N harmless commands
with long outputs (`seq`), then answers. `.ci/run` installs the CLIs (pinned versions);
elsewhere `npm install --prefix DIR @openai/codex @anthropic-ai/claude-code` and set
`CTXGATE_NPM_PREFIX=DIR` (default: /tmp/ctxclients). Skipped, with the reason, without them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.harness import Gateway, Upstream

PREFIX = Path(os.environ.get("CTXGATE_NPM_PREFIX", "/tmp/ctxclients"))
STEPS = 8
# The budgets leave room for each client's own fixed cost (instructions and tool
# definitions: ~8k tokens for Codex, ~20k for Claude Code) plus the latest tool output.
CODEX_BUDGET, CLAUDE_BUDGET = "16000", "32000"
TASK = "Run the checks step by step with the shell tool, then report."


def binary(name: str) -> str:
    found = PREFIX / "node_modules" / ".bin" / name
    if found.exists():
        return str(found)
    on_path = shutil.which(name)
    if on_path is None:
        pytest.skip(f"{name} is not installed (npm install --prefix {PREFIX} ...)")
    return on_path


def managed_lines(gateway: Gateway, since: int, msg: str) -> list[dict[str, Any]]:
    """The gateway's request log lines for managed calls of one route, after `since`."""
    lines = (gateway.workdir / "gateway.log").read_bytes()[since:].splitlines()
    records = []
    for line in lines:
        if line.startswith(b"{"):
            record = orjson.loads(line)
            if record.get("msg") == msg:
                records.append(record)
    return records


def log_size(gateway: Gateway) -> int:
    return (gateway.workdir / "gateway.log").stat().st_size


def assert_finished_smaller(calls: list[dict[str, Any]], at_least: float = 0.4) -> None:
    assert len(calls) >= STEPS + 1, calls
    assert all(c["status"] == 200 for c in calls)
    late = calls[-1]
    saved = 1 - late["tokens_after"] / late["tokens_before"]
    print(f"late request: {late['tokens_before']} -> {late['tokens_after']} tokens "
          f"({saved:.0%} smaller)")
    assert saved >= at_least


def test_codex_exec_through_ctxgate(gateway: Gateway, upstream: Upstream,
                                    tmp_path: Path) -> None:
    codex = binary("codex")
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(f'''
model = "stub-agent-{STEPS}"
model_provider = "ctxgate"

[model_providers.ctxgate]
name = "ctxgate"
base_url = "{gateway.base_url}"
env_key = "CTXGATE_TEST_OPENAI_KEY"
wire_api = "responses"
http_headers = {{ "x-ctxgate-budget-tokens" = "{CODEX_BUDGET}" }}
''')
    since = log_size(gateway)
    env = {**os.environ, "CODEX_HOME": str(home), "CTXGATE_TEST_OPENAI_KEY": "sk-codex-test",
           "NO_COLOR": "1"}
    done = subprocess.run(
        [codex, "exec", "--skip-git-repo-check", "--sandbox", "read-only", TASK],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
        stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "echo:" in done.stdout + done.stderr  # the stub's final answer reached the user
    assert_finished_smaller(managed_lines(gateway, since, "response"))


def test_claude_code_print_through_ctxgate(gateway: Gateway, upstream: Upstream,
                                           tmp_path: Path) -> None:
    claude = binary("claude")
    since = log_size(gateway)
    env = {**os.environ, "HOME": str(tmp_path), "ANTHROPIC_BASE_URL": gateway.url,
           "ANTHROPIC_API_KEY": "sk-ant-claude-test",
           "ANTHROPIC_CUSTOM_HEADERS": f"x-ctxgate-budget-tokens: {CLAUDE_BUDGET}",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
    done = subprocess.run(
        [claude, "-p", TASK, "--model", f"stub-agent-{STEPS}", "--allowedTools", "Bash",
         "--max-turns", "20"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
        stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "echo:" in done.stdout
    calls = [c for c in managed_lines(gateway, since, "message")
             if c["tokens_before"] is not None]
    agent = [c for c in calls if c["tokens_before"] > 2000] or calls
    assert_finished_smaller(agent, at_least=0.40)
