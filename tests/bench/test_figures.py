"""bench/figures.py: the engine row's per-call time ratios on long sessions."""

from __future__ import annotations

from typing import Any

from bench.figures import LONG_SESSION_CALLS, engine_row


def _record(session: str, ms: float) -> dict[str, Any]:
    return {"session": session, "engine": {"ms": ms, "class": "agent", "extends_previous": None,
                                           "engine_prefix_stable": None, "droplog_ok": True}}


def test_one_slow_late_call_moves_the_mean_ratio_not_the_median_one() -> None:
    # 300 calls growing from 1 ms to 3 ms, one late call of 2 s (a first over-budget step
    # embedding its texts); a short session is left out of both.
    ms = [1 + 2 * k / (LONG_SESSION_CALLS - 1) for k in range(LONG_SESSION_CALLS)]
    ms[-5] = 2000.0
    records = [_record("long", m) for m in ms] + [_record("short", 5.0) for _ in range(40)]
    row = engine_row(records)
    assert set(row["long_session_time_ratio"]) == {"long"}
    assert row["long_session_time_ratio"]["long"] > 30
    median = row["long_session_time_ratio_median"]["long"]
    expected = (sorted(ms[-20:])[9] + sorted(ms[-20:])[10]) / 2 / (
        (sorted(ms[:20])[9] + sorted(ms[:20])[10]) / 2)
    assert abs(median - expected) < 1e-9 and 2.5 < median < 3.0
