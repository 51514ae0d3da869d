"""The overhead benchmark's results as markdown, and their place in `bench/README.md`.

The README's "Overhead" section is written by hand except for the block between the
`overhead-results` markers, which every run replaces; the other sections are not touched.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BEGIN = "<!-- overhead-results:begin -->"
END = "<!-- overhead-results:end -->"
SECTION = "## Overhead"

# (name, target, baseline, what is compared, limit): the targets.
GOALS = (
    ("bypass throughput, 16 connections", "bypass", 16, "vs_litellm", 12.0),
    ("engine throughput, 16 connections", "engine", 16, "vs_litellm", 8.0),
    ("bypass added median, 1 connection", "bypass", 1, "added_p50_ms", 1.0),
    ("engine added median, 1 connection", "engine", 1, "added_p50_ms", 2.0),
)
# The figure for LiteLLM's proxy at 16 connections on this machine (the ratio to it
# is printed beside the ratio to the LiteLLM measured in the same run).
LITELLM_REFERENCE_RPS = 160.0
LABELS = {
    "direct": "upstream directly",
    "litellm": "LiteLLM proxy (1 worker)",
    "bypass": "ctxgate bypass (aiohttp)",
    "engine": "ctxgate engine (aiohttp)",
    "bypass-httpx": "ctxgate bypass (httpx)",
    "engine-httpx": "ctxgate engine (httpx)",
}


@dataclass
class Row:
    """One target at one connection count, medians over rounds."""

    target: str
    connections: int
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_cores: float
    rps_per_core: float
    other_load: float
    overhead_mean_ms: float = math.nan
    overhead_p50_ms: float = math.nan
    vs_litellm: float = math.nan
    added_p50_ms: float = math.nan

    def as_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in asdict(self).items()}


ROUTE_LABELS = {"responses": "/v1/responses", "messages": "/v1/messages"}


def label(target: str) -> str:
    """`engine` -> its label; `engine:responses` -> its label on that route."""
    name, _, route = target.partition(":")
    text = LABELS.get(name, name)
    return f"{text}, {ROUTE_LABELS.get(route, route)}" if route else text


def _num(value: float | None, digits: int = 2, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}{suffix}"


def _rows(results: dict[str, Any]) -> list[Row]:
    rows = []
    for raw in results["rows"]:
        values: dict[str, Any] = {k: (math.nan if v is None else v) for k, v in raw.items()}
        rows.append(Row(**values))
    return rows


def render_markdown(results: dict[str, Any]) -> str:
    rows = _rows(results)
    settings, machine = results["settings"], results["machine"]
    pinning = (f"proxy under test (with ctxgate's Redis) on core {settings['proxy_core'][0]}, "
               f"upstream + load generator on core {settings['loadgen_core'][0]}"
               if settings["pinned"] else "not pinned")
    if settings.get("nice"):
        pinning += f", every benchmark process at nice {settings['nice']}"
    other = max((r.other_load for r in rows), default=0.0)
    lines = [
        f"Measured {results['date']} on {machine['cores']} cores ({machine['cpu']}), "
        f"Python {machine['python']}; load generator {settings['loadgen']}; {pinning}; "
        f"{settings['rounds']} interleaved rounds of {settings['duration_s']:g} s per "
        f"target and connection count after {settings['warmup_s']:g} s of warm-up; figures "
        f"are medians over rounds. Mix: {settings['mix']}. LiteLLM: "
        f"`{settings['litellm']}`. Busiest other load on the machine during a run: "
        f"{other:.2f} cores.",
        "",
        f"Command: `{settings['command']}`",
        "",
        "| target | conns | req/s | × LiteLLM | p50 ms | p99 ms | added p50 ms vs direct "
        "| ctxgate_overhead_seconds mean / p50 ms | proxy CPU (cores) | req/s per proxy core "
        "| errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        overhead = ("–" if math.isnan(r.overhead_mean_ms)
                    else f"{r.overhead_mean_ms:.3f} / {_num(r.overhead_p50_ms, 3)}")
        lines.append(
            f"| {label(r.target)} | {r.connections} | {_num(r.rps, 0)} "
            f"| {_num(r.vs_litellm, 1, '×')} | {_num(r.p50_ms)} | {_num(r.p99_ms)} "
            f"| {_num(r.added_p50_ms, 3)} | {overhead} | {_num(r.cpu_cores)} "
            f"| {_num(r.rps_per_core, 0)} | {r.errors} |")
    lines += ["", *goal_lines(rows), *route_lines(rows), *transport_lines(rows)]
    return "\n".join(lines)


def goal_lines(rows: list[Row]) -> list[str]:
    index = {(r.target, r.connections): r for r in rows}
    out = []
    for name, target, connections, attribute, limit in GOALS:
        row = index.get((target, connections))
        value = getattr(row, attribute) if row is not None else math.nan
        if math.isnan(value):
            out.append(f"- {name}: not measured")
            continue
        if attribute == "vs_litellm":
            met = value >= limit
            assert row is not None
            reference = row.rps / LITELLM_REFERENCE_RPS
            out.append(f"- {name}: {value:.1f}× LiteLLM (target ≥ {limit:g}×): "
                       f"{'met' if met else 'NOT met'} ({reference:.1f}× the issue's "
                       f"{LITELLM_REFERENCE_RPS:g} req/s reference figure)")
        else:
            met = value <= limit
            out.append(f"- {name}: +{value:.3f} ms (target ≤ {limit:g} ms): "
                       f"{'met' if met else 'NOT met'}")
    return out


def route_lines(rows: list[Row]) -> list[str]:
    """Issue 9's target: overhead on /v1/responses and /v1/messages within the chat route's
    figures (same run, same mix converted). Per route and mode: added median at one
    connection and throughput at the highest count, each beside chat's."""
    index = {(r.target, r.connections): r for r in rows}
    levels = sorted({r.connections for r in rows})
    out = []
    for route in ROUTE_LABELS:
        for mode in ("bypass", "engine"):
            chat1, other1 = index.get((mode, 1)), index.get((f"{mode}:{route}", 1))
            chat_n = index.get((mode, levels[-1])) if levels else None
            other_n = index.get((f"{mode}:{route}", levels[-1])) if levels else None
            if None in (chat1, other1, chat_n, other_n):
                continue
            assert chat1 and other1 and chat_n and other_n
            out.append(
                f"- {ROUTE_LABELS[route]} {mode} vs chat: added median at 1 connection "
                f"+{other1.added_p50_ms:.3f} vs +{chat1.added_p50_ms:.3f} ms; "
                f"{levels[-1]} connections {other_n.rps:,.0f} vs {chat_n.rps:,.0f} req/s "
                f"({other_n.rps / chat_n.rps:.2f}×)")
    return out


