"""AutoGPT's recorded agent cycles (its test suite's VCR cassettes) as a corpus folder
`bench/replay.py` reads, each call as AutoGPT sent it.

AutoGPT (`Significant-Gravitas/AutoGPT`, 2023; the cassettes in
`Significant-Gravitas/Auto-GPT-test-cassettes`, MIT) is an **autonomous JSON-command agent**:
a named agent with goals runs in cycles; each cycle it sends the model its system prompt (name,
goals, constraints, the numbered command list, the JSON response format), then system
messages it **rebuilds every cycle** (the current date and time; from mid-2023 on, "This
reminds you of these events from your past" with what its memory recalled), then its history
(each earlier reply as an assistant turn, each command's result as a **`system` turn**
"Command read_file returned: ...", the cycle prompt as a user turn), and last the cycle prompt
"Determine which next command to use ..." as a user turn. The model answers with one JSON
object (thoughts, plan, criticism, and one command with its arguments); AutoGPT runs the
command and starts the next cycle. No API tools: commands are named in the reply's JSON.

The repository records the suite's model calls with VCR: each cassette
(`<test>/<test>.yaml`) holds request bodies (the message lists as sent) with their responses;
a re-recording appends or rewrites a cassette, so its versions across the repository's
history hold the calls of many executions of the same tests (memory, information-retrieval
and debugging challenges, file writing, website browsing). Here every version of every
cassette is read (`git log` of the YAML files, each blob once), and

- a *call* is a request whose message list starts with a system message and ends with the
  cycle prompt (a user turn starting `Determine `), with its recorded reply; the helper calls
  beside them (page and memory summaries, goal generation, a function-as-prompt test) are
  left out; the same message list with the same reply is kept once;
- calls are chained into *runs*: a call follows another of the same system prompt when its
  assistant turns are the other's, in order, then the other's reply (the next cycle of the
  same execution); each call is used once, runs starting at the earliest call recorded that
  follows no other, the next call the earliest recorded successor not used yet; a call whose
  predecessor was not recorded (or was used by another run) starts a run of its own;
- a run is written as a **per-call session** (`calls`: each call's message list exactly as
  sent and its reply; `messages`: the last call's list and its reply), since each cycle
  rebuilds its header and the calls of a run are not prefixes of one another.

This converter writes, outside the repository, each with a `README.md`:

- `<out>/autogpt/sessions.jsonl`: runs of at least `MIN_CALLS` calls, in the order their
  first call was recorded;
- `<out>/autogpt-queue/sessions.jsonl`: per system prompt (one agent of the suite), its runs
  in that order one after another, cut at the run boundaries nearest each 1/N of its calls,
  N = calls / `--queue-calls` rounded (at least 1): the system prompt once, then each run's
  messages after it, nothing added; per call, the earlier runs' chats then the call's own
  list after its system prompt (as `bench/openhands.py --per-call` lays out its queues);

    python -m bench.autogpt --out /tmp/gen59/out \
        --repo /work/.mirror/Significant-Gravitas+Auto-GPT-test-cassettes/repo
"""

from __future__ import annotations

import gzip
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from bench.chat_corpus import (
    Message,
    RepoReader,
    chained_runs,
    converter_main,
    n_calls,
    prompt_queues,
    write_runs_and_queues,
)

SOURCE = "Significant-Gravitas/Auto-GPT-test-cassettes"
REV = "e0f7f4a599620b139e72b8233eb0defdc8339b45"  # tip of `master`, 2024-03-22
CORPUS = "autogpt"
AGENT = "autonomous JSON-command agent, context rebuilt every cycle (AutoGPT)"
CYCLE = "Determine "
MIN_CALLS = 2


