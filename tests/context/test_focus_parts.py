"""A name that carries the task's terms as its parts (a path's segment, the words of a
snake- or kebab-case name) is listed before the other names an MCP content block's digest
(its records line) or its mask leaves out: `sink_27_academic_warnings` when the task says
"academic warning", `_pages/publications.html` when it says "publications page". The focus
terms are whole tokens, so such a name used to rank with every other name and fall past the
list's bound; the real engine on the embedded Redis, the shipped configuration."""

from __future__ import annotations

import orjson

from gateway.context.engine import ContextEngine
from gateway.context.focus import focus_hits, focus_parts, task_focus
from gateway.context.summarize import kept_fields, summarize
from tests.context.sessions import drops_add_up, fit_each_call, reading_session

TASK = ("Write an academic warning entry for each student whose score dropped, into the log "
        "bucket the department uses.")
TOOLS = [{"type": "function", "function": {"name": "list_log_sinks",
                                           "parameters": {"type": "object"}}}]


def focus_of(task: str) -> frozenset[str]:
    return task_focus([{"role": "user", "content": task}])


def block(text: str) -> str:
    return orjson.dumps({"type": "text", "text": text, "annotations": None}).decode()


def sinks(n: int, named: int) -> str:
    """A listing of `n` log sinks, one a line with its destination; sink `named` is the one
    whose name carries the task's words."""
    lines = [f"Found {n} log sinks:"]
    for i in range(n):
        name = f"sink_{i:02d}_academic_warnings" if i == named else f"sink_{i:02d}_alerts"
        lines += [f"- {name}",
                  f"  Destination: logging.example.com/projects/p1/buckets/store-{i:02d}",
                  f'  Filter: severity="CRITICAL" AND resource.type="global" AND n={i}']
    return "\n".join(lines)


def test_focus_parts_reads_a_names_segments_and_words() -> None:
    focus = focus_of(TASK)
    assert focus_hits("critical_academic_warnings", focus) == 0  # one term no task states
    assert focus_parts("critical_academic_warnings", focus) == 1  # academic
    assert focus_parts("sink_27_academic_warning", focus) == 2  # academic, warning
    assert focus_parts("mcptester0606/Annoy-PyEdu-Rs-Raw",
                       focus_of("License the Annoy-PyEdu-Rs-Raw dataset.")) == 1
    assert focus_parts("_pages/publications.html",
                       focus_of("Add the paper to the publications page.")) == 1
    assert focus_parts("sink_03_alerts", focus) == 0
    assert focus_parts("academic", frozenset()) == 0


def test_a_masked_listing_names_the_record_the_task_names_first() -> None:
    focus = focus_of(TASK)
    text = block(sinks(30, named=27))
    got = kept_fields(text, focus, names=True)
    assert "sink_27_academic_warnings" in got  # past the bound when taken in order
    assert got.index("sink_27_academic_warnings") < got.index("sink_00_alerts")
    assert "sink_29_alerts" not in got  # the bound still cuts the rest
    # links keep their place: a listing of links whose paths all name the task's folder
    links = block("\n".join(f"- https://example.com/academic/page-{i:02d}" for i in range(40)))
    assert kept_fields(links, focus, names=True)[0].endswith("/page-00")


async def test_an_aged_listing_masked_by_the_engine_keeps_the_sink_the_task_names(
    engine: ContextEngine,
) -> None:
    messages = reading_session(TASK, [block(sinks(30, named=27))] + [block(
        "\n".join(f"Student {k}-{j} scored within the usual range this term."
                  for j in range(20))) for k in range(1, 36)], "list_log_sinks")
    fits = await fit_each_call(engine, messages, TOOLS, "t-fparts", "focus-parts")
    sent = fits[-1].body["messages"]
    first = next(m["content"] for m in sent if m.get("tool_call_id") == "call_000")
    assert first.startswith("[ctxgate: omitted ")  # masked whole
    assert "sink_27_academic_warnings" in first
    assert len(first) < len(messages[3]["content"]) // 2
    assert all(drops_add_up(fit) for fit in fits)  # the drop log still adds up


def test_a_records_line_names_the_file_the_task_names_first() -> None:
    files = [{"type": "file", "name": f"{page}.html", "path": f"_pages/{page}.html",
              "size": 900 + i, "sha": f"{i:040x}",
              "html_url": f"https://github.com/u/site/blob/main/_pages/{page}.html"}
             for i, page in enumerate(
                 "publications" if i == 30 else f"topic-{i:02d}" for i in range(40))]
    text = block(orjson.dumps(files).decode())
    task = "Add the new paper to the publications page of the site."
    records = next(line for line in summarize(text, "tool_result", focus=focus_of(task))
                   .splitlines() if line.startswith("[records: "))
    assert records.startswith("[records: publications.html; _pages/publications.html; ")
    plain = next(line for line in summarize(text, "tool_result", focus=focus_of("Fix it."))
                 .splitlines() if line.startswith("[records: "))
    assert "_pages/publications.html" not in plain


def test_a_url_in_the_task_makes_no_link_name_the_task() -> None:
    """A task statement holding a URL: its scheme, `www` and top-level domain are not task
    terms, so the listing's links (every one of them `https://…`) do not all rank as naming
    the task and fill the records line before the path that carries the task's words."""
    task = ("Add the new paper to the publications page of my site "
            "https://www.example.com/site (repo https://github.com/u/site).")
    focus = focus_of(task)
    assert not {"https", "http", "www", "com"} & focus
    assert {"publications", "www.example.com/site", "github.com/u/site"} <= focus
    assert focus_hits("see https://github.com/u/other/blob/main/a.html", focus) == 0
    files = [{"type": "file", "name": f"{page}.html", "path": f"_pages/{page}.html",
              "size": 900 + i, "sha": f"{i:040x}",
              "html_url": f"https://github.com/u/site/blob/main/_pages/{page}.html"}
             for i, page in enumerate(
                 "publications" if i == 30 else f"topic-{i:02d}" for i in range(40))]
    text = block(orjson.dumps(files).decode())
    records = next(line for line in summarize(text, "tool_result", focus=focus)
                   .splitlines() if line.startswith("[records: "))
    assert "_pages/publications.html" in records