def transport_lines(rows: list[Row]) -> list[str]:
    index = {(r.target, r.connections): r for r in rows}
    out = []
    for connections in sorted({r.connections for r in rows}):
        aio, hx = index.get(("bypass", connections)), index.get(("bypass-httpx", connections))
        if aio is None or hx is None or hx.rps <= 0:
            continue
        out.append(f"- upstream transport, bypass at {connections} connection"
                   f"{'s' if connections > 1 else ''}: aiohttp {aio.rps:,.0f} req/s vs httpx "
                   f"{hx.rps:,.0f} req/s = {aio.rps / hx.rps:.2f}×; p50 {aio.p50_ms:.2f} vs "
                   f"{hx.p50_ms:.2f} ms")
    return out


def update_readme(readme: Path, table: str) -> None:
    """Replace the results block of the Overhead section, creating what is missing."""
    block = f"{BEGIN}\n{table}\n{END}"
    text = readme.read_text() if readme.exists() else "# Benchmarks\n"
    if BEGIN in text and END in text:
        text = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: block, text,
                      flags=re.DOTALL)
    elif SECTION in text:
        heading = text.index(SECTION)
        end_of_line = text.index("\n", heading) + 1 if "\n" in text[heading:] else len(text)
        text = text[:end_of_line] + "\n" + block + "\n" + text[end_of_line:]
    else:
        text = text.rstrip("\n") + f"\n\n{SECTION}\n\n{block}\n"
    readme.write_text(text)
