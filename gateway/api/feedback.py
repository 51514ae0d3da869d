"""`POST /v1/feedback`: explicit feedback on one call, by its trace id (tenant-scoped)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from gateway.api.route import call_of
from gateway.errors import TraceNotFound
from gateway.learner.traces import record_feedback
from gateway.playbook.config import learner_settings
from gateway.services import Services

PATH = "/v1/feedback"


class FeedbackBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    trace_id: str = Field(min_length=1, max_length=200)
    outcome: Literal["success", "failure"]
    score: float | None = None
    ground_truth: str | None = Field(default=None, max_length=20_000)
    note: str | None = Field(default=None, max_length=5_000)


def build_router(services: Services) -> APIRouter:
    """The feedback route; the skeleton has authenticated the caller (their tenant)."""
    router = APIRouter()
    maxlen = learner_settings(services.settings).stream_maxlen
    shards = learner_settings(services.settings).trace_shards

    @router.post(PATH, status_code=202)
    async def post_feedback(body: FeedbackBody, request: Request) -> dict[str, str]:
        tenant = call_of(request.scope).caller.tenant
        feedback = body.model_dump(exclude_none=True)

        async def record() -> bool:
            return await record_feedback(services.redis, tenant, body.trace_id,
                                         feedback, stream_maxlen=maxlen, shards=shards)

        found = await record()
        traces = services.traces
        if not found and traces is not None and traces.pending:
            await traces.flush()  # the trace may still be on its way to Redis
            found = await record()
        if not found:
            raise TraceNotFound(f"No trace {body.trace_id!r} for this API key.",
                                param="trace_id")
        services.metrics.feedback_events.labels("explicit", body.outcome).inc()
        return {"status": "accepted", "trace_id": body.trace_id}

    return router
