"""smolagents' recorded benchmark runs (a CodeAgent and a ToolCallingAgent on GAIA, MATH and
SimpleQA, gpt-4o) as corpus folders `bench/replay.py` reads, each call as smolagents sent it.

smolagents (`huggingface/smolagents`, 2025; Apache-2.0) runs an agent as a loop of steps over
its **memory**: every call sends the system prompt (the tools, the rules, worked examples),
the task as a user turn ("New task: ..."), then per earlier step the model's output, a
"Calling tools: [...]" record of the actions it took and the result as "Observation: ..." (or
"Error: ... Now let's retry ..."). The memory keeps its own roles (`tool-call`,
`tool-response`); before each call smolagents converts them to `assistant` and `user` and
**merges consecutive messages of one role**, text parts joined with a newline
(`models.get_clean_message_list` with `tool_role_conversions`), and sends every content as a
**list of typed parts** (`[{"type": "text", "text": ...}]`). Two agents: the **CodeAgent**
writes its actions as Python code ("Thought: ... Code: ```py ... ```<end_code>", run by its
own interpreter), the **ToolCallingAgent** calls tools natively (its history is still the
text "Calling tools: [...]"; the tool definitions sent with each call were not recorded).

The repository committed one benchmark run of each (`examples/smolagents_benchmark/output/
gpt-4o__<agent>__<benchmark>__2025-07-24.jsonl`, added by `REV`, deleted 2025-10-30): one
line per question, `intermediate_steps` the agent's memory at its end as chat messages
(`agent.write_memory_to_messages()`). The memory only grows, so each call's message list is
a prefix of the last one's: here a run's `messages` are the memory converted as smolagents
sent it, up to the last assistant turn (what follows it, the final answer's observation,
was never sent); each prefix that ends before an assistant turn is a call as sent.

This converter writes, outside the repository, each with a `README.md`:

- `<out>/smolagents/sessions.jsonl`: runs of at least `MIN_CALLS` calls, per agent and
  benchmark in file order;
- `<out>/smolagents-queue/sessions.jsonl`: per agent (one system prompt), its runs in that
  order one after another, cut at the run boundaries nearest each 1/N of its calls, N =
  calls / `--queue-calls` rounded (at least 1): the system prompt once, then each run's
  messages after it, nothing added;

    python -m bench.smolagents --out /tmp/gen60/out \\
        --repo /work/.mirror/huggingface+smolagents/repo
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.chat_corpus import (
    Message,
    RepoReader,
    converter_main,
    n_calls,
    queue_slices,
    write_runs_and_queues,
)

SOURCE = "huggingface/smolagents"
REV = "ff5f96dff33f314f47ad61818e545fb1816863d2"  # 2025-07-25, "logs availibility"
CORPUS = "smolagents"
FOLDER = "examples/smolagents_benchmark/output/"
RUN_FILE = re.compile(r"(?P<model>[^_/]+)__(?P<agent>code|tool-calling)__(?P<bench>[a-z]+)__"
                      r"(?P<date>[\d-]+)\.jsonl")
AGENTS = {"code": "code-action agent (smolagents CodeAgent)",
          "tool-calling": "tool-calling agent, history as text (smolagents ToolCallingAgent)"}
# smolagents' `tool_role_conversions`: the memory's own roles as the model receives them
ROLES = {"tool-call": "assistant", "tool-response": "user"}
MIN_CALLS = 2


def as_sent(memory: Sequence[Mapping[str, Any]]) -> list[Message]:
    """The memory's messages as smolagents sent them (module docstring): roles converted,
    consecutive messages of one role merged (a text part joined to the last text part with a
    newline, any other part appended), up to the last assistant turn."""
    out: list[Message] = []
    for m in memory:
        role = ROLES.get(m["role"], m["role"])
        parts = [dict(p) for p in m["content"]]
        if out and out[-1]["role"] == role:
            last = out[-1]["content"]
            for p in parts:
                if p["type"] == "text" and last[-1]["type"] == "text":
                    last[-1]["text"] += "\n" + p["text"]
                else:
                    last.append(p)
        else:
            out.append({"role": role, "content": parts})
    ends = [i for i, m in enumerate(out) if m["role"] == "assistant"]
    return out[:ends[-1] + 1] if ends else []


def run_files(reader: RepoReader, rev: str) -> list[tuple[str, re.Match[str]]]:
    """The agents' run files at `rev` (not the plain model's `vanilla` runs), by agent and
    benchmark."""
    names = reader._git("ls-tree", "--name-only", rev, FOLDER).splitlines()
    found = [(p, m) for p in names if (m := RUN_FILE.fullmatch(p[len(FOLDER):]))]
    return sorted(found, key=lambda f: (f[1]["agent"], f[1]["bench"], f[1]["date"]))


def load(reader: RepoReader, rev: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Every run of `MIN_CALLS` calls or more as a session, and what was left out."""
    sessions, left = [], Counter[str]()
    for path, name in run_files(reader, rev):
        for n, line in enumerate(reader.read(path, rev).splitlines()):
            if not line.strip():
                continue
            row = orjson.loads(line)
            left["runs read"] += 1
            messages = as_sent(row.get("intermediate_steps") or [])
            if not messages:
                left["runs with no memory recorded (the run failed)"] += 1
                continue
            if n_calls(messages) < MIN_CALLS:
                left[f"runs of fewer than {MIN_CALLS} calls"] += 1
                continue
            sessions.append({
                "id": f"{CORPUS}/{name['agent']}-{name['bench']}/{n:03d}",
                "source": f"{SOURCE}@{rev[:7]}", "path": path, "agent": AGENTS[name["agent"]],
                "model": row.get("model_id") or name["model"],
                "task_id": f"{row.get('source') or name['bench']}/{n:03d}",
                "tools": [], "messages": messages})
    return sessions, left


