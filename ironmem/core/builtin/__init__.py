"""The built-in provider: MEMORY.md / USER.md in the Hermes format, their tools, and SQLite FTS5 search."""

from .index import SearchHit, SearchIndex
from .provider import BuiltinMemoryProvider
from .store import ENTRY_DELIMITER, MemoryFile, format_usage, parse_entries, render_entries
from .tools import MEMORY_TOOL, SEARCH_TOOL

__all__ = [
    "BuiltinMemoryProvider",
    "ENTRY_DELIMITER",
    "MEMORY_TOOL",
    "MemoryFile",
    "SEARCH_TOOL",
    "SearchHit",
    "SearchIndex",
    "format_usage",
    "parse_entries",
    "render_entries",
]
