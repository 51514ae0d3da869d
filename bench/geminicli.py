"""Gemini CLI's own chat recordings, read back as a corpus folder `bench/replay.py` reads:
each model call of the agent with the conversation it sent.

Gemini CLI (Google) is an **interactive agent in a terminal**: a person types a request,
the model answers with text and function calls (`run_shell_command`, `read_file`,
`write_file`, `replace`, `list_directory`, `glob`, `search_file_content`,
`google_web_search`, `web_fetch`, `write_todos`, ...), the CLI runs them and sends their
`functionResponse`s back, and the loop runs until the model answers without a call; then
the person types again. The CLI records each conversation in
`~/.gemini/tmp/<project hash>/chats/session-<start>-<id>.json`: `messages`, each `user`
(the typed text), `gemini` (one model reply: `content`, `thoughts`, `tokens`, `model` and
its `toolCalls`, each with `args` and the `result` parts it sent back) or `info` / `error`
(notes shown in the terminal only).

The source is a person's archive of those files (`mischa-thisness/M-Gemini`, CC0-1.0,
`Archives/` and `chat_logs/`, redacted by its owner: `[REDACTED_...]` stand-ins). Here

- a **call** is one `gemini` message: it sent the system message and every `user` and
  `gemini` message before it, each `gemini` one as an assistant turn (its text, its calls
  with `args` as JSON) followed by one tool message per call: the `output` (or `error`)
  string of the call's `functionResponse`, the text the model reads; `thoughts` are left
  out (not sent back as text); `info` and `error` notes are left out (never sent); a
  user turn or tool result over `TOOL_CHARS` characters is cut to that as the shared
  corpora are (`bench.toolathlon.cut`: its head and tail, the cut count between; counted);
- **not recorded, so written here**: the system message (a short neutral statement; the
  CLI's system prompt, its opening context turn about the date, OS and folder, and the
  function declarations are not in the files: `tools` is empty) and, for a call without a
  recorded result, a tool message `[no result recorded]` (counted in the README);
- the same file name in both folders is one conversation: the copy with more messages is
  read; files the snapshot lacks (4 MiB and over) are counted;
- a conversation is written as a **per-call session** (`calls`: each call's list and its
  reply; `messages`: the last call's list and its reply's text). Conversations of fewer
  than `MIN_CALLS` calls are left out.

`<corpus>-queue`: the conversations in file-name (start time) order one after another
(`prompt_queues`: one system message, cut at conversation boundaries near every
`--queue-calls` calls).

    python -m bench.geminicli --out /tmp/gen66/out \
        --repo /work/.mirror/mischa-thisness+M-Gemini/repo
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from bench.chat_corpus import (
    CallIds,
    Message,
    RepoReader,
    assistant_message,
    convert_per_call,
    converter_main,
)
from bench.toolathlon import TOOL_CHARS, cut

SOURCE = "mischa-thisness/M-Gemini"
REV = "3bad8d462ef0a93165eb373a44f09a77910e5ecd"
FOLDERS = ("Archives/", "chat_logs/")
CORPUS = "gemini-cli"
AGENT = "Gemini CLI (interactive agent in a terminal; its own chat recordings)"
MIN_CALLS = 3
SYSTEM = ("You are an interactive agent working on the user's machine from a terminal. Use "
          "the tools to run commands, read, search and edit files, and answer the user.")
NO_RESULT = "[no result recorded]"
Recorded = Mapping[str, Any]  # one recorded message: {id, type, content, toolCalls, ...}


def response_text(response: Any) -> str:
    """A `functionResponse`'s `response` as the text the model reads: its `output` or
    `error` string, else its JSON."""
    value = response.get("output", response.get("error")) if isinstance(response, dict) else None
    return value if isinstance(value, str) else orjson.dumps(response).decode()


def result_text(call: Recorded) -> str | None:
    """What a recorded call sent back, each `functionResponse` as text, joined; `None`
    when nothing was."""
    parts = [p.get("functionResponse") for p in call.get("result") or () if isinstance(p, dict)]
    texts = [response_text(f["response"]) for f in parts
             if isinstance(f, dict) and f.get("response") is not None]
    return "\n".join(texts) if texts else None


def reply_of(message: Recorded, ids: CallIds, renamed: dict[str, str]) -> Message:
    """A `gemini` message as an assistant turn: its text and its calls (ids unique)."""
    calls = [(str(c.get("id")), str(c.get("name")),
              orjson.dumps(c.get("args") or {}).decode())
             for c in message.get("toolCalls") or ()]
    return assistant_message(str(message.get("content") or ""), calls, ids, renamed)


def results_of(message: Recorded, renamed: Mapping[str, str],
               counts: Counter[str]) -> list[Message]:
    """A `gemini` message's calls answered, in order (module docstring)."""
    out = []
    for c in message.get("toolCalls") or ():
        text = result_text(c)
        if text is None:
            counts["tool calls without a recorded result (NO_RESULT)"] += 1
            text = NO_RESULT
        out.append({"role": "tool", "tool_call_id": renamed[str(c.get("id"))],
                    "content": cut_counted(text, counts)})
    return out


def cut_counted(text: str, counts: Counter[str]) -> str:
    """`text` cut to `TOOL_CHARS` as the shared corpora's converters cut, counted."""
    if len(text) > TOOL_CHARS:
        counts[f"contents over {TOOL_CHARS:,} characters cut to that"] += 1
    return cut(text)


