"""DA-Code's recorded runs of its data-science agent (DA-Agent) as corpus folders
`bench/replay.py` reads.

DA-Code (Huang et al., "DA-Code: Agent Data Science Code Generation Benchmark for Large
Language Models", EMNLP 2024, arXiv 2410.07331) runs a **data-science agent acting by text
actions in a sandbox**: one system message states the role, the action space (`Bash(code=
"...")`, `Python(file_path="..."):` with a code block that is written and run, `SQL(file_path=
"...", command="...", output="...")`, `Terminate(output="...")`), the rules, the response
format (`Thought:` then `Action:`) and the task (statistics, data wrangling, machine
learning, visualisation, data insight over CSV files, SQLite databases, documents in
`/workspace`); the harness answers each action in a user turn `Observation: ...` (what the
command printed, cut at 3,000 characters with a notice, or `... executed successfully. No
output.`). At most 20 model turns a task.

The runs are `benchmark/_result/<model>/<task>/dabench/result.json` of `yiyihum/da-code`
(MIT) at commit `ff61914` (2024-06-18; removed from the tree later, read from that commit):
per task the agent's `system_message` and its `trajectory`, one step per model call, each
with the `observation` the call was sent, the model's `response` and the `thought` and
`action` the agent parsed from it. The agent (`spider2/agent/agents.py` at that commit,
`PromptAgent`) sent per call its history (the system message, then per earlier step a user
turn `Observation: <observation>` and an assistant turn `Thought: <thought>\\n\\nAction:
<action>`, both as recorded) and a user turn with the current observation: the same
messages, so each run is laid out as one chat, the history form throughout (the current
observation was sent with one more trailing newline). The agent kept its last 15 steps
(`--max_memory_length 15`): the few calls past step 16 are laid out with the whole history,
as the other corpora's agents (the gateway manages the context instead). Models: the four
full runs, `gpt-4o`, `gpt4-turbo`, `claude-3-opus-20240229`, `Qwen2-72B-Instruct` (the
`azure-*` runs are partial reruns of one category, `mixtral-8x7b-32768` 50 tasks: left out).

This converter reads the runs from a mirror/bare git directory (`--repo`, at `--rev`) or a
checkout, and writes, outside the repository,

- `<out>/dacode/sessions.jsonl`: each run as its own session, per model the tasks in name
  order;
- `<out>/dacode-queue/sessions.jsonl`: per model the runs in the same order, one after
  another in one conversation, cut at the run boundaries nearest each 1/N of the model's
  calls, N = calls / `--queue-calls` rounded (`bench.chat_corpus.join_queues`); no system
  message: each run's system message (its instructions and task; the instructions were
  edited between some of `gpt4-turbo`'s and `claude-3-opus`'s runs) comes as a user turn
  before its first observation;

each with a `README.md` saying where it came from and how it was converted:

    python -m bench.dacode --repo /work/.mirror/yiyihum+da-code/repo --out /tmp/gen53b
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.autocoderover import user_turn_kinds
from bench.chat_corpus import (
    Message,
    RepoReader,
    converter_main,
    join_queues,
    n_calls,
    write_runs_and_queues,
)

SOURCE = "yiyihum/da-code"
REV = "ff61914944531fe474177ce81e87eea9adad0757"
RESULTS = "benchmark/_result"
MODELS = ("gpt-4o", "gpt4-turbo", "claude-3-opus-20240229", "Qwen2-72B-Instruct")
CORPUS = "dacode"
MEMORY = 15
ACTION = re.compile(r"^(Bash|Python|SQL|Terminate)\(")


def result_paths(reader: RepoReader, rev: str, model: str) -> list[str]:
    """The model's `<task>/dabench/result.json` files, in task-name order."""
    root = f"{RESULTS}/{model}"
    if reader.git:
        names = reader._git("ls-tree", "-r", "--name-only", rev, "--", root).split("\n")
    else:
        names = [str(p.relative_to(reader.root)) for p in (reader.root / root).rglob("*")]
    return sorted(n for n in names if n.endswith("/dabench/result.json"))


def messages_of(result: Mapping[str, Any]) -> list[Message]:
    """A run as the agent's chat: the system message, then per step the observation it was
    sent (user) and the reply as the agent kept it in its history (assistant)."""
    system, steps = result.get("system_message"), result.get("trajectory") or []
    if not isinstance(system, str) or not system or not steps:
        raise ValueError("a run needs a system message and at least one step")
    out: list[Message] = [{"role": "system", "content": system}]
    for step in steps:
        out.append({"role": "user", "content": f"Observation: {step['observation']}"})
        out.append({"role": "assistant",
                    "content": f"Thought: {step['thought']}\n\nAction: {step['action']}"})
    return out


