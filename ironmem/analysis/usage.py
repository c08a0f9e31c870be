"""Usage meter: the cached-token counts providers really reported, collected from framework responses.

:class:`UsageMeter` reads, by duck typing (no framework import):

- LangChain ``AIMessage`` / ``AIMessageChunk`` (or its ``usage_metadata`` dict): ``input_tokens`` (all input,
  cached included), ``input_token_details.cache_read`` and ``cache_creation``; Anthropic models may report writes
  as ``ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens`` (langchain-anthropic then sets
  ``cache_creation`` to 0 to avoid double counting); OpenAI's ``priority`` and ``flex`` service tiers prefix the
  keys (``priority_cache_read``, ``flex_cache_creation``).
- LlamaIndex ``ChatResponse`` / ``CompletionResponse``: the provider's raw response in ``.raw``.
- Raw provider usage, as dicts or SDK objects: OpenAI Chat Completions (``prompt_tokens``,
  ``prompt_tokens_details.cached_tokens``, ``cache_write_tokens``; OpenAI-compatible local servers use this
  shape too), OpenAI Responses (``input_tokens``,
  ``input_tokens_details.cached_tokens``), Anthropic Messages (``input_tokens`` excludes cached tokens,
  ``cache_read_input_tokens``, ``cache_creation_input_tokens``, ``cache_creation.ephemeral_5m_input_tokens`` /
  ``ephemeral_1h_input_tokens``), DeepSeek (``prompt_cache_hit_tokens``) and Gemini (``cached_content_token_count``).

Not every server reports cached tokens. ``llama-cpp-python`` (``Llama.create_chat_completion`` and its
OpenAI-compatible ``llama_cpp.server``, 0.3.x) returns only ``prompt_tokens``, ``completion_tokens`` and
``total_tokens``, although its KV cache re-uses the common prefix of consecutive requests. A record whose usage
carries no cache field at all has ``cache_reported=False`` and :attr:`UsageMeter.cache_unreported` counts them, so
a report can say "not reported" instead of a misleading 0% hit rate. ironmem's in-process local model
(:mod:`ironmem.testing.local_model`) does report them: it measures what the engine evaluated.

Example:
    >>> meter = UsageMeter()
    >>> record = meter.add({"input_tokens": 1200, "output_tokens": 50, "total_tokens": 1250,
    ...                     "input_token_details": {"cache_read": 1024}})
    >>> record.cache_read, meter.cached_share
    (1024, 0.8533333333333334)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["UsageMeter", "UsageRecord", "parse_usage"]


@dataclass(frozen=True)
class UsageRecord:
    """One response's input usage, normalized. ``input_tokens`` counts ALL input tokens (cached included).

    ``cache_write`` is the total written to the cache; ``cache_write_5m`` / ``cache_write_1h`` split it when the
    provider says which TTL was used.
    """

    input_tokens: int
    output_tokens: int
    cache_read: int
    cache_write: int
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    source: str = ""  # "langchain", "openai", "openai-responses", "anthropic", "deepseek", "gemini"
    service_tier: str = ""
    #: False when the usage carried no cached-token field at all (the provider does not report its cache).
    cache_reported: bool = True

    @property
    def uncached_input_tokens(self) -> int:
        return max(0, self.input_tokens - self.cache_read)

    @property
    def cached_share(self) -> float:
        return self.cache_read / self.input_tokens if self.input_tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _get(obj: Any, key: str) -> Any:
    """``obj[key]`` for mappings, ``obj.key`` otherwise; None when missing."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _int(value: Any) -> int:
    if value is None or isinstance(value, bool):
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _as_mapping(obj: Any) -> Mapping[str, Any] | None:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj
    dump = getattr(obj, "model_dump", None)  # pydantic v2 SDK objects
    if callable(dump):
        try:
            data = dump()
        except Exception:
            data = None
        if isinstance(data, Mapping):
            return data
    data = getattr(obj, "__dict__", None)
    return data if isinstance(data, Mapping) else None


