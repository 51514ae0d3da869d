"""Moatless Tools' recorded SWE-bench Lite runs (`evaluations/20241117_...`) as corpus
folders `bench/replay.py` reads.

Moatless Tools (`aorwall/moatless-tools`, MIT) is a **code-search-and-edit agent** for
GitHub issues: a system prompt naming the project ("You are an autonomous AI assistant and a
core member of the development team for the django/django project ..."), the issue as a user
turn (`<task>...</task>`), then one tool call a step with its `<thoughts>` as text:
`FindClass`, `FindFunction`, `FindCodeSnippet`, `SemanticSearch` (its own index of the
repository: the answer is the matching code spans, already cut to what is relevant),
`ViewCode`, `str_replace_editor`, `RunTests`, `Finish`; each result comes back as a
`tool_result` (`<observation>...</observation>`). The model is Anthropic's Claude 3.5
Sonnet (`claude-3-5-sonnet-20241022`) with prompt caching (`cache_control` on the two newest
messages).

Its SWE-bench Lite submission of 2024-11-17 (moatless-tools 0.0.4, CodingAgent) was committed
to the repository (commit `91f8741`, "..._claude_3_5_sonnet_20241022 trajectories"): one
`trajectory.json` per instance, its nodes in order, each node's `completions.build_action`
holding **the messages the agent sent** (`input`, the system prompt apart in
`agent.system_prompt`) and the reply (`response`). A run is kept when it has at least
`MIN_CALLS` such calls and each call's messages, without the `cache_control` markers, are
exactly the prefix of the last call's messages of the same length; the session is the
system prompt, the last call's messages and the last reply. Runs where a later call's history
differs at an older turn (the agent went back and redid a step) are left out and counted.
The `execute_action` completions (model calls made inside a search action, with prompts of
their own) are not part of the chat and are left out.

Conversion (Anthropic content blocks to the corpora's shape):

- `tool_use` blocks -> tool calls (`arguments`: the recorded input as JSON); `tool_result`
  blocks -> `tool` messages answering them; text blocks -> the message's content.
- the last reply's tool call, which no recorded message answers (the run ends there, often
  with `Finish`), is written as the reply's text: `Name(<arguments>)` after its thoughts.
- no `tools`: the tool definitions were sent but are not in the trajectories.

This converter writes, outside the repository,

- `<out>/moatless/sessions.jsonl`: one session per kept run, in instance order;
- `<out>/moatless-queue/sessions.jsonl`: per system prompt (one a project), its runs one
  after another, cut at the run boundaries nearest each 1/N of the group's calls, N = calls /
  `--queue-calls` rounded;

each with a `README.md` saying where it came from and how it was converted. With
`--per-call`, instead `<out>/moatless-redo/sessions.jsonl`: the runs left out as not one chat
(the agent redid an earlier step), each with its recorded calls as sent (`calls`,
`bench/corpora.py`'s per-call shape: per call its message list, ids made unique within the
call in order, so an unchanged part of the history keeps its ids, and the reply that answered
it; the last reply as in the default folders), `messages` the last call and its reply:

    python -m bench.moatless --repo /work/.mirror/aorwall+moatless-tools/repo --out /tmp/gen56
    python -m bench.moatless --repo /work/.mirror/aorwall+moatless-tools/repo --out /tmp/gen56 \
        --per-call
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.chat_corpus import (
    CallIds,
    Message,
    RepoReader,
    assistant_message,
    corpus_stats,
    join_queues,
    run_conversion,
    write_corpus,
    write_runs_and_queues,
)
from bench.crewai import read_blobs

SOURCE = "aorwall/moatless-tools"
REV = "91f874186e8298e5270c00a334c7a962bb4cdfad"  # "20241117_... trajectories"
EVALUATION = "evaluations/20241117_moatless_claude_3_5_sonnet_20241022"
CORPUS = "moatless"
MIN_CALLS = 3
AGENT = "Moatless Tools CodingAgent (Anthropic tool use)"


def is_trajectory(path: str) -> bool:
    return path.startswith(f"{EVALUATION}/") and path.endswith("/trajectory.json")


def trajectory_files(reader: RepoReader, rev: str) -> list[tuple[str, bytes | None]]:
    """`(path, bytes)` of the trajectory files (`is_trajectory`) at `rev` (git; `None` for
    a blob the snapshot lacks, its largest files), or of a checkout; in path order."""
    if not reader.git:
        return sorted((str(p.relative_to(reader.root)), p.read_bytes())
                      for p in reader.root.rglob("trajectory.json")
                      if is_trajectory(str(p.relative_to(reader.root))))
    listing = reader._git("ls-tree", "-r", rev, "--", EVALUATION)
    blobs = [(line.split()[2], line.partition("\t")[2]) for line in listing.splitlines()]
    blobs = [(blob, path) for blob, path in blobs if is_trajectory(path)]
    found = zip([p for _, p in blobs], read_blobs(reader.root, [b for b, _ in blobs]),
                strict=True)
    return sorted(found, key=lambda x: x[0])


def uncached(value: Any) -> Any:
    """A recorded message without its `cache_control` markers (wire metadata the agent
    moves to the two newest messages on every call)."""
    if isinstance(value, dict):
        return {k: uncached(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [uncached(v) for v in value]
    return value


def text_of(content: Any) -> str:
    """A block list's (or a string's) text, text blocks joined by a blank line."""
    if isinstance(content, str):
        return content
    return "\n\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")


def arguments(block: Mapping[str, Any]) -> str:
    return json.dumps(block.get("input") or {}, ensure_ascii=False)


def messages_of(sent: Sequence[Mapping[str, Any]], ids: CallIds) -> list[Message]:
    """Anthropic messages in the corpora's shape (module docstring); tool-call ids made
    unique by `ids`, the results renamed alike."""
    out: list[Message] = []
    renamed: dict[str, str] = {}
    for m in sent:
        content = m["content"]
        if m["role"] == "assistant":
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            calls = [(str(b["id"]), str(b["name"]), arguments(b))
                     for b in blocks if b.get("type") == "tool_use"]
            out.append(assistant_message(text_of(blocks) or None, calls, ids, renamed))
            continue
        if m["role"] != "user":
            raise ValueError(f"unexpected role {m['role']!r}")
        if isinstance(content, str):
            out.append({"role": "user", "content": content})
            continue
        for b in content:
            if b.get("type") == "tool_result":
                out.append({"role": "tool", "tool_call_id": renamed[str(b["tool_use_id"])],
                            "content": text_of(b.get("content") or "")})
        text = text_of(content)
        if text:
            out.append({"role": "user", "content": text})
    return out


def last_reply(response: Mapping[str, Any]) -> Message:
    """The run's last reply: its thoughts, then each tool call as `Name(<arguments>)` (no
    recorded message answers it)."""
    blocks = response.get("content") or []
    parts = [text_of(blocks)] if text_of(blocks) else []
    parts += [f"{b['name']}({arguments(b)})" for b in blocks if b.get("type") == "tool_use"]
    return {"role": "assistant", "content": "\n".join(parts)}


def calls_of(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The agent's chat calls (`build_action` completions), in node order."""
    return [node["completions"]["build_action"] for node in doc.get("nodes") or []
            if (node.get("completions") or {}).get("build_action")]


