"""`bench/autocoderover.py` on a tiny AutoCodeRover-shaped `results/` folder written here (not
the real data): per task the file holding the whole conversation (the last patch attempt,
else the last search round, by number not by name), tasks in task-id order, no tools, long
contents cut, task queues cut by calls, and `bench/replay.py`'s loader reading both folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import autocoderover
from bench.yardstick import call_ends
from tests.bench.converted import loaded

SYSTEM = {"role": "system", "content": "You are a software developer maintaining a large project."}


def rounds(task: str, n: int, *, big: bool = False) -> list[dict[str, Any]]:
    """The search conversation after n rounds: the issue, the API prompt, then per round the
    model's prose calls and their results as a user turn."""
    msgs = [SYSTEM, {"role": "user", "content": f"<issue>{task} fails</issue>"},
            {"role": "user", "content": "you can use below search APIs"}]
    for r in range(n):
        msgs += [{"role": "assistant", "content": f'search_class("C{r}") for {task}'},
                 {"role": "user", "content": ("y" * 30_000) if big and r == 0
                  else f"Result of search_class(\"C{r}\"): <file>{task}/m{r}.py</file>"}]
    return msgs


def patch(task: str, n: int, tries: int) -> list[dict[str, Any]]:
    msgs = [*rounds(task, n), {"role": "user", "content": "Write a patch for the issue"}]
    for t in range(tries):
        msgs += [{"role": "assistant", "content": f"<file>{task}/m0.py</file> try {t}"},
                 {"role": "user", "content": "Your edit could not be applied"}]
    return msgs


def write(folder: Path, name: str, messages: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(messages))


def test_converts_tasks_and_queues_that_the_replay_reads(tmp_path: Path) -> None:
    res = tmp_path / "acr" / "results" / "acr-run-9"
    # beta: search rounds only, round 10 the last (a name sort would pick round 9)
    beta = res / "applicable_patch" / "beta__beta-2_2024-04-06_13-25-06"
    for r in (9, 10):
        write(beta, f"conversation_round_{r}.json", rounds("beta", r - 7, big=True))
    # alpha: two patch attempts, the second extending the first (it holds the whole session)
    alpha = res / "raw_patch_but_unmatched" / "alpha__alpha-1_2024-04-06_14-00-00"
    write(alpha, "conversation_round_1.json", rounds("alpha", 1))
    write(alpha, "debug_agent_write_patch_1.json", patch("alpha", 1, 1))
    write(alpha, "debug_agent_write_patch_2.json", patch("alpha", 1, 2))
    write(alpha, "agent_proxy_0.json", [{"role": "user", "content": "proxy"}])
    gamma = res / "applicable_patch" / "gamma__gamma-3_2024-04-06_15-00-00"
    write(gamma, "debug_agent_write_patch_1.json", patch("gamma", 4, 1))
    write(res / "applicable_patch" / "notes", "conversation_round_0.json", rounds("x", 1))
    write(res / "new_eval_results", "report.json", [])
    out = tmp_path / "out"

    written = autocoderover.convert(tmp_path / "acr", out, "acr-run-9", queue_calls=5)

    # calls: alpha 1 + 2 = 3, beta 3, gamma 4 + 1 = 5; 11 calls -> 2 queues
    assert written == {"acr-run-9": 3, "acr-run-9-queue": 2}
    runs, queues = loaded(written, out, "acr-run-9")
    assert [s.id for s in runs] == ["acr-run-9/alpha__alpha-1", "acr-run-9/beta__beta-2",
                                    "acr-run-9/gamma__gamma-3"]
    assert [len(call_ends(s.messages)) for s in runs] == [3, 3, 5]
    alpha_msgs = runs[0].messages
    assert alpha_msgs == patch("alpha", 1, 2)  # the last attempt, as recorded
    for session in runs + queues:
        assert session.tools is None
        assert session.messages[0] == SYSTEM
        assert {m["role"] for m in session.messages} == {"system", "user", "assistant"}
        assert sum(m["role"] == "system" for m in session.messages) == 1
    big = runs[1].messages[4]["content"]
    assert len(big) < 24_100 and big.startswith("y" * 16_000) and big.endswith("y" * 8_000)
    assert "[... 6000 characters cut ...]" in big
    # Queues: alpha + beta (6 calls) then gamma (5), cut at the boundary nearest 5.5
    assert [s.id for s in queues] == ["acr-run-9-queue/alpha__alpha-1--beta__beta-2-q0",
                                      "acr-run-9-queue/gamma__gamma-3--gamma__gamma-3-q1"]
    q0 = queues[0].messages
    assert q0[:len(alpha_msgs)] == alpha_msgs
    assert q0[len(alpha_msgs)] == {"role": "user", "content": "<issue>beta fails</issue>"}
    assert len(call_ends(q0)) == 6
    readme = (out / "acr-run-9" / "README.md").read_text()
    assert "GNU Affero General Public License" in readme and "(1 of 30)" in readme
    assert "`debug_agent_write_patch_K.json`, 2 tasks" in readme
    assert "`conversation_round_N.json`, 1 tasks" in readme
    # user turns after each task's issue, by kind: 1 + 2 + 4 search results over the three
    # tasks (beta's first is the 30,000-character one), 2 + 1 failed edits
    assert "- `Result of search`: 7 turns, 1.2% of the characters" in readme
    assert "- `Your edit could not be applied`: 3 turns, 0.3% of the characters" in readme
    assert "Task queues" in (out / "acr-run-9-queue" / "README.md").read_text()


def test_a_user_turn_is_kinded_by_its_opening_words() -> None:
    assert autocoderover.opening('Result of search_method("f"): <file>a.py</file>') == (
        "Result of search")
    assert autocoderover.opening("Result of search_class_in_file(\"C\", \"a.py\"): ...") == (
        "Result of search")
    assert autocoderover.opening("An external analysis tool has been deployed to identify"
                                 " the suspicious code: ...\nTop-5") == (
        "An external analysis tool has been deployed to i")
    assert autocoderover.opening("Written an applicable patch, but it did not resolve the "
                                 "issue. Some tests have failed.") == (
        "Written an applicable patch, but it did not reso")
