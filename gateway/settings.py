"""Settings: `CTXGATE_*` environment over the YAML file over defaults (pydantic-settings).

The YAML file (`CTXGATE_CONFIG`, default `config/gateway.yaml`) holds the same keys as the
environment, lower-cased without the prefix, plus the structured sections (`keys`,
`task_classes`, `playbook`, `learner`) that only make sense in a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from gateway.errors import SettingsError

DEFAULT_CONFIG = Path("config/gateway.yaml")


class Settings(BaseSettings):
    """Every setting of the gateway, built once and passed down (never a global)."""

    model_config = SettingsConfigDict(env_prefix="CTXGATE_", extra="ignore")

    upstream_url: str = "https://api.openai.com/v1"
    upstream_api_key: SecretStr | None = None
    anthropic_upstream_url: str = "https://api.anthropic.com"  # for /v1/messages, no /v1
    auth_mode: Literal["passthrough", "keys"] = "passthrough"
    keys: dict[str, str] = Field(default_factory=dict, repr=False)
    redis_url: str | None = None
    redis_cluster: bool = False  # True: redis_url names one node of a Redis Cluster
    # A Redis that keeps the connection but stops answering (SIGSTOPped, a network black
    # hole) fails each command after this long, as if it were down: nothing waits forever.
    redis_timeout_s: float = Field(default=2.0, gt=0)
    data_dir: Path = Path("./.ctxgate")
    config: Path = DEFAULT_CONFIG
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    admin_key: SecretStr | None = None
    worker: Literal["inprocess", "off"] = "inprocess"
    reflector_model: str = "gpt-4.1"
    curator_model: str = "gpt-4.1"
    learner_url: str | None = None
    learner_api_key: SecretStr | None = None
    embed_model: str | None = None
    drop_log: str = "stdout"
    drop_log_preview: Literal["none", "hash", "text"] = "hash"
    # decisions: each decision once plus a line per call; items: a line per item per call
    drop_log_form: Literal["decisions", "items"] = "decisions"
    otel_endpoint: str | None = None
    upstream_timeout_s: float = Field(default=600.0, gt=0)
    # Each call's context fitting; past it the call goes out unmanaged or is refused, as
    # its task class's `on_fit_timeout` says.
    fit_timeout_s: float = Field(default=1.0, gt=0)
    max_body_bytes: int = Field(default=33_554_432, gt=0)
    # aiohttp's transport under httpx measured ~3x httpx's own pool here; `httpx` for HTTP/2.
    upstream_transport: Literal["aiohttp", "httpx"] = "aiohttp"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Budgets that adjust themselves (gateway/context/adjust.py): false keeps every class on
    # its YAML caps, whatever its `forecast.adjust`; the controller judges this often.
    forecast_adjust: bool = True
    forecast_judge_every_s: float = Field(default=15.0, gt=0)
    models_file: Path | None = None
    task_classes: dict[str, Any] = Field(default_factory=dict)
    playbook: dict[str, Any] = Field(default_factory=dict)
    learner: dict[str, Any] = Field(default_factory=dict)

    @field_validator("upstream_url", "anthropic_upstream_url", "learner_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _models_beside_config(self) -> Settings:
        # The model table lives beside the YAML file (config/models.yaml), wherever the
        # package is installed; an explicit CTXGATE_MODELS_FILE wins.
        if self.models_file is None:
            beside = self.config.parent / "models.yaml"
            if beside.exists():
                self.models_file = beside
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        init_kwargs = getattr(init_settings, "init_kwargs", {})
        path = Path(init_kwargs.get("config") or os.environ.get("CTXGATE_CONFIG") or DEFAULT_CONFIG)
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if path.exists():
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)

    @property
    def effective_learner_url(self) -> str:
        return self.learner_url or self.upstream_url

    @property
    def effective_learner_key(self) -> SecretStr | None:
        return self.learner_api_key or self.upstream_api_key


def load_settings(**overrides: Any) -> Settings:
    """Build the settings; raise SettingsError naming each bad setting."""
    overrides = {k: v for k, v in overrides.items() if v is not None}
    explicit = overrides.get("config") or os.environ.get("CTXGATE_CONFIG")
    if explicit and not Path(explicit).exists():
        raise SettingsError(f"CTXGATE_CONFIG: file {explicit} does not exist")
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"CTXGATE_{'_'.join(str(p) for p in err['loc']).upper()}: {err['msg']}"
            for err in exc.errors()
        )
        raise SettingsError(f"invalid settings: {problems}") from None
    except Exception as exc:  # a YAML syntax error, an unreadable file
        raise SettingsError(f"CTXGATE_CONFIG: cannot read settings: {exc}") from None
