"""ToolBench's recorded DFSDT answers (`data_example/answer/`) as a corpus folder
`bench/replay.py` reads.

ToolBench (ToolLLM; `OpenBMB/ToolBench`, Apache-2.0) is a **tool-use agent over real
RapidAPI endpoints**: per query, ChatGPT (`gpt-3.5-turbo-16k`, the repository's README) gets
a system prompt ("You are AutoGPT, ...", the task rules and a text list of the query's
tools), the query as a user turn, and the query's API functions as OpenAI function
definitions (legacy `functions`); it answers one `function_call` a step, the API's JSON
answer (cut by ToolBench to about 1,000 characters, ending `...`) comes back as a
`function` message, until it calls `Finish` (`give_answer` or `give_up_and_restart`).
The answers were found by depth-first search over decision trees (DFSDT): when a branch
fails, the search backs up and the next request carries a user turn listing the failed
candidates ("This is not the first time you try this task, ...").

Each answer file records, under `answer_generation.train_messages`, **the message lists of
the steps of the answer's path as they were sent**, each ending with the model's reply, and
the query's `function` list. A file is kept when it has at least `MIN_CALLS` steps and each
step's request (its messages but the reply) is exactly the prefix of the last step's list
that ends right before that reply; the session is the last step's list. Files without
`train_messages` (the search found no valid path) are left out.

Conversion:

- `function_call` -> one tool call `call_N`; `function` messages -> `tool` messages answering
  it; the `function` list -> `tools`; other message fields (`valid`) dropped.
- the last reply calls `Finish`, which no recorded message answers: its call is written as
  the message's text (`Finish` and its arguments), after the reply's own text if it has any.

The runs of one query cannot be queued with others: each query's system prompt lists its
own tools. This converter writes, outside the repository, `<out>/toolbench/sessions.jsonl`
(files in path order) with a `README.md` saying where it came from and how it was
converted:

    python -m bench.toolbench --repo /work/.mirror/OpenBMB+ToolBench/repo --out /tmp/gen54
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
    converter_main,
    corpus_stats,
    write_corpus,
)
from bench.crewai import cassette_blobs, read_blobs

SOURCE = "OpenBMB/ToolBench"
REV = "d56fdd89faf8c91fa135090b212bb9057ee5cfc2"
CORPUS = "toolbench"
MODEL = "gpt-3.5-turbo-16k"
MIN_CALLS = 3
FINISH = "Finish"


def is_answer(path: str) -> bool:
    return "answer" in path and path.endswith(".json")


def answer_files(reader: RepoReader, rev: str) -> list[tuple[str, bytes | None]]:
    """`(path, bytes)` of every version of every answer file (`is_answer`) reachable from
    `rev` (git, as `git rev-list` lists them, each blob once; `None` for a blob the
    snapshot lacks), or of a checkout's files; then in path order."""
    if not reader.git:
        return sorted((str(p.relative_to(reader.root)), p.read_bytes())
                      for p in reader.root.rglob("*.json")
                      if is_answer(str(p.relative_to(reader.root))))
    blobs = [(blob, path) for blob, path in cassette_blobs(reader, rev, is_answer)]
    found = zip([p for _, p in blobs], read_blobs(reader.root, [b for b, _ in blobs]),
                strict=True)
    return sorted(found, key=lambda x: x[0])


def chat_of(steps: Sequence[Sequence[Mapping[str, Any]]]) -> list[Message] | None:
    """The recorded steps as one chat in the corpora's shape (module docstring), if each
    step's request is exactly the prefix of the last step's messages ending right before
    its reply; else `None`."""
    out: list[Message] = []
    call_id = ""
    last = steps[-1]
    for i, m in enumerate(last):
        role = m["role"]
        if role in ("system", "user"):
            out.append({"role": role, "content": m["content"]})
        elif role == "function":
            out.append({"role": "tool", "tool_call_id": call_id, "content": m["content"]})
        elif role == "assistant":
            msg: Message = {"role": "assistant", "content": m.get("content")}
            fc = m.get("function_call")
            if fc and i < len(last) - 1:
                call_id = f"call_{sum(1 for x in out if x.get('tool_calls')) + 1}"
                msg["tool_calls"] = [{"id": call_id, "type": "function", "function": {
                    "name": fc["name"], "arguments": fc.get("arguments") or ""}}]
            elif fc:
                text = f"{fc['name']}({fc.get('arguments') or ''})"
                msg["content"] = f"{m['content']}\n{text}" if m.get("content") else text
            out.append(msg)
        else:
            raise ValueError(f"unexpected message {role!r}")
    replies = [i for i, m in enumerate(last) if m["role"] == "assistant"]
    if len(replies) != len(steps):
        return None
    for step, end in zip(steps, replies, strict=True):
        if [strip(m) for m in step[:-1]] != [strip(m) for m in last[:end]]:
            return None
    return out


