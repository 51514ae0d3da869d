"""Traces kept in memory while the store (Redis) is down, to be written once it answers.

A call made during a Redis outage is still answered (fitting fails open); its trace is
kept here, as the bytes the stored trace would hold and nothing more, bounded by count and
by bytes (`learner.outage_buffer_traces`, `learner.outage_buffer_bytes`). Past either
bound the oldest are shed: a long outage costs the oldest lessons, never the gateway's
memory. The trace writer (`traces.TraceSink`) writes them back in order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One trace as written to Redis: its event JSON (messages already trimmed), its
    explainer account, and whether it is queued for the workers. No request headers, no
    credentials: exactly what the stored trace holds."""

    tenant: str
    trace_id: str
    event: bytes
    account: bytes | None
    teaches: bool
    pieces: tuple[tuple[str, bytes], ...] = ()  # the account's and the messages' runs

    @property
    def size(self) -> int:
        return (len(self.event) + len(self.account or b"") + len(self.tenant)
                + len(self.trace_id) + sum(len(raw) for _, raw in self.pieces))


class OutageBuffer:
    """Trace records the store refused, oldest first, bounded by count and bytes."""

    def __init__(self, max_traces: int, max_bytes: int) -> None:
        self.max_traces = max_traces
        self.max_bytes = max_bytes
        self._records: deque[TraceRecord] = deque()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._records)

    def extend(self, records: Iterable[TraceRecord]) -> list[TraceRecord]:
        """Keep `records` after the others; returns the oldest shed to stay in bounds."""
        for record in records:
            self._records.append(record)
            self.bytes += record.size
        return self._shed()

    def put_back(self, records: list[TraceRecord]) -> list[TraceRecord]:
        """Return records taken by `take` (their write failed) to the front, in order;
        returns the oldest shed if newer ones filled the buffer meanwhile."""
        for record in reversed(records):
            self._records.appendleft(record)
            self.bytes += record.size
        return self._shed()

    def take(self, n: int) -> list[TraceRecord]:
        """The `n` oldest records, removed (`put_back` returns them if their write fails)."""
        taken = [self._records.popleft() for _ in range(min(n, len(self._records)))]
        self.bytes -= sum(record.size for record in taken)
        return taken

    def _shed(self) -> list[TraceRecord]:
        shed = []
        while self._records and (len(self._records) > self.max_traces
                                 or self.bytes > self.max_bytes):
            record = self._records.popleft()
            self.bytes -= record.size
            shed.append(record)
        return shed
