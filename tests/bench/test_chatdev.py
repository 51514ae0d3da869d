"""`bench/chatdev.py` on tiny ChatDev logs committed to a git repository written here (not
the real data): each phase chat's opening as a user turn and its replies as assistant turns
(headers and the addressee's bracketed prompt left out, a bare reply kept whole, what the
harness logged for itself left out), logs whose calls and replies do not match, with no
call, or repeating another's chat not used, the model from a rate-limit warning or
`model_type`, queues cut by calls with nothing added, each phase chat as sent (its
bracketed head the system prompt), `bench/replay.py`'s loader reading the folders; and,
where the mirror of `OpenBMB/ChatDev` is on this machine, the real logs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench import chatdev, corpora
from bench.yardstick import call_ends
from tests.bench.converted import committed, loaded, rows

MIRROR = Path("/work/.mirror/OpenBMB+ChatDev/repo")
BG = ('ChatDev is a software company powered by multiple intelligent agents, with the '
      'mission of "changing the digital world through programming".')
TYPING = '''class RoleType(Enum):
    CHATDEV = "chatdev"


class ModelType(Enum):
    GPT_3_5_TURBO = "gpt-3.5-turbo-16k-0613"
    GPT_4 = "gpt-4"
'''


def entry(text: str, level: str = "INFO") -> str:
    return f"[2023-25-08 09:35:58 {level}] {text}\n\n"


def chatting(phase: str, model: str = "") -> str:
    typed = f"| **model_type** | ModelType.{model} |\n" if model else ""
    return entry(f"System: **[chatting]**\n\n| Parameter | Value |\n| --- | --- |\n"
                 f"| **phase_name** | {phase} |\n{typed}")


def call() -> str:
    return (entry("**[OpenAI_Usage_Info Send]**\nnum_tokens: 10")
            + entry('http://127.0.0.1:8000 "POST /send_message HTTP/1.1" 200 3', "DEBUG")
            + entry("**[OpenAI_Usage_Info Receive]**\nprompt_tokens: 10"))


def prompt(role: str) -> str:
    return f"[{BG}\nYou are {role}.\nHere is a new customer's task: a timer.]"


CODING = f"{prompt('Programmer')}\n\nTask: \"a timer\".\nWrite every file.\nCodes:\n"
REVIEW = f"{prompt('Code Reviewer')}\n\nCodes:\nmain.py\n```python\nimport time\n```"
COMMENT = "<Comment>\nAdd a `stop` method to `Timer` in timer.py."


def log(stamp: str, *, request: str = "a timer", model_type: str = "", warning: str = "",
        extra_call: bool = False) -> str:
    """A run: task improvement (a bare reply), coding (one reply), a review comment chat
    with both agents' replies, and what the harness logs for itself."""
    return "".join([
        entry(f"**[Preprocessing]**\n\n**ChatDev Starts** ({stamp})\n\n**Timestamp**: {stamp}"),
        entry(f"User: **[Start Chat]**\n\n[You are a prompt engineer.]\n\nRewrite: {request}"),
        call(), entry("Prompt Engineer: <INFO> A countdown timer."),
        chatting("Coding", model_type),
        entry(f"Chief Technology Officer: **[Start Chat]**\n\n{CODING}"),
        entry(warning, "WARNING") if warning else "",
        call(), entry("Programmer: **Programmer<->Chief Technology Officer on : Coding, turn 0**"
                      f"\n\n{prompt('Chief Technology Officer')}\n\nmain.py\n```python\n"
                      "import time\n```"),
        entry("**[Seminar Conclusion]**:\n\n main.py"), entry("**[Update Codes]**\n\nmain.py"),
        chatting("CodeReviewComment"),
        entry(f"Programmer: **[Start Chat]**\n\n{REVIEW}"),
        call(), call(), *([call()] if extra_call else []),
        entry("Code Reviewer: **Code Reviewer<->Programmer on : CodeReviewComment, turn 0**"
              f"\n\n{prompt('Programmer')}\n\n{COMMENT}"),
        entry("Programmer: **Code Reviewer<->Programmer on : CodeReviewComment, turn 0**"
              f"\n\n{prompt('Code Reviewer')}\n\n<INFO> Finished."),
        entry("**[Test Reports]**:\n\nThe software run successfully without errors."),
    ])


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "ChatDev"
    (repo / "camel").mkdir(parents=True)
    (repo / "camel" / "typing.py").write_text(TYPING)
    logs = {
        "Timer_THUNLP_2/Timer_THUNLP_2.log": log("20230825000002", request="a clock",
                                                  model_type="GPT_3_5_TURBO"),
        "Clock_THUNLP_1/Clock_THUNLP_1.log": log(
            "20230825000001", warning="Rate limit reached for gpt-4 in organization org-x"),
        "Clock_THUNLP_1/Clock_THUNLP_1 2.log": log(  # the same chats again
            "20230825000001", warning="Rate limit reached for gpt-4 in organization org-x"),
        "Bad_1/Bad_1.log": log("20230825000003", extra_call=True),  # a call without reply
        "Old_1/Old_1.log": entry("**[Preprocessing]**\n\nLog File: x"),  # no call
    }
    for path, text in logs.items():
        (repo / chatdev.WAREHOUSE / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / chatdev.WAREHOUSE / path).write_text(text)
    return committed(repo, "logs")


