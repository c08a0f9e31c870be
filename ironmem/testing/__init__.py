"""Test helpers shipped with ironmem: scripted models for offline agent loops, faulty providers, the provider
contract suite, and deterministic embedders.

The framework-specific helpers load on first use, so ``import ironmem.testing`` needs neither framework:

- ``ScriptedChatModel`` (LangChain, from :mod:`ironmem.testing.langchain`)
- ``ScriptedFunctionCallingLLM`` (LlamaIndex, from :mod:`ironmem.testing.llama_index`)

Hosted services offline: ``StubServer`` answers an SDK's real HTTP requests on loopback and validates them (and its
answers) against the service's OpenAPI description (:mod:`ironmem.testing.openapi_stub`); ``HonchoFake`` and
``SupermemoryFake`` are in-memory services to serve (:mod:`ironmem.testing.hosted_fakes`).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from ..core.errors import ScriptExhaustedError as ScriptExhaustedError

_LAZY = {
    "ScriptedChatModel": "langchain",
    "ScriptedRequest": "langchain",
    "ScriptedToolCall": "llama_index",
    "tool_call": "llama_index",
    "ScriptedFunctionCallingLLM": "llama_index",
    "ProviderContract": "provider_contract",
    "ContractViolation": "provider_contract",
    "check_provider": "provider_contract",
    "RaisingProvider": "faulty",
    "HangingProvider": "faulty",
    "InjectingProvider": "faulty",
    "SlowSyncProvider": "faulty",
    "HashingEmbedder": "embeddings",
    "HashingEmbeddings": "embeddings",
    "OpenAPIDescription": "openapi_stub",
    "StubServer": "openapi_stub",
    "StubResponse": "openapi_stub",
    "Fault": "openapi_stub",
    "HonchoFake": "hosted_fakes",
    "SupermemoryFake": "hosted_fakes",
}

__all__ = sorted([*_LAZY, "ScriptExhaustedError"])


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ironmem.testing' has no attribute {name!r}")
    return getattr(import_module(f"ironmem.testing.{module}"), name)
