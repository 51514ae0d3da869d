"""An aged tool result whose digest would keep most of its characters
(`whole_digest_share`) is sent as it is: a failed command's error, where the digest saved a
few dozen characters and cut the command the agent re-typed many calls later (Toolathlon
claude queues: `kubectl create configmap …`, digest 310 of 368 characters, the command cut
at 160). The decision still counts as a digest, so the item is masked in the digests'
batches as its neighbours are, and the drop log still adds up — the real engine on the
embedded Redis, the shipped configuration with the share set (and without it: digested)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from gateway.context.engine import ContextEngine
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.sessions import drops_add_up, fit_each_call

COMMAND = ("kubectl create configmap frontend-app-pr123-html --from-file=index.html="
           "/workspace/dumps/workspace/SimpleShopping/src/index.html -n pr-preview-123 -o yaml")
ERROR = ("Error running tool kubectl_create: MCP error -32603: Failed to create resource: "
         f"Command failed: {COMMAND}\n"
         'error: failed to create configmap: namespaces "pr-preview-123" not found\n')
TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
AT = 62  # the call whose result is the error


def with_share(settings: Settings, share: float | None) -> Settings:
    classes = copy.deepcopy(settings.task_classes)
    for spec in classes.values():
        compress = isinstance(spec, dict) and (spec.get("stages") or {}).get("compress")
        if isinstance(compress, dict):
            compress["whole_digest_share"] = share
    return settings.model_copy(update={"task_classes": classes})


def page(k: int) -> str:
    return "\n".join(f"Pod web-{k}-{i}: Running on node-{i % 4}, restarts {i}, age {k + i}m, "
                     f"image registry.local/shop:{k}.{i}" for i in range(40))


async def fitted(settings: Settings, redis_client: aioredis.Redis, embedder: Embedder,
                 tmp: str) -> list[list[dict[str, Any]]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant with tools."},
        {"role": "user", "content": "Deploy the preview of pull request 123."},
    ]
    for k in range(100):
        call = f"call_{k:03d}"
        messages.append({"role": "assistant", "content": f"Step {k}.", "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": "run", "arguments": f'{{"step": {k}}}'}}]})
        messages.append({"role": "tool", "tool_call_id": call,
                         "content": ERROR if k == AT else page(k)})
    messages.append({"role": "assistant", "content": "Retrying."})
    metrics = Metrics()
    log = DropLog(tmp, "hash", metrics)
    engine = ContextEngine(settings, redis_client, metrics, log, embedder)
    try:
        fits = await fit_each_call(engine, messages, TOOLS, "t-whole", f"whole-{Path(tmp).stem}")
    finally:
        log.close()
    assert all(drops_add_up(fit) for fit in fits)  # the drop log adds up
    return [fit.body["messages"] for fit in fits]


def result(sent: list[dict[str, Any]], k: int) -> str | None:
    return next((str(m["content"]) for m in sent if m.get("tool_call_id") == f"call_{k:03d}"),
                None)


async def test_a_digest_that_saves_little_is_not_used(
    settings: Settings, redis_client: aioredis.Redis, embedder: Embedder, tmp_path: Any,
) -> None:
    on = await fitted(with_share(settings, 0.8), redis_client, embedder,
                      str(tmp_path / "on.jsonl"))
    off = await fitted(with_share(settings, None), redis_client, embedder,
                       str(tmp_path / "off.jsonl"))
    # the first call where its neighbour is a digest
    first = next(i for i, sent in enumerate(off)
                 if (r := result(sent, AT + 1)) is not None and len(r) < len(page(AT + 1)) / 2)
    # (since session 72's cc72 its digest lists the command's absolute path whole,
    # `summarize._named_path`, and saves nothing: off, it goes as sent too)
    assert result(off[first], AT) == ERROR
    assert result(on[first], AT) == ERROR  # on: as sent, the command whole
    assert len(str(result(on[first], AT + 1))) < len(page(AT + 1)) / 2  # neighbours digested
    # the digests' batch masks it as it masks its neighbour: the same calls, the same form
    masked = [i for i, sent in enumerate(off) if str(result(sent, AT)).startswith("[ctxgate:")]
    assert masked and masked == [
        i for i, sent in enumerate(on) if str(result(sent, AT)).startswith("[ctxgate:")]
    assert all(result(a, AT + 1) == result(b, AT + 1) for a, b in zip(on, off, strict=True))
