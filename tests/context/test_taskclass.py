"""Task classes: the shipped YAML parses into typed settings; bad settings fail at start-up
naming the setting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.context.stages import STAGES
from gateway.context.taskclass import (
    STAGE_ORDER,
    SelectOptions,
    Stages,
    load_task_classes,
    task_class,
)
from gateway.errors import SettingsError
from gateway.settings import Settings

SHIPPED = {
    "plain_chat",
    "retrieval_qa",
    "data_sql",
    "log_investigation",
    "ops_workflow",
    "coding_agent",
    "default",
}


def test_shipped_classes_load(settings: Settings) -> None:
    classes = load_task_classes(settings)
    assert set(classes) >= SHIPPED
    coding = classes["coding_agent"]
    assert coding.compaction.ages and coding.enabled("compress")
    assert (coding.playbook.enabled, coding.playbook.cap_tokens) == (True, 800)
    assert [rule.action for rule in coding.stale_rules] == ["drop", "strip"]
    assert coding.stages.cluster is not None and coding.stages.cluster.near_threshold == 0.9
    assert not classes["plain_chat"].enabled("rerank")
    assert classes["plain_chat"].select_every_call  # no aging, and select has a rule
    assert not classes["data_sql"].select_every_call  # `select: {}`: no rule to apply


def test_stage_names_are_one_list() -> None:
    assert tuple(Stages.model_fields) == STAGE_ORDER
    assert set(STAGES) == set(STAGE_ORDER)


def test_stage_switches_and_empty_keys() -> None:
    cls = task_class(
        "c",
        {
            "stages": {"select": None, "rerank": True, "cluster": False},
            "match": {"tools": None},
            "budget": None,
        },
    )
    assert cls.stages.select == SelectOptions()
    assert cls.enabled("rerank") and not cls.enabled("cluster") and not cls.enabled("compress")
    assert cls.match.tools == frozenset()
    assert cls.budget.total == 120_000


def test_a_class_without_a_playbook_section_takes_the_defaults(tmp_path: Path) -> None:
    settings = Settings(
        config=tmp_path / "absent.yaml",
        playbook={"defaults": {"enabled": True, "cap_tokens": 300}},
        task_classes={"sql": {}, "chat": {"playbook": {"enabled": False}}},
    )
    classes = load_task_classes(settings)
    assert (classes["sql"].playbook.enabled, classes["sql"].playbook.cap_tokens) == (True, 300)
    assert (classes["chat"].playbook.enabled, classes["chat"].playbook.cap_tokens) == (False, 300)
    assert classes["default"].playbook.enabled  # the implicit default class too


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"budget": {"history": -1}}, "task_classes.c.budget.history"),
        ({"budget": {"histroy": 5}}, "task_classes.c.budget.histroy"),
        ({"budget": {"total": True}}, "task_classes.c.budget.total"),
        ({"compaction": {"high_water": 0.5, "low_water": 0.7}}, "task_classes.c.compaction"),
        ({"compaction": {"cached_price": 0}}, "task_classes.c.compaction"),
        ({"stages": {"sort": {}}}, "task_classes.c.stages.sort"),
        (
            {"stages": {"select": {"stale_patterns": [{"pattern": "(["}]}}},
            "task_classes.c.stages.select.stale_patterns[0].pattern",
        ),
        (
            {"stages": {"select": {"stale_patterns": [{"pattern": "x", "action": "hide"}]}}},
            "task_classes.c.stages.select.stale_patterns[0].action",
        ),
        ({"stages": {"select": {"max_turns": -2}}}, "task_classes.c.stages.select.max_turns"),
        (
            {"stages": {"cluster": {"near_threshold": 3}}},
            "task_classes.c.stages.cluster.near_threshold",
        ),
        (
            {"stages": {"rerank": {"weights": {"recent": 1}}}},
            "task_classes.c.stages.rerank.weights.recent",
        ),
        ({"stages": {"compress": {"kinds": ["blob"]}}}, "task_classes.c.stages.compress.kinds"),
        ({"match": {"system_patterns": ["(?"]}}, "task_classes.c.match.system_patterns[0]"),
        ({"on_overflow": "truncate"}, "task_classes.c.on_overflow"),
        ({"playbook": {"review": "sometimes"}}, "task_classes.c.playbook.review"),
        ({"name": "other"}, "task_classes.c.name"),
        ({"descripton": "typo"}, "task_classes.c.descripton"),
    ],
)
def test_bad_settings_name_the_setting(spec: dict[str, Any], named: str) -> None:
    with pytest.raises(SettingsError) as info:
        task_class("c", spec)
    assert named in str(info.value)


def test_a_class_that_is_not_a_mapping_is_named() -> None:
    with pytest.raises(SettingsError, match=r"task_classes\.c: expected a mapping"):
        task_class("c", ["select"])
