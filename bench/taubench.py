"""tau-bench's recorded customer-service runs as corpus folders `bench/replay.py` reads.

tau-bench (sierra-research/tau-bench, MIT) publishes the runs of its tool-calling agent as
`historical_trajectories/<model>-<domain>.json`: a list of `{task_id, trial, reward, info,
traj}`, `traj` being the chat the agent sent its model (the domain's policy `wiki.md` as the
system message, then the customer's turns, the agent's answers and tool calls, and the tool
results). The data is never copied into this repository: this converter reads a file from a
path the user gives and writes, outside the repository,

- `<out>/taubench-<domain>/sessions.jsonl`: every task run as its own session, as recorded;
- `<out>/taubench-<domain>-queue/sessions.jsonl`: "ticket queue" sessions, one agent working
  the tickets of one trial one after another in one conversation (same system prompt and
  tools): each trial's runs in task order, split at the task boundary nearest each
  `1/queues_per_trial` of its calls;

each with a `README.md` that says where it came from and how it was converted. The format
is the shared corpora's (`../shared/corpora/README.md`, "Format of ..."), except that
`tools` holds every tool the agent was given on every call, as it sent them, not only the
called ones. Tool definitions come from the domain's tool classes (`get_info()` in
`tau_bench/envs/<domain>/tools/*.py`, in `ALL_TOOLS` order), read from a tau-bench checkout
or git directory (`--repo`):

    python -m bench.taubench TRAJECTORIES.json --repo TAU_BENCH_CHECKOUT_OR_GIT_DIR \\
        --out /tmp/taubench
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.chat_corpus import (
    CallIds,
    Message,
    RepoReader,
    corpus_stats,
    join_queues,
    n_calls,
    run_conversion,
    write_corpus,
)

SOURCE = "sierra-research/tau-bench"
DOMAINS = ("airline", "retail")


def tool_info(source: str) -> dict[str, Any]:
    """The literal dict a tool class's `get_info()` returns."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "get_info":
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and ret.value is not None:
                    info: dict[str, Any] = ast.literal_eval(ret.value)
                    return info
    raise ValueError("no get_info() returning a literal")


def domain_tools(repo: RepoReader, domain: str) -> list[dict[str, Any]]:
    """The domain's tools in `ALL_TOOLS` order, as the agent sent them (`tools_info`)."""
    package = f"tau_bench/envs/{domain}/tools"
    init = ast.parse(repo.read(f"{package}/__init__.py"))
    modules = {
        alias.asname or alias.name: node.module
        for node in init.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    order = next(
        [e.id for e in node.value.elts if isinstance(e, ast.Name)]
        for node in init.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List)
        and any(isinstance(t, ast.Name) and t.id == "ALL_TOOLS" for t in node.targets)
    )
    return [tool_info(repo.read(f"{package}/{modules[name]}.py")) for name in order]


def chat_messages(traj: Sequence[Mapping[str, Any]], ids: CallIds) -> list[Message]:
    """A run's messages in the corpora's chat shape: roles and contents as recorded; tool
    calls `{id, type, function: {name, arguments}}`; a tool message keeps `tool_call_id`
    (its recorded `name` field is left out). The agent kept one call per message."""
    out: list[Message] = []
    pending: str | None = None
    for m in traj:
        role = m["role"]
        if role == "assistant":
            msg: Message = {"role": "assistant", "content": m.get("content")}
            calls = []
            for call in m.get("tool_calls") or ():
                pending = ids.new(call.get("id"))
                fn = call["function"]
                calls.append({"id": pending, "type": "function",
                              "function": {"name": fn["name"], "arguments": fn["arguments"]}})
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif role == "tool":
            if pending is None:
                raise ValueError("a tool message answers no call")
            out.append({"role": "tool", "tool_call_id": pending, "content": m.get("content")})
            pending = None
        else:
            out.append({"role": role, "content": m.get("content")})
    return out


def _session(sid: str, path: str, commit: str, model: str | None, tools: list[dict[str, Any]],
             messages: list[Message]) -> dict[str, Any]:
    return {"id": sid, "source": f"{SOURCE}@{commit[:7]}", "path": path,
            "agent": "customer service (tau-bench tool-calling agent)", "model": model,
            "tools": tools, "messages": messages}


def task_sessions(
    runs: Sequence[Mapping[str, Any]], domain: str, **meta: Any
) -> tuple[list[dict[str, Any]], int]:
    """One session per run; and how many call ids were renamed."""
    out, renamed = [], 0
    for run in runs:
        ids = CallIds()
        sid = f"taubench-{domain}/trial{run['trial']}-task{run['task_id']}"
        out.append(_session(sid, messages=chat_messages(run["traj"], ids), **meta))
        renamed += ids.renamed
    return out, renamed


