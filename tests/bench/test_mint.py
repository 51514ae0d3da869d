"""`bench/mint.py` on tiny `results.jsonl` files committed to a git repository written here
(not the real data): each run as recorded (its `state.history`, nothing after the last
reply), only the two OpenAI models without feedback, queues per model cut by calls with
nothing added, `bench/replay.py`'s loader reading both folders; and, where the mirror of
`xingyaoww/mint-bench` is on this machine, the real runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import corpora, mint
from bench.yardstick import call_ends
from tests.bench.converted import committed, loaded, rows

MIRROR = Path("/work/.mirror/xingyaoww+mint-bench/repo")
RULES = "You are a helpful assistant assigned with the task of problem-solving.\nTask: "


def reply(code: str) -> dict[str, str]:
    return {"role": "assistant", "content": f"Assistant:\n<thought> t </thought>\n"
                                            f"<execute>\n{code}\n</execute>\n"}


def observation(text: str) -> dict[str, str]:
    return {"role": "user", "content": f"Observation:\n{text}\nYou have 3 steps left.\n"}


def row(task_id: object, history: list[dict[str, str]], success: bool) -> str:
    return json.dumps({"task": {"task_name": "t", "task_id": task_id, "prompt": "p"},
                       "state": {"history": history, "success": success,
                                 "terminate_reason": None if success else "max_steps"}})


FOUR = [{"role": "user", "content": RULES + "put a mug in the sink"},
        reply('print(goto("cabinet 1"))'), observation("a mug 1"),
        reply('print(take_from("mug 1", "cabinet 1"))'), observation("You pick up mug 1."),
        reply('print(put("mug 1", "sinkbasin 1"))'), observation("You put mug 1."),
        {"role": "assistant", "content": "Assistant:\n<solution> done </solution>\n"},
        {"role": "user", "content": "Your answer is wrong."}]
ONE = [{"role": "user", "content": RULES + "what is 2 + 2?"},
       {"role": "assistant", "content": "Assistant:\n<solution> 4 </solution>\n"}]


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "mint-bench"
    files = {
        f"gpt-4-0613/{mint.SETTING}/decision_making/alfworld":
            [row("pick/trial_1", FOUR, False), row("pick/trial_2", FOUR[:4], True)],
        f"gpt-4-0613/{mint.SETTING}/reasoning/gsm8k": [row(0, ONE, True)],
        f"gpt-3.5-turbo-0613/{mint.SETTING}/reasoning/gsm8k": [row(7, ONE, True)],
        # not read: language feedback, another model
        "gpt-4-0613/F=gpt-4-0613/PHF=no_GT-textual/max5_p2+tool+cd/reasoning/gsm8k":
            [row(0, ONE, True)],
        f"claude-2/{mint.SETTING}/reasoning/gsm8k": [row(0, ONE, True)],
    }
    for folder, lines in files.items():
        path = repo / mint.OUTPUTS / folder / "results.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("\n".join(lines) + "\n")
    return committed(repo, "runs")


def test_converts_runs_and_queues_that_the_replay_reads(source: tuple[Path, str],
                                                        tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = mint.convert(repo, out, rev=rev, queue_calls=3)

    assert written == {"mint-gpt": 4, "mint-gpt-queue": 3}
    runs, queues = loaded(written, out, "mint-gpt")
    assert [s.id for s in runs] == [
        "mint-gpt/gpt-4-0613/alfworld/pick/trial_1", "mint-gpt/gpt-4-0613/alfworld/pick/trial_2",
        "mint-gpt/gpt-4-0613/gsm8k/0", "mint-gpt/gpt-3.5-turbo-0613/gsm8k/7"]
    assert [len(call_ends(s.messages)) for s in runs] == [4, 2, 1, 1]
    # as recorded, what followed the last reply left out
    assert runs[0].messages == FOUR[:-1]
    assert runs[1].messages == FOUR[:4]
    for session in runs + queues:
        assert session.tools is None
        assert session.messages[0]["role"] == "user"
        assert session.messages[-1]["role"] == "assistant"
    # per model: 4 + 2 + 1 calls -> 7 / 3 -> 2 queues, cut after the first run; 1 -> 1
    assert [s.id for s in queues] == ["mint-gpt-queue/gpt-3.5-turbo-0613/q00",
                                      "mint-gpt-queue/gpt-4-0613/q00",
                                      "mint-gpt-queue/gpt-4-0613/q01"]
    assert queues[0].messages == runs[3].messages
    assert queues[1].messages == runs[0].messages
    assert queues[2].messages == runs[1].messages + runs[2].messages
    lines = rows(out, "mint-gpt")
    assert [(s["model"], s["task_id"]) for s in lines] == [
        ("gpt-4-0613", "alfworld/pick/trial_1"), ("gpt-4-0613", "alfworld/pick/trial_2"),
        ("gpt-4-0613", "gsm8k/0"), ("gpt-3.5-turbo-0613", "gsm8k/7")]
    readme = (out / "mint-gpt" / "README.md").read_text()
    assert "Apache License 2.0" in readme and f"`{rev}`" in readme
    assert "`alfworld` 2, `gsm8k` 2" in readme and "`solved` 3, `max_steps` 1" in readme
    assert "Replies with an `<execute>` block: 5 of 8; with a `<solution>`:\n  3." in readme
    assert "- `Observation`: 4 turns" in readme
    assert "Queues" in (out / "mint-gpt-queue" / "README.md").read_text()


def test_a_run_without_a_reply_is_refused() -> None:
    with pytest.raises(ValueError, match="needs the task in a user turn and a model reply"):
        mint.messages_of([{"role": "user", "content": "task"}])
    with pytest.raises(ValueError, match="unexpected message 'system'"):
        mint.messages_of([{"role": "system", "content": "x"}])


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no mirror of xingyaoww/mint-bench at {MIRROR}")
def test_the_recorded_runs(tmp_path: Path) -> None:
    written = mint.convert(MIRROR, tmp_path)
    assert written == {"mint-gpt": 1172, "mint-gpt-queue": 42}
    runs = corpora.load("mint-gpt", tmp_path)
    assert sum(len(call_ends(s.messages)) for s in runs) == 4250
    assert all(s.messages[-1]["role"] == "assistant" for s in runs)
