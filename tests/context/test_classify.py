"""Classifier accuracy on a labelled set of requests (rules, then nearest example)."""

from __future__ import annotations

from typing import Any

from gateway.context.classify import Classifier
from gateway.context.engine import ContextEngine


def _req(user: str, system: str = "", tools: tuple[str, ...] = ()) -> dict[str, Any]:
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}
    ]
    body: dict[str, Any] = {"messages": msgs}
    if tools:
        body["tools"] = [{"type": "function", "function": {"name": t}} for t in tools]
    return body


LABELLED: list[tuple[dict[str, Any], str]] = [
    (
        _req("Resolve the failing import in tests", tools=("bash", "str_replace_editor")),
        "coding_agent",
    ),
    (_req("Please add type hints to utils.py and run mypy"), "coding_agent"),
    (
        _req("The function parse_date crashes on empty strings; write a fix and a unit test"),
        "coding_agent",
    ),
    (_req("go", system="You are an autonomous programmer working in a repo"), "coding_agent"),
    (_req("Based on the passages provided, who founded the company?"), "retrieval_qa"),
    (_req("What does the policy document say about parental leave?"), "retrieval_qa"),
    (_req("q", tools=("vector_search",)), "retrieval_qa"),
    (
        _req(
            "Answer using the context. Context: [1] ... Question: what year?",
            system="Answer only using the provided context.",
        ),
        "retrieval_qa",
    ),
    (_req("Show me monthly active users by country for 2023 as a SQL query"), "data_sql"),
    (_req("Which product category had the biggest drop in sales week over week?"), "data_sql"),
    (_req("x", tools=("run_sql",)), "data_sql"),
    (
        _req("count rows", system="You are a data analyst with access to a Postgres warehouse."),
        "data_sql",
    ),
    (
        _req("The GitHub Actions build fails at the linking step with undefined reference errors"),
        "log_investigation",
    ),
    (
        _req("Why did the nightly job crash? Here is the stack trace from the logs."),
        "log_investigation",
    ),
    (_req("y", tools=("fetch_logs",)), "log_investigation"),
    (
        _req("Gradle build failed: Could not resolve dependency; what is wrong?"),
        "log_investigation",
    ),
    (
        _req("Restart the checkout service in staging and tell the team in Slack when done"),
        "ops_workflow",
    ),
    (
        _req("Create a Jira ticket for the outage and schedule a postmortem for Friday"),
        "ops_workflow",
    ),
    (_req("z", tools=("create_ticket", "send_email")), "ops_workflow"),
    (
        _req("Provision a new database user for the analytics team and rotate the old credentials"),
        "ops_workflow",
    ),
    (_req("Can you suggest a name for my new puppy?"), "plain_chat"),
    (_req("Tell me a fun fact about octopuses"), "plain_chat"),
    (_req("hello", system="You are a helpful assistant."), "plain_chat"),
    (_req("Write a short poem about autumn leaves"), "plain_chat"),
]


async def test_classifier_accuracy(engine: ContextEngine, capsys: Any) -> None:
    classifier: Classifier = engine.classifier
    right = 0
    misses = []
    for body, label in LABELLED:
        got, how = await classifier.classify(body)
        right += got == label
        if got != label:
            misses.append((body["messages"][-1]["content"][:50], label, got, how))
    accuracy = right / len(LABELLED)
    with capsys.disabled():
        print(f"\nclassifier accuracy: {right}/{len(LABELLED)} = {accuracy:.1%}; misses: {misses}")
    assert accuracy >= 0.75


async def test_header_wins_and_class_is_kept_per_session(engine: ContextEngine) -> None:
    from gateway.context.engine import CallContext

    body = _req("Tell me a fun fact about octopuses")
    first = await engine.fit(
        body,
        CallContext("t", "a", {"x-ctxgate-session-id": "keep", "x-ctxgate-task-class": "data_sql"}),
    )
    later = await engine.fit(body, CallContext("t", "b", {"x-ctxgate-session-id": "keep"}))
    assert first.task_class == later.task_class == "data_sql"
