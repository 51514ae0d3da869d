"""A capped fields line lists a document's key/value fields (the options, questions, dates
an agent copies) before its bare section titles (`summarize.fields`; bench/README.md,
"Toolathlon queues' recall, part nineteen"): a Markdown form whose `### N. Title`
headings come first used to fill the line with titles and leave its options out."""

from __future__ import annotations

import orjson

from gateway.context.summarize import fields, summarize

SECTIONS = [
    ("Overall Satisfaction Rating", "Please rate your overall shopping experience.",
     "Excellent, Good, Fair, Poor"),
    ("Product Quality Evaluation", "Was the product as described?",
     "Yes exactly, Mostly, Not at all"),
    ("Delivery Service Evaluation", "How fast was our delivery?",
     "Same day, Next day, Later"),
    ("Customer Service Experience Evaluation", "How was customer service?",
     "Very helpful, Helpful, Unhelpful"),
    ("Willingness to Recommend", "Would you recommend our store?",
     "Very willing, Might, Unwilling"),
]
FORM = "\n".join([
    "# Customer Feedback Questionnaire", "", "## Required Questions Section", "",
    *(line for k, (title, question, options) in enumerate(SECTIONS, 1) for line in (
        f"### {k}. {title}", f"- **Question:** {question}", f"- **Options:** {options}", "")),
    "## Questionnaire Settings Section", "- **Theme color:** Simple white",
    "Promotion Details Below:",
    "Final line of the questionnaire requirements.",
])
TITLES = [title for title, _, _ in SECTIONS]


def block(text: str) -> str:
    return orjson.dumps({"type": "text", "text": text}).decode()


def test_headings_are_listed_after_the_other_fields() -> None:
    got = fields(FORM)
    last_value = max(got.index(options) for _, _, options in SECTIONS)
    assert all(got.index(title) > last_value for title in TITLES)
    assert got.index("Promotion Details Below:") > got.index("Simple white")
    # a `- Key: value` line is no section title: its value keeps its place
    assert got.index("Simple white") < got.index("Required Questions Section")


def test_a_capped_line_keeps_the_options() -> None:
    out = summarize(block(FORM), "tool_result", 3)
    line = next(x for x in out.splitlines() if x.startswith("[omitted fields:"))
    assert "more)]" in line  # the line is capped
    for _, question, options in SECTIONS[:3]:  # what the line's 240 characters hold
        assert question in line and options in line
    assert not any(title in line for title in TITLES)
