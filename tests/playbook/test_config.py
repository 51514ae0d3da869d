"""Playbook and learner settings: defaults, class overrides, errors naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.errors import SettingsError
from gateway.playbook.config import class_playbook, learner_settings, validate
from gateway.settings import Settings


def settings(tmp_path: Path, **kwargs: object) -> Settings:
    return Settings(config=tmp_path / "absent.yaml", **kwargs)  # type: ignore[arg-type]


def test_class_overrides_defaults_key_by_key(tmp_path: Path) -> None:
    s = settings(tmp_path, playbook={"defaults": {"cap_tokens": 300, "review": "manual"}},
                 task_classes={"sql": {"playbook": {"enabled": True, "feedback": {
                     "success_patterns": ["^OK$"]}}}})
    cls = class_playbook(s, "sql")
    assert (cls.enabled, cls.cap_tokens, cls.review) == (True, 300, "manual")
    assert cls.feedback.success_patterns == ("^OK$",)
    assert cls.feedback.failure_patterns  # the defaults survive a partial override
    assert class_playbook(s, "unknown").enabled is False


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"playbook": {"dedup_threshold": 1.5}}, "playbook.dedup_threshold"),
    ({"playbook": {"typo": 1}}, "playbook.typo"),
    ({"learner": {"reclaim_idle_s": 0}}, "learner.reclaim_idle_s"),
    ({"task_classes": {"sql": {"playbook": {"review": "sometimes"}}}},
     "task_classes.sql.playbook.review"),
    ({"task_classes": {"sql": {"playbook": {"feedback": {"failure_patterns": ["("]}}}}},
     "task_classes.sql.playbook.feedback"),
])
def test_bad_settings_name_the_setting(tmp_path: Path, kwargs: dict[str, object],
                                       named: str) -> None:
    with pytest.raises(SettingsError, match=named.replace(".", r"\.")):
        validate(settings(tmp_path, **kwargs))


def test_shipped_config_is_valid() -> None:
    shipped = Settings(config=Path(__file__).resolve().parents[2] / "config" / "gateway.yaml")
    validate(shipped)
    assert learner_settings(shipped).reclaim_idle_s <= 30
