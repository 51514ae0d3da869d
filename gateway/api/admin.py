"""`/admin/playbooks...`: list, show, add, edit, delete (selective unlearning), export, import.

Every route requires the admin key. Hand edits go through the same guards and merge as the
Curator's (`PlaybookEditor`), with fresh operation ids; imports replace a playbook whole.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from gateway.auth import require_admin
from gateway.errors import GatewayError, InvalidRequest
from gateway.learner.build import build_editor
from gateway.playbook.bullet import Bullet, Operation
from gateway.playbook.config import class_playbook, playbook_settings
from gateway.playbook.guards import refused_bullets
from gateway.playbook.refine import ApplyReport, PlaybookEditor
from gateway.playbook.render import render_sections
from gateway.playbook.tokens import count_tokens
from gateway.services import Services

BULLETS = "/admin/playbooks/{tenant}/{task_class}/bullets"


class BulletNotFound(GatewayError):
    status, code, type = 404, "not_found", "invalid_request_error"


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


def build_router(services: Services) -> APIRouter:
    router = APIRouter()
    editor: PlaybookEditor = build_editor(services)
    store = editor.store

    def admin(request: Request) -> None:
        require_admin({k.lower(): v for k, v in request.headers.items()}, services.settings)

    async def existing(tenant: str, task_class: str, bullet_id: str) -> Bullet:
        bullet = await store.get(tenant, task_class, bullet_id)
        if bullet is None:
            raise BulletNotFound(f"No bullet {bullet_id!r} in {tenant}/{task_class}.")
        return bullet

    def cls_for(task_class: str) -> Any:
        # The administrator is the reviewer: hand-added bullets need no approval.
        return class_playbook(services.settings, task_class).model_copy(update={"review": "auto"})

    @router.get("/admin/playbooks")
    async def list_playbooks(request: Request) -> list[dict[str, Any]]:
        admin(request)
        out = []
        for tenant, task_class in await store.namespaces():
            bullets = await store.bullets(tenant, task_class)
            out.append({"tenant": tenant, "task_class": task_class, "bullets": len(bullets),
                        "tokens": count_tokens(render_sections(bullets)) if bullets else 0})
        return out

    @router.get(BULLETS)
    async def show(tenant: str, task_class: str, request: Request) -> dict[str, Any]:
        admin(request)
        return {"bullets": [b.to_dict() for b in await store.bullets(tenant, task_class)]}

    @router.post(BULLETS, status_code=201)
    async def add(tenant: str, task_class: str, body: NewBullet,
                  request: Request) -> dict[str, Any]:
        admin(request)
        op = Operation("ADD", _op_id(), section=body.section, content=body.content,
                       status=body.status, sources=("admin",))
        report = await editor.apply(tenant, task_class, [op], cls_for(task_class))
        _check(report)
        bullet_id = report.results[0].bullet_id
        kept = dict(report.folded).get(bullet_id, bullet_id)  # folded into a near-duplicate
        return (await existing(tenant, task_class, kept)).to_dict()

    @router.patch(BULLETS + "/{bullet_id}")
    async def edit(tenant: str, task_class: str, bullet_id: str, body: BulletEdit,
                   request: Request) -> dict[str, Any]:
        admin(request)
        current = await existing(tenant, task_class, bullet_id)
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
        _check(await editor.apply(tenant, task_class, ops, cls_for(task_class)))
        return (await existing(tenant, task_class, bullet_id)).to_dict()

    @router.delete(BULLETS + "/{bullet_id}", status_code=204)
    async def delete(tenant: str, task_class: str, bullet_id: str,
                     request: Request) -> Response:
        admin(request)
        await existing(tenant, task_class, bullet_id)
        await store.merge(tenant, task_class, [Operation("REMOVE", _op_id(), id=bullet_id)])
        return Response(status_code=204)

    @router.get("/admin/playbooks/{tenant}/{task_class}/export")
    async def export(tenant: str, task_class: str, request: Request) -> dict[str, Any]:
        admin(request)
        bullets = await store.bullets(tenant, task_class)
        return {"tenant": tenant, "task_class": task_class,
                "version": await store.version(tenant, task_class),
                "bullets": [b.to_dict() for b in bullets]}

    @router.post("/admin/playbooks/{tenant}/{task_class}/import")
    async def import_(tenant: str, task_class: str, body: PlaybookImport,
                      request: Request) -> dict[str, Any]:
        admin(request)
        bullets = [Bullet.from_dict(b.model_dump()) for b in body.bullets]
        limit = playbook_settings(services.settings).max_bullet_chars
        refused = refused_bullets(bullets, limit)
        if refused:
            listed = ", ".join(f"{bullet_id} ({reason})" for bullet_id, reason in refused[:10])
            raise InvalidRequest(f"Import refused by the pollution guards: {listed}.",
                                 param="bullets")
        await store.replace(tenant, task_class, bullets)
        return {"tenant": tenant, "task_class": task_class, "imported": len(bullets)}

    return router
