"""JSON schemas of the Reflector's and the Curator's outputs (INTERFACE.md, learner contracts).

Sent as `response_format: {"type": "json_schema", ...}` and checked again on receipt: a
model that ignores the schema gets retried, then dead-lettered.
"""

from __future__ import annotations

from typing import Any

_STR = {"type": "string"}

REFLECTION: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["reasoning", "error_identification", "root_cause_analysis",
                 "correct_approach", "key_insight", "bullet_tags"],
    "properties": {
        "reasoning": _STR,
        "error_identification": _STR,
        "root_cause_analysis": _STR,
        "correct_approach": _STR,
        "key_insight": _STR,
        "bullet_tags": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "tag"],
                "properties": {
                    "id": _STR,
                    "tag": {"type": "string", "enum": ["helpful", "harmful", "neutral"]},
                },
            },
        },
    },
}


def _op(kind: str, **fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["type", *fields],
        "properties": {"type": {"type": "string", "const": kind}, **fields},
    }


_COUNT = {"type": "integer", "minimum": 0, "maximum": 10}

CURATION: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["reasoning", "operations"],
    "properties": {
        "reasoning": _STR,
        "operations": {
            "type": "array",
            "maxItems": 20,
            "items": {
                "anyOf": [
                    _op("ADD", section=_STR, content=_STR),
                    _op("UPDATE", id=_STR, content=_STR),
                    _op("REMOVE", id=_STR),
                    _op("TAG", id=_STR, helpful=_COUNT, harmful=_COUNT),
                ]
            },
        },
    },
}