def _from_langchain(usage: Mapping[str, Any]) -> UsageRecord:
    details = _as_mapping(usage.get("input_token_details")) or {}
    tier = ""
    read = write = 0
    for key, value in details.items():
        if key == "cache_read" or key.endswith("_cache_read"):
            read += _int(value)
            if key != "cache_read" and not tier:
                tier = key[: -len("_cache_read")]
        elif key == "cache_creation" or key.endswith("_cache_creation"):
            write += _int(value)
    w5 = _int(details.get("ephemeral_5m_input_tokens"))
    w1 = _int(details.get("ephemeral_1h_input_tokens"))
    reported = any(
        key in ("cache_read", "cache_creation") or key.endswith(("_cache_read", "_cache_creation"))
        or key.startswith("ephemeral_")
        for key in details
    )
    # langchain-anthropic zeroes cache_creation when the TTL split is present; take the larger to be safe with
    # hand-built dicts that fill both.
    write = max(write, w5 + w1)
    return UsageRecord(
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cache_read=read,
        cache_write=write,
        cache_write_5m=w5,
        cache_write_1h=w1,
        source="langchain",
        service_tier=tier,
        cache_reported=reported,
    )


def _from_anthropic(usage: Mapping[str, Any]) -> UsageRecord:
    read = _int(usage.get("cache_read_input_tokens"))
    creation = _as_mapping(usage.get("cache_creation")) or {}
    w5 = _int(creation.get("ephemeral_5m_input_tokens"))
    w1 = _int(creation.get("ephemeral_1h_input_tokens"))
    write = max(_int(usage.get("cache_creation_input_tokens")), w5 + w1)
    return UsageRecord(
        input_tokens=_int(usage.get("input_tokens")) + read + write,  # Anthropic's input_tokens excludes cache
        output_tokens=_int(usage.get("output_tokens")),
        cache_read=read,
        cache_write=write,
        cache_write_5m=w5,
        cache_write_1h=w1,
        source="anthropic",
        service_tier=str(usage.get("service_tier") or ""),
        cache_reported=bool(set(usage) & {"cache_read_input_tokens", "cache_creation_input_tokens", "cache_creation"}),
    )


def _from_openai_chat(usage: Mapping[str, Any]) -> UsageRecord:
    details = _as_mapping(usage.get("prompt_tokens_details")) or {}
    read = _int(details.get("cached_tokens"))
    source = "openai"
    reported = details.get("cached_tokens") is not None
    if not read and usage.get("prompt_cache_hit_tokens") is not None:  # DeepSeek
        read, source, reported = _int(usage.get("prompt_cache_hit_tokens")), "deepseek", True
    return UsageRecord(
        input_tokens=_int(usage.get("prompt_tokens")),
        output_tokens=_int(usage.get("completion_tokens")),
        cache_read=read,
        cache_write=_int(details.get("cache_write_tokens")),
        source=source,
        cache_reported=reported,
    )


def _from_openai_responses(usage: Mapping[str, Any]) -> UsageRecord:
    details = _as_mapping(usage.get("input_tokens_details")) or {}
    return UsageRecord(
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cache_read=_int(details.get("cached_tokens")),
        cache_write=_int(details.get("cache_write_tokens")),
        source="openai-responses",
        cache_reported=details.get("cached_tokens") is not None,
    )


def _from_gemini(usage: Mapping[str, Any]) -> UsageRecord:
    def pick(*keys: str) -> int:
        for key in keys:
            if usage.get(key) is not None:
                return _int(usage.get(key))
        return 0

    return UsageRecord(
        input_tokens=pick("prompt_token_count", "promptTokenCount"),
        output_tokens=pick("candidates_token_count", "candidatesTokenCount"),
        cache_read=pick("cached_content_token_count", "cachedContentTokenCount"),
        cache_write=0,
        source="gemini",
        cache_reported=bool(set(usage) & {"cached_content_token_count", "cachedContentTokenCount"}),
    )


