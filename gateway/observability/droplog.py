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
from itertools import chain
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
class _Tally:
    """A call's events summed as its summary counts them. The next call whose events start
    with the same objects (a step call's drops: the prefix's up to where the step changed
    something, then new ones, `engine._render`) takes off the old rest and adds its own."""

    steps: dict[int, int] = field(default_factory=dict)  # step -> events
    # (stage, reason) -> items, tokens saved, tokens as the metric counts them, first position
    labels: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    unique: bool = True  # no two events of one item: each event's line is its signature
    # The events' items (`present`): kept while the events are unique, so that a call whose
    # events extend the previous call's adds only its new ones.
    present: set[str] | None = None

    def add(self, events: Sequence[DropEvent], start: int) -> None:
        for pos in range(start, len(events)):
            event = events[pos]
            self.steps[event.step] = self.steps.get(event.step, 0) + 1
            saved = event.tokens_saved
            label = self.labels.get((event.stage, event.reason))
            if label is None:
                self.labels[(event.stage, event.reason)] = [1, saved, max(saved, 0), pos]
            else:
                label[0] += 1
                label[1] += saved
                label[2] += max(saved, 0)

    def remove(self, events: Sequence[DropEvent], start: int) -> None:
        """Take off events[start:] (a label first seen there has no event left before)."""
        for pos in range(start, len(events)):
            event = events[pos]
            self.steps[event.step] -= 1
            if not self.steps[event.step]:
                del self.steps[event.step]
            saved = event.tokens_saved
            label = self.labels[(event.stage, event.reason)]
            label[0] -= 1
            label[1] -= saved
            label[2] -= max(saved, 0)
        for key in [key for key, label in self.labels.items() if label[3] >= start]:
            del self.labels[key]

    def summary(self, present: set[str], by_step: dict[int, set[str]],
                extended: _Extended | None = None) -> _CallSummary:
        """The call's summary, `present`: its events' items, `by_step`: the items logged.
        `extended`: the previous call's summary and the items added, when this call's events
        are that call's with events added (`_excluded_after`)."""
        steps = sorted(self.steps)
        if extended is None:
            excluded = sorted(chain.from_iterable(by_step.get(step, set()) - present
                                                  for step in steps))
        else:
            excluded = _excluded_after(extended, steps, present, by_step)
        ordered = sorted(self.labels.items(), key=lambda kv: kv[1][3])  # as first seen
        counts = {f"{stage}.{reason}": {"items": label[0], "tokens": label[1]}
                  for (stage, reason), label in ordered}
        by_label = {key: (label[0], label[2]) for key, label in ordered}
        return _CallSummary(steps, excluded, counts, sum(label[1] for _, label in ordered),
                            by_label)


@dataclass(frozen=True, slots=True)
class _Extended:
    """A call whose events are all the previous call's (the same objects, or equal ones)
    followed by new ones: that call's summary, and the new events' items."""

    previous: _CallSummary
    added: set[str]


def _excluded_after(extended: _Extended, steps: list[int], present: set[str],
                    by_step: dict[int, set[str]]) -> list[str]:
    """`excluded` (per step in force, its logged items not present, sorted) from the
    previous call's, for events that only extend that call's. Its items were those of the
    previous steps logged then and not present then; now the added items are present (so
    left out) and the steps first in force add theirs. An item logged at an old step since
    is one of the added events': present, so not excluded."""
    previous = extended.previous
    excluded = previous.excluded
    if not extended.added.isdisjoint(excluded):
        excluded = [item for item in excluded if item not in extended.added]
    old = set(previous.steps)
    gained = [item for step in steps if step not in old
              for item in by_step.get(step, set()) - present]
    return sorted(excluded + gained) if gained else list(excluded)


@dataclass
class _Logged:
    """What this process has logged of one session's decisions, and its latest call's
    events with their summary: a call whose events are that very list (the engine hands
    the same list on while a session's decisions in force do not change) is summarised
    by a lookup, and one whose events start with the same objects from their tally, so a
    call line costs what is new, not the history's drops."""

    lines: dict[tuple[str, int], tuple[Any, ...]] = field(default_factory=dict)
    by_step: dict[int, set[str]] = field(default_factory=dict)
    events: Sequence[DropEvent] | None = None
    summary: _CallSummary | None = None
    tally: _Tally | None = None


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
        old, previous = logged.events, logged.summary
        start, tally = _resume(logged, events)
        new = []  # the events before `start` were the previous call's: logged as they are
        for pos in range(start, len(events)):
            event = events[pos]
            line = (event.item_id, event.step)
            signature = event.signature()
            if logged.lines.get(line) != signature:
                logged.lines[line] = signature
                logged.by_step.setdefault(event.step, set()).add(event.item_id)
                new.append(event)
        extended = None
        present = tally.present
        if (present is not None and previous is not None and old is not None
                and start == len(old)):  # the previous call's events, then new ones
            extended = _Extended(previous, {events[pos].item_id
                                            for pos in range(start, len(events))})
            present |= extended.added
        else:
            present = {event.item_id for event in events}
        tally.unique = len(present) == len(events)
        tally.present = present if tally.unique else None
        summary = tally.summary(present, logged.by_step, extended)
        self._remember(key, logged, events, summary, tally)
        return new, summary

    def _remember(self, key: tuple[str, str], logged: _Logged, events: Sequence[DropEvent],
                  summary: _CallSummary, tally: _Tally) -> None:
        """Keep `events`, their summary and tally for the session's next call, for a bounded
        number of sessions (the least recent forget theirs)."""
        logged.events, logged.summary, logged.tally = events, summary, tally
        self._summarised[key] = logged
        self._summarised.move_to_end(key)
        if len(self._summarised) > self._max_summarised:
            _, oldest = self._summarised.popitem(last=False)
            oldest.events = oldest.summary = oldest.tally = None

    def close(self) -> None:
        if self._owned:
            self._out.close()


def _resume(logged: _Logged, events: Sequence[DropEvent]) -> tuple[int, _Tally]:
    """How many of `events` lead as the session's previous call's did (the same objects;
    or all of them, equal: an equal event has the same line and counts the same), and the
    tally of `events`: the previous one with its other events taken off and the new ones
    added. None lead when the previous call's are not kept or had an item twice."""
    old, tally = logged.events, logged.tally
    if old is None or tally is None or not tally.unique:
        tally = _Tally()
        tally.add(events, 0)
        return 0, tally
    k = len(old)
    if events[:k] != old:  # at C speed (identity first): mostly a call extends the last one's
        k, n = 0, min(k, len(events))
        while k < n and old[k] is events[k]:
            k += 1
    tally.remove(old, k)
    tally.add(events, k)
    return k, tally


def _by_label(events: Sequence[DropEvent]) -> dict[tuple[str, str], tuple[int, int]]:
    """Per (stage, reason): events, and tokens saved as the metric counts them (never < 0)."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for event in events:
        items, tokens = out.get((event.stage, event.reason), (0, 0))
        out[(event.stage, event.reason)] = (items + 1, tokens + max(event.tokens_saved, 0))
    return out