def test_converts_runs_and_queues_that_the_replay_reads(source: tuple[Path, str],
                                                        tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = chatdev.convert(repo, out, rev=rev, queue_calls=4)

    # two runs of 4 calls each -> 8 / 4 -> 2 queues, one run each; 3 phase chats a run
    assert written == {"chatdev": 2, "chatdev-queue": 2, "chatdev-phase": 6}
    phases = corpora.load("chatdev-phase", out)
    del written["chatdev-phase"]
    shutil.rmtree(out / "chatdev-phase")
    runs, queues = loaded(written, out, "chatdev")
    assert [s.id for s in runs] == ["chatdev/Clock_THUNLP_1", "chatdev/Timer_THUNLP_2"]
    assert [len(call_ends(s.messages)) for s in runs] == [4, 4]
    assert runs[0].messages == [
        {"role": "system", "content": BG},
        {"role": "user", "content": "[You are a prompt engineer.]\n\nRewrite: a timer"},
        {"role": "assistant", "content": "<INFO> A countdown timer."},
        {"role": "user", "content": CODING.strip()},
        {"role": "assistant", "content": "main.py\n```python\nimport time\n```"},
        {"role": "user", "content": REVIEW},
        # both agents' replies, in a row; the harness's own entries left out
        {"role": "assistant", "content": COMMENT},
        {"role": "assistant", "content": "<INFO> Finished."}]
    lines = rows(out, "chatdev")
    assert [(s["model"], s["task_id"], s["tools"]) for s in lines] == [
        ("gpt-4", "Clock_THUNLP_1", []), ("gpt-3.5-turbo-16k-0613", "Timer_THUNLP_2", [])]
    # queues: the system prompt once, then each run's messages after it, nothing added
    assert [s.id for s in queues] == ["chatdev-queue/q0", "chatdev-queue/q1"]
    assert queues[0].messages == runs[0].messages
    assert queues[1].messages == runs[1].messages
    readme = (out / "chatdev" / "README.md").read_text()
    assert "Apache License" in readme and f"`{rev}`" in readme
    assert ("Runs: 2 of 5 logs (not used: calls and replies do not match 1, the same chat "
            "as another log 1, no model call recorded 1)") in readme
    assert "`CodeReviewComment` 4, `(task improvement)` 2, `Coding` 2" in readme
    assert "Queues" in (out / "chatdev-queue" / "README.md").read_text()
    # phase sessions, as sent: the bracketed head as the system prompt
    assert [s.id for s in phases[:3]] == [f"chatdev-phase/Clock_THUNLP_1/{k:03d}"
                                          for k in range(3)]
    assert phases[0].messages == [
        {"role": "system", "content": "You are a prompt engineer."},
        {"role": "user", "content": "Rewrite: a timer"},
        {"role": "assistant", "content": "<INFO> A countdown timer."}]
    assert phases[2].messages == [
        {"role": "system", "content": prompt("Code Reviewer")[1:-1]},
        {"role": "user", "content": REVIEW.split("]\n\n", 1)[1]},
        {"role": "assistant", "content": COMMENT},
        {"role": "assistant", "content": "<INFO> Finished."}]


def test_a_reply_and_an_unbracketed_opening_keep_their_text() -> None:
    assert chatdev.reply_text("[1, 2]\n\nlist") == "[1, 2]\n\nlist"
    headed = "**A<->B on : Manual, turn 1**\n\n[not a system prompt]\n\nbody"
    assert chatdev.reply_text(headed) == "[not a system prompt]\n\nbody"
    # an older log's opening without brackets: the background prompt as the system prompt
    run = {"chats": [{"opening": f"{BG}\nYou are CEO.\n\nDecide.", "replies": ["ok"]}]}
    assert chatdev.phase_messages(run, run["chats"][0]) == [
        {"role": "system", "content": BG},
        {"role": "user", "content": f"{BG}\nYou are CEO.\n\nDecide."},
        {"role": "assistant", "content": "ok"}]
    with pytest.raises(ValueError, match="background prompt"):
        chatdev.background({"chats": [{"opening": "[You are x.]\n\ny"}]})


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no mirror of OpenBMB/ChatDev at {MIRROR}")
def test_the_recorded_logs(tmp_path: Path) -> None:
    written = chatdev.convert(MIRROR, tmp_path)
    assert written == {"chatdev": 54, "chatdev-queue": 4, "chatdev-phase": 965}
    runs = corpora.load("chatdev", tmp_path)
    assert sum(len(call_ends(s.messages)) for s in runs) == 1344
    assert all(s.messages[-1]["role"] == "assistant" for s in runs)
