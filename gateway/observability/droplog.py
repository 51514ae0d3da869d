"""The drop log: what did not reach the model as the client sent it, as JSON lines.

Two forms (`drop_log_form`), both described by `droplog.schema.json` next to this module:

- `decisions` (default): a compaction decision is logged once, when the session's step
  that took it first shows it (`context.decision`: the item fields and the `step`); every
  call logs one `context.call` line naming the steps in force, the items of those steps
  that are not (`excluded`), the tokens and the counts by stage and reason. A call's drops
  are the decision lines of its session at its steps, the latest step per item, minus the
  excluded (`gateway.observability.reconstruct`). Lines grow with decisions, not with the
  history.
- `items`: the original form, one `context.drop` line per item per call.

Grow-and-refine and the playbook guards log `playbook.drop` lines (`context.drop` in the
items form): one-off events, never repeated. Every event of every call also moves
`ctxgate_dropped_items_total` and `ctxgate_dropped_tokens_total`, so the dashboards count
what the items form would have logged, whatever the form.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import orjson

from gateway.observability.logging import redact
from gateway.observability.metrics import Metrics

if TYPE_CHECKING:
    from gateway.context.fidelity import CallSignals

Stage = Literal["select", "rerank", "cluster", "compress", "playbook"]
Action = Literal["drop", "mask", "compress", "dedup", "prune"]
Kind = Literal[
    "system", "user", "assistant", "tool_call", "tool_result", "knowledge", "tool_def", "bullet"
]
Form = Literal["decisions", "items"]
SCHEMA = Path(__file__).with_name("droplog.schema.json")


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
    step: int = 0  # the session's compaction step whose decision this is

    @property
    def tokens_saved(self) -> int:
        return self.tokens_before - self.tokens_after

    def signature(self) -> tuple[Any, ...]:
        """What a decision line says of the item: a call whose event differs logs it anew."""
        return (self.stage, self.action, self.reason, self.kind, self.message_index,
                self.tokens_before, self.tokens_after, self.kept_as)


def preview(text: str, mode: str) -> str | None:
    if mode == "none" or not text:
        return None
    if mode == "text":
        return redact(text[:120])  # a preview may quote a pasted key: never log it
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class _CallSummary:
    """What a call line says of a call's events, and what the metrics count of them."""

    steps: list[int]
    excluded: list[str]
    counts: dict[str, dict[str, int]]  # "stage.reason" -> items, tokens saved
    dropped_tokens: int
    by_label: dict[tuple[str, str], tuple[int, int]]  # (stage, reason) -> items, tokens


@dataclass
class _Logged:
    """What this process has logged of one session's decisions, and its latest call's
    events with their summary: a call whose events are that very list (the engine hands
    the same list on while a session's decisions in force do not change) is summarised
    by a lookup, so a call line costs what is new, not the history's drops."""

    lines: dict[tuple[str, int], tuple[Any, ...]] = field(default_factory=dict)
    by_step: dict[int, set[str]] = field(default_factory=dict)
    events: Sequence[DropEvent] | None = None
    summary: _CallSummary | None = None


