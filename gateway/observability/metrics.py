"""Every Prometheus metric of the gateway, with the names fixed by INTERFACE.md.

One `Metrics` object per app, on an injectable registry (a fresh one per test). No tenant
or session labels: their cardinality is unbounded.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Buckets reach from sub-millisecond gateway overhead to multi-minute model calls.
_FAST = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_SLOW = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_TOKENS = (0, 50, 100, 250, 500, 1000, 2000, 4000, 8000)
_BUDGETS = (1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000, 1000000)


class Metrics:
    """The gateway's metrics on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._request_metrics(self.registry)
        self._context_metrics(self.registry)
        self._learner_metrics(self.registry)
        self._fidelity_metrics(self.registry)

    def _request_metrics(self, r: CollectorRegistry) -> None:
        self.requests = Counter(
            "ctxgate_requests_total", "Requests served",
            ["endpoint", "status", "task_class"], registry=r)
        self.request_duration = Histogram(
            "ctxgate_request_duration_seconds", "Whole request time",
            ["endpoint"], buckets=_SLOW, registry=r)
        self.overhead = Histogram(
            "ctxgate_overhead_seconds", "Gateway time, upstream wait excluded",
            ["endpoint"], buckets=_FAST, registry=r)
        self.upstream_duration = Histogram(
            "ctxgate_upstream_duration_seconds", "Upstream call time",
            ["endpoint"], buckets=_SLOW, registry=r)
        self.upstream_ttfb = Histogram(
            "ctxgate_upstream_ttfb_seconds", "Time to the upstream's response headers",
            ["endpoint"], buckets=_SLOW, registry=r)

    def _context_metrics(self, r: CollectorRegistry) -> None:
        self.context_tokens = Counter(
            "ctxgate_context_tokens_total", "Input tokens before and after fitting",
            ["task_class", "phase"], registry=r)
        self.dropped_items = Counter(
            "ctxgate_dropped_items_total", "Items dropped, masked, compressed or merged",
            ["task_class", "stage", "reason"], registry=r)
        self.dropped_tokens = Counter(
            "ctxgate_dropped_tokens_total", "Tokens saved by drops",
            ["task_class", "stage", "reason"], registry=r)
        self.budget_exceeded = Counter(
            "ctxgate_budget_exceeded_total", "Calls whose pinned content exceeded the budget",
            ["task_class"], registry=r)
        self.fit_timeouts = Counter(
            "ctxgate_fit_timeouts_total",
            "Calls whose fitting passed CTXGATE_FIT_TIMEOUT_S (cause: deadline, queue_full) "
            "and went out unmanaged or were refused",
            ["task_class", "cause", "outcome"], registry=r)
        self.budget_tokens = Histogram(
            "ctxgate_budget_tokens",
            "Input budget each managed call was given, in the gateway's token count (as "
            "ctxgate_context_tokens_total), by where it came from (x-ctxgate-budget-source)",
            ["task_class", "source"], buckets=_BUDGETS, registry=r)
        self.stage_seconds = Histogram(
            "ctxgate_pipeline_stage_seconds", "Time per pipeline stage",
            ["stage"], buckets=_FAST, registry=r)
        self.prefix_stable = Counter(
            "ctxgate_prefix_stable_total",
            "Calls whose rendered prefix extends the previous call's",
            ["task_class", "stable"], registry=r)
        self.playbook_bullets = Gauge(
            "ctxgate_playbook_bullets", "Active bullets per task class",
            ["task_class"], registry=r)
        self.playbook_injected_tokens = Histogram(
            "ctxgate_playbook_injected_tokens", "Tokens of the injected playbook block",
            ["task_class"], buckets=_TOKENS, registry=r)

    def _learner_metrics(self, r: CollectorRegistry) -> None:
        self.feedback_events = Counter(
            "ctxgate_feedback_events_total", "Feedback signals received",
            ["source", "outcome"], registry=r)
        self.curator_operations = Counter(
            "ctxgate_curator_operations_total", "Curator operations merged",
            ["op"], registry=r)
        self.reflection_duration = Histogram(
            "ctxgate_reflection_duration_seconds", "Reflector+Curator time per trace",
            buckets=_SLOW, registry=r)
        self.trace_queue_depth = Gauge(
            "ctxgate_trace_queue_depth", "Trace events waiting for a worker", registry=r)
        self.worker_failures = Counter(
            "ctxgate_worker_failures_total", "Learner failures", ["reason"], registry=r)
        # Not in INTERFACE.md's table: traces held in memory while Redis is down (those
        # shed past the bounds count on ctxgate_worker_failures_total{reason=trace_outage_shed}).
        self.trace_outage_buffered = Gauge(
            "ctxgate_trace_outage_buffered",
            "Traces held in memory while Redis is down, to be written when it answers",
            registry=r)
        self.trace_outage_buffered_bytes = Gauge(
            "ctxgate_trace_outage_buffered_bytes", "Bytes of the traces held while Redis is down",
            registry=r)
        # Per trace shard (learner.trace_shards): not in INTERFACE.md's table, whose two
        # metrics above keep their labels and count every shard.
        self.trace_shard_depth = Gauge(
            "ctxgate_trace_shard_depth", "Trace events waiting for a worker, per shard",
            ["shard"], registry=r)
        self.trace_shard_failures = Counter(
            "ctxgate_trace_shard_failures_total", "Learner failures, per trace shard",
            ["shard", "reason"], registry=r)

    def _fidelity_metrics(self, r: CollectorRegistry) -> None:
        # Live fidelity signals (gateway/context/fidelity.py), per class and mode
        # (managed | bypass | unmanaged); ratios are PromQL's: found / needed, refetches /
        # tool calls.
        labels = ["task_class", "mode"]
        self.recall_turns = Counter(
            "ctxgate_recall_turns_total",
            "Assistant turns whose fidelity was measured (the answer to a session's call)",
            labels, registry=r)
        self.recall_needed = Counter(
            "ctxgate_recall_needed_values_total",
            "Values a turn's action used that occurred earlier in the client's history",
            labels, registry=r)
        self.recall_found = Counter(
            "ctxgate_recall_found_values_total",
            "Needed values present in what the gateway forwarded for the call",
            labels, registry=r)
        self.refetch_tool_calls = Counter(
            "ctxgate_refetch_tool_calls_total", "Tool calls of the measured turns",
            labels, registry=r)
        self.refetch_refetches = Counter(
            "ctxgate_refetch_refetches_total",
            "Tool calls repeating an earlier call whose result was compacted (managed) or "
            "any earlier call (bypass, unmanaged: the baseline)",
            labels, registry=r)
        self.refetch_repeats = Counter(
            "ctxgate_refetch_repeats_total",
            "Tool calls repeating an earlier call of the session (same tool, near-same "
            "arguments), whatever became of its result",
            labels, registry=r)

    def fidelity(self, task_class: str, mode: str, needed: int, found: int,
                 tool_calls: int, refetches: int, repeats: int) -> None:
        """One measured turn's signals."""
        labels = (task_class, mode)
        self.recall_turns.labels(*labels).inc()
        self.recall_needed.labels(*labels).inc(needed)
        self.recall_found.labels(*labels).inc(found)
        self.refetch_tool_calls.labels(*labels).inc(tool_calls)
        self.refetch_refetches.labels(*labels).inc(refetches)
        self.refetch_repeats.labels(*labels).inc(repeats)

    def worker_failure(self, reason: str, shard: int, n: int = 1) -> None:
        """One failure on `ctxgate_worker_failures_total{reason}` and on its shard's
        `ctxgate_trace_shard_failures_total{shard,reason}`."""
        self.worker_failures.labels(reason).inc(n)
        self.trace_shard_failures.labels(str(shard), reason).inc(n)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
