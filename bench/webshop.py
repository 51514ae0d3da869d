"""ReAct's recorded WebShop episodes as corpus folders `bench/replay.py` reads.

ReAct (Yao et al., arXiv 2210.03629) ran a **shopping agent** on WebShop, a simulated
online shop: the model (`text-davinci-002`, completion API) reads the shopper's instruction
and the page as text, and writes **one action a turn in ReAct's bracket syntax**
(`search[3 ounce bright citrus deodorant]`, `click[B078GWRC1J]`, `click[Buy Now]`,
`think[...]`); the shop answers with the next page (search results, an item with its
options, `You have clicked ...`, `Invalid action!`; `OK.` after a `think`). No system
message, no API tools: one few-shot example (the instruction, a search, an item page, the
clicks) precedes each episode.

The episodes are the printed output of the notebook `WebShop.ipynb` in `ysymyth/ReAct`
(MIT): the cell `res1 = run_episodes(prompt1, 500)` printed every episode's actions and
observations (`Action: X` / `Observation: Y`), 500 episodes (`fixed_0` .. `fixed_499`),
each at most 15 steps. The agent prompted its model with one growing text prompt (the
example, then the episode so far, cut to its last 6,400 characters); here each episode is
laid out as a chat history instead:

- first user turn: the few-shot example (`prompt1` of the notebook) and the episode's
  first page (the instruction and the search box), as the prompt began;
- per step: an assistant turn, the action as the model wrote it, and a user turn,
  `Observation: ` and the page or message the shop answered;
- what follows the last action (the score, or the 15th page after which the model's
  last action was never printed) is left out: no model call saw it.

This converter reads the notebook from a mirror/bare git directory (`--repo`, at `--rev`)
or a checkout, and writes, outside the repository,

- `<out>/webshop-react/sessions.jsonl`: each episode as its own session;
- `<out>/webshop-react-queue/sessions.jsonl`: the episodes in order, one after another in
  one conversation, cut at the episode boundaries nearest each 1/N of the calls, N =
  calls / `--queue-calls` rounded (`bench.chat_corpus.join_queues`);

each with a `README.md` saying where it came from and how it was converted:

    python -m bench.webshop --repo /work/.mirror/ysymyth+ReAct/repo --out /tmp/gen40
"""

from __future__ import annotations

import re
from collections.abc import Sequence
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

SOURCE = "ysymyth/ReAct"
REV = "6bdb3a1fd38b8188fc7ba4102969fe483df8fdc9"
NOTEBOOK = "WebShop.ipynb"
RUN_CELL = "run_episodes(prompt1"
CORPUS = "webshop-react"
MODEL = "text-davinci-002"
EPISODE = re.compile(r"^-{17}\n(\d+)\n", re.M)
SUMMARY = re.compile(r"^\d+ [\d.e-]+ [\d.e-]+ [\d.e-]+\n-{13}\n", re.M)
STEP = re.compile(r"^Action: ", re.M)


