"""The settings of the ACE loop: YAML `playbook:`, `learner:` and `task_classes.*.playbook`.

Validated once at start-up (`validate`), raising SettingsError that names the bad setting.
A class's own `playbook:` mapping overrides the global `playbook:` defaults key by key.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from gateway.errors import SettingsError
from gateway.settings import Settings

# Tool results that mean the step failed. Case-insensitive regexes, searched in the text.
DEFAULT_FAILURE_PATTERNS = (
    r"Traceback \(most recent call last\)",
    r"\b[A-Z][A-Za-z]*(Error|Exception)\b[:(]",
    r"\b(exit|return) (code|status)[:=]?\s*[1-9]\d*",
    r"\bexited with (code|status) [1-9]\d*",
    r"\bHTTP/\d(\.\d)? [45]\d\d\b",
    r"\bstatus(_code)?[\"']?\s*[:=]\s*[45]\d\d\b",
    r"^\s*(error|fatal|failed)\b",
    r"command not found",
    r"No such file or directory",
    r"Permission denied",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"bad regex {pattern!r}: {exc}") from None
    return pattern


Regex = Annotated[str, AfterValidator(_compiles)]


class FeedbackRules(_Strict):
    """How a tool result is judged, and which outcomes reach the Reflector."""

    failure_patterns: tuple[Regex, ...] = DEFAULT_FAILURE_PATTERNS
    success_patterns: tuple[Regex, ...] = ()  # a match overrides the failure patterns
    exit_code_field: str = "exit_code"  # JSON tool results: non-zero here means failure
    learn_on: tuple[Literal["failure", "success"], ...] = ("failure",)


class ClassPlaybook(_Strict):
    """One task class's playbook settings (global `playbook:` defaults, class overrides)."""

    enabled: bool = False  # the context engine injects only where a class enables it
    cap_tokens: int = Field(default=800, ge=0)  # injected block, per session
    max_tokens: int = Field(default=4000, gt=0)  # whole playbook; past it, prune
    review: Literal["auto", "manual"] = "auto"
    feedback: FeedbackRules = FeedbackRules()


class PlaybookSettings(_Strict):
    """The global `playbook:` section."""

    dedup_threshold: float = Field(default=0.9, gt=0, le=1)
    max_bullet_chars: int = Field(default=400, gt=0)
    decay_half_life_days: float = Field(default=30.0, gt=0)
    defaults: ClassPlaybook = ClassPlaybook()


class LearnerSettings(_Strict):
    """The global `learner:` section: the worker and its LLM calls."""

    reclaim_idle_s: float = Field(default=15.0, gt=0)  # pending this long -> another worker
    max_deliveries: int = Field(default=3, ge=1)  # then dead-letter
    retries: int = Field(default=3, ge=1)  # attempts per LLM call on malformed output
    reflector_rounds: int = Field(default=1, ge=1, le=5)
    timeout_s: float = Field(default=120.0, gt=0)
    batch: int = Field(default=1, ge=1)  # entries taken at a time; more wait unheartbeaten
    trace_ttl_s: int = Field(default=86400, gt=0)
    stream_maxlen: int = Field(default=100_000, gt=0)
    trace_shards: int = Field(default=1, gt=0)  # trace streams, tenant-hashed (keys.py)
    max_trace_chars: int = Field(default=24_000, gt=0)  # of the trace shown to the Reflector
    pending_tasks: int = Field(default=1000, gt=0)  # TraceSink: XADDs in flight before shedding
    # Traces held in memory while Redis is down, written back when it answers; past either
    # bound the oldest are shed (ctxgate_worker_failures_total{reason="trace_outage_shed"}).
    outage_buffer_traces: int = Field(default=5000, ge=0)
    outage_buffer_bytes: int = Field(default=64 << 20, ge=0)
    # The in-process learner's CPU, of one core: while the gateway is quiet, and while it
    # serves calls (learner/throttle.py). `ctxgate worker` is not throttled.
    # at least 0.1% of a core: below it a rest earns less than its own wake-up costs
    # (learner/throttle.py, DEBT_SLACK_S)
    max_cpu_share: float = Field(default=0.1, ge=0.001, le=1)
    busy_cpu_share: float = Field(default=0.02, ge=0.001, le=1)


def problems(exc: ValidationError, name: str) -> str:
    """A validation error as the settings it names, e.g. `task_classes.c.match.tools[0]: ...`."""
    found = []
    for err in exc.errors():
        where = name + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        found.append(f"{where}: {err['msg']}")
    return "invalid settings: " + "; ".join(found)


def _check(model: type[_Strict], raw: Any, name: str) -> Any:
    try:
        return model.model_validate(raw or {})
    except ValidationError as exc:
        raise SettingsError(problems(exc, name)) from None


def playbook_settings(settings: Settings) -> PlaybookSettings:
    raw = dict(settings.playbook or {})
    return _check(PlaybookSettings, raw, "playbook")  # type: ignore[no-any-return]


def learner_settings(settings: Settings) -> LearnerSettings:
    return _check(LearnerSettings, settings.learner, "learner")  # type: ignore[no-any-return]


def merged_playbook(defaults: ClassPlaybook, own: Any) -> Any:
    """A class's own `playbook:` mapping over the global defaults, key by key (`feedback`
    too), still to be validated. The one place the two are merged: the context engine (which
    injects) and the learner (which learns) must agree on a class's settings."""
    if own is None:
        own = {}
    if not isinstance(own, dict):
        return own  # validation names it
    base = defaults.model_dump()
    merged = {**base, **own}
    if isinstance(own.get("feedback"), dict):
        merged["feedback"] = {**base["feedback"], **own["feedback"]}
    return merged


def class_playbook(settings: Settings, task_class: str) -> ClassPlaybook:
    """The effective playbook settings of one class (unknown classes get the defaults); the
    context engine's parsed `TaskClass.playbook` is the same."""
    defaults = playbook_settings(settings).defaults
    spec = settings.task_classes.get(task_class) or {}
    own = spec.get("playbook") if isinstance(spec, dict) else None
    name = f"task_classes.{task_class}.playbook"
    return _check(ClassPlaybook, merged_playbook(defaults, own), name)  # type: ignore[no-any-return]


def validate(settings: Settings) -> None:
    """Raise SettingsError naming the first bad playbook/learner setting."""
    playbook_settings(settings)
    learner_settings(settings)
    for name in settings.task_classes:
        class_playbook(settings, name)
