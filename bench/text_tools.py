"""Where the text-tool detection fires: per corpus, the calls whose request
`classify.is_text_tool_request` takes for an agent whose tools are text (a user turn answers
a call the assistant turn before it wrote in prose), and of those the ones without API tools
or tool history (the only calls whose aging the detection changes).

    python -m bench.text_tools --corpora ../shared/corpora [--corpora /tmp/tau2 ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.corpora import CORPUS_NAMES, extra_jsonl, load
from gateway.context.classify import is_agent_request, is_text_tool_request


def scan(root: Path, name: str) -> tuple[int, int, int, int]:
    """(sessions, calls, calls it fires on, of those without API tools or tool history)."""
    sessions = load(name, root)
    calls = fires = alone = 0
    for session in sessions:
        messages = session.messages
        for k, msg in enumerate(messages):
            if msg.get("role") != "assistant":
                continue
            calls += 1
            body = {"messages": messages[:k], "tools": session.tools or []}
            if is_text_tool_request(body):
                fires += 1
                alone += not is_agent_request(body)
    return len(sessions), calls, fires, alone


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", type=Path, action="append", required=True)
    args = parser.parse_args(argv)
    print("| corpus | sessions | calls | text-tool calls | of them without API tools |")
    print("|---|---|---|---|---|")
    for root in args.corpora:
        names = [n for n in CORPUS_NAMES if (root / n).exists() or n == "synthetic"
                 ] if (root / "swe-agent").exists() else []
        for name in [*names, *extra_jsonl(root)]:
            n, calls, fires, alone = scan(root, name)
            print(f"| {name} | {n} | {calls} | {fires} | {alone} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
