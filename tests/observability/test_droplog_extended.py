"""A call whose drops extend the previous call's (between steps: the same list, events
added) is summarised from the previous call's summary: its items and `excluded` are not
walked again, and its lines and metrics are those of a log that walks every drop."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.observability.droplog import DropEvent, DropLog
from gateway.observability.metrics import Metrics

STAGES = (("compress", "compress", "aged"), ("select", "drop", "recency"),
          ("compress", "mask", "aged"))


def _event(stage: int, item: int, after: int, step: int) -> DropEvent:
    s, action, reason = STAGES[stage]
    return DropEvent(s, action, reason, f"i{item}", "tool_result", item, 100, after,  # type: ignore[arg-type]
                     step=step)


_fresh = st.lists(st.builds(_event, st.integers(0, 2), st.integers(0, 11), st.integers(0, 120),
                            st.integers(1, 5)), max_size=4)


@st.composite
def _calls(draw: st.DrawFn) -> list[list[DropEvent]]:
    """A session's calls' drops: mostly the previous call's list with events added (items
    new or logged before at another step, at a step in force or one back in force), at
    times the very list (when of one item each, as the engine's), its equal copies, or a
    leading part of it with new events."""
    calls: list[list[DropEvent]] = []
    for _ in range(draw(st.integers(1, 12))):
        previous = calls[-1] if calls else []
        how = draw(st.sampled_from(("extend", "extend", "extend", "same", "copies", "cut")))
        if how == "same" and len({e.item_id for e in previous}) == len(previous):
            calls.append(previous)  # the very list (the engine's are of one item each)
        elif how == "copies":
            calls.append([dataclasses.replace(e) for e in previous] + draw(_fresh))
        elif how == "cut":
            calls.append(previous[:draw(st.integers(0, len(previous)))] + draw(_fresh))
        else:
            calls.append(previous + draw(_fresh))
    return calls


def _logged(path: Path, calls: list[list[DropEvent]], summaries: int
            ) -> tuple[list[dict[str, Any]], list[tuple[Any, ...]]]:
    metrics = Metrics()
    log = DropLog(str(path), "none", metrics, summaries=summaries)
    for n, events in enumerate(calls):
        log.write_call(events, trace_id=f"c{n}", session_id="s", tenant="t", task_class="x",
                       tokens=(5000, 5000 - sum(e.tokens_saved for e in events), 0))
    log.close()
    lines = [{k: v for k, v in orjson.loads(raw).items() if k != "ts"}
             for raw in path.read_bytes().splitlines()]
    path.unlink()
    samples = [(s.name, sorted(s.labels.items()), s.value)
               for family in (metrics.dropped_items, metrics.dropped_tokens)
               for s in family.collect()[0].samples if s.name.endswith("_total")]
    return lines, sorted(samples, key=repr)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=_calls())
def test_extended_drops_log_as_a_log_that_walks_every_drop(
    tmp_path: Path, calls: list[list[DropEvent]]
) -> None:
    """Lines (decision lines, steps, `excluded` with its repeats, counts) and metrics equal
    those of a log that keeps no summary and so walks every drop of every call."""
    assert _logged(tmp_path / "kept.jsonl", calls, 256) == _logged(tmp_path / "walked.jsonl",
                                                                    calls, 0)


_READS: list[str] = []


class _Counted(DropEvent):
    """A drop event that counts the reads of its item id."""

    def __getattribute__(self, name: str) -> Any:
        if name == "item_id":
            _READS.append(object.__getattribute__(self, "item_id"))
        return object.__getattribute__(self, name)


def test_a_call_adding_two_drops_reads_only_their_items(tmp_path: Path) -> None:
    """400 drops at 20 steps, items of 3 steps no longer in force logged before: the next
    call, those drops and two more (one at a step back in force), reads the item ids of
    the two new ones only, and its `excluded` is the walked one."""
    events: list[DropEvent] = [
        _Counted("compress", "compress", "aged", f"i{n}", "tool_result", n, 100, 10,
                 step=1 + n % 20) for n in range(400)]
    gone = [_Counted("compress", "mask", "aged", f"g{n}", "tool_result", 400 + n, 100, 0,
                     step=21 + n % 3) for n in range(9)]
    log = DropLog(str(tmp_path / "drops.jsonl"), "none", None)
    log.write_call(events + gone, trace_id="c0", session_id="s", tenant="t", task_class="x",
                   tokens=(9000, 5000, 0))
    log.write_call(events, trace_id="c1", session_id="s", tenant="t", task_class="x",
                   tokens=(9000, 5000, 0))
    added = [_Counted("compress", "compress", "aged", "n1", "tool_result", 500, 100, 5,
                      step=22),
             _Counted("select", "drop", "recency", "n2", "tool_result", 501, 100, 0,
                      step=30)]
    _READS.clear()
    log.write_call(events + added, trace_id="c2", session_id="s", tenant="t",
                   task_class="x", tokens=(9000, 5000, 0))
    log.close()
    assert sorted(set(_READS)) == ["n1", "n2"] and len(_READS) <= 4 * len(added)
    lines = [orjson.loads(raw) for raw in (tmp_path / "drops.jsonl").read_bytes().splitlines()]
    call = [line for line in lines if line["event"] == "context.call"][-1]
    assert call["excluded"] == ["g1", "g4", "g7"]  # logged at step 22, back in force
    assert call["steps"] == [*range(1, 21), 22, 30] and call["new_decisions"] == 2
