"""bench.queue_vs_run: each task of a queue is paired with its own run, message for message."""

from bench.corpora import Session
from bench.queue_vs_run import task_runs


def _run(name: str, task: str, output: str) -> Session:
    return Session(f"runs/{name}", [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": task},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"{name}1", "type": "function",
             "function": {"name": "read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": f"{name}1", "content": output},
        {"role": "assistant", "content": "done"},
    ])


def test_each_task_of_a_queue_is_its_run_at_an_offset() -> None:
    a, b = _run("a", "first task", "alpha"), _run("b", "second task", "beta")
    other = _run("c", "first task", "gamma")  # same statement, another run
    queue = Session("runs-queue/a--b-q0", [a.messages[0], *a.messages[1:], *b.messages[1:]])
    pairs = task_runs(queue, [other, b, a])
    assert [(start, end, run.id) for start, end, run in pairs] == [
        (1, 5, "runs/a"), (5, 9, "runs/b")]
    # the queue's message at an index is the run's at that index less the offset
    start, _, run = pairs[1]
    assert queue.messages[start + 2] == run.messages[1 + 2]
