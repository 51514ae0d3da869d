"""Two gateways and two `ctxgate worker` processes on a Redis Cluster (and, the same test,
on a single Redis): traffic and feedback from several tenants, one primary killed and
restarted mid-way, and every tenant's playbook ends exact — one bullet per tenant, taught
by both its traces, credited once per citing step: no delta lost, none applied twice."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
from redis.cluster import RedisCluster

from gateway.auth import tenant_of_token
from gateway.store import keys
from tests.conftest import gateway_env
from tests.harness import ROOT, Gateway, Upstream, stop
from tests.learner.conftest import curation, reflection
from tests.learner.test_end_to_end import CLASS, bullets, call, failed_step, wait_for
from tests.store.cluster import LocalCluster, Node

LESSON = "Install missing Python modules with pip before rerunning pytest."
TENANTS = 3
SHARDS = {"cluster": 3, "single": 1}  # the cluster run spreads the trace queue over shards
ROUNDS = 2  # citing steps per tenant before the kill, and again after the restart


@dataclass
class Deployment:
    gateways: list[Gateway]
    workers: list[subprocess.Popen[bytes]]
    logs: list[Path]  # each worker's output, told when it died
    kill_target: Node  # the node that holds the first tenant's keys
    restart: Any
    client: Any
    shards: int


def _start_worker(env: dict[str, str], log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "gateway", "worker"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)


@pytest.fixture(params=["cluster", "single"])
def deployment(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
               upstream: Upstream) -> Iterator[tuple[Deployment, list[str]]]:
    tag = uuid.uuid4().hex[:8]
    models = (f"cl-reflector-{tag}", f"cl-curator-{tag}")
    upstream.script(models[0], [reflection(insight=LESSON)])
    upstream.script(models[1], [curation([{"type": "ADD", "section": "common_mistakes",
                                           "content": LESSON}])])
    tokens = [f"sk-{tag}-{n}" for n in range(TENANTS)]
    first_key = keys.playbook_meta(tenant_of_token(tokens[0]), CLASS)
    if request.param == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        url, is_cluster = cluster.url, "true"
        client: Any = RedisCluster.from_url(url)
        port = client.get_node_from_key(first_key).port
        target = next(node for node in cluster.nodes if node.port == port)
        restart = cluster.wait_ok
    else:
        target = request.getfixturevalue("single_redis")
        url, is_cluster = target.url, "false"
        client = redis.Redis.from_url(url)
        restart = lambda: wait_for(target.answers)  # noqa: E731
    tmp = tmp_path_factory.mktemp(f"deploy-{request.param}")
    env = {**gateway_env(upstream, url), "CTXGATE_REDIS_CLUSTER": is_cluster,
           "CTXGATE_WORKER": "off", "CTXGATE_REFLECTOR_MODEL": models[0],
           "CTXGATE_CURATOR_MODEL": models[1], "CTXGATE_UPSTREAM_TIMEOUT_S": "30",
           "CTXGATE_LEARNER": orjson.dumps({"reclaim_idle_s": 1.0,
                                            "trace_shards": SHARDS[request.param]}).decode()}
    gateways = [Gateway.start(tmp / f"gw{n}", env) for n in range(2)]
    workers, logs = [], [tmp / f"worker{n}.log" for n in range(2)]
    for n in range(2):
        worker_env = {**gateways[n].env, "CTXGATE_DROP_LOG": str(tmp / f"w{n}-drops.jsonl")}
        workers.append(_start_worker(worker_env, logs[n].open("wb")))
    try:
        yield (Deployment(gateways, workers, logs, target, restart, client,
                          SHARDS[request.param]), tokens)
    finally:
        for process in [*workers, *(g.process for g in gateways)]:
            stop(process)
        client.close()


def cite_and_succeed(gateway: Gateway, upstream: Upstream, token: str, session: str) -> None:
    """A new session gets the bullet; its next step cites it and the tool call succeeds."""
    opening = failed_step()[:2]
    call(gateway, upstream, token, session, opening)
    install = {"name": "bash", "arguments": '{"command": "pip install pyyaml"}'}
    call(gateway, upstream, token, session,
         [*opening, {"role": "assistant", "content": "Per [err-00001], installing.",
                     "tool_calls": [{"id": "call_9", "type": "function", "function": install}]},
          {"role": "tool", "tool_call_id": "call_9",
           "content": "Successfully installed PyYAML-6.0.1"}])


def test_playbooks_exact_across_a_primary_restart(
    deployment: tuple[Deployment, list[str]], upstream: Upstream
) -> None:
    deploy, tokens = deployment
    gw = deploy.gateways
    taught: dict[str, set[str]] = {}
    for n, token in enumerate(tokens):  # implicit feedback on one gateway, explicit on the other
        first, _ = call(gw[n % 2], upstream, token, f"open-{n}", failed_step()[:2])
        failing, _ = call(gw[n % 2], upstream, token, f"fail-{n}", failed_step())
        answer = httpx.post(f"{gw[(n + 1) % 2].url}/v1/feedback",
                            headers={"authorization": f"Bearer {token}"},
                            json={"trace_id": first, "outcome": "failure"})
        assert answer.status_code == 202
        taught[tenant_of_token(token)] = {first, failing}

    def learned(tenant: str, helpful: int) -> bool:
        found = bullets(gw[0], tenant)
        return (len(found) == 1 and set(found[0]["sources"]) >= taught[tenant]
                and found[0]["helpful"] == helpful)

    # Four processes load the embedding model on two cores: generous, and instant when idle.
    wait_for(lambda: all(learned(t, 0) for t in taught), timeout_s=180)

    for r in range(ROUNDS):
        for n, token in enumerate(tokens):
            cite_and_succeed(gw[(n + r) % 2], upstream, token, f"cite-{n}-{r}")
    time.sleep(0.3)  # the traces are written in the background, within milliseconds
    deploy.kill_target.kill()  # SIGKILL while the workers credit the citations
    time.sleep(1.0)
    deploy.kill_target.start()
    deploy.restart()
    for r in range(ROUNDS, 2 * ROUNDS):
        for n, token in enumerate(tokens):
            cite_and_succeed(gw[(n + r) % 2], upstream, token, f"cite-{n}-{r}")

    wait_for(lambda: all(learned(t, 2 * ROUNDS) for t in taught), timeout_s=180)
    time.sleep(2.5)  # past the reclaim idle time: a redelivery now would show as a double
    for tenant in taught:
        [bullet] = bullets(gw[1], tenant)
        assert bullet["helpful"] == 2 * ROUNDS and bullet["harmful"] == 0
        assert bullet["content"] == LESSON
    for shard in range(deploy.shards):  # every shard drained, nothing parked
        assert deploy.client.xlen(keys.trace_dead_letter(shard)) == 0
        [group] = deploy.client.xinfo_groups(keys.trace_stream(shard))
        assert group["pending"] == 0
    assert all(w.poll() is None for w in deploy.workers), dead_workers(deploy)  # rode it out


def dead_workers(deploy: Deployment, lines: int = 60) -> str:
    """Each exited worker's exit code and the tail of its log: why it died, in CI's output."""
    told = []
    for n, (process, path) in enumerate(zip(deploy.workers, deploy.logs, strict=True)):
        if process.poll() is not None:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            told.append(f"worker{n} exited with {process.returncode}; last lines of {path}:\n"
                        + "\n".join(tail))
    return "\n\n".join(told)