def chat_of(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    """The last call's messages (uncached), if every call's are its prefix; else `None`."""
    sent = [uncached(c["input"]) for c in calls]
    last = sent[-1]
    if any(last[:len(s)] != s for s in sent):
        return None
    return list(last)


def is_tree(doc: Mapping[str, Any]) -> bool:
    nodes = doc.get("nodes") or []
    return any(n.get("parent_id") != (nodes[i - 1]["node_id"] if i else None)
               for i, n in enumerate(nodes))


def reply_of(response: Mapping[str, Any], ids: CallIds) -> Message:
    """A call's recorded reply as an assistant message (its thoughts, its tool calls), ids
    made unique by `ids` (those of the call's own messages)."""
    blocks = response.get("content") or []
    calls = [(str(b["id"]), str(b["name"]), arguments(b))
             for b in blocks if b.get("type") == "tool_use"]
    return assistant_message(text_of(blocks) or None, calls, ids, {})


def per_call(system: str, calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each call as sent (`{"messages", "reply"}`): the system prompt, its messages (ids
    unique within the call, in order) and its reply; the last reply as `last_reply`."""
    out = []
    for k, c in enumerate(calls):
        ids = CallIds()
        messages = [{"role": "system", "content": system},
                    *messages_of(uncached(c["input"]), ids)]
        reply = last_reply(c["response"]) if k == len(calls) - 1 else \
            reply_of(c["response"], ids)
        out.append({"messages": messages, "reply": reply})
    return out


def load(reader: RepoReader, rev: str, *, redo: bool = False
         ) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The kept runs, in instance order, and what was counted on the way. With `redo`,
    instead the runs left out as not one chat, each with its calls as sent (`per_call`)."""
    counts: Counter[str] = Counter()
    runs = []
    for path, data in trajectory_files(reader, rev):
        counts["trajectory files"] += 1
        if data is None:
            counts["absent from the snapshot"] += 1
            continue
        doc = orjson.loads(data)
        calls = calls_of(doc)
        if len(calls) < MIN_CALLS:
            counts[f"of fewer than {MIN_CALLS} calls"] += 1
            continue
        sent = chat_of(calls)
        if sent is None:
            counts["not one chat (an older turn differs in a later call"
                   + (", node tree branching)" if is_tree(doc) else ")")] += 1
            if not redo:
                continue
        elif redo:
            continue
        agent = doc.get("agent") or {}
        if redo:
            instance = str((doc.get("metadata") or {}).get("instance_id")
                           or path.split("/")[-2])
            runs.append({"id": f"{CORPUS}-redo/{instance}", "path": path,
                         "model": calls[-1].get("model")
                         or (agent.get("completion") or {}).get("model"),
                         "calls": per_call(str(agent["system_prompt"]), calls)})
            continue
        instance = str((doc.get("metadata") or {}).get("instance_id")
                       or path.split("/")[-2])
        run = {"id": f"{CORPUS}/{instance}", "path": path, "instance": instance,
                     "system": str(agent["system_prompt"]), "sent": sent,
                     "reply": calls[-1]["response"],
                     "model": calls[-1].get("model")
                     or (agent.get("completion") or {}).get("model"),
                     "inner": sum(1 for n in doc.get("nodes") or []
                                  if (n.get("completions") or {}).get("execute_action"))}
        if len(calls) > run_calls(run):
            counts["calls sent again with the same messages (kept once)"] += (
                len(calls) - run_calls(run))
        runs.append(run)
    return runs, counts


def run_calls(run: Mapping[str, Any]) -> int:
    """The run's model calls: its assistant turns, the last reply too."""
    return sum(1 for m in run["sent"] if m["role"] == "assistant") + 1


def session_messages(run: Mapping[str, Any], ids: CallIds) -> list[Message]:
    """A run's messages after its system prompt: the last call's, then the last reply."""
    return [*messages_of(run["sent"], ids), last_reply(run["reply"])]


def tally(sessions: Sequence[Mapping[str, Any]]) -> Counter[str]:
    """Tool calls by name (the last replies' calls, written as text, not counted)."""
    out: Counter[str] = Counter()
    for s in sessions:
        for m in s["messages"]:
            for c in m.get("tool_calls") or ():
                out[c["function"]["name"]] += 1
    return out


README = """# Moatless Tools (code search and edit agent, SWE-bench Lite): {shape}

Converted by `bench/moatless.py` (ctxgate) from `{evaluation}/*/trajectory.json` at commit
`{commit}` of {source}. Licence of the source: MIT (its `LICENSE`). Used for measurement
only; not part of the ctxgate repository; do not commit it there.

{stats}.

- One recorded run per SWE-bench Lite instance (moatless-tools 0.0.4 CodingAgent, model
  {models}). Each node's `completions.build_action.input` is the message list the agent
  sent; kept: {kept} runs of at least {min_calls} calls whose calls' lists (without the
  `cache_control` markers the agent moves to the two newest messages) are each a prefix of
  the last call's list. The session is `agent.system_prompt`, the last call's list and the
  last reply. Counted: {counts}.
- Anthropic blocks -> the corpora's shape: `tool_use` -> tool calls (`arguments`: the
  recorded input as JSON), `tool_result` -> `tool` messages, text blocks -> content. The last
  reply's tool call (never answered) is written as its text, `Name(<arguments>)`, after its
  thoughts. **No `tools`**: the definitions were sent but not recorded.
- Tool calls by name: {names}. {twice} runs send the issue twice (two user turns) as
  recorded. Left out: {inner} model calls made inside search actions (`execute_action`,
  prompts of their own).
{join}"""

JOIN_RUNS = "- One session per run, in instance order.\n"
JOIN_QUEUE = """- Queues: per system prompt (one a project), its runs in instance order, cut at
  the run boundaries nearest each 1/N of the group's calls, N = calls / {queue_calls}
  rounded. A session is the system prompt once, then each run's messages after it in order, nothing
  added: the next run's issue follows the previous run's last reply.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 250
            ) -> dict[str, int]:
    reader = RepoReader(repo, "README.md")
    commit = reader._git("rev-parse", rev).strip() if reader.git else rev
    runs, counts = load(reader, rev)
    if not runs:
        raise ValueError(f"{repo}@{rev}: no run of {MIN_CALLS} calls or more")
    source = f"{SOURCE}@{commit[:7]}"

    def session(sid: str, r: Mapping[str, Any], messages: list[Message],
                path: str | None) -> dict[str, Any]:
        return {"id": sid, "source": source, "path": path, "agent": AGENT,
                "model": r["model"], "task_id": r["instance"] if path else None,
                "tools": [], "messages": messages}

    per_run = []
    for r in runs:
        ids = CallIds()
        per_run.append(session(r["id"], r, [{"role": "system", "content": r["system"]},
                                            *session_messages(r, ids)], r["path"]))
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault(r["system"], []).append(r)
    by_name = {group[0]["instance"].rpartition("-")[0]: group for group in groups.values()}
    joined, _ = join_queues(
        by_name, calls=run_calls,
        parts=lambda total: round(total / queue_calls),
        system=lambda r: str(r["system"]), messages=session_messages,
        name=lambda key, q, _g: f"{CORPUS}-queue/{key}/q{q:02d}",
    )
    queues = [session(sid, by_name[sid.split("/")[1]][0], messages, None)
              for sid, messages in joined]
    fields = {
        "evaluation": EVALUATION, "source": SOURCE, "commit": commit, "kept": len(runs),
        "min_calls": MIN_CALLS,
        "models": ", ".join(f"`{m}`" for m in sorted({str(r["model"]) for r in runs})),
        "counts": "; ".join(f"{k} {v}" for k, v in sorted(counts.items())),
        "names": ", ".join(f"`{k}` {v}" for k, v in tally(per_run).most_common()),
        "twice": sum(1 for r in runs if len(r["sent"]) > 1
                     and isinstance(r["sent"][1]["content"], str)),
        "inner": sum(r["inner"] for r in runs),
    }
    return write_runs_and_queues(out, CORPUS, per_run, queues, README,
                                 (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


REDO_README = """# Moatless Tools runs that redo a step (SWE-bench Lite), per call

Converted by `bench/moatless.py --per-call` (ctxgate) from `{evaluation}/*/trajectory.json` at
commit `{commit}` of {source}. Licence of the source: MIT (its `LICENSE`). Used for
measurement only; not part of the ctxgate repository; do not commit it there.

{stats} (of the last call's history); {calls} recorded calls, {edits} of them not an extension
of the previous call's list.

- The {kept} runs of at least {min_calls} calls that the `moatless` folder leaves out because
  a later call's message list differs at an older turn (the agent went back and redid a
  step). Each session carries `calls`: per recorded `build_action` call, the system prompt
  and its message list as sent (without `cache_control`; tool-call ids made unique within the
  call, in order) and the reply that answered it (its thoughts and tool calls; the last
  reply's tool call written as text, `Name(<arguments>)`). `messages` is the last call and its
  reply. `bench/replay.py` replays the calls (`--prefix-replay`: the prefixes of `messages`).
"""


def convert_redo(repo: Path, out: Path, *, rev: str = REV) -> dict[str, int]:
    reader = RepoReader(repo, "README.md")
    commit = reader._git("rev-parse", rev).strip() if reader.git else rev
    runs, _ = load(reader, rev, redo=True)
    sessions = [{"id": r["id"], "source": f"{SOURCE}@{commit[:7]}", "path": r["path"],
                 "agent": AGENT, "model": r["model"], "task_id": r["id"].split("/", 1)[1],
                 "tools": [], "messages": [*r["calls"][-1]["messages"], r["calls"][-1]["reply"]],
                 "calls": r["calls"]} for r in runs]
    folder = f"{CORPUS}-redo"
    text = REDO_README.format(evaluation=EVALUATION, commit=commit, source=SOURCE,
                              stats=corpus_stats(sessions), kept=len(sessions),
                              min_calls=MIN_CALLS, calls=sum(len(r["calls"]) for r in runs),
                              edits=sum(1 for r in runs
                                        for a, b in itertools.pairwise(r["calls"])
                                        if b["messages"][:len(a["messages"])] != a["messages"]))
    return {folder: write_corpus(out / folder, sessions, text)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True,
                        help=f"{SOURCE} git directory (or a checkout of --rev)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/gen56"))
    parser.add_argument("--rev", default=REV, help="commit holding the runs (git only)")
    parser.add_argument("--queue-calls", type=int, default=250)
    parser.add_argument("--per-call", action="store_true",
                        help="the runs that redo a step, per call (`moatless-redo`)")
    args = parser.parse_args(argv)
    run_conversion(parser, args.repo, args.out, lambda: (
        convert_redo(args.repo, args.out, rev=args.rev) if args.per_call else
        convert(args.repo, args.out, rev=args.rev, queue_calls=args.queue_calls)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
