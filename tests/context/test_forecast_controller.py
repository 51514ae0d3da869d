"""The forecast controller's judgement, pure: when a class's caps tighten, loosen or hold."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.context.controller import Counts, decide, scaled_class
from gateway.context.taskclass import ForecastPolicy, task_class
from gateway.errors import SettingsError

POLICY = ForecastPolicy(adjust=True, recall_target=0.98, refetch_baseline=0.05,
                        refetch_tolerance=0.02, hysteresis=0.01, min_evidence_calls=50,
                        step=0.1, min_scale=0.5, max_scale=1.5)
NO_BASELINE = Counts()


def batch(calls: int = 100, recall: float = 1.0, refetch: float = 0.0,
          repeat: float | None = None) -> Counts:
    """`calls` calls needing 10 values each and making 2 tool calls each; a refetch is a
    repeat too (`repeat` defaults to the refetch rate)."""
    needed, tools = 10 * calls, 2 * calls
    repeat = refetch if repeat is None else repeat
    return Counts(calls, needed, round(recall * needed), tools, round(refetch * tools),
                  round(repeat * tools))


def test_tightens_when_recall_is_at_target_and_refetch_at_baseline() -> None:
    j = decide(POLICY, 1.0, batch(recall=0.99, refetch=0.05), NO_BASELINE)
    assert j is not None and j.action == "tighten" and j.scale_to == 0.9
    assert "recall at target" in j.reason and j.baseline == "configured"


def test_loosens_when_recall_degrades() -> None:
    j = decide(POLICY, 0.9, batch(recall=0.95), NO_BASELINE)
    assert j is not None and j.action == "loosen" and "recall degraded" in j.reason
    assert j.scale_to == pytest.approx(0.9 / 0.81, abs=1e-4)  # two steps back


def test_loosens_when_refetch_passes_the_measured_baseline() -> None:
    measured = batch(calls=80, refetch=0.10)  # bypassed calls refetch 10% on their own
    at_baseline = decide(POLICY, 1.0, batch(refetch=0.11), measured)
    assert at_baseline is not None and at_baseline.action == "tighten"
    assert at_baseline.baseline == "measured" and at_baseline.refetch_allowed == 0.12
    over = decide(POLICY, 1.0, batch(refetch=0.20), measured)
    assert over is not None and over.action == "loosen" and "refetch degraded" in over.reason


def test_a_measured_baseline_is_compared_with_every_managed_repeat() -> None:
    # An agent that repeats half its calls on its own: bypassed calls count every repeat.
    natural = batch(calls=80, refetch=0.5)
    # Managed calls repeat as often, a quarter of them after a compaction: not a degradation.
    same = decide(POLICY, 1.0, batch(refetch=0.25, repeat=0.5), natural)
    assert same is not None and same.action == "tighten", same
    # Managed calls repeating more than the agent does on its own: the compaction costs.
    more = decide(POLICY, 1.0, batch(refetch=0.25, repeat=0.65), natural)
    assert more is not None and more.action == "loosen" and "refetch degraded" in more.reason


def test_a_small_baseline_is_not_trusted() -> None:
    small = batch(calls=10, refetch=0.5)
    j = decide(POLICY, 1.0, batch(refetch=0.2), small)
    assert j is not None and j.baseline == "configured" and j.action == "loosen"


@pytest.mark.parametrize("recall", [0.975, 0.971])
def test_holds_inside_the_hysteresis_band(recall: float) -> None:
    j = decide(POLICY, 1.0, batch(recall=recall), NO_BASELINE)
    assert j is not None and j.action == "hold" and not j.moved


def test_no_move_under_the_minimum_of_evidence() -> None:
    assert decide(POLICY, 1.0, batch(calls=49, recall=0.5), NO_BASELINE) is None
    assert decide(POLICY, 1.0, batch(calls=50, recall=0.5), NO_BASELINE) is not None


def test_no_recall_evidence_never_tightens() -> None:
    j = decide(POLICY, 1.0, Counts(calls=100), NO_BASELINE)
    assert j is not None and j.action == "hold"


def test_off_switch() -> None:
    off = POLICY.model_copy(update={"adjust": False})
    assert decide(off, 1.0, batch(recall=0.5), NO_BASELINE) is None


def test_stops_at_the_bounds() -> None:
    low = decide(POLICY, 0.5, batch(), NO_BASELINE)
    assert low is not None and low.action == "hold" and low.scale_to == 0.5
    assert "bound" in low.reason
    near = decide(POLICY, 0.52, batch(), NO_BASELINE)
    assert near is not None and near.scale_to == 0.5
    high = decide(POLICY, 1.4, batch(recall=0.5), NO_BASELINE)
    assert high is not None and high.scale_to == 1.5


@given(st.floats(0.5, 1.5), st.floats(0, 1), st.floats(0, 1), st.integers(50, 10_000))
def test_never_beyond_the_bounds(scale: float, recall: float, refetch: float,
                                 calls: int) -> None:
    j = decide(POLICY, scale, batch(calls, recall, refetch), NO_BASELINE)
    assert j is not None and POLICY.min_scale <= j.scale_to <= POLICY.max_scale


def test_counts_add_and_subtract() -> None:
    a, b = Counts(3, 30, 29, 6, 1, 2), Counts(1, 10, 10, 2, 0, 1)
    assert a - b == Counts(2, 20, 19, 4, 1, 1) and b + (a - b) == a
    assert (a - b).recall == 0.95 and Counts().recall is None


def _agent_class(**compaction: Any) -> Any:
    return task_class("agentish", {
        "budget": {"history": 40_000, "knowledge": 10_000},
        "compaction": {"verbatim_tokens_high": 1000, "verbatim_tokens_low": 100,
                       "verbatim_turns_high": 6, "verbatim_turns_low": 2, **compaction},
        "forecast": {"adjust": True, "min_scale": 0.3}})


def test_scaled_class_moves_caps_and_marks_and_keeps_them_ordered() -> None:
    cls = _agent_class()
    half = scaled_class(cls, 0.5)
    assert (half.budget.history, half.budget.knowledge) == (20_000, 5_000)
    assert half.budget.total == cls.budget.total  # the input ceiling is the YAML's
    c = half.compaction
    assert (c.verbatim_tokens_high, c.verbatim_tokens_low) == (500, 50)
    assert (c.verbatim_turns_high, c.verbatim_turns_low) == (3, 1)
    tiny = scaled_class(cls, 0.01).compaction
    assert tiny.verbatim_turns_low < tiny.verbatim_turns_high == 1
    assert scaled_class(cls, 1.0) is cls


def test_the_policy_is_typed_and_bounded() -> None:
    with pytest.raises(SettingsError, match=r"task_classes\.bad\.forecast\.min_scale"):
        task_class("bad", {"forecast": {"min_scale": 1.5}})
    with pytest.raises(SettingsError, match=r"task_classes\.bad\.forecast\.adjust"):
        task_class("bad", {"forecast": {"adjust": "sometimes"}})


def test_after_loosening_it_waits_for_healthy_batches_in_a_row() -> None:
    policy = POLICY.model_copy(update={"tighten_after": 2})
    loosened = decide(policy, 1.0, batch(recall=0.9), NO_BASELINE, calm=5)
    assert loosened is not None and loosened.action == "loosen" and loosened.calm == 0
    first = decide(policy, 1.2, batch(), NO_BASELINE, loosened.calm)
    assert first is not None and first.action == "hold" and first.calm == 1
    assert "healthy batch 1 of 2" in first.reason
    second = decide(policy, 1.2, batch(), NO_BASELINE, first.calm)
    assert second is not None and second.action == "tighten" and second.calm == 2
    never = decide(policy, 1.0, batch(), NO_BASELINE, None)  # never loosened: no wait
    assert never is not None and never.action == "tighten" and never.calm is None
