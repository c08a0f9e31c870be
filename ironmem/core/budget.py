"""The token budget of the external provider's tool schemas (rule 1 counts tokens, not tools).

Every tool schema is sent with every request, so what matters is its size in tokens. An external provider may
join only if the tools it exposes cost at most :data:`DEFAULT_TOOL_BUDGET` tokens (``memory.tool_budget`` in
config, ``MemoryManager(tool_budget=...)``); config chooses which of its tools to expose (``tools: [...]`` in the
provider's section, ``add_provider(p, tools=[...])``).

How a tool is counted: its OpenAI function-tool form (:meth:`ToolSchema.to_openai`, the larger of the two wire
formats) serialized as compact JSON, the way the ``openai`` SDK sends it. The decision counts it with
:func:`~ironmem.core.token_estimate.estimate_tokens`, which needs no encoding file, so the same providers are
accepted and refused on every machine, online or air-gapped (tiktoken's files are downloaded on first use, so an
exact count would depend on the network). The exact count in tiktoken's ``o200k_base`` is reported beside it
(``exact_used``) when tiktoken can load the encoding from its local cache (``TIKTOKEN_CACHE_DIR``); the core never
downloads anything. On tool JSON the estimate is about 15% above o200k_base.

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
import os
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .provider import ToolSchema
from .token_estimate import BYTES_PER_TOKEN, estimate_tokens

__all__ = [
    "DEFAULT_TOOL_BUDGET",
    "ESTIMATE_METHOD",
    "TOOL_BUDGET_ENCODING",
    "ToolBudget",
    "ToolCost",
    "exact_tool_tokens",
    "measure_tools",
    "select_tools",
    "tool_tokens",
]

log = logging.getLogger(__name__)

#: Tokens the external provider's exposed tool schemas may cost together (OpenAI format, counted with the
#: offline estimate): room for five or six concise tools (a search tool with a query and a limit costs about 100).
#: The built-in ``memory`` and ``session_search`` tools (about 500) are not counted. Shipped providers: mem0 3 tools
#: 270, hindsight 2-3 tools 209-287, openviking 5 tools 415 (in o200k_base: 228, 180-248, 366).
DEFAULT_TOOL_BUDGET = 600
#: The encoding of the exact figure reported beside the estimate.
TOOL_BUDGET_ENCODING = "o200k_base"
#: How the decision counts (see :mod:`ironmem.core.token_estimate`).
ESTIMATE_METHOD = f"the offline estimate (a token per started {BYTES_PER_TOKEN} UTF-8 bytes of each word, number or symbol run)"

_ENCODING_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
_lock = threading.Lock()
_loaded: dict[str, tuple[Any | None, str]] = {}


def _cache_file() -> str:
    cache = (os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
             or os.path.join(tempfile.gettempdir(), "data-gym-cache"))
    return os.path.join(cache, hashlib.sha1(_ENCODING_URL.encode()).hexdigest())


def _cached_encoding() -> tuple[Any | None, str]:
    """The o200k_base encoding if tiktoken can load it without a download; else (None, why).

    Loaded once per cache file, under a lock (threads that ask at the same time wait for one load).
    """
    cached = _cache_file()
    with _lock:
        if cached in _loaded:
            return _loaded[cached]
        result: tuple[Any | None, str]
        if not os.path.isfile(cached):
            result = (None, f"tiktoken encoding {TOOL_BUDGET_ENCODING} is not in the local cache ({cached}); "
                            "set TIKTOKEN_CACHE_DIR to a folder holding it for the exact figure")
        else:
            try:
                import tiktoken

                result = (tiktoken.get_encoding(TOOL_BUDGET_ENCODING), "")
            except Exception as exc:  # ImportError, a corrupt cache file, ...
                result = (None, f"tiktoken could not load {TOOL_BUDGET_ENCODING}: {type(exc).__name__}: {exc}")
        _loaded[cached] = result
        return result


def _wire(schema: ToolSchema) -> str:
    return json.dumps(schema.to_openai(), ensure_ascii=False, separators=(",", ":"))


def tool_tokens(schemas: Sequence[ToolSchema]) -> list[int]:
    """The budget's count of each schema (the offline estimate: the same on every machine).

    Example:
        >>> counts = tool_tokens([ToolSchema("a", "b")])
        >>> len(counts), counts[0] > 0
        (1, True)
    """
    return [estimate_tokens(_wire(s)) for s in schemas]


def exact_tool_tokens(schemas: Sequence[ToolSchema]) -> tuple[list[int] | None, str]:
    """Each schema in tiktoken's ``o200k_base`` when the encoding is in the local cache, else ``(None, why)``.

    A report only: the budget decides on :func:`tool_tokens`. Never downloads.
    """
    encoding, why = _cached_encoding()
    if encoding is None:
        return None, why
    return [len(encoding.encode(_wire(s), disallowed_special=())) for s in schemas], ""


@dataclass(frozen=True)
class ToolCost:
    """One exposed tool and its cost in tokens (``exact``: in o200k_base, None when the encoding is not at hand)."""

    name: str
    tokens: int
    exact: int | None = None


@dataclass(frozen=True)
class ToolBudget:
    """What the external provider's exposed tools cost against the budget.

    ``used`` (what decides) is the offline estimate; ``exact_used`` is the o200k_base count when the encoding is
    in tiktoken's local cache (``None`` otherwise, with the reason in ``exact_note``).

    Example:
        >>> b = ToolBudget(limit=100, used=40, tools=(ToolCost("x", 40),), method="m")
        >>> b.fits, b.to_dict()["used"]
        (True, 40)
    """

    limit: int
    used: int
    tools: tuple[ToolCost, ...]
    method: str
    exact_used: int | None = None
    exact_note: str = ""
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
            "o200k_base": self.exact_used,
        }
        if self.exact_used is None and self.exact_note:
            out["o200k_base_note"] = self.exact_note
        if self.hidden:
            out["hidden"] = list(self.hidden)
        return out

    def describe(self) -> str:
        parts = ", ".join(f"{t.name} {t.tokens:,}" for t in self.tools) or "no tools"
        exact = f"; {self.exact_used:,} in o200k_base" if self.exact_used is not None else ""
        return f"{self.used:,} of {self.limit:,} tokens ({parts}; {self.method}{exact})"


def measure_tools(schemas: Sequence[ToolSchema], limit: int, hidden: Sequence[str] = ()) -> ToolBudget:
    """The budget report for ``schemas`` against ``limit`` tokens."""
    counts = tool_tokens(schemas)
    exact, note = exact_tool_tokens(schemas)
    tools = tuple(ToolCost(s.name, n, exact[i] if exact is not None else None)
                  for i, (s, n) in enumerate(zip(schemas, counts)))
    return ToolBudget(limit=limit, used=sum(counts), tools=tools, method=ESTIMATE_METHOD,
                      exact_used=sum(exact) if exact is not None else None, exact_note=note, hidden=tuple(hidden))


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
