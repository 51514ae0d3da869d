"""Two gateways and two `ctxgate worker` processes on a Redis Cluster (and, the same test,
on a single Redis): traffic and feedback from several tenants, one primary killed and
restarted mid-way, and every tenant's playbook ends exact — one bullet per tenant, taught
by both its traces, credited once per citing step: no delta lost, none applied twice."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
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
from tests.conftest import ModuleStart, gateway_env, module_group
from tests.harness import ROOT, Gateway, Upstream, listening, spawn_niced, stop
from tests.learner.conftest import curation, reflection
from tests.learner.test_end_to_end import CLASS, bullets, call, failed_step, wait_for
from tests.store.cluster import LocalCluster, Node, cluster_port

LESSON = "Install missing Python modules with pip before rerunning pytest."
TENANTS = 3
SHARDS = {"cluster": 3, "single": 1}  # the cluster run spreads the trace queue over shards
ROUNDS = 2  # citing steps per tenant before the kill, and again after the restart
# Four processes load the embedding model (~11 s of CPU each) on two cores: measured
# 129-253 s until all four were warm at load 15-22 (bench/README.md, "CI reliability").
WARM_S = 360


@dataclass
class Deployment:
    gateways: list[Gateway]
    workers: list[subprocess.Popen[bytes]]
    logs: list[Path]  # each worker's output, told when it died
    kill_target: Node  # the node that holds the first tenant's keys
    restart: Any
    client: Any
    shards: int
    models: tuple[str, str]  # the Reflector's and the Curator's
    started: float  # wall clock, when the processes were started


def _worker_warm(log: Path) -> bool:
    """Whether the worker logging to `log` has loaded its embedding model."""
    return b'"msg":"embedding model warm"' in log.read_bytes()


def _warm(gateways: list[Gateway], logs: list[Path],
          workers: list[subprocess.Popen[bytes]]) -> bool:
    assert all(w.poll() is None for w in workers), "a worker exited while it loaded"
    try:  # a gateway's loop stalls while its model loads: a slow answer is a "not yet"
        return all(_worker_warm(log) for log in logs) and all(
            httpx.get(f"{g.url}/readyz", timeout=10).status_code == 200 for g in gateways)
    except httpx.TimeoutException:
        return False


def _warmth(gateways: list[Gateway], logs: list[Path],
            workers: list[subprocess.Popen[bytes]], started: float) -> list[str]:
    told = [f"load average {os.getloadavg()}; {time.time() - started:.1f} s since the start"]
    for n, gateway in enumerate(gateways):
        ready = _safely(lambda g=gateway: httpx.get(f"{g.url}/readyz", timeout=10).status_code)
        told.append(f"gateway{n}: /readyz {ready}, cpu {_cpu_s(gateway.process.pid)} s")
    for n, (process, log) in enumerate(zip(workers, logs, strict=True)):
        told.append(f"worker{n}: warm {_worker_warm(log)}, returncode {process.poll()}, "
                    f"cpu {_cpu_s(process.pid)} s; log:\n{_log_lines(log, started, 20)}")
    return told


def _start_worker(env: dict[str, str], log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "gateway", "worker"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)


@dataclass
class Spawned:
    """A deployment's processes and its Redis, spawned ahead of this module
    (`module_group`), not waited for."""

    gateways: list[Gateway]
    workers: list[subprocess.Popen[bytes]]
    logs: list[Path]
    kill_target: Node
    restart: Any
    client: Any
    shards: int
    models: tuple[str, str]
    tokens: list[str]


def _spawned_loaded(spawned: Spawned) -> bool:
    """Its gateways listen (their models loaded) and its workers' models are loaded."""
    return (all(listening(g.url) or g.process.poll() is not None for g in spawned.gateways)
            and all(w.poll() is not None or b"embedding model" in log.read_bytes()
                    for w, log in zip(spawned.workers, spawned.logs, strict=True)))


