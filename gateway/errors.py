"""The gateway's one exception tree, rendered to OpenAI's error envelope in one place.

    GatewayError                      status  code
    ├── InvalidJSON                   400     invalid_json
    ├── InvalidRequest                400     invalid_request
    ├── ContextBudgetExceeded         400     context_budget_exceeded
    ├── InvalidAPIKey                 401     invalid_api_key
    ├── AdminForbidden                403     invalid_api_key
    ├── TraceNotFound                 404     trace_not_found
    ├── RequestTooLarge               413     request_too_large
    ├── UpstreamUnreachable           502     upstream_unreachable
    ├── UpstreamTimeout               504     upstream_timeout
    └── InternalError                 500     internal_error  (a bug: logged with its trace)
    SettingsError                     (start-up only: names the bad setting)

Library errors (httpx, orjson, redis) are mapped to these at the boundary where they occur.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson


class GatewayError(Exception):
    """An error the gateway raises itself; rendered as OpenAI's error envelope."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    type: ClassVar[str] = "server_error"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def envelope(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def body(self) -> bytes:
        return orjson.dumps(self.envelope())


class InvalidJSON(GatewayError):
    status, code, type = 400, "invalid_json", "invalid_request_error"


class InvalidRequest(GatewayError):
    status, code, type = 400, "invalid_request", "invalid_request_error"


class ContextBudgetExceeded(GatewayError):
    status, code, type = 400, "context_budget_exceeded", "invalid_request_error"

    def __init__(self, needed: int, allowed: int, *, detail: str = "") -> None:
        self.needed = needed
        self.allowed = allowed
        extra = f" {detail}" if detail else ""
        super().__init__(
            f"Required content needs {needed} tokens but the budget allows {allowed}.{extra}",
            param="messages",
        )


class InvalidAPIKey(GatewayError):
    status, code, type = 401, "invalid_api_key", "invalid_request_error"


class AdminForbidden(GatewayError):
    status, code, type = 403, "invalid_api_key", "invalid_request_error"


class TraceNotFound(GatewayError):
    status, code, type = 404, "trace_not_found", "invalid_request_error"


class RequestTooLarge(GatewayError):
    status, code, type = 413, "request_too_large", "invalid_request_error"


class UpstreamUnreachable(GatewayError):
    status, code, type = 502, "upstream_unreachable", "server_error"


class UpstreamTimeout(GatewayError):
    status, code, type = 504, "upstream_timeout", "server_error"


class InternalError(GatewayError):
    status, code, type = 500, "internal_error", "server_error"


class SettingsError(Exception):
    """Invalid settings: raised at start-up, the message names the setting."""
