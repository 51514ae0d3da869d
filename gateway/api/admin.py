"""`/admin/playbooks...`: list, show, add, edit, delete (selective unlearning), export, import;
`/admin/traces/{trace_id}`: one call explained (gateway/observability/explain.py);
`/admin/forecast`: each task class's forecast caps, evidence and history (`adjust.py`).

Every route requires the admin key, checked once as a router dependency. Hand edits go
through the same guards and merge as the Curator's (`PlaybookEditor`), with fresh operation
ids; imports replace a playbook whole.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from gateway.auth import require_admin
from gateway.errors import InvalidRequest, NotFound, TraceNotFound
from gateway.learner.build import build_editor
from gateway.observability.explain import load_explained
from gateway.playbook.bullet import Bullet, Operation
from gateway.playbook.config import class_playbook, playbook_settings
from gateway.playbook.guards import refused_bullets
from gateway.playbook.refine import ApplyReport, PlaybookEditor
from gateway.playbook.render import render_sections
from gateway.playbook.tokens import count_tokens
from gateway.services import Services

PLAYBOOK = "/admin/playbooks/{tenant}/{task_class}"
BULLETS = PLAYBOOK + "/bullets"


class NewBullet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    section: str = Field(min_length=1, max_length=80)
    content: str = Field(min_length=1)
    status: Literal["active", "pending"] = "active"


class BulletEdit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str | None = None
    status: Literal["active", "pending"] | None = None
    helpful: int | None = Field(default=None, ge=0)
    harmful: int | None = Field(default=None, ge=0)


class ImportedBullet(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str = Field(pattern=r"^[a-z0-9_]+-\d{5}$")
    section: str
    content: str
    helpful: int = Field(default=0, ge=0)
    harmful: int = Field(default=0, ge=0)
    status: Literal["active", "pending"] = "active"
    sources: list[str] = Field(default_factory=list)
    created_at: float = 0.0
    updated_at: float = 0.0


class PlaybookImport(BaseModel):
    model_config = ConfigDict(extra="ignore")
    bullets: list[ImportedBullet]


def _op_id() -> str:
    return f"admin:{uuid.uuid4().hex}"


def _check(report: ApplyReport) -> None:
    if report.refused:
        _, reason = report.refused[0]
        raise InvalidRequest(f"bullet refused by the pollution guards: {reason}",
                             param="content")


class PlaybookAdmin:
    """The admin playbook endpoints; the admin key is checked by the router, not here."""

    def __init__(self, services: Services) -> None:
        self._settings = services.settings
        self._editor: PlaybookEditor = build_editor(services)
        self._store = self._editor.store

    async def _existing(self, tenant: str, task_class: str, bullet_id: str) -> Bullet:
        bullet = await self._store.get(tenant, task_class, bullet_id)
        if bullet is None:
            raise NotFound(f"No bullet {bullet_id!r} in {tenant}/{task_class}.")
        return bullet

    async def _apply(self, tenant: str, task_class: str, ops: list[Operation]) -> ApplyReport:
        # The administrator is the reviewer: hand-added bullets need no approval.
        settings = class_playbook(self._settings, task_class).model_copy(
            update={"review": "auto"})
        report = await self._editor.apply(tenant, task_class, ops, settings)
        _check(report)
        return report

    async def list_playbooks(self) -> list[dict[str, Any]]:
        out = []
        for tenant, task_class in await self._store.namespaces():
            bullets = await self._store.bullets(tenant, task_class)
            out.append({"tenant": tenant, "task_class": task_class, "bullets": len(bullets),
                        "tokens": count_tokens(render_sections(bullets)) if bullets else 0})
        return out

    async def show(self, tenant: str, task_class: str) -> dict[str, Any]:
        return {"bullets": [b.to_dict() for b in await self._store.bullets(tenant, task_class)]}

    async def add(self, tenant: str, task_class: str, body: NewBullet) -> dict[str, Any]:
        op = Operation("ADD", _op_id(), section=body.section, content=body.content,
                       status=body.status, sources=("admin",))
        report = await self._apply(tenant, task_class, [op])
        bullet_id = report.results[0].bullet_id
        kept = dict(report.folded).get(bullet_id, bullet_id)  # folded into a near-duplicate
        return (await self._existing(tenant, task_class, kept)).to_dict()

    async def edit(self, tenant: str, task_class: str, bullet_id: str,
                   body: BulletEdit) -> dict[str, Any]:
        current = await self._existing(tenant, task_class, bullet_id)
        ops = []
        if body.content is not None:
            ops.append(Operation("UPDATE", _op_id(), id=bullet_id, content=body.content))
        if body.status is not None:
            ops.append(Operation("STATUS", _op_id(), id=bullet_id, status=body.status))
        if body.helpful is not None or body.harmful is not None:
            ops.append(Operation(
                "TAG", _op_id(), id=bullet_id,
                helpful=(body.helpful if body.helpful is not None else current.helpful)
                - current.helpful,
                harmful=(body.harmful if body.harmful is not None else current.harmful)
                - current.harmful))
        await self._apply(tenant, task_class, ops)
        return (await self._existing(tenant, task_class, bullet_id)).to_dict()

    async def delete(self, tenant: str, task_class: str, bullet_id: str) -> Response:
        await self._existing(tenant, task_class, bullet_id)
        await self._store.merge(tenant, task_class,
                                [Operation("REMOVE", _op_id(), id=bullet_id)])
        return Response(status_code=204)

    async def export(self, tenant: str, task_class: str) -> dict[str, Any]:
        bullets = await self._store.bullets(tenant, task_class)
        return {"tenant": tenant, "task_class": task_class,
                "version": await self._store.version(tenant, task_class),
                "bullets": [b.to_dict() for b in bullets]}

    async def import_(self, tenant: str, task_class: str,
                      body: PlaybookImport) -> dict[str, Any]:
        bullets = [Bullet.from_dict(b.model_dump()) for b in body.bullets]
        limit = playbook_settings(self._settings).max_bullet_chars
        refused = refused_bullets(bullets, limit)
        if refused:
            listed = ", ".join(f"{bullet_id} ({reason})" for bullet_id, reason in refused[:10])
            raise InvalidRequest(f"Import refused by the pollution guards: {listed}.",
                                 param="bullets")
        await self._store.replace(tenant, task_class, bullets)
        return {"tenant": tenant, "task_class": task_class, "imported": len(bullets)}


def build_router(services: Services) -> APIRouter:
    """The admin routes, every one behind the admin key."""

    def admin_key(request: Request) -> None:
        require_admin(request.headers, services.settings)  # Starlette's headers: any case

    admin = PlaybookAdmin(services)
    router = APIRouter(dependencies=[Depends(admin_key)])
    router.add_api_route("/admin/playbooks", admin.list_playbooks, methods=["GET"])
    router.add_api_route(BULLETS, admin.show, methods=["GET"])
    router.add_api_route(BULLETS, admin.add, methods=["POST"], status_code=201)
    router.add_api_route(BULLETS + "/{bullet_id}", admin.edit, methods=["PATCH"])
    router.add_api_route(BULLETS + "/{bullet_id}", admin.delete, methods=["DELETE"],
                         status_code=204)
    router.add_api_route(PLAYBOOK + "/export", admin.export, methods=["GET"])
    router.add_api_route(PLAYBOOK + "/import", admin.import_, methods=["POST"])

    async def explain_trace(trace_id: str) -> dict[str, Any]:
        """One call's account (`ctxgate explain`); 404 once the trace has expired."""
        explained = await load_explained(services.redis, trace_id)
        if explained is None:
            raise TraceNotFound(f"No account of trace {trace_id!r} is kept.")
        return explained

    router.add_api_route("/admin/traces/{trace_id}", explain_trace, methods=["GET"])

    async def forecast() -> dict[str, Any]:
        """Each class's forecast caps, its evidence and its history (`ctxgate forecast`)."""
        controller = services.forecasts
        assert controller is not None  # built by the gateway's lifespan
        return {"adjust": controller.enabled, "classes": await controller.describe_all()}

    router.add_api_route("/admin/forecast", forecast, methods=["GET"])
    return router
