"""`bench/moatless.py` on tiny Moatless Tools trajectories committed to a git repository
written here (not the real data): a run is kept when its calls' messages, without the
`cache_control` markers, are one chat's prefixes (3 calls or more); Anthropic `tool_use` /
`tool_result` blocks become tool calls answered by tool messages, the last reply's call
becomes text; a run whose later call rewrote an older turn and a 2-call run are left out;
queues join a project's runs under its system prompt; and, where the mirror of
`aorwall/moatless-tools` is on this machine, the real runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import corpora, moatless
from bench.yardstick import call_ends
from tests.bench.converted import committed, loaded, rows

MIRROR = Path("/work/.mirror/aorwall+moatless-tools/repo")
CACHE = {"type": "ephemeral"}


def system(project: str) -> str:
    return f"You are ... a core member of the development team for the {project} project."


def task(text: str) -> dict[str, Any]:
    return {"role": "user", "content": f"<task>\n{text}\n</task>"}


def use(n: int, name: str, args: dict[str, Any], thought: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [
        {"type": "text", "text": f"<thoughts>\n{thought}\n</thoughts>"},
        {"id": f"call_{n}", "input": args, "type": "tool_use", "name": name}]}


def result(n: int, text: str) -> dict[str, Any]:
    return {"role": "user", "content": [
        {"tool_use_id": f"call_{n}", "content": f"<observation>\n{text}\n</observation>",
         "type": "tool_result"}]}


def cached(m: dict[str, Any]) -> dict[str, Any]:
    """`m` as sent while among the two newest messages: its last block marked."""
    if isinstance(m["content"], str):
        return m
    blocks = [dict(b) for b in m["content"]]
    blocks[-1]["cache_control"] = CACHE
    return {**m, "content": blocks}


def sent(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [*chat[:-2], *(cached(m) for m in chat[-2:])]


FIND = use(1, "FindClass", {"class_name": "Validator", "file_pattern": None}, "Find it.")
FOUND = result(1, "validators.py\n    regex = r'^[\\w.@+-]+$'")
EDIT = use(2, "str_replace_editor", {"command": "str_replace", "path": "validators.py",
                                     "old_str": "^", "new_str": "\\A"}, "Fix the anchor.")
EDITED = result(2, "The file validators.py has been edited.")
REPLY = {"id": "msg_1", "role": "assistant", "content": [
    {"text": "<thoughts>\nDone.\n</thoughts>", "type": "text"},
    {"id": "toolu_9", "input": {"finish_reason": "fixed"}, "name": "Finish",
     "type": "tool_use"}]}


def trajectory(project: str, instance: str, inputs: list[list[dict[str, Any]]],
               tree: bool = False) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = [{"node_id": 0, "message": "<task>", "parent_id": None}]
    for i, messages in enumerate(inputs, start=1):
        nodes.append({"node_id": i, "parent_id": 0 if tree else i - 1, "completions": {
            "build_action": {"model": "claude-3-5-sonnet-20241022", "input": messages,
                             "response": REPLY},
            **({"execute_action": {"input": [], "response": {}}} if i == 1 else {})}})
    return {"metadata": {"instance_id": instance}, "agent": {
        "system_prompt": system(project), "completion": {"model": "claude-3-5-sonnet"}},
        "nodes": nodes}


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "moatless-tools"
    folder = repo / moatless.EVALUATION
    chat = [task("Validator allows a trailing newline"), FIND, FOUND, EDIT, EDITED]
    runs = {
        # kept: three calls, the cache markers moving to the two newest messages
        "django__django-11099": trajectory("django/django", "django__django-11099",
                                           [sent(chat[:1]), sent(chat[:3]), sent(chat)]),
        # kept, the same project: queued with the first
        "django__django-11133": trajectory("django/django", "django__django-11133",
                                           [sent(chat[:1]), sent(chat[:3]), sent(chat)]),
        # another project (its own queue), the issue sent twice as recorded
        "psf__requests-863": trajectory("psf/requests", "psf__requests-863",
                                        [sent([chat[0], chat[0]]),
                                         sent([chat[0], chat[0], *chat[1:3]]),
                                         sent([chat[0], chat[0], *chat[1:]])]),
        # the second call's assistant turn differs in the third call: left out
        "django__django-11179": trajectory("django/django", "django__django-11179",
                                           [sent(chat[:1]), sent(chat[:3]),
                                            sent([chat[0], EDIT, FOUND, EDIT, EDITED])],
                                           tree=True),
        # two calls: left out
        "django__django-11283": trajectory("django/django", "django__django-11283",
                                           [sent(chat[:1]), sent(chat[:3])]),
    }
    for name, doc in runs.items():
        (folder / name).mkdir(parents=True)
        (folder / name / "trajectory.json").write_text(json.dumps(doc, indent=1))
    (folder / "all_preds.jsonl").write_text("{}\n")
    (repo / "README.md").write_text("moatless\n")
    return committed(repo, "trajectories")


def test_converts_runs_whose_calls_are_one_chat(source: tuple[Path, str],
                                                tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = moatless.convert(repo, out, rev=rev)

    assert written == {"moatless": 3, "moatless-queue": 2}
    runs, queues = loaded(written, out, "moatless")
    assert [s.id for s in runs] == ["moatless/django__django-11099",
                                    "moatless/django__django-11133",
                                    "moatless/psf__requests-863"]
    first = runs[0].messages
    assert first[:2] == [{"role": "system", "content": system("django/django")},
                         {"role": "user", "content": "<task>\nValidator allows a trailing "
                                                     "newline\n</task>"}]
    assert first[2] == {"role": "assistant", "content": "<thoughts>\nFind it.\n</thoughts>",
                        "tool_calls": [{"id": "call_1", "type": "function", "function": {
                            "name": "FindClass",
                            "arguments": '{"class_name": "Validator", "file_pattern": null}'}}]}
    assert first[3] == {"role": "tool", "tool_call_id": "call_1", "content":
                        "<observation>\nvalidators.py\n    regex = r'^[\\w.@+-]+$'\n"
                        "</observation>"}
    assert first[5]["tool_call_id"] == "call_2"
    # the last reply's unanswered call written as its text
    assert first[-1] == {"role": "assistant", "content":
                         '<thoughts>\nDone.\n</thoughts>\nFinish({"finish_reason": "fixed"})'}
    assert [len(call_ends(s.messages)) for s in runs] == [3, 3, 3]
    assert [m["role"] for m in runs[2].messages[:4]] == ["system", "user", "user", "assistant"]
    # queues: per project, the system prompt once, the runs one after another
    assert [s.id for s in queues] == ["moatless-queue/django__django/q00",
                                      "moatless-queue/psf__requests/q00"]
    assert queues[0].messages[:len(first)] == first
    second = queues[0].messages[len(first):]
    assert [m["role"] for m in second] == [m["role"] for m in runs[1].messages[1:]]
    # the second run's recorded call ids, repeated in the queue, made unique
    assert second[1]["tool_calls"][0]["id"] == "call_1_3"
    assert second[2] == {**runs[1].messages[3], "tool_call_id": "call_1_3"}
    assert [len(call_ends(s.messages)) for s in queues] == [6, 3]
    lines = rows(out, "moatless")
    assert {s["model"] for s in lines} == {"claude-3-5-sonnet-20241022"}
    assert {s["tools"] == [] for s in lines} == {True}
    assert lines[0]["task_id"] == "django__django-11099"
    readme = (out / "moatless" / "README.md").read_text()
    assert "MIT" in readme and f"`{rev}`" in readme
    assert "trajectory files 5" in readme and "of fewer than 3 calls 1" in readme
    assert "not one chat (an older turn differs in a later call, node tree branching) 1" \
        in readme
    assert "1 runs send the issue twice" in readme
    assert "Left out: 3 model calls made inside search actions" in readme


def test_per_call_writes_the_runs_that_redo_a_step(tmp_path: Path) -> None:
    repo = tmp_path / "moatless-tools"
    chat = [task("Validator allows a trailing newline"), FIND, FOUND]
    # the third call went back: the first step redone as an edit; a run of one chat beside it
    redo = [sent(chat[:1]), sent(chat), sent([chat[0], EDIT, EDITED])]
    for name, inputs in (("django__django-11179", redo),
                         ("django__django-11099", [sent(chat[:1]), sent(chat), sent(chat)])):
        (repo / moatless.EVALUATION / name).mkdir(parents=True)
        (repo / moatless.EVALUATION / name / "trajectory.json").write_text(
            json.dumps(trajectory("django/django", name, inputs)))
    (repo / "README.md").write_text("moatless\n")
    repo_dir, rev = committed(repo, "trajectories")
    out = tmp_path / "out"

    written = moatless.convert_redo(repo_dir, out, rev=rev)

    assert written == {"moatless-redo": 1}
    [run] = corpora.load("moatless-redo", out)
    assert run.id == "moatless-redo/django__django-11179" and run.calls is not None
    calls = corpora.session_calls(run)
    assert len(calls) == 3
    head = {"role": "system", "content": system("django/django")}
    assert calls[0][0] == [head, {"role": "user", "content": "<task>\nValidator allows a "
                                                             "trailing newline\n</task>"}]
    # each reply as recorded, with its tool call; the last written as text
    assert calls[0][1] == {"role": "assistant", "content": "<thoughts>\nDone.\n</thoughts>",
                           "tool_calls": [{"id": "toolu_9", "type": "function", "function": {
                               "name": "Finish", "arguments": '{"finish_reason": "fixed"}'}}]}
    assert calls[2][1]["content"].endswith('Finish({"finish_reason": "fixed"})')
    # the third call redid the second's step: its history is not an extension of it
    assert calls[1][0][2]["tool_calls"][0]["function"]["name"] == "FindClass"
    assert calls[2][0][2]["tool_calls"][0]["function"]["name"] == "str_replace_editor"
    assert calls[2][0][:len(calls[1][0])] != calls[1][0]
    assert [*calls[2][0], calls[2][1]] == run.messages
    readme = (out / "moatless-redo" / "README.md").read_text()
    assert "3 recorded calls, 1 of them not an extension" in readme


def test_a_run_rewriting_a_turn_beyond_the_cache_markers_is_not_one_chat() -> None:
    chat = [task("t"), FIND, FOUND, EDIT, EDITED]
    calls = [{"input": sent(chat[:1])}, {"input": sent(chat[:3])}, {"input": sent(chat)}]
    assert moatless.chat_of(calls) == chat
    calls[1] = {"input": sent([chat[0], EDIT, FOUND])}
    assert moatless.chat_of(calls) is None


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no mirror of aorwall/moatless-tools at {MIRROR}")
def test_the_recorded_runs(tmp_path: Path) -> None:
    written = moatless.convert(MIRROR, tmp_path)
    assert written == {"moatless": 150, "moatless-queue": 12}
    runs, queues = loaded(written, tmp_path, "moatless")
    # 1,141 recorded calls, one of them sent again with the same messages
    assert sum(len(call_ends(s.messages)) for s in runs) == 1140
    assert sum(len(call_ends(s.messages)) for s in queues) == 1140
    assert all(s.messages[-1]["role"] == "assistant" for s in runs)
