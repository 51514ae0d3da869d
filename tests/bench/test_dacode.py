"""`bench/dacode.py` on tiny `result.json` files committed to a git repository written here
(not the real data): each run as the agent sent it (its system message, then per step the
observation and the reply as the agent kept it), only the four full runs' models, queues per
model cut by calls with each run's system message as a user turn and nothing else added,
`bench/replay.py`'s loader reading both folders; and, where the mirror of `yiyihum/da-code`
is on this machine, the real runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import corpora, dacode
from bench.recall_seen import run_starts
from bench.yardstick import call_ends
from tests.bench.converted import committed, loaded, rows

MIRROR = Path("/work/.mirror/yiyihum+da-code/repo")
HEAD = "# CONTEXT #\nYou are a data scientist.\n\n# ACTION SPACE #\n## Bash Action\n"


def step(observation: str, thought: str, action: str) -> dict[str, str]:
    # `response` is the raw reply; the agent kept `Thought: <thought>\n\nAction: <action>`
    return {"observation": observation, "thought": thought, "action": action,
            "code": "", "response": f"Thought: {thought}\nAction: {action} (raw)"}


def result(task: str, steps: list[dict[str, str]]) -> str:
    return json.dumps({"finished": steps[-1]["action"].startswith("Terminate"),
                       "steps": len(steps), "Task": task,
                       "system_message": f"{HEAD}\n# TASK #\n{task}\n", "trajectory": steps})


THREE = [step("You are in the folder now.", "Look first.", 'Bash(code="ls")'),
         step("README.md\ndata.csv", "Read it.",
              'Python(file_path="./a.py"):\n```python\nprint(1)\n```'),
         step("1", "Done.", 'Terminate(output="result.csv")')]
TWO = [step("You are in the folder now.", "unparsed reply", "None"),
       step("Failed to parse action from your response, make sure you provide a valid action.",
            "Stop.", 'Terminate(output="FAIL")')]


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "da-code"
    files = {("gpt-4o", "data-sa-002"): result("Test B.", TWO),
             ("gpt-4o", "data-sa-001"): result("Test A.", THREE),
             ("gpt4-turbo", "plot-bar-001"): result("Plot C.", THREE),
             ("claude-3-opus-20240229", "dm-csv-001"): result("Clean D.", TWO),
             ("Qwen2-72B-Instruct", "ml-binary-001"): result("Fit E.", THREE),
             # not read: a partial rerun, another model
             ("azure-ML0608", "ml-binary-001"): result("Fit E.", THREE),
             ("mixtral-8x7b-32768", "data-sa-001"): result("Test A.", THREE)}
    for (model, task), text in files.items():
        path = repo / dacode.RESULTS / model / task / "dabench" / "result.json"
        path.parent.mkdir(parents=True)
        path.write_text(text)
    return committed(repo, "results")


def test_converts_runs_and_queues_that_the_replay_reads(source: tuple[Path, str],
                                                        tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = dacode.convert(repo, out, rev=rev, queue_calls=3)

    assert written == {"dacode": 5, "dacode-queue": 5}
    runs, queues = loaded(written, out, "dacode")
    assert [s.id for s in runs] == [
        "dacode/gpt-4o/data-sa-001", "dacode/gpt-4o/data-sa-002",
        "dacode/gpt4-turbo/plot-bar-001", "dacode/claude-3-opus-20240229/dm-csv-001",
        "dacode/Qwen2-72B-Instruct/ml-binary-001"]
    assert [len(call_ends(s.messages)) for s in runs] == [3, 2, 3, 2, 3]
    # as the agent sent it: the reply as it kept it in its history, not the raw response
    assert runs[0].messages == [
        {"role": "system", "content": f"{HEAD}\n# TASK #\nTest A.\n"},
        {"role": "user", "content": "Observation: You are in the folder now."},
        {"role": "assistant", "content": 'Thought: Look first.\n\nAction: Bash(code="ls")'},
        {"role": "user", "content": "Observation: README.md\ndata.csv"},
        {"role": "assistant", "content":
            'Thought: Read it.\n\nAction: Python(file_path="./a.py"):\n```python\nprint(1)\n```'},
        {"role": "user", "content": "Observation: 1"},
        {"role": "assistant",
         "content": 'Thought: Done.\n\nAction: Terminate(output="result.csv")'}]
    assert runs[1].messages[2]["content"] == "Thought: unparsed reply\n\nAction: None"
    for session in runs + queues:
        assert session.tools is None
        assert session.messages[-1]["role"] == "assistant"
    # per model: gpt-4o 3 + 2 calls -> 5 / 3 -> 2 queues, cut after its first run; the
    # others one run each; no system message, each run's own as a user turn
    assert [s.id for s in queues] == [
        "dacode-queue/Qwen2-72B-Instruct/q00", "dacode-queue/claude-3-opus-20240229/q00",
        "dacode-queue/gpt-4o/q00", "dacode-queue/gpt-4o/q01", "dacode-queue/gpt4-turbo/q00"]
    assert queues[2].messages == [{"role": "user", "content": runs[0].messages[0]["content"]},
                                  *runs[0].messages[1:]]
    assert all(m["role"] != "system" for s in queues for m in s.messages)
    joined = corpora.Session("q", queues[2].messages + queues[3].messages)
    assert run_starts(joined, runs) == [0, 7]
    lines = rows(out, "dacode")
    assert [(s["model"], s["task_id"]) for s in lines][:2] == [
        ("gpt-4o", "data-sa-001"), ("gpt-4o", "data-sa-002")]
    readme = (out / "dacode" / "README.md").read_text()
    assert "MIT" in readme and f"`{rev}`" in readme
    assert "`data-sa` 2, `dm-csv` 1, `ml-binary` 1, `plot-bar` 1" in readme
    assert "finished (the agent terminated): 5 of 5" in readme
    assert "`Terminate` 5, `Bash` 3, `Python` 3, `None` 2" in readme
    assert "Queues" in (out / "dacode-queue" / "README.md").read_text()


def test_a_run_without_a_step_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a system message and at least one step"):
        dacode.messages_of({"system_message": "x", "trajectory": []})
    with pytest.raises(ValueError, match="needs a system message"):
        dacode.messages_of({"trajectory": THREE})


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no mirror of yiyihum/da-code at {MIRROR}")
def test_the_recorded_runs(tmp_path: Path) -> None:
    written = dacode.convert(MIRROR, tmp_path)
    assert written == {"dacode": 1066, "dacode-queue": 31}
    runs = corpora.load("dacode", tmp_path)
    assert sum(len(call_ends(s.messages)) for s in runs) == 9402
    assert all(s.messages[0]["role"] == "system" for s in runs)
