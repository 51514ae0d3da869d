"""Claude Code's own session files, read back as a corpus folder `bench/replay.py` reads:
each model call of the agent with the conversation it sent.

Claude Code (Anthropic) is an **interactive coding agent in a terminal**: a developer
types a request, the model answers with text and tool calls (`Read`, `Edit`, `Write`,
`Bash`, `Grep`, `Glob`, `TodoWrite`, `Task`, ...), the results come back as the next user
turn, and the loop runs until the model answers without a tool call; then the developer
types again. `Task` starts a **sub-agent** with a chat of its own (a *sidechain*); a
long conversation is **compacted**: a summary opens a fresh chat. The agent appends every
entry to `~/.claude/projects/<dir>/<session>.jsonl`: the developer's turns, each block of
each model reply (one entry per block, the reply's `message.id` on each), each tool result,
each with `uuid` and `parentUuid` (the entry it follows).

The source is a project that committed its developer's Claude Code files
(`Durban-Designer/vsla`, MIT, `docs/history/raw_sessions/`). Here

- a **call** is one model reply (its `message.id`): what it sent is the chain of entries
  from the reply's first entry back through `parentUuid` to a root, as chat messages
  (the developer's text and `isMeta` notes as user turns; reply blocks of one `message.id`
  merged into one assistant turn, text blocks joined, `tool_use` blocks as tool calls with
  the input as JSON; each `tool_result` as a tool message; a text or image block beside
  results as a user turn after them, an image as `[image]`); `thinking` blocks are left
  out (an OpenAI chat has no place for them); entries that are not chat turns (`system`
  notes such as compaction boundaries, `summary`, file snapshots) are skipped;
- a **run** is the calls that share a root: the main chat, each sub-agent's chat, each
  chat after a compaction (its summary is the root's user turn);
- **not recorded, so written here**: the system message (a short neutral statement; Claude
  Code's own system prompt and tool definitions are not in the files: `tools` is empty) and,
  where a tool call has no recorded result before the next turn, a tool message
  `[no result recorded]` (counted in the README);
- a run is written as a **per-call session** (`calls`: each call's list and its reply;
  `messages`: the last call's list and its reply, without the reply's tool calls, whose
  results are not in that list). Runs of fewer than `MIN_CALLS` calls are left out.

`<corpus>-queue`: the runs in file order one after another (`prompt_queues`: one system
message, cut at run boundaries near every `--queue-calls` calls).

    python -m bench.claudecode --out /tmp/gen64b/out \
        --repo /work/.mirror/Durban-Designer+vsla/repo
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.chat_corpus import (
    CallIds,
    Message,
    RepoReader,
    convert_per_call,
    converter_main,
)

SOURCE = "Durban-Designer/vsla"
REV = "18ef9cb1ee87f803e85e820b243f5ee56f3b062f"
FOLDER = "docs/history/raw_sessions/"
CORPUS = "claude-code"
AGENT = "Claude Code (interactive coding agent; main chats, sub-agent chats, compacted chats)"
MIN_CALLS = 3
SYSTEM = ("You are an interactive coding agent working in the user's repository from a "
          "terminal. Use the tools to read, search, edit and run code, and answer the user.")
NO_RESULT = "[no result recorded]"


def text_of(content: Any) -> str:
    """A tool result's or a user turn's content as text (images as `[image]`)."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content or ():
        if isinstance(block, str):
            parts.append(block)
        elif block.get("type") == "text":
            parts.append(str(block.get("text") or ""))
        elif block.get("type") == "image":
            parts.append("[image]")
    return "\n".join(parts)


