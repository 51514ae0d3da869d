"""`ctxgate playbook list | show NS | add NS SECTION CONTENT | edit NS ID | delete NS ID |
export NS | import NS FILE`, and the
offline warm-up `ctxgate learn FILE --epochs N`. NS is `TENANT/TASK_CLASS`.

`learn` reads recorded sessions with outcomes, a JSON list (or JSON lines) of
`{"tenant"?, "task_class"?, "messages": [...], "outcome": "success"|"failure",
"ground_truth"?, "note"?}` and runs each through the Reflector and the Curator, epoch after
epoch, merging into the playbook exactly as the online worker does.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import orjson
import typer

from gateway.learner.llm import LearnerError
from gateway.learner.reflect import Episode
from gateway.learner.signals import cited_ids, explicit_signal, text_of
from gateway.playbook.bullet import Bullet, Operation
from gateway.playbook.config import class_playbook, playbook_settings
from gateway.playbook.guards import refused_bullets
from gateway.playbook.render import render_sections
from gateway.playbook.store import PlaybookStore, split_namespace
from gateway.settings import Settings, load_settings
from gateway.store.client import connect

app = typer.Typer(no_args_is_help=True)
T = TypeVar("T")
ConfigOption = Annotated[Path | None, typer.Option("--config", help="YAML settings file")]


def _run(settings: Settings, work: Callable[[PlaybookStore], Awaitable[T]]) -> T:
    async def main() -> T:
        redis = connect(settings)
        try:
            return await work(PlaybookStore(redis))
        finally:
            await redis.aclose()

    return asyncio.run(main())


def _ns(ns: str) -> tuple[str, str]:
    try:
        return split_namespace(ns)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@app.command("list")
def list_playbooks(config: ConfigOption = None) -> None:
    """Every playbook: namespace, bullets, pending bullets, version."""
    async def work(store: PlaybookStore) -> list[str]:
        rows = []
        for tenant, task_class in await store.namespaces():
            bullets = await store.bullets(tenant, task_class)
            pending = sum(b.status == "pending" for b in bullets)
            version = await store.version(tenant, task_class)
            rows.append(f"{tenant}/{task_class}\tbullets={len(bullets)}\tpending={pending}"
                        f"\tversion={version}")
        return rows

    for row in _run(load_settings(config=config), work):
        typer.echo(row)


@app.command()
def show(ns: str, config: ConfigOption = None) -> None:
    """The playbook as it renders (pending bullets listed after it)."""
    tenant, task_class = _ns(ns)
    bullets = _run(load_settings(config=config), lambda s: s.bullets(tenant, task_class))
    typer.echo(render_sections([b for b in bullets if b.status == "active"]))
    for bullet in (b for b in bullets if b.status == "pending"):
        typer.echo(f"(pending) {bullet.line()}")


@app.command()
def export(ns: str, config: ConfigOption = None) -> None:
    """The whole playbook as JSON on stdout (the admin API's export format)."""
    tenant, task_class = _ns(ns)
    bullets = _run(load_settings(config=config), lambda s: s.bullets(tenant, task_class))
    document = {"tenant": tenant, "task_class": task_class,
                "bullets": [b.to_dict() for b in bullets]}
    sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")


@app.command("import")
def import_playbook(ns: str, file: Path, config: ConfigOption = None) -> None:
    """Replace a playbook with the bullets of FILE (an export, or a list of bullets)."""
    tenant, task_class = _ns(ns)
    document = orjson.loads(file.read_bytes())
    records = document["bullets"] if isinstance(document, dict) else document
    bullets = [Bullet.from_dict(r) for r in records]
    settings = load_settings(config=config)
    refused = refused_bullets(bullets, playbook_settings(settings).max_bullet_chars)
    if refused:
        for bullet_id, reason in refused:
            typer.echo(f"refused {bullet_id}: {reason}", err=True)
        raise typer.Exit(2)
    _run(settings, lambda s: s.replace(tenant, task_class, bullets))
    typer.echo(f"imported {len(bullets)} bullets into {tenant}/{task_class}")


def _edit(settings: Settings, tenant: str, task_class: str, ops: list[Operation]) -> str:
    """Apply hand-made operations through the guards (no embedder: no near-duplicate fold)."""
    from gateway.playbook.config import playbook_settings
    from gateway.playbook.refine import PlaybookEditor

    cls = class_playbook(settings, task_class).model_copy(update={"review": "auto"})

    async def work(store: PlaybookStore) -> str:
        editor = PlaybookEditor(store, None, playbook_settings(settings))
        report = await editor.apply(tenant, task_class, ops, cls)
        if report.refused:
            return f"refused: {report.refused[0][1]}"
        missing = [r.bullet_id for r in report.results if r.outcome == "missing"]
        return f"missing: {missing[0]}" if missing else report.results[0].bullet_id

    return _run(settings, work)


@app.command()
def add(ns: str, section: str, content: str, config: ConfigOption = None) -> None:
    """Add a bullet by hand (active at once: the administrator is the reviewer)."""
    tenant, task_class = _ns(ns)
    op = Operation("ADD", f"cli:{uuid.uuid4().hex}", section=section, content=content,
                   sources=("cli",))
    outcome = _edit(load_settings(config=config), tenant, task_class, [op])
    typer.echo(outcome, err=outcome.startswith(("refused", "missing")))
    if outcome.startswith(("refused", "missing")):
        raise typer.Exit(1)


@app.command()
def edit(
    ns: str, bullet_id: str,
    content: Annotated[str | None, typer.Option(help="new content")] = None,
    status: Annotated[str | None, typer.Option(help="active | pending")] = None,
    config: ConfigOption = None,
) -> None:
    """Change a bullet's content or approve it (`--status active`)."""
    tenant, task_class = _ns(ns)
    ops = []
    if content is not None:
        ops.append(Operation("UPDATE", f"cli:{uuid.uuid4().hex}", id=bullet_id, content=content))
    if status is not None:
        if status not in ("active", "pending"):
            raise typer.BadParameter("--status must be active or pending")
        ops.append(Operation("STATUS", f"cli:{uuid.uuid4().hex}", id=bullet_id,
                             status="active" if status == "active" else "pending"))
    if not ops:
        raise typer.BadParameter("give --content and/or --status")
    outcome = _edit(load_settings(config=config), tenant, task_class, ops)
    typer.echo(outcome, err=outcome.startswith(("refused", "missing")))
    if outcome.startswith(("refused", "missing")):
        raise typer.Exit(1)


@app.command()
def delete(ns: str, bullet_id: str, config: ConfigOption = None) -> None:
    """Remove one bullet (selective unlearning)."""
    tenant, task_class = _ns(ns)
    op = Operation("REMOVE", f"cli:{uuid.uuid4().hex}", id=bullet_id)
    [result] = _run(load_settings(config=config), lambda s: s.merge(tenant, task_class, [op]))
    if result.outcome != "applied":
        typer.echo(f"no bullet {bullet_id} in {ns}", err=True)
        raise typer.Exit(1)
    typer.echo(f"deleted {bullet_id}")


def read_sessions(file: Path) -> list[dict[str, Any]]:
    raw = file.read_bytes()
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = [orjson.loads(line) for line in raw.splitlines() if line.strip()]
    sessions = data if isinstance(data, list) else [data]
    for index, session in enumerate(sessions):
        if not isinstance(session.get("messages"), list) or session.get("outcome") not in (
                "success", "failure"):
            raise ValueError(f"session {index}: needs `messages` and `outcome`")
    return sessions


def _episode(session: dict[str, Any], key: str, shown: list[str]) -> Episode:
    messages = session["messages"]
    said = " ".join(text_of(m.get("content")) for m in messages if m.get("role") == "assistant")
    return Episode(
        key=key, tenant=str(session.get("tenant") or "anonymous"),
        task_class=str(session.get("task_class") or "default"),
        session_id=str(session.get("session_id") or key), trace_id=key, messages=messages,
        shown=shown, cited=cited_ids(said, shown), signal=explicit_signal(session),
    )


async def _learn(file: Path, epochs: int, settings: Settings) -> int:
    from gateway.learner.build import build_learner, build_llm
    from gateway.services import open_services

    sessions = read_sessions(file)
    run = uuid.uuid4().hex[:8]
    merged = failed = 0
    async with open_services(settings) as services:
        llm = build_llm(services)
        learner = build_learner(services, llm)
        store = PlaybookStore(services.redis)
        try:
            for epoch in range(1, epochs + 1):
                for index, session in enumerate(sessions):
                    probe = _episode(session, "", [])
                    active = [b.id for b in await store.bullets(probe.tenant, probe.task_class)
                              if b.status == "active"]
                    episode = _episode(session, f"learn:{run}:{epoch}:{index}", active)
                    try:
                        ops = await learner.learn(
                            episode, class_playbook(settings, episode.task_class))
                    except LearnerError as exc:
                        failed += 1
                        typer.echo(f"epoch {epoch} session {index}: {exc}", err=True)
                        continue
                    merged += len(ops)
                typer.echo(f"epoch {epoch}: {len(sessions)} sessions, {merged} operations so far")
        finally:
            await llm.aclose()
    return 1 if failed and failed == epochs * len(sessions) else 0


def learn(file: Path, epochs: int, settings: Settings) -> int:
    """`ctxgate learn FILE --epochs N`: offline warm-up; returns the exit code."""
    try:
        return asyncio.run(_learn(file, epochs, settings))
    except ValueError as exc:
        typer.echo(f"ctxgate learn: {exc}", err=True)
        return 2
