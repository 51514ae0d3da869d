"""The first seconds after `ctxgate serve` opens its port.

It loads its embedding model before it listens (a load in a thread of the serving process
held the GIL for seconds: requests, `/healthz` included, stalled meanwhile; on a loaded
machine a chat call here waited out its 30 s), so the first answer finds it ready. The same
lesson learned twice then, while its learner has no model loaded yet: one bullet, and no
reader ever sees two.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import orjson
import pytest

from gateway.auth import tenant_of_token
from tests.conftest import ModuleStart, gateway_env, module_gateway
from tests.harness import Gateway
from tests.learner.conftest import curation, reflection
from tests.learner.test_shutdown import CLASS, LESSON, failed_step


def ready_at_first_answer(server: Gateway) -> None:
    server.noted["ready_then"] = httpx.get(f"{server.url}/readyz", timeout=30)


# Not ahead: its tests read its first answer and its first seconds, so it is waited for
# from its spawn (on /healthz), just before its first test (outside that test's timeout).
@module_gateway(ahead=False, then=ready_at_first_answer)
def first_gateway(start: ModuleStart) -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    models = (f"first-reflector-{tag}", f"first-curator-{tag}")
    start.upstream.script(models[0], [reflection(insight=LESSON)])
    start.upstream.script(models[1], [curation([{"type": "ADD", "section": "common_mistakes",
                                                 "content": LESSON}])])
    start.noted["models"] = models
    env = gateway_env(start.upstream, start.redis_url.rsplit("/", 1)[0] + "/9")
    env.update(CTXGATE_REFLECTOR_MODEL=models[0], CTXGATE_CURATOR_MODEL=models[1],
               CTXGATE_WORKER="inprocess", CTXGATE_UPSTREAM_TIMEOUT_S="30")
    return env


@pytest.fixture(scope="module")
def fresh_gateway(
    first_gateway: Gateway
) -> tuple[Gateway, tuple[str, str], httpx.Response]:
    noted = first_gateway.noted
    return first_gateway, noted["models"], noted["ready_then"]


def test_the_port_opens_once_the_model_is_loaded(
    fresh_gateway: tuple[Gateway, tuple[str, str], httpx.Response]
) -> None:
    server, _, ready_then = fresh_gateway
    assert (ready_then.status_code, ready_then.json()) == (200, {"status": "ready"})
    said = [orjson.loads(line)["msg"] for line in server.log.splitlines()
            if line.startswith("{")]
    listening = next(n for n, msg in enumerate(said) if msg.startswith("Uvicorn running on"))
    assert said.index("embedding model loaded") < said.index("embedding model warm") < listening


def test_same_lesson_twice_right_after_start_is_one_bullet(
    fresh_gateway: tuple[Gateway, tuple[str, str], httpx.Response]
) -> None:
    server, _, _ = fresh_gateway
    key = f"sk-first-{uuid.uuid4().hex[:8]}"
    tenant = tenant_of_token(key)
    traces = []
    for session in ("one", "two"):
        answer = httpx.post(f"{server.base_url}/chat/completions", timeout=30,
                            headers={"authorization": f"Bearer {key}",
                                     "x-ctxgate-task-class": CLASS,
                                     "x-ctxgate-session-id": session},
                            json={"model": "gpt-4o-mini", "messages": failed_step()})
        assert answer.status_code == 200
        traces.append(answer.headers["x-ctxgate-trace-id"])
    seen: list[list[dict[str, Any]]] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # read the playbook as an injector would, all along
        bullets = httpx.get(f"{server.url}/admin/playbooks/{tenant}/{CLASS}/bullets",
                            headers={"authorization": f"Bearer {server.admin_key}"}
                            ).json()["bullets"]
        seen.append(bullets)
        if bullets and set(bullets[0]["sources"]) == set(traces):
            break  # both lessons learned
        time.sleep(0.02)
    assert max(len(b) for b in seen) == 1, [len(b) for b in seen]
    [bullet] = seen[-1]
    assert bullet["content"] == LESSON and set(bullet["sources"]) == set(traces)
    dedups = [d for d in server.drops() if d.get("event") == "playbook.drop"]
    assert [(d["action"], d["kept_as"]) for d in dedups] == [("dedup", bullet["id"])]