def _spawn(start: ModuleStart, kind: str) -> Spawned:
    """Its own Redis (a cluster of three primaries, or one server), then the four processes
    at once: each loads the embedding model; started one after another their loads took
    turns instead of sharing the cores."""
    tag = uuid.uuid4().hex[:8]
    models = (f"cl-reflector-{tag}", f"cl-curator-{tag}")
    start.upstream.script(models[0], [reflection(insight=LESSON)])
    start.upstream.script(models[1], [curation([{"type": "ADD", "section": "common_mistakes",
                                                 "content": LESSON}])])
    tokens = [f"sk-{tag}-{n}" for n in range(TENANTS)]
    first_key = keys.playbook_meta(tenant_of_token(tokens[0]), CLASS)
    if kind == "cluster":
        cluster = LocalCluster(start.workdir / "cluster")
        start.on_stop.append(cluster.stop)
        cluster.start()
        url, is_cluster = cluster.url, "true"
        client: Any = RedisCluster.from_url(url)
        port = client.get_node_from_key(first_key).port
        target = next(node for node in cluster.nodes if node.port == port)
        restart = cluster.wait_ok
    else:
        target = Node(cluster_port(), start.workdir / "single", cluster=False)
        start.on_stop.append(target.stop)
        target.start()
        url, is_cluster = target.url, "false"
        client = redis.Redis.from_url(url)
        restart = lambda: wait_for(target.answers)  # noqa: E731
    start.on_stop.append(client.close)
    env = {**gateway_env(start.upstream, url), "CTXGATE_REDIS_CLUSTER": is_cluster,
           "CTXGATE_WORKER": "off", "CTXGATE_REFLECTOR_MODEL": models[0],
           "CTXGATE_CURATOR_MODEL": models[1], "CTXGATE_UPSTREAM_TIMEOUT_S": "30",
           "CTXGATE_LEARNER": orjson.dumps({"reclaim_idle_s": 1.0,
                                            "trace_shards": SHARDS[kind]}).decode()}
    tmp = start.workdir
    spawned = Spawned([], [], [tmp / f"worker{n}.log" for n in range(2)], target, restart,
                      client, SHARDS[kind], models, tokens)
    start.on_stop.insert(0, lambda: [stop(p) for p in [
        *spawned.workers, *(g.process for g in spawned.gateways)]])
    for n in range(2):
        worker_env = {**os.environ, **env, "HF_HUB_OFFLINE": "1",
                      "CTXGATE_DATA_DIR": str(tmp / f"w{n}-data"),
                      "CTXGATE_DROP_LOG": str(tmp / f"w{n}-drops.jsonl")}
        spawned.workers.append(spawn_niced(
            [sys.executable, "-m", "gateway", "worker"], start.niceness, cwd=ROOT,
            env=worker_env, stdout=spawned.logs[n].open("wb"), stderr=subprocess.STDOUT))
    for n in range(2):
        spawned.gateways.append(Gateway.spawn(tmp / f"gw{n}", env, niceness=start.niceness))
    start.pids += [p.pid for p in spawned.workers] + [g.process.pid for g in spawned.gateways]
    return spawned


@module_group(loaded=_spawned_loaded, weight=4)
def cluster_deployment(start: ModuleStart) -> Spawned:
    """Spawned ahead of this module: its four model loads overlap the tests before it."""
    return _spawn(start, "cluster")


@module_group(loaded=_spawned_loaded, weight=4)
def single_deployment(start: ModuleStart) -> Spawned:
    """Spawned ahead, after `cluster_deployment` (or as its test runs)."""
    return _spawn(start, "single")


@pytest.fixture(params=["cluster", "single"])
def deployment(request: pytest.FixtureRequest) -> Iterator[tuple[Deployment, list[str]]]:
    spawned: Spawned = request.getfixturevalue(f"{request.param}_deployment")
    gateways, workers, logs = spawned.gateways, spawned.workers, spawned.logs
    started = time.time()  # the bounds below count from here: this test's own time
    try:
        with ThreadPoolExecutor(2) as pool:
            # Their start alone (imports, then the app's start-up) took over 60 s at load
            # ~22, its log showing it under way: the same bound as the loads.
            starting = [pool.submit(g.wait_up, "/healthz", WARM_S) for g in gateways]
            wait(starting)
        for future in starting:
            future.result()  # raises a failed start's error
        # Every process loads the embedding model (~11 s of CPU each) before it serves or
        # learns: four at once on two loaded cores is the slow part (spawned ahead of this
        # module, mostly done by now), waited out here so that the learning the test times
        # is learning (the gateways' /readyz, as the session's gateway; the workers' log).
        # A gateway still loading stalls its loop for seconds: a poll of it timed out
        # (ReadTimeout) under load.
        wait_explained(lambda: _warm(gateways, logs, workers),  # WARM_S from the start
                       max(1.0, WARM_S - (time.time() - started)),
                       lambda: "\n".join(_warmth(gateways, logs, workers, started)))
        print(f"warm: {time.time() - started:.1f} s after the start")
        yield (Deployment(gateways, workers, logs, spawned.kill_target, spawned.restart,
                          spawned.client, spawned.shards, spawned.models, started),
               spawned.tokens)
    finally:
        for process in [*workers, *(g.process for g in gateways)]:
            stop(process)


