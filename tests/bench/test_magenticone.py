"""`bench/magenticone.py` on made-up team logs committed to a git repository written here
(not the real data): the orchestrator's chat rebuilt before each ledger, instructions as its
own turns and answers as user turns, status lines left out, a replan cutting the chat back
to the request and the new plan, short logs left out, the queue layout; and the real mirror
where present."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bench import corpora, magenticone
from bench.corpora import session_calls
from tests.bench.converted import committed, loaded, rows

FOLDER = magenticone.FOLDER
MIRROR = Path("/work/.mirror/mingyin1+Agents_Failure_Attribution/repo")
TASK = "How tall is the clock tower in Lund?\n"
TEAM = "WebSurfer: browses the web.\nAssistant: writes code."
PLAN = ("We are working to address the following user request:\n\nHow tall ...\n\n\nTo answer "
        f"this request we have assembled the following team:\n\n{TEAM}\n\n\nPlan: search.")
NEW = "We are working to address the following user request:\n\nHow tall ...\n\nPlan: ask."
LEDGERS = [f'{{\n  "next_speaker": {{\n    "answer": "WebSurfer"\n  }}, "n": {n}\n}}'
           for n in range(5)]
ASK = "Please search for the clock tower in Lund."
PAGE = "I typed 'clock tower Lund' into the search bar.\n\nThe tower is 41 m tall."
AGAIN = "Please open the first result."
PAGE2 = "I clicked the first result. A login wall."
ASK2 = "Please ask the Assistant to estimate from the photo."
ANSWER = "About 41 metres."


def event(role: str, text: str) -> dict[str, str]:
    return {"role": role, "content": text}


def ledger(n: int) -> dict[str, str]:
    return event("Orchestrator (thought)", f"Updated Ledger:\n{LEDGERS[n]}")


HISTORY = [
    event("human", TASK),
    event("Orchestrator (thought)", f"Initial plan:\n{PLAN}"),
    ledger(0),
    event("Orchestrator (-> WebSurfer)", ASK),
    event("Orchestrator (thought)", "Next speaker WebSurfer"),
    event("WebSurfer", PAGE),
    ledger(1),
    event("Orchestrator (-> WebSurfer)", AGAIN),
    event("WebSurfer", PAGE2),
    ledger(2),
    event("Orchestrator (thought)", "Stalled.... Replanning..."),
    event("Orchestrator (thought)", f"New plan:\n{NEW}"),
    ledger(3),
    event("Orchestrator (-> Assistant)", ASK2),
    event("Assistant", ANSWER),
    ledger(4),
    event("Orchestrator (thought)", "Request satisfied."),
]


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def said(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def log(history: list[dict[str, str]]) -> str:
    return json.dumps({"history": history, "question": TASK, "question_ID": "q1",
                       "mistake_agent": "WebSurfer"})


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "who"
    folder = repo / "Who&When" / "Hand-Crafted"
    folder.mkdir(parents=True)
    (repo / "LICENSE").write_text("MIT License\n")
    (repo / "README.md").write_text("Who&When\n")
    (folder / "10.json").write_text(log(HISTORY))
    (folder / "2.json").write_text(log(HISTORY[:7]))  # two ledgers: too short
    (folder / "3.json").write_text(log(HISTORY[1:]))  # no request first
    other = repo / "Who&When" / "Algorithm-Generated"
    other.mkdir()
    (other / "1.json").write_text(log(HISTORY))  # another team: not read
    return committed(repo, "logs")


def test_ledger_calls_carry_the_chat_as_it_stood(source: tuple[Path, str],
                                                 tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = magenticone.convert(repo, out, rev=rev)

    runs, queues = loaded(written, out, "magentic-one")
    assert written == {"magentic-one": 1, "magentic-one-queue": 1}
    [run] = runs
    assert run.id == "magentic-one/010"
    calls = session_calls(run)
    system = calls[0][0][0]
    assert system["role"] == "system" and "WebSurfer" in system["content"]
    question = calls[0][0][-1]
    # the ledger question carries the request and the team as the plan lists it
    assert question["role"] == "user"
    assert TASK.strip() in question["content"] and TEAM in question["content"]
    chats = [m[1:-1] for m, _ in calls]
    # the plan and instructions are the orchestrator's turns, answers are user turns; the
    # status lines are not turns; a replan keeps only the request and the new plan
    assert chats == [
        [user(TASK), said(PLAN)],
        [user(TASK), said(PLAN), said(ASK), user(PAGE)],
        [user(TASK), said(PLAN), said(ASK), user(PAGE), said(AGAIN), user(PAGE2)],
        [user(TASK), said(NEW)],
        [user(TASK), said(NEW), said(ASK2), user(ANSWER)],
    ]
    assert [r for _, r in calls] == [said(t) for t in LEDGERS]
    assert all(m[0] == system and m[-1] == question for m, _ in calls)
    assert run.messages == [*calls[-1][0], said(LEDGERS[4])]
    line = rows(out, "magentic-one")[0]
    assert (line["model"], line["task_id"], line["tools"], line["path"]) == (
        None, "q1", [], "Who&When/Hand-Crafted/10.json")
    readme = (out / "magentic-one" / "README.md").read_text()
    assert f"`{rev}`" in readme and "MIT" in readme
    assert ("Read: 3 logs; ledger calls read 7; status lines (not chat turns) left out 4; "
            "runs of fewer than 3 ledger calls 1; logs not opening with the request 1. "
            "Runs used: 1.") in readme
    # the queue of one run is the run
    [queue] = queues
    assert queue.id == "magentic-one-queue/team00/q00"
    assert session_calls(queue) == calls


def test_a_queue_puts_the_earlier_runs_chat_before_each_call() -> None:
    counts: Counter[str] = Counter()
    first = magenticone.ledger_calls(HISTORY, counts)
    second = magenticone.ledger_calls([event("human", "Another request."), *HISTORY[1:7]],
                                      counts)
    runs = [magenticone.run_session({"path": f"{FOLDER}{n}.json", "task_id": n, "calls": c},
                                    "0" * 40)
            for n, c in ((1, first), (2, second))]

    [queue] = magenticone.queue_sessions(runs, queue_calls=100)

    assert queue["messages"] == [*runs[0]["messages"], *runs[1]["messages"][1:]]
    assert queue["calls"][5]["messages"] == [*runs[0]["messages"],
                                             *second[0]["messages"][1:]]
    assert len(queue["calls"]) == 7



@pytest.mark.skipif(not MIRROR.is_dir(),
                    reason=f"no mirror of {magenticone.SOURCE} at {MIRROR}")
def test_the_recorded_logs(tmp_path: Path) -> None:
    assert magenticone.convert(MIRROR, tmp_path) == {"magentic-one": 53,
                                                     "magentic-one-queue": 15}
    sessions = corpora.load("magentic-one", tmp_path)
    assert sum(len(session_calls(s)) for s in sessions) == 751
