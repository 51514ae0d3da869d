"""mini-SWE-agent's recorded SWE-bench Verified runs as corpus folders `bench/replay.py` reads.

mini-SWE-agent (Lieret, Jimenez et al.; the "bash only" agent of SWE-bench's leaderboard) is
a **coding agent without tools**: a system prompt asks the model for a `THOUGHT:` and
**exactly one bash code block a turn** (```` ```bash\\nsed -n '1,40p' x.py\\n``` ````); the
harness runs the command in the repository's container and answers in a user turn,
`<returncode>N</returncode>` then `<output>...</output>` (or `<warning>` and
`<output_head>` / `<output_tail>` when the output was too long), or `Please always provide
EXACTLY ONE action ...` when the reply had no single block. The agent submits by echoing
`COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`. No API tools, no `tool` messages.

The runs are the 500 trajectories of `google/gemini-3-pro-preview` on SWE-bench Verified
(`20251118_mini-v1.15.0_gemini-3-pro-preview`, SWE-bench's public experiments bucket) that
the fork `gruckion/mini-swe-agent` (MIT, its `LICENSE.md`) commits under
`swebench_results/20251118_gemini-3-pro-74pct/trajs/<instance>/<instance>.traj.json`
(`trajectory_format` `mini-swe-agent-1`). Each is laid out as recorded: the system prompt,
the task (`<pr_description>` and the instructions), then per step the model's reply
(assistant) and the harness's answer (user); the per-message `extra` (raw API responses,
costs) is left out, and so is what follows the last reply (the harness's final answer, the
submitted patch): no model call saw it.

This converter reads the trajectories from a mirror/bare git directory (`--repo`, at
`--rev`) or a checkout, and writes, outside the repository,

- `<out>/miniswe-gemini3/sessions.jsonl`: each run as its own session, instances in order;
- `<out>/miniswe-gemini3-queue/sessions.jsonl`: the runs in order, one after another in one
  conversation (the system prompt once), cut at the run boundaries nearest each 1/N of the
  calls, N = calls / `--queue-calls` rounded (`bench.chat_corpus.join_queues`);

each with a `README.md` saying where it came from and how it was converted:

    python -m bench.miniswe --repo /work/.mirror/gruckion+mini-swe-agent/repo --out /tmp/gen44
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

SOURCE = "gruckion/mini-swe-agent"
REV = "d12a71affd95403b036b2bdbd827349b77bfffb9"
RUN = "swebench_results/20251118_gemini-3-pro-74pct"
TRAJS = f"{RUN}/trajs"
CORPUS = "miniswe-gemini3"
MODEL = "gemini-3-pro-preview"
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
BLOCK = re.compile(r"^```bash\n(.*?)\n```", re.S | re.M)


def trajectory_paths(reader: RepoReader, rev: str) -> list[str]:
    """The run's `<instance>/<instance>.traj.json` files, in instance order."""
    if reader.git:
        names = reader._git("ls-tree", "-r", "--name-only", rev, "--", TRAJS).split()
    else:
        names = [str(p.relative_to(reader.root)) for p in (reader.root / TRAJS).rglob("*")]
    return sorted(n for n in names if n.endswith(".traj.json"))


def messages_of(recorded: Sequence[Mapping[str, Any]]) -> list[Message]:
    """A run as chat: each recorded message's role and text (its `extra` left out), nothing
    after the model's last reply."""
    out: list[Message] = []
    for m in recorded:
        if m["role"] not in ("system", "user", "assistant") or not isinstance(m["content"], str):
            raise ValueError(f"unexpected message {m['role']!r}")
        out.append({"role": m["role"], "content": m["content"]})
    last = max((i for i, m in enumerate(out) if m["role"] == "assistant"), default=-1)
    if last < 0 or out[0]["role"] != "system":
        raise ValueError("a run needs a system prompt and a model reply")
    return out[:last + 1]