def strip(m: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded message without the fields the request did not send (`valid`)."""
    return {k: v for k, v in m.items() if k != "valid"}


def tools_of(functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {
        "name": f["name"], "description": f.get("description", ""),
        "parameters": f.get("parameters") or {"type": "object", "properties": {}}}}
        for f in functions]


def model_of(path: str) -> str:
    """The model a file's path names: ToolBench's ChatGPT, or its ToolLLaMA (`toolllama`
    folders holding no ChatGPT answer)."""
    low = path.lower()
    return "ToolLLaMA" if "toolllama" in low and "chatgpt" not in low else MODEL


def load(reader: RepoReader, rev: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The kept answers, in path order (versions as `git rev-list` lists them), and what was
    counted on the way."""
    counts: Counter[str] = Counter()
    runs = []
    seen: set[bytes] = set()
    for path, data in answer_files(reader, rev):
        counts["answer file versions"] += 1
        if data is None:
            counts["absent from the snapshot"] += 1
            continue
        doc = orjson.loads(data)
        gen = doc.get("answer_generation") if isinstance(doc, dict) else None
        if not isinstance(gen, dict):
            counts["not an answer (no answer_generation)"] += 1
            continue
        steps = gen.get("train_messages") or []
        if not steps:
            counts["without train_messages (no valid path found)"] += 1
            continue
        if len(steps) < MIN_CALLS:
            counts[f"of fewer than {MIN_CALLS} steps"] += 1
            continue
        chat = chat_of(steps)
        if chat is None:
            counts["steps not one chat's prefixes"] += 1
            continue
        tools = tools_of(gen.get("function") or [])
        key = orjson.dumps([chat, tools])
        if key in seen:
            counts["seen already"] += 1
            continue
        seen.add(key)
        runs.append({"id": f"{CORPUS}/{path.removesuffix('.json')}", "path": path,
                     "model": model_of(path), "tools": tools, "messages": chat,
                     "method": "CoT" if "CoT" in Path(path).name else "DFSDT",
                     "finish": gen.get("finish_type"),
                     "backtracked": sum(1 for m in chat[2:] if m["role"] == "user"),
                     "queries": gen.get("query_count")})
    return runs, counts


README = """# ToolBench answers (ChatGPT / ToolLLaMA over RapidAPI tools): one session per query

Converted by `bench/toolbench.py` (ctxgate) from every version of every answer file
(`*answer*.json`: `data_example/answer/`, and `data/toolllama/*_answer/` of the history)
reachable from commit `{commit}` of {source}. Licence of the source: Apache-2.0 (its
`LICENSE`). Used for measurement only; not part of the ctxgate repository; do not commit it
there.

{stats}.

- Each answer file's `answer_generation.train_messages`: the message lists of the steps of
  the answer's path as sent to the model (function calling), each with the reply. Kept:
  {kept} files of at least {min_calls} steps whose requests are exactly the prefixes of the
  last step's list, each chat once. Counted: {counts}.
- Models (from the file's path): {models}. Methods: {methods}.
- `function_call` -> tool call `call_N`, `function` message -> `tool` message; the query's
  `function` list -> `tools`. The last reply's `Finish` call (never answered by a message)
  is written as its text: `Finish(<arguments>)`.
- Finish: {finish}. {backtracked} sessions carry a DFSDT backtracking user turn (the
  failed candidates listed); the whole searches made {queries} model calls, of which the
  sessions hold the answer paths'.
- Tool answers are as ToolBench recorded them (cut to about 1,000 characters).
- One session per answer file, in path order. No queue folder: each query's system prompt
  lists its own tools.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 0
            ) -> dict[str, int]:
    del queue_calls  # no queues (module docstring)
    reader = RepoReader(repo, "README.md")
    commit = reader._git("rev-parse", rev).strip() if reader.git else rev
    runs, counts = load(reader, rev)
    if not runs:
        raise ValueError(f"{repo}@{rev}: no answer of {MIN_CALLS} steps or more")
    source = f"{SOURCE}@{commit[:7]}"
    sessions = [{"id": r["id"], "source": source, "path": r["path"],
                 "agent": f"ToolBench {r['method']} (function calling over RapidAPI)",
                 "model": r["model"], "task_id": None, "tools": r["tools"],
                 "messages": r["messages"]}
                for r in runs]

    def tally(key: str) -> str:
        return ", ".join(f"`{k}` {v}" for k, v in
                         Counter(str(r[key]) for r in runs).most_common())

    readme = README.format(
        commit=commit, source=SOURCE, stats=corpus_stats(sessions), kept=len(runs),
        min_calls=MIN_CALLS, counts="; ".join(f"{k} {v}" for k, v in sorted(counts.items())),
        models=tally("model"), methods=tally("method"), finish=tally("finish"),
        backtracked=sum(1 for r in runs if r["backtracked"]),
        queries=sum(int(r["queries"] or 0) for r in runs))
    return {CORPUS: write_corpus(out / CORPUS, sessions, readme)}


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen54", REV, 0, convert)


if __name__ == "__main__":
    raise SystemExit(main())