def queue_sessions(
    runs: Sequence[Mapping[str, Any]], domain: str, parts: int, **meta: Any
) -> tuple[list[dict[str, Any]], int]:
    """Per trial, its runs in task order joined into `parts` conversations (`join_queues`:
    the next customer's first message follows the last message of the previous ticket)."""
    trials: dict[Any, list[Mapping[str, Any]]] = {}
    for run in runs:
        trials.setdefault(run["trial"], []).append(run)
    for group in trials.values():
        group.sort(key=lambda r: r["task_id"])
    joined, renamed = join_queues(
        trials, calls=lambda r: n_calls(r["traj"]), parts=lambda _total: parts,
        system=lambda r: r["traj"][0]["content"],
        messages=lambda r, ids: chat_messages(r["traj"][1:], ids),
        name=lambda trial, q, group: (f"taubench-{domain}-queue/trial{trial}-q{q}-tasks"
                                      f"{group[0]['task_id']}-{group[-1]['task_id']}"),
    )
    return [_session(sid, messages=messages, **meta) for sid, messages in joined], renamed


README = """# tau-bench {domain}: {shape}

Converted by `bench/taubench.py` (ctxgate) from `{path}` in {source}
(MIT licence, Copyright (c) 2024 Sierra: https://github.com/sierra-research/tau-bench).
Not part of the ctxgate repository; do not commit it there.

{stats}.

- Runs of tau-bench's tool-calling agent (`tau_bench/agents/tool_calling_agent.py`), model
  from the file name: `{model}`; every run recorded in the file, whatever its reward.
- System message: the domain's policy (`tau_bench/envs/{domain}/wiki.md`), exactly as
  recorded. `tools`: all {n_tools} tools the agent sent with every call, from `get_info()` of
  `tau_bench/envs/{domain}/tools/*.py` in `ALL_TOOLS` order (not only the called ones).
- Messages: roles and contents as recorded (the customer is tau-bench's simulated user;
  its closing turns carry `###STOP###`). Tool calls reshaped to `{{id, type, function}}`;
  tool messages keep `tool_call_id`, not their `name` field. Repeated call ids within a
  session (gpt-4o reused some, also across runs) get `_N` (the call's number in the
  session) after the recorded id: {renamed} of {total_calls} calls.
{join}"""

JOIN_TASKS = "- One session per run (task × trial), as recorded.\n"
JOIN_QUEUE = """- Ticket queues: the runs of one trial in task order, split into {parts} sessions at
  the task boundary nearest each 1/{parts} of the trial's calls. A session is one system message
  (the policy) and then each run's messages after its own system message, in order, nothing
  added: the next customer's first message follows the previous ticket's last message (the
  customer's `###STOP###` turn, or the `transfer_to_human_agents` result). Every run's
  system message is the same text (checked).
"""


def convert(trajectories: Path, repo: Path, out: Path, *, domain: str | None = None,
            queues_per_trial: int = 2) -> dict[str, int]:
    runs = orjson.loads(trajectories.read_bytes())
    stem = trajectories.stem
    domain = domain or next((d for d in DOMAINS if stem.endswith(d)), None)
    if domain is None:
        raise ValueError(f"cannot tell the domain of {stem!r}: pass --domain")
    model = stem[: -len(domain)].rstrip("-_") or None
    reader = RepoReader(repo, "tau_bench")
    tools = domain_tools(reader, domain)
    commit = reader.commit() or "unknown"
    path = f"historical_trajectories/{trajectories.name}"
    meta = {"path": path, "commit": commit, "model": model, "tools": tools}
    shapes = {
        f"taubench-{domain}": (task_sessions(runs, domain, **meta), "one session per task run",
                               JOIN_TASKS),
        f"taubench-{domain}-queue": (
            queue_sessions(runs, domain, queues_per_trial, **meta),
            "ticket-queue sessions", JOIN_QUEUE.format(parts=queues_per_trial)),
    }
    written = {}
    for name, ((sessions, renamed), shape, join) in shapes.items():
        total = sum(len(m.get("tool_calls") or ()) for s in sessions for m in s["messages"])
        readme = README.format(
            domain=domain, shape=shape, path=path, source=f"{SOURCE}@{commit}",
            stats=corpus_stats(sessions), model=model, n_tools=len(tools), renamed=renamed,
            total_calls=total, join=join)
        written[name] = write_corpus(out / name, sessions, readme)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trajectories", type=Path, help="historical_trajectories/*.json")
    parser.add_argument("--repo", type=Path, required=True,
                        help="tau-bench checkout or git directory (for the tool definitions)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/taubench"))
    parser.add_argument("--domain", choices=DOMAINS, help="default: from the file name")
    parser.add_argument("--queues-per-trial", type=int, default=2)
    args = parser.parse_args(argv)
    run_conversion(parser, args.repo, args.out, lambda: convert(
        args.trajectories, args.repo, args.out, domain=args.domain,
        queues_per_trial=args.queues_per_trial))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
