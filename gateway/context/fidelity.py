"""Live fidelity signals: what one call's compaction cost the agent, from traffic alone.

`CallSignals` is one call's account, recorded into the evidence store
(`gateway/context/evidence.py`) that the forecast controller (`adjust.py`) reads.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CallSignals:
    """One call's signals: of the `needed` values the assistant's next action used that
    occurred earlier in the client's history, `found` were in what the gateway forwarded; of
    its `tool_calls`, `refetches` repeated an earlier call whose result had been compacted.
    `mode` is managed | bypass | unmanaged (bypass and unmanaged are the baseline)."""

    task_class: str
    mode: str
    needed: int
    found: int
    tool_calls: int
    refetches: int
