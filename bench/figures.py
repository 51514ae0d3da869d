"""Figures of the multi-corpus replay, from the per-call records of `bench/corpus_run.py`.

- late reduction: mean over late calls of the per-call reduction (yardstick characters);
- recall all / late: mean over (late) calls that have needed values;
- cost saved at a cache rate: 1 − Σ billed(method) / Σ billed(no gateway) over all calls, a
  call billing its serialized characters with those that repeat the previous call's forwarded
  serialization from the start at the rate (no gateway enjoys the same rule for its own);
- budget mode: forwarded tokens / the call's tokens (the engine's count), *in band* = within
  [budget − 10 points, budget]; recall over calls with needed values, a refusal counting 0;
- masking at a recall at least ours (`masking_at_recall`): issue 7's targets compare the engine
  with every masking setting *at a recall at least as high*; of the masking settings whose
  recall (all calls) is at least the engine's, the one that saves the most at 0.1 and the one
  with the highest late reduction, each beside the engine, and the setting that saves the
  most at any recall (keep-1 on every corpus so far) with its recall. Keeping every output
  (keep-K for a K above the session's outputs) is no gateway, so `none` is a candidate too:
  recall 100%, nothing saved.
- prefix stable: the share of calls (not a session's first) whose forwarded messages start
  with the previous call's; *client prefix stable* the same of the messages the client sent
  (100% for one growing chat; below where a client recorded per call edited an earlier
  turn), and *prefix stable up to the client's break*: the share of calls whose forwarded
  messages change none of the previous call's forwarded ones before the first message the
  client itself changed (`corpus_run.breaks_before`; equal to prefix stable where the client
  never edits).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from bench.corpus_run import BUDGET_FRACTIONS
from bench.yardstick import billed

CACHE_RATES = (0.1, 0.5)
LONG_SESSION_CALLS = 300


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return 100 * sum(kept) / len(kept) if kept else None


def _pick(records: Sequence[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    return [r for r in records if split == "all" or r["split"] == split]


def method_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    if not records:
        return []
    names = list(records[0]["methods"])
    rows = []
    for name in names:
        figs = [r["methods"][name] for r in records]
        late = [f for r, f in zip(records, figs, strict=True) if r["late"]]
        row: dict[str, Any] = {
            "method": name,
            "late_reduction": _mean(f["reduction"] for f in late),
            "all_reduction": _mean(f["reduction"] for f in figs),
            "recall_all": _mean(f["recall"] for f in figs),
            "recall_late": _mean(f["recall"] for f in late),
        }
        for rate in CACHE_RATES:
            cost = sum(billed(f["size"], f["cached"], rate) for f in figs)
            base = sum(
                billed(r["methods"]["none"]["size"], r["methods"]["none"]["cached"], rate)
                for r in records
            )
            row[f"cost_saved_{rate}"] = 100 * (1 - cost / base) if base else None
        rows.append(row)
    return rows


def engine_row(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    eng = [r["engine"] for r in records]
    extends = [e["extends_previous"] for e in eng if e["extends_previous"] is not None]
    flagged = [e["engine_prefix_stable"] for e in eng if e["engine_prefix_stable"] is not None]
    client = [e.get("client_extends_previous") for e in eng]
    before = [not e["breaks_before_client"] for e in eng
              if e.get("breaks_before_client") is not None]
    by_session: dict[str, list[float]] = {}
    for r in records:
        by_session.setdefault(r["session"], []).append(r["engine"]["ms"])
    long = {s: ms for s, ms in by_session.items() if len(ms) >= LONG_SESSION_CALLS}
    ratios = {s: statistics.mean(ms[-20:]) / statistics.mean(ms[:20]) for s, ms in long.items()}
    # The mean moves with one call: a session's first over-budget step embeds up to 64 texts
    # never embedded (rerank), seconds on a loaded machine, and a process's first call loads
    # what it loads lazily. The medians' ratio is what the other calls did.
    medians = {
        s: statistics.median(ms[-20:]) / statistics.median(ms[:20]) for s, ms in long.items()
    }
    return {
        "calls": len(records),
        "sessions": len(by_session),
        "classes": dict(Counter(e["class"] for e in eng).most_common()),
        "prefix_stable": _mean(extends),
        "client_prefix_stable": _mean(c for c in client if c is not None),
        "prefix_stable_to_client_break": _mean(before),
        "engine_prefix_stable": _mean(flagged),
        "droplog_violations": sum(not e["droplog_ok"] for e in eng),
        "median_ms": statistics.median(e["ms"] for e in eng) if eng else None,
        "long_session_time_ratio": ratios,
        "long_session_time_ratio_median": medians,
    }


def budget_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for fraction in BUDGET_FRACTIONS:
        calls = [r[str(fraction)] for r in records]
        needy = [(r, r[str(fraction)]) for r in records if r["needed"]]
        row: dict[str, Any] = {"budget": f"{round(100 * fraction)}%", "calls": len(calls)}
        for method in ("engine", "plain"):
            sizes = [c[method]["size"] for c in calls]
            row[f"{method}_size"] = _mean(sizes)
            row[f"{method}_in_band"] = _mean(
                float(s is not None and fraction - 0.1 - 1e-9 <= s <= fraction + 1e-9)
                for s in sizes
            )
            row[f"{method}_recall"] = _mean(c[method]["recall"] or 0.0 for _, c in needy)
            row[f"{method}_refusals"] = sum(c[method]["refused"] for c in calls)
        row["engine_refusals_with_slack"] = sum(
            c["engine"]["refused"] and c["slack10"] for c in calls
        )
        row["calls_with_slack"] = sum(c["slack"] for c in calls)
        rows.append(row)
    return rows


def corpus_figures(
    records: Sequence[dict[str, Any]], budget: Sequence[dict[str, Any]], split: str
) -> dict[str, Any]:
    picked = _pick(records, split)
    return {
        "methods": method_rows(picked),
        "engine": engine_row(picked),
        "budget": budget_rows(_pick(budget, split)),
    }


def _masking(row: dict[str, Any]) -> bool:
    return row["method"] == "none" or row["method"].startswith("keep-")


def _best(rows: Sequence[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """The row of the highest `key`; on a tie the first (the settings are ordered by K)."""
    ranked = [r for r in rows if r[key] is not None]
    return max(ranked, key=lambda r: r[key]) if ranked else None


def masking_at_recall(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The engine against the masking settings whose recall is at least its own.

    `rows` are one corpus's and split's `method_rows`. Returns None without an engine row or
    an engine recall (no call with needed values). `by_cost` / `by_late` are the eligible
    setting of the highest cost saved at 0.1 / late reduction (`none` always eligible: it
    keeps everything); `ahead_cost` / `ahead_late` whether the engine is above it (ties
    count as not behind: `>=`); `top_cost` the masking setting of the highest cost saved at
    0.1 at any recall, `top_cost_eligible` whether its recall reaches the engine's.
    """
    engine = next((r for r in rows if r["method"] == "ctxgate"), None)
    if engine is None or engine["recall_all"] is None:
        return None
    masks = [r for r in rows if _masking(r) and r["recall_all"] is not None]
    eligible = [r for r in masks if r["recall_all"] >= engine["recall_all"]]
    by_cost = _best(eligible, "cost_saved_0.1")
    by_late = _best(eligible, "late_reduction")
    top = _best(masks, "cost_saved_0.1")

    def ahead(best: dict[str, Any] | None, key: str) -> bool | None:
        if best is None or engine[key] is None:
            return None
        return bool(engine[key] >= best[key])

    return {
        "engine": engine,
        "eligible": [r["method"] for r in eligible],
        "by_cost": by_cost,
        "by_late": by_late,
        "ahead_cost": ahead(by_cost, "cost_saved_0.1"),
        "ahead_late": ahead(by_late, "late_reduction"),
        "top_cost": top,
        "top_cost_eligible": top is not None and top in eligible,
    }


