"""`bench/miniswe.py` on tiny `.traj.json` files committed to a git repository written here
(not the real data): each run as recorded (system prompt, task, reply / harness answer
turns, `extra` left out, nothing after the last reply), queues with the system prompt once
and cut by calls with nothing added, `bench/replay.py`'s loader reading both folders; and,
where the mirror of `gruckion/mini-swe-agent` is on this machine, the real runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import corpora, miniswe
from bench.yardstick import call_ends
from tests.bench.converted import committed, loaded, rows

SYSTEM = "You are a helpful assistant that can interact multiple times with a computer shell."
MIRROR = Path("/work/.mirror/gruckion+mini-swe-agent/repo")


def reply(command: str) -> dict[str, object]:
    return {"role": "assistant", "content": f"THOUGHT: look.\n\n```bash\n{command}\n```",
            "extra": {"cost": 0.01}}


def answer(code: int, output: str) -> dict[str, str]:
    return {"role": "user",
            "content": f"<returncode>{code}</returncode>\n<output>\n{output}\n</output>"}


RUNS = {
    "a__a-1": [reply("ls"), answer(0, "setup.py\nsrc"), reply("cat src/x.py"),
               answer(1, "cat: no such file"), {"role": "assistant", "content": "no block"},
               {"role": "user", "content": "Please always provide EXACTLY ONE action."},
               reply(f"echo {miniswe.SUBMIT} && git diff"),
               {"role": "user", "content": "diff --git a/x b/x"}],
    "b__b-2": [reply("grep -rn foo ."), answer(0, "./foo.py:1:foo"),
               reply(f"echo {miniswe.SUBMIT}")],
    "c__c-3": [reply(f"echo {miniswe.SUBMIT}"), {"role": "user", "content": "patch"}],
}


def trajectory(instance: str) -> str:
    task = {"role": "user", "content": f"<pr_description>\nfix {instance}\n</pr_description>"}
    return json.dumps({"info": {"exit_status": "Submitted", "submission": "patch"},
                       "messages": [{"role": "system", "content": SYSTEM}, task,
                                    *RUNS[instance]],
                       "trajectory_format": "mini-swe-agent-1", "instance_id": instance})


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "mini"
    for instance in reversed(RUNS):
        folder = repo / miniswe.TRAJS / instance
        folder.mkdir(parents=True)
        (folder / f"{instance}.traj.json").write_text(trajectory(instance))
    (repo / miniswe.RUN / "RESULTS.md").write_text("not a trajectory")
    return committed(repo, "runs")


def test_converts_runs_and_queues_that_the_replay_reads(source: tuple[Path, str],
                                                        tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = miniswe.convert(repo, out, rev=rev, queue_calls=4)

    # 4 + 2 + 1 calls -> 7 / 4 -> 2 queues, cut after the first run (4 nearest 3.5)
    assert written == {"miniswe-gemini3": 3, "miniswe-gemini3-queue": 2}
    runs, queues = loaded(written, out, "miniswe-gemini3")
    assert [s.id for s in runs] == ["miniswe-gemini3/a__a-1", "miniswe-gemini3/b__b-2",
                                    "miniswe-gemini3/c__c-3"]
    assert [len(call_ends(s.messages)) for s in runs] == [4, 2, 1]
    # as recorded, `extra` left out, the submitted patch after the last reply left out
    assert runs[0].messages[0] == {"role": "system", "content": SYSTEM}
    assert runs[0].messages[2:] == [{k: v for k, v in m.items() if k != "extra"}
                                    for m in RUNS["a__a-1"][:-1]]
    assert runs[2].messages[-1]["content"].endswith(f"echo {miniswe.SUBMIT}\n```")
    for session in runs + queues:
        assert session.tools is None
        assert [m["role"] for m in session.messages].count("system") == 1
        assert session.messages[-1]["role"] == "assistant"
    assert [s.id for s in queues] == ["miniswe-gemini3-queue/a__a-1--a__a-1-q0",
                                      "miniswe-gemini3-queue/b__b-2--c__c-3-q1"]
    assert queues[0].messages == runs[0].messages
    assert queues[1].messages == runs[1].messages + runs[2].messages[1:]
    lines = rows(out, "miniswe-gemini3")
    assert [(s["model"], s["task_id"]) for s in lines] == [
        ("gemini-3-pro-preview", "a__a-1"), ("gemini-3-pro-preview", "b__b-2"),
        ("gemini-3-pro-preview", "c__c-3")]
    readme = (out / "miniswe-gemini3" / "README.md").read_text()
    assert "MIT License" in readme and f"`{rev}`" in readme
    assert "exactly one bash block: 6 of 7" in readme
    assert "`echo` 3, `ls` 1, `cat` 1, `(none)` 1, `grep` 1" in readme
    assert "- `<returncode>0</returncode>`: 2 turns" in readme
    assert "Queues" in (out / "miniswe-gemini3-queue" / "README.md").read_text()


def test_a_run_without_a_reply_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a system prompt and a model reply"):
        miniswe.messages_of([{"role": "system", "content": SYSTEM},
                             {"role": "user", "content": "task"}])
    with pytest.raises(ValueError, match="unexpected message 'tool'"):
        miniswe.messages_of([{"role": "tool", "content": "x"}])


@pytest.mark.skipif(not MIRROR.is_dir(),
                    reason=f"no mirror of gruckion/mini-swe-agent at {MIRROR}")
def test_the_recorded_runs(tmp_path: Path) -> None:
    written = miniswe.convert(MIRROR, tmp_path, queue_calls=350)
    assert written == {"miniswe-gemini3": 500, "miniswe-gemini3-queue": 58}
    runs = corpora.load("miniswe-gemini3", tmp_path)
    assert sum(len(call_ends(s.messages)) for s in runs) == 20163
    assert all(s.messages[-1]["role"] == "assistant" for s in runs)
