"""`bench/opendevin.py` on tiny mock LLM logs committed to a git repository written here (not
the real data): the fresh-prompt agents' runs read per call with the agents' roles (one
message a user message; more, a system prompt then user messages), a later log without
separators read as one message only for an agent that sends one, the chat agents and short
runs left out, a copy in another runtime folder kept once, queues per agent and system
prompt with the earlier runs' turns before each call; and, where the mirror of
`All-Hands-AI/OpenHands` is on this machine, the real logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import corpora, opendevin
from bench.corpora import session_calls
from tests.bench.converted import committed, loaded, rows
from tests.bench.test_openhands import SEP, write_run

MIRROR = Path("/work/.mirror/All-Hands-AI+OpenHands/repo")
MONO = [f"You're a thoughtful robot. This is your internal monologue:\n[{k} steps]"
        for k in (0, 1, 2)]
ACTS = ['{"action": "run", "args": {"command": "ls"}}',
        '{"action": "write", "args": {"path": "hello.sh"}}', '{"action": "finish"}']
SWE_SYSTEM = "SYSTEM INFO:\nYou am an autonomous coding agent."
SWE = [[SWE_SYSTEM, "RESPONSE FORMAT:\nthoughts, then one command"],
       [SWE_SYSTEM, "These are your past 1 actions:\nwrite hello.sh", "RESPONSE FORMAT:"]]


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def said(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def logged(messages: list[str]) -> str:
    return "".join(SEP + m for m in messages)


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "openhands"
    mock = repo / "tests" / "integration" / "mock"
    write_run(mock / "MonologueAgent" / "test_write", [logged([m]) for m in MONO], ACTS)
    write_run(mock / "SWEAgent" / "test_write", [logged(p) for p in SWE], ACTS[1:])
    # a one-call run; a chat agent (bench/openhands.py's); a later log without separators
    write_run(mock / "PlannerAgent" / "test_short", [logged(["# Task\nplan"])], ACTS[:1])
    write_run(mock / "CodeActAgent" / "test_write", [logged(["sys", "task"])] * 2, ACTS[:2])
    write_run(mock / "rt" / "PlannerAgent" / "test_write", ["\n# Task\nplan 1", "\n# Task\nplan 2"],
              ACTS[:2])
    write_run(mock / "rt" / "SWEAgent" / "test_edit", [SWE_SYSTEM + "\nRESPONSE FORMAT:"] * 2,
              ACTS[:2])
    # the monologue run copied to another runtime folder: the same calls, kept once
    write_run(mock / "rt" / "MonologueAgent" / "test_write", [logged([m]) for m in MONO], ACTS)
    (repo / "README.md").write_text("OpenHands\n")
    return committed(repo, "logs")


def test_runs_per_call_with_the_agents_roles(source: tuple[Path, str],
                                             tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = opendevin.convert(repo, out, rev=rev)

    runs, queues = loaded(written, out, "opendevin")
    assert written == {"opendevin": 3, "opendevin-queue": 3}
    mono, swe, planner = runs
    assert (mono.id, swe.id, planner.id) == (
        f"opendevin/MonologueAgent/test_write/{rev[:10]}",
        f"opendevin/SWEAgent/test_write/{rev[:10]}",
        f"opendevin/rt/PlannerAgent/test_write/{rev[:10]}")
    # one message: a user message; the calls are not prefixes of one another
    assert session_calls(mono) == [([user(m)], said(a)) for m, a in zip(MONO, ACTS, strict=True)]
    assert mono.messages == [user(MONO[2]), said(ACTS[2])]
    # more: the system prompt, then user messages
    assert session_calls(swe)[1] == ([{"role": "system", "content": SWE_SYSTEM},
                                      user(SWE[1][1]), user(SWE[1][2])], said(ACTS[2]))
    # a log without separators is the one message of an agent that sends one
    assert session_calls(planner)[0] == ([user("\n# Task\nplan 1")], said(ACTS[0]))
    line = rows(out, "opendevin")[0]
    assert (line["model"], line["task_id"], line["tools"]) == (None, "test_write", [])
    readme = (out / "opendevin" / "README.md").read_text()
    assert f"`{rev}`" in readme and "MIT" in readme
    assert ("MonologueAgent: calls seen already 1; MonologueAgent: runs read 2; PlannerAgent: "
            "fewer than 2 calls 1; PlannerAgent: runs read 2; SWEAgent: a prompt not laid out "
            "as messages 1; SWEAgent: runs read 2") in " ".join(readme.split())
    assert "CodeAct" not in readme
    # a queue of one run is the run (queues in order of their names)
    assert [q.id for q in queues] == ["opendevin-queue/MonologueAgent/s00/q00",
                                      "opendevin-queue/PlannerAgent/s02/q00",
                                      "opendevin-queue/SWEAgent/s01/q00"]
    assert [session_calls(q) for q in queues] == [session_calls(r) for r in (mono, planner, swe)]


def test_a_queue_puts_the_earlier_runs_turns_before_each_call() -> None:
    def run(agent: str, prompts: list[list[dict[str, str]]]) -> dict[str, object]:
        calls = [{"messages": p, "reply": said(a)} for p, a in zip(prompts, ACTS, strict=False)]
        return {"agent": f"OpenDevin {agent} (a fresh prompt per step)", "task_id": agent,
                "messages": [*calls[-1]["messages"], calls[-1]["reply"]], "calls": calls}

    system = {"role": "system", "content": SWE_SYSTEM}
    first = run("SWEAgent", [[system, user("a")], [system, user("b")]])
    second = run("SWEAgent", [[system, user("c")]])
    mono = [run("MonologueAgent", [[user("m1")], [user("m2")]]),
            run("MonologueAgent", [[user("n1")]])]

    mono_queue, swe_queue = opendevin.queue_sessions([first, second, *mono], queue_calls=50)

    # the system prompt once, then each run's last prompt and reply
    assert swe_queue["messages"] == [system, user("b"), said(ACTS[1]), user("c"),
                                     said(ACTS[0])]
    assert swe_queue["calls"][2]["messages"] == [system, user("b"), said(ACTS[1]), user("c")]
    # no system prompt: the earlier runs' turns, then the call's one message
    assert mono_queue["calls"][2]["messages"] == [user("m2"), said(ACTS[1]), user("n1")]
    assert mono_queue["task_id"] == ["MonologueAgent", "MonologueAgent"]
    assert mono_queue["id"] == "opendevin-queue/MonologueAgent/s01/q00"


@pytest.mark.skipif(not MIRROR.is_dir(),
                    reason=f"no mirror of All-Hands-AI/OpenHands at {MIRROR}")
def test_the_recorded_logs(tmp_path: Path) -> None:
    assert opendevin.convert(MIRROR, tmp_path) == {"opendevin": 140, "opendevin-queue": 21}
    sessions = corpora.load("opendevin", tmp_path)
    assert sum(len(session_calls(s)) for s in sessions) == 952
    assert all(m[0]["role"] == ("system" if len(m) > 1 else "user")
               for s in sessions for m, _ in session_calls(s))

