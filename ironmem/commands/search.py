"""``ironmem search``: full-text search over memory entries and past turns, scoped to one user.

Scoping is the same as the agent's own ``session_search``: without ``--user`` the search covers the shared files
(``MEMORY.md`` and ``USER.md`` in the home) and the turns synced without a user id; ``--user ID`` covers that
user's files (``users/<folder>/``, and the shared ``MEMORY.md`` unless the user has their own) and that user's
turns only. ``--all-users`` is the explicit way to search every user's turns (an operator's view; each hit names
its user).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from .common import HOME_OPTION, TARGET_FILES, CLIError, console, echo_json, manager, opts, visible

if TYPE_CHECKING:  # pragma: no cover
    from ..core.builtin.index import SearchHit
    from ..core.manager import MemoryManager

__all__ = ["register", "scoped_search"]

#: Over-fetching for the default scope stops here (turns of other users are filtered out after ranking).
_MAX_FETCH = 5_000


def _search(memory: MemoryManager, query: str, limit: int, user: str | None, scopes: dict[str, str],
            all_users: bool) -> list[SearchHit]:
    index = memory.builtin.index
    user_filter = None if all_users else user
    if "entry_scopes" in inspect.signature(index.search).parameters:  # a database storage keys entries by scope
        hits: list[SearchHit] = index.search(query, limit=limit, user_id=user_filter, drop_stopwords=False,
                                             entry_scopes=scopes)  # type: ignore[call-arg]
        return hits
    keys = {memory.builtin.index_key(t, scopes[t]): t for t in TARGET_FILES}
    import dataclasses

    found = index.search(query, limit=limit, kinds=(*keys, "turn"), user_id=user_filter, drop_stopwords=False)
    return [dataclasses.replace(h, kind=keys.get(h.kind, h.kind)) for h in found]


def scoped_search(memory: MemoryManager, query: str, *, limit: int = 10, user: str | None = None,
                  all_users: bool = False) -> list[SearchHit]:
    """Entries and turns matching ``query``, best first, in the scope of ``user`` (see the module doc).

    Without ``user`` (and without ``all_users``) turns synced under a user id are left out: ranking runs over
    more candidates until ``limit`` turns without a user id are found or the index has no more.
    """
    scopes = memory.scopes_for(user)
    for target in TARGET_FILES:
        memory.builtin.state(target, scopes[target])  # bring the index in step with the files
    if user is not None or all_users:
        return _search(memory, query, limit, user, scopes, all_users)
    fetch = limit
    while True:
        hits = _search(memory, query, fetch, None, scopes, False)
        kept = [h for h in hits if h.kind != "turn" or h.user_id is None]
        if len(kept) >= limit or len(hits) < fetch or fetch >= _MAX_FETCH:
            return kept[:limit]
        fetch = min(fetch * 4, _MAX_FETCH)


def register(app: typer.Typer) -> None:
    """Add ``ironmem search``."""

    @app.command()
    def search(
        ctx: typer.Context,
        home: str | None = HOME_OPTION,
        query: str = typer.Argument(..., help="Words to look for (any language)."),
        limit: int = typer.Option(10, "--limit", "-n", help="Maximum results."),
        user: str | None = typer.Option(
            None, "--user", "-u", help="Search this user id's files and turns (default: the shared files and "
            "the turns synced without a user id)."
        ),
        all_users: bool = typer.Option(False, "--all-users", help="Search every user's turns (operator view)."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Full-text search over memory entries and past turns, scoped like the agent's `session_search`."""
        options = opts(ctx, home)
        if not query.strip():
            raise CLIError("the search query is empty; give some words to look for")
        if limit < 1:
            raise CLIError(f"--limit must be at least 1, got {limit}")
        if user is not None and all_users:
            raise CLIError("--user and --all-users exclude each other; pass one of them")
        with manager(options) as memory:
            hits = scoped_search(memory, query, limit=limit, user=user, all_users=all_users)
        if as_json:
            payload: dict[str, Any] = {"query": query, "user": user, "all_users": all_users,
                                       "results": [h.to_dict() for h in hits]}
            echo_json(payload)
            return
        out = console()
        if not hits:
            out.print(Text(f"no match for {query!r}"))
            return
        table = Table(title=f"search: {query}", title_justify="left", show_lines=True)
        for column in ("#", "kind", "session", *(("user",) if all_users else ()), "text"):
            table.add_column(column, justify="right" if column == "#" else "left",
                             overflow="fold" if column == "text" else "ellipsis")
        for i, hit in enumerate(hits, start=1):
            extra = (hit.user_id or "",) if all_users else ()
            table.add_row(str(i), hit.kind, hit.session_id or "", *extra, Text(visible(hit.text, 400)))
        out.print(table)
