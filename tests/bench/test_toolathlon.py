"""`bench/toolathlon.py` on a tiny Toolathlon-shaped `trajs/` folder written here (not the
real data): runs and task queues per model, tool definitions inferred from the calls,
repeated call ids renamed, long tool results cut, and `bench/replay.py`'s loader reading
every folder it writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import corpora, toolathlon
from bench.yardstick import call_ends


def run(task: str, steps: int, *, big: bool = False) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"Do {task} in task.md."}]
    for s in range(steps):
        msgs += [
            {"role": "assistant", "content": None if s else "Reading.", "tool_calls": [
                # the same ids in every run, as a model that numbers its calls would send
                {"id": f"call_{s}", "type": "function", "function": {
                    "name": "filesystem-read_file",
                    "arguments": json.dumps({"path": f"/w/{task}.md", "head": s})}},
                {"id": f"call_{s}b", "type": "function", "function": {
                    "name": "terminal-run_command",
                    "arguments": {1: '{"command": "ls', 2: ""}.get(s, '{"command": "ls"}')}}]},
            {"role": "tool", "tool_call_id": f"call_{s}",
             "content": ("x" * 30_000) if big and s == 0 else f"content of {task} {s}"},
            {"role": "tool", "tool_call_id": f"call_{s}b", "content": "task.md"},
        ]
    msgs.append({"role": "assistant", "content": f"Finished {task}."})
    return {"pass": task == "alpha", "messages": msgs, "failure": ""}


def test_converts_runs_and_queues_that_the_replay_reads(tmp_path: Path) -> None:
    repo = tmp_path / "site"
    (repo / "trajs").mkdir(parents=True)
    steps = {"alpha": 1, "beta": 3, "gamma": 2, "delta": 4}
    for task, n in steps.items():
        (repo / "trajs" / f"model-a_{task}.json").write_text(
            json.dumps(run(task, n, big=task == "beta")))
    (repo / "trajs" / "model-b_alpha.json").write_text(json.dumps(run("alpha", 2)))
    (repo / "trajs" / "notes.txt").write_text("not a run")
    out = tmp_path / "out"

    written = toolathlon.convert(repo, out, queue_calls=6)

    # model-a: runs of 2, 4, 3, 5 calls (steps + the final answer) = 14 -> 2 queues
    assert written == {"toolathlon-model-a": 4, "toolathlon-model-a-queue": 2,
                       "toolathlon-model-b": 1, "toolathlon-model-b-queue": 1}
    assert corpora.extra_jsonl(out) == sorted(written)
    runs = corpora.load("toolathlon-model-a", out)
    queues = corpora.load("toolathlon-model-a-queue", out)
    assert [s.id for s in runs] == [f"toolathlon-model-a/{t}" for t in sorted(steps)]
    for session in runs + queues:
        assert session.messages[0] == {"role": "system", "content": toolathlon.SYSTEM}
        ids = [c["id"] for m in session.messages for c in m.get("tool_calls") or ()]
        assert len(ids) == len(set(ids))
    beta = next(s for s in runs if s.id.endswith("/beta")).messages
    assert [m["role"] for m in beta] == ["system", "user"] + ["assistant", "tool", "tool"] * 3 + [
        "assistant"]
    assert len(call_ends(beta)) == 4
    first = beta[3]["content"]
    assert len(first) < 24_100 and first.startswith("x" * 16_000)
    assert "[... 6000 characters cut ...]" in first and first.endswith("x" * 8_000)
    assert beta[5]["tool_calls"][1]["function"]["arguments"] == '{"command": "ls'  # as sent
    assert beta[8]["tool_calls"][1]["function"]["arguments"] == "{}"
    tools = {t["function"]["name"]: t["function"] for t in runs[0].tools or []}
    assert sorted(tools) == ["filesystem-read_file", "terminal-run_command"]
    read = tools["filesystem-read_file"]
    assert read["description"] == "read_file (filesystem server)"
    assert read["parameters"]["properties"] == {"path": {"type": "string"},
                                                "head": {"type": "integer"}}
    assert read["parameters"]["required"] == ["path", "head"]
    # Queues: model-a's runs in task order (alpha, beta, delta, gamma: 2, 4, 5, 3 calls),
    # cut at the boundary nearest 7 (after beta: 6)
    assert [s.id for s in queues] == ["toolathlon-model-a-queue/alpha--beta-q0",
                                      "toolathlon-model-a-queue/delta--gamma-q1"]
    q0 = queues[0].messages
    assert [m["content"] for m in q0 if m["role"] == "user"] == ["Do alpha in task.md.",
                                                                 "Do beta in task.md."]
    assert [c["id"] for m in q0 for c in m.get("tool_calls") or ()] == [
        "call_0", "call_0b", "call_0_3", "call_0b_4", "call_1", "call_1b", "call_2", "call_2b"]
    assert len(call_ends(q0)) == 2 + 4
    readme = (out / "toolathlon-model-a" / "README.md").read_text()
    assert "3 not valid JSON kept as sent,\n  2 empty ones" in readme
    assert "CC-BY-4.0" in readme and "(1 of 20)" in readme and "1 passed" in readme
    assert "Task queues" in (out / "toolathlon-model-a-queue" / "README.md").read_text()