class DropLog:
    """Writes drop events as JSON lines to stdout or a file, and counts them in metrics."""

    def __init__(
        self,
        destination: str,
        preview_mode: str,
        metrics: Metrics | None,
        form: Form = "decisions",
        *,
        sessions: int = 4096,
        summaries: int = 256,
    ) -> None:
        self._preview_mode = preview_mode
        self._metrics = metrics
        self._form = form
        self._sessions: OrderedDict[tuple[str, str], _Logged] = OrderedDict()
        self._max_sessions = sessions
        # Sessions whose latest drops (and so their texts) are kept for the lookup: as many
        # as the engine keeps prefixes by default, so they are mostly the same lists.
        self._summarised: OrderedDict[tuple[str, str], _Logged] = OrderedDict()
        self._max_summarised = summaries
        self._lock = threading.Lock()
        self._out: IO[bytes]
        if destination == "stdout":
            self._out, self._owned = sys.stdout.buffer, False
        else:
            Path(destination).parent.mkdir(parents=True, exist_ok=True)
            self._out, self._owned = open(destination, "ab"), True  # noqa: SIM115

    def _item(self, event: DropEvent) -> dict[str, Any]:
        # A plain dict, not dataclasses.asdict (which deep-copies: ~100 µs an event).
        return {
            "stage": event.stage, "action": event.action, "reason": event.reason,
            "item_id": event.item_id, "kind": event.kind,
            "message_index": event.message_index, "tokens_before": event.tokens_before,
            "tokens_after": event.tokens_after, "kept_as": event.kept_as,
            "preview": preview(event.text, self._preview_mode),
        }

    def _count(self, by_label: dict[tuple[str, str], tuple[int, int]], task_class: str) -> None:
        """Move the drop metrics by every event (a label's events in one increment)."""
        if self._metrics is None:
            return
        for (stage, reason), (items, tokens) in by_label.items():
            self._metrics.dropped_items.labels(task_class, stage, reason).inc(items)
            self._metrics.dropped_tokens.labels(task_class, stage, reason).inc(tokens)

    def _emit(self, records: list[dict[str, Any]]) -> None:
        data = b"".join(orjson.dumps(record) + b"\n" for record in records)
        with self._lock:
            self._out.write(data)
            self._out.flush()

    def write(
        self,
        events: Sequence[DropEvent],
        *,
        trace_id: str,
        session_id: str,
        tenant: str,
        task_class: str,
    ) -> None:
        """One-off events (the playbook's): one line each, in either form."""
        if not events:
            return
        event_name = "context.drop" if self._form == "items" else "playbook.drop"
        head = {"ts": time.time(), "event": event_name, "trace_id": trace_id,
                "session_id": session_id, "tenant": tenant, "task_class": task_class}
        self._count(_by_label(events), task_class)
        self._emit([{**head, **self._item(event)} for event in events])

    def write_call(
        self,
        events: Sequence[DropEvent],
        *,
        trace_id: str,
        session_id: str,
        tenant: str,
        task_class: str,
        tokens: tuple[int, int, int],
        signals: CallSignals | None = None,
    ) -> None:
        """A fitted call's events. `tokens`: before, after, and the playbook block's (in
        `after`), so the events' savings add up to before - after + playbook. `signals`:
        the fidelity of the turn that answered the session's previous call."""
        if self._form == "items":
            self.write(events, trace_id=trace_id, session_id=session_id, tenant=tenant,
                       task_class=task_class)
            return
        head = {"ts": time.time(), "trace_id": trace_id, "session_id": session_id,
                "tenant": tenant, "task_class": task_class}
        with self._lock:
            new, summary = self._decided(tenant, session_id, events)
        self._count(summary.by_label, task_class)
        records = [{**head, "event": "context.decision", "step": event.step,
                    **self._item(event)} for event in new]
        before, after, playbook = tokens
        records.append({**head, "event": "context.call", "tokens_before": before,
                        "tokens_after": after, "playbook_tokens": playbook,
                        "dropped_items": len(events), "dropped_tokens": summary.dropped_tokens,
                        "counts": summary.counts, "new_decisions": len(new),
                        "steps": summary.steps, "excluded": summary.excluded,
                        "fidelity": signals.to_log() if signals is not None else None})
        self._emit(records)

    def _decided(
        self, tenant: str, session_id: str, events: Sequence[DropEvent]
    ) -> tuple[list[DropEvent], _CallSummary]:
        """The events not logged yet for the session, and the call's summary (the steps in
        force, the items logged at those steps that are not in force on this call...)."""
        key = (tenant, session_id)
        logged = self._sessions.get(key)
        if logged is None:
            logged = self._sessions[key] = _Logged()
            if len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(key)
        if events is logged.events and logged.summary is not None:
            return [], logged.summary  # the previous call's events: all logged, same summary
        new = []
        for event in events:
            line = (event.item_id, event.step)
            signature = event.signature()
            if logged.lines.get(line) != signature:
                logged.lines[line] = signature
                logged.by_step.setdefault(event.step, set()).add(event.item_id)
                new.append(event)
        steps = sorted({event.step for event in events})
        present = {event.item_id for event in events}
        excluded = sorted(
            item for step in steps for item in logged.by_step.get(step, ()) if item not in present
        )
        counts, by_label = _counts(events)
        summary = _CallSummary(steps, excluded, counts,
                               sum(event.tokens_saved for event in events), by_label)
        self._remember(key, logged, events, summary)
        return new, summary

    def _remember(self, key: tuple[str, str], logged: _Logged, events: Sequence[DropEvent],
                  summary: _CallSummary) -> None:
        """Keep `events` and their summary for the session's next call, for a bounded
        number of sessions (the least recent forget theirs)."""
        logged.events, logged.summary = events, summary
        self._summarised[key] = logged
        self._summarised.move_to_end(key)
        if len(self._summarised) > self._max_summarised:
            _, oldest = self._summarised.popitem(last=False)
            oldest.events = oldest.summary = None

    def close(self) -> None:
        if self._owned:
            self._out.close()


def _by_label(events: Sequence[DropEvent]) -> dict[tuple[str, str], tuple[int, int]]:
    """Per (stage, reason): events, and tokens saved as the metric counts them (never < 0)."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for event in events:
        items, tokens = out.get((event.stage, event.reason), (0, 0))
        out[(event.stage, event.reason)] = (items + 1, tokens + max(event.tokens_saved, 0))
    return out


def _counts(
    events: Sequence[DropEvent],
) -> tuple[dict[str, dict[str, int]], dict[tuple[str, str], tuple[int, int]]]:
    """A call line's `counts` ("stage.reason": items, tokens saved) and the metrics' view."""
    counts: dict[str, dict[str, int]] = {}
    for event in events:
        count = counts.setdefault(f"{event.stage}.{event.reason}", {"items": 0, "tokens": 0})
        count["items"] += 1
        count["tokens"] += event.tokens_saved
    return counts, _by_label(events)