def conversation_calls(messages: Sequence[Recorded], counts: Counter[str]
                       ) -> list[dict[str, Any]]:
    """A recorded conversation's calls in order, each `{messages, reply, model}`."""
    history: list[Message] = [{"role": "system", "content": SYSTEM}]
    ids, renamed = CallIds(), dict[str, str]()
    calls: list[dict[str, Any]] = []
    for m in messages:
        kind = m.get("type")
        if kind == "user":
            history.append({"role": "user",
                            "content": cut_counted(str(m.get("content") or ""), counts)})
        elif kind == "gemini":
            if history[-1]["role"] == "assistant":
                counts["replies right after a reply without calls (no turn between)"] += 1
            reply = reply_of(m, ids, renamed)
            calls.append({"messages": list(history), "reply": reply, "model": m.get("model")})
            history += [reply, *results_of(m, renamed, counts)]
        else:
            counts[f"{kind} notes (shown, never sent)"] += 1
    return calls


def recordings(reader: RepoReader, rev: str, counts: Counter[str]
               ) -> dict[str, tuple[str, list[Recorded]]]:
    """Per file name, the folder copy with the most messages: `(path, messages)`, in
    file-name order."""
    best: dict[str, tuple[str, list[Recorded]]] = {}
    for folder in FOLDERS:
        for path in reader._git("ls-tree", "-r", "--name-only", rev, folder).splitlines():
            name = PurePosixPath(path).name
            if not (name.startswith("session-") and name.endswith(".json")):
                continue
            if not reader.has(path, rev):
                counts["files absent from the snapshot"] += 1
                continue
            counts["files read"] += 1
            messages = orjson.loads(reader.read(path, rev)).get("messages") or []
            if name in best:
                counts["copies of a file read in the other folder (shorter one left out)"] += 1
                if len(messages) <= len(best[name][1]):
                    continue
            best[name] = (path, messages)
    return dict(sorted(best.items()))


def load(reader: RepoReader, rev: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Every conversation of `MIN_CALLS` calls or more, in file-name order."""
    runs, counts = [], Counter[str]()
    for name, (path, messages) in recordings(reader, rev, counts).items():
        calls = conversation_calls(messages, counts)
        counts["calls read"] += len(calls)
        if len(calls) < MIN_CALLS:
            counts[f"conversations of fewer than {MIN_CALLS} calls"] += 1
            continue
        runs.append({"path": path, "name": name, "calls": calls})
    return runs, counts


def run_session(run: Mapping[str, Any], index: int, commit: str) -> dict[str, Any]:
    """A conversation as a per-call session (module docstring)."""
    last = run["calls"][-1]
    reply = {"role": "assistant", "content": last["reply"]["content"]}
    stem = PurePosixPath(run["name"]).stem.removeprefix("session-")
    models = Counter(c["model"] for c in run["calls"])
    return {"id": f"{CORPUS}/{index:03d}-{stem}", "source": f"{SOURCE}@{commit[:7]}",
            "path": run["path"], "agent": AGENT, "model": models.most_common(1)[0][0],
            "task_id": stem, "tools": [], "messages": [*last["messages"], reply],
            "calls": [{"messages": c["messages"], "reply": c["reply"]} for c in run["calls"]]}


README = """# Gemini CLI (an interactive agent in a terminal, read back from its own chat
recordings): {shape}, per call

Converted by `bench/geminicli.py` (ctxgate) from `session-*.json` in {folders} of {source}
at commit `{commit}`. Licence of the source: CC0-1.0 (its `LICENSE` at that commit,
"Creative Commons Legal Code / CC0 1.0 Universal"). The owner redacted personal data and
secrets before committing (`[REDACTED_...]` stand-ins). Used for measurement only; not part
of the ctxgate repository; do not commit it there.

{stats}; calls per session (a session's `calls`) min / median / max {per_call}.

- Read: {left}. Conversations used: {runs}.
- Each session carries `calls`: per model call (a `gemini` message) the chat it sent,
  rebuilt from the messages before it (the typed requests as user turns, each reply as an
  assistant turn with its calls, each call's `output` or `error` as a tool message), after
  a short neutral system message written by the converter (the CLI's system prompt, its
  opening context turn and its function declarations are not in the files; `tools` is
  empty), and the reply. `thoughts` and `info` / `error` notes are left out. A user turn
  or tool result over 24,000 characters is cut to 24,000 (head two thirds, tail one third,
  the cut count between), as the shared corpora are. `messages` is the last call's list
  and its reply's text.
{join}"""

JOIN_RUNS = "- One session per conversation, in file-name (start time) order.\n"
JOIN_QUEUE = """- Queues: the conversations in file-name order, cut at the conversation boundaries
  nearest each 1/N of their calls, N = calls / {queue_calls} rounded (at least 1). A
  queue's `messages` is the system message once, then each conversation's last list after
  it and its reply, nothing added; its calls are each conversation's calls with the
  earlier conversations' turns before the call's own list.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 50) -> dict[str, int]:
    return convert_per_call(
        repo, out, rev, queue_calls, corpus=CORPUS, load=load, session=run_session,
        none=f"conversation of {MIN_CALLS} calls or more", queue_key="user",
        readme=README, joins=(JOIN_RUNS, JOIN_QUEUE),
        folders=" and ".join(f"`{f}`" for f in FOLDERS), source=SOURCE)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen66/out", REV, 50, convert)


if __name__ == "__main__":
    raise SystemExit(main())
