"""The drop-log stack checked against what really runs: no Loki, Grafana or Alloy binary
here, so every LogQL query of the dashboards is parsed (tests/ops/logql.py) and every label
and field it names is checked against the lines a live gateway writes under traffic; the
Alloy configuration, the compose file and the Kubernetes manifests are read for the
services, volumes and labels they must have."""

from __future__ import annotations

import fnmatch
import json
import re
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

import httpx
import pytest
import yaml

from gateway.context.replay import calls_from_messages
from tests.harness import ROOT, Gateway
from tests.ops import alloy, logql
from tests.sessions import synthetic_session

DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
DROPLOG = DASHBOARDS / "droplog.json"
DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "datasources.yaml"
ALLOY = ROOT / "deploy" / "alloy" / "config.alloy"
LABELS = {"event", "task_class", "stage", "reason"}  # bounded: the only stream labels
METADATA = {"trace_id", "session_id"}  # unbounded: structured metadata
EVENTS = {"context.decision", "context.call", "context.drop", "playbook.drop"}
CONTEXT_PANELS = {4, 5, 6, 7, 8}  # tokens, savings, drops, refusals: link to the drop log


def _dashboard(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _queries() -> list[logql.Query]:
    return [logql.parse(t["expr"]) for p in _dashboard(DROPLOG)["panels"] for t in p["targets"]]


def _alloy() -> dict[str, alloy.Block]:
    return {f"{b.name}.{b.label}": b for b in alloy.parse(ALLOY.read_text())}


@pytest.fixture(scope="module")
def live_lines(gateway: Gateway) -> list[dict[str, Any]]:
    """The drop log a live gateway writes for a compacted session."""
    session = uuid.uuid4().hex
    _, messages, _ = synthetic_session(21, turns=24)
    for body in calls_from_messages(messages, "gpt-4o-mini"):
        response = httpx.post(
            f"{gateway.base_url}/chat/completions", json=body, timeout=30,
            headers={"authorization": "Bearer sk-ops-droplog-0000", "x-ctxgate-session-id":
                     session, "x-ctxgate-budget-tokens": "5000"})
        assert response.status_code == 200, response.text
    lines = [line for line in gateway.drops() if line["session_id"] == session]
    assert {line["event"] for line in lines} == {"context.decision", "context.call"}
    return lines


def test_every_logql_query_parses_with_bounded_stream_labels() -> None:
    queries = _queries()
    assert len(queries) >= 5
    for query in queries:
        assert {label for label, _, _ in query.log.matchers} <= LABELS
        events = next(v for label, _, v in query.log.matchers if label == "event")
        assert all(re.fullmatch(events, e) is None or e in EVENTS for e in EVENTS)
        assert any(re.fullmatch(events, e) for e in EVENTS), events
        if query.functions:
            assert query.log.range is not None  # a metric query names its range
    for variable in _dashboard(DROPLOG)["templating"]["list"]:
        if variable["type"] == "query":
            selector, label = logql.parse_label_values(variable["query"]["query"])
            assert label in LABELS
            assert {name for name, _, _ in selector.matchers} <= LABELS


def test_the_parser_refuses_what_it_cannot_read() -> None:
    with pytest.raises(logql.LogQLError):
        logql.parse('{event="x"} | json | unwrap')
    with pytest.raises(logql.LogQLError):
        logql.parse('frobnicate({event="x"} [1m])')
    assert logql.parse('{a="b"} |= "x" | c > 3').log.label_filters == [("c", ">", "3")]


def test_every_field_a_query_names_is_in_the_live_drop_log(
        live_lines: list[dict[str, Any]]) -> None:
    written = set().union(*(line.keys() for line in live_lines))
    for query in _queries():
        needed = query.log.fields_read | query.grouping
        selected = [line for line in live_lines if _selects(query.log, line)]
        assert selected, query.log.matchers  # the query finds lines of real traffic
        present = set().union(*(line.keys() for line in selected)) | set(query.log.formatted)
        assert needed <= present, (needed - present, query.log.matchers)
        assert needed <= written | LABELS | METADATA
        if query.log.unwrap in present:
            assert all(isinstance(line.get(query.log.unwrap, 0), int) for line in selected)


def _selects(log: logql.LogQuery, line: dict[str, Any]) -> bool:
    for label, op, value in log.matchers:
        pattern = re.sub(r"\$\w+", ".*", value)
        got = str(line.get(label, ""))
        if op == "=" and got != pattern:
            return False
        if op == "=~" and not re.fullmatch(pattern, got):
            return False
    return True


def test_alloy_ships_the_drop_log_with_bounded_labels(live_lines: list[dict[str, Any]]) -> None:
    blocks = _alloy()
    source, process = blocks["loki.source.file.droplog"], blocks["loki.process.droplog"]
    assert source.attrs["targets"] == alloy.Ref("local.file_match.droplog.targets")
    assert source.attrs["forward_to"] == [alloy.Ref("loki.process.droplog.receiver")]
    assert process.attrs["forward_to"] == [alloy.Ref("loki.write.loki.receiver")]
    extracted = process.block("stage.json").attrs["expressions"]
    assert set(process.block("stage.labels").attrs["values"]) == LABELS
    assert set(process.block("stage.structured_metadata").attrs["values"]) == METADATA
    assert process.block("stage.timestamp").attrs == {"source": "ts", "format": "Unix"}
    assert LABELS | METADATA | {"ts"} <= set(extracted)
    written = set().union(*(line.keys() for line in live_lines))
    assert set(extracted.values()) <= written  # every field Alloy reads, the gateway writes
    targets = blocks["local.file_match.droplog"].attrs["path_targets"]
    assert [set(t) for t in targets] == [{"__path__"}]  # no other static stream label
    assert blocks["loki.write.loki"].block("endpoint").attrs["url"] == (
        "http://loki:3100/loki/api/v1/push")


def _alloy_glob() -> str:
    return str(_alloy()["local.file_match.droplog"].attrs["path_targets"][0]["__path__"])


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> source of a compose service's volumes."""
    out = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        out[target] = source
    return out


def test_compose_runs_loki_and_alloy_on_the_gateway_drop_log() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"gateway", "loki", "alloy", "grafana", "prometheus", "redis"} <= set(services)
    drop_log = PurePosixPath(services["gateway"]["environment"]["CTXGATE_DROP_LOG"])
    assert fnmatch.fnmatch(str(drop_log), _alloy_glob())
    gateway_volume = _mounts(services["gateway"])[str(drop_log.parent)]
    alloy_mounts = _mounts(services["alloy"])
    assert alloy_mounts[str(drop_log.parent)] == gateway_volume  # the same named volume
    assert gateway_volume in compose["volumes"]
    assert any(v.endswith(":ro") and v.startswith(gateway_volume + ":")
               for v in services["alloy"]["volumes"])
    assert alloy_mounts["/etc/alloy/config.alloy"] == "./deploy/alloy/config.alloy"
    assert "/etc/alloy/config.alloy" in services["alloy"]["command"]
    loki = services["loki"]
    assert "3100:3100" in loki["ports"]
    assert _mounts(loki)["/etc/loki/loki.yaml"] == "./deploy/loki/loki.yaml"
    for path in ("./deploy/alloy/config.alloy", "./deploy/loki/loki.yaml"):
        assert (ROOT / path).is_file()
    grafana = _mounts(services["grafana"])
    assert grafana["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    loki_config = yaml.safe_load((ROOT / "deploy" / "loki" / "loki.yaml").read_text())
    assert loki_config["limits_config"]["allow_structured_metadata"] is True
    assert loki_config["server"]["http_listen_port"] == 3100


def test_grafana_has_both_data_sources_the_dashboards_use() -> None:
    sources = {s["uid"]: s for s in yaml.safe_load(DATASOURCES.read_text())["datasources"]}
    assert sources["prometheus"]["type"] == "prometheus"
    assert sources["loki"]["type"] == "loki" and sources["loki"]["url"] == "http://loki:3100"
    derived = sources["loki"]["jsonData"]["derivedFields"]
    assert any(f["matcherRegex"] == "trace_id" and "/admin/traces/" in f["url"] for f in derived)
    droplog = _dashboard(DROPLOG)
    variable = next(v for v in droplog["templating"]["list"] if v["name"] == "loki")
    assert variable["current"]["value"] in sources
    for panel in droplog["panels"]:
        assert panel["datasource"] == {"type": "loki", "uid": "${loki}"}


def test_dashboards_link_to_each_other_and_to_the_explainer() -> None:
    droplog = _dashboard(DROPLOG)
    variables = {v["name"] for v in droplog["templating"]["list"]}
    assert {"task_class", "stage", "reason", "session", "trace_id"} <= variables
    titles = " ".join(p["title"].lower() for p in droplog["panels"])
    assert "largest drops" in titles and "session" in titles
    for panel in droplog["panels"]:
        if panel["type"] == "logs":
            urls = [link["url"] for link in panel["fieldConfig"]["defaults"]["links"]]
            assert any("/admin/traces/${__data.fields.trace_id}" in u for u in urls)
    metrics = _dashboard(DASHBOARDS / "ctxgate.json")
    for panel in metrics["panels"]:
        if panel["id"] not in CONTEXT_PANELS:
            continue
        links = panel["fieldConfig"]["defaults"]["links"]
        url = links[0]["url"]
        assert url.startswith(f"/d/{droplog['uid']}/") and "${__url_time_range}" in url
        by_class = any("task_class" in t["expr"] for t in panel["targets"])
        assert by_class == ("var-task_class=${__field.labels.task_class}" in url)


def _k8s(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / "deploy" / "k8s" / name).read_text()) if d]