def _cell(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def print_tables(report: dict[str, dict[str, Any]], splits: Sequence[str]) -> None:
    """Markdown tables: yardstick per corpus and method, engine checks, budget mode."""
    for split in splits:
        print(f"\n### Yardstick ({split}): late reduction, recall, cost with prompt caching")
        head = ("corpus", "method", "late reduction", "recall all", "recall late",
                "cost saved @0.1", "cost saved @0.5", "reduction all")
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for corpus, figs in report.items():
            for row in figs[split]["methods"]:
                name = f"**{row['method']}**" if row["method"] == "ctxgate" else row["method"]
                cells = [corpus, name] + [
                    _cell(row[k]) + "%"
                    for k in ("late_reduction", "recall_all", "recall_late",
                              "cost_saved_0.1", "cost_saved_0.5", "all_reduction")
                ]
                print("| " + " | ".join(cells) + " |")
    print("\n### Masking at a recall at least ours: the best setting by cost @0.1 and by late "
          "reduction among those whose recall (all calls) is at least ctxgate's (`none` = keep "
          "everything); late / recall all / cost saved @0.1")
    head = ("corpus", "split", "ctxgate", "best by cost @0.1 at recall ≥ ours",
            "ctxgate not behind on cost", "best by late at recall ≥ ours",
            "ctxgate not behind on late", "highest cost @0.1 at any recall")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))

    def trio(row: dict[str, Any] | None, named: bool = True) -> str:
        if row is None:
            return "–"
        figs = " / ".join(
            _cell(row[k]) for k in ("late_reduction", "recall_all", "cost_saved_0.1"))
        return f"{row['method']}: {figs}" if named else figs

    for corpus, figs in report.items():
        for split in splits:
            m = masking_at_recall(figs[split]["methods"])
            if m is None:
                continue
            yes = {True: "yes", False: "**no**", None: "–"}
            cells = [corpus, split, trio(m["engine"], named=False), trio(m["by_cost"]),
                     yes[m["ahead_cost"]], trio(m["by_late"]), yes[m["ahead_late"]],
                     trio(m["top_cost"]) + ("" if m["top_cost_eligible"]
                                            else " (recall below ours)")]
            print("| " + " | ".join(str(c) for c in cells) + " |")
    print("\n### Engine checks")
    head = ("corpus", "split", "sessions", "calls", "prefix stable",
            "client prefix stable (engine up to the client's break)", "drop-log violations",
            "median ms", "last-20/first-20 time (300+ calls), mean (median)", "classes")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for corpus, figs in report.items():
        for split in splits:
            e = figs[split]["engine"]
            ratios = ", ".join(
                f"{v:.2f}x ({m:.2f}x)"
                for v, m in zip(e["long_session_time_ratio"].values(),
                                e["long_session_time_ratio_median"].values(), strict=True)
            )
            classes = ", ".join(f"{k} {v}" for k, v in e["classes"].items())
            cells = [corpus, split, e["sessions"], e["calls"], _cell(e["prefix_stable"]) + "%",
                     f"{_cell(e.get('client_prefix_stable'))}% "
                     f"({_cell(e.get('prefix_stable_to_client_break'))}%)",
                     e["droplog_violations"], _cell(e["median_ms"], 2), ratios or "–", classes]
            print("| " + " | ".join(str(c) for c in cells) + " |")
    print("\n### Budget mode: each sampled call as a new session's first call")
    head = ("corpus", "split", "budget", "calls", "size engine", "in band engine",
            "size plain", "in band plain", "recall engine", "recall plain",
            "refusals engine (with 10-pt slack)", "refusals plain", "calls with slack")
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for corpus, figs in report.items():
        for split in splits:
            for b in figs[split]["budget"]:
                cells = [corpus, split, b["budget"], b["calls"],
                         _cell(b["engine_size"]) + "%", _cell(b["engine_in_band"]) + "%",
                         _cell(b["plain_size"]) + "%", _cell(b["plain_in_band"]) + "%",
                         _cell(b["engine_recall"]) + "%", _cell(b["plain_recall"]) + "%",
                         f"{b['engine_refusals']} ({b['engine_refusals_with_slack']})",
                         b["plain_refusals"], b["calls_with_slack"]]
                print("| " + " | ".join(str(c) for c in cells) + " |")
