"""What the three rules save: token counts, the prefix-cache simulator and its price table, session replay and the
usage meter. Nothing in the runtime (``ironmem.core``) depends on this package.

Example:
    >>> from ironmem.analysis import PrefixCacheSimulator, VLLMPolicy
    >>> sim = PrefixCacheSimulator(VLLMPolicy(block_size=16))
    >>> _ = sim.request(list(range(64)), at=0.0)
    >>> sim.request(list(range(64)) + [7, 8], at=1.0).cached_tokens
    64
"""

from .cache import (
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
from .tokens import TokenCounter, TokenReport
from .usage import UsageMeter

__all__ = [
    "TokenCounter",
    "TokenReport",
    "PrefixCacheSimulator",
    "CacheOutcome",
    "PRICES",
    "ModelPrice",
    "OpenAIPolicy",
    "AnthropicPolicy",
    "GeminiPolicy",
    "DeepSeekPolicy",
    "VLLMPolicy",
    "UsageMeter",
]
