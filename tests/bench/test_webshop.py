"""`bench/webshop.py` on a tiny `WebShop.ipynb` committed to a git repository written here
(not the real data): the few-shot prompt and the printed episodes parsed, each episode as
chat (the prompt and first page, then action / `Observation:` turns, nothing after the last
action), queues cut by calls with nothing added, `bench/replay.py`'s loader reading both
folders; and, where the mirror of `ysymyth/ReAct` is on this machine, the real notebook."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import corpora, webshop
from bench.yardstick import call_ends
from tests.bench.converted import committed, loaded, rows

PROMPT = "Webshop \nInstruction:  \nexample\n[Search]  \n\nAction: search[x]\nObservation: ...\n"
MIRROR = Path("/work/.mirror/ysymyth+ReAct/repo")


def printed(i: int, steps: list[tuple[str, str]], score: str) -> str:
    """One episode as `run_episodes` printed it: its index, each action and observation,
    the running score."""
    body = "".join(f"Action: {a}\nObservation: {o}\n\n" for a, o in steps)
    return f"-----------------\n{i}\n{body}{i + 1} {score} 0.0 0.0\n-------------\n"


def page(i: int) -> str:
    return f"\n[Back to Search] \nPage 1 (Total results: 50) \n[B0{i}] \nSoap {i} \n$1.0{i} "


def first(i: int) -> str:
    return f"\nWebshop \nInstruction:  \ni need soap {i}\n[Search] "


EPISODES = [
    (0, [("reset", first(0)), ("search[soap 0]", page(0)), ("think[B00 is soap.]", "OK."),
         ("click[Buy Now]", "Your score (min 0.0, max 1.0): 1.0")]),
    (1, [("reset", first(1)), ("search[soap 1]", page(1)), ("click[B01]", page(1)),
         ("", "Invalid action!"), ("click[Buy Now]", "")]),
    (2, [("reset", first(2)), ("search[soap 2]", page(2))]),
]


def notebook() -> str:
    out = "".join(printed(i, s, "0.5") for i, s in EPISODES)
    cells = [
        {"cell_type": "code", "source": ["import os\n"], "outputs": []},
        {"cell_type": "code", "source": [f'prompt1 = """{PROMPT}"""\n'], "outputs": []},
        {"cell_type": "code", "source": ['prompt1_actonly = """other"""\n'], "outputs": []},
        {"cell_type": "code", "source": ["res1 = run_episodes(prompt1, 500)"], "outputs": [
            {"output_type": "stream", "name": "stdout", "text": out[:40]},
            {"output_type": "stream", "name": "stderr", "text": "a warning\n"},
            {"output_type": "stream", "name": "stdout", "text": out[40:]}]},
    ]
    return json.dumps({"cells": cells})


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "react"
    repo.mkdir()
    (repo / "WebShop.ipynb").write_text(notebook())
    return committed(repo, "notebook")


def test_converts_runs_and_queues_that_the_replay_reads(source: tuple[Path, str],
                                                        tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = webshop.convert(repo, out, rev=rev, queue_calls=3)

    # 3 + 4 + 1 calls -> 8 / 3 -> 3 queues at the episode boundaries, one episode each
    assert written == {"webshop-react": 3, "webshop-react-queue": 3}
    runs, queues = loaded(written, out, "webshop-react")
    assert [s.id for s in runs] == ["webshop-react/fixed_000", "webshop-react/fixed_001",
                                    "webshop-react/fixed_002"]
    assert [len(call_ends(s.messages)) for s in runs] == [3, 4, 1]
    # the prompt and the first page; per step the action and `Observation: `; the score
    # after the last action left out
    assert runs[0].messages == [
        {"role": "user", "content": PROMPT + first(0)},
        {"role": "assistant", "content": "search[soap 0]"},
        {"role": "user", "content": f"Observation: {page(0)}"},
        {"role": "assistant", "content": "think[B00 is soap.]"},
        {"role": "user", "content": "Observation: OK."},
        {"role": "assistant", "content": "click[Buy Now]"}]
    assert runs[1].messages[-3:] == [
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "Observation: Invalid action!"},
        {"role": "assistant", "content": "click[Buy Now]"}]
    assert runs[2].messages[-1] == {"role": "assistant", "content": "search[soap 2]"}
    for session in runs + queues:
        assert session.tools is None
        assert session.messages[0]["content"].startswith(PROMPT)
    assert [s.messages for s in queues] == [s.messages for s in runs]
    lines = rows(out, "webshop-react")
    assert [(s["model"], s["task_id"]) for s in lines] == [
        ("text-davinci-002", 0), ("text-davinci-002", 1), ("text-davinci-002", 2)]
    readme = (out / "webshop-react" / "README.md").read_text()
    assert "MIT License" in readme and f"`{rev}`" in readme
    assert "`search` 3, `click` 3, `think` 1, `(empty)` 1" in readme
    assert "- `Observation`: 5 turns, 100.0%" in readme
    assert "Queues" in (out / "webshop-react-queue" / "README.md").read_text()


def test_a_notebook_without_the_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"one prompt1 and one run_episodes"):
        webshop.notebook_parts(json.dumps({"cells": []}))
    with pytest.raises(ValueError, match="does not start with reset"):
        webshop.episodes(printed(0, [("search[x]", "y")], "0.0"))


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no mirror of ysymyth/ReAct at {MIRROR}")
def test_the_recorded_notebook(tmp_path: Path) -> None:
    written = webshop.convert(MIRROR, tmp_path, queue_calls=350)
    assert written == {"webshop-react": 500, "webshop-react-queue": 10}
    runs = corpora.load("webshop-react", tmp_path)
    assert sum(len(call_ends(s.messages)) for s in runs) == 3437
    assert all(s.messages[-1]["role"] == "assistant" for s in runs)