def cite_and_succeed(gateway: Gateway, upstream: Upstream, token: str, session: str) -> str:
    """A new session gets the bullet; its next step cites it and the tool call succeeds.
    Returns the citing step's trace id (its entry credits the bullet)."""
    opening = failed_step()[:2]
    call(gateway, upstream, token, session, opening)
    install = {"name": "bash", "arguments": '{"command": "pip install pyyaml"}'}
    citing, _ = call(gateway, upstream, token, session,
                     [*opening, {"role": "assistant", "content": "Per [err-00001], installing.",
                                 "tool_calls": [{"id": "call_9", "type": "function",
                                                 "function": install}]},
                      {"role": "tool", "tool_call_id": "call_9",
                       "content": "Successfully installed PyYAML-6.0.1"}])
    return citing


@pytest.mark.timeout(600)  # the models' loads above, then learning (seconds), in one item
def test_playbooks_exact_across_a_primary_restart(
    deployment: tuple[Deployment, list[str]], upstream: Upstream
) -> None:
    deploy, tokens = deployment
    gw = deploy.gateways
    taught: dict[str, set[str]] = {}
    jobs: list[Job] = []
    for n, token in enumerate(tokens):  # implicit feedback on one gateway, explicit on the other
        first, _ = call(gw[n % 2], upstream, token, f"open-{n}", failed_step()[:2])
        failing, _ = call(gw[n % 2], upstream, token, f"fail-{n}", failed_step())
        answer = httpx.post(f"{gw[(n + 1) % 2].url}/v1/feedback",
                            headers={"authorization": f"Bearer {token}"},
                            json={"trace_id": first, "outcome": "failure"})
        assert answer.status_code == 202
        tenant = tenant_of_token(token)
        taught[tenant] = {first, failing}
        jobs += [Job(tenant, failing, "trace"), Job(tenant, first, "feedback")]
    explain = lambda: learning_report(deploy, jobs, upstream)  # noqa: E731

    def learned(tenant: str, helpful: int) -> bool:
        found = bullets(gw[0], tenant)
        return (len(found) == 1 and set(found[0]["sources"]) >= taught[tenant]
                and found[0]["helpful"] == helpful)

    # Learning alone, the models loaded: seconds (measured); generous for a loaded machine.
    print(f"waiting: {time.time() - deploy.started:.1f} s after the start")
    wait_explained(lambda: all(learned(t, 0) for t in taught), 180, explain)
    print(f"taught: {time.time() - deploy.started:.1f} s after the start")

    # Each citing step is reported too (its entries, its claim, its credit applied or not):
    # a tenant one credit short once left no trace of which step lost it.
    for r in range(ROUNDS):
        for n, token in enumerate(tokens):
            jobs.append(Job(tenant_of_token(token), cite_and_succeed(
                gw[(n + r) % 2], upstream, token, f"cite-{n}-{r}"), "trace"))
    time.sleep(0.3)  # the traces are written in the background, within milliseconds
    deploy.kill_target.kill()  # SIGKILL while the workers credit the citations
    time.sleep(1.0)
    deploy.kill_target.start()
    deploy.restart()
    for r in range(ROUNDS, 2 * ROUNDS):
        for n, token in enumerate(tokens):
            jobs.append(Job(tenant_of_token(token), cite_and_succeed(
                gw[(n + r) % 2], upstream, token, f"cite-{n}-{r}"), "trace"))

    wait_explained(lambda: all(learned(t, 2 * ROUNDS) for t in taught), 180, explain)
    print(f"credited: {time.time() - deploy.started:.1f} s after the start")
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


@dataclass(frozen=True)
class Job:
    """One entry the test queues: a trace (implicit feedback) or explicit feedback on one."""

    tenant: str
    trace_id: str
    kind: str  # the entry's `kind`: "trace" or "feedback"

    @property
    def delta_key(self) -> str:  # where its Reflector/Curator delta is kept before the merge
        episode = "implicit" if self.kind == "trace" else "explicit"
        return keys.playbook_delta(self.tenant, f"{self.trace_id}:{episode}")


def wait_explained(predicate: Any, timeout_s: float, explain: Any) -> None:
    """`wait_for`, and on a timeout the account `explain()` gives of where the work was."""
    try:
        wait_for(predicate, timeout_s=timeout_s)
    except AssertionError:
        raise AssertionError(f"timed out after {timeout_s:.0f} s\n{explain()}") from None


