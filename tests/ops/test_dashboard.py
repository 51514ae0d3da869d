"""The Grafana dashboard's queries run against a real Prometheus scraping the gateway."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.harness import ROOT, Gateway, free_port, stop

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "ctxgate.json"
INTERFACE_METRICS = {
    "ctxgate_requests_total", "ctxgate_request_duration_seconds", "ctxgate_overhead_seconds",
    "ctxgate_upstream_duration_seconds", "ctxgate_upstream_ttfb_seconds",
    "ctxgate_context_tokens_total", "ctxgate_dropped_items_total",
    "ctxgate_dropped_tokens_total", "ctxgate_budget_exceeded_total",
    "ctxgate_pipeline_stage_seconds", "ctxgate_prefix_stable_total",
    "ctxgate_playbook_bullets", "ctxgate_playbook_injected_tokens",
    "ctxgate_feedback_events_total", "ctxgate_curator_operations_total",
    "ctxgate_reflection_duration_seconds", "ctxgate_trace_queue_depth",
    "ctxgate_worker_failures_total",
}
# Beyond INTERFACE.md's table (listed in the README's metrics table): the budget each call
# was given, for the forecast-against-actual panel (issue 12).
OWN_METRICS = {"ctxgate_budget_tokens"}
# INTERFACE.md names the live fidelity signals by prefix (labels task_class and mode).
FIDELITY = re.compile(r"ctxgate_(recall|refetch)_[a-z_]+_total")


def expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]


def base_name(name: str) -> str:
    return re.sub(r"_(bucket|count|sum)$", "", name)


def test_dashboard_uses_only_interface_metrics_and_covers_drops() -> None:
    used = {base_name(m) for e in expressions() for m in re.findall(r"ctxgate_[a-z_]+", e)}
    other = {name for name in used - INTERFACE_METRICS - OWN_METRICS
             if not FIDELITY.fullmatch(name)}
    assert not other, other
    assert {"ctxgate_dropped_items_total", "ctxgate_dropped_tokens_total",
            "ctxgate_context_tokens_total", "ctxgate_recall_found_values_total",
            "ctxgate_refetch_refetches_total", "ctxgate_budget_tokens"} <= used


def test_gateway_exposes_every_interface_metric(gateway: Gateway) -> None:
    exposed = {base_name(m) for m in re.findall(r"^# TYPE (\S+)", gateway.metrics(), re.M)}
    exposed |= {m + "_total" for m in exposed}
    assert exposed >= INTERFACE_METRICS, INTERFACE_METRICS - exposed


@pytest.fixture(scope="module")
def prometheus(gateway: Gateway, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no prometheus binary (CI installs Debian's `prometheus` package)")
    workdir = tmp_path_factory.mktemp("prometheus")
    target = gateway.url.removeprefix("http://")
    (workdir / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs: [{{job_name: ctxgate, static_configs: [{{targets: ['{target}']}}]}}]\n")
    port = free_port()
    process = subprocess.Popen(
        [binary, f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=(workdir / "log").open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process)
        client = openai.OpenAI(base_url=gateway.base_url, api_key="sk-dash-000000",
                               max_retries=0)
        _fidelity_traffic(client, gateway)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # traffic across several scrapes, for rate()
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "dashboard traffic"}])
            if _query(url, "sum(ctxgate_requests_total)") and _series_points(url) >= 3:
                break
            time.sleep(0.5)
        yield url
    finally:
        stop(process)


def _fidelity_traffic(client: openai.OpenAI, gateway: Gateway) -> None:
    """A session's two calls, managed and bypassed: the second measures the first's answer.
    A bypassed call's record is written after its response is sent, so the second call can
    arrive first on a loaded machine: then it measures nothing, and a new session tries again."""
    ask = [{"role": "user", "content": "Read src/app_01.py and fix it."}]
    read = {"id": "c1", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "src/app_01.py"}'}}
    answered = [*ask, {"role": "assistant", "content": "", "tool_calls": [read]},
                {"role": "tool", "tool_call_id": "c1", "content": "print('hi')"}]
    for attempt in range(10):
        for bypass in ("false", "true"):
            headers = {"x-ctxgate-bypass": bypass,
                       "x-ctxgate-session-id": f"dash-{bypass}-{attempt}"}
            for messages in (ask, answered):
                client.chat.completions.create(
                    model="m", messages=messages, extra_headers=headers)  # type: ignore[arg-type]
        measured = re.findall(r'^ctxgate_recall_turns_total\{[^}]*mode="(\w+)"', gateway.metrics(),
                              re.M)
        if {"managed", "bypass"} <= set(measured):
            return


def _wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    """Prometheus answers /-/ready once it can serve queries; only until then may a
    connection fail."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, "prometheus exited"
        try:
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("prometheus did not become ready")


def _query(url: str, expr: str) -> list[dict[str, object]]:
    """The query's result; a refused connection, an HTTP error or a failed query fails."""
    response = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=5)
    assert response.status_code == 200, (expr, response.status_code, response.text)
    body = response.json()
    assert body["status"] == "success", (expr, body)
    return list(body["data"]["result"])


def _series_points(url: str) -> int:
    result = _query(url, "count_over_time(ctxgate_requests_total[1m])")
    return int(float(result[0]["value"][1])) if result else 0  # type: ignore[index]


def test_every_dashboard_query_is_valid_promql(prometheus: str) -> None:
    for expr in expressions():
        _query(prometheus, expr)  # asserts status == success: the query parses and runs


def test_key_panels_have_data(prometheus: str) -> None:
    assert _query(prometheus, 'sum by (status) (rate(ctxgate_requests_total[5m]))')
    overhead = _query(prometheus, expressions()[1])
    assert overhead and float(overhead[0]["value"][1]) >= 0  # type: ignore[index]
    assert _query(prometheus, 'sum by (task_class, phase) (rate(ctxgate_context_tokens_total[5m]))')
    modes = {r["metric"]["mode"] for r in _query(  # type: ignore[index]
        prometheus, "sum by (task_class, mode) (ctxgate_recall_needed_values_total)")}
    assert modes == {"managed", "bypass"}
    recall = next(e for e in expressions() if "ctxgate_recall_found_values_total" in e)
    assert {r["metric"]["mode"] for r in _query(prometheus, recall)} == {  # type: ignore[index]
        "managed", "bypass"}
    # Forecast against actual: per class, the mean budget given and the mean tokens sent,
    # and no call is sent over its budget.
    given, sent = (e for e in expressions() if "ctxgate_budget_tokens_count" in e)
    budgets = {r["metric"]["task_class"]: float(r["value"][1])  # type: ignore[index]
               for r in _query(prometheus, given)}
    actual = {r["metric"]["task_class"]: float(r["value"][1])  # type: ignore[index]
              for r in _query(prometheus, sent)}
    assert budgets.keys() == actual.keys()
    called = [c for c in budgets if budgets[c] == budgets[c]]  # NaN: no call in the window
    assert called and all(0 < actual[c] <= budgets[c] for c in called), (budgets, actual)