def system_text(session: Mapping[str, Any]) -> str:
    return "\n".join(p.get("text", "") for p in session["messages"][0]["content"])


def queue_sessions(runs: Sequence[dict[str, Any]], queue_calls: int) -> list[dict[str, Any]]:
    """Per agent (one system prompt, checked) its runs one after another (module
    docstring)."""
    by_agent: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_agent.setdefault(r["id"].split("/")[1].rsplit("-", 1)[0], []).append(r)
    out = []
    for agent, q, group in queue_slices(by_agent, lambda r: n_calls(r["messages"]),
                                        lambda total: round(total / queue_calls)):
        if len({system_text(r) for r in group}) != 1:
            raise ValueError(f"{agent}: runs with another system prompt in one queue")
        messages = [group[0]["messages"][0], *(m for r in group for m in r["messages"][1:])]
        out.append({**group[0], "id": f"{CORPUS}-queue/{agent}/q{q:02d}", "path": FOLDER,
                    "task_id": [r["task_id"] for r in group], "messages": messages})
    return out


README = """# smolagents' CodeAgent and ToolCallingAgent (gpt-4o on GAIA, MATH, SimpleQA):
{shape}

Converted by `bench/smolagents.py` (ctxgate) from
`examples/smolagents_benchmark/output/<model>__<agent>__<benchmark>__<date>.jsonl` in
{source} at commit `{commit}`
(deleted from the repository on 2025-10-30). Licence of the source: Apache-2.0 (its
`LICENSE`). Used for measurement only; not part of the ctxgate
repository; do not commit it there.

{stats}.

- Read: {left}. Runs used: {runs} ({by_file}).
- Messages are smolagents' memory (`intermediate_steps`) as it sent it to the model: the
  roles `tool-call` and `tool-response` as `assistant` and `user`, consecutive messages of
  one role merged (text parts joined with a newline), every content a list of typed parts
  (`[{{"type": "text", "text": ...}}]`), up to the last assistant turn. The memory only grows,
  so each prefix that ends before an assistant turn is a call as sent.
- No API tools in `tools`: the CodeAgent's actions are code in its replies; the
  ToolCallingAgent sent tool definitions with each call, which the runs did not record (its
  system prompt lists the same tools in text, and its history carries each call as the text
  "Calling tools: [...]").
{join}"""

JOIN_RUNS = "- One session per run: per agent and benchmark, in file order.\n"
JOIN_QUEUE = """- Queues: per agent (one system prompt), its runs in the runs folder's order, cut
  at the run boundaries nearest each 1/N of its calls, N = calls / {queue_calls} rounded
  (at least 1): the system prompt once, then each run's messages after it, nothing added.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 50
            ) -> dict[str, int]:
    reader = RepoReader(repo, "README.md")
    if not reader.git:
        raise ValueError(f"{repo}: a git directory is needed (the runs were deleted later)")
    commit = reader._git("rev-parse", rev).strip()
    sessions, left = load(reader, rev)
    if not sessions:
        raise ValueError(f"{repo}@{rev}: no run of {MIN_CALLS} calls or more")
    fields = {
        "source": SOURCE, "commit": commit, "runs": len(sessions),
        "left": ", ".join(f"{why} {n:,}" for why, n in left.most_common()),
        "by_file": ", ".join(f"`{k}` {n}" for k, n in
                             Counter(s["id"].split("/")[1] for s in sessions).items()),
    }
    return write_runs_and_queues(out, CORPUS, sessions, queue_sessions(sessions, queue_calls),
                                 README, (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen60/out", REV, 50, convert)


if __name__ == "__main__":
    raise SystemExit(main())
