"""A short list the agent works through entry by entry stays whole while it copies from it,
also when it re-read one entry from a newer print of that entry: a turn drawing 2+ values
an older short output holds credits that output too, besides each value's latest holder
(gateway/context/drawing.py, `MIN_SHARED`; bench/README.md, "Toolathlon queues' recall,
part eighteen")."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context.drawing import SHARED_MAX_CHARS, drawn_from
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item
from gateway.context.session import MemorySessionStore
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

from .conftest import without_repay

PAGES = [f"5b1f{k}e2a-04c3-81{k}9-9e70-d6b1fea8aec{k}" for k in range(4)]
RUNS = ["baseline-nocliphigh-qwen2.5-32b", "341943-mix92k-cliphigh-qwen32b-32B-think",
        "342297-mix92k-nocliphigh-qwen32b-32B-think",
        "hpc-H200-node-019.cluster-20250512_015607-7B-think-4node-full-minibsz64"]
STEPS = ["868(0.5725)", "398(0.6083)", "611(0.5841)", "131(0.4464)"]
UPDATES = "\n".join(["=== STDOUT ===", "Prepared 4 updates:", *(
    f"{k + 1}. {'UPDATE page ' + page if k < 2 else 'CREATE new page in database'}\n"
    f"   Run: {run}\n   Best Step: {step}\n"
    for k, (page, run, step) in enumerate(zip(PAGES, RUNS, STEPS, strict=True))),
    "=== EXECUTION INFO ===", "Return code: 0", "Execution time: 0.048 seconds"])
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("fetch_metrics", "run_script", "patch_page", "post_page")]


def _assistant(k: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{k}", "type": "function",
         "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]}


def _page(k: int, page: str, run: str, step: str) -> str:
    """A page API's reply: the page it wrote, then its many empty properties."""
    props = {f"Metric {i}": {"id": f"%3A{i}", "type": "number", "number": None}
             for i in range(40)}
    return orjson.dumps({"object": "page", "id": page, "request": k, "properties": {
        "Run Name": run, "Best Step (Average)": step, **props}}).decode()


def _metrics(k: int) -> str:
    return "\n".join(f"run {k} history line {i}: step {100 * i}, loss {0.5 + i / 1000:.4f}"
                     for i in range(60))


def _session(filler: int) -> list[dict[str, Any]]:
    """`filler` metric fetches, the script printing the 4 updates, a payload check printing
    the first again, then the 4 updates written one a call, and 4 calls more."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an assistant with tools."},
        {"role": "user", "content": "Record each run's best step in the tracker."},
    ]
    k = 0

    def call(name: str, args: dict[str, Any], reply: str) -> None:
        nonlocal k
        k += 1
        messages.append(_assistant(k, name, args))
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": reply})

    for i in range(filler):
        call("fetch_metrics", {"run": f"history-{i}"}, _metrics(i))
    call("run_script", {"filename": "prepare_updates.py"}, UPDATES)
    call("run_script", {"filename": "check_payload.py"}, "=== STDOUT ===\n" + orjson.dumps(
        {"action": "update", "page_id": PAGES[0], "run": RUNS[0], "best": STEPS[0],
         "scores": {f"Benchmark {i}": 0.5 + i / 97 for i in range(SCORES)}},
        option=orjson.OPT_INDENT_2).decode())
    for i in range(4):
        args = {"run": RUNS[i], "best": STEPS[i]}
        call("patch_page" if i < 2 else "post_page",
             {"page_id": PAGES[i], **args} if i < 2 else args,
             _page(k, PAGES[i] if i < 2 else f"new-{i}", RUNS[i], STEPS[i]))
    for i in range(4):
        call("fetch_metrics", {"run": f"summary-{i}"}, _metrics(100 + i))
    return messages


def _item(i: int, text: str) -> Item:
    return Item(id=f"m{i}", kind="tool_result", unit=f"u{i}", message_index=i, segment=0,
                text=text, tokens=len(text) // 4, fixed_tokens=0, turn=i, pinned=False,
                rewritable=True)


def test_an_older_short_list_is_credited_by_a_turn_drawing_two_of_its_values() -> None:
    messages = _session(0)
    assert len(UPDATES) <= SHARED_MAX_CHARS
    # message 6 copied the first update from the payload print (message 5), message 8 the
    # second from the list (message 3): two turns drew from the list, one from the print
    sources = [_item(3, UPDATES), _item(5, messages[5]["content"]),
               _item(7, messages[7]["content"])]
    assert drawn_from(sources, messages[:10], 3) == {"m3"}
    # the first update written twice (from the print, then from its write's reply): the
    # list holds both turns' values but no turn read it, so it is not drawn from; the
    # print, read by the first, is
    again = [*messages[:8], messages[6]]
    assert drawn_from(sources, again, 3) == {"m5"}
    # a long listing holding the same values is credited only where they were read
    long = UPDATES + "\n" + "x" * SHARED_MAX_CHARS
    assert drawn_from([_item(3, long), *sources[1:]], messages[:10], 3) == set()


async def test_a_short_list_of_updates_stays_whole_while_the_agent_writes_them(
    settings: Settings, embedder: Embedder
) -> None:
    messages = _session(FILLER)
    engine = ContextEngine(without_repay(settings), None, Metrics(),
                           DropLog("/dev/null", "none", None), embedder,
                           sessions=MemorySessionStore())
    sent: dict[int, str] = {}
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit(
            {"messages": messages[:end], "tools": TOOLS},
            CallContext("t-list", "tr", {"x-ctxgate-session-id": "drawn-older-list"}))
        assert sum(d.tokens_saved for d in fitted.drops) == (
            fitted.tokens_before - fitted.tokens_after)
        sent[end] = orjson.dumps(fitted.body["messages"]).decode()
    first = 2 * FILLER + 2  # the list's index
    for i in (2, 3):  # the calls writing the third and fourth update
        end = first + 4 + 2 * i
        assert messages[end]["tool_calls"][0]["function"]["name"] == "post_page"
        assert RUNS[i] in sent[end] and STEPS[i] in sent[end], (i, sent[end][-3000:])


# metric fetches before the list: the step that first reaches the list comes at the call
# writing the third update, when one turn of the last three read the list and one its
# first entry's newer print (as calls 255-256 of the Toolathlon claude queue)
FILLER = 12
SCORES = 15
