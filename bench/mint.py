"""MINT's recorded multi-turn runs of OpenAI chat models as corpus folders `bench/replay.py`
reads.

MINT (Wang et al., "MINT: Evaluating LLMs in Multi-turn Interaction with Tools and Language
Feedback", arXiv 2309.10691) runs a **problem-solving agent that acts by writing Python**:
one user turn states the rules (think in `<thought>`, then either run code in
`<execute>...</execute>` against a Python interpreter holding the task's tool functions, or
answer in `<solution>...</solution>`), a few worked examples and the task; the model answers
in an assistant turn; the harness runs the code and answers in a user turn, `Observation:`
and what the code printed, then `You have N steps left and M chances to propose solution
left.` (or why an answer was wrong). At most 5 model turns a task. No system message, no API
tools, no `tool` messages. The tasks: ALFWorld (a household text game driven through
`goto(...)`, `take_from(...)`, `put(...)` functions), HotpotQA (a `wikipedia_search` tool),
MBPP and HumanEval (code run against the interpreter), GSM8K, MATH, MMLU and TheoremQA.

The runs are `data/outputs/<model>/F=None/max5_p2+tool+cd/<kind>/<task>/results.jsonl` of
`xingyaoww/mint-bench` (Apache-2.0): one row per task with the run's `state.history`, the
message list MINT sent as the chat request (`OpenAILMAgent.act` passes `state.history` as
`messages`; the harness records each reply with an `Assistant:` line added before it, as it
was sent on the next call). Models: `gpt-4-0613` and `gpt-3.5-turbo-0613`, without
language feedback (`F=None`). Each run is laid out as recorded, nothing after the model's
last reply (the harness's last answer, if any: no model call saw it).

This converter reads the runs from a mirror/bare git directory (`--repo`, at `--rev`) or a
checkout, and writes, outside the repository,

- `<out>/mint-gpt/sessions.jsonl`: each run as its own session, per model the tasks in
  path order, the rows in file order;
- `<out>/mint-gpt-queue/sessions.jsonl`: per model the runs in the same order, one after
  another in one conversation, cut at the run boundaries nearest each 1/N of the model's
  calls, N = calls / `--queue-calls` rounded (`bench.chat_corpus.join_queues`);

each with a `README.md` saying where it came from and how it was converted:

    python -m bench.mint --repo /work/.mirror/xingyaoww+mint-bench/repo --out /tmp/gen51
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

SOURCE = "xingyaoww/mint-bench"
REV = "3f7f12c10bf763be1e6dbdeb42feb57624121f61"
OUTPUTS = "data/outputs"
SETTING = "F=None/max5_p2+tool+cd"
MODELS = ("gpt-4-0613", "gpt-3.5-turbo-0613")
CORPUS = "mint-gpt"
EXECUTE = re.compile(r"<execute>")
SOLUTION = re.compile(r"<solution>")


def result_paths(reader: RepoReader, rev: str, model: str) -> list[str]:
    """The model's `<kind>/<task>/results.jsonl` files of the setting, in path order."""
    root = f"{OUTPUTS}/{model}/{SETTING}"
    if reader.git:
        names = reader._git("ls-tree", "-r", "--name-only", rev, "--", root).split("\n")
    else:
        names = [str(p.relative_to(reader.root)) for p in (reader.root / root).rglob("*")]
    return sorted(n for n in names if n.endswith("/results.jsonl"))


def messages_of(history: Sequence[Mapping[str, Any]]) -> list[Message]:
    """A run as chat: each recorded message's role and text, nothing after the model's last
    reply."""
    out: list[Message] = []
    for m in history:
        if m["role"] not in ("user", "assistant") or not isinstance(m["content"], str):
            raise ValueError(f"unexpected message {m['role']!r}")
        out.append({"role": m["role"], "content": m["content"]})
    last = max((i for i, m in enumerate(out) if m["role"] == "assistant"), default=-1)
    if last < 0 or out[0]["role"] != "user":
        raise ValueError("a run needs the task in a user turn and a model reply")
    return out[:last + 1]


