"""Task classes from the `task_classes:` section of the YAML, validated once at start-up.

A class names a kind of work: how to recognise it (`match`), its token budget split, how it
compacts (high/low-water marks), which pipeline stages run with which options, what to do
when pinned content alone overflows, and its playbook settings (passed through untouched to
the ACE playbook). Errors name the setting, e.g. `task_classes.coding_agent.budget.history`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.errors import SettingsError

STAGE_ORDER = ("select", "rerank", "cluster", "compress")
DEFAULT_CLASS = "default"
BUDGET_PARTS = ("total", "instructions", "knowledge", "history", "tools", "output_reserve")


@dataclass(frozen=True, slots=True)
class Match:
    tools: frozenset[str] = frozenset()
    system_patterns: tuple[re.Pattern[str], ...] = ()
    models: tuple[re.Pattern[str], ...] = ()
    examples: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BudgetSplit:
    """Token caps per part of the context; `total` caps the whole input."""

    total: int = 120_000
    instructions: int = 16_000
    knowledge: int = 32_000
    history: int = 64_000
    tools: int = 8_000
    output_reserve: int = 4_096


@dataclass(frozen=True, slots=True)
class Compaction:
    """Hysteresis: a step runs when a high-water mark is crossed and compacts to the low one.

    In tokens (fractions of the input budget) and in turns (how many recent turns stay
    verbatim before aged ones are compacted in one step)."""

    high_water: float = 0.9
    low_water: float = 0.7
    verbatim_turns_high: int | None = None
    verbatim_turns_low: int = 2
    verbatim_tokens_high: int | None = None
    verbatim_tokens_low: int = 0
    min_step_turns: int = 0  # an aging step waits until this many turns are verbatim
    max_step_share: float = 1.0  # aging steps may start on at most this share of calls

    @property
    def ages(self) -> bool:
        """Whether aged turns are compacted at all (else only budget pressure compacts)."""
        return self.verbatim_turns_high is not None or self.verbatim_tokens_high is not None


@dataclass(frozen=True, slots=True)
class TaskClass:
    name: str
    description: str = ""
    match: Match = Match()
    budget: BudgetSplit = BudgetSplit()
    compaction: Compaction = Compaction()
    stages: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    on_overflow: Literal["refuse", "passthrough"] = "refuse"
    playbook: dict[str, Any] = field(default_factory=dict)

    def enabled(self, stage: str) -> bool:
        return stage in self.stages

    def options(self, stage: str) -> Mapping[str, Any]:
        return self.stages.get(stage, {})


def _mapping(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SettingsError(f"{where}: expected a mapping, got {type(raw).__name__}")
    return raw


def _patterns(raw: Any, where: str) -> tuple[re.Pattern[str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SettingsError(f"{where}: expected a list of regular expressions")
    out = []
    for i, pattern in enumerate(raw):
        try:
            out.append(re.compile(str(pattern)))
        except re.error as exc:
            raise SettingsError(f"{where}[{i}]: bad regular expression: {exc}") from None
    return tuple(out)


def _strings(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise SettingsError(f"{where}: expected a list of strings")
    return tuple(raw)


def _match(raw: Any, where: str) -> Match:
    raw = _mapping(raw, where)
    unknown = set(raw) - {"tools", "system_patterns", "models", "examples"}
    if unknown:
        raise SettingsError(f"{where}.{sorted(unknown)[0]}: unknown key")
    return Match(
        tools=frozenset(_strings(raw.get("tools"), f"{where}.tools")),
        system_patterns=_patterns(raw.get("system_patterns"), f"{where}.system_patterns"),
        models=_patterns(raw.get("models"), f"{where}.models"),
        examples=_strings(raw.get("examples"), f"{where}.examples"),
    )


def _budget(raw: Any, where: str) -> BudgetSplit:
    raw = _mapping(raw, where)
    values = {}
    for key, value in raw.items():
        if key not in BUDGET_PARTS:
            raise SettingsError(f"{where}.{key}: unknown budget part (one of {BUDGET_PARTS})")
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise SettingsError(f"{where}.{key}: must be a positive integer, got {value!r}")
        values[key] = value
    return BudgetSplit(**values)


def _compaction(raw: Any, where: str) -> Compaction:
    raw = _mapping(raw, where)
    fields = {
        "high_water",
        "low_water",
        "verbatim_turns_high",
        "verbatim_turns_low",
        "verbatim_tokens_high",
        "verbatim_tokens_low",
        "min_step_turns",
        "max_step_share",
    }
    c = Compaction(**{k: v for k, v in raw.items() if k in fields})
    unknown = set(raw) - fields
    if unknown:
        raise SettingsError(f"{where}.{sorted(unknown)[0]}: unknown key")
    if not 0 < c.low_water <= c.high_water <= 1:
        raise SettingsError(f"{where}: need 0 < low_water <= high_water <= 1")
    if c.verbatim_turns_high is not None and not 0 <= c.verbatim_turns_low < c.verbatim_turns_high:
        raise SettingsError(f"{where}: need 0 <= verbatim_turns_low < verbatim_turns_high")
    if (
        c.verbatim_tokens_high is not None
        and not 0 <= c.verbatim_tokens_low < c.verbatim_tokens_high
    ):
        raise SettingsError(f"{where}: need 0 <= verbatim_tokens_low < verbatim_tokens_high")
    return c


_STAGE_KEYS: dict[str, frozenset[str]] = {
    "select": frozenset(
        {"max_turns", "knowledge_max_turns", "stale_patterns", "reminder_patterns"}
    ),
    "rerank": frozenset({"min_relevance", "weights"}),
    "cluster": frozenset({"near_threshold", "min_chars"}),
    "compress": frozenset({"kinds", "min_tokens", "level"}),
}
_KINDS = frozenset({"system", "user", "assistant", "tool_call", "tool_result", "knowledge"})


def _check_options(name: str, options: dict[str, Any], where: str) -> None:
    """Stage options are read on the hot path: check them once, here."""
    allowed = _STAGE_KEYS.get(name)
    if allowed is not None:
        unknown = set(options) - allowed
        if unknown:
            raise SettingsError(f"{where}.{sorted(unknown)[0]}: unknown option of {name}")
    for key in ("max_turns", "knowledge_max_turns", "min_tokens", "min_chars", "level"):
        value = options.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise SettingsError(f"{where}.{key}: must be a non-negative integer, got {value!r}")
    for key in ("near_threshold", "min_relevance"):
        value = options.get(key)
        if value is not None and not (isinstance(value, int | float) and 0 <= value <= 1):
            raise SettingsError(f"{where}.{key}: must be a number in [0, 1], got {value!r}")
    _patterns(options.get("reminder_patterns"), f"{where}.reminder_patterns")
    for i, rule in enumerate(options.get("stale_patterns") or []):
        at = f"{where}.stale_patterns[{i}]"
        if not isinstance(rule, dict) or "pattern" not in rule:
            raise SettingsError(f"{at}: expected {{pattern, after_turns, action}}")
        _patterns([rule["pattern"]], f"{at}.pattern")
        if rule.get("action", "drop") not in ("drop", "mask", "strip"):
            raise SettingsError(f"{at}.action: must be drop, mask or strip")
    kinds = options.get("kinds")
    if kinds is not None and (not isinstance(kinds, list) or set(kinds) - _KINDS):
        raise SettingsError(f"{where}.kinds: must be a list of {sorted(_KINDS)}")


def _stages(raw: Any, where: str, known: frozenset[str]) -> dict[str, Mapping[str, Any]]:
    raw = _mapping(raw, where)
    stages: dict[str, Mapping[str, Any]] = {}
    for name in STAGE_ORDER:
        if name in raw and raw[name] is not False:
            options = _mapping({} if raw[name] is True else raw[name], f"{where}.{name}")
            _check_options(name, options, f"{where}.{name}")
            stages[name] = options
    for name in raw:
        if name not in known:
            raise SettingsError(f"{where}.{name}: unknown stage (known: {sorted(known)})")
    return stages


def task_class(name: str, raw: Any, known_stages: frozenset[str]) -> TaskClass:
    where = f"task_classes.{name}"
    raw = _mapping(raw, where)
    allowed = {"description", "match", "budget", "compaction", "stages", "on_overflow", "playbook"}
    unknown = set(raw) - allowed
    if unknown:
        raise SettingsError(f"{where}.{sorted(unknown)[0]}: unknown key")
    on_overflow = raw.get("on_overflow", "refuse")
    if on_overflow not in ("refuse", "passthrough"):
        raise SettingsError(f"{where}.on_overflow: must be refuse or passthrough")
    try:
        compaction = _compaction(raw.get("compaction"), f"{where}.compaction")
    except TypeError as exc:
        raise SettingsError(f"{where}.compaction: {exc}") from None
    return TaskClass(
        name=name,
        description=str(raw.get("description", "")),
        match=_match(raw.get("match"), f"{where}.match"),
        budget=_budget(raw.get("budget"), f"{where}.budget"),
        compaction=compaction,
        stages=_stages(raw.get("stages"), f"{where}.stages", known_stages),
        on_overflow=on_overflow,
        playbook=dict(_mapping(raw.get("playbook"), f"{where}.playbook")),
    )


def load_task_classes(raw: Mapping[str, Any], known_stages: frozenset[str]) -> dict[str, TaskClass]:
    """All classes, validated; a `default` class is always present."""
    classes = {str(name): task_class(str(name), spec, known_stages) for name, spec in raw.items()}
    classes.setdefault(DEFAULT_CLASS, TaskClass(name=DEFAULT_CLASS))
    return classes
