"""MedAgentBench's recorded runs as corpus folders `bench/replay.py` reads.

MedAgentBench (Stanford, arXiv 2501.14654) is a clinical agent on an electronic health
record: the model answers a clinician's question about a patient (a lab value, a
medication, an order to place) by calling the record's FHIR REST API **in prose**, one call
a turn (`GET http://…/fhir/Observation?code=A1C&patient=S3114648`, `POST http://…/fhir/
MedicationRequest` with a JSON body), and ends with `FINISH([answer, ...])`. The harness
answers each call in a **user** turn (`Here is the response from the GET request:` and the
FHIR bundle as JSON, `POST request accepted and executed successfully. ...`). No API tools,
no system message: the first user turn holds the instructions, the FHIR functions as JSON
(about 13,700 characters, the same for every task) and the task's context and question.

Its runs were uploaded to `THUDM/AgentBench` (Apache-2.0) in pull request #171 ("Upload
results", commit `45ae4f9`, later removed from the branch, so read at that commit):
`outputs/Jan17v1/<model>/medagentbench-std/runs.jsonl`, one line per task
(`{index, output: {status, result, history: [{role: user|agent, content}]}}`) for
`gpt-4o`, `gpt-4o-mini`, `deepseekv3`, `llama-3.3` (100 tasks each) and `gemini-2.0` (46;
the others failed and are in its `error.jsonl`, left out).

This converter reads them from a mirror/bare git directory (`--repo`, at `--rev`) or a
checkout of that commit, and writes, outside the repository,

- `<out>/medagentbench/sessions.jsonl`: every task of every model as its own session;
- `<out>/medagentbench-queue/sessions.jsonl`: per model, its tasks one after another in one
  conversation (task-index order), cut at the task boundaries nearest each 1/N of the
  model's calls, N = calls / `--queue-calls` rounded (`bench.chat_corpus.join_queues`);

each with a `README.md` saying where it came from and how it was converted:

    python -m bench.medagentbench --repo /work/.mirror/THUDM+AgentBench/repo --out /tmp/medagent
"""

from __future__ import annotations

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
from bench.toolathlon import TOOL_CHARS, cut

SOURCE = "THUDM/AgentBench"
REV = "45ae4f9e334a901c8cc427a0809a3dbd19adbc94"  # pull request #171, "Upload results"
BASE = "outputs/Jan17v1"
RUNS = "medagentbench-std/runs.jsonl"
ROLES = {"user": "user", "agent": "assistant"}
CORPUS = "medagentbench"


def messages_of(history: Sequence[Mapping[str, Any]]) -> tuple[list[Message], int]:
    """A run's history as chat messages (`agent` -> `assistant`), contents over `TOOL_CHARS`
    cut as the corpora cut tool results; returns them and how many were cut."""
    out: list[Message] = []
    cuts = 0
    for m in history:
        if m["role"] not in ROLES:
            raise ValueError(f"unexpected role {m['role']!r}")
        content = str(m.get("content") or "")
        cuts += len(content) > TOOL_CHARS
        out.append({"role": ROLES[m["role"]], "content": cut(content)})
    return out, cuts


def load(repo: Path, rev: str = REV) -> tuple[list[dict[str, Any]], str | None]:
    """Every recorded task of every model, by model then task index: `{model, index, status,
    path, history}`; and the commit read (a git directory's `rev`)."""
    reader = RepoReader(repo, "outputs")
    if reader.git:
        paths = reader._git("ls-tree", "-r", "--name-only", rev, f"{BASE}/").split()
        commit: str | None = reader._git("rev-parse", rev).strip()
    else:
        paths = sorted(str(p.relative_to(repo)) for p in (repo / BASE).glob(f"*/{RUNS}"))
        commit = None
    tasks = []
    for path in paths:
        model = path.removeprefix(f"{BASE}/").removesuffix(f"/{RUNS}")
        if "/" in model or not path.endswith(RUNS):
            continue
        for line in reader.read(path, rev).splitlines():
            if not line.strip():
                continue
            row = orjson.loads(line)
            history = (row.get("output") or {}).get("history") or []
            if not history or history[0]["role"] != "user":
                raise ValueError(f"{path} task {row['index']}: no user turn first")
            tasks.append({"model": model, "index": int(row["index"]), "path": path,
                          "status": row["output"].get("status"), "history": history})
    if not tasks:
        raise ValueError(f"no {RUNS} under {BASE}/ at {rev} (the runs are at {REV[:7]})")
    tasks.sort(key=lambda t: (t["model"], t["index"]))
    return tasks, commit


