"""What an aged output's digest keeps of the commands a config holds (`"start": "bun run
src/index.ts"`): the shortest one that names a file, whole, as the agent runs it many calls
later, where the value list carried its words one at a time (OpenCode's `package.json` read,
digested 14 calls before the agent ran its `start` script; bench/README.md, "Session 76,
oc76"). A file read again lists each once: the re-read's digest leaves out a command an
earlier text the model reads still carries, and lists the next shortest — the real engine
on the embedded Redis, the shipped configuration."""

from __future__ import annotations

from gateway.context.engine import ContextEngine
from gateway.context.summarize import summarize
from tests.context.sessions import drops_add_up, fit_each_call, order_page, reading_session

TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
TASK = "Add a health route to the core service and check that it starts."
START = "bun run src/index.ts"
LINES = [
    "{",
    '  "name": "shop-core",',
    '  "version": "0.1.0",',
    '  "private": true,',
    '  "description": "Shop core service (Bun + Elysia)",',
    '  "module": "src/index.ts",',
    '  "type": "module",',
    '  "scripts": {',
    '    "generate": "bun ../scripts/proto_codegen_core.sh.ts",',
    '    "dev": "bun run --watch src/index.ts",',
    f'    "start": "{START}"',
    "  },",
    '  "dependencies": {',
    '    "adze": "^2.3.0",',
    '    "elysia": "^1.2.25",',
    '    "elysia-protobuf": "github:example/elysia-protobuf#master"',
    "  },",
    '  "devDependencies": {',
    '    "bun-types": "latest",',
    '    "ts-proto": "^2.11.2"',
    "  }",
    "}",
]


def package_read() -> str:
    """A file read as a coding agent's tool prints it: its path, then numbered lines."""
    body = "\n".join(f"{n}: {line}" for n, line in enumerate(LINES, 1))
    return (f"<path>/home/u/shop/core/package.json</path>\n<type>file</type>\n<content>{body}\n\n"
            f"(End of file - total {len(LINES)} lines)\n</content>")


def test_a_digest_lists_the_shortest_quoted_command_whole() -> None:
    digest = summarize(package_read(), "tool_result", 3)
    assert f"[omitted commands: {START} (+2 more)]" in digest
    assert "--watch src/index.ts" not in digest  # the longer variant: past COMMAND_CHARS
    # one a text before it carries is not listed again: the next shortest is
    again = summarize(package_read(), "tool_result", 3, said=lambda text: text == START)
    assert "[omitted commands: bun run --watch src/index.ts (+1 more)]" in again
    assert START not in again
    assert "omitted commands" not in summarize(order_page(0), "tool_result", 3)


async def test_a_re_read_file_lists_its_command_once(engine: ContextEngine) -> None:
    """The first read's digest lists the command; the re-read's, aged behind it, does not."""
    results = [package_read(), package_read().replace("0.1.0", "0.1.1")]
    messages = reading_session(TASK, results + [order_page(k) for k in range(2, 36)], "read")
    fits = await fit_each_call(engine, messages, TOOLS, "t-quoted", "quoted-commands")
    assert all(drops_add_up(fit) for fit in fits)

    def sent(call: str) -> list[str]:
        return [next(m["content"] for m in fit.body["messages"] if m.get("tool_call_id") == call)
                for fit in fits if any(m.get("tool_call_id") == call for m in fit.body["messages"])]

    first = [text for text in sent("call_000") if "omitted commands" in text]
    assert first, "the first read was digested with its command"
    assert all(f"[omitted commands: {START} (+2 more)]" in text for text in first)
    again = [text for text in sent("call_001") if text != results[1]]
    assert again, "the re-read aged"
    assert all(START not in text for text in again)
