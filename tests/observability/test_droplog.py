"""The drop log writes the interface's fields, one line per event, and moves the metrics."""

from __future__ import annotations

from pathlib import Path

import orjson

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