def cassette_versions(reader: RepoReader, rev: str) -> list[tuple[str, str, str]]:
    """`(commit, path, blob)` of every version of every cassette up to `rev`, oldest commit
    first, each blob once."""
    log = reader._git("log", "--reverse", "--format=@%H", "--name-only", rev, "--", "*.yaml")
    versions, seen, commit = [], set(), ""
    for line in log.splitlines():
        if line.startswith("@"):
            commit = line[1:]
        elif line.endswith(".yaml"):
            try:
                blob = reader._git("rev-parse", f"{commit}:{line}").strip()
            except subprocess.CalledProcessError:  # the path was deleted by this commit
                continue
            if blob not in seen:
                seen.add(blob)
                versions.append((commit, line, blob))
    return versions


def response_text(body: Any) -> str:
    """A recorded response body as text (VCR keeps it as `{string: ...}`, gzipped bytes
    where the server compressed it)."""
    raw = body.get("string") if isinstance(body, Mapping) else body
    if isinstance(raw, bytes):
        try:
            return gzip.decompress(raw).decode()
        except OSError:
            return raw.decode("utf-8", "replace")
    return str(raw or "")


def interactions(text: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """A cassette's chat requests as `(request body, reply message or None)`, in order."""
    out = []
    for item in (yaml.load(text, Loader=yaml.CSafeLoader) or {}).get("interactions") or ():
        try:
            body = orjson.loads(item["request"].get("body") or b"")
        except orjson.JSONDecodeError:
            continue
        if not isinstance(body, dict) or "messages" not in body:
            continue
        try:
            reply = orjson.loads(response_text(item["response"].get("body")))["choices"][0][
                "message"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            reply = None
        out.append((body, reply))
    return out


def is_cycle(messages: Sequence[Message]) -> bool:
    """An agent cycle's call: the system prompt first, the cycle prompt last."""
    return (len(messages) >= 2 and messages[0]["role"] == "system"
            and messages[-1]["role"] == "user"
            and str(messages[-1]["content"]).startswith(CYCLE))


def replies_of(messages: Sequence[Message]) -> list[str]:
    return [str(m["content"]) for m in messages if m["role"] == "assistant"]


def load(reader: RepoReader, rev: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The agent's calls, each once, in the order first recorded, and what was left out."""
    calls: dict[bytes, dict[str, Any]] = {}
    left = Counter[str]()
    for commit, path, blob in cassette_versions(reader, rev):
        try:
            text = reader._git("cat-file", "blob", blob)
        except subprocess.CalledProcessError:  # the snapshot lacks files of 4 MiB and more
            left["cassette versions absent from the snapshot"] += 1
            continue
        try:
            recorded = interactions(text)
        except yaml.YAMLError:
            left["cassette versions that do not parse"] += 1
            continue
        left["cassette versions read"] += 1
        for body, reply in recorded:
            messages = body["messages"]
            if not is_cycle(messages):
                left["helper calls (not an agent cycle)"] += 1
                continue
            if reply is None or reply.get("role") != "assistant" or not reply.get("content"):
                left["agent calls without a recorded reply"] += 1
                continue
            key = orjson.dumps([messages, reply["content"]])
            if key in calls:
                left["agent calls recorded again (same messages and reply)"] += 1
                continue
            calls[key] = {"messages": messages,
                          "reply": {"role": "assistant", "content": reply["content"]},
                          "model": body.get("model"), "commit": commit, "path": path}
    return list(calls.values()), left


def chain(calls: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Runs as lists of call indices (module docstring): each call once."""
    after: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for i, c in enumerate(calls):
        after.setdefault((c["messages"][0]["content"], tuple(replies_of(c["messages"]))),
                         []).append(i)

    def successors(i: int) -> list[int]:
        c = calls[i]
        return after.get((c["messages"][0]["content"],
                          (*replies_of(c["messages"]), c["reply"]["content"])), [])

    has_pred = {j for i in range(len(calls)) for j in successors(i)}
    used: set[int] = set()
    runs = []
    starts = [i for i in range(len(calls)) if i not in has_pred] + list(range(len(calls)))
    for start in starts:
        if start in used:
            continue
        run, cur = [start], start
        used.add(start)
        while nxt := [j for j in successors(cur) if j not in used]:
            cur = nxt[0]
            used.add(cur)
            run.append(cur)
        runs.append(run)
    return sorted(runs, key=lambda r: r[0])


README = """# AutoGPT, an autonomous JSON-command agent (its test suite's cycles): {shape}, per call

Converted by `bench/autogpt.py` (ctxgate) from every version of the VCR cassettes
(`<test>/<test>.yaml`) in {source} up to commit `{commit}`. Licence of the source: MIT
(its `LICENSE`, "Copyright (c) 2023 Significant Gravitas"). Used for measurement only; not
part of the ctxgate repository; do not commit it there.

{stats}.

- Read: {left}. Agent calls kept: {calls:,}; runs: {runs_all} ({runs} of {min_calls}+ calls
  used, {single} single calls not used). Models: {models}. Tests: {tests}.
- Each session carries `calls`: every call's message list exactly as AutoGPT sent it
  (system prompt; the date and, in later versions, memory recalled, as system messages
  rebuilt each cycle; earlier replies as assistant turns, command results as **system**
  turns, cycle prompts as user turns) and the reply recorded for it. `messages` is the
  last call's list and its reply. Runs chain calls whose assistant turns extend the
  previous call's by its reply (same system prompt); {rebuilt} of the runs' {used:,} calls
  are not a prefix of their run's last list (the header rebuilt). No tools (commands are
  in the replies' JSON).
{join}"""

JOIN_RUNS = "- One session per run, runs in the order their first call was recorded.\n"
JOIN_QUEUE = """- Queues: per system prompt, its runs in that order, cut at the run boundaries
  nearest each 1/N of its calls, N = calls / {queue_calls} rounded (at least 1). A
  session's `messages` is the system prompt once, then each run's messages after it,
  nothing added; its calls are each run's calls with the earlier runs' chats before the
  call's own list after its system prompt.
"""


def run_session(sid: str, run: Sequence[int], calls: Sequence[Mapping[str, Any]]
                ) -> dict[str, Any]:
    """A run as a per-call session (module docstring)."""
    first, last = calls[run[0]], calls[run[-1]]
    return {"id": sid, "source": f"{SOURCE}@{first['commit'][:7]}", "path": first["path"],
            "agent": AGENT, "model": first["model"], "task_id": Path(first["path"]).parent.name,
            "tools": [], "messages": [*last["messages"], last["reply"]],
            "calls": [{"messages": calls[i]["messages"], "reply": calls[i]["reply"]}
                      for i in run]}


def queue_sessions(runs: Sequence[dict[str, Any]], queue_calls: int) -> list[dict[str, Any]]:
    """Runs of one system prompt one after another (module docstring), per call."""
    return prompt_queues(runs, queue_calls, corpus=CORPUS,
                         size=lambda r: n_calls(r["messages"]), key=lambda _p, i: f"a{i:02d}")


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 250
            ) -> dict[str, int]:
    reader = RepoReader(repo, "LICENSE")
    if not reader.git:
        raise ValueError(f"{repo}: a git directory is needed (every version of the cassettes)")
    calls, kept, fields = chained_runs(reader, rev, source=SOURCE, min_calls=MIN_CALLS,
                                       load=load, chain=chain)
    sessions = [run_session(f"{CORPUS}/{Path(calls[r[0]]['path']).parent.name}/r{n:03d}", r,
                            calls) for n, r in enumerate(kept)]
    rebuilt = sum(c["messages"] != s["messages"][:len(c["messages"])]
                  for s in sessions for c in s["calls"])
    fields |= {
        "models": ", ".join(f"`{m}` {n}" for m, n in
                            Counter(str(s["model"]) for s in sessions).most_common()),
        "tests": ", ".join(f"`{t}` {n}" for t, n in
                           Counter(s["task_id"] for s in sessions).most_common()),
        "rebuilt": rebuilt, "used": sum(len(s["calls"]) for s in sessions),
    }
    return write_runs_and_queues(out, CORPUS, sessions, queue_sessions(sessions, queue_calls),
                                 README, (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen59/out", REV, 250, convert)


if __name__ == "__main__":
    raise SystemExit(main())