def test_k8s_ships_the_drop_log_and_scales_the_gateway() -> None:
    docs = _k8s("ctxgate.yaml") + _k8s("loki.yaml")
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    gateway = next(d for d in by_kind["Deployment"] if d["metadata"]["name"] == "ctxgate-gateway")
    pod = gateway["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    env = {e["name"]: e.get("value") for e in containers["gateway"]["env"]}
    # serve listens only once its model is loaded: a start-up probe, minutes long, guards
    # the liveness probe from killing a pod still loading on a busy node
    startup = containers["gateway"]["startupProbe"]
    assert startup["httpGet"]["path"] == "/healthz"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120
    # so does a worker's metrics port (`ctxgate worker`): its probes are on that port
    worker = next(d for d in by_kind["Deployment"] if d["metadata"]["name"] == "ctxgate-worker")
    [work] = worker["spec"]["template"]["spec"]["containers"]
    port = {e["name"]: e.get("value") for e in work["env"]}["CTXGATE_WORKER_METRICS_PORT"]
    named = {p["name"]: p["containerPort"] for p in work["ports"]}
    for probe in (work["startupProbe"], work["livenessProbe"]):
        assert named[probe["httpGet"]["port"]] == int(port)
    startup = work["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120
    drop_log = PurePosixPath(env["CTXGATE_DROP_LOG"])
    assert fnmatch.fnmatch(str(drop_log), _alloy_glob())
    mounts = {m["mountPath"]: m for m in containers["gateway"]["volumeMounts"]}
    alloy_mounts = {m["mountPath"]: m for m in containers["alloy"]["volumeMounts"]}
    shared = mounts[str(drop_log.parent)]["name"]
    assert alloy_mounts[str(drop_log.parent)] == {"name": shared, "mountPath":
                                                  str(drop_log.parent), "readOnly": True}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert "emptyDir" in volumes[shared]
    config = volumes[alloy_mounts["/etc/alloy"]["name"]]["configMap"]["name"]
    assert f"configmap {config} --from-file=config.alloy=deploy/alloy/config.alloy" in (
        ROOT / "deploy" / "k8s" / "ctxgate.yaml").read_text()
    assert "/etc/alloy/config.alloy" in containers["alloy"]["args"]
    [hpa] = by_kind["HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": "ctxgate-gateway"}
    assert 1 < hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    [pdb] = by_kind["PodDisruptionBudget"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    [monitor] = by_kind["ServiceMonitor"]
    service = next(s for s in by_kind["Service"] if s["metadata"]["name"] == "ctxgate")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"][
        "labels"].items()
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http"] and "http" in ports
    assert service["spec"]["selector"].items() <= pod_labels.items()
    loki = next(s for s in by_kind["Service"] if s["metadata"]["name"] == "loki")
    assert loki["spec"]["ports"][0]["port"] == 3100  # what Alloy's loki.write names
    assert any(d["metadata"]["name"] == "loki" for d in by_kind["StatefulSet"])
