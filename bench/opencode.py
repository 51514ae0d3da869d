"""OpenCode's own session exports, read back as a corpus folder `bench/replay.py` reads:
each model call of the agent with the conversation it sent.

OpenCode (sst/opencode) is an **interactive coding agent in a terminal**: a developer types
a request (files named with `@` are read into it as extra user text), the model answers with
text and tool calls (`read`, `edit`, `write`, `bash`, `grep`, `glob`, `task`, ...), the
results go back to the model, and the loop runs until the model answers without a tool call;
then the developer types again. `opencode export` writes a session as JSON: `messages`, each
`{info, parts}`; a user message's parts are its texts (`synthetic` ones written by OpenCode,
such as a named file's content) and files; each **assistant message is one model call** (one
`step-start` part, then `reasoning`, `text` and `tool` parts, the tool's `state` holding its
input and output). Two ways OpenCode **edits what it sends** are recorded too:

- *pruning*: at the end of a turn, tool outputs older than the last two user turns beyond
  a budget are marked `state.time.compacted`; from then on the model is sent
  `[Old tool result content cleared]` in their place;
- *compaction*: a user message with a `compaction` part asks for a summary (an assistant
  message with `summary: true`); later calls send only that user turn (as the text
  `What did we do so far?`), the summary and what follows.

The source is a project that committed its developer's OpenCode exports
(`victoryforphil/dark-factory`, MIT, `docs/chats/opencode/*.json`). Here, as OpenCode's
`MessageV2.toModelMessages` builds a call's messages from the messages before it:

- a user message is one user turn: its text parts not `ignored` (one text as a string,
  more as a list of text parts); `text/plain` and directory files are left out (their
  content is among the synthetic texts); another file (an image: OpenCode sends the file
  itself; none in the source) as a text part `[file: NAME]`;
- an assistant message is an assistant turn (its texts joined; its tool parts as tool
  calls, the input as JSON) and one tool message per tool part: the output (cleared when
  pruned before the call), the error text, or `[Tool execution was interrupted]` for a
  call left running; `reasoning` parts are left out (an OpenAI chat has no place for them;
  OpenCode sends the provider's reasoning items back); an assistant message that ended in
  an error is left out, unless it was aborted after writing more than reasoning;
- **not recorded, so written here**: the system message (a short neutral statement;
  OpenCode's own system prompt and tool definitions are not in the exports: `tools` is
  empty), and for a compaction call the instruction OpenCode adds after the history
  (the call here ends with the user turn `What did we do so far?`);
- a session is written as a **per-call session** (`calls`: each call's list and its reply;
  `messages`: the last call's list and its reply, without the reply's tool calls, whose
  results are not in that list): pruning and compaction change earlier turns, so the calls
  are not prefixes of one chat. Sessions of fewer than `MIN_CALLS` calls are left out.

`<corpus>-queue`: the sessions in file order one after another (`prompt_queues`: one system
message, cut at session boundaries near every `--queue-calls` calls).

    python -m bench.opencode --out /tmp/gen65/out \
        --repo /work/.mirror/victoryforphil+dark-factory/repo
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.chat_corpus import (
    Message,
    RepoReader,
    convert_per_call,
    converter_main,
)

SOURCE = "victoryforphil/dark-factory"
REV = "65455d08a318249d4626917c438f22a03882e002"
FOLDER = "docs/chats/opencode/"
CORPUS = "opencode"
AGENT = "OpenCode (interactive coding agent; its own session exports)"
MIN_CALLS = 3
SYSTEM = ("You are an interactive coding agent working in the user's repository from a "
          "terminal. Use the tools to read, search, edit and run code, and answer the user.")
CLEARED = "[Old tool result content cleared]"
INTERRUPTED = "[Tool execution was interrupted]"
COMPACTION_ASK = "What did we do so far?"
SUBTASK_NOTE = "The following tool was executed by the user"
INLINED_FILES = ("text/plain", "application/x-directory")
Part = Mapping[str, Any]
Recorded = Mapping[str, Any]  # one exported message: {info, parts}


def user_turn(parts: Sequence[Part]) -> Message | None:
    """A user message as one user turn (module docstring); `None` when nothing is sent."""
    texts = []
    for p in parts:
        if p["type"] == "text" and not p.get("ignored"):
            texts.append(str(p.get("text") or ""))
        elif p["type"] == "file" and p.get("mime") not in INLINED_FILES:
            texts.append(f"[file: {p.get('filename') or 'file'}]")
        elif p["type"] == "compaction":
            texts.append(COMPACTION_ASK)
        elif p["type"] == "subtask":
            texts.append(SUBTASK_NOTE)
    if not texts:
        return None
    content: Any = texts[0] if len(texts) == 1 else [{"type": "text", "text": t}
                                                     for t in texts]
    return {"role": "user", "content": content}


def tool_output(state: Mapping[str, Any], at: int) -> str:
    """What a tool part sent back to a call made at time `at` (milliseconds)."""
    status = state.get("status")
    if status == "completed":
        compacted = (state.get("time") or {}).get("compacted")
        return CLEARED if compacted and compacted <= at else str(state.get("output") or "")
    if status == "error":
        meta = state.get("metadata") or {}
        if meta.get("interrupted") is True and isinstance(meta.get("output"), str):
            return str(meta["output"])
        return str(state.get("error") or "")
    return INTERRUPTED


def reply_of(parts: Sequence[Part]) -> Message:
    """An assistant message's texts and tool calls as one assistant turn."""
    texts, calls = [], []
    for p in parts:
        if p["type"] == "text":
            texts.append(str(p.get("text") or ""))
        elif p["type"] == "tool":
            calls.append({"id": str(p["callID"]), "type": "function",
                          "function": {"name": str(p["tool"]), "arguments": orjson.dumps(
                              (p.get("state") or {}).get("input") or {}).decode()}})
    msg: Message = {"role": "assistant", "content": "".join(texts)}
    if calls:
        msg["tool_calls"] = calls
    return msg


