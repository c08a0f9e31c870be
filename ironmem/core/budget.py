"""The token budget of the external provider's tool schemas (rule 1 counts tokens, not tools).

Every tool schema is sent with every request, so what matters is its size in tokens. An external provider may
join only if the tools it exposes cost at most :data:`DEFAULT_TOOL_BUDGET` tokens (``memory.tool_budget`` in
config, ``MemoryManager(tool_budget=...)``); config chooses which of its tools to expose (``tools: [...]`` in the
provider's section, ``add_provider(p, tools=[...])``).

How a tool is counted: its OpenAI function-tool form (:meth:`ToolSchema.to_openai`, the larger of the two wire
formats) serialized as compact JSON, the way the ``openai`` SDK sends it, encoded with tiktoken's ``o200k_base``.
The core never downloads anything: the encoding is used only when tiktoken can load it from its local cache
(``TIKTOKEN_CACHE_DIR``). Otherwise the count is a conservative estimate, :data:`ESTIMATE_BYTES_PER_TOKEN` UTF-8
bytes per token rounded up (tool JSON averages about 4 bytes per o200k token, CJK text about 3), and the budget
says so in its ``method``.

Example:
    >>> from ironmem.core.provider import ToolSchema
    >>> budget = measure_tools([ToolSchema("notes_search", "Search the notes.")], limit=500)
    >>> budget.fits, budget.used > 0
    (True, True)
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .provider import ToolSchema

__all__ = [
    "DEFAULT_TOOL_BUDGET",
    "ESTIMATE_BYTES_PER_TOKEN",
    "TOOL_BUDGET_ENCODING",
    "ToolBudget",
    "ToolCost",
    "measure_tools",
    "select_tools",
    "tool_tokens",
]

log = logging.getLogger(__name__)

#: Tokens the external provider's exposed tool schemas may cost together (o200k_base, OpenAI format): room for
#: five or six concise tools (a search tool with a query and a limit costs about 90). The built-in ``memory`` and
#: ``session_search`` tools (about 430) are not counted. Shipped providers: mem0 3 tools 228, hindsight 2-3 tools
#: 180-248, openviking 5 tools 366; each stays under the budget with the bytes/3 estimate too.
DEFAULT_TOOL_BUDGET = 600
#: The encoding the budget is counted in.
TOOL_BUDGET_ENCODING = "o200k_base"
#: Used when the encoding cannot be loaded: tokens = ceil(UTF-8 bytes / 3), an over-estimate for tool JSON.
ESTIMATE_BYTES_PER_TOKEN = 3

_ENCODING_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
_lock = threading.Lock()
_loaded: dict[str, Any] = {}


def _cached_encoding() -> tuple[Any | None, str]:
    """The o200k_base encoding if tiktoken can load it without a download; else (None, why)."""
    with _lock:
        if "result" in _loaded:
            return _loaded["result"]
        result: tuple[Any | None, str]
        cache = (os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
                 or os.path.join(tempfile.gettempdir(), "data-gym-cache"))
        cached = os.path.join(cache, hashlib.sha1(_ENCODING_URL.encode()).hexdigest())
        if not os.path.isfile(cached):
            result = (None, f"tiktoken encoding {TOOL_BUDGET_ENCODING} is not in the local cache ({cached}); "
                            "set TIKTOKEN_CACHE_DIR to a folder holding it for exact counts")
        else:
            try:
                import tiktoken

                result = (tiktoken.get_encoding(TOOL_BUDGET_ENCODING), "")
            except Exception as exc:  # ImportError, a corrupt cache file, ...
                result = (None, f"tiktoken could not load {TOOL_BUDGET_ENCODING}: {type(exc).__name__}: {exc}")
        _loaded["result"] = result
        return result


def _wire(schema: ToolSchema) -> str:
    return json.dumps(schema.to_openai(), ensure_ascii=False, separators=(",", ":"))


def tool_tokens(schemas: Sequence[ToolSchema]) -> tuple[list[int], str, bool]:
    """Tokens of each schema, the counting method, and whether the counts are exact.

    Example:
        >>> counts, method, exact = tool_tokens([ToolSchema("a", "b")])
        >>> len(counts), counts[0] > 0
        (1, True)
    """
    encoding, why = _cached_encoding()
    if encoding is not None:
        counts = [len(encoding.encode(_wire(s), disallowed_special=())) for s in schemas]
        return counts, f"tiktoken {TOOL_BUDGET_ENCODING}, OpenAI function format", True
    counts = [math.ceil(len(_wire(s).encode("utf-8")) / ESTIMATE_BYTES_PER_TOKEN) for s in schemas]
    return counts, f"estimate: UTF-8 bytes / {ESTIMATE_BYTES_PER_TOKEN}, rounded up ({why})", False


@dataclass(frozen=True)
class ToolCost:
    """One exposed tool and its cost in tokens."""

    name: str
    tokens: int


@dataclass(frozen=True)
class ToolBudget:
    """What the external provider's exposed tools cost against the budget.

    Example:
        >>> b = ToolBudget(limit=100, used=40, tools=(ToolCost("x", 40),), method="m", exact=True)
        >>> b.fits, b.to_dict()["used"]
        (True, 40)
    """

    limit: int
    used: int
    tools: tuple[ToolCost, ...]
    method: str
    exact: bool
    hidden: tuple[str, ...] = ()  # tools the provider offers that config did not expose

    @property
    def fits(self) -> bool:
        return self.used <= self.limit

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "limit": self.limit,
            "used": self.used,
            "fits": self.fits,
            "tools": {t.name: t.tokens for t in self.tools},
            "method": self.method,
            "exact": self.exact,
        }
        if self.hidden:
            out["hidden"] = list(self.hidden)
        return out

    def describe(self) -> str:
        parts = ", ".join(f"{t.name} {t.tokens:,}" for t in self.tools) or "no tools"
        return f"{self.used:,} of {self.limit:,} tokens ({parts}; {self.method})"


def measure_tools(schemas: Sequence[ToolSchema], limit: int, hidden: Sequence[str] = ()) -> ToolBudget:
    """The budget report for ``schemas`` against ``limit`` tokens."""
    counts, method, exact = tool_tokens(schemas)
    tools = tuple(ToolCost(s.name, n) for s, n in zip(schemas, counts))
    return ToolBudget(limit=limit, used=sum(counts), tools=tools, method=method, exact=exact, hidden=tuple(hidden))


def select_tools(schemas: Sequence[ToolSchema], names: Sequence[str] | None, *, provider: str) -> list[ToolSchema]:
    """The schemas named in ``names`` (all when ``None``), in the provider's order.

    Raises ``ValueError`` naming the provider's tools when a name is not one of them.

    Example:
        >>> tools = [ToolSchema("a_search", "s"), ToolSchema("a_add", "w")]
        >>> [s.name for s in select_tools(tools, ["a_add"], provider="a")]
        ['a_add']
    """
    if names is None:
        return list(schemas)
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"tools for provider {provider!r} must be a list of tool names, got {names!r}")
    offered = [s.name for s in schemas]
    unknown = [n for n in names if n not in offered]
    if unknown:
        raise ValueError(
            f"provider {provider!r} has no tool(s) {unknown}; its tools are {offered}. Fix the names in its "
            "'tools' list (an empty list exposes none: recall and sync only)"
        )
    wanted = set(names)
    return [s for s in schemas if s.name in wanted]
