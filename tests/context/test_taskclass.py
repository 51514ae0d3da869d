"""Task classes: the shipped YAML loads; bad settings fail at start-up naming the setting."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.context.stages import STAGES
from gateway.context.taskclass import load_task_classes
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
    classes = load_task_classes(settings.task_classes, frozenset(STAGES))
    assert set(classes) >= SHIPPED
    coding = classes["coding_agent"]
    assert coding.compaction.ages and coding.enabled("compress")
    assert coding.playbook.get("enabled") is True
    assert not classes["plain_chat"].enabled("rerank")


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"budget": {"history": -1}}, "task_classes.c.budget.history"),
        ({"budget": {"histroy": 5}}, "task_classes.c.budget.histroy"),
        ({"compaction": {"high_water": 0.5, "low_water": 0.7}}, "task_classes.c.compaction"),
        ({"stages": {"sort": {}}}, "task_classes.c.stages.sort"),
        (
            {"stages": {"select": {"stale_patterns": [{"pattern": "(["}]}}},
            "task_classes.c.stages.select.stale_patterns[0].pattern",
        ),
        (
            {"stages": {"cluster": {"near_threshold": 3}}},
            "task_classes.c.stages.cluster.near_threshold",
        ),
        ({"stages": {"compress": {"kinds": ["blob"]}}}, "task_classes.c.stages.compress.kinds"),
        ({"match": {"system_patterns": ["(?"]}}, "task_classes.c.match.system_patterns[0]"),
        ({"on_overflow": "truncate"}, "task_classes.c.on_overflow"),
    ],
)
def test_bad_settings_name_the_setting(spec: dict[str, Any], named: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_task_classes({"c": spec}, frozenset(STAGES))
    assert named in str(info.value)