def _parse_usage_mapping(usage: Mapping[str, Any]) -> UsageRecord | None:
    keys = set(usage)
    if "input_token_details" in keys or ("total_tokens" in keys and "input_tokens" in keys
                                         and not keys & {"cache_read_input_tokens", "cache_creation_input_tokens",
                                                         "input_tokens_details"}):
        return _from_langchain(usage)
    if keys & {"cache_read_input_tokens", "cache_creation_input_tokens", "cache_creation"}:
        return _from_anthropic(usage)
    if "prompt_tokens" in keys:
        return _from_openai_chat(usage)
    if "input_tokens_details" in keys:
        return _from_openai_responses(usage)
    if keys & {"prompt_token_count", "promptTokenCount", "cached_content_token_count", "cachedContentTokenCount"}:
        return _from_gemini(usage)
    if "input_tokens" in keys:  # Anthropic usage without any cache field
        return _from_anthropic(usage)
    return None


def parse_usage(obj: Any) -> UsageRecord | None:
    """Normalize the usage of one response (see the module docs for the shapes). None if none is found."""
    if obj is None:
        return None
    # LangChain AIMessage / AIMessageChunk
    if not isinstance(obj, Mapping) and hasattr(obj, "usage_metadata"):
        mapping = _as_mapping(obj.usage_metadata)
        if mapping:
            return _from_langchain(mapping)
        # no standard usage: fall back to the provider's raw usage in response_metadata
        meta = _as_mapping(getattr(obj, "response_metadata", None)) or {}
        for key in ("usage", "token_usage"):
            inner = _as_mapping(meta.get(key))
            if inner:
                return _parse_usage_mapping(inner)
        return None
    # LlamaIndex ChatResponse / CompletionResponse: the provider's raw response
    if not isinstance(obj, Mapping) and hasattr(obj, "raw"):
        record = parse_usage(obj.raw)
        if record is not None:
            return record
        extra = _as_mapping(getattr(obj, "additional_kwargs", None))
        return _parse_usage_mapping(extra) if extra else None
    mapping = _as_mapping(obj)
    if mapping is None:
        return None
    # a whole response (dict or SDK object) carrying usage
    for key in ("usage", "usage_metadata", "usageMetadata"):
        inner = _as_mapping(mapping.get(key))
        if inner:
            record = _parse_usage_mapping(inner)
            if record is not None:
                return record
    return _parse_usage_mapping(mapping)


@dataclass
class UsageMeter:
    """Collects usage from responses and sums it.

    :meth:`add` takes a LangChain ``AIMessage``, a LlamaIndex response, a raw provider response or its usage
    (dicts or SDK objects). Responses without usage are counted in ``skipped``.

    Example:
        >>> meter = UsageMeter()
        >>> _ = meter.add({"usage": {"input_tokens": 10, "cache_read_input_tokens": 2000,
        ...                          "cache_creation_input_tokens": 300, "output_tokens": 5}})
        >>> meter.input_tokens, meter.cache_read, meter.cache_write
        (2310, 2000, 300)
    """

    records: list[UsageRecord] = field(default_factory=list)
    skipped: int = 0

    def add(self, response: Any) -> UsageRecord | None:
        """Record one response's usage; returns the record (None if the response carried no usage)."""
        record = response if isinstance(response, UsageRecord) else parse_usage(response)
        if record is None:
            self.skipped += 1
            return None
        self.records.append(record)
        return record

    def extend(self, responses: Any) -> None:
        for response in responses:
            self.add(response)

    @property
    def requests(self) -> int:
        return len(self.records)

    @property
    def input_tokens(self) -> int:
        return sum(r.input_tokens for r in self.records)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.records)

    @property
    def cache_read(self) -> int:
        return sum(r.cache_read for r in self.records)

    @property
    def cache_write(self) -> int:
        return sum(r.cache_write for r in self.records)

    @property
    def cached_share(self) -> float:
        """Cached input tokens / all input tokens."""
        total = self.input_tokens
        return self.cache_read / total if total else 0.0

    @property
    def cache_unreported(self) -> int:
        """Responses whose usage had no cached-token field (their cache_read of 0 means "unknown", not "miss")."""
        return sum(1 for r in self.records if not r.cache_reported)

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "skipped": self.skipped,
            "cache_unreported": self.cache_unreported,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "cache_write_5m": sum(r.cache_write_5m for r in self.records),
            "cache_write_1h": sum(r.cache_write_1h for r in self.records),
            "cached_share": self.cached_share,
        }

    def reset(self) -> None:
        self.records.clear()
        self.skipped = 0
