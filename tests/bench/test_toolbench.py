"""`bench/toolbench.py` on tiny ToolBench answer files committed to a git repository written
here (not the real data), in two commits: every version of every answer file is read, a
file is kept when its steps are one chat's prefixes (3 steps or more), function calls
become tool calls answered by tool messages, the last `Finish` call becomes text; a
backtracked step off the final path, a file without `train_messages`, a 2-step file, a
non-answer file and a chat seen already are left out; and, where the mirror of
`OpenBMB/ToolBench` is on this machine, the real answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import corpora, toolbench
from bench.yardstick import call_ends
from tests.bench.converted import committed, git, rows

MIRROR = Path("/work/.mirror/OpenBMB+ToolBench/repo")
SYSTEM = {"role": "system", "content": "You are AutoGPT, you can use many tools(functions)."}
QUERY = {"role": "user", "content": "\nWhat is the weather in Paris and in Oslo?"}
FUNCTIONS = [{"name": "weather_for_w", "description": "weather of a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"], "optional": []}},
             {"name": "Finish", "description": "finish", "parameters": {}}]


def call(name: str, args: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content,
            "function_call": {"name": name, "arguments": json.dumps(args)}}


def answer(name: str, out: str) -> dict[str, Any]:
    return {"role": "function", "name": name, "content": json.dumps({"error": "", "response": out})}


PARIS, OSLO = call("weather_for_w", {"city": "Paris"}), call("weather_for_w", {"city": "Oslo"})
FINISH = call("Finish", {"return_type": "give_answer", "final_answer": "12 and 3"}, "Done.")
BACK = {"role": "user", "content": "This is not the first time you try this task, ...",
        "valid": False}
CHAT = [SYSTEM, QUERY, PARIS, answer("weather_for_w", "12C"), OSLO, answer("weather_for_w", "3C"),
        FINISH]


def steps(chat: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each reply's request and the reply, as `train_messages` records them."""
    return [chat[:i + 1] for i, m in enumerate(chat) if m["role"] == "assistant"]


def write(folder: Path, name: str, train: list[Any] | None) -> None:
    gen: dict[str, Any] = {"function": FUNCTIONS, "finish_type": "give_answer",
                           "query_count": 9}
    if train is not None:
        gen["train_messages"] = train
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps({"answer_generation": gen, "tree": {}}))


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "toolbench"
    g1, g2 = repo / "data_example/answer/G1_answer", repo / "data_example/answer/G2_answer"
    write(g1, "10_ChatGPT_DFS_woFilter_w2.json", steps(CHAT))
    # a backtracking turn on the final path (kept): the step after it sent it
    back = [*CHAT[:4], BACK, *CHAT[4:]]
    write(g2, "3_ChatGPT_DFS_woFilter_w2.json", steps(back))
    # a step from another branch (its request not a prefix of the final path): left out
    off = steps(CHAT)
    off[1] = [*CHAT[:4], BACK, OSLO]
    write(g2, "4_ChatGPT_DFS_woFilter_w2.json", off)
    write(g2, "5_ChatGPT_DFS_woFilter_w2.json", None)
    write(g2, "6_ChatGPT_DFS_woFilter_w2.json", [CHAT[:3], CHAT[:5]])
    (repo / "README.md").write_text("ToolBench\n")
    committed(repo, "answers")
    # second commit: the first file's chat copied to another file (kept once: the version
    # `git rev-list` lists first), a ToolLLaMA answer, a processed file that is no answer
    moved = g1 / "10_ChatGPT_DFS_woFilter_w2.json"
    (g1 / "10_copy_DFS_woFilter_w2.json").write_text(json.dumps(json.loads(moved.read_text()),
                                                                indent=1))
    moved.unlink()
    llama = repo / "data/toolllama/pipeline_answer/toolllama"
    write(llama, "7_DFS_woFilter_w2.json",
          steps([*CHAT[:-1], call("Finish", {"return_type": "give_up_and_restart"})]))
    (repo / "data/toolllama/processed_answer").mkdir(parents=True)
    (repo / "data/toolllama/processed_answer/G1.json").write_text("[]")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "more")
    return repo / ".git", git(repo, "rev-parse", "HEAD")


def test_converts_answer_paths_that_the_replay_reads(source: tuple[Path, str],
                                                      tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = toolbench.convert(repo, out, rev=rev)

    assert written == {"toolbench": 3}
    assert corpora.extra_jsonl(out) == ["toolbench"]
    runs = corpora.load("toolbench", out)
    assert [s.id for s in runs] == [
        "toolbench/data/toolllama/pipeline_answer/toolllama/7_DFS_woFilter_w2",
        "toolbench/data_example/answer/G1_answer/10_ChatGPT_DFS_woFilter_w2",
        "toolbench/data_example/answer/G2_answer/3_ChatGPT_DFS_woFilter_w2"]
    llama, runs = runs[0], runs[1:]
    assert [len(call_ends(llama.messages))] == [3]
    first = runs[0].messages
    assert first[:2] == [SYSTEM, QUERY]
    assert first[2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "weather_for_w", "arguments": '{"city": "Paris"}'}}]}
    assert first[3] == {"role": "tool", "tool_call_id": "call_1",
                        "content": '{"error": "", "response": "12C"}'}
    assert first[5]["tool_call_id"] == "call_2"
    # the unanswered Finish call written as the last reply's text
    assert first[-1] == {"role": "assistant", "content":
                         'Done.\nFinish({"return_type": "give_answer", "final_answer": '
                         '"12 and 3"})'}
    assert [len(call_ends(s.messages)) for s in runs] == [3, 3]
    # the backtracking turn kept as a user turn, without its `valid` field
    assert runs[1].messages[4] == {"role": "user", "content": BACK["content"]}
    lines = rows(out, "toolbench")
    assert [s["model"] for s in lines] == ["ToolLLaMA", "gpt-3.5-turbo-16k",
                                           "gpt-3.5-turbo-16k"]
    assert lines[1]["tools"][0] == {"type": "function", "function": {
        "name": "weather_for_w", "description": "weather of a city",
        "parameters": FUNCTIONS[0]["parameters"]}}
    readme = (out / "toolbench" / "README.md").read_text()
    assert "Apache-2.0" in readme and f"`{rev}`" in readme
    assert "answer file versions 8" in readme and "of fewer than 3 steps 1" in readme
    assert "seen already 1" in readme and "not an answer (no answer_generation) 1" in readme
    assert "steps not one chat's prefixes 1" in readme
    assert "without train_messages (no valid path found) 1" in readme
    assert "1 sessions carry a DFSDT backtracking user turn" in readme


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no mirror of OpenBMB/ToolBench at {MIRROR}")
def test_the_recorded_answers(tmp_path: Path) -> None:
    written = toolbench.convert(MIRROR, tmp_path)
    assert written == {"toolbench": 13}
    runs = corpora.load("toolbench", tmp_path)
    assert sum(len(call_ends(s.messages)) for s in runs) == 52
    assert all(s.messages[-1]["role"] == "assistant" for s in runs)
