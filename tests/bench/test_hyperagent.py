"""`bench/hyperagent.py` on tiny call files committed to a git repository written here (not
the real data): one call per file, a call recorded twice kept once, calls chained into runs by
the growing user message (the scratchpad's header on the second call), each run written as a
per-call session that the replay loads with its two messages as sent; and the real mirror
where present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import corpora, hyperagent
from bench.corpora import session_calls
from tests.bench.converted import committed, loaded, rows

MIRROR = Path("/work/.mirror/FSoft-AI4Code+HyperAgent/repo")
NAV = ("You are an expert in programming, you're so good at code navigation inside large "
       "repository. Use a json blob to specify a tool.")
RUN = "You are an expert in running bash commandlines, based on the requests."
GOAL = "Objective: Find where `parse_args` is defined.\n"
HEADER = ("\nThis was your previous work (but I haven't seen any of it! I only see what you "
          "return as final answer):\n")
R1 = ('Thought: search it.\nAction:\n```\n{"action": "code_search", '
      '"action_input": "parse_args"}\n```')
O1 = "\nObservation: {'parse_args': ['cli/main.py:12']}\nThought:"
R2 = 'Thought:open it.\nAction:\n```\n{"action": "open_file", "action_input": "cli/main.py"}\n```'
O2 = "\nObservation: 12 def parse_args(argv):\nThought:"
R3 = 'Action:\n```\n{"action": "Final Answer", "action_input": "cli/main.py line 12"}\n```'
FIRST = GOAL + "\n"
SECOND = GOAL.rstrip() + HEADER + R1 + O1
THIRD = SECOND + R2 + O2


def sent(system: str, user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def said(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def record(system: str, user: str, reply: str) -> str:
    return json.dumps({"system_prompt": system, "human_message": user, "system_response": reply})


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "hyperagent"
    calls = repo / "data" / "agent_trajectories" / "nav"
    calls.mkdir(parents=True)
    (repo / "LICENSE").write_text("Apache License\n")
    (repo / "README.md").write_text("HyperAgent\n")
    # file order (N) is not the episode's order; 10 repeats 2; 3 is a lone executor call;
    # 4 is not a call
    for n, text in {2: record(NAV, SECOND, R2), 1: record(NAV, FIRST, R1),
                    11: record(NAV, THIRD, R3), 10: record(NAV, SECOND, R2),
                    3: record(RUN, "Objective: run the tests\n", R3), 4: "{}"}.items():
        (calls / f"{n}_instance.json").write_text(text)
    return committed(repo, "calls")


def test_runs_are_chained_and_written_per_call(source: tuple[Path, str],
                                                tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = hyperagent.convert(repo, out, rev=rev)

    runs, queues = loaded(written, out, "hyperagent")
    assert written == {"hyperagent": 1, "hyperagent-queue": 1}
    [run] = runs
    assert run.id == "hyperagent/nav/r000"
    # each call's two messages as sent, the whole episode in the one user message
    assert session_calls(run) == [(sent(NAV, FIRST), said(R1)), (sent(NAV, SECOND), said(R2)),
                                  (sent(NAV, THIRD), said(R3))]
    assert run.messages == [*sent(NAV, THIRD), said(R3)]
    line = rows(out, "hyperagent")[0]
    assert (line["model"], line["task_id"], line["role"], line["tools"]) == (
        None, "nav/", "navigator", [])
    readme = (out / "hyperagent" / "README.md").read_text()
    assert f"`{rev}`" in readme and "Apache-2.0" in readme
    assert ("Read: calls read 5, files that are not a call 1, calls recorded twice (kept "
            "once) 1. Calls kept: 4; runs: 2 (1 of 2+ calls used,\n  1 single calls not "
            "used)") in readme
    # the queue of one run is the run
    [queue] = queues
    assert session_calls(queue) == session_calls(run)
    # without per-call mode the replay would read the last list's prefixes: one call
    [prefixes] = corpora.load("hyperagent", out, per_call=False)
    assert session_calls(prefixes) == [(sent(NAV, THIRD), said(R3))]


def test_a_queue_puts_the_earlier_runs_turns_before_each_call() -> None:
    first = {"messages": [*sent(NAV, SECOND), said(R2)],
             "calls": [{"messages": sent(NAV, FIRST), "reply": said(R1)},
                       {"messages": sent(NAV, SECOND), "reply": said(R2)}]}
    second = {"messages": [*sent(NAV, "Objective: other\n"), said(R3)],
              "calls": [{"messages": sent(NAV, "Objective: other\n"), "reply": said(R3)}]}

    [queue] = hyperagent.queue_sessions([first, second], queue_calls=250)

    assert queue["messages"] == [*first["messages"], *second["messages"][1:]]
    assert queue["calls"][2]["messages"] == [*first["messages"], second["messages"][1]]
    assert queue["id"] == "hyperagent-queue/navigator00/q00"


def test_a_step_follows_only_its_own_episode() -> None:
    one = {"messages": sent(NAV, FIRST), "reply": said(R1)}
    assert hyperagent.follows(one, {"messages": sent(NAV, SECOND), "reply": said(R2)})
    # another reply, another agent, or the same message again: not the next step
    assert not hyperagent.follows({**one, "reply": said(R2)},
                                  {"messages": sent(NAV, SECOND), "reply": said(R2)})
    assert not hyperagent.follows(one, {"messages": sent(RUN, SECOND), "reply": said(R2)})
    assert not hyperagent.follows(one, one)


@pytest.mark.skipif(not MIRROR.is_dir(),
                    reason=f"no mirror of FSoft-AI4Code/HyperAgent at {MIRROR}")
def test_the_recorded_calls(tmp_path: Path) -> None:
    assert hyperagent.convert(MIRROR, tmp_path) == {"hyperagent": 157, "hyperagent-queue": 19}
    sessions = corpora.load("hyperagent", tmp_path)
    assert sum(len(session_calls(s)) for s in sessions) == 839
    assert all(len(m) == 2 for s in sessions for m, _ in session_calls(s))
