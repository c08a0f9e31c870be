"""LangChain adapter: agent middleware, tool kit and a classic ``BaseMemory``.

* :class:`IronMemoryMiddleware` - for ``langchain.agents.create_agent`` (the two-line drop-in).
* :class:`IronMemoryToolkit` - the memory tools for any LangChain agent.
* :class:`IronClassicMemory` - legacy ``BaseMemory`` for ``AgentExecutor`` and classic chains
  (needs ``pip install "ironmem[langchain-classic]"``).

Names are imported lazily, so ``IronClassicMemory`` only needs ``langchain-classic`` when it is used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .classic import IronClassicMemory
    from .middleware import IronMemoryMiddleware, IronMemoryState
    from .store import IronStore
    from .toolkit import IronMemoryToolkit, make_memory_tool

__all__ = [
    "IronMemoryMiddleware", "IronMemoryState", "IronMemoryToolkit", "IronClassicMemory", "IronStore", "make_memory_tool",
]

_WHERE = {
    "IronMemoryMiddleware": "middleware",
    "IronMemoryState": "middleware",
    "IronMemoryToolkit": "toolkit",
    "make_memory_tool": "toolkit",
    "IronClassicMemory": "classic",
    "IronStore": "store",
}
_EXTRA = {"classic": "langchain-classic"}


def __getattr__(name: str) -> Any:
    module_name = _WHERE.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = import_module(f".{module_name}", __name__)
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in (
            "langchain", "langchain_core", "langgraph", "langchain_classic",
        ):
            extra = _EXTRA.get(module_name, "langchain")
            raise ImportError(
                f"ironmem.adapters.langchain.{name} needs the {extra!r} extra: pip install \"ironmem[{extra}]\" "
                f"({exc.name} is not installed)"
            ) from exc
        raise
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
