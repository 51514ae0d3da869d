"""`bench/aider.py` on a tiny made-up `.aider.llm.history` committed to a git repository
written here (not the real log): requests and replies parsed, a request without a reply left
out, calls chained into runs by their replies across a mode switch and a rewritten system
prompt, a fresh one-call chat left out, each run written as a per-call session the replay
loads with its calls as sent; and the real mirror where present."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import aider, corpora
from bench.corpora import session_calls
from tests.bench.converted import committed, rows

MIRROR = Path("/work/.mirror/jkassemi+friendly_names/repo")
ASK = "Act as an expert code analyst.\nAnswer questions."
CODE = "Act as an expert software developer.\nUse ``` fences."
CODE4 = "Act as an expert software developer.\nUse ```` fences."
EDITOR = "Act as an expert software developer who edits source code."
MAP = "Here are summaries of some files present in my git repo.\n\nsrc/a.py"
ACK = "Ok, I won't try and edit those files without asking first."


def block(*messages: tuple[str, str]) -> str:
    """A request as aider logs it: each message's lines prefixed by its role."""
    parts = ["\n".join(f"{role} {line}" for line in text.split("\n")) + "\n"
             for role, text in messages]
    return "-------\n" + "-------\n".join(parts)


def logged(when: str, messages: list[tuple[str, str]], reply: str | None) -> str:
    out = f"TO LLM 2025-01-31T{when}\n{block(*messages)}"
    if reply is not None:
        out += f"LLM RESPONSE 2025-01-31T{when}\n" + "".join(
            f"ASSISTANT {line}\n" for line in reply.split("\n")) + "\n"
    return out


FIRST = [("SYSTEM", ASK), ("USER", MAP), ("ASSISTANT", ACK), ("USER", "what does a.py do?")]
R1 = "It prints.\n\nNothing else."
SECOND = [("SYSTEM", CODE), ("USER", "what does a.py do?"), ("ASSISTANT", R1),
          ("USER", MAP), ("ASSISTANT", ACK), ("USER", "make it print twice")]
R2 = "src/a.py\n<<<<<<< SEARCH\nprint(1)\n=======\nprint(1)\nprint(1)\n>>>>>>> REPLACE"
THIRD = [("SYSTEM", CODE4), ("USER", "what does a.py do?"), ("ASSISTANT", R1),
         ("USER", "make it print twice"), ("ASSISTANT", R2), ("USER", MAP),
         ("ASSISTANT", ACK), ("USER", "and a third time")]
LONE = [("SYSTEM", EDITOR), ("USER", "Add a line to a.py")]


def chat(messages: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"role": aider.ROLES[r], "content": t} for r, t in messages]


def said(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "project"
    repo.mkdir()
    (repo / "LICENSE.txt").write_text("MIT License\n")
    (repo / aider.PATH).write_text(
        logged("11:00:00", FIRST, R1) + logged("11:01:00", LONE, "Done.")
        + logged("11:02:00", SECOND, R2) + logged("11:03:00", THIRD, "Done twice.")
        + logged("11:04:00", FIRST, None))
    return committed(repo, "log")


def test_runs_are_chained_by_replies_and_written_per_call(source: tuple[Path, str],
                                                          tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    assert aider.convert(repo, out, rev=rev) == {"aider": 1}

    [run] = corpora.load("aider", out)
    # the mode switch (another system prompt) and the rewritten fences stay one run; the
    # editor's fresh chat is a run of one, left out
    assert session_calls(run) == [(chat(FIRST), said(R1)), (chat(SECOND), said(R2)),
                                  (chat(THIRD), said("Done twice."))]
    assert run.messages == [*chat(THIRD), said("Done twice.")]
    assert run.id == "aider/r000"
    line = rows(out, "aider")[0]
    assert (line["task_id"], line["tools"], line["model"]) == ("2025-01-31T11:00:00", [], None)
    readme = (out / "aider" / "README.md").read_text()
    assert f"`{rev}`" in readme and "MIT" in readme
    assert "Read: 4 calls, requests without a logged reply 1; runs: 2 (1 of 2+ calls" in readme
    assert "2 of the runs' 3 calls are not a prefix" in readme.replace("\n  ", " ")


def test_a_reply_followed_once() -> None:
    calls = [{"messages": chat(FIRST), "reply": said(R1)},
             {"messages": chat(SECOND), "reply": said(R2)},
             {"messages": chat(SECOND), "reply": said("again")}]
    # both later calls hold the first reply: the first of them follows it, the other (a
    # call logged again) starts a run of its own
    assert aider.chain(calls) == [[0, 1], [2]]


def test_lines_keep_blank_lines_and_split_at_separators() -> None:
    calls, left = aider.parse(logged("11:00:00", FIRST, R1))
    assert calls[0]["messages"] == chat(FIRST)
    assert calls[0]["reply"] == said(R1)
    assert not left


@pytest.mark.skipif(not MIRROR.is_dir(),
                    reason=f"no mirror of jkassemi/friendly_names at {MIRROR}")
def test_the_recorded_log(tmp_path: Path) -> None:
    assert aider.convert(MIRROR, tmp_path) == {"aider": 4}
    sessions = corpora.load("aider", tmp_path)
    assert [len(session_calls(s)) for s in sessions] == [4, 13, 2, 2]
    assert all(s.calls is not None and s.messages[-1]["role"] == "assistant" for s in sessions)
