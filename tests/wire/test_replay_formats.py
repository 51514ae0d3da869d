"""A shared-corpus session replayed in the three wire formats gives the savings and recall it
gives in chat form: converted by `bench/wire_convert.py`, fitted through each format's
adapter as its route does (in-process, the bench's yardstick), and through `ctxgate replay`
(a real process, each file's format told by its shape)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from bench import corpora
from bench.corpus_run import replay_session, request
from bench.yardstick import call_ends
from gateway.cli import app
from gateway.context.engine import ContextEngine

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpora"
SESSION = "agentdojo/claude-3-opus-20240229/workspace/user_task_19"  # tool calls, 10 calls
pytestmark = pytest.mark.skipif(not (CORPUS / "agentdojo").exists(),
                                reason="../shared/corpora/agentdojo is absent")


def session() -> corpora.Session:
    return next(s for s in corpora.load("agentdojo", CORPUS) if s.id == SESSION)


def figures(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Per call: the yardstick's reduction (characters of the forwarded messages, read back
    as chat; within half a point) and recall, the tokens the engine saved (tool definitions are
    counted in each format's own shape, so totals differ by a few), the class, and whether
    the drop log accounts for every saved token."""
    return [(pytest.approx(r["methods"]["ctxgate"]["reduction"], abs=0.005),
             r["methods"]["ctxgate"]["recall"],
             r["engine"]["tokens_before"] - r["engine"]["tokens_after"],
             r["engine"]["class"], r["engine"]["droplog_ok"]) for r in records]


async def test_same_savings_and_recall_in_each_format(engine: ContextEngine) -> None:
    run = uuid.uuid4().hex[:8]
    chat, responses, messages = [
        figures(await replay_session(engine, session(), corpus=f"{fmt}-{run}",
                                     wire_format=fmt))
        for fmt in ("chat", "responses", "messages")]
    assert len(chat) == 10
    assert max(saved for _, _, saved, *_ in chat) > 2000  # the engine did cut this session
    assert responses == chat
    assert messages == chat


def test_ctxgate_replay_reads_each_format(tmp_path: Path) -> None:
    s = session()
    calls = [request(s, end) for end in call_ends(s.messages)]
    files = {"chat": tmp_path / "chat.json"}
    files["chat"].write_bytes(orjson.dumps(calls))
    for fmt in ("responses", "messages"):
        files[fmt] = tmp_path / f"{fmt}.json"
        converted = subprocess.run(
            [sys.executable, "-m", "bench.wire_convert", str(files["chat"]), "--to", fmt],
            cwd=ROOT, capture_output=True, check=True).stdout
        first = orjson.loads(converted)[0]
        assert ("input" in first) if fmt == "responses" else ("system" in first)
        files[fmt].write_bytes(converted)
    results = {}
    for fmt, path in files.items():
        # The command itself, in this process: a `python -m gateway replay` each would
        # import torch and load the model again (~10 CPU-s each, ~70 s at load 18).
        ran = CliRunner().invoke(app, ["replay", str(path), "--json"])
        assert ran.exit_code == 0, (ran.output, ran.exception)
        results[fmt] = [(r["tokens_before"] - r["tokens_after"], len(r["drops"]))
                        for r in orjson.loads(ran.stdout)]
    assert len(results["chat"]) == 10
    assert results["chat"][-1][0] > 0
    assert results["responses"] == results["chat"]
    assert results["messages"] == results["chat"]
