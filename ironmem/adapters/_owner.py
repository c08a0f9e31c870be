"""One conversation, one user: the check both adapters make before continuing a thread or session id.

Framework-free (no LangChain, no LlamaIndex import), so each adapter refuses a reused id the same way.
"""

from __future__ import annotations

from ..core.errors import SessionOwnerError

__all__ = ["check_owner"]


def check_owner(conversation_id: str, owner: str | None, user_id: str | None, *, kind: str = "thread") -> None:
    """Refuse to continue conversation ``conversation_id``, started by ``owner``, as another user ``user_id``.

    ``user_id`` None means "the caller did not say": the conversation continues as its owner. A different user id,
    or a user id on a conversation started without one (the shared files), raises
    :class:`~ironmem.core.errors.SessionOwnerError` before anything is read or written for the caller.

    Example:
        >>> check_owner("t1", "ada", None)  # continues as ada
        >>> check_owner("t1", "ada", "bob")
        Traceback (most recent call last):
        ...
        ironmem.core.errors.SessionOwnerError: thread 't1' was started by user 'ada'; refusing to continue it as user 'bob' (it would read and write the first user's memory). Give each user their own thread ids, e.g. f"{user_id}:{conversation_id}".
    """
    if user_id is not None and user_id != owner:
        started = f"user {owner!r}" if owner is not None else "no user id (the shared memory files)"
        raise SessionOwnerError(
            f"{kind} {conversation_id!r} was started by {started}; refusing to continue it as user {user_id!r} "
            "(it would read and write the first user's memory). Give each user their own "
            f"{kind} ids, e.g. f\"{{user_id}}:{{conversation_id}}\"."
        )