def sent_again(message: Recorded) -> bool:
    """Whether an assistant message is part of later calls' history: not when it ended in
    an error, unless it was aborted after writing more than reasoning."""
    error = message["info"].get("error")
    if not error:
        return True
    return error.get("name") == "MessageAbortedError" and any(
        p["type"] not in ("step-start", "reasoning") for p in message["parts"])


def assistant_turns(message: Recorded, at: int) -> list[Message]:
    """An assistant message as a later call made at `at` sees it: the turn, then each
    tool part's result; empty when it is not sent again or holds nothing to send."""
    if not sent_again(message):
        return []
    reply = reply_of(message["parts"])
    if not reply["content"] and not reply.get("tool_calls"):
        return []
    results = [{"role": "tool", "tool_call_id": str(p["callID"]),
                "content": tool_output(p.get("state") or {}, at)}
               for p in message["parts"] if p["type"] == "tool"]
    return [reply, *results]


def since_compaction(history: Sequence[Recorded]) -> Sequence[Recorded]:
    """The messages a call still sends: from the last user message whose compaction was
    summarised (a finished summary without error answers it) on; all when none was."""
    summarised = {m["info"].get("parentID") for m in history
                  if m["info"]["role"] == "assistant" and m["info"].get("summary") is True
                  and m["info"].get("finish") and not m["info"].get("error")}
    for i in range(len(history) - 1, -1, -1):
        m = history[i]
        if m["info"]["role"] == "user" and m["info"]["id"] in summarised and any(
                p["type"] == "compaction" for p in m["parts"]):
            return history[i:]
    return history


def chat_before(history: Sequence[Recorded], at: int) -> list[Message]:
    """The messages of a call made at `at` after `history` (module docstring)."""
    out: list[Message] = [{"role": "system", "content": SYSTEM}]
    for m in since_compaction(history):
        if m["info"]["role"] == "user":
            turn = user_turn(m["parts"])
            out += [turn] if turn else []
        else:
            out += assistant_turns(m, at)
    return out


