"""The gateway's one exception tree. Gateway errors are rendered to the caller's API envelope
in one place: the route skeleton (`gateway/api/route.py`), with the envelope its route names.

    GatewayError                      status  code
    ├── InvalidJSON                   400     invalid_json
    ├── InvalidRequest                400     invalid_request
    ├── ContextBudgetExceeded         400     context_budget_exceeded
    ├── InvalidAPIKey                 401     invalid_api_key
    ├── AdminForbidden                403     invalid_api_key
    ├── NotFound                      404     not_found
    ├── TraceNotFound                 404     trace_not_found
    ├── MethodNotAllowed              405     method_not_allowed
    ├── RequestTooLarge               413     request_too_large
    ├── ContextFitTimeout             503     context_fit_timeout
    ├── StoreUnavailable              503     store_unavailable  (Redis down: retry later)
    ├── UpstreamUnreachable           502     upstream_unreachable
    ├── UpstreamTimeout               504     upstream_timeout
    └── InternalError                 500     internal_error  (a bug: logged with its trace)
    ClientGone                        the client hung up: nothing to render, counted as 499
    SettingsError                     start-up only: names the bad setting
    LearnerError                      the worker's LLM calls (never reach a client)
    ├── MalformedOutput               not JSON in the requested schema: dead-lettered
    └── LearnerUnavailable            network or status failure: retried later

Library errors (httpx, orjson, redis, pydantic) are mapped to these at the boundary where
they occur.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import orjson


class GatewayError(Exception):
    """An error the gateway raises itself; its route renders it in the caller's envelope."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    type: ClassVar[str] = "server_error"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers: list[tuple[bytes, bytes]] = []  # sent with the envelope


Envelope = Callable[[GatewayError], bytes]
"""Renders a gateway error as one API's error body (OpenAI's, Anthropic's, ...)."""


def openai_envelope(error: GatewayError) -> bytes:
    """`{"error": {"message", "type", "param", "code"}}`."""
    return orjson.dumps({"error": {"message": error.message, "type": error.type,
                                   "param": error.param, "code": error.code}})


_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error",
                    413: "request_too_large", 504: "timeout_error"}


def anthropic_envelope(error: GatewayError) -> bytes:
    """Anthropic's `{"type": "error", "error": {"type", "message"}}`; our code is kept in
    the message so that the two envelopes say the same thing."""
    kind = _ANTHROPIC_TYPES.get(error.status, "api_error")
    return orjson.dumps({"type": "error", "error": {
        "type": kind, "message": f"{error.message} ({error.code})"}})


class InvalidJSON(GatewayError):
    status, code, type = 400, "invalid_json", "invalid_request_error"


class InvalidRequest(GatewayError):
    status, code, type = 400, "invalid_request", "invalid_request_error"


class ContextFitTimeout(GatewayError):
    """Fitting took longer than CTXGATE_FIT_TIMEOUT_S and the task class refuses rather
    than forwarding the call unmanaged (`on_fit_timeout: refuse`)."""

    status, code, type = 503, "context_fit_timeout", "server_error"


class StoreUnavailable(GatewayError):
    """Redis did not answer a route that cannot work without it (feedback, admin): the
    caller is told to retry, nothing is half-written. Model calls never raise it: they
    fail open instead."""

    status, code, type = 503, "store_unavailable", "server_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.headers = [(b"retry-after", b"1")]


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


class NotFound(GatewayError):
    status, code, type = 404, "not_found", "invalid_request_error"


class TraceNotFound(GatewayError):
    status, code, type = 404, "trace_not_found", "invalid_request_error"


class MethodNotAllowed(GatewayError):
    status, code, type = 405, "method_not_allowed", "invalid_request_error"

    def __init__(self, message: str, *, allow: str) -> None:
        super().__init__(message)
        self.headers = [(b"allow", allow.encode())]  # RFC 9110: a 405 names what is allowed


class RequestTooLarge(GatewayError):
    status, code, type = 413, "request_too_large", "invalid_request_error"


class UpstreamUnreachable(GatewayError):
    status, code, type = 502, "upstream_unreachable", "server_error"


class UpstreamTimeout(GatewayError):
    status, code, type = 504, "upstream_timeout", "server_error"


class InternalError(GatewayError):
    status, code, type = 500, "internal_error", "server_error"


class ClientGone(Exception):
    """The client hung up before the response was complete."""


class SettingsError(Exception):
    """Invalid settings: raised at start-up, the message names the setting."""


class LearnerError(Exception):
    """The learner LLM could not produce a usable answer."""


class MalformedOutput(LearnerError):
    """The answer is not JSON in the requested schema."""


class LearnerUnavailable(LearnerError):
    """The learner endpoint failed (network, status): worth another try later."""
