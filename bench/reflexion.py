"""Reflexion's recorded HotpotQA runs (ReAct over Wikipedia, with self-reflection between
trials) as corpus folders `bench/replay.py` reads.

Reflexion (Shinn et al., arXiv 2303.11366; `noahshinn/reflexion`, MIT) ran a
**question-answering agent over Wikipedia**: ReAct's `Thought N:` / `Action N:` /
`Observation N:` loop with three actions, `Search[entity]` (the first paragraph of the
page, or similar titles when there is none), `Lookup[keyword]` (the next sentence holding the
keyword in the last page found) and `Finish[answer]`, at most 6 steps a trial (then
"halted"), model `text-davinci-003` (completion API). After a failed trial the agent writes a
reflection and tries the question again with its reflections in the prompt; a question
answered correctly is not tried again.

The runs are the printed log `hotpotqa_runs/root/ReAct/reflexion/100_questions_7_trials.txt`
(commit `5942b44`, "HotPotQA runs"; moved there by `e531a5c`): 100 HotpotQA questions, 7
trials, per trial every agent's prompt without its few-shot part (`remove_fewshot`): the
question (from the second trial on followed by the reflections header and the reflections),
then its steps, then `Correct answer: <key>`. A question solved in an earlier trial is
printed again unchanged in each later trial (trials 6 and 7: printed with no steps); such a
repeat is kept once (a run is one model run). Here each run is laid out as a chat:

- system message: the agent's instruction and its six few-shot examples
  (`REACT_REFLECT_INSTRUCTION` with `WEBTHINK_SIMPLE6`, `hotpotqa_runs/prompts.py` and
  `fewshots.py` at the recording commit) up to `(END OF EXAMPLES)`;
- first user turn: the printed text before `Thought 1:` (the question, and the reflections);
- per step: an assistant turn, the thought as its content and the action as a tool call
  (`Search` `{"entity"}`, `Lookup` `{"keyword"}`, `Finish` `{"answer"}`), then a `tool`
  message, the observation; an action of another form (the model wrote no valid
  `Name[arg]`) stays text in the assistant turn and its observation is a user turn
  (`Observation N: ...`);
- the last step's action is written as text after its thought (`Action N: Finish[...]`) and
  its observation (`Answer is CORRECT` / `INCORRECT`, or the 6th step's page of a halted run)
  is left out: no model call of the agent saw it. `Correct answer:` lines are left out.

The agent prompted its model with one growing text prompt per call (two calls a step, one for
the thought and one for the action); here a run is one chat history with one call a step.
This converter writes, outside the repository,

- `<out>/reflexion-hotpotqa/sessions.jsonl`: one session per run, trial by trial, each
  trial's runs in printed order;
- `<out>/reflexion-hotpotqa-queue/sessions.jsonl`: the runs in that order one after another
  in one conversation, cut at the run boundaries nearest each 1/N of the calls, N = calls /
  `--queue-calls` rounded (`bench.chat_corpus.join_queues`);

each with a `README.md` saying where it came from and how it was converted:

    python -m bench.reflexion --repo /work/.mirror/noahshinn+reflexion/repo --out /tmp/gen57
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.chat_corpus import (
    CallIds,
    Message,
    RepoReader,
    assistant_message,
    converter_main,
    join_queues,
    n_calls,
    write_runs_and_queues,
)

SOURCE = "noahshinn/reflexion"
REV = "218cf0e"  # newest commit of the snapshot; the log is unchanged since 5942b44
LOG = "hotpotqa_runs/root/ReAct/reflexion/100_questions_7_trials.txt"
PROMPT_REV = "5942b44c41f58435f32941e2577ef89cbd1e566a"  # "HotPotQA runs": the log's commit
PROMPTS = "hotpotqa_runs/prompts.py"
FEWSHOTS = "hotpotqa_runs/fewshots.py"
CORPUS = "reflexion-hotpotqa"
MODEL = "text-davinci-003"
AGENT = "Wikipedia question answering, ReAct with Reflexion (HotpotQA)"
TRIAL = re.compile(r"^BEGIN TRIAL (\d+)\n", re.M)
GROUP = re.compile(r"^-{13} BEGIN (CORRECT|INCORRECT|HALTED) AGENTS -+\n", re.M)
AGENT_END = re.compile(r"^Correct answer: .*\n", re.M)
STEP = re.compile(r"^(Thought|Action|Observation) (\d+):(?: |$)", re.M)
ACTION = re.compile(r"^(Search|Lookup|Finish)\[(.*)\]$", re.S)
PARAMETER = {"Search": "entity", "Lookup": "keyword", "Finish": "answer"}
REFLECTED = re.compile(r"\s*(You have attempted|The following reflection)")


def system_prompt(prompts: str, fewshots: str) -> str:
    """`REACT_REFLECT_INSTRUCTION` up to `(END OF EXAMPLES)`, `{examples}` being
    `WEBTHINK_SIMPLE6` (both read from the Python sources as text, not run)."""
    instruction = re.search(r'^REACT_REFLECT_INSTRUCTION = """(.*?)"""', prompts, re.S | re.M)
    examples = re.search(r'^WEBTHINK_SIMPLE6 = """(.*?)"""', fewshots, re.S | re.M)
    if not instruction or not examples:
        raise ValueError(f"{PROMPTS} / {FEWSHOTS}: REACT_REFLECT_INSTRUCTION or "
                         "WEBTHINK_SIMPLE6 not found")
    head = instruction.group(1).split("(END OF EXAMPLES)")[0]
    return head.replace("{examples}", examples.group(1)) + "(END OF EXAMPLES)"


def steps_of(body: str) -> tuple[str, list[dict[str, str]]]:
    """A printed agent (without its `Correct answer:` line): the text before `Thought 1:`
    and its steps, `{"Thought", "Action", "Observation"}` (those printed) per step number."""
    marks = list(STEP.finditer(body))
    if not marks or (marks[0].group(1), marks[0].group(2)) != ("Thought", "1"):
        raise ValueError(f"agent without `Thought 1:`: {body[:80]!r}")
    steps: list[dict[str, str]] = []
    for mark, nxt in zip(marks, [*marks[1:], None], strict=True):
        n = int(mark.group(2))
        if n == len(steps) + 1 and mark.group(1) == "Thought":
            steps.append({})
        if n != len(steps) or mark.group(1) in steps[-1]:
            raise ValueError(f"step {mark.group(0)!r} out of order: {body[:80]!r}")
        steps[-1][mark.group(1)] = body[mark.end():nxt.start() if nxt else len(body)].strip("\n")
    return body[:marks[0].start()].strip("\n"), steps


def question_of(head: str) -> str:
    """The question of a printed agent (its first line without `Question:` and without the
    reflections header that follows it from the second trial on)."""
    line = head.partition("\n")[0].removeprefix("Question:")
    return REFLECTED.split(line, maxsplit=1)[0].strip()


def parse(log: str) -> list[dict[str, Any]]:
    """Every run of the log, trial by trial in printed order: `trial`, `outcome`
    (correct / incorrect / halted), `question`, `head`, `steps`; a run printed again
    unchanged in a later trial (its question was already solved) kept once."""
    runs, seen = [], set()
    trials = list(TRIAL.finditer(log))
    if not trials:
        raise ValueError(f"{LOG}: no `BEGIN TRIAL` found")
    for trial, nxt in zip(trials, [*trials[1:], None], strict=True):
        text = log[trial.end():nxt.start() if nxt else len(log)]
        groups = list(GROUP.finditer(text))
        for group, after in zip(groups, [*groups[1:], None], strict=True):
            chunk = text[group.end():after.start() if after else len(text)]
            ends = list(AGENT_END.finditer(chunk))
            starts = [0, *[e.end() for e in ends]]
            for start, end in zip(starts, ends, strict=False):
                body = chunk[start:end.start()].strip("\n")
                if body in seen or not STEP.search(body):
                    continue
                seen.add(body)
                head, steps = steps_of(body)
                runs.append({"trial": int(trial.group(1)), "outcome": group.group(1).lower(),
                             "question": question_of(head), "head": head, "steps": steps})
    return runs


def messages_of(run: Mapping[str, Any], ids: CallIds) -> list[Message]:
    """A run as chat after the system prompt (module docstring): the question turn, then
    per step the thought with its action (a tool call, or text) and the observation; the
    last action as text and its observation left out."""
    out: list[Message] = [{"role": "user", "content": run["head"]}]
    steps = run["steps"]
    for k, step in enumerate(steps, 1):
        thought = step.get("Thought", "")
        action = step.get("Action")
        observation = step.get("Observation")
        parsed = ACTION.match(action) if action is not None else None
        if k == len(steps) or action is None or observation is None or parsed is None:
            text = thought if action is None else f"{thought}\nAction {k}: {action}"
            out.append({"role": "assistant", "content": text})
            if k < len(steps) and observation is not None:
                out.append({"role": "user", "content": f"Observation {k}: {observation}"})
            elif k < len(steps):
                raise ValueError(f"step {k} without an observation: {run['head'][:80]!r}")
            continue
        name, arg = parsed.group(1), parsed.group(2)
        renamed: dict[str, str] = {}
        recorded = f"{run['id']}-step{k}"  # none recorded: the run's id and the step
        out.append(assistant_message(
            thought, [(recorded, name, json.dumps({PARAMETER[name]: arg},
                                                  ensure_ascii=False))], ids, renamed))
        out.append({"role": "tool", "tool_call_id": renamed[recorded],
                    "content": observation})
    return out


def tools() -> list[dict[str, Any]]:
    """The three actions as OpenAI tool definitions, worded as the instruction words them."""
    said = {
        "Search": ("Searches the exact entity on Wikipedia and returns the first paragraph "
                   "if it exists. If not, it will return some similar entities to search."),
        "Lookup": ("Returns the next sentence containing keyword in the last passage "
                   "successfully found by Search."),
        "Finish": "Returns the answer and finishes the task.",
    }
    return [{"type": "function", "function": {
        "name": name, "description": said[name],
        "parameters": {"type": "object", "properties": {param: {"type": "string"}},
                       "required": [param]}}} for name, param in PARAMETER.items()]


def used_tools(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    names = {c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
    return [t for t in tools() if t["function"]["name"] in names]


README = """# Reflexion on HotpotQA (ReAct over Wikipedia with self-reflection): {shape}