def _safely(read: Any) -> Any:
    try:
        return read()
    except Exception as exc:  # the store may be what is wrong: said, not raised
        return f"<{type(exc).__name__}: {exc}>"


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def job_state(client: Any, job: Job, shards: int) -> str:
    """Where one job is: queued (its entries), claimed, pending with whom, reflected and
    curated (its delta kept), merged (its op ids applied), acknowledged, dead-lettered."""
    shard = keys.trace_shard(job.tenant, shards)
    stream, dead = keys.trace_stream(shard), keys.trace_dead_letter(shard)

    def ours(entries: Any) -> list[tuple[str, dict[str, str]]]:
        found = []
        for entry_id, fields in entries:
            text = {_text(k): _text(v) for k, v in fields.items()}
            if text.get("trace_id") == job.trace_id and text.get("kind") == job.kind:
                found.append((_text(entry_id), text))
        return found

    def entries() -> str:
        said = []
        [group] = client.xinfo_groups(stream)
        delivered = _id(_text(group["last-delivered-id"]))
        for entry_id, _ in ours(client.xrange(stream)):
            pending = client.xpending_range(stream, keys.TRACE_GROUP, min=entry_id,
                                            max=entry_id, count=1)
            if pending:
                state = (f"pending with {_text(pending[0]['consumer'])} idle "
                         f"{pending[0]['time_since_delivered']} ms, delivered "
                         f"{pending[0]['times_delivered']}x")
            else:
                state = "acked" if _id(entry_id) <= delivered else "not delivered yet"
            said.append(f"{entry_id} {state}")
        return "; ".join(said) or "NOT QUEUED"

    def applied() -> list[str]:
        members = client.smembers(keys.playbook_applied(job.tenant, CLASS))
        return sorted(m for m in map(_text, members) if job.trace_id in m)

    parked = _safely(lambda: [f["reason"] for _, f in ours(client.xrange(dead))])
    claim = keys.trace_learned(job.tenant, job.trace_id, job.kind)
    return (f"{job.kind} {job.trace_id} (shard {shard}): entries {_safely(entries)}; "
            f"claimed by {_safely(lambda: _text(client.get(claim)))}; "
            f"delta kept {_safely(lambda: bool(client.exists(job.delta_key)))}; "
            f"applied {_safely(applied)}; dead-lettered {parked}")


def _id(entry_id: str) -> tuple[int, int]:
    millis, _, seq = entry_id.partition("-")
    return int(millis), int(seq or 0)


def _cpu_s(pid: int) -> str:
    """The CPU seconds a live process has used (user + system), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return "gone"
    return f"{(int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK'):.1f}"


def _log_lines(path: Path, since: float, lines: int) -> str:
    """A process's JSON log, condensed: seconds since `since`, level, message, the last
    line of any traceback."""
    told = []
    for raw in path.read_text(errors="replace").splitlines()[-lines:]:
        try:
            record = orjson.loads(raw)
            exc = (record.get("exc") or "").strip().splitlines()[-1:]
            told.append(f"  {record['ts'] - since:7.1f} {record['level']:7} "
                        f"{str(record['msg'])[:160]} {' '.join(exc)[:200]}")
        except (orjson.JSONDecodeError, KeyError, TypeError):
            told.append(f"  {raw[:200]}")
    return "\n".join(told)


def learning_report(deploy: Deployment, jobs: list[Job], upstream: Upstream) -> str:
    """Everything CI's output needs to tell where the learning stopped (or crawled)."""
    t0, client = deploy.started, deploy.client
    report = [f"load average {os.getloadavg()}; {time.time() - t0:.1f} s since the start"]
    for role, model in zip(("reflector", "curator"), deploy.models, strict=True):
        at = _safely(lambda m=model: [round(t - t0, 1) for t in upstream.calls(m)])
        report.append(f"{role} calls at (s): {at}")
    report += [job_state(client, job, deploy.shards) for job in jobs]
    for tenant in dict.fromkeys(job.tenant for job in jobs):
        found = _safely(lambda t=tenant: [(b["id"], b["helpful"], b["sources"])
                                          for b in bullets(deploy.gateways[0], t)])
        report.append(f"bullets of {tenant}: {found}")
    for shard in range(deploy.shards):
        groups = _safely(lambda s=shard: [
            {_text(k): _text(v) for k, v in g.items()}
            for g in client.xinfo_groups(keys.trace_stream(s))])
        report.append(f"shard {shard} group: {groups}")
    for n, gateway in enumerate(deploy.gateways):
        ready = _safely(lambda g=gateway: httpx.get(f"{g.url}/readyz", timeout=5).status_code)
        report.append(f"gateway{n}: cpu {_cpu_s(gateway.process.pid)} s, /readyz {ready}")
    for n, (process, path) in enumerate(zip(deploy.workers, deploy.logs, strict=True)):
        state = "alive" if process.poll() is None else f"exited {process.returncode}"
        report.append(f"worker{n}: {state}, cpu {_cpu_s(process.pid)} s; log:\n"
                      + _log_lines(path, t0, 40))
    return "\n".join(report)
