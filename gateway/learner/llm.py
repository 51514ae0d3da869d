"""The learner's LLM client: Chat Completions with a json_schema response format.

Malformed output (not JSON, or not matching the schema) and transient failures (network,
429, 5xx) are retried with backoff; what is still malformed after the retries raises
`MalformedOutput`, which the worker dead-letters. Other failures raise `LearnerUnavailable`
and leave the trace pending for another attempt.
"""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import orjson
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from gateway.errors import LearnerError as LearnerError
from gateway.errors import LearnerUnavailable as LearnerUnavailable
from gateway.errors import MalformedOutput as MalformedOutput


class LearnerLLM:
    """Calls `{url}/chat/completions` and returns the schema-valid JSON answer."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        *,
        timeout_s: float = 120.0,
        attempts: int = 3,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._url = url.rstrip("/") + "/chat/completions"
        self._client = client or httpx.AsyncClient(timeout=timeout_s, headers=headers)
        self._attempts = attempts
        self._wait = wait_exponential(multiplier=0.2, max=5)
        # One validator per schema: `jsonschema.validate` checks the schema itself against
        # the metaschema on every call (measured: ~25 ms a call, 3/4 of a job's CPU).
        self._validators: dict[int, jsonschema.protocols.Validator] = {}

    async def complete_json(
        self, model: str, system: str, user: str, name: str, schema: dict[str, Any]
    ) -> dict[str, Any]:
        body = {
            "model": model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": 0,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": False},
            },
        }
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._attempts),
            wait=self._wait,
            retry=retry_if_exception_type(LearnerError),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._once(body, schema)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(self, body: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self._client.post(self._url, content=orjson.dumps(body),
                                               headers={"content-type": "application/json"})
        except httpx.HTTPError as exc:
            raise LearnerUnavailable(f"learner request failed: {exc!r}") from exc
        if response.status_code != 200:
            raise LearnerUnavailable(f"learner answered {response.status_code}")
        try:
            content = response.json()["choices"][0]["message"]["content"]
            answer = orjson.loads(content)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise MalformedOutput(f"not JSON: {exc}") from exc
        error = jsonschema.exceptions.best_match(self._validator(schema).iter_errors(answer))
        if error is not None:
            raise MalformedOutput(f"schema: {error.message}")
        return answer  # type: ignore[no-any-return]

    def _validator(self, schema: dict[str, Any]) -> jsonschema.protocols.Validator:
        validator = self._validators.get(id(schema))
        if validator is None:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            validator = self._validators[id(schema)] = cls(schema)
        return validator

    async def aclose(self) -> None:
        await self._client.aclose()
