"""The model table (`config/models.yaml`): encoding, context window and output cap per model.

`estimated: true` marks a model with no public tokenizer (Anthropic's): its encoding only
estimates the provider's count, and the engine corrects the estimate from the input tokens
the provider reports (`calibration.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gateway.errors import SettingsError

DEFAULT_MODELS_FILE = Path(__file__).resolve().parents[2] / "config" / "models.yaml"
ENCODINGS = ("cl100k_base", "o200k_base")


@dataclass(frozen=True, slots=True)
class ModelInfo:
    encoding: str
    context_window: int
    max_output: int
    estimated: bool = False  # no public tokenizer: counts corrected by calibration.py


def _model_info(name: str, raw: Any) -> ModelInfo:
    if not isinstance(raw, dict):
        raise SettingsError(f"models.{name}: expected a mapping")
    encoding = raw.get("encoding")
    if encoding not in ENCODINGS:
        raise SettingsError(f"models.{name}.encoding: {encoding!r} is not one of {ENCODINGS}")
    try:
        window, max_output = int(raw["context_window"]), int(raw["max_output"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SettingsError(
            f"models.{name}: context_window and max_output must be integers"
        ) from exc
    if window <= 0 or max_output <= 0:
        raise SettingsError(f"models.{name}: context_window and max_output must be positive")
    estimated = raw.get("estimated", False)
    if not isinstance(estimated, bool):
        raise SettingsError(f"models.{name}.estimated: expected true or false")
    return ModelInfo(encoding, window, max_output, estimated)


class ModelTable:
    """Looks a request's model up by exact name, then longest prefix, then the default."""

    def __init__(self, default: ModelInfo, models: dict[str, ModelInfo]) -> None:
        self.default = default
        self._models = models
        self._prefixes = sorted(models, key=len, reverse=True)

    @classmethod
    def load(cls, path: Path | None = None) -> ModelTable:
        path = path or DEFAULT_MODELS_FILE
        try:
            raw = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise SettingsError(f"models_file: cannot read {path}: {exc}") from None
        if not isinstance(raw, dict) or "default" not in raw:
            raise SettingsError(f"models_file: {path} needs a `default` entry")
        models = raw.get("models") or {}
        if not isinstance(models, dict):
            raise SettingsError("models_file: `models` must be a mapping")
        return cls(
            _model_info("default", raw["default"]),
            {str(k): _model_info(str(k), v) for k, v in models.items()},
        )

    def lookup(self, model: str | None) -> ModelInfo:
        if not model:
            return self.default
        if model in self._models:
            return self._models[model]
        # Provider prefixes such as "openai/gpt-4o" are common behind routers.
        bare = model.rsplit("/", 1)[-1]
        for prefix in self._prefixes:
            if bare.startswith(prefix):
                return self._models[prefix]
        return self.default
