"""Everything else under /v1/ is forwarded verbatim, and the auth modes."""

from __future__ import annotations

import base64

import httpx
import openai
import orjson
import pytest

from tests.conftest import ModuleStart, gateway_env, module_gateway
from tests.harness import Gateway, Upstream
from tests.openapi_oracle import validate

KEY = "sk-test-passthrough-abcdef123456"


def test_models_and_embeddings_through_the_sdk(gateway: Gateway, upstream: Upstream) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0)
    models = client.models.with_raw_response.list()
    validate("ListModelsResponse", orjson.loads(models.content))
    assert [m.id for m in models.parse()] == ["gpt-4o-mini"]
    upstream.clear()
    embedding = client.embeddings.with_raw_response.create(
        model="text-embedding-3-small", input=["a", "b"])
    validate("CreateEmbeddingResponse", orjson.loads(embedding.content))
    assert len(embedding.parse().data) == 2
    assert upstream.client_requests()[-1]["headers"]["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_any_method_and_path_is_forwarded_verbatim(gateway: Gateway, upstream: Upstream,
                                                   method: str) -> None:
    body = b'{"input": "raw  bytes", "unknown": [1,2,3]}'
    upstream.clear()
    response = httpx.request(method, f"{gateway.base_url}/responses/resp_1/things?limit=3&x=y",
                             content=body, headers={"authorization": f"Bearer {KEY}",
                                                    "openai-beta": "assistants=v2"})
    assert response.status_code == 200
    seen = upstream.client_requests()[-1]
    assert (seen["method"], seen["path"], seen["query"]) == (
        method, "/v1/responses/resp_1/things", "limit=3&x=y")
    assert seen["body"] == body
    assert seen["headers"]["openai-beta"] == "assistants=v2"
    assert base64.b64decode(response.json()["body_b64"]) == body
    assert response.headers["x-ctxgate-trace-id"]


@module_gateway()
def keys_gateway(start: ModuleStart) -> dict[str, str]:
    config = start.workdir / "gateway.yaml"
    config.write_text("auth_mode: keys\nkeys:\n  gk-team-alpha-0001: alpha\n"
                      "  gk-team-beta-0002: beta\n")
    # No learner of its own: started ahead, it would take the session gateway's traces.
    return {**gateway_env(start.upstream, start.redis_url), "CTXGATE_CONFIG": str(config),
            "CTXGATE_UPSTREAM_API_KEY": "sk-upstream-secret-987654321",
            "CTXGATE_WORKER": "off"}


def test_keys_mode_swaps_the_credential(keys_gateway: Gateway, upstream: Upstream) -> None:
    client = openai.OpenAI(base_url=keys_gateway.base_url, api_key="gk-team-alpha-0001",
                           max_retries=0)
    upstream.clear()
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    client.models.list()
    for seen in upstream.client_requests():
        assert seen["headers"]["authorization"] == "Bearer sk-upstream-secret-987654321"


@pytest.mark.parametrize("key", ["gk-unknown", None])
def test_keys_mode_rejects_unknown_keys(keys_gateway: Gateway, key: str | None) -> None:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    for method, path in (("POST", "/chat/completions"), ("GET", "/models")):
        response = httpx.request(method, f"{keys_gateway.base_url}{path}", headers=headers,
                                 json={"model": "m", "messages": [
                                     {"role": "user", "content": "x"}]})
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"


@module_gateway()
def dead_upstream_gateway(start: ModuleStart) -> dict[str, str]:
    with __import__("socket").socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    return {"CTXGATE_UPSTREAM_URL": f"http://127.0.0.1:{dead}/v1",
            "CTXGATE_REDIS_URL": start.redis_url, "CTXGATE_WORKER": "off"}


def test_unreachable_upstream_is_a_502(dead_upstream_gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=dead_upstream_gateway.base_url, api_key=KEY, max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert caught.value.status_code == 502
    assert caught.value.code == "upstream_unreachable"
    assert httpx.get(f"{dead_upstream_gateway.base_url}/models").status_code == 502
