"""`bench/taubench.py` on a tiny tau-bench-shaped checkout and trajectories file written here
(not the real data): the tools read from the tool classes, both corpus shapes, and that
`bench/replay.py`'s loader reads what it writes."""

from __future__ import annotations

import json
from pathlib import Path

from bench import corpora, taubench
from bench.yardstick import call_ends

POLICY = "# Airline Agent Policy\n\nBe helpful. " + "Rule. " * 50

TOOL = '''from typing import Any, Dict
class {cls}:
    @staticmethod
    def get_info() -> Dict[str, Any]:
        return {{
            "type": "function",
            "function": {{
                "name": "{name}",
                "description": "{name} tool.",
                "parameters": {{"type": "object", "properties": {{}}, "required": []}},
            }},
        }}
'''


def checkout(root: Path) -> Path:
    tools = root / "tau_bench" / "envs" / "airline" / "tools"
    tools.mkdir(parents=True)
    (tools / "get_user_details.py").write_text(TOOL.format(cls="GetUserDetails",
                                                           name="get_user_details"))
    (tools / "think.py").write_text(TOOL.format(cls="Think", name="think"))
    (tools / "__init__.py").write_text(
        "from .get_user_details import GetUserDetails\nfrom .think import Think\n"
        "ALL_TOOLS = [Think, GetUserDetails]\n"
    )
    return root


def run(trial: int, task: int, turns: int) -> dict[str, object]:
    traj: list[dict[str, object]] = [
        {"role": "system", "content": POLICY},
        {"role": "user", "content": f"Hi, I am user_{task}."},
    ]
    for t in range(turns):
        call = {"id": "call_same", "type": "function",  # gpt-4o reused ids
                "function": {"name": "get_user_details",
                             "arguments": json.dumps({"user_id": f"user_{task}"})}}
        traj += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_same", "name": "get_user_details",
             "content": json.dumps({"user": f"user_{task}", "turn": t})},
            {"role": "assistant", "content": f"Done step {t}."},
            {"role": "user", "content": "ok" if t < turns - 1 else "Thanks ###STOP###"},
        ]
    return {"task_id": task, "trial": trial, "reward": 1.0, "info": {}, "traj": traj}


def test_converts_runs_and_queues_that_the_replay_reads(tmp_path: Path) -> None:
    repo = checkout(tmp_path / "tau-bench")
    runs = [run(trial, task, turns=task + 1) for trial in (0, 1) for task in (2, 0, 1, 3)]
    source = tmp_path / "gpt-4o-airline.json"
    source.write_text(json.dumps(runs))
    out = tmp_path / "out"

    written = taubench.convert(source, repo, out)

    assert written == {"taubench-airline": 8, "taubench-airline-queue": 4}
    assert corpora.extra_jsonl(out) == ["taubench-airline", "taubench-airline-queue"]
    tasks = corpora.load("taubench-airline", out)
    queues = corpora.load("taubench-airline-queue", out)
    for session in tasks + queues:
        assert session.messages[0] == {"role": "system", "content": POLICY}
        assert sum(m["role"] == "system" for m in session.messages) == 1
        assert [t["function"]["name"] for t in session.tools or ()] == [
            "think", "get_user_details"]  # ALL_TOOLS order, uncalled tools included
        ids = [c["id"] for m in session.messages for c in m.get("tool_calls") or ()]
        assert len(ids) == len(set(ids))
        for i, m in enumerate(session.messages):  # each result answers the call before it
            if m["role"] == "tool":
                assert m["tool_call_id"] == session.messages[i - 1]["tool_calls"][0]["id"]
                assert "name" not in m
    one = next(s for s in tasks if s.id == "taubench-airline/trial0-task2")
    recorded = runs[0]["traj"]
    assert [(m["role"], m["content"]) for m in one.messages] == [
        (m["role"], m["content"]) for m in recorded]  # type: ignore[attr-defined]
    assert [c["id"] for m in one.messages for c in m.get("tool_calls") or ()] == [
        "call_same", "call_same_2", "call_same_3"]
    # Queues: per trial, tasks in order, cut where the calls are nearest half (tasks 0-3
    # make 2, 4, 6, 8 calls of 20: after task 2 the running total is 12, after task 1 6).
    assert [s.id for s in queues] == [
        "taubench-airline-queue/trial0-q0-tasks0-2", "taubench-airline-queue/trial0-q1-tasks3-3",
        "taubench-airline-queue/trial1-q0-tasks0-2", "taubench-airline-queue/trial1-q1-tasks3-3"]
    first = queues[0].messages
    assert [m["content"] for m in first if m["role"] == "user"][:3] == [
        "Hi, I am user_0.", "Thanks ###STOP###", "Hi, I am user_1."]
    assert len(call_ends(first)) == 2 + 4 + 6
    assert "Ticket queues" in (out / "taubench-airline-queue" / "README.md").read_text()
    assert "MIT" in (out / "taubench-airline" / "README.md").read_text()
