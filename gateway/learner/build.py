"""Building the learner's parts from the gateway's Services (the worker, the CLI, admin).

The hot-path parts have their own `from_services` constructors: `PlaybookInjector.from_services`
(which validates the playbook/learner settings at start-up) and `TraceSink.from_services`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.learner.episodes import TraceLearner
from gateway.learner.llm import LearnerLLM
from gateway.learner.reflect import ReflectorCurator
from gateway.playbook import config
from gateway.playbook.refine import PlaybookEditor
from gateway.playbook.store import PlaybookStore

if TYPE_CHECKING:
    from gateway.services import Services


def build_editor(services: Services) -> PlaybookEditor:
    return PlaybookEditor(
        PlaybookStore(services.redis), services.embedder,
        config.playbook_settings(services.settings), services.drop_log, services.metrics,
    )


def build_llm(services: Services) -> LearnerLLM:
    settings = services.settings
    learner = config.learner_settings(settings)
    key = settings.effective_learner_key
    return LearnerLLM(
        settings.effective_learner_url, key.get_secret_value() if key else None,
        timeout_s=learner.timeout_s, attempts=learner.retries,
    )


def build_learner(services: Services, llm: LearnerLLM) -> TraceLearner:
    settings = services.settings
    learner = config.learner_settings(settings)
    brain = ReflectorCurator(
        llm, settings.reflector_model, settings.curator_model,
        rounds=learner.reflector_rounds, max_trace_chars=learner.max_trace_chars,
        max_bullet_chars=config.playbook_settings(settings).max_bullet_chars,
    )
    return TraceLearner(services.redis, build_editor(services), brain, settings,
                        services.metrics, delta_ttl_s=learner.trace_ttl_s)

