"""quoting.keeps_layout: a JSON file's read, or a file's JSON read by an agent that edits by
exact text, goes out as laid out. Such an agent re-types several lines of the file,
indentation included, as the text to replace; minified on arrival (`cluster.arrival_json`)
the read no longer carries them (Gemini CLI's `settings.json` edits). Other files' JSON
read by an agent that never replaced quoted lines, and JSON records, are still minified."""

from __future__ import annotations

import json
import uuid
from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.lines import minified
from gateway.context.quoting import keeps_layout
from gateway.context.session import MemorySessionStore
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.sessions import drops_add_up, fit_agreed

from .conftest import without_credit

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("run_shell_command", "replace", "read_file")]
SYSTEM = "You are an interactive agent working on the user's machine from a terminal."
PACKAGE = ('{\n  "name": "playground",\n  "version": "1.0.0",\n  "scripts": {\n'
           '    "test": "echo \\"Error: no test specified\\" && exit 1"\n  },\n'
           '  "license": "ISC"\n}')
QUOTE = '  "scripts": {\n    "test": "echo \\"Error: no test specified\\" && exit 1"\n  },'
SETTINGS = json.dumps({"ui": {"hideTips": True, "hideBanner": False, "theme": "Default"},
                       "tools": {"autoAccept": True}}, indent=2)


def _call(k: int, name: str, args: dict[str, Any], content: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": "", "tool_calls": [{
                "id": f"c{k}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": content}]


def _session(new_text: str, path: str = "/home/u/.gemini/settings.json"
             ) -> list[dict[str, Any]]:
    """A shell output, a `replace` of two of its lines by `new_text`, then `path`'s JSON."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Add a dev script, then hide the banner in my settings."},
        *_call(0, "run_shell_command", {"command": "npm init -y"}, PACKAGE),
        *_call(1, "replace", {"file_path": "package.json", "old_string": QUOTE,
                              "new_string": new_text}, "Successfully modified package.json."),
        *_call(2, "read_file", {"file_path": path}, SETTINGS),
    ]


def _engine(settings: Settings, embedder: Any, cache: bool) -> ContextEngine:
    return ContextEngine(settings, None, Metrics(), DropLog("/dev/null", "none", None), embedder,
                         sessions=MemorySessionStore(), prefix_cache_size=1024 if cache else 0)


async def _last_call(settings: Settings, embedder: Any, messages: list[dict[str, Any]]) -> Any:
    """Every call through a prefix-cached engine and a full-path one (both forward the same
    bytes); the last one's fitted request."""
    cached, plain = _engine(settings, embedder, True), _engine(settings, embedder, False)
    session = uuid.uuid4().hex
    fitted: Any = None
    for end in range(4, len(messages) + 1, 2):
        body = {"messages": messages[:end], "tools": TOOLS}
        call = CallContext("t-edit", uuid.uuid4().hex, {"x-ctxgate-session-id": session})
        fitted = await fit_agreed(cached, plain, body, call)
        assert drops_add_up(fitted)
    return fitted


EDIT = '  "scripts": {\n    "dev": "vite",\n    "test": "vitest"\n  },'
NOT_AN_EDIT = "module.exports = {};"  # the quote's place taken by nothing of it
NOTEBOOK = "analysis/report.ipynb"  # a file whose read is JSON, not named as JSON


async def test_a_json_files_read_keeps_its_layout(settings: Settings, embedder: Any) -> None:
    messages = _session(NOT_AN_EDIT)
    assert keeps_layout(messages, len(messages) - 1)
    fitted = await _last_call(without_credit(settings), embedder, messages)
    assert fitted.body["messages"][-1]["content"] == SETTINGS


async def test_an_exact_text_editors_json_read_keeps_its_layout(
    settings: Settings, embedder: Any
) -> None:
    messages = _session(EDIT, NOTEBOOK)
    assert keeps_layout(messages, len(messages) - 1)
    fitted = await _last_call(without_credit(settings), embedder, messages)
    assert fitted.body["messages"][-1]["content"] == SETTINGS  # the lines an edit quotes
    assert '    "hideBanner": false,\n    "theme": "Default"' in fitted.body["messages"][-1][
        "content"]


async def test_json_is_minified_when_no_quoted_lines_were_replaced(
    settings: Settings, embedder: Any
) -> None:
    # the quote written whole with nothing of it kept: a copy of a result, not an edit
    messages = _session(NOT_AN_EDIT, NOTEBOOK)
    assert not keeps_layout(messages, len(messages) - 1)
    fitted = await _last_call(without_credit(settings), embedder, messages)
    assert fitted.body["messages"][-1]["content"] == minified(SETTINGS)


def test_only_an_output_answering_a_call_that_names_a_file_keeps_it() -> None:
    messages = _session(EDIT)
    messages[-2]["tool_calls"][0]["function"]["arguments"] = json.dumps(
        {"command": "cat ~/.gemini/settings.json"})  # a command line, not a path
    assert not keeps_layout(messages, len(messages) - 1)
    assert keeps_layout(_session(EDIT), len(messages) - 1)
