"""Structured JSON logs (one object per line) that never carry a secret.

Every record passes through `redact`, which masks bearer tokens and API-key-shaped strings
wherever they appear, so a careless `log.info(headers)` still leaks nothing.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any

import orjson

_SECRET = re.compile(
    r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{6,}"
    r"|\b(sk|pk|rk|key|gk)-[A-Za-z0-9_-]{6,}"
    r"|(\"?(?:authorization|api[_-]?key|admin[_-]?key)\"?\s*[:=]\s*\"?)[^\s\",}]+"
)


def redact(text: str) -> str:
    def mask(match: re.Match[str]) -> str:
        prefix = match.group(1) or match.group(3)
        if prefix:
            return f"{prefix}[redacted]"
        return f"{match.group(2)}-[redacted]"

    return _SECRET.sub(mask, text)


class JSONFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "msg", ...extra fields}`, secrets redacted."""

    _STANDARD = frozenset(vars(logging.makeLogRecord({})))

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in self._STANDARD and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return redact(orjson.dumps(payload, default=str).decode())


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.Formatter.converter = time.gmtime
