"""ironmem: persistent memory for LLM agents that keeps the provider's prompt cache warm.

Three rules: one external provider beside the built-in one; recalled memory only inside a ``<memory-context>``
fence; a system-prompt snapshot frozen for the whole session.

Example:
    >>> import tempfile
    >>> from ironmem import MemoryManager
    >>> with MemoryManager(home=tempfile.mkdtemp()) as manager:
    ...     session = manager.start_session("s1")
    ...     _ = session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Name: Ada"})
    ...     "Name: Ada" in manager.start_session("s2").system_prompt_block()
    True
"""

# The runtime: the three rules and the plug-in contract. What the rules save (token counts, the prefix-cache
# simulator, prices, the usage meter) is in ironmem.analysis.
from .core.builtin import BuiltinMemoryProvider
from .core.config import load_config, manager_from_config
from .core.errors import (
    BuiltinProviderError,
    ConfigError,
    EncodingUnavailableError,
    IronMemError,
    MemoryFileError,
    MemoryWriteError,
    ProviderConflictError,
)
from .core.fence import FENCE_CLOSE, FENCE_OPEN, SYSTEM_NOTE, fence, sanitize
from .core.isolation import ProviderHealth
from .core.manager import MemoryManager
from .core.provider import MemoryProvider, ToolSchema
from .core.recall import Recall, RecallItem
from .core.security import Finding, ScanResult, redact_secrets, scan
from .core.session import Session
from .core.snapshot import Snapshot

__version__ = "0.1.0"

__all__ = [
    # runtime
    "MemoryManager",
    "Session",
    "Recall",
    "RecallItem",
    "Snapshot",
    "MemoryProvider",
    "ToolSchema",
    "BuiltinMemoryProvider",
    "ProviderHealth",
    "FENCE_OPEN",
    "FENCE_CLOSE",
    "SYSTEM_NOTE",
    "fence",
    "sanitize",
    "scan",
    "Finding",
    "ScanResult",
    "redact_secrets",
    "load_config",
    "manager_from_config",
    # errors
    "IronMemError",
    "BuiltinProviderError",
    "ConfigError",
    "EncodingUnavailableError",
    "MemoryFileError",
    "MemoryWriteError",
    "ProviderConflictError",
]
