"""The drop log: one JSON line per item dropped, masked, compressed, merged or pruned.

Fields are fixed by INTERFACE.md. Every event also moves `ctxgate_dropped_items_total` and
`ctxgate_dropped_tokens_total`, so the log and the dashboards always agree.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

import orjson

from gateway.observability.logging import redact
from gateway.observability.metrics import Metrics

Stage = Literal["select", "rerank", "cluster", "compress", "playbook"]
Action = Literal["drop", "mask", "compress", "dedup", "prune"]
Kind = Literal[
    "system", "user", "assistant", "tool_call", "tool_result", "knowledge", "tool_def", "bullet"
]


@dataclass(frozen=True, slots=True)
class DropEvent:
    """One item that did not reach the model as the client sent it."""

    stage: Stage
    action: Action
    reason: str
    item_id: str
    kind: Kind
    message_index: int | None
    tokens_before: int
    tokens_after: int
    kept_as: str | None = None
    text: str = ""  # what was dropped; rendered only as the preview the settings allow

    @property
    def tokens_saved(self) -> int:
        return self.tokens_before - self.tokens_after


def preview(text: str, mode: str) -> str | None:
    if mode == "none" or not text:
        return None
    if mode == "text":
        return redact(text[:120])  # a preview may quote a pasted key: never log it
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


class DropLog:
    """Writes drop events as JSON lines to stdout or a file, and counts them in metrics."""

    def __init__(self, destination: str, preview_mode: str, metrics: Metrics | None) -> None:
        self._preview_mode = preview_mode
        self._metrics = metrics
        self._lock = threading.Lock()
        self._out: IO[bytes]
        if destination == "stdout":
            self._out, self._owned = sys.stdout.buffer, False
        else:
            Path(destination).parent.mkdir(parents=True, exist_ok=True)
            self._out, self._owned = open(destination, "ab"), True  # noqa: SIM115

    def write(
        self,
        events: list[DropEvent],
        *,
        trace_id: str,
        session_id: str,
        tenant: str,
        task_class: str,
    ) -> None:
        if not events:
            return
        ts = time.time()
        lines = []
        for event in events:
            # A plain dict, not dataclasses.asdict (which deep-copies: ~100 µs an event).
            record = {
                "ts": ts, "event": "context.drop", "trace_id": trace_id,
                "session_id": session_id, "tenant": tenant, "task_class": task_class,
                "stage": event.stage, "action": event.action, "reason": event.reason,
                "item_id": event.item_id, "kind": event.kind,
                "message_index": event.message_index, "tokens_before": event.tokens_before,
                "tokens_after": event.tokens_after, "kept_as": event.kept_as,
                "preview": preview(event.text, self._preview_mode),
            }
            lines.append(orjson.dumps(record) + b"\n")
            if self._metrics is not None:
                labels = (task_class, event.stage, event.reason)
                self._metrics.dropped_items.labels(*labels).inc()
                self._metrics.dropped_tokens.labels(*labels).inc(max(event.tokens_saved, 0))
        with self._lock:
            self._out.write(b"".join(lines))
            self._out.flush()

    def close(self) -> None:
        if self._owned:
            self._out.close()