def load(reader: RepoReader, rev: str) -> dict[str, list[dict[str, Any]]]:
    """Per model, its runs: task (the folder name), task id, outcome and messages."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for model in MODELS:
        for path in result_paths(reader, rev, model):
            task = Path(path).parent.name
            for line in reader.read(path, rev).splitlines():
                if not line.strip():
                    continue
                row = orjson.loads(line)
                state = row["state"]
                runs.setdefault(model, []).append({
                    "model": model, "task": task, "task_id": str(row["task"]["task_id"]),
                    "path": path, "success": state.get("success"),
                    "reason": state.get("terminate_reason"),
                    "messages": messages_of(state["history"])})
        if not runs.get(model):
            raise ValueError(f"{OUTPUTS}/{model}/{SETTING}: no runs")
    return runs


README = """# MINT, OpenAI chat models acting by Python code (`<execute>` blocks): {shape}

Converted by `bench/mint.py` (ctxgate) from `{outputs}/<model>/{setting}/*/*/results.jsonl` of
{source} at commit `{commit}`. Licence of the source: Apache License 2.0 (its `LICENSE`).
Used for measurement only; not part of the ctxgate repository; do not commit it there.

{stats}.

- Every recorded run ({runs}) of the models {models} without language feedback, whatever
  its outcome; per task: {tasks}; outcomes: {outcomes}.
  Messages as recorded in `state.history` (the chat request MINT sent): the rules, worked
  examples and the task in the first user turn, then per step the model's reply
  (assistant, `Assistant:` and a `<thought>` with `<execute>` code or a `<solution>`) and
  the harness's answer (user). **No system message, no `tools`, no `tool_calls`, no `tool`
  messages.** What followed the last reply (the harness's last answer) is left out.
- Replies with an `<execute>` block: {executes} of {replies}; with a `<solution>`:
  {solutions}.
- The user turns after each run's task, by their opening words:
{kinds}
{join}"""

JOIN_RUNS = "- One session per run; per model, tasks in path order, rows in file order.\n"
JOIN_QUEUE = """- Queues: per model, the runs in the same order, cut at the run boundaries nearest
  each 1/N of the model's calls, N = calls / {queue_calls} rounded. A session is each run's
  messages in order, nothing added: the next run's first user turn (rules, examples, task)
  follows the previous run's last reply.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 100
            ) -> dict[str, int]:
    reader = RepoReader(repo, OUTPUTS)
    commit = reader._git("rev-parse", rev).strip() if reader.git else None
    runs = load(reader, rev)

    def session(sid: str, model: str, path: str, task: str | None,
                messages: list[Message]) -> dict[str, Any]:
        return {"id": sid, "source": f"{SOURCE}@{(commit or rev)[:7]}", "path": path,
                "agent": "problem solving, Python in <execute> blocks (MINT)",
                "model": model, "task_id": task, "tools": [], "messages": messages}

    every = [r for model in MODELS for r in runs[model]]
    per_run = [session(f"{CORPUS}/{r['model']}/{r['task']}/{r['task_id']}", r["model"],
                       r["path"], f"{r['task']}/{r['task_id']}", r["messages"])
               for r in every]
    joined, _ = join_queues(
        runs, calls=lambda r: n_calls(r["messages"]),
        parts=lambda total: round(total / queue_calls), system=lambda _r: None,
        messages=lambda r, _ids: list(r["messages"]),
        name=lambda model, q, g: f"{CORPUS}-queue/{model}/q{q:02d}",
    )
    queues = [session(sid, sid.split("/")[1], f"{OUTPUTS}/{sid.split('/')[1]}/{SETTING}",
                      None, messages) for sid, messages in joined]
    replies = executes = solutions = 0
    tasks: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    for r in every:
        tasks[r["task"]] = tasks.get(r["task"], 0) + 1
        outcome = "solved" if r["success"] else str(r["reason"])
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        for m in r["messages"]:
            if m["role"] == "assistant":
                replies += 1
                executes += bool(EXECUTE.search(m["content"]))
                solutions += bool(SOLUTION.search(m["content"]))
    fields = {"source": SOURCE, "commit": commit or rev, "outputs": OUTPUTS,
              "setting": SETTING, "models": ", ".join(f"`{m}`" for m in MODELS),
              "runs": len(every), "replies": replies, "executes": executes,
              "solutions": solutions,
              "tasks": ", ".join(f"`{t}` {n}" for t, n in sorted(tasks.items())),
              "outcomes": ", ".join(f"`{o}` {n}" for o, n in
                                    sorted(outcomes.items(), key=lambda kv: -kv[1])),
              "kinds": user_turn_kinds(every)}
    return write_runs_and_queues(out, CORPUS, per_run, queues, README,
                                 (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen51", REV, 100, convert)


if __name__ == "__main__":
    raise SystemExit(main())
