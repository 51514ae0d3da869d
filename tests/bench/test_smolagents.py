"""`bench/smolagents.py` on tiny run files committed to a git repository written here (not the
real data): the agent's memory converted as smolagents sent it (its own roles as assistant and
user, consecutive messages of one role merged, content as typed parts), cut after the last
assistant turn, each prefix a call; runs too short, failed runs and the plain model's runs
left out; the queue layout; and the real mirror where present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import corpora, smolagents
from bench.corpora import session_calls
from tests.bench.converted import committed, loaded, rows

MIRROR = Path("/work/.mirror/huggingface+smolagents/repo")
CODE = "You are an expert assistant who can solve any task using code blobs."
TOOLS = "You are an expert assistant who can solve any task using tool calls."


def part(role: str, text: str) -> dict[str, object]:
    """A memory message as `ChatMessage.dict()` records it."""
    return {"role": role, "content": [{"type": "text", "text": text}], "tool_calls": None,
            "raw": None, "token_usage": None}


def sent(role: str, text: str) -> dict[str, object]:
    return {"role": role, "content": [{"type": "text", "text": text}]}


STEP1 = "Thought: look it up.\n<code>\nprint(web_search('tallest tree'))\n</code>"
CALL1 = "Calling tools:\n[{'id': 'call_1', 'function': {'name': 'python_interpreter'}}]"
STEP2 = "Thought: done.\n<code>\nfinal_answer('Hyperion')\n</code>"
CALL2 = "Calling tools:\n[{'id': 'call_2', 'function': {'name': 'python_interpreter'}}]"
MEMORY = [part("system", CODE), part("user", "New task:\nName the tallest tree."),
          part("assistant", STEP1), part("tool-call", CALL1),
          part("tool-response", "Observation:\nHyperion, 115.9 m"),
          part("tool-response", "Error:\nstep timed out\nNow let's retry"),
          part("assistant", STEP2), part("tool-call", CALL2),
          part("tool-response", "Observation:\nHyperion")]
SENT = [sent("system", CODE), sent("user", "New task:\nName the tallest tree."),
        sent("assistant", STEP1 + "\n" + CALL1),
        sent("user", "Observation:\nHyperion, 115.9 m\nError:\nstep timed out\nNow let's retry"),
        sent("assistant", STEP2 + "\n" + CALL2)]


def line(memory: list[dict[str, object]], source: str = "GAIA") -> str:
    return json.dumps({"model_id": "gpt-4o", "source": source, "intermediate_steps": memory})


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "smolagents"
    out = repo / "examples" / "smolagents_benchmark" / "output"
    out.mkdir(parents=True)
    (repo / "README.md").write_text("smolagents\n")
    one_call = MEMORY[:4]
    other = [part("system", TOOLS), *MEMORY[1:]]
    (out / "gpt-4o__code__gaia__2025-07-24.jsonl").write_text(
        "\n".join([line(MEMORY), line(one_call), line([]), ""]))
    (out / "gpt-4o__tool-calling__math__2025-07-24.jsonl").write_text(line(other, "MATH"))
    # the plain model's runs (no agent) and the scores are not runs
    (out / "gpt-4o__vanilla__gaia__2025-07-25.jsonl").write_text(line(MEMORY))
    (out / "benchmark_scores_gpt-4o__code__2025-07-24.json").write_text("{}")
    return committed(repo, "runs")


def test_memory_is_sent_merged_and_cut_after_the_last_reply() -> None:
    assert smolagents.as_sent(MEMORY) == SENT
    # a non-text part is appended to the merged message, not joined
    image = {"role": "tool-response", "content": [{"type": "image", "image": "b64"}]}
    merged = smolagents.as_sent([*MEMORY[:5], image, MEMORY[6]])
    assert merged[3]["content"] == [{"type": "text", "text": "Observation:\nHyperion, 115.9 m"},
                                    {"type": "image", "image": "b64"}]
    # no reply at all: nothing was sent that was answered
    assert smolagents.as_sent(MEMORY[:2]) == []


def test_runs_and_queues(source: tuple[Path, str], tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = smolagents.convert(repo, out, rev=rev)

    runs, queues = loaded(written, out, "smolagents")
    assert written == {"smolagents": 2, "smolagents-queue": 2}
    code, tools = runs
    assert (code.id, tools.id) == ("smolagents/code-gaia/000", "smolagents/tool-calling-math/000")
    # the memory only grows: each prefix before an assistant turn is a call as sent
    assert session_calls(code) == [(SENT[:2], SENT[2]), (SENT[:4], SENT[4])]
    line0 = rows(out, "smolagents")[0]
    assert (line0["model"], line0["task_id"], line0["tools"]) == ("gpt-4o", "GAIA/000", [])
    readme = (out / "smolagents" / "README.md").read_text()
    assert f"`{rev}`" in readme and "Apache-2.0" in readme
    # the stats count the text of list contents
    chars = sorted(sum(len(m["content"][0]["text"]) for m in r.messages) for r in runs)
    assert (f"2 sessions; calls per session min / median / max 2 / 2 / 2; characters of full "
            f"history (contents + tool-call JSON) min / median / max {chars[0]:,} / "
            f"{chars[1]:,} / {chars[1]:,}") in readme
    assert ("Read: runs read 4, runs of fewer than 2 calls 1, runs with no memory recorded (the "
            "run failed) 1. Runs used: 2 (`code-gaia` 1, `tool-calling-math` 1)") in readme
    # one queue per system prompt: here each holds its agent's one run
    assert [q.id for q in queues] == ["smolagents-queue/code/q00",
                                      "smolagents-queue/tool-calling/q00"]
    assert [q.messages for q in queues] == [code.messages, tools.messages]


def test_a_queue_joins_its_agents_runs_after_one_system_prompt() -> None:
    first = {"id": "smolagents/code-gaia/000", "messages": SENT}
    second = {"id": "smolagents/code-math/003", "task_id": "MATH/003",
              "messages": [SENT[0], sent("user", "New task:\n2+2?"), sent("assistant", "4")]}

    [queue] = smolagents.queue_sessions([{**first, "task_id": "GAIA/000"}, second], 50)

    assert queue["messages"] == [*SENT, *second["messages"][1:]]
    assert queue["task_id"] == ["GAIA/000", "MATH/003"]
    with pytest.raises(ValueError, match="another system prompt"):
        smolagents.queue_sessions(
            [{**first, "task_id": "GAIA/000"},
             {**second, "messages": [sent("system", TOOLS), *second["messages"][1:]]}], 50)


@pytest.mark.skipif(not MIRROR.is_dir(),
                    reason=f"no mirror of huggingface/smolagents at {MIRROR}")
def test_the_recorded_runs(tmp_path: Path) -> None:
    assert smolagents.convert(MIRROR, tmp_path) == {"smolagents": 244, "smolagents-queue": 15}
    sessions = corpora.load("smolagents", tmp_path)
    assert sum(len(session_calls(s)) for s in sessions) == 765
    assert all(isinstance(m["content"], list) for s in sessions for m in s.messages)
