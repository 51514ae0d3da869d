"""OpenAI's official API description (../shared/openai-openapi/openapi.yaml) as a test oracle.

Tests validate what the gateway forwards and returns against the spec's schemas; where
../shared is absent (a user's machine) they skip with a reason.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

SPEC = Path(__file__).resolve().parents[1].parent / "shared" / "openai-openapi" / "openapi.yaml"


@functools.cache
def _components() -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with SPEC.open("rb") as handle:
        spec = yaml.load(handle, Loader=loader)
    return dict(_nullable(spec["components"]))


def _nullable(node: Any) -> Any:
    """The spec still writes OpenAPI 3.0's `nullable: true`; JSON Schema says null type."""
    if isinstance(node, list):
        return [_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _nullable(value) for key, value in node.items()}
    if node.pop("nullable", False) is True:
        return {"anyOf": [node, {"type": "null"}]}
    return node


@functools.cache
def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"#/components/schemas/{name}",
                                 "components": _components()})


def validate(schema: str, instance: Any) -> None:
    """Fail the test with the spec's complaint if `instance` is not a valid `schema`."""
    if not SPEC.exists():
        pytest.skip(f"OpenAI's spec is absent ({SPEC}): nothing to validate against")
    errors = sorted(_validator(schema).iter_errors(instance), key=lambda e: list(e.path))
    assert not errors, f"{schema}: " + "; ".join(
        f"{list(e.path)}: {e.message[:200]}" for e in errors[:5])
