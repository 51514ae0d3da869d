"""A digest's value list names a long absolute path whole, leading `/` included
(`summarize._long_path`): a printed Python dict's `'path': '/workspace/…/claim_02.pdf'` is the
file the agent opens next, and the list used to drop any value over 80 characters (and the
leading `/` of every path: `/workspace/dumps/workspace`, a folder an agent lists next, was
named `workspace/dumps/workspace`)."""

from __future__ import annotations

from gateway.context.engine import ContextEngine
from gateway.context.summarize import summarize
from tests.context.sessions import drops_add_up, fit_each_call, reading_session

ROOT = "/workspace/dumps/workspace/extracted"


def claims(n: int = 12) -> str:
    """A script's output: a header, then one printed dict per file, each with a long path."""
    rows = [
        f"  {{'claim_id': 'EXP2024{k:03d}', 'type': 'invoice', 'invoice_num': '{k:02d}', "
        f"'path': '{ROOT}/EXP2024{k:03d}/expense_claim_EXP2024{k:03d}_invoice_{k:02d}.pdf'}}"
        for k in range(1, n + 1)]
    head = "=== STDOUT ===\nTotal PDFs to read: 192\n"
    return head + "\n".join(rows) + "\nTimeout limit: 30 seconds"


PATHS = [f"{ROOT}/EXP2024{k:03d}/expense_claim_EXP2024{k:03d}_invoice_{k:02d}.pdf"
         for k in range(1, 13)]


def test_a_digest_lists_long_absolute_paths_whole() -> None:
    assert all(len(p) > 80 for p in PATHS)
    text = claims()
    out = summarize(text, "tool_result", 3)
    assert len(out) < len(text)
    assert "[omitted text mentions:" in out
    assert f" {PATHS[-1]} " in out  # whole, with its leading `/`


def test_short_absolute_paths_keep_their_slash_and_non_paths_are_listed_as_before() -> None:
    # a path of 80 characters or fewer is listed with its leading `/` when the text writes it
    # so (`_absolute`); a relative one as written; a long value that is not a path of names
    # (a 70-character segment) or a URL's path is still left out
    short = [f"  wrote /srv/data/run_{k:03d}/out_{k:03d}.csv from data/in_{k:03d}.csv"
             for k in range(40)]
    blob = "  token /" + "A" * 70 + "/data/x.bin"
    url = "  see https://www.example.org/" + "/".join(f"section{k:02d}" for k in range(10))
    out = summarize("\n".join([*short[:20], blob, url, *short[20:]]), "tool_result", 3)
    listed = out.splitlines()[-1]
    assert listed.startswith("[omitted text mentions:")
    assert " /srv/data/run_038/out_038.csv " in listed
    # the files the output names by absolute path rank first (`summarize._absolute_files`,
    # session 72's cc72): 40 of them fill the list; a relative one is never given a `/`
    assert " data/in_" not in listed and "/data/in_" not in listed
    relative = summarize("\n".join(line.replace(" /srv/", " srv/") for line in short),
                         "tool_result", 3).splitlines()[-1]
    assert " data/in_038.csv " in relative and "/data/in_" not in relative
    assert "A" * 70 not in listed
    assert "section09" not in listed
    assert "/www.example.org" not in listed


async def test_an_agent_reads_a_file_whose_path_it_saw_long_before(
    engine: ContextEngine,
) -> None:
    tools = [{"type": "function", "function": {"name": "run",
                                                "parameters": {"type": "object"}}}]
    results = [claims()] + [claims().replace("EXP", f"R{k}X") for k in range(1, 14)]
    messages = reading_session("Check every expense claim against its invoices.", results,
                               "run", say="Next.", closing="Reading it.")
    fits = await fit_each_call(engine, messages, tools, "t-paths", "paths")
    last = fits[-1].body["messages"]
    out = str(next(m["content"] for m in last if m.get("tool_call_id") == "call_000"))
    assert len(out) < len(claims())  # digested
    assert any(p in out for p in PATHS)  # paths named whole
    assert all(drops_add_up(fit) for fit in fits)  # the drop log still adds up
