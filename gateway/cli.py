"""The `ctxgate` command: serve, worker, replay, explain, forecast, playbook, learn."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from gateway.errors import SettingsError
from gateway.settings import Settings, load_settings

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="ctxgate: a context-managing OpenAI-compatible gateway.")
ConfigOption = Annotated[Path | None, typer.Option("--config", help="YAML settings file")]


def _settings(**overrides: Any) -> Settings:
    try:
        return load_settings(**overrides)
    except SettingsError as exc:
        typer.echo(f"ctxgate: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="listen address")] = None,
    port: Annotated[int | None, typer.Option(help="listen port")] = None,
    config: ConfigOption = None,
) -> None:
    """Run the gateway (with an embedded Redis unless CTXGATE_REDIS_URL is set)."""
    import uvicorn

    from gateway.app import Gateway
    from gateway.observability.logging import configure_logging
    from gateway.store.embedded import EmbeddedRedis

    settings = _settings(host=host, port=port, config=config)
    configure_logging(settings.log_level)
    _log_config(settings)
    _check_config(settings)
    # A stop during the model's load below ends the process at once: nothing has started
    # yet (no Redis, no socket, no child) and nothing is left to clean up.
    signal.signal(signal.SIGTERM, _exit_while_loading)
    signal.signal(signal.SIGINT, _exit_while_loading)
    gateway = Gateway(settings)
    # The embedding model loads before anything listens, so no request (nor `/healthz`)
    # meets a process whose loading holds the GIL; the port opens once the gateway is
    # ready (its start-up warms the rest: the classes' examples, the token encodings).
    gateway.load_model()
    # From here uvicorn re-raises SIGTERM/SIGINT once it has shut down; turn that into an
    # exit that still runs the `finally` below, so the embedded Redis is stopped too (also
    # when the stop lands while it starts: its process is known from the moment it runs).
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, _exit_on_signal)
    embedded = None if settings.redis_url else EmbeddedRedis(settings.data_dir)
    try:
        if embedded is not None:
            embedded.start()
        server = uvicorn.Server(uvicorn.Config(
            gateway, host=settings.host, port=settings.port, loop="uvloop",
            http="httptools", lifespan="on", log_config=None, access_log=False,
            timeout_graceful_shutdown=10,
        ))
        server.run()
        if not server.started:
            raise typer.Exit(3)
    finally:
        if embedded is not None:
            embedded.stop()


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _exit_while_loading(signum: int, frame: object) -> None:
    """End `serve` at once, during its model's load. Not by raising SystemExit there: that
    lands at whatever bytecode the imports of torch and transformers are at, then runs
    their clean-up and the interpreter's exit (atexit handlers, threads joined) on that
    half-built state: 0.5-2 s here, and once in CI no exit within 120 s. `os._exit` runs
    none of it (0.06-0.22 s); nothing that needs stopping has started yet."""
    os.write(2, b'{"ts":%.6f,"level":"info","logger":"ctxgate","msg":"stopped while '
             b'loading the embedding model","signal":%d}\n' % (time.time(), signum))
    os._exit(0)


def _log_config(settings: Settings) -> None:
    """Name the configuration file in use; without one, say so loudly: a gateway started
    away from its `config/gateway.yaml` would otherwise run, unnoticed, on the built-in
    defaults (one `default` class, no model table) instead of the team's classes."""
    log = logging.getLogger("ctxgate")
    if settings.config.exists():
        log.info("configuration loaded", extra={
            "config": str(settings.config.resolve()),
            "models_file": str(settings.models_file) if settings.models_file else None})
        return
    log.warning("no configuration file at %s (working directory %s): running on the "
                "built-in defaults; set CTXGATE_CONFIG to the YAML file",
                settings.config, Path.cwd(), extra={"config": None})


def _check_config(settings: Settings) -> None:
    """Fail before listening if the task classes, models or playbook settings are invalid."""
    from gateway.context.models import ModelTable
    from gateway.context.taskclass import load_task_classes
    from gateway.playbook.config import validate

    try:
        load_task_classes(settings)
        ModelTable.load(settings.models_file)
        validate(settings)
    except SettingsError as exc:
        typer.echo(f"ctxgate: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def worker(
    config: ConfigOption = None,
    metrics_port: Annotated[int | None, typer.Option(
        envvar="CTXGATE_WORKER_METRICS_PORT",
        help="serve this worker's Prometheus metrics on 127.0.0.1:PORT")] = None,
) -> None:
    """Run a Reflector/Curator worker on the trace stream (run as many as you like)."""
    from gateway.learner.worker import run_worker, warm_up
    from gateway.observability.logging import configure_logging
    from gateway.services import open_services

    settings = _settings(config=config)
    configure_logging(settings.log_level)
    _log_config(settings)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with open_services(settings) as services:
            # The metrics port opens once the model is loaded, as `serve`'s does: a probe
            # on it then means "taking work", and no probe meets a process whose load
            # holds the GIL for seconds (its answers would time out, a liveness probe kill
            # a worker that is only starting).
            if not await warm_up(services, stop):
                return
            if metrics_port is not None:
                from prometheus_client import start_http_server

                start_http_server(metrics_port, addr=settings.host,
                                  registry=services.metrics.registry)
            await run_worker(services, stop=stop)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


