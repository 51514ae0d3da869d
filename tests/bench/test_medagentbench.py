"""`bench/medagentbench.py` on a tiny MedAgentBench-shaped `outputs/` folder committed to a
git repository written here (not the real data) and then removed, as the source removed
it: the runs read at the commit that holds them, per model in task-index order, `agent`
turns as `assistant`, no system message and no tools, long contents cut, per-model task
queues cut by calls with no system message added, and `bench/replay.py`'s loader reading
both folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import medagentbench
from bench.yardstick import call_ends
from tests.bench.converted import committed, git, loaded, rows

INSTRUCTIONS = "You are an expert in using FHIR functions to assist medical professionals. "


def history(task: int, calls: int, *, big: bool = False) -> list[dict[str, str]]:
    """The instructions and question, then per call the model's REST call in prose and the
    harness's answer, ending with the model's FINISH."""
    msgs = [{"role": "user", "content": f"{INSTRUCTIONS}Question: task {task}?"}]
    for c in range(calls - 1):
        msgs += [{"role": "agent", "content": f"GET http://h/fhir/Observation?patient=S{task}"},
                 {"role": "user", "content": "Here is the response from the GET request:\n"
                  + (("y" * 30_000) if big and c == 0 else f'{{"total": {c}}}')}]
    msgs.append({"role": "agent", "content": f"FINISH([{task}])"})
    return msgs


def runs_file(rows: list[tuple[int, int, bool]]) -> str:
    return "".join(json.dumps({"index": i, "error": None, "output": {
        "index": i, "status": "completed", "result": f"[{i}]",
        "history": history(i, calls, big=big)}}) + "\n" for i, calls, big in rows)


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    """A git directory whose first commit holds two models' runs and whose HEAD removed them."""
    repo = tmp_path / "agentbench"
    base = repo / "outputs" / "Jan17v1"
    # gpt-4o-mini: tasks out of order in the file; task 1 has a 30,000-character answer
    mini = base / "gpt-4o-mini" / "medagentbench-std"
    mini.mkdir(parents=True)
    (mini / "runs.jsonl").write_text(runs_file([(2, 3, False), (0, 2, False), (1, 2, True)]))
    (mini / "overall.json").write_text("{}")
    other = base / "llama-3.3" / "medagentbench-std"
    other.mkdir(parents=True)
    (other / "runs.jsonl").write_text(runs_file([(5, 1, False), (4, 2, False)]))
    (base / "dummy").write_text("\n")
    git_dir, rev = committed(repo, "Upload results")
    git(repo, "rm", "-rq", "outputs")
    git(repo, "commit", "-qm", "remove")
    return git_dir, rev


def test_converts_runs_and_queues_that_the_replay_reads(source: tuple[Path, str],
                                                        tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = medagentbench.convert(repo, out, rev=rev, queue_calls=3)

    # gpt-4o-mini: 2 + 2 + 3 = 7 calls -> 2 queues; llama-3.3: 2 + 1 = 3 calls -> 1 queue
    assert written == {"medagentbench": 5, "medagentbench-queue": 3}
    runs, queues = loaded(written, out, "medagentbench")
    assert [s.id for s in runs] == [
        "medagentbench/gpt-4o-mini-000", "medagentbench/gpt-4o-mini-001",
        "medagentbench/gpt-4o-mini-002", "medagentbench/llama-3.3-004",
        "medagentbench/llama-3.3-005"]
    assert [len(call_ends(s.messages)) for s in runs] == [2, 2, 3, 2, 1]
    assert runs[0].messages == [{"role": "assistant" if m["role"] == "agent" else "user",
                                 "content": m["content"]} for m in history(0, 2)]
    for session in runs + queues:
        assert session.tools is None
        assert {m["role"] for m in session.messages} == {"user", "assistant"}
        assert session.messages[0]["content"].startswith(INSTRUCTIONS)
    big = runs[1].messages[2]["content"]
    assert len(big) < 24_100 and big.endswith("y" * 8_000)
    assert "[... 6043 characters cut ...]" in big
    # Queues: gpt-4o-mini's tasks 0 + 1 (4 calls) then 2 (3), cut at the boundary nearest
    # 3.5; llama-3.3's in one
    assert [s.id for s in queues] == ["medagentbench-queue/gpt-4o-mini-000--001-q0",
                                      "medagentbench-queue/gpt-4o-mini-002--002-q1",
                                      "medagentbench-queue/llama-3.3-004--005-q0"]
    assert queues[0].messages == runs[0].messages + runs[1].messages
    assert queues[2].messages == runs[3].messages + runs[4].messages
    assert [len(call_ends(s.messages)) for s in queues] == [4, 3, 3]
    lines = rows(out, "medagentbench-queue")
    assert [(s["model"], s["task_id"]) for s in lines] == [
        ("gpt-4o-mini", None), ("gpt-4o-mini", None), ("llama-3.3", None)]
    readme = (out / "medagentbench" / "README.md").read_text()
    assert "Apache License 2.0" in readme and f"`{rev}`" in readme
    assert "(1 of 20)" in readme and "`completed` 5" in readme
    assert "`gpt-4o-mini` 3, `llama-3.3` 2" in readme
    # the answers after each task's first user turn: 1 + 1 + 2 + 1 + 0, all of one kind
    assert "- `Here is the response from the GET request`: 5 turns, 100.0%" in readme
    assert "Task queues" in (out / "medagentbench-queue" / "README.md").read_text()


def test_the_commit_without_the_runs_is_refused(source: tuple[Path, str],
                                                tmp_path: Path) -> None:
    repo, _ = source
    with pytest.raises(ValueError, match=r"no medagentbench-std/runs\.jsonl"):
        medagentbench.convert(repo, tmp_path / "out", rev="HEAD")


def test_an_unknown_role_is_refused() -> None:
    turns: list[dict[str, Any]] = [{"role": "user", "content": "q"},
                                   {"role": "system", "content": "x"}]
    with pytest.raises(ValueError, match="unexpected role 'system'"):
        medagentbench.messages_of(turns)