README = """# MedAgentBench (clinical FHIR agent), all models: {shape}

Converted by `bench/medagentbench.py` (ctxgate) from
`{base}/<model>/{runs}` of {source} at commit
`{commit}` (its pull request #171, "Upload results").
Licence of the source: Apache License 2.0 (its `LICENSE`). Used for measurement only; not
part of the ctxgate repository; do not commit it there.

{stats}.

- Every recorded MedAgentBench task of each model, whatever its outcome:
  {models}; `model` is the folder's name. Tasks of `gemini-2.0` that ended in an
  error are only in its `error.jsonl` and are left out.
- Messages as recorded, `agent` turns as `assistant`: **no system message, no `tools`, no
  `tool_calls`, no `tool` messages**. The first user turn holds the agent's instructions,
  the FHIR functions as JSON and the task; the model writes one REST call a turn in prose
  (`GET url?...`, `POST url` and a JSON body, `FINISH([...])`) and the harness answers in a
  user turn. Contents longer than {limit:,} characters keep their first two thirds and last
  third of that budget with `[... N characters cut ...]` between ({cuts} of {msgs}).
- Status of the runs: {statuses}.
- The user turns after each task's first, by their opening words:
{kinds}
{join}"""

JOIN_RUNS = "- One session per task and model, as recorded.\n"
JOIN_QUEUE = """- Task queues: per model, its tasks in task-index order, cut at the task boundaries
  nearest each 1/N of the model's calls, N = calls / {queue_calls} rounded. A session is
  each task's messages in order, nothing added: the next task's first user turn (the
  instructions again, then its question) follows the previous task's last message.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 100
            ) -> dict[str, int]:
    tasks, commit = load(repo, rev)

    def session(sid: str, path: str, model: str, task: int | None,
                messages: list[Message]) -> dict[str, Any]:
        return {"id": sid, "source": f"{SOURCE}@{(commit or rev)[:7]}", "path": path,
                "agent": "clinical records, FHIR REST calls in prose (MedAgentBench)",
                "model": model, "task_id": task, "tools": [], "messages": messages}

    per_run, cuts = [], 0
    for t in tasks:
        messages, n_cut = messages_of(t["history"])
        cuts += n_cut
        t["messages"] = messages
        per_run.append(session(f"{CORPUS}/{t['model']}-{t['index']:03d}", t["path"],
                               t["model"], t["index"], messages))
    trials: dict[str, list[dict[str, Any]]] = {}
    for t in tasks:
        trials.setdefault(t["model"], []).append(t)
    model_of: dict[str, str] = {}

    def name(model: str, q: int, group: Sequence[Mapping[str, Any]]) -> str:
        sid = f"{CORPUS}-queue/{model}-{group[0]['index']:03d}--{group[-1]['index']:03d}-q{q}"
        model_of[sid] = model
        return sid

    joined, _ = join_queues(
        trials, calls=lambda t: n_calls(t["messages"]),
        parts=lambda total: round(total / queue_calls),
        system=lambda _t: None, messages=lambda t, _ids: list(t["messages"]), name=name,
    )
    queues = [session(sid, f"{BASE}/{model_of[sid]}/{RUNS}", model_of[sid], None, messages)
              for sid, messages in joined]
    statuses: dict[str, int] = {}
    for t in tasks:
        statuses[str(t["status"])] = statuses.get(str(t["status"]), 0) + 1
    common = {"source": SOURCE, "commit": commit or rev, "base": BASE, "runs": RUNS,
              "limit": TOOL_CHARS, "cuts": cuts, "msgs": sum(len(t["history"]) for t in tasks),
              "models": ", ".join(f"`{m}` {len(g)}" for m, g in trials.items()),
              "statuses": ", ".join(f"`{s}` {n}" for s, n in sorted(statuses.items())),
              "kinds": user_turn_kinds(tasks)}
    return write_runs_and_queues(out, CORPUS, per_run, queues, README,
                                 (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **common)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/medagent", REV, 100, convert)


if __name__ == "__main__":
    raise SystemExit(main())
