"""ironmem for LlamaIndex (llama-index-core 0.14): a chat memory, a tool spec and a memory block.

Install with ``pip install "ironmem[llama-index]"``.

Example:
    >>> import tempfile
    >>> from ironmem import MemoryManager
    >>> from ironmem.adapters.llama_index import IronMemory
    >>> memory = IronMemory.from_defaults(manager=MemoryManager(home=tempfile.mkdtemp()), session_id="s1")
    >>> [tool.metadata.name for tool in memory.tools()]
    ['memory', 'session_search']
"""

from __future__ import annotations

try:
    import llama_index.core  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "ironmem.adapters.llama_index needs llama-index-core: pip install 'ironmem[llama-index]'"
    ) from exc

from .block import SnapshotMemoryBlock
from .memory import IronMemory, RecallPolicy
from .tools import IronMemoryToolSpec, SchemaToolMetadata, memory_tools

__all__ = [
    "IronMemory",
    "IronMemoryToolSpec",
    "RecallPolicy",
    "SchemaToolMetadata",
    "SnapshotMemoryBlock",
    "memory_tools",
]
