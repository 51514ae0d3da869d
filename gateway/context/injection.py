"""The playbook seam: the ACE playbook supplies a block; the engine pins it into the system
prompt (appended to the first system/developer message, or a new system message first)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class InjectedBlock:
    text: str  # the whole delimited block, same bytes for every call of the session
    bullet_ids: list[str]
    tokens: int


class PlaybookSource(Protocol):
    async def block_for_session(
        self, tenant: str, task_class: str, session_id: str, query: str, cap_tokens: int
    ) -> InjectedBlock | None: ...

    def pinned_block(self, pin: bytes) -> InjectedBlock | None:
        """The block a session was pinned to, from the pin loaded with the session."""
        ...


def inject_block(
    messages: list[Mapping[str, Any]], block: InjectedBlock
) -> list[Mapping[str, Any]]:
    """A new message list with the block in the system prompt; `messages` is not modified."""
    for i, msg in enumerate(messages):
        if msg.get("role") not in ("system", "developer"):
            continue
        content = msg.get("content")
        if isinstance(content, str):
            new_content: Any = f"{content}\n\n{block.text}" if content else block.text
        elif isinstance(content, list):
            new_content = [*content, {"type": "text", "text": block.text}]
        else:
            new_content = block.text
        return [*messages[:i], {**msg, "content": new_content}, *messages[i + 1 :]]
    return [{"role": "system", "content": block.text}, *messages]