def user_turns(content: Any) -> list[Message]:
    """A user entry as chat messages: its tool results first, then any text beside them."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    out: list[Message] = []
    rest = []
    for block in content or ():
        if isinstance(block, dict) and block.get("type") == "tool_result":
            out.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id")),
                        "content": text_of(block.get("content"))})
        else:
            rest.append(block)
    if rest:
        out.append({"role": "user", "content": text_of(rest)})
    return out


def reply_of(entries: Sequence[Mapping[str, Any]]) -> Message:
    """One model reply from its entries (one content block each, in order)."""
    texts, calls = [], []
    for e in entries:
        for block in e["message"].get("content") or ():
            if block.get("type") == "text":
                texts.append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                calls.append({"id": str(block.get("id")), "type": "function",
                              "function": {"name": str(block.get("name")),
                                           "arguments": orjson.dumps(
                                               block.get("input") or {}).decode()}})
    msg: Message = {"role": "assistant", "content": "\n\n".join(texts)}
    if calls:
        msg["tool_calls"] = calls
    return msg


def chain(entry: Mapping[str, Any], by_uuid: Mapping[str, Mapping[str, Any]],
          counts: Counter[str]) -> list[Mapping[str, Any]]:
    """The entries before `entry`, root first (`parentUuid` links)."""
    out, seen, parent = [], set(), entry.get("parentUuid")
    while parent:
        if parent in seen:
            counts["parent loops cut"] += 1
            break
        seen.add(parent)
        found = by_uuid.get(parent)
        if found is None:
            counts["chains cut at a parent not in the file"] += 1
            break
        out.append(found)
        parent = found.get("parentUuid")
    return out[::-1]


def answered(messages: list[Message], counts: Counter[str]) -> list[Message]:
    """Every tool call answered right after its assistant turn (a missing result becomes
    `NO_RESULT`), a result answering no open call dropped, call ids unique."""
    out: list[Message] = []
    open_ids: list[str] = []
    ids, renamed = CallIds(), dict[str, str]()

    def close() -> None:
        for cid in open_ids:
            out.append({"role": "tool", "tool_call_id": cid, "content": NO_RESULT})
            counts["tool calls without a recorded result (NO_RESULT)"] += 1
        open_ids.clear()

    for m in messages:
        if m["role"] == "tool":
            cid = renamed.get(m["tool_call_id"])
            if cid in open_ids:
                open_ids.remove(cid)
                out.append({**m, "tool_call_id": cid})
            else:
                counts["tool results answering no open call (dropped)"] += 1
            continue
        close()
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                new = renamed[c["id"]] = ids.new(c["id"])
                calls.append({**c, "id": new})
                open_ids.append(new)
            m = {**m, "tool_calls": calls}
        out.append(m)
    close()
    return out


def messages_of(entries: Iterable[Mapping[str, Any]]) -> list[Message]:
    """A chain of entries as chat messages (module docstring)."""
    out: list[Message] = []
    reply: list[Mapping[str, Any]] = []
    for e in [*entries, {}]:
        kind = e.get("type")
        if reply and (kind != "assistant" or e["message"].get("id") != reply[0]["message"]
                      .get("id")):
            out.append(reply_of(reply))
            reply = []
        if kind == "assistant":
            reply.append(e)
        elif kind == "user":
            out += user_turns(e["message"].get("content"))
    return out


def file_calls(lines: Iterable[bytes], counts: Counter[str]) -> list[dict[str, Any]]:
    """A session file's calls in file order, each `{root, messages, reply, model}`."""
    every = [orjson.loads(line) for line in lines if line.strip()]
    by_uuid = {e["uuid"]: e for e in every if e.get("uuid")}
    entries = []
    for entry in every:
        if entry.get("type") in ("user", "assistant") and entry.get("message"):
            entries.append(entry)
        else:
            counts[f"{entry.get('type')} entries"] += 1
    replies: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        if e["type"] == "assistant":
            replies.setdefault(str(e["message"].get("id") or e.get("uuid")), []).append(e)
    calls = []
    for blocks in replies.values():
        before = chain(blocks[0], by_uuid, counts)
        if not before:
            counts["replies with nothing before them"] += 1
            continue
        system = {"role": "system", "content": SYSTEM}
        sent = answered([system, *messages_of(before)], counts)
        calls.append({"root": before[0].get("uuid"), "side": bool(blocks[0].get("isSidechain")),
                      "messages": sent, "reply": reply_of(blocks),
                      "model": blocks[0]["message"].get("model")})
    return calls


