"""`bench/gptme.py` on tiny made-up console prints committed to a git repository written here
(not the real runs): the chat read back from the print (spinner overwrites, tool previews
and live output, the console's trailing lines left out), tool outputs as `system` messages
merged when consecutive, `tool`-format calls and their answers, runs too short, runs that
printed no chat and unanswered calls left out; the queue layout; and the real mirror where
present."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import gptme
from bench.corpora import session_calls
from tests.bench.converted import committed, loaded, rows

MIRROR = Path("/work/.mirror/gptme+gptme/repo")
SPIN = "Assistant: Thinking..." + " " * 80 + "\rAssistant: "
HEAD = ("\n--- Start of generation ---\n[02:29:39] Using model: openai/gpt-4o\n"
        "Skipped 1 hidden system messages, show with --show-hidden\n"
        "--- ^^^ past messages ^^^ ---\n")
MARKDOWN = (HEAD + "User: write hello.py and run it\n"
            + SPIN + "Saving it.\n\n```save hello.py\nprint('hi')\n```\n\nPreview\n"
            "print('hi')\n\nSystem: Saved to hello.py\n"
            + SPIN + "Running it.\n```shell\npython hello.py\n```\nPreview\npython hello.py\n\n"
            "hi\nSystem:\nRan command: `python hello.py`\n\n`hi`\n"
            "System: <budget:token_budget>1000</budget:token_budget>\n"
            + SPIN + "It prints hi.\n```shell\ncat hello.py\n```\nPreview\ncat hello.py\n\n"
            "System:\nRan command: `cat hello.py`\n\n`print('hi')`\n"
            + SPIN + "Done." + " " * 80 + "[02:53:41] Autonomous mode: exiting.\n"
            "--- Finished generation ---\n")
TOOL = (HEAD + "User: make a git repository\n"
        + SPIN + "\n@shell(call_1): {\"command\": \"git init\"}\nPreview\ngit init\n\n"
        "System:\nRan command: `git init`\n\n`Initialized`\n"
        + SPIN + "Now a file.\n@save(call_2): {\"path\": \"a.py\", \"content\": \"x = 1\"}"
        + " " * 80 + "System: Saved to a.py\n"
        + SPIN + "Done.\n--- Finished generation ---\n")
UNANSWERED = (HEAD + "User: go\n" + SPIN + "\n@shell(call_1): {\"command\": \"ls\"}\n"
              + SPIN + "again\n" + SPIN + "and again\n--- Finished generation ---\n")
CUT_OFF = (HEAD + "User: hi\n" + SPIN + "Hello!\nSystem: ok\n" + SPIN + "More.\nSystem: ok\n"
           + SPIN + "Third.\nSystem: ok\n"
           + "Assistant: Thinking..." + " " * 80 + "\rerror: timed out\nSystem: ok\n" + SPIN
           + "Late.\n--- Finished generation ---\n")
SHORT = HEAD + "User: hi\n" + SPIN + "Hello!\n--- Finished generation ---\n"


def said(text: str | None, *calls: tuple[str, str, str]) -> dict[str, object]:
    msg: dict[str, object] = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = [{"id": i, "type": "function",
                              "function": {"name": n, "arguments": a}} for i, n, a in calls]
    return msg


MARKDOWN_CHAT = [
    {"role": "user", "content": "write hello.py and run it"},
    said("Saving it.\n\n```save hello.py\nprint('hi')\n```"),
    {"role": "system", "content": "Saved to hello.py"},
    said("Running it.\n```shell\npython hello.py\n```"),
    {"role": "system", "content": "Ran command: `python hello.py`\n\n`hi`\n\n"
                                  "<budget:token_budget>1000</budget:token_budget>"},
    said("It prints hi.\n```shell\ncat hello.py\n```"),
    {"role": "system", "content": "Ran command: `cat hello.py`\n\n`print('hi')`"},
    said("Done."),
]
CUT_CHAT = [{"role": "user", "content": "hi"}, said("Hello!"), {"role": "system", "content": "ok"},
            said("More."), {"role": "system", "content": "ok"}, said("Third.")]
TOOL_CHAT = [
    {"role": "user", "content": "make a git repository"},
    said(None, ("call_1", "shell", '{"command": "git init"}')),
    {"role": "tool", "tool_call_id": "call_1",
     "content": "Ran command: `git init`\n\n`Initialized`"},
    said("Now a file.", ("call_2", "save", '{"path": "a.py", "content": "x = 1"}')),
    {"role": "tool", "tool_call_id": "call_2", "content": "Saved to a.py"},
    said("Done."),
]


def run_dir(repo: Path, stamp: str, model: str, test: str, printed: str) -> None:
    folder = repo / "eval_results" / stamp / model / test
    folder.mkdir(parents=True)
    (folder / "gen_stdout.txt").write_text(printed)
    (folder / "cases.csv").write_text("Model,Test,Case,Passed,Duration\n")


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "gptme"
    repo.mkdir()
    (repo / "README.md").write_text("gptme\n")
    (repo / "LICENSE").write_text("MIT\n")
    run_dir(repo, "20250101_000000Z", "openai/gpt-4o@markdown", "hello", MARKDOWN)
    run_dir(repo, "20250101_000000Z", "openai/gpt-4o@markdown", "short", SHORT)
    run_dir(repo, "20250101_000000Z", "openai/gpt-4o@tool", "init-git", TOOL)
    run_dir(repo, "20250101_000000Z", "openai/gpt-4o@tool", "broken", UNANSWERED)
    run_dir(repo, "20250102_000000Z", "openrouter/meta-llama/llama-3-8b", "hello", MARKDOWN)
    run_dir(repo, "20250102_000000Z", "openrouter/meta-llama/llama-3-8b", "failed", "boom\n")
    run_dir(repo, "20250102_000000Z", "openrouter/meta-llama/llama-3-8b", "hi", CUT_OFF)
    return committed(repo, "eval results")


def test_chats_read_back_from_the_console_print(source: tuple[Path, str],
                                                tmp_path: Path) -> None:
    repo, rev = source
    out = tmp_path / "out"

    written = gptme.convert(repo, out, rev=rev, queue_calls=4)

    runs, queues = loaded(written, out, "gptme")
    assert [r.id for r in runs] == [
        "gptme/20250101_000000Z/openai/gpt-4o@markdown/hello",
        "gptme/20250101_000000Z/openai/gpt-4o@tool/init-git",
        "gptme/20250102_000000Z/openrouter/meta-llama/llama-3-8b@markdown/hello",
        "gptme/20250102_000000Z/openrouter/meta-llama/llama-3-8b@markdown/hi"]
    assert runs[0].messages == MARKDOWN_CHAT == runs[2].messages
    assert runs[1].messages == TOOL_CHAT
    # the spinner left standing ends the chat at its last reply: what followed went with
    # a call that got no reply
    assert runs[3].messages == CUT_CHAT
    assert [len(session_calls(r)) for r in runs] == [4, 3, 4, 3]
    line = rows(out, "gptme")[1]
    assert (line["model"], line["task_id"], line["tools"]) == ("openai/gpt-4o", "init-git", [])
    assert "_chat" not in line
    # per format, runs one after another, cut near every 4 calls; no system prompt added
    assert [q.id for q in queues] == ["gptme-queue/markdown/q00", "gptme-queue/markdown/q01",
                                      "gptme-queue/markdown/q02", "gptme-queue/tool/q00"]
    assert queues[0].messages == MARKDOWN_CHAT and queues[3].messages == TOOL_CHAT
    assert queues[2].messages == CUT_CHAT
    readme = (out / "gptme" / "README.md").read_text()
    assert f"`{rev}`" in readme and "MIT" in readme
    assert ("runs read 7, runs of fewer than 3 calls 1, tool-format runs with a call "
            "unanswered or unparsed 1, runs that printed no chat 1") in readme
    assert "Runs used: 4 (`markdown` 3, `tool` 1)" in readme


def test_a_call_line_whose_json_does_not_parse_is_not_a_call() -> None:
    assert gptme.tool_calls("text\n@shell(c1): {\"command\": \n") is None
    assert gptme.tool_calls("no calls here") == ("no calls here", [])


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no mirror of gptme/gptme at {MIRROR}")
def test_the_recorded_runs(tmp_path: Path) -> None:
    written = gptme.convert(MIRROR, tmp_path)
    runs, _ = loaded(written, tmp_path, "gptme")
    assert written == {"gptme": 3330, "gptme-queue": 259}
    assert all(r.messages[0]["role"] == "user" and r.messages[-1]["role"] in ("assistant", "tool")
               for r in runs)
    # the console's spinner never survives as a reply
    assert not any(m.get("content") == "Thinking..." for r in runs for m in r.messages)
