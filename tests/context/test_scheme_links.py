"""A digest keeps a link of any scheme whole (`summarize._LINK`), not only `http(s)://`: an
app's or a browser's page (`chrome://apps`), a local file (`file:///…`), a bucket
(`s3://…`) or a host (`ssh://…`) is what the agent opens or types next. Before, an aged turn's
prose digest split `chrome://apps` into two plain words and listed neither (gemini-cli tune:
two such links lost)."""

from __future__ import annotations

from gateway.context.summarize import summarize

LINKS = ("chrome://apps", "helium://apps", "file:///home/u/site/index.html",
         "s3://backups-2026/db/latest.tar", "ssh://deploy@host.example:2222/srv/app")


def _turn() -> str:
    return ("I installed the launcher and pinned the two browsers to the dock.\n"
            f"To see the web apps open {LINKS[0]} in Chrome, or {LINKS[1]} in Helium; "
            f"the preview page is {LINKS[2]}. The dump went to {LINKS[3]} and the "
            f"repository is reachable over {LINKS[4]}.\n"
            + "Both browsers keep their profiles apart, and the launcher reads them at "
              "start; the next step is to restart the session and check the icons.\n" * 6)


def test_an_aged_turns_digest_keeps_a_link_of_any_scheme_whole() -> None:
    out = summarize(_turn(), "assistant", 3)
    listed = out.splitlines()[-1]
    assert listed.startswith("[omitted text mentions:")
    for link in LINKS:
        assert link in out, link


def test_a_link_the_digest_keeps_is_not_listed_again() -> None:
    text = f"Open {LINKS[0]} to check.\n" + "The launcher reads the profiles at start.\n" * 8
    out = summarize(text, "assistant", 3)
    assert out.count(LINKS[0]) == 1
