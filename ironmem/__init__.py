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

from .core.builtin import BuiltinMemoryProvider
from .core.cache import (
    PRICES,
    AnthropicPolicy,
    CacheOutcome,
    DeepSeekPolicy,
    GeminiPolicy,
    ModelPrice,
    OpenAIPolicy,
    PrefixCacheSimulator,
    VLLMPolicy,
)
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
from .core.manager import MemoryManager, ProviderHealth, Recall, RecallItem, Session
from .core.provider import MemoryProvider, ToolSchema
from .core.security import Finding, ScanResult, redact_secrets, scan
from .core.snapshot import Snapshot
from .core.tokens import TokenCounter, TokenReport
from .core.usage import UsageMeter

__version__ = "0.1.0"

__all__ = [
    "PRICES",
    "AnthropicPolicy",
    "CacheOutcome",
    "DeepSeekPolicy",
    "GeminiPolicy",
    "ModelPrice",
    "OpenAIPolicy",
    "PrefixCacheSimulator",
    "Snapshot",
    "TokenCounter",
    "TokenReport",
    "UsageMeter",
    "VLLMPolicy",
    "BuiltinMemoryProvider",
    "BuiltinProviderError",
    "ConfigError",
    "EncodingUnavailableError",
    "FENCE_CLOSE",
    "FENCE_OPEN",
    "Finding",
    "IronMemError",
    "MemoryFileError",
    "MemoryManager",
    "MemoryProvider",
    "MemoryWriteError",
    "ProviderConflictError",
    "ProviderHealth",
    "Recall",
    "RecallItem",
    "SYSTEM_NOTE",
    "ScanResult",
    "Session",
    "ToolSchema",
    "fence",
    "load_config",
    "manager_from_config",
    "redact_secrets",
    "sanitize",
    "scan",
]