@app.command()
def replay(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False)],
    budget_tokens: Annotated[int | None, typer.Option(min=1)] = None,
    task_class: Annotated[str | None, typer.Option()] = None,
    json_output: Annotated[bool, typer.Option("--json")] = False,
    wire_format: Annotated[str | None, typer.Option(
        "--format", help="chat, responses or messages (default: told by each request's shape)",
    )] = None,
    config: ConfigOption = None,
) -> None:
    """Run a recorded session through the context pipeline and print each call's fit."""
    from gateway.context.replay import WIRE_FORMATS
    from gateway.context.replay import replay as run_replay

    if wire_format is not None and wire_format not in WIRE_FORMATS:
        raise typer.BadParameter(f"one of {sorted(WIRE_FORMATS)}", param_hint="--format")
    settings = _settings(config=config)
    raise typer.Exit(run_replay(file, budget_tokens=budget_tokens, task_class=task_class,
                                as_json=json_output, settings=settings,
                                wire_format=wire_format))


@app.command()
def learn(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False)],
    epochs: Annotated[int, typer.Option(min=1)] = 1,
    config: ConfigOption = None,
) -> None:
    """Warm up a playbook offline from recorded sessions with outcomes."""
    from gateway.cli_playbook import learn as run_learn

    settings = _settings(config=config)
    raise typer.Exit(run_learn(file, epochs, settings))


@app.command()
def explain(
    trace_id: Annotated[str, typer.Argument(help="x-ctxgate-trace-id of the call")],
    json_output: Annotated[bool, typer.Option("--json")] = False,
    config: ConfigOption = None,
) -> None:
    """One call's account: what the client sent against what went upstream."""
    import orjson

    from gateway.observability.explain import load_explained, render_text
    from gateway.store.client import connect

    settings = _settings(config=config)

    async def main() -> dict[str, Any] | None:
        redis = connect(settings)
        try:
            return await load_explained(redis, trace_id)
        finally:
            await redis.aclose()

    explained = asyncio.run(main())
    if explained is None:
        typer.echo(f"ctxgate: no account of trace {trace_id} is kept", err=True)
        raise typer.Exit(1)
    if json_output:
        typer.echo(orjson.dumps(explained, option=orjson.OPT_INDENT_2).decode())
    else:
        typer.echo(render_text(explained))


@app.command()
def forecast(
    json_output: Annotated[bool, typer.Option("--json")] = False,
    reset: Annotated[str | None, typer.Option(
        help="forget this class's forecast and history: its YAML caps hold again")] = None,
    config: ConfigOption = None,
) -> None:
    """Each task class's current budget forecast, its evidence and its history."""
    import orjson

    from gateway.context.adjust import ClassForecasts, ForecastController, render_text
    from gateway.context.evidence import EvidenceStore
    from gateway.context.taskclass import load_task_classes
    from gateway.store.client import connect

    settings = _settings(config=config)
    try:
        classes = load_task_classes(settings)
    except SettingsError as exc:
        typer.echo(f"ctxgate: {exc}", err=True)
        raise typer.Exit(2) from None
    if reset is not None and reset not in classes:
        raise typer.BadParameter(f"no task class {reset!r}", param_hint="--reset")

    async def main() -> list[dict[str, Any]]:
        redis = connect(settings)
        try:
            forecasts = ClassForecasts(redis, ttl_s=0)
            if reset is not None:
                await forecasts.reset(reset)
            controller = ForecastController(classes, EvidenceStore(redis), forecasts,
                                            enabled=settings.forecast_adjust)
            return await controller.describe_all()
        finally:
            await redis.aclose()

    described = asyncio.run(main())
    if json_output:
        typer.echo(orjson.dumps(described, option=orjson.OPT_INDENT_2).decode())
    else:
        typer.echo(render_text(described))


def _register_playbook() -> None:
    from gateway.cli_playbook import app as playbook_app

    app.add_typer(playbook_app, name="playbook", help="List, show, export, import, delete.")


def main() -> None:
    _register_playbook()
    app(prog_name="ctxgate")


if __name__ == "__main__":
    main()
