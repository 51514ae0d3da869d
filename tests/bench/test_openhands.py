"""`bench/openhands.py` on tiny mock LLM logs committed to a git repository written here (not
the real data), in two commits: every version of a test folder is read, a run is kept when
its prompts are one growing chat (the environment reminder on the newest turn, removed on the
next call; a log file's closing line end), roles restored from the layout, the last reply
from `response_N.log`, a copy in another runtime folder kept once, fresh-prompt agents and
short runs left out, queues per agent and system prompt; and, where the mirror of
`All-Hands-AI/OpenHands` is on this machine, the real logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import corpora, openhands
from bench.yardstick import call_ends
from tests.bench.converted import committed, git, loaded, rows

MIRROR = Path("/work/.mirror/All-Hands-AI+OpenHands/repo")
SEP = "\n\n----------\n\n"
SYSTEM = "A chat between a curious user and an artificial intelligence assistant."
EXAMPLE = "--- START OF EXAMPLE ---\nUSER: hi\n--- END OF EXAMPLE ---"
TASK = "NOW, LET'S START!\nFix typos in bad.txt."
STEPS = [("Let me look.\n<execute_bash>\ncat bad.txt\n</execute_bash>",
          "OBSERVATION:\nThis is a stupid typoo"),
         ("Fixing it.\n<execute_ipython>\nfix('bad.txt')\n</execute_ipython>",
          "OBSERVATION:\n[File updated]")]
FINAL = "The typos are fixed.\n<finish></finish>"


def reminder(left: int) -> str:
    return (f"\n\nENVIRONMENT REMINDER: You have {left} turns left to complete the task. "
            "When finished reply with <finish></finish>.")


def prompts(head: list[str], steps: list[tuple[str, str]]) -> list[str]:
    """The prompt logs of a CodeAct run: each the messages so far, the newest turn with a
    reminder (absent again in the next prompt), the file ending in a line end."""
    out, messages = [], list(head)
    for k in range(len(steps) + 1):
        last = messages[-1] + reminder(20 - k)
        out.append("".join(SEP + m for m in [*messages[:-1], last]) + "\n")
        if k < len(steps):
            messages += steps[k]
    return out


def write_run(folder: Path, logs: list[str], replies: list[str], *, crlf: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for k, (prompt, reply) in enumerate(zip(logs, replies, strict=True), 1):
        if crlf:
            prompt = prompt.replace("\n", "\r\n")
        (folder / f"prompt_{k:03d}.log").write_bytes(prompt.encode())
        (folder / f"response_{k:03d}.log").write_text(reply)


REPLIES = [STEPS[0][0], STEPS[1][0], FINAL]
CHAT = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": EXAMPLE},
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": STEPS[0][0]}, {"role": "user", "content": STEPS[0][1]},
        {"role": "assistant", "content": STEPS[1][0]},
        {"role": "user", "content": STEPS[1][1] + reminder(18) + "\n"}]


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "openhands"
    mock = repo / "tests" / "integration" / "mock"
    write_run(mock / "CodeActAgent" / "test_edits", prompts([SYSTEM, EXAMPLE, TASK], STEPS),
              REPLIES)
    # a run of 2 calls; a planner writing one fresh prompt per step
    write_run(mock / "CodeActAgent" / "test_ipython", prompts([SYSTEM, TASK], STEPS[:1]),
              REPLIES[1:])
    write_run(mock / "PlannerAgent" / "test_edits",
              [SEP + f"You are a planner. Step {k}.\n" for k in (1, 2, 3)],
              ['{"action": "run"}'] * 3)
    (repo / "README.md").write_text("OpenHands\n")
    committed(repo, "first")
    # re-recorded: another last reply, the logs with CRLF line ends; the first version
    # copied to another runtime folder (the same chat: kept once)
    write_run(mock / "CodeActAgent" / "test_edits", prompts([SYSTEM, EXAMPLE, TASK], STEPS),
              [*REPLIES[:2], "Done.\n<finish></finish>"], crlf=True)
    write_run(mock / "eventstream_runtime" / "CodeActAgent" / "test_edits",
              prompts([SYSTEM, EXAMPLE, TASK], STEPS), REPLIES)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "second")
    return repo / ".git", git(repo, "rev-parse", "HEAD")


def test_converts_runs_and_queues_that_the_replay_reads(source: tuple[Path, str],
                                                        tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = openhands.convert(repo, out, rev=rev, queue_calls=10)

    assert written == {"openhands": 2, "openhands-queue": 1}
    runs, queues = loaded(written, out, "openhands")
    # both versions of test_edits, oldest first; the copy in eventstream_runtime dropped
    assert [s.id.rsplit("/", 1)[0] for s in runs] == ["openhands/CodeActAgent/test_edits"] * 2
    assert runs[0].messages == [*CHAT, {"role": "assistant", "content": FINAL}]
    # the CRLF version: the same chat, its own last reply
    assert runs[1].messages == [*CHAT, {"role": "assistant",
                                        "content": "Done.\n<finish></finish>"}]
    assert [len(call_ends(s.messages)) for s in runs] == [3, 3]
    # one agent, one system prompt: one queue, the system prompt once, nothing added
    assert queues[0].messages == [*runs[0].messages, *runs[1].messages[1:]]
    assert len(call_ends(queues[0].messages)) == 6
    lines = rows(out, "openhands")
    assert {s["model"] for s in lines} == {None} and {len(s["tools"]) for s in lines} == {0}
    assert lines[0]["task_id"] == "test_edits"
    readme = (out / "openhands" / "README.md").read_text()
    assert "MIT" in readme and f"`{rev}`" in readme
    assert "CodeActAgent: fewer than 3 calls 1" in readme
    assert "PlannerAgent: runs whose prompts are not one growing chat 1" in readme
    assert "eventstream_runtime/CodeActAgent: chat seen already 1" in readme
    assert "`<execute_bash>` 2, `<execute_ipython>`\n  2" in readme
    assert "Queues" in (out / "openhands-queue" / "README.md").read_text()


def test_reminders_kept_on_the_turns_that_were_sent_with_them(source: tuple[Path, str],
                                                               tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = openhands.convert(repo, out, rev=rev, queue_calls=10, reminders=True)

    assert written == {"openhands-reminders": 2, "openhands-reminders-queue": 1}
    runs = corpora.load("openhands-reminders", out)
    # the task and the first observation keep the reminder each carried while it was the
    # newest turn (not the log file's line end); the last turn as recorded; the same ids
    kept = [dict(m) for m in CHAT]
    kept[2]["content"] += reminder(20)
    kept[4]["content"] += reminder(19)
    assert runs[0].messages == [*kept, {"role": "assistant", "content": FINAL}]
    assert runs[0].id == "openhands/CodeActAgent/test_edits/" + runs[0].id.rsplit("/", 1)[1]
    readme = (out / "openhands-reminders" / "README.md").read_text()
    assert "older turns carry the reminders the agent had removed" in readme


def test_a_prompt_that_rewrites_more_than_the_reminder_is_not_one_chat() -> None:
    logs = prompts([SYSTEM, EXAMPLE, TASK], STEPS)
    assert openhands.chat_of(logs, FINAL) is not None
    # the observation of step 1 cut short in the last prompt: not the prefix of the chat
    cut = logs[2].replace(STEPS[0][1], "OBSERVATION:\nThis is")
    assert openhands.chat_of([*logs[:2], cut], FINAL) is None
    # a prompt without the leading separator; an empty last reply
    assert openhands.chat_of([logs[0][len(SEP):], *logs[1:]], FINAL) is None
    assert openhands.chat_of(logs, "  \n") is None


@pytest.mark.skipif(not MIRROR.is_dir(),
                    reason=f"no mirror of All-Hands-AI/OpenHands at {MIRROR}")
def test_the_recorded_logs(tmp_path: Path) -> None:
    written = openhands.convert(MIRROR, tmp_path)
    assert written == {"openhands": 161, "openhands-queue": 41}
    runs = corpora.load("openhands", tmp_path)
    assert all(s.messages[0]["role"] == "system" and s.messages[-1]["role"] == "assistant"
               for s in runs)
    assert sum(len(call_ends(s.messages)) for s in runs) == 617


def test_per_call_folders_carry_each_prompt_as_sent(source: tuple[Path, str],
                                                    tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = openhands.convert(repo, out, rev=rev, queue_calls=10, per_call=True)

    assert written == {"openhands-percall": 2, "openhands-percall-queue": 1}
    runs = corpora.load("openhands-percall", out)
    plain = openhands.convert(repo, tmp_path / "plain", rev=rev, queue_calls=10)
    assert plain == {"openhands": 2, "openhands-queue": 1}
    same = corpora.load("openhands", tmp_path / "plain")
    # the same ids and chats as the default folders, each with its calls as sent
    assert [(s.id, s.messages) for s in runs] == [(s.id, s.messages) for s in same]
    calls = corpora.session_calls(runs[0])
    assert len(calls) == 3
    # call 2: the task and the first observation without their reminders, its newest turn
    # with the reminder it was sent with (and the log file's line end); the reply recorded
    sent, reply = calls[1]
    assert sent == [*CHAT[:3], CHAT[3], {"role": "user",
                                         "content": STEPS[0][1] + reminder(19) + "\n"}]
    assert reply == {"role": "assistant", "content": STEPS[1][0]}
    assert calls[0][0][2]["content"] == TASK + reminder(20) + "\n"
    assert [*calls[-1][0], calls[-1][1]] == runs[0].messages
    # a queue: each run's calls after the earlier runs' chats, the system prompt once
    [queue] = corpora.load("openhands-percall-queue", out)
    qcalls = corpora.session_calls(queue)
    assert len(qcalls) == 6
    assert qcalls[3][0] == [*runs[0].messages, *corpora.session_calls(runs[1])[0][0][1:]]
    assert [*qcalls[-1][0], qcalls[-1][1]] == queue.messages
    # the prefix replay of the same folder is the default folder's
    assert [s.calls for s in corpora.load("openhands-percall", out, per_call=False)] == [None] * 2
    assert "**Per call:**" in (out / "openhands-percall" / "README.md").read_text()
