"""Logs are JSON and carry no secret, however it got into the message."""

from __future__ import annotations

import json
import logging

import pytest

from gateway.observability.droplog import preview
from gateway.observability.logging import JSONFormatter, redact


@pytest.mark.parametrize("text", [
    "Authorization: Bearer sk-abc123456789xyz",
    "headers={'authorization': 'Bearer eyJhbGciOi.payload.sig'}",
    "client key sk-proj-AbCdEf1234567890",
    '{"api_key": "s3cr3t-value-123"}',
    "admin_key=letmein-please",
])
def test_redact_removes_secrets(text: str) -> None:
    cleaned = redact(text)
    for secret in ("abc123456789xyz", "eyJhbGciOi", "AbCdEf1234567890", "s3cr3t-value-123",
                   "letmein-please"):
        assert secret not in cleaned


def test_plain_text_is_left_alone() -> None:
    assert redact("chat completion took 3 ms for task_class=coding_agent") == (
        "chat completion took 3 ms for task_class=coding_agent")


def test_formatter_emits_json_with_extra_fields_redacted() -> None:
    record = logging.makeLogRecord({"msg": "upstream said %s", "args": ("Bearer sk-zz9988776655",),
                                    "levelname": "INFO", "name": "t", "trace_id": "abc"})
    line = json.loads(JSONFormatter().format(record))
    assert line["trace_id"] == "abc" and line["level"] == "info"
    assert "sk-zz9988776655" not in line["msg"]


def test_drop_preview_modes() -> None:
    assert preview("secret text", "none") is None
    assert preview("secret text", "hash").startswith("sha256:")  # type: ignore[union-attr]
    assert "secret text" not in preview("secret text", "hash")  # type: ignore[operator]
    assert preview("x" * 500, "text") == "x" * 120
    assert "sk-live" not in preview("key sk-live-1234567890abc", "text")  # type: ignore[operator]
