"""A digest says what encoded data is and how long (`encoded.describe`) and lists none of its
pieces: a 13,420-character base64 video's digest listed 664 characters of base64 fragments
as `[omitted text mentions: …]` (the value extractor cuts a run at `+` and `=`). Decided by
structure, never by a list of words: an order id, a UUID, a hex hash, a path and a long
Title-Case name stay values."""

from __future__ import annotations

import base64
import random

from gateway.context.encoded import describe, looks_encoded
from gateway.context.engine import ContextEngine
from gateway.context.summarize import summarize
from tests.context.sessions import drops_add_up, fit_each_call, reading_session


def blob(n: int, seed: int = 7) -> str:
    """`n` bytes of made-up binary data, base64-encoded on one line."""
    rng = random.Random(seed)
    return base64.b64encode(bytes(rng.randrange(256) for _ in range(n))).decode()


VIDEO = blob(10_000)
IDS = ["ORD-2024-88412", "3f2504e0-4f89-11d3-9a0c-0305e82c3301", "src/media/clip_reader.py"]


def video_result() -> str:
    return (f"[Binary file: sample_video.mp4 (video/mp4)]\nBase64: {VIDEO}\n"
            f"order {IDS[0]} upload {IDS[1]} written by {IDS[2]}")


def pieces(text: str) -> list[str]:
    """The values of `text`'s value list (its last line)."""
    listed = text.splitlines()[-1]
    assert listed.startswith("[omitted text mentions:")
    return listed.removeprefix("[omitted text mentions:").rstrip("]").split()


def test_a_base64_run_is_said_not_listed_and_real_ids_stay() -> None:
    out = summarize(video_result(), "tool_result", 3)
    assert len(out) < 300  # main: 800 characters, most of them base64 pieces
    assert not any(v in VIDEO for v in pieces(out) if len(v) > 6)
    assert all(v in out for v in IDS)
    kept = summarize(video_result(), "tool_result", 1)  # a digest that keeps the line
    assert f"Base64: [base64 data, {len(VIDEO):,} chars]" in kept and VIDEO[:40] not in kept


def test_structure_decides_not_words() -> None:
    assert looks_encoded(VIDEO)
    assert looks_encoded(base64.urlsafe_b64encode(bytes(range(256)) * 2).decode())
    assert not looks_encoded("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" * 2)
    assert not looks_encoded("C7F10C9630187955A702E71739240C35D448C7149C796EC2E34A3F8E516C2E52" * 2)
    assert not looks_encoded("-".join(["Quarterly", "Revenue", "Report", "Final", "Version"] * 5))
    assert not looks_encoded("getUserAccountSettingsForOrganizationMemberWithRoleAndPermission"
                             "sIncludingInheritedDefaultsV2")
    text = "see /var/data/reports/quarterly_revenue_report_2024_final_v2/summary.csv and " + (
        "3f2504e0-4f89-11d3-9a0c-0305e82c3301 " * 4)
    assert describe(text) == text


def test_wrapped_base64_and_data_uris_are_said_too() -> None:
    payload = base64.encodebytes(bytes(range(256)) * 3 + b"x").decode()  # 76-char lines, padded
    escaped = "certificate-data:\\n" + payload.replace("\n", "\\n") + "done"
    chars = len(payload) - payload.count("\n")
    assert describe(escaped) == f"certificate-data:\\n[base64 data, {chars:,} chars]\\ndone"
    uri = f'<img src="data:image/png;base64,{VIDEO[:400]}"> logo'
    assert describe(uri) == '<img src="data:image/png;base64,[base64 data, 400 chars]"> logo'
    url = f"https://shop.example/filter/{VIDEO[:200]}=/page"  # a URL's segment: not touched
    assert describe(url) == url


async def test_an_old_base64_result_is_digested_to_what_it_is(engine: ContextEngine) -> None:
    tools = [{"type": "function", "function": {"name": "read_file",
                                                "parameters": {"type": "object"}}}]
    notes = [f"notes {k}: the clip is {k + 3} seconds long." for k in range(12)]
    results = [video_result(), *notes]
    messages = reading_session("Describe the video and its notes.", results, "read_file",
                               say="Next.", closing="Reading it.")
    fits = await fit_each_call(engine, messages, tools, "t-b64", "b64")
    out = str(next(m["content"] for m in fits[-1].body["messages"]
                   if m.get("tool_call_id") == "call_000"))
    assert len(out) < 300 and IDS[0] in out
    assert not any(v in VIDEO for v in out.replace("[base64 data,", "").split() if len(v) > 6)
    assert all(drops_add_up(fit) for fit in fits)
