"""The multi-user scenario both adapters run (issue 35, item 1): two users, two threads each, agent notes
(``target="memory"``) and user facts written, then past chats searched and recalled. Plain data, no framework."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ironmem import MemoryManager

#: Words that only ever appear in one user's conversations and memory.
PRIVATE = {"ada": ("kayak", "Heron"), "bob": ("violin", "Osprey")}


@dataclass(frozen=True)
class Turn:
    user: str
    thread: str
    text: str


def facts(user: str) -> tuple[str, str]:
    """(user fact, agent note) that ``user``'s first thread writes."""
    return {
        "ada": ("Owns a red kayak", "Project Heron ships in June"),
        "bob": ("Owns an old violin", "Project Osprey ships in May"),
    }[user]


TURNS = [
    Turn("ada", "ada-1", "I own a red kayak. Note for the team: Project Heron ships in June."),
    Turn("bob", "bob-1", "I own an old violin. Note for the team: Project Osprey ships in May."),
    Turn("ada", "ada-1", "When does my project ship, and which boat do I own?"),
    Turn("bob", "bob-1", "When does my project ship, and which instrument do I own?"),
    Turn("ada", "ada-2", "What ships soon? Search our past chats for the project."),
    Turn("bob", "bob-2", "What ships soon? Search our past chats for the project."),
    Turn("ada", "ada-2", "Anything about instruments, boats or projects shipping?"),
    Turn("bob", "bob-2", "Anything about instruments, boats or projects shipping?"),
]


def other(user: str) -> str:
    return "bob" if user == "ada" else "ada"


def shares_agent_notes(manager: MemoryManager) -> bool:
    """True while the core still gives users one shared MEMORY.md by default (before issue 35 item 1's default)."""
    return manager.scopes_for(f"probe-{uuid.uuid4().hex[:6]}")["memory"] == ""
