"""`bench/tapeagents.py` on a tiny gzipped `LLMCalls` table committed to a git repository
written here (not the real data): calls grouped into runs (a request without an assistant
turn starts one; runs interleaved in time), each run laid out as one growing chat (a reply
as the next request re-sent it, a node's new schema turn, the turns after the last
assistant turn; an image part replaced by a marker), the README's counts of requests the
layout reproduces, queues cut by calls with the system prompt once, `bench/replay.py`'s
loader reading both folders; and, where the mirror of `ServiceNow/TapeAgents` is on this
machine, the real recording."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from bench import corpora, tapeagents
from bench.yardstick import call_ends
from tests.bench.converted import committed, loaded, rows

MIRROR = Path("/work/.mirror/ServiceNow+TapeAgents/repo")

SYSTEM = {"role": "system", "content": "You are an expert AI Agent."}
PLAN_SCHEMA = {"role": "user", "content": "\nYou can use the following tools: plan only"}
ALL_SCHEMA = {"role": "user", "content": "\nYou can use the following tools: every step"}
INSTR_PLAN = {"role": "user", "content": "What steps should I do to answer the question?"}
INSTR_FACTS = {"role": "user", "content": "Before we begin executing the plan, list facts."}
INSTR_GO = {"role": "user", "content": "Let's start executing the plan step by step."}


def turn(role: str, step: dict[str, Any], *, pretty: bool = True) -> dict[str, str]:
    """A JSON step as the agent re-sends it (pretty) or as the model returned it."""
    return {"role": role, "content": json.dumps(step, indent=2) if pretty
            else json.dumps(step, separators=(",", ":"))}


def ask(text: str) -> dict[str, str]:
    return turn("user", {"kind": "question", "content": text})


PLAN = {"kind": "plan_thought", "plan": ["search", "answer"]}
FACTS = {"kind": "list_of_facts_thought", "given_facts": ["x"]}
SEARCH = {"kind": "search_action", "source": "web", "query": "capital of France"}
RESULTS = {"kind": "search_results_observation", "serp": [{"title": "Paris"}]}
ANSWER = {"kind": "gaia_answer_action", "success": True, "answer": "Paris"}
READ = {"kind": "read_document_action", "url": "https://example.org"}
LONG = {"kind": "page_observation", "text": "Title: Example " + "words " * 40}
SHORT = {"kind": "page_observation", "text": "Title: Example words\n..."}
PAGE2 = {"kind": "page_observation", "text": "Title: Second page"}

QA, QB = ask("What is the capital of France?"), ask("What does the image show?")
IMAGE = {"role": "user", "content": [
    {"type": "text", "text": "Attached image"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}

# (prompt id, time, request messages, reply step): run A (4 calls) and B (3 calls)
# interleaved, then A asked again from its start (a run of 1 call)
CALLS = [
    ("a1", "t01", [SYSTEM, PLAN_SCHEMA, QA, INSTR_PLAN], PLAN),
    ("b1", "t02", [SYSTEM, PLAN_SCHEMA, QB, IMAGE], SEARCH),
    ("a2", "t03", [SYSTEM, PLAN_SCHEMA, QA, turn("assistant", PLAN), INSTR_FACTS], FACTS),
    ("b2", "t04", [SYSTEM, PLAN_SCHEMA, QB, IMAGE, turn("assistant", SEARCH),
                   turn("user", LONG)], READ),
    ("a3", "t05", [SYSTEM, ALL_SCHEMA, QA, turn("assistant", PLAN), turn("assistant", FACTS),
                   INSTR_GO], SEARCH),
    ("a4", "t06", [SYSTEM, ALL_SCHEMA, QA, turn("assistant", PLAN), turn("assistant", FACTS),
                   turn("assistant", SEARCH), turn("user", RESULTS)], ANSWER),
    ("b3", "t07", [SYSTEM, PLAN_SCHEMA, QB, IMAGE, turn("assistant", SEARCH),
                   turn("user", SHORT), turn("assistant", READ), turn("user", PAGE2)], ANSWER),
    ("a5", "t09", [SYSTEM, PLAN_SCHEMA, QA, INSTR_PLAN], PLAN),
]


def recording(path: Path) -> None:
    db = path.with_suffix("")
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE LLMCalls (prompt_id TEXT PRIMARY KEY, timestamp TEXT, "
                "prompt TEXT, output TEXT, prompt_length_tokens INTEGER, "
                "output_length_tokens INTEGER, cached INTEGER, llm_info TEXT, cost REAL)")
    for prompt_id, ts, messages, step in reversed(CALLS):  # stored out of time order
        con.execute("INSERT INTO LLMCalls VALUES (?, ?, ?, ?, 1, 1, 0, '{}', 0.0)", (
            prompt_id, ts, json.dumps({"id": prompt_id, "tools": None, "messages": messages}),
            json.dumps({"content": turn("assistant", step, pretty=False)["content"],
                        "role": "assistant", "tool_calls": None})))
    con.commit()
    con.close()
    path.write_bytes(gzip.compress(db.read_bytes()))
    db.unlink()


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "TapeAgents"
    path = repo / tapeagents.RECORDING
    path.parent.mkdir(parents=True)
    recording(path)
    return committed(repo, "recording")


def test_converts_runs_and_queues_that_the_replay_reads(source: tuple[Path, str],
                                                        tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = tapeagents.convert(repo, out, rev=rev, queue_calls=4)

    assert written == {"tapeagents-gaia": 3, "tapeagents-gaia-queue": 2}
    runs, queues = loaded(written, out, "tapeagents-gaia")
    assert [s.id for s in runs] == ["tapeagents-gaia/r000", "tapeagents-gaia/r001",
                                    "tapeagents-gaia/r002"]
    assert [len(call_ends(s.messages)) for s in runs] == [4, 3, 1]
    returned = {k: turn("assistant", s, pretty=False) for k, s in
                (("answer", ANSWER), ("plan", PLAN), ("read", READ))}
    # run A: each reply as the next request re-sent it (the last as returned), the act
    # node's schema turn when it first came, every node's instruction kept
    assert runs[0].messages == [
        SYSTEM, PLAN_SCHEMA, QA, INSTR_PLAN, turn("assistant", PLAN), INSTR_FACTS,
        turn("assistant", FACTS), ALL_SCHEMA, INSTR_GO, turn("assistant", SEARCH),
        turn("user", RESULTS), returned["answer"]]
    # run B: the image as a marker, the page as first sent (a later request shortened it)
    image = {"role": "user", "content": "Attached image\n[image: image/png, 12 base64 characters]"}
    assert runs[1].messages == [
        SYSTEM, PLAN_SCHEMA, QB, image, turn("assistant", SEARCH), turn("user", LONG),
        turn("assistant", READ), turn("user", PAGE2), returned["answer"]]
    assert runs[2].messages == [SYSTEM, PLAN_SCHEMA, QA, INSTR_PLAN, returned["plan"]]
    for session in runs + queues:
        assert session.tools is None
        assert session.messages[0] == SYSTEM
        assert session.messages[-1]["role"] == "assistant"
    # 4 + 3 + 1 calls / 4 -> 2 queues, cut after run A; the system prompt once
    assert [s.id for s in queues] == ["tapeagents-gaia-queue/q00", "tapeagents-gaia-queue/q01"]
    assert queues[0].messages == runs[0].messages
    assert queues[1].messages == runs[1].messages + runs[2].messages[1:]
    assert [s["task_id"] for s in rows(out, "tapeagents-gaia")] == ["a1", "b1", "a5"]
    readme = (out / "tapeagents-gaia" / "README.md").read_text()
    assert "Apache License 2.0" in readme and f"`{rev}`" in readme
    assert "(8) of the GAIA agent's test recording, grouped into 3 runs" in readme
    assert "2 questions" in readme
    # exact: a1, b1, b2, a5; every turn held: a2, a3, a4; a page sent shortened: b3
    assert "exactly for 4; for 3 it holds every turn sent" in readme
    assert "for 1 a turn was\n  sent otherwise" in readme
    assert "  - `gaia_answer_action`: 2 turns" in readme
    assert "Queues" in (out / "tapeagents-gaia-queue" / "README.md").read_text()


def test_a_request_that_continues_no_run_is_refused() -> None:
    call = {"id": "x", "messages": [SYSTEM, QA, turn("assistant", PLAN)], "reply": "{}"}
    with pytest.raises(ValueError, match="x: continues no run"):
        tapeagents.runs_of([call])
    with pytest.raises(ValueError, match="without a question turn"):
        tapeagents.question([SYSTEM, INSTR_PLAN])


@pytest.mark.skipif(not MIRROR.is_dir(),
                    reason=f"no mirror of ServiceNow/TapeAgents at {MIRROR}")
def test_the_recorded_runs(tmp_path: Path) -> None:
    written = tapeagents.convert(MIRROR, tmp_path)
    assert written == {"tapeagents-gaia": 69, "tapeagents-gaia-queue": 2}
    runs = corpora.load("tapeagents-gaia", tmp_path)
    assert sum(len(call_ends(s.messages)) for s in runs) == 579
    assert all(s.messages[-1]["role"] == "assistant" for s in runs)
