"""The forecast controller's logic, pure: judge a batch of evidence, move a class's scale.

A class's caps in force are its YAML caps times one scale (`scaled_class`); `decide` judges
the managed calls seen since the last judgement against the class's `ForecastPolicy` and
the baseline (its bypass and unmanaged calls) and says whether to tighten, loosen or hold.
The Redis side (`adjust.py`) stores the scale and applies a judgement once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from gateway.context.fidelity import CallSignals
from gateway.context.taskclass import Compaction, ForecastPolicy, TaskClass

Action = Literal["tighten", "loosen", "hold"]


@dataclass(frozen=True, slots=True)
class Counts:
    """Evidence summed over calls: values needed and found, tool calls, refetches (repeats
    of a compacted result; every repeat in bypass and unmanaged mode) and repeats."""

    calls: int = 0
    needed: int = 0
    found: int = 0
    tool_calls: int = 0
    refetches: int = 0
    repeats: int = 0

    @classmethod
    def of(cls, signals: CallSignals) -> Counts:
        return cls(1, signals.needed, signals.found, signals.tool_calls, signals.refetches,
                   signals.repeats)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Counts:
        return cls(*(int(raw.get(f.name, 0)) for f in fields(cls)))

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    def __add__(self, other: Counts) -> Counts:
        return Counts(*(a + b for a, b in zip(_values(self), _values(other), strict=True)))

    def __sub__(self, other: Counts) -> Counts:
        return Counts(*(max(a - b, 0) for a, b in zip(_values(self), _values(other),
                                                     strict=True)))

    @property
    def recall(self) -> float | None:
        """Share of needed values that were forwarded (None: no value was needed)."""
        return self.found / self.needed if self.needed else None

    @property
    def refetch_rate(self) -> float | None:
        """Share of tool calls that re-fetched a compacted result (None: no tool call)."""
        return self.refetches / self.tool_calls if self.tool_calls else None

    @property
    def repeat_rate(self) -> float | None:
        """Share of tool calls that repeated an earlier call, compacted or not."""
        return self.repeats / self.tool_calls if self.tool_calls else None


def _values(counts: Counts) -> tuple[int, ...]:
    return tuple(getattr(counts, f.name) for f in fields(Counts))


@dataclass(frozen=True, slots=True)
class Judgement:
    """What one batch of evidence decided, and why."""

    action: Action
    scale_from: float
    scale_to: float
    reason: str
    evidence: Counts
    refetch_allowed: float  # the baseline's rate plus the tolerance
    baseline: Literal["measured", "configured"]
    calm: int | None = None  # healthy batches since the last loosening, after this one

    @property
    def moved(self) -> bool:
        return self.scale_to != self.scale_from


def decide(
    policy: ForecastPolicy, scale: float, evidence: Counts, baseline: Counts,
    calm: int | None = None,
) -> Judgement | None:
    """Judge the managed calls since the last judgement (`evidence`) at the current
    `scale`; None when adjustment is off or the batch is under `min_evidence_calls`.
    `calm`: healthy batches since the class last loosened (None: it never did); after a
    loosening it tightens again only on the `tighten_after`-th healthy batch in a row."""
    if not policy.adjust or evidence.calls < policy.min_evidence_calls:
        return None
    measured = baseline.refetch_rate if baseline.calls >= policy.min_evidence_calls else None
    allowed = (policy.refetch_baseline if measured is None else measured)
    allowed += policy.refetch_tolerance
    # Like for like: against a measured baseline (every repeat of uncompacted calls, the
    # agent's natural rate) the managed calls' every repeat is judged; against the
    # configured one, only their repeats of what the gateway compacted.
    rate = evidence.refetch_rate if measured is None else evidence.repeat_rate
    action, reason = _verdict(policy, evidence, rate, allowed)
    if action == "loosen":
        calm = 0
    elif action == "tighten" and calm is not None:
        calm += 1
        if calm < policy.tighten_after:
            action, reason = "hold", f"{reason}; healthy batch {calm} of " \
                f"{policy.tighten_after} since loosening"
    target = scale
    if action == "tighten":
        target = max(policy.min_scale, scale * (1 - policy.step))
    elif action == "loosen":  # back off twice as fast as it tightens
        target = min(policy.max_scale, scale / (1 - policy.step) ** 2)
    target = round(target, 4)
    if action != "hold" and target == scale:
        action, reason = "hold", f"{reason}; already at the bound {scale:g}"
    return Judgement(action, scale, target, reason, evidence, round(allowed, 4),
                     "configured" if measured is None else "measured", calm)


def _verdict(policy: ForecastPolicy, evidence: Counts, refetch: float | None,
             allowed: float) -> tuple[Action, str]:
    recall = evidence.recall
    target, slack = policy.recall_target, policy.hysteresis
    shown = f"recall {_pct(recall)} (target {target:.1%}), refetch {_pct(refetch)} " \
            f"(allowed {allowed:.1%}) over {evidence.calls} calls"
    if recall is not None and recall < target - slack:
        return "loosen", f"recall degraded: {shown}"
    if refetch is not None and refetch > allowed + slack:
        return "loosen", f"refetch degraded: {shown}"
    if recall is None:
        return "hold", f"no needed values to judge recall by: {shown}"
    if recall >= target and (refetch is None or refetch <= allowed):
        return "tighten", f"recall at target, refetch at baseline: {shown}"
    return "hold", f"within the hysteresis band: {shown}"


def _pct(share: float | None) -> str:
    return "n/a" if share is None else f"{share:.1%}"


def _times(value: int, scale: float, floor: int = 1) -> int:
    return max(floor, round(value * scale))


def scaled_compaction(c: Compaction, scale: float) -> Compaction:
    """The compaction marks counted in tokens or turns, times `scale`, still ordered."""
    marks: dict[str, int] = {}
    if c.verbatim_tokens_high is not None:
        high = _times(c.verbatim_tokens_high, scale)
        marks["verbatim_tokens_high"] = high
        marks["verbatim_tokens_low"] = min(_times(c.verbatim_tokens_low, scale, 0), high - 1)
    if c.verbatim_turns_high is not None:
        high = _times(c.verbatim_turns_high, scale)
        marks["verbatim_turns_high"] = high
        marks["verbatim_turns_low"] = min(_times(c.verbatim_turns_low, scale, 0), high - 1)
    return c.model_copy(update=marks)


def scaled_class(cls: TaskClass, scale: float) -> TaskClass:
    """The class with its history and knowledge caps, its compaction marks and the age at
    which its digests are masked times `scale` (the class itself at 1.0); the total input
    cap is the YAML's."""
    if scale == 1.0:
        return cls
    budget = cls.budget.model_copy(update={
        "history": _times(cls.budget.history, scale),
        "knowledge": _times(cls.budget.knowledge, scale),
    })
    stages, compress = cls.stages, cls.stages.compress
    if compress is not None and compress.mask_after_turns is not None:
        stages = stages.model_copy(update={"compress": compress.model_copy(update={
            "mask_after_turns": _times(compress.mask_after_turns, scale)})})
    return cls.model_copy(update={
        "budget": budget, "compaction": scaled_compaction(cls.compaction, scale),
        "stages": stages})