def load(reader: RepoReader, rev: str) -> dict[str, list[dict[str, Any]]]:
    """Per model, its runs: task (the folder name), outcome fields and messages."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for model in MODELS:
        for path in result_paths(reader, rev, model):
            result = orjson.loads(reader.read(path, rev))
            steps = result.get("trajectory") or []
            runs.setdefault(model, []).append({
                "model": model, "task": path.split("/")[-3], "path": path,
                "finished": bool(result.get("finished")), "steps": len(steps),
                "actions": [str(s.get("action")) for s in steps],
                "messages": messages_of(result)})
        if not runs.get(model):
            raise ValueError(f"{RESULTS}/{model}: no runs")
    return runs


README = """# DA-Code, a data-science agent acting by text actions (DA-Agent): {shape}

Converted by `bench/dacode.py` (ctxgate) from `{results}/<model>/<task>/dabench/result.json`
of {source} at commit `{commit}`. Licence of the source: MIT (its `LICENSE`). Used for
measurement only; not part of the ctxgate repository; do not commit it there.

{stats}.

- Every recorded run ({runs}) of the models {models}, whatever its outcome; per task
  category: {categories}; finished (the agent terminated): {finished} of {runs}.
- Messages as the agent sent them (`PromptAgent` of that commit): its system message
  (role, action space, rules, response format, the task), then per step the observation
  (user, `Observation: ...`) and the reply as the agent kept it (assistant, `Thought: ...`
  and `Action: ...`). **No `tools`, no `tool_calls`, no `tool` messages.** The agent kept
  its last {memory} steps: {windowed} calls (past step {first_windowed}) are laid out with
  the whole history here.
- Actions by kind: {actions}.
- The observations after each run's first, by their opening words (after `Observation: `):
{kinds}
{join}"""

JOIN_RUNS = "- One session per run; per model, tasks in name order.\n"
JOIN_QUEUE = """- Queues: per model, the runs in the same order, cut at the run boundaries nearest
  each 1/N of the model's calls, N = calls / {queue_calls} rounded. No system message:
  each run adds its system message (instructions and task) as a user turn, then its steps,
  nothing else.
"""


def queue_messages(run: Mapping[str, Any]) -> list[Message]:
    """A run's messages in a queue: its system message as a user turn, then its steps."""
    system, *steps = run["messages"]
    return [{"role": "user", "content": system["content"]}, *steps]


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 300
            ) -> dict[str, int]:
    reader = RepoReader(repo, RESULTS)
    commit = reader._git("rev-parse", rev).strip() if reader.git else None
    runs = load(reader, rev)

    def session(sid: str, model: str, path: str, task: str | None,
                messages: list[Message]) -> dict[str, Any]:
        return {"id": sid, "source": f"{SOURCE}@{(commit or rev)[:7]}", "path": path,
                "agent": "data science, text actions Bash/Python/SQL (DA-Agent)",
                "model": model, "task_id": task, "tools": [], "messages": messages}

    every = [r for model in MODELS for r in runs[model]]
    per_run = [session(f"{CORPUS}/{r['model']}/{r['task']}", r["model"], r["path"],
                       r["task"], r["messages"]) for r in every]
    joined, _ = join_queues(
        runs, calls=lambda r: n_calls(r["messages"]),
        parts=lambda total: round(total / queue_calls),
        system=lambda _r: None,
        messages=lambda r, _ids: queue_messages(r),
        name=lambda model, q, g: f"{CORPUS}-queue/{model}/q{q:02d}",
    )
    queues = [session(sid, sid.split("/")[1], f"{RESULTS}/{sid.split('/')[1]}", None,
                      messages) for sid, messages in joined]
    categories: dict[str, int] = {}
    actions: dict[str, int] = {}
    for r in every:
        category = r["task"].rsplit("-", 1)[0]
        categories[category] = categories.get(category, 0) + 1
        for a in r["actions"]:
            match = ACTION.match(a)
            kind = match.group(1) if match else a if a == "None" else "other"
            actions[kind] = actions.get(kind, 0) + 1
    fields = {"source": SOURCE, "commit": commit or rev, "results": RESULTS,
              "models": ", ".join(f"`{m}`" for m in MODELS), "runs": len(every),
              "finished": sum(r["finished"] for r in every), "memory": MEMORY,
              "first_windowed": MEMORY + 1,
              "windowed": sum(max(0, r["steps"] - MEMORY - 1) for r in every),
              "categories": ", ".join(f"`{c}` {n}" for c, n in sorted(categories.items())),
              "actions": ", ".join(f"`{a}` {n}" for a, n in
                                   sorted(actions.items(), key=lambda kv: -kv[1])),
              "kinds": user_turn_kinds([{"messages": [
                  {**m, "content": m["content"].removeprefix("Observation: ")}
                  for m in r["messages"]]} for r in every])}
    return write_runs_and_queues(out, CORPUS, per_run, queues, README,
                                 (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen53b", REV, 300, convert)


if __name__ == "__main__":
    raise SystemExit(main())