def export_calls(messages: Sequence[Recorded], counts: Counter[str]) -> list[dict[str, Any]]:
    """An export's calls in order: each assistant message that started a step (the request
    went out), with the chat it sent and its reply."""
    calls = []
    for i, m in enumerate(messages):
        info = m["info"]
        if info["role"] != "assistant":
            continue
        if not any(p["type"] == "step-start" for p in m["parts"]):
            counts["assistant messages without a step (no request sent)"] += 1
            continue
        at = int((info.get("time") or {}).get("created") or 0)
        calls.append({"messages": chat_before(messages[:i], at),
                      "reply": reply_of(m["parts"]), "model": info.get("modelID")})
        if info.get("summary") is True:
            counts["compaction (summary) calls"] += 1
        if info.get("error"):
            counts[f"calls ending in {info['error'].get('name')}"] += 1
        counts["tool outputs cleared by pruning, as sent"] += sum(
            1 for t in calls[-1]["messages"] if t["role"] == "tool" and t["content"] == CLEARED)
    return calls


def load(reader: RepoReader, rev: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Every export of the folder at `rev` with `MIN_CALLS` calls or more, in path order."""
    paths = sorted(p for p in reader._git("ls-tree", "-r", "--name-only", rev, FOLDER)
                   .splitlines() if p.endswith(".json"))
    runs, counts = [], Counter[str]()
    for path in paths:
        export = orjson.loads(reader.read(path, rev))
        counts["exports read"] += 1
        calls = export_calls(export["messages"], counts)
        counts["calls read"] += len(calls)
        if len(calls) < MIN_CALLS:
            counts[f"exports of fewer than {MIN_CALLS} calls"] += 1
            continue
        runs.append({"path": path, "info": export["info"], "calls": calls})
    return runs, counts


def run_session(run: Mapping[str, Any], index: int, commit: str) -> dict[str, Any]:
    """An export as a per-call session (module docstring)."""
    last = run["calls"][-1]
    reply = {"role": "assistant", "content": last["reply"]["content"]}
    models = Counter(c["model"] for c in run["calls"])
    return {"id": f"{CORPUS}/{index:03d}-{run['info'].get('slug') or 'session'}",
            "source": f"{SOURCE}@{commit[:7]}", "path": run["path"], "agent": AGENT,
            "model": models.most_common(1)[0][0], "task_id": run["info"].get("id"),
            "tools": [], "messages": [*last["messages"], reply],
            "calls": [{"messages": c["messages"], "reply": c["reply"]} for c in run["calls"]]}


README = """# OpenCode (an interactive coding agent, read back from its own session exports):
{shape}, per call

Converted by `bench/opencode.py` (ctxgate) from `{folder}*.json` in {source} at commit
`{commit}`. Licence of the source: MIT (its `LICENSE` at that commit, "Copyright (c) 2026
Alex Carter"). Used for measurement only; not part of the ctxgate repository; do not commit
it there.

{stats}; calls per session (a session's `calls`) min / median / max {per_call}.

- Read: {left}. Sessions used: {runs}.
- Each session carries `calls`: per model call (an assistant message that started a step)
  the chat it sent, rebuilt from the messages before it as OpenCode builds it (tool outputs
  pruned before the call as `[Old tool result content cleared]`; after a compaction, only
  the compaction turn, the summary and what follows), after a short neutral system message
  written by the converter (OpenCode's system prompt and tool definitions are not in the
  exports; `tools` is empty), and the reply. `reasoning` parts are left out. `messages` is
  the last call's list and its reply's text.
{join}"""

JOIN_RUNS = "- One session per export, in path order.\n"
JOIN_QUEUE = """- Queues: the sessions in path order, cut at the session boundaries nearest each
  1/N of their calls, N = calls / {queue_calls} rounded (at least 1). A queue's `messages`
  is the system message once, then each session's last list after it and its reply,
  nothing added; its calls are each session's calls with the earlier sessions' turns before
  the call's own list.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 50) -> dict[str, int]:
    return convert_per_call(
        repo, out, rev, queue_calls, corpus=CORPUS, load=load, session=run_session,
        none=f"export of {MIN_CALLS} calls or more", queue_key="dev",
        readme=README, joins=(JOIN_RUNS, JOIN_QUEUE),
        folder=FOLDER, source=SOURCE)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen65/out", REV, 50, convert)


if __name__ == "__main__":
    raise SystemExit(main())
