"""The built-in provider: MEMORY.md / USER.md in the Hermes format, their tools, and SQLite FTS5 search."""

from .index import SearchHit, SearchIndex
from .provider import BuiltinMemoryProvider
from .store import ENTRY_DELIMITER, MemoryFile, format_usage, parse_entries, render_entries
from .tools import MEMORY_TOOL, SEARCH_TOOL

__all__ = [
    "ENTRY_DELIMITER",
    "MEMORY_TOOL",
    "SEARCH_TOOL",
    "BuiltinMemoryProvider",
    "MemoryFile",
    "SearchHit",
    "SearchIndex",
    "format_usage",
    "parse_entries",
    "render_entries",
]