Converted by `bench/reflexion.py` (ctxgate) from `{log}` of {source} at commit `{commit}`
(the instruction and examples from `{prompts}` and `{fewshots}` at `{prompt_rev}`, the
commit that recorded the log). Licence of the source: MIT License (its `LICENSE`). Used for
measurement only; not part of the ctxgate repository; do not commit it there.

{stats}.

- The printed log of 100 HotpotQA questions over 7 trials, model `{model}` (the agent's
  completion model in the recording commit; the log does not name it). Runs: {runs} (a run
  printed again in a later trial, its question already solved, kept once: {repeats}
  such repeats, those of trials 6 and 7 printed without steps). By trial: {by_trial}.
  By outcome: {outcomes}.
- System message: the agent's instruction and six few-shot examples ({system:,}
  characters). First user turn: the printed question, from the second trial on with the
  reflections header and reflections. Per step: the thought (assistant content) and the
  action as a tool call (`Search` / `Lookup` / `Finish`, one string argument), the
  observation as a `tool` message; an action not of the form `Name[arg]` stays text, its
  observation a user turn `Observation N: ...` ({invalid}). The last action is text after
  its thought; its observation (the verdict, or a halted run's last page) is left out.
  The agent made two completion calls a step (thought, then action) over one growing
  text prompt; here one call a step in a growing chat.
- Tool calls by name: {names}.
{join}"""

JOIN_RUNS = "- One session per run, trial by trial, in printed order.\n"
JOIN_QUEUE = """- Queues: the runs in that order, cut at the run boundaries nearest each 1/N
  of the calls, N = calls / {queue_calls} rounded. A session is the system prompt once,
  then each run's messages after it in order, nothing added: the next run's question
  follows the previous run's last assistant turn.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 250,
            prompt_rev: str = PROMPT_REV) -> dict[str, int]:
    reader = RepoReader(repo, "README.md")
    commit = reader._git("rev-parse", rev).strip() if reader.git else rev
    prompt_rev = prompt_rev if reader.git else rev
    system = system_prompt(reader.read(PROMPTS, prompt_rev), reader.read(FEWSHOTS, prompt_rev))
    log = reader.read(LOG, rev)
    runs = parse(log)
    order = {q: i for i, q in enumerate(dict.fromkeys(r["question"] for r in runs))}
    for r in runs:
        r["id"] = f"q{order[r['question']]:03d}-t{r['trial']}"

    def session(sid: str, task: str | None, messages: list[Message]) -> dict[str, Any]:
        return {"id": sid, "source": f"{SOURCE}@{commit[:7]}", "path": LOG, "agent": AGENT,
                "model": MODEL, "task_id": task, "tools": used_tools(messages),
                "messages": messages}

    per_run = [session(f"{CORPUS}/{r['id']}", r["id"].partition("-")[0],
                       [{"role": "system", "content": system}, *messages_of(r, CallIds())])
               for r in runs]
    joined, _ = join_queues(
        {MODEL: runs}, calls=lambda r: n_calls([{"role": "system"}, *messages_of(r, CallIds())]),
        parts=lambda total: round(total / queue_calls), system=lambda _r: system,
        messages=messages_of,
        name=lambda _t, q, g: f"{CORPUS}-queue/{g[0]['id']}--{g[-1]['id']}-q{q}",
    )
    queues = [session(sid, None, messages) for sid, messages in joined]
    names: Counter[str] = Counter(c["function"]["name"] for s in per_run
                                  for m in s["messages"] for c in m.get("tool_calls") or ())
    printed = len(AGENT_END.findall(log))
    fields = {
        "log": LOG, "source": SOURCE, "commit": commit, "prompts": PROMPTS,
        "fewshots": FEWSHOTS, "prompt_rev": prompt_rev[:7], "model": MODEL,
        "runs": len(runs), "repeats": printed - len(runs), "system": len(system),
        "by_trial": ", ".join(f"{t}: {n}" for t, n in
                              sorted(Counter(r["trial"] for r in runs).items())),
        "outcomes": ", ".join(f"{o} {n}" for o, n in
                              Counter(r["outcome"] for r in runs).most_common()),
        "invalid": sum(1 for s in per_run for m in s["messages"]
                       if m["role"] == "user" and m["content"].startswith("Observation ")),
        "names": ", ".join(f"`{k}` {v}" for k, v in names.most_common()),
    }
    return write_runs_and_queues(out, CORPUS, per_run, queues, README,
                                 (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen57", REV, 250, convert)


if __name__ == "__main__":
    raise SystemExit(main())
