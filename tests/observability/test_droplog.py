"""The drop log writes the interface's fields, one line per event, and moves the metrics."""

from __future__ import annotations

from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.observability.droplog import DropEvent, DropLog
from gateway.observability.metrics import Metrics

FIELDS = {"ts", "event", "trace_id", "session_id", "tenant", "task_class", "stage", "action",
          "reason", "item_id", "kind", "message_index", "tokens_before", "tokens_after",
          "kept_as", "preview"}


def test_lines_have_exactly_the_interface_fields_and_metrics_move(tmp_path: Path) -> None:
    metrics = Metrics()
    log = DropLog(str(tmp_path / "drops.jsonl"), "hash", metrics)
    events = [DropEvent("compress", "compress", "aged", "i1", "tool_result", 3, 120, 20,
                        text="a long tool output"),
              DropEvent("cluster", "dedup", "near_duplicate", "i2", "knowledge", 4, 50, 0,
                        kept_as="i0", text="same doc")]
    log.write(events, trace_id="t", session_id="s", tenant="x", task_class="coding_agent")
    log.close()
    lines = [orjson.loads(line) for line in (tmp_path / "drops.jsonl").read_bytes().splitlines()]
    assert [set(line) for line in lines] == [FIELDS, FIELDS]
    assert lines[1]["kept_as"] == "i0" and lines[0]["preview"].startswith("sha256:")
    assert "a long tool output" not in str(lines)
    saved = metrics.dropped_tokens.labels("coding_agent", "compress", "aged")._value.get()
    assert saved == 100
    merged = metrics.dropped_items.labels("coding_agent", "cluster", "near_duplicate")
    assert merged._value.get() == 1


def test_a_call_repeating_its_sessions_drops_logs_and_counts_like_a_new_list(
    tmp_path: Path,
) -> None:
    """The engine hands a session's unchanged drops on as the same list; the call line and
    the metrics come out as for an equal list never seen (the summary is reused, not redone
    wrong)."""
    events = [DropEvent("compress", "compress", "aged", f"i{n}", "tool_result", n, 100, 10,
                        step=1) for n in range(3)]
    events.append(DropEvent("select", "drop", "recency", "d", "assistant", 7, 40, 0, step=2))
    lines: dict[str, list[dict[str, object]]] = {}
    counted: dict[str, tuple[float, float]] = {}
    for name, second in (("same", events), ("copy", list(events))):
        metrics = Metrics()
        path = tmp_path / f"{name}.jsonl"
        log = DropLog(str(path), "none", metrics)
        for trace, sent in (("c1", events), ("c2", second), ("c3", second)):
            log.write_call(sent, trace_id=trace, session_id="s", tenant="t", task_class="x",
                           tokens=(1000, 1000 - sum(e.tokens_saved for e in sent), 0))
        log.close()
        lines[name] = [{k: v for k, v in orjson.loads(raw).items() if k != "ts"}
                       for raw in path.read_bytes().splitlines()]
        counted[name] = (
            metrics.dropped_items.labels("x", "compress", "aged")._value.get(),
            metrics.dropped_tokens.labels("x", "select", "recency")._value.get())
    assert lines["same"] == lines["copy"]
    calls = [line for line in lines["same"] if line["event"] == "context.call"]
    assert [c["new_decisions"] for c in calls] == [4, 0, 0]
    assert all(c["steps"] == [1, 2] and c["dropped_tokens"] == 310 for c in calls)
    assert counted["same"] == counted["copy"] == (9.0, 120.0)


def test_only_the_latest_sessions_keep_their_drops_for_the_lookup(tmp_path: Path) -> None:
    """The drops kept for the lookup hold their texts: a bounded number of sessions keep
    them, and a session that lost them is logged the same way (recomputed)."""
    log = DropLog(str(tmp_path / "drops.jsonl"), "none", None, summaries=1)
    events = [DropEvent("compress", "mask", "aged", "i", "tool_result", 2, 90, 9, step=1)]
    for trace, session in (("a1", "s1"), ("b1", "s2"), ("a2", "s1")):
        log.write_call(events, trace_id=trace, session_id=session, tenant="t",
                       task_class="x", tokens=(500, 419, 0))
        kept = [key for key, logged in log._sessions.items() if logged.events is not None]
        assert kept == [("t", session)]
    log.close()
    lines = [orjson.loads(raw) for raw in (tmp_path / "drops.jsonl").read_bytes().splitlines()]
    calls = {line["trace_id"]: line for line in lines if line["event"] == "context.call"}
    assert calls["a2"]["new_decisions"] == 0 and calls["a2"]["dropped_tokens"] == 81
    assert calls["a2"]["steps"] == calls["a1"]["steps"] == [1]


STAGES = (("compress", "compress", "aged"), ("select", "drop", "recency"),
          ("cluster", "dedup", "near_duplicate"), ("compress", "mask", "aged"))


@st.composite
def _calls(draw: st.DrawFn) -> list[list[DropEvent]]:
    """A session's calls' drops as the engine hands them on: each call keeps a leading part
    of the previous call's list (the same objects, or the very list), then new events, some
    of an item seen before (at another step, with other tokens, or twice in one list)."""
    calls: list[list[DropEvent]] = []
    for _ in range(draw(st.integers(1, 8))):
        previous = calls[-1] if calls else []
        unique = len({e.item_id for e in previous}) == len(previous)
        if previous and unique and draw(st.booleans()):
            calls.append(previous)  # the very list again (the engine's are of one item each)
            continue
        keep = draw(st.integers(0, len(previous)))
        fresh = [DropEvent(stage, action, reason, f"i{item}", "tool_result", item, 100,
                           after, step=step)
                 for (stage, action, reason), item, after, step in draw(st.lists(st.tuples(
                     st.sampled_from(STAGES), st.integers(0, 9), st.integers(0, 120),
                     st.integers(1, 4)), max_size=8))]
        calls.append(previous[:keep] + fresh)
    return calls


def _logged(path: Path, calls: list[list[DropEvent]], summaries: int
            ) -> tuple[list[dict[str, object]], list[tuple[object, ...]]]:
    metrics = Metrics()
    log = DropLog(str(path), "none", metrics, summaries=summaries)
    for n, events in enumerate(calls):
        log.write_call(events, trace_id=f"c{n}", session_id="s", tenant="t", task_class="x",
                       tokens=(5000, 5000 - sum(e.tokens_saved for e in events), 0))
    log.close()
    lines = [{k: v for k, v in orjson.loads(raw).items() if k != "ts"}
             for raw in path.read_bytes().splitlines()]
    samples = [(s.name, sorted(s.labels.items()), s.value)
               for family in (metrics.dropped_items, metrics.dropped_tokens)
               for s in family.collect()[0].samples if s.name.endswith("_total")]
    return lines, sorted(samples, key=repr)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=_calls())
def test_a_call_whose_drops_lead_like_the_previous_ones_logs_like_a_list_never_seen(
    tmp_path: Path, calls: list[list[DropEvent]]
) -> None:
    """The summary kept from the previous call (its events taken off past where the new
    list stops being the same objects, the new ones added) writes the lines and moves the
    metrics exactly as a log that keeps no summary and walks every drop."""
    kept = _logged(tmp_path / "kept.jsonl", calls, 256)
    walked = _logged(tmp_path / "walked.jsonl", calls, 0)
    (tmp_path / "kept.jsonl").unlink()
    (tmp_path / "walked.jsonl").unlink()
    assert kept == walked
