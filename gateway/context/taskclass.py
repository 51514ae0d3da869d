"""Task classes from the `task_classes:` section of the YAML, parsed once at start-up.

A class names a kind of work: how to recognise it (`match`), its token budget split, how it
compacts (high/low-water marks), which pipeline stages run with which options, what to do
when pinned content alone overflows, and its playbook settings (the global
`playbook.defaults` with the class's own `playbook:` keys over them, as the learner reads
them). Every consumer reads these typed models; nothing reads the raw YAML again. Errors
name the setting, e.g. `task_classes.coding_agent.budget.history`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gateway.errors import SettingsError
from gateway.playbook.config import ClassPlaybook, merged_playbook, playbook_settings, problems
from gateway.settings import Settings

STAGE_ORDER = ("select", "rerank", "cluster", "compress")
DEFAULT_CLASS = "default"
CompressKind = Literal["system", "user", "assistant", "tool_call", "tool_result", "knowledge"]
DEFAULT_KINDS: tuple[CompressKind, ...] = (
    "tool_result", "user", "assistant", "tool_call", "knowledge"
)


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"bad regular expression: {exc}") from None
    return pattern


Regex = Annotated[str, AfterValidator(_compiles)]  # kept as text: decisions remember the pattern
Count = Annotated[int, Field(strict=True, ge=0)]  # strict: `true` is not a count
Share = Annotated[float, Field(ge=0, le=1)]


def _none_is_empty(value: Any) -> Any:
    return () if value is None else value  # `key:` with nothing after it: an empty list


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Match(_Settings):
    tools: frozenset[str] = frozenset()
    system_patterns: tuple[re.Pattern[str], ...] = ()
    models: tuple[re.Pattern[str], ...] = ()
    examples: tuple[str, ...] = ()
    # The fallback for agents: any request that defines tools or carries tool history and
    # that no tool-name or system-prompt rule matched (checked before model and examples).
    agents: bool = False

    _lists = field_validator("tools", "system_patterns", "models", "examples", mode="before")(
        _none_is_empty
    )


class BudgetSplit(_Settings):
    """Token caps per part of the context; `total` caps the whole input."""

    total: Annotated[int, Field(strict=True, gt=0)] = 120_000
    instructions: Annotated[int, Field(strict=True, gt=0)] = 16_000
    knowledge: Annotated[int, Field(strict=True, gt=0)] = 32_000
    history: Annotated[int, Field(strict=True, gt=0)] = 64_000
    tools: Annotated[int, Field(strict=True, gt=0)] = 8_000
    output_reserve: Annotated[int, Field(strict=True, gt=0)] = 4_096


class Compaction(_Settings):
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
    # A young, small session's credit (`steps.on_credit`): while it has fewer than
    # `early_calls` calls, each of at most `early_max_tokens`, it may be one aging step
    # ahead of the share; its first step also once `early_share` of the call is verbatim
    # behind the latest exchange. The credit then lapses: the next step waits for the share.
    early_calls: int = 0
    early_max_tokens: int = 0
    early_share: float = 0.0
    # A step's rewrite of an old message repays (`steps.unrepaid`) when its saving, at the
    # cached price, over the calls still to come outweighs what it alone makes re-sent at
    # full price; the calls to come are estimated as the calls so far, at least
    # `repay_calls` (0: every rewrite of a step is kept). Weighed on calls of at most
    # `early_max_tokens`, and on larger calls while the session has had at most
    # `repay_young_calls` calls (0: small calls only).
    repay_calls: int = 0
    repay_young_calls: int = 0
    # Once the agent (tenant, system prompt, tool set) has started this many sessions
    # before this one, and `repay_agent_quantile` of those that reached this one's age
    # ended before `repay_calls` calls, a step is taken only if some of it repays over
    # the calls those still had left, at least one (`steps.agent_left`; 0: off).
    repay_agent_runs: int = 0
    repay_agent_quantile: Share = 0.9
    # In a text-tool agent's queue of tasks, a later task takes its first step once it has
    # lasted the compress stage's `done_results_turns`, and no other until it has lasted
    # this many turns (`steps.waits_for_task`; None: off).
    queue_step_turns: int | None = None
    # ... only while the results since the task before's start, verbatim, reach this many
    # tokens (`steps.waits_for_task`): smaller ones cost a step's re-send less than waiting
    queue_wait_tokens: int = 0
    # A step the share does not allow yet, not the session's first (`steps.ahead_of_share`:
    # the young-session credit's later step), is weighed over this share of the session's
    # calls so far, not over `repay_calls` (0: off).
    repay_ahead_share: Share = 0.0
    # ... unless the agent's record, once it has started more than this many sessions, says
    # half of its sessions of this age ran on to `repay_calls` (`steps.long_running`; 0: the
    # record is not read).
    repay_ahead_runs: int = 0
    # The price of a cached input token relative to a fresh one (the provider's prompt-cache
    # discount): what a step's full-price re-send is weighed against (`steps.py`).
    cached_price: float = 0.1

    @model_validator(mode="after")
    def _ordered(self) -> Compaction:
        if not 0 < self.low_water <= self.high_water <= 1:
            raise ValueError("need 0 < low_water <= high_water <= 1")
        if not 0 < self.cached_price <= 1:
            raise ValueError("need 0 < cached_price <= 1")
        turns, tokens = self.verbatim_turns_high, self.verbatim_tokens_high
        if turns is not None and not 0 <= self.verbatim_turns_low < turns:
            raise ValueError("need 0 <= verbatim_turns_low < verbatim_turns_high")
        if tokens is not None and not 0 <= self.verbatim_tokens_low < tokens:
            raise ValueError("need 0 <= verbatim_tokens_low < verbatim_tokens_high")
        return self

    @property
    def ages(self) -> bool:
        """Whether aged turns are compacted at all (else only budget pressure compacts)."""
        return self.verbatim_turns_high is not None or self.verbatim_tokens_high is not None


class StaleRule(_Settings):
    """An instruction that goes stale: once `after_turns` old, its message is dropped or
    masked, or (`strip`) the matching block is cut out of it."""

    pattern: Regex
    after_turns: Count = 0
    action: Literal["drop", "mask", "strip"] = "drop"
    _regex: re.Pattern[str] = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._regex = re.compile(self.pattern)

    @property
    def regex(self) -> re.Pattern[str]:
        return self._regex


class SelectOptions(_Settings):
    max_turns: Count | None = None  # drop turns older than this
    knowledge_max_turns: Count | None = None  # drop retrieved documents older than this
    stale_patterns: tuple[StaleRule, ...] = ()
    reminder_patterns: tuple[Regex, ...] = ()  # an older copy goes when a newer one repeats it

    _lists = field_validator("stale_patterns", "reminder_patterns", mode="before")(
        _none_is_empty
    )

    @property
    def has_rules(self) -> bool:
        return bool(
            self.max_turns is not None
            or self.knowledge_max_turns is not None
            or self.stale_patterns
            or self.reminder_patterns
        )


class RerankWeights(_Settings):
    relevance: float = 1.0
    recency: float = 0.5
    goal: float = 2.0
    error: float = 0.3
    finished: float = -0.3


class RerankOptions(_Settings):
    min_relevance: Share | None = None  # drop retrieved documents less relevant than this
    weights: RerankWeights = RerankWeights()


class ClusterOptions(_Settings):
    near_threshold: Share = 0.85  # MinHash Jaccard at which two texts are near duplicates
    min_chars: Count = 200
    # A new tool result or turn that repeats, byte for byte, an item the model still reads
    # verbatim goes out as a pointer from its first call on: lossless, and free for the
    # prompt cache (it was never sent verbatim, so no sent prefix changes).
    on_arrival: bool = False
    arrival_min_chars: Count = 200  # shorter repeats stay as sent (a pointer is ~70-120 characters)
    # With on_arrival, a tool call whose arguments repeat an earlier forwarded call's goes out
    # with pointers in place of its string values (calls.py). The model then reads its own
    # past calls in that form: false keeps every call's arguments as the model wrote them.
    arrival_calls: bool = True
    # The least length of a repeated call's arguments sent with pointers (None: as
    # arrival_min_chars): a call's pointer replaces its string values only, keys stay.
    arrival_call_min_chars: Count | None = None
    # With on_arrival, a new tool result or turn whose runs of lines (arrival_min_chars or
    # more each) repeat an item the model still reads verbatim goes out with each run as a
    # one-line marker (lines.py): pages after a click, re-run listings, overlapping windows.
    arrival_lines: bool = False
    # With on_arrival, a new tool result or turn that is JSON laid out with whitespace goes out
    # without the whitespace outside its strings (lines.minified): the same value, fewer
    # characters, from its first call on (no sent prefix changes).
    arrival_json: bool = False
    # With arrival_lines, the assistant's own turns sent as written are items a new output's
    # runs of lines may repeat too (a marker names the turn; the turn goes as written): a
    # harness that puts the code the agent wrote into its next prompt, each line pointing to
    # the latest copy that has it (`engine.resend_aging`; default false).
    arrival_from_turns: bool = False


# The cluster options of repeats on arrival (a class that takes them from the agent policy
# keeps its own near-duplicate options: `engine.resend_arrivals`)
ARRIVAL_OPTIONS = ("on_arrival", "arrival_min_chars", "arrival_calls", "arrival_call_min_chars",
                   "arrival_lines", "arrival_json")


class CompressOptions(_Settings):
    kinds: tuple[CompressKind, ...] = DEFAULT_KINDS  # which items age out into summaries
    min_tokens: Count = 40
    level: Count = 1
    # An aged summary this many turns old becomes a one-line placeholder at the next step:
    # digests of long sessions otherwise add up to most of what is sent.
    mask_after_turns: Count | None = None
    # Old user turns (not the task) at least this many tokens of text, sent verbatim (too
    # short to digest) or as a short digest, become gists (placeholder and the values they
    # named) in the same batches as the digests (None: only digests are masked).
    mask_turns_min_tokens: Count | None = None
    # ... and only once the session has made at least this many assistant turns: a batch
    # near the end of a short run is never repaid by the calls after it (tau-bench's
    # 11-call runs: cost @0.1 0.1-0.2 point worse ungated; bench/README.md, "Short
    # tool-call ids, and old customer turns as gists on long sessions").
    mask_turns_from_turns: Count = 0
    # The current task's items (after the latest user message) join a batch only once that
    # task has lasted this many assistant turns (None: no gate). A ticket queue's task
    # otherwise meets a batch started by earlier tasks' digests at any point of it, where a
    # run of that task alone reaches its first batch only `2 * mask_after_turns` turns in.
    mask_task_from_turns: Count | None = None
    # In a session of 2+ user messages, the current task's items (after the latest one) join
    # a batch only once they are this many turns old, and start one at this many plus
    # `mask_after_turns` (None: as any item). A queue's current task is what the agent is
    # still working with; earlier tasks' items are done with (`done_task_turns`).
    mask_current_turns: Count | None = None
    # Once a user message closes a task that lasted at least this many assistant turns, the
    # items before it go to their last form (a placeholder) at the next step, whatever
    # their age, and that step may start a batch (None: no such rule). Masked later, one by
    # one as they age, each change re-sends the new task's turns after it.
    done_task_turns: Count | None = None
    # In a text-tool agent's queue of tasks (`Clock.text_queue`), once a later task has
    # lasted this many turns, the results (user turns) of the tasks before it are done with:
    # they go as gists at the next step and that step may start a batch, however short the
    # tasks were (None: no such rule). `done_task_turns` waits for a task of 20 turns, which
    # a queue of 2-10-call tasks never has: their results stayed verbatim, re-sent by every
    # step. The agent's own turns age as before.
    done_results_turns: Count | None = None
    # Old user turns that later user turns re-send (`classify.superseded`) age straight to
    # their placeholder, not a digest: a harness that re-sends its state in each prompt
    # (`engine.resend_aging`) has the newer copy hold what the older one held.
    superseded_turns: bool = False
    # The agent's own turns that a later own turn restates (`classify.superseded` at
    # `RESTATED_CHARS`: a new plan on the old one's template) age as a digest, though
    # `kinds` leaves the agent's turns as written (`engine.report_aging`): the newer turn
    # is the one the agent works from.
    restated_turns: bool = False
    # Finished tool exchanges whose turn closed behind the horizon leave the request, noted
    # in one line per call in the user message before them, and runs of 2+ old closed
    # turns go as one note of what they named (fold.py), once the horizon has passed this
    # many assistant turns (None: never). Only aging classes fold.
    fold_from_turns: Count | None = None
    # An output the agent's last this many tool-calling turns drew a value from (a value of
    # their arguments found in it, credited to the latest output that holds it) is left as
    # it is by a step; the next step after the agent stops drawing from it ages it
    # (drawing.py; 0: off).
    drawn_turns: Count = 0
    # A tool result that is an MCP content block (`summarize.envelope`) of at most this many
    # tokens is not digested: it goes as sent until a batch masks the digests
    # (`mask_after_turns`), which masks it with them, keeping the cells that name the task
    # (stages/compress.py; 0: off). A short document read once (a form's questions, a
    # template, a requirements file) is copied from phrase by phrase many calls later; its
    # digest saved a few hundred tokens and lost those phrases.
    whole_block_tokens: Count = 0
    # ... while the session has made fewer than this many assistant turns: on a long
    # session the short blocks kept whole add up on every call (a ticket queue's cost @0.1).
    whole_block_turns: Count = 0
    # ... and at most this many tokens (when more than `whole_block_tokens`) for a block
    # answering a call whose arguments name a file the task statement names (`Clock.named`):
    # the document the task works from (a biography to transcribe into a page, a form's
    # template to fill), copied from piece by piece over the calls after its first step,
    # where its digest kept a few lines (0: no larger bound).
    source_block_tokens: Count = 0
    # An aged tool result whose digest keeps at least this share of its characters is sent
    # as it is (None: every digest is used); the decision still counts as a digest, so it
    # is masked in the digests' batches as one would be (stages/base.py, `_saves_little`).
    whole_digest_share: Share | None = None


class Stages(_Settings):
    """The stages a class runs (None: skipped), each with its options."""

    select: SelectOptions | None = None
    rerank: RerankOptions | None = None
    cluster: ClusterOptions | None = None
    compress: CompressOptions | None = None

    @model_validator(mode="before")
    @classmethod
    def _switches(cls, raw: Any) -> Any:
        # `stage: true` or `stage:` (nothing) runs it with defaults; `stage: false` skips it.
        if not isinstance(raw, dict):
            return raw
        return {
            name: {} if value is None or value is True else value
            for name, value in raw.items()
            if value is not False
        }


class ForecastPolicy(_Settings):
    """How the controller (`adjust.py`) may move the class's caps from live evidence.

    The caps in force are the YAML's `budget.history`, `budget.knowledge` and the token and
    turn marks of `compaction`, all times one scale the controller keeps in Redis (1.0 until
    its first move), within [min_scale, max_scale]. A batch of at least
    `min_evidence_calls` managed calls is judged at a time: recall at or over
    `recall_target` and refetch rate at most the baseline (bypass and unmanaged calls of the
    class, else `refetch_baseline`) plus `refetch_tolerance` tightens by `step`; recall under
    the target by more than `hysteresis`, or refetch over the allowance by more than it,
    loosens by two steps; in between it holds. After a loosening it tightens again only on
    the `tighten_after`-th healthy batch in a row."""

    adjust: bool = False
    recall_target: Share = 0.98
    refetch_baseline: Share = 0.05  # the refetch rate assumed while there is no baseline
    refetch_tolerance: Share = 0.02
    hysteresis: Share = 0.01
    min_evidence_calls: Annotated[int, Field(strict=True, gt=0)] = 50
    step: Annotated[float, Field(gt=0, lt=0.5)] = 0.1
    tighten_after: Annotated[int, Field(strict=True, ge=1)] = 2
    min_scale: Annotated[float, Field(gt=0, le=1)] = 0.25
    max_scale: Annotated[float, Field(ge=1, le=10)] = 2.0


class TextTools(_Settings):
    """How the agent policy ages an agent whose tools are text (`engine.text_tools_aging`:
    its calls' results come as user turns and are never digested), where it differs from
    the policy's own `compaction` and `stages.compress` (None: the policy's setting).
    `mask_turns_from_turns`: from which session turn its results join the digests' mask
    batches as gists; `mask_after_turns`: how old a digest or a result is when a batch
    masks it; `repay_calls`: the calls to come a step's rewrites are weighed over, at least
    (`steps.unrepaid`)."""

    mask_after_turns: Count | None = None
    mask_turns_from_turns: Count | None = None
    repay_calls: Count | None = None


_SECTIONS = frozenset({"match", "budget", "compaction", "stages", "playbook", "forecast",
                       "text_tools"})


class TaskClass(_Settings):
    name: str
    description: str = ""
    match: Match = Match()
    budget: BudgetSplit = BudgetSplit()
    compaction: Compaction = Compaction()
    stages: Stages = Stages()
    on_overflow: Literal["refuse", "passthrough"] = "refuse"
    # fitting past CTXGATE_FIT_TIMEOUT_S: forward as sent (unmanaged), or 503 context_fit_timeout
    on_fit_timeout: Literal["passthrough", "refuse"] = "passthrough"
    playbook: ClassPlaybook = ClassPlaybook()
    forecast: ForecastPolicy = ForecastPolicy()
    text_tools: TextTools = TextTools()  # the agent policy's: an agent whose tools are text

    @model_validator(mode="before")
    @classmethod
    def _sections(cls, raw: Any, info: ValidationInfo) -> Any:
        if not isinstance(raw, dict):
            return raw
        # A section with nothing after it means its defaults; the playbook section lies over
        # the global `playbook.defaults`, key by key.
        raw = {k: {} if v is None and k in _SECTIONS else v for k, v in raw.items()}
        defaults = (info.context or {}).get("playbook_defaults", ClassPlaybook())
        return {**raw, "playbook": merged_playbook(defaults, raw.get("playbook"))}

    def enabled(self, stage: str) -> bool:
        return getattr(self.stages, stage) is not None

    @property
    def select_every_call(self) -> bool:
        """A class that does not age turns applies its select rules on every call."""
        select = self.stages.select
        return not self.compaction.ages and select is not None and select.has_rules

    @property
    def stale_rules(self) -> tuple[StaleRule, ...]:
        return self.stages.select.stale_patterns if self.stages.select is not None else ()

    def aging_as(self, policy: TaskClass) -> TaskClass:
        """This class for a tool-using request: a class that does not age turns itself
        takes the agent policy's aging (compaction marks, cluster, compress), so old tool
        output becomes digests whatever the class; its budget, select, rerank and playbook
        stay its own."""
        if self.compaction.ages or not policy.compaction.ages:
            return self
        stages = self.stages.model_copy(
            update={"cluster": policy.stages.cluster, "compress": policy.stages.compress}
        )
        return self.model_copy(update={"compaction": policy.compaction, "stages": stages})


def task_class(
    name: str, raw: Any, playbook_defaults: ClassPlaybook | None = None
) -> TaskClass:
    """One class from its YAML mapping; SettingsError names the first bad setting."""
    where = f"task_classes.{name}"
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SettingsError(f"{where}: expected a mapping, got {type(raw).__name__}")
    if "name" in raw:  # the class is named by its key
        raise SettingsError(f"{where}.name: unknown key")
    context = {"playbook_defaults": playbook_defaults or ClassPlaybook()}
    try:
        return TaskClass.model_validate({**raw, "name": name}, context=context)
    except ValidationError as exc:
        raise SettingsError(problems(exc, where)) from None


def load_task_classes(settings: Settings) -> dict[str, TaskClass]:
    """All classes, parsed; a `default` class is always present."""
    defaults = playbook_settings(settings).defaults
    classes = {
        str(name): task_class(str(name), spec, defaults)
        for name, spec in settings.task_classes.items()
    }
    if DEFAULT_CLASS not in classes:
        classes[DEFAULT_CLASS] = task_class(DEFAULT_CLASS, {}, defaults)
    return classes


def agent_policy(classes: dict[str, TaskClass]) -> TaskClass | None:
    """The class that tool-using requests fall back to (`match: {agents: true}`), if any."""
    return next((c for c in classes.values() if c.match.agents), None)