def notebook_parts(notebook: str) -> tuple[str, str]:
    """The few-shot prompt `prompt1` and the printed output (stdout) of the cell that ran
    the episodes with it."""
    cells = orjson.loads(notebook)["cells"]
    sources = ["".join(c.get("source") or ()) for c in cells]
    prompts = [m.group(1) for s in sources
               for m in [re.search(r'^prompt1 = """(.*?)"""', s, re.S | re.M)] if m]
    runs = [c for c, s in zip(cells, sources, strict=True) if RUN_CELL in s]
    if len(prompts) != 1 or len(runs) != 1:
        raise ValueError(f"{NOTEBOOK}: expected one prompt1 and one {RUN_CELL}...) cell, "
                         f"found {len(prompts)} and {len(runs)}")
    text = "".join("".join(o.get("text") or ()) for o in runs[0].get("outputs") or ()
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")
    return prompts[0], text


def episodes(printed: str) -> list[tuple[int, list[tuple[str, str]]]]:
    """Each printed episode: its index and its `(action, observation)` steps as printed,
    the first being the harness's `reset` and the first page."""
    heads = list(EPISODE.finditer(printed))
    out = []
    for head, nxt in zip(heads, [*heads[1:], None], strict=True):
        body = printed[head.end():nxt.start() if nxt else len(printed)]
        end = SUMMARY.search(body)
        body = body[:end.start()] if end else body
        steps = []
        for chunk in STEP.split(body)[1:]:
            action, _, rest = chunk.partition("\n")
            if not rest.startswith("Observation: "):
                raise ValueError(f"episode {head.group(1)}: no observation after {action!r}")
            # printed as f"Action: {a}\nObservation: {o}\n" and print's own newline
            steps.append((action, rest.removeprefix("Observation: ").removesuffix("\n\n")))
        if not steps or steps[0][0] != "reset":
            raise ValueError(f"episode {head.group(1)}: does not start with reset")
        out.append((int(head.group(1)), steps))
    if not out:
        raise ValueError(f"{NOTEBOOK}: no episodes printed")
    return out


def messages_of(prompt: str, steps: Sequence[tuple[str, str]]) -> list[Message]:
    """An episode as chat: the prompt and the first page, then each action (assistant) and
    what the shop answered (user); nothing after the last action."""
    out: list[Message] = [{"role": "user", "content": prompt + steps[0][1]}]
    for action, observation in steps[1:]:
        out += [{"role": "assistant", "content": action},
                {"role": "user", "content": f"Observation: {observation}"}]
    return out[:-1] if len(out) > 1 else out


README = """# ReAct on WebShop (shopping agent, actions in bracket syntax): {shape}

Converted by `bench/webshop.py` (ctxgate) from the printed output of the cell
`res1 = run_episodes(prompt1, 500)` in `{notebook}` of {source} at commit `{commit}`.
Licence of the source: MIT License (its `LICENSE`). Used for measurement only; not part of
the ctxgate repository; do not commit it there.

{stats}.

- Every printed episode ({episodes}), model `{model}` (the notebook's completion model),
  whatever its outcome. Messages: **no system message, no `tools`, no `tool_calls`, no
  `tool` messages**. The first user turn is the few-shot example (`prompt1`, {prompt:,}
  characters) and the episode's first page; then per step the action as the model wrote
  it (assistant) and `Observation: ` with the shop's answer (user). What came after the
  last action is left out. The agent's own prompt was one growing text cut to its last
  6,400 characters; here it is one growing chat history.
- Actions: {actions}.
- The user turns after each episode's first, by their opening words:
{kinds}
{join}"""

JOIN_RUNS = "- One session per episode, as printed.\n"
JOIN_QUEUE = """- Queues: the episodes in order, cut at the episode boundaries nearest each 1/N
  of the calls, N = calls / {queue_calls} rounded. A session is each episode's messages in
  order, nothing added: the next episode's first user turn (the few-shot example again, then its
  first page) follows the previous episode's last message.
"""


def convert(repo: Path, out: Path, *, rev: str = REV, queue_calls: int = 350
            ) -> dict[str, int]:
    reader = RepoReader(repo, NOTEBOOK)
    commit = reader._git("rev-parse", rev).strip() if reader.git else None
    prompt, printed = notebook_parts(reader.read(NOTEBOOK, rev))
    runs = [(i, messages_of(prompt, steps)) for i, steps in episodes(printed)]

    def session(sid: str, task: int | None, messages: list[Message]) -> dict[str, Any]:
        return {"id": sid, "source": f"{SOURCE}@{(commit or rev)[:7]}", "path": NOTEBOOK,
                "agent": "web shopping, ReAct actions in bracket syntax (WebShop)",
                "model": MODEL, "task_id": task, "tools": [], "messages": messages}

    per_run = [session(f"{CORPUS}/fixed_{i:03d}", i, m) for i, m in runs]
    joined, _ = join_queues(
        {MODEL: runs}, calls=lambda r: n_calls(r[1]),
        parts=lambda total: round(total / queue_calls), system=lambda _r: None,
        messages=lambda r, _ids: list(r[1]),
        name=lambda _t, q, g: f"{CORPUS}-queue/fixed_{g[0][0]:03d}--{g[-1][0]:03d}-q{q}",
    )
    queues = [session(sid, None, messages) for sid, messages in joined]
    verbs: dict[str, int] = {}
    for _, messages in runs:
        for m in messages:
            if m["role"] == "assistant":
                verb = re.split(r"[\[ ]", m["content"], maxsplit=1)[0] or "(empty)"
                verbs[verb] = verbs.get(verb, 0) + 1
    fields = {"source": SOURCE, "commit": commit or rev, "notebook": NOTEBOOK, "model": MODEL,
              "episodes": len(runs), "prompt": len(prompt),
              "actions": ", ".join(f"`{v}` {n}" for v, n in
                                   sorted(verbs.items(), key=lambda kv: -kv[1])[:8]),
              "kinds": user_turn_kinds([{"messages": m} for _, m in runs])}
    return write_runs_and_queues(out, CORPUS, per_run, queues, README,
                                 (JOIN_RUNS, JOIN_QUEUE.format(queue_calls=queue_calls)),
                                 **fields)


def main(argv: Sequence[str] | None = None) -> int:
    return converter_main(argv, __doc__ or "", SOURCE, "/tmp/gen40", REV, 350, convert)


if __name__ == "__main__":
    raise SystemExit(main())