def runs_of(path: str, calls: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A file's calls grouped by the root they go back to, in order of first call."""
    runs: dict[str, dict[str, Any]] = {}
    for c in calls:
        run = runs.setdefault(str(c["root"]), {"path": path, "side": c["side"], "calls": []})
        run["calls"].append({"messages": c["messages"], "reply": c["reply"]})
        run.setdefault("models", Counter())[c["model"]] += 1
    return list(runs.values())


def load(reader: RepoReader, rev: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Every session file of the folder at `rev`, its runs of `MIN_CALLS` calls or more."""
    paths = [p for p in reader._git("ls-tree", "-r", "--name-only", rev, FOLDER).splitlines()
             if p.endswith(".jsonl")]
    runs, counts = [], Counter[str]()
    for path in paths:
        if not reader.has(path, rev):
            counts["files absent from the snapshot"] += 1
            continue
        counts["files read"] += 1
        calls = file_calls(reader.read(path, rev).encode().splitlines(), counts)
        counts["calls read"] += len(calls)
        for run in runs_of(path, calls):
            if len(run["calls"]) < MIN_CALLS:
                counts[f"runs of fewer than {MIN_CALLS} calls"] += 1
                continue
            runs.append(run)
    return runs, counts


def run_session(run: Mapping[str, Any], index: int, commit: str) -> dict[str, Any]:
    """A run as a per-call session (module docstring)."""
    last = run["calls"][-1]
    reply = {"role": "assistant", "content": last["reply"]["content"]}
    stem = Path(run["path"]).stem[:8]
    model = run["models"].most_common(1)[0][0]
    return {"id": f"{CORPUS}/{index:03d}-{stem}{'-side' if run['side'] else ''}",
            "source": f"{SOURCE}@{commit[:7]}", "path": run["path"], "agent": AGENT,
            "model": model, "task_id": Path(run["path"]).stem, "tools": [],
            "messages": [*last["messages"], reply], "calls": [dict(c) for c in run["calls"]]}


README = """# Claude Code (an interactive coding agent, read back from its own session files):
{shape}, per call

Converted by `bench/claudecode.py` (ctxgate) from `{folder}**/*.jsonl` in {source} at
commit `{commit}`. Licence of the source: MIT (its `LICENSE` at that commit, "Copyright (c)
2025 libvsla contributors"). Used for measurement only; not part of the ctxgate repository;
do not commit it there.

{stats}; calls per run min / median / max {per_call}.

- Read: {left}. Runs used: {runs} ({side} of them sub-agent chats).
- Each session carries `calls`: per model reply the chat it answered (the entries before
  it through `parentUuid`, as chat messages) after a short neutral system message written
  by the converter (Claude Code's system prompt and tool definitions are not in the files;
  `tools` is empty), and the reply. `thinking` blocks are left out. `messages` is the last
  call's list and its reply's text.
{join}"""

JOIN_RUNS = "- One session per run (a main chat, a sub-agent chat, a chat after compaction).\n"
JOIN_QUEUE = """- Queues: the runs in file order, cut at the run boundaries nearest each 1/N of
  their calls, N = calls / {queue_calls} rounded (at least 1). A session's `messages` is the
  system message once, then each run's last list after it and its reply, nothing added; its
  calls are each run's calls with the earlier runs' turns before the call's own list.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 50) -> dict[str, int]:
    return convert_per_call(
        repo, out, rev, queue_calls, corpus=CORPUS, load=load, session=run_session,
        none=f"run of {MIN_CALLS} calls or more", queue_key="dev",
        readme=README, joins=(JOIN_RUNS, JOIN_QUEUE),
        fields=lambda runs: {"side": sum(r["side"] for r in runs)}, folder=FOLDER, source=SOURCE)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen64b/out", REV, 50, convert)


if __name__ == "__main__":
    raise SystemExit(main())
