"""HyperAgent's recorded child-agent calls (navigator, editor, executor) as corpus folders
`bench/replay.py` reads, each call as HyperAgent sent it.

HyperAgent (`FSoft-AI4Code/HyperAgent`, 2024; Apache-2.0) is a **multi-agent coding system**:
a planner hands sub-tasks to child agents: a *navigator* that searches a repository
(`code_search`, `go_to_definition`, `get_folder_structure`, `get_all_symbols`, `open_file`,
semantic search), an *editor* that patches files, an *executor* that runs shell commands.
Each child is a **LangChain structured-chat agent**: every call is two messages, the child's
system prompt (its tools, then "Use a json blob to specify a tool ... Thought / Action /
Observation ...") and **one user message that holds the whole episode**: the objective from
the planner, then "This was your previous work (but I haven't seen any of it! ...)" and the
scratchpad, every earlier reply followed by `Observation: <tool output>` and `Thought:`. The
reply is a thought and one JSON action (`{"action": ..., "action_input": ...}`) or the
`Final Answer`. The user message grows by one step per call; no message is ever added.

The repository committed the calls of its runs (SWE-bench, Defects4J bug reproduction,
repository Q&A and feature requests in Python, Java and Rust) as
`data/agent_trajectories/**/<N>_instance.json`, each one call: `system_prompt`,
`human_message` (the two messages sent) and `system_response` (the reply). They were added on
2024-06-05 and deleted on 2024-06-25 (`99fbf67`, "Delete data directory"); `REV` is the last
commit that holds them. Here

- a *call* is one file; the same call recorded twice (same three texts) is kept once;
- calls are chained into *runs*: a call follows another with the same system prompt when its
  user message is the other's (trailing white space left out) followed by the other's reply
  (after the scratchpad's header "This was your previous work ...", which the second call of
  an episode adds: the next step of the same episode); a call's successors are taken in file
  order (folder, then N), a run starting at each call that follows no other, then at any
  call left;
- a run is written as a **per-call session** (`calls`: each call's two messages exactly as
  sent and its reply; `messages`: the last call's and its reply): the calls of a run are not
  prefixes of one another, the one user message changes every call.

This converter writes, outside the repository, each with a `README.md`:

- `<out>/hyperagent/sessions.jsonl`: runs of at least `MIN_CALLS` calls, in file order of
  their first call;
- `<out>/hyperagent-queue/sessions.jsonl`: per system prompt (one child agent), its runs one
  after another, cut at the run boundaries nearest each 1/N of its calls (the runs'
  `calls`), N = calls / `--queue-calls` rounded (at least 1): the system prompt once, then
  each run's last user message and reply, nothing added; per call, the earlier runs' turns
  then the call's own user message;

    python -m bench.hyperagent --out /tmp/gen59b/out \\
        --repo /work/.mirror/FSoft-AI4Code+HyperAgent/repo
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.chat_corpus import (
    RepoReader,
    chained_runs,
    converter_main,
    prompt_queues,
    write_runs_and_queues,
)

SOURCE = "FSoft-AI4Code/HyperAgent"
REV = "241d281eb9a832dac68226f2f76a7c5ccbb2ef15"  # 2024-06-13, last commit with the calls
CORPUS = "hyperagent"
AGENT = "LangChain structured-chat child agents, episode in one user message (HyperAgent)"
FOLDER = "data/agent_trajectories/"
MIN_CALLS = 2
# what LangChain puts before the scratchpad once it is not empty
SCRATCHPAD = re.compile(r"\A(?:Agent scratchpad:\s*)?(?:This was your previous work[^\n]*\n)?")
ROLES = (("code navigation", "navigator"), ("finding all relevant information", "navigator"),
         ("editing or generate", "editor"), ("running bash", "executor"))


def order(path: str) -> tuple[str, int]:
    """File order: the folder, then the call number `N` of `<N>_instance.json`."""
    m = re.fullmatch(r"(.*?)(\d+)_instance\.json", path)
    return (m.group(1), int(m.group(2))) if m else (path, -1)


def role(system: str) -> str:
    return next((name for key, name in ROLES if key in system), "other")


def load(reader: RepoReader, rev: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The calls, each once, in file order, and what was left out."""
    paths = sorted((p for p in reader._git("ls-tree", "-r", "--name-only", rev, FOLDER)
                    .splitlines() if p.endswith("_instance.json")), key=order)
    calls: dict[bytes, dict[str, Any]] = {}
    left = Counter[str]()
    for path in paths:
        try:
            rec = orjson.loads(reader.read(path, rev))
            system, user, reply = (rec["system_prompt"], rec["human_message"],
                                   rec["system_response"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            left["files that are not a call"] += 1
            continue
        left["calls read"] += 1
        key = orjson.dumps([system, user, reply])
        if key in calls:
            left["calls recorded twice (kept once)"] += 1
            continue
        calls[key] = {"messages": [{"role": "system", "content": system},
                                   {"role": "user", "content": user}],
                      "reply": {"role": "assistant", "content": reply}, "path": path}
    return list(calls.values()), left


def follows(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether `after` is the next step of `before`'s episode (module docstring)."""
    if before["messages"][0] != after["messages"][0]:
        return False
    head = str(before["messages"][1]["content"]).rstrip()
    text = str(after["messages"][1]["content"])
    reply = str(before["reply"]["content"]).strip()
    if len(text) <= len(head) or not text.startswith(head):
        return False
    return SCRATCHPAD.sub("", text[len(head):].lstrip(), count=1).lstrip().startswith(reply[:80])


def chain(calls: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Runs as lists of call indices in file order (module docstring): each call once."""
    by_system: dict[str, list[int]] = {}
    for i, c in enumerate(calls):
        by_system.setdefault(c["messages"][0]["content"], []).append(i)
    successors = {i: [j for j in by_system[c["messages"][0]["content"]]
                      if j != i and follows(c, calls[j])] for i, c in enumerate(calls)}
    has_pred = {j for js in successors.values() for j in js}
    used: set[int] = set()
    runs = []
    for start in [i for i in range(len(calls)) if i not in has_pred] + list(range(len(calls))):
        if start in used:
            continue
        run = [start]
        used.add(start)
        while nxt := [j for j in successors[run[-1]] if j not in used]:
            used.add(nxt[0])
            run.append(nxt[0])
        runs.append(run)
    return sorted(runs, key=lambda r: r[0])


README = """# HyperAgent's child agents (LangChain structured chat, episode in one user
message): {shape}, per call

Converted by `bench/hyperagent.py` (ctxgate) from `data/agent_trajectories/**/<N>_instance.json`
in {source} at commit `{commit}` (the last commit holding them; deleted by `99fbf67`).
Licence of the source: Apache-2.0 (its `LICENSE` at that commit; the README says MIT). Used
for measurement only; not part of the ctxgate repository; do not commit it there.

{stats} (`messages` is a list as sent: one assistant turn); calls per run (a
run's `calls`) min / median / max {per_call}.

- Read: {left}. Calls kept: {calls:,}; runs: {runs_all} ({runs} of {min_calls}+ calls used,
  {single} single calls not used). Child agents (runs): {roles}. Task folders (runs):
  {tasks}. The model is not recorded (`model` null).
- Each session carries `calls`: every call's two messages exactly as HyperAgent sent them
  (the child's system prompt; one user message: the objective, then the scratchpad of every
  earlier reply with `Observation: ...` and `Thought:`) and the reply recorded for it.
  `messages` is the last call's and its reply. No API tools (actions are JSON blobs in the
  replies).
{join}"""

JOIN_RUNS = "- One session per run, in file order of its first call.\n"
JOIN_QUEUE = """- Queues: per system prompt, its runs in file order, cut at the run boundaries
  nearest each 1/N of its calls, N = calls / {queue_calls} rounded (at least 1). A session's
  `messages` is the system prompt once, then each run's last user message and reply,
  nothing added; its calls are each run's calls with the earlier runs' turns before the
  call's own user message.
"""


def run_session(sid: str, run: Sequence[int], calls: Sequence[Mapping[str, Any]]
                ) -> dict[str, Any]:
    """A run as a per-call session (module docstring)."""
    first, last = calls[run[0]], calls[run[-1]]
    return {"id": sid, "source": f"{SOURCE}@{REV[:7]}", "path": first["path"],
            "agent": AGENT, "model": None, "task_id": order(first["path"])[0][len(FOLDER):],
            "role": role(first["messages"][0]["content"]),
            "tools": [], "messages": [*last["messages"], last["reply"]],
            "calls": [{"messages": calls[i]["messages"], "reply": calls[i]["reply"]}
                      for i in run]}


def queue_sessions(runs: Sequence[dict[str, Any]], queue_calls: int) -> list[dict[str, Any]]:
    """Runs of one system prompt one after another (module docstring), per call."""
    return prompt_queues(runs, queue_calls, corpus=CORPUS, size=lambda r: len(r["calls"]),
                         key=lambda prompt, i: f"{role(prompt)}{i:02d}")


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 50
            ) -> dict[str, int]:
    reader = RepoReader(repo, "README.md")
    if not reader.git:
        raise ValueError(f"{repo}: a git directory is needed (the calls were deleted later)")
    calls, kept, fields = chained_runs(reader, rev, source=SOURCE, min_calls=MIN_CALLS,
                                       load=load, chain=chain)
    sessions = [run_session(f"{CORPUS}/{order(calls[r[0]]['path'])[0][len(FOLDER):]}r{n:03d}",
                            r, calls) for n, r in enumerate(kept)]
    sizes = sorted(len(r) for r in kept)
    fields |= {
        "per_call": f"{sizes[0]} / {sizes[len(sizes) // 2]} / {sizes[-1]}",
        "roles": ", ".join(f"{r} {n}" for r, n in
                           Counter(s["role"] for s in sessions).most_common()),
        "tasks": ", ".join(f"`{t or '.'}` {n}" for t, n in
                           Counter(s["task_id"] for s in sessions).most_common()),
    }
    return write_runs_and_queues(out, CORPUS, sessions, queue_sessions(sessions, queue_calls),
                                 README, (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen59b/out", REV, 50, convert)


if __name__ == "__main__":
    raise SystemExit(main())
