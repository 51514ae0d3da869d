"""`bench/reflexion.py` on a tiny Reflexion HotpotQA log committed to a git repository
written here (not the real data): the printed agents parsed into runs (a repeat of a solved
question kept once, an agent printed without steps not a run), each run as chat (the
instruction and examples as the system prompt, the question, per step a thought with its
action as a tool call and the observation as a `tool` message; an invalid action as text
with an `Observation N:` user turn; the last action as text, its verdict left out), queues
cut by calls with nothing added, `bench/replay.py`'s loader reading both folders; and, where
the mirror of `noahshinn/reflexion` is on this machine, the real log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import corpora, reflexion
from bench.yardstick import call_ends
from tests.bench.converted import committed, loaded, rows

MIRROR = Path("/work/.mirror/noahshinn+reflexion/repo")
PROMPTS = '''from x import y

REACT_INSTRUCTION = """other {examples}"""

REACT_REFLECT_INSTRUCTION = """Answer with Thought, Action, Observation steps.
Here are some examples:
{examples}
(END OF EXAMPLES)

{reflections}

Question: {question}{scratchpad}"""
'''
FEWSHOTS = '''WEBTHINK_SIMPLE6 = """Question: q?
Thought 1: t
Action 1: Finish[a]"""
'''
SYSTEM = ("Answer with Thought, Action, Observation steps.\nHere are some examples:\n"
          "Question: q?\nThought 1: t\nAction 1: Finish[a]\n(END OF EXAMPLES)")

SOLVED = """Question: Who wrote Abc?
Thought 1: I need to search Abc.
Action 1: Search[Abc]
Observation 1: Abc is a 1999 book by Jane Roe.
It sold well.
Thought 2: Jane Roe wrote it.
Action 2: Finish[Jane Roe]
Observation 2: Answer is CORRECT
Correct answer: Jane Roe
"""
WRONG = """Question: When did Def open?
Thought 1: I need to search Def.
Action 1: Search[Def]
Observation 1: Could not find [Def]. Similar: ['Def (bar)']
Thought 2: Try again.
Action 2: look it up
Observation 2: Invalid Action. Valid Actions are Lookup[<topic>] Search[<topic>].
Thought 3: Lookup opened.
Action 3: Lookup[opened]
Observation 3: (Result 1 / 1) Def opened in 2001.
Thought 4: 2001.
Action 4: Finish[2001]
Observation 4: Answer is INCORRECT
Correct answer: 2002
"""
HALTED = """Question: Where is Ghi?
Thought 1: Search Ghi.
Action 1: Search[Ghi]
Observation 1: Ghi is a town.
Thought 2: Search Ghi town.
Action 2: Search[Ghi town]
Observation 2: Ghi town is in Jkl.
Correct answer: Jkl
"""
RETRY = """Question: When did Def open? You have attempted to answer following question before \
and failed.
Reflections:
- I should have searched Def (bar).
Thought 1: Search Def (bar).
Action 1: Search[Def (bar)]
Observation 1: Def is a bar that opened in 2002.
Thought 2: 2002.
Action 2: Finish[2002]
Observation 2: Answer is CORRECT
Correct answer: 2002
"""


def trial(n: int, correct: str, incorrect: str, halted: str) -> str:
    """One trial as `log_react_trial` printed it."""
    return (f"\n########################################\nBEGIN TRIAL {n}\nTrial summary: "
            "Correct: 1, Incorrect: 1, Halted: 1\n#######################################\n"
            f"------------- BEGIN CORRECT AGENTS -------------\n\n{correct}\n"
            f"------------- BEGIN INCORRECT AGENTS -----------\n\n{incorrect}\n"
            f"------------- BEGIN HALTED AGENTS --------------\n\n{halted}\n")


LOG = (trial(1, SOLVED, WRONG, HALTED)
       # the solved question printed again; the retry; the halted one printed without steps
       + trial(2, SOLVED + "\n" + RETRY, "", "Question: Where is Ghi?\nCorrect answer: Jkl\n"))


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "reflexion"
    (repo / "hotpotqa_runs").mkdir(parents=True)
    (repo / "hotpotqa_runs" / "prompts.py").write_text(PROMPTS)
    (repo / "hotpotqa_runs" / "fewshots.py").write_text(FEWSHOTS)
    log = repo / reflexion.LOG
    log.parent.mkdir(parents=True)
    log.write_text(LOG)
    return committed(repo, "runs")


def call(cid: str, name: str, arg: str, value: str) -> dict[str, object]:
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps({arg: value})}}


def test_converts_runs_and_queues_that_the_replay_reads(source: tuple[Path, str],
                                                        tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = reflexion.convert(repo, out, rev=rev, queue_calls=6, prompt_rev=rev)

    # runs: 2 + 4 + 2 + 2 calls -> 10 / 6 -> 2 queues, cut after the second run
    assert written == {"reflexion-hotpotqa": 4, "reflexion-hotpotqa-queue": 2}
    runs, queues = loaded(written, out, "reflexion-hotpotqa")
    assert [s.id for s in runs] == ["reflexion-hotpotqa/q000-t1", "reflexion-hotpotqa/q001-t1",
                                    "reflexion-hotpotqa/q002-t1", "reflexion-hotpotqa/q001-t2"]
    assert [len(call_ends(s.messages)) for s in runs] == [2, 4, 2, 2]
    assert runs[0].messages == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Question: Who wrote Abc?"},
        {"role": "assistant", "content": "I need to search Abc.",
         "tool_calls": [call("q000-t1-step1", "Search", "entity", "Abc")]},
        {"role": "tool", "tool_call_id": "q000-t1-step1",
         "content": "Abc is a 1999 book by Jane Roe.\nIt sold well."},
        # the last action as text; its verdict and `Correct answer:` left out
        {"role": "assistant", "content": "Jane Roe wrote it.\nAction 2: Finish[Jane Roe]"}]
    # an invalid action stays text, its observation a user turn; Lookup a tool call
    assert runs[1].messages[4:9] == [
        {"role": "assistant", "content": "Try again.\nAction 2: look it up"},
        {"role": "user", "content": "Observation 2: Invalid Action. Valid Actions are "
                                    "Lookup[<topic>] Search[<topic>]."},
        {"role": "assistant", "content": "Lookup opened.",
         "tool_calls": [call("q001-t1-step3", "Lookup", "keyword", "opened")]},
        {"role": "tool", "tool_call_id": "q001-t1-step3",
         "content": "(Result 1 / 1) Def opened in 2001."},
        {"role": "assistant", "content": "2001.\nAction 4: Finish[2001]"}]
    # a halted run: its last page, which no call saw, left out
    assert runs[2].messages[-1] == {"role": "assistant",
                                    "content": "Search Ghi town.\nAction 2: Search[Ghi town]"}
    # the retry: the question with its reflections as printed
    assert runs[3].messages[1]["content"] == RETRY.split("\nThought 1:")[0]
    assert [t["function"]["name"] for t in rows(out, "reflexion-hotpotqa")[1]["tools"]] == [
        "Search", "Lookup"]
    lines = rows(out, "reflexion-hotpotqa")
    assert [(s["model"], s["task_id"]) for s in lines] == [
        ("text-davinci-003", "q000"), ("text-davinci-003", "q001"),
        ("text-davinci-003", "q002"), ("text-davinci-003", "q001")]
    # queues: the system prompt once, then each run's messages after it, nothing added
    assert [s.id for s in queues] == ["reflexion-hotpotqa-queue/q000-t1--q001-t1-q0",
                                      "reflexion-hotpotqa-queue/q002-t1--q001-t2-q1"]
    assert [m for m in queues[0].messages if m["role"] == "system"] == [
        {"role": "system", "content": SYSTEM}]
    assert queues[0].messages == [*runs[0].messages, *runs[1].messages[1:]]
    assert queues[1].messages == [*runs[2].messages, *runs[3].messages[1:]]
    readme = (out / "reflexion-hotpotqa" / "README.md").read_text()
    assert "MIT License" in readme and f"`{rev}`" in readme
    assert "Runs: 4" in readme and "kept once: 2" in readme
    assert "By trial: 1: 3, 2: 1." in readme
    assert "`Search` 4, `Lookup` 1" in readme
    assert "Queues" in (out / "reflexion-hotpotqa-queue" / "README.md").read_text()


def test_a_log_that_is_not_a_reflexion_log_is_refused() -> None:
    with pytest.raises(ValueError, match="no `BEGIN TRIAL`"):
        reflexion.parse("Question: x\nThought 1: y\n")
    with pytest.raises(ValueError, match="out of order"):
        reflexion.steps_of("Question: x\nThought 1: a\nThought 1: b\n")
    with pytest.raises(ValueError, match="not found"):
        reflexion.system_prompt("X = 1", FEWSHOTS)


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no mirror of noahshinn/reflexion at {MIRROR}")
def test_the_recorded_log(tmp_path: Path) -> None:
    written = reflexion.convert(MIRROR, tmp_path)
    assert written == {"reflexion-hotpotqa": 410, "reflexion-hotpotqa-queue": 7}
    runs = corpora.load("reflexion-hotpotqa", tmp_path)
    assert sum(len(call_ends(s.messages)) for s in runs) == 1708
    assert all(s.messages[-1]["role"] == "assistant" for s in runs)