def load(reader: RepoReader, rev: str) -> list[dict[str, Any]]:
    runs = []
    for path in trajectory_paths(reader, rev):
        data = orjson.loads(reader.read(path, rev))
        messages = messages_of(data["messages"])
        runs.append({"instance": data.get("instance_id") or Path(path).parent.name,
                     "path": path, "status": data["info"].get("exit_status"),
                     "messages": messages})
    if not runs:
        raise ValueError(f"{TRAJS}: no trajectories")
    return runs


README = """# mini-SWE-agent on SWE-bench Verified (`{model}`, one bash block a turn): {shape}

Converted by `bench/miniswe.py` (ctxgate) from `{trajs}/*/*.traj.json` of {source} at
commit `{commit}` (the run `20251118_mini-v1.15.0_gemini-3-pro-preview` of SWE-bench's
public experiments). Licence of the source: MIT License (its `LICENSE.md`). Used for
measurement only; not part of the ctxgate repository; do not commit it there.

{stats}.

- Every committed run ({runs}), whatever its outcome; exit statuses: {statuses}.
  Messages as recorded: the agent's system prompt (the same in every run), the task, then
  per step the model's reply (a `THOUGHT:` and one bash block) and the harness's answer as
  a user turn. **No `tools`, no `tool_calls`, no `tool` messages.** Each message's `extra`
  (raw API response, cost) left out, and what followed the last reply (the submitted patch).
- Replies with exactly one bash block: {blocks} of {replies}; the block's first word:
  {verbs}.
- The user turns after each run's task, by their opening words:
{kinds}
{join}"""

JOIN_RUNS = "- One session per run, instances in order.\n"
JOIN_QUEUE = """- Queues: the runs in instance order, cut at the run boundaries nearest each 1/N of
  the calls, N = calls / {queue_calls} rounded. A session is the system prompt once, then
  each run's messages after it, in order, nothing added: the next run's task follows the
  previous run's last reply.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 350
            ) -> dict[str, int]:
    reader = RepoReader(repo, RUN)
    commit = reader._git("rev-parse", rev).strip() if reader.git else None
    runs = load(reader, rev)

    def session(sid: str, path: str, task: str | None, messages: list[Message]
                ) -> dict[str, Any]:
        return {"id": sid, "source": f"{SOURCE}@{(commit or rev)[:7]}", "path": path,
                "agent": "coding, one bash block a turn in prose (mini-SWE-agent)",
                "model": MODEL, "task_id": task, "tools": [], "messages": messages}

    per_run = [session(f"{CORPUS}/{r['instance']}", r["path"], r["instance"], r["messages"])
               for r in runs]
    joined, _ = join_queues(
        {MODEL: runs}, calls=lambda r: n_calls(r["messages"]),
        parts=lambda total: round(total / queue_calls),
        system=lambda r: r["messages"][0]["content"],
        messages=lambda r, _ids: list(r["messages"][1:]),
        name=lambda _t, q, g: f"{CORPUS}-queue/{g[0]['instance']}--{g[-1]['instance']}-q{q}",
    )
    queues = [session(sid, TRAJS, None, messages) for sid, messages in joined]
    verbs: dict[str, int] = {}
    replies = blocks = 0
    for r in runs:
        for m in r["messages"]:
            if m["role"] == "assistant":
                replies += 1
                found = BLOCK.findall(m["content"])
                blocks += len(found) == 1
                verb = (found[0].split() or ["(empty)"])[0] if len(found) == 1 else "(none)"
                verbs[verb] = verbs.get(verb, 0) + 1
    statuses: dict[str, int] = {}
    for r in runs:
        statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
    fields = {"source": SOURCE, "commit": commit or rev, "trajs": TRAJS, "model": MODEL,
              "runs": len(runs), "replies": replies, "blocks": blocks,
              "statuses": ", ".join(f"`{s}` {n}" for s, n in sorted(statuses.items())),
              "verbs": ", ".join(f"`{v}` {n}" for v, n in
                                 sorted(verbs.items(), key=lambda kv: -kv[1])[:8]),
              "kinds": user_turn_kinds(runs)}
    return write_runs_and_queues(out, CORPUS, per_run, queues, README,
                                 (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen44", REV, 350, convert)


if __name__ == "__main__":
    raise SystemExit(main())
