"""UsageMeter on real framework and SDK objects (no network) and on plain dicts."""

from __future__ import annotations

import pytest

from ironmem.analysis.usage import UsageMeter, UsageRecord, parse_usage

anthropic_types = pytest.importorskip("anthropic.types")
openai_types = pytest.importorskip("openai.types")


def anthropic_usage(**kw):
    from anthropic.types import CacheCreation, Usage

    five, hour = kw.pop("five", 0), kw.pop("hour", 0)
    creation = CacheCreation(ephemeral_5m_input_tokens=five, ephemeral_1h_input_tokens=hour)
    return Usage(cache_creation=creation, **kw)


# -- LangChain ---------------------------------------------------------------------------------------
def test_langchain_anthropic_message_with_ttl_split() -> None:
    from langchain_anthropic.chat_models import _create_usage_metadata
    from langchain_core.messages import AIMessage

    raw = anthropic_usage(input_tokens=12, output_tokens=30, cache_read_input_tokens=2048,
                          cache_creation_input_tokens=500, five=400, hour=100)
    message = AIMessage(content="ok", usage_metadata=_create_usage_metadata(raw))
    assert message.usage_metadata["input_token_details"]["cache_creation"] == 0  # langchain moved it to the split
    record = UsageMeter().add(message)
    assert record == UsageRecord(input_tokens=12 + 2048 + 500, output_tokens=30, cache_read=2048, cache_write=500,
                                 cache_write_5m=400, cache_write_1h=100, source="langchain")


def test_langchain_openai_tier_prefixed_keys() -> None:
    from langchain_core.messages import AIMessage

    _create_usage_metadata = pytest.importorskip("langchain_openai.chat_models.base")._create_usage_metadata
    usage = {"prompt_tokens": 3000, "completion_tokens": 20, "total_tokens": 3020,
             "prompt_tokens_details": {"cached_tokens": 2816}}
    for tier in ("priority", "flex", None):
        record = parse_usage(AIMessage(content="", usage_metadata=_create_usage_metadata(usage, service_tier=tier)))
        assert (record.input_tokens, record.cache_read, record.cache_write) == (3000, 2816, 0)
        assert record.service_tier == (tier or "")


def test_langchain_plain_dict_and_chunk() -> None:
    from langchain_core.messages import AIMessageChunk

    usage = {"input_tokens": 1200, "output_tokens": 5, "total_tokens": 1205,
             "input_token_details": {"cache_read": 1024, "cache_creation": 100}}
    assert parse_usage(usage) == parse_usage(AIMessageChunk(content="", usage_metadata=usage))
    assert parse_usage(usage).cache_write == 100


def test_langchain_message_without_usage_metadata_falls_back_to_response_metadata() -> None:
    from langchain_core.messages import AIMessage

    message = AIMessage(content="", response_metadata={"usage": {"input_tokens": 5, "output_tokens": 1,
                                                                  "cache_read_input_tokens": 1500}})
    assert parse_usage(message).cache_read == 1500
    assert parse_usage(AIMessage(content="no usage")) is None


# -- LlamaIndex and raw SDK objects ------------------------------------------------------------------
def test_llamaindex_response_with_openai_raw_object() -> None:
    from llama_index.core.base.llms.types import ChatMessage, ChatResponse
    from openai.types import CompletionUsage
    from openai.types.chat import ChatCompletion
    from openai.types.completion_usage import PromptTokensDetails

    completion = ChatCompletion(
        id="c1", choices=[], created=0, model="gpt-4o", object="chat.completion",
        usage=CompletionUsage(prompt_tokens=2100, completion_tokens=40, total_tokens=2140,
                              prompt_tokens_details=PromptTokensDetails(cached_tokens=1920)),
    )
    response = ChatResponse(message=ChatMessage(role="assistant", content="hi"), raw=completion)
    record = parse_usage(response)
    assert (record.source, record.input_tokens, record.cache_read) == ("openai", 2100, 1920)
    as_dict = ChatResponse(message=ChatMessage(role="assistant", content="hi"), raw=completion.model_dump())
    assert parse_usage(as_dict) == record


def test_llamaindex_response_with_anthropic_raw_message() -> None:
    from anthropic.types import Message
    from llama_index.core.base.llms.types import ChatMessage, ChatResponse

    message = Message(id="m1", content=[], model="claude-sonnet-4-5", role="assistant", stop_reason="end_turn",
                      stop_sequence=None, type="message",
                      usage=anthropic_usage(input_tokens=20, output_tokens=9, cache_read_input_tokens=3000,
                                            cache_creation_input_tokens=700, five=700))
    record = parse_usage(ChatResponse(message=ChatMessage(role="assistant", content="x"), raw=message))
    assert (record.source, record.input_tokens, record.cache_read, record.cache_write) == ("anthropic", 3720, 3000, 700)
    assert record.cache_write_5m == 700
    assert parse_usage(message) == record  # the SDK object on its own
    assert parse_usage(message.usage) == record


def test_raw_dicts_of_each_provider() -> None:
    openai_chat = {"prompt_tokens": 1500, "completion_tokens": 3,
                   "prompt_tokens_details": {"cached_tokens": 1280, "cache_write_tokens": 200}}
    assert parse_usage(openai_chat).cache_write == 200
    responses = {"input_tokens": 1500, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 1152}}
    assert parse_usage(responses).source == "openai-responses"
    assert parse_usage(responses).cache_read == 1152
    deepseek = {"prompt_tokens": 500, "completion_tokens": 1, "prompt_cache_hit_tokens": 448,
                "prompt_cache_miss_tokens": 52}
    assert (parse_usage(deepseek).source, parse_usage(deepseek).cache_read) == ("deepseek", 448)
    gemini = {"usageMetadata": {"promptTokenCount": 5000, "cachedContentTokenCount": 4096,
                                "candidatesTokenCount": 12}}
    assert (parse_usage(gemini).source, parse_usage(gemini).cache_read) == ("gemini", 4096)
    anthropic_plain = {"input_tokens": 900, "output_tokens": 4}  # no cache fields at all
    assert (parse_usage(anthropic_plain).input_tokens, parse_usage(anthropic_plain).cache_read) == (900, 0)
    assert parse_usage({"nothing": 1}) is None
    assert parse_usage(None) is None


def test_meter_totals() -> None:
    meter = UsageMeter()
    meter.add({"input_tokens": 1000, "output_tokens": 10, "total_tokens": 1010})
    meter.add({"input_tokens": 2000, "output_tokens": 10, "total_tokens": 2010,
               "input_token_details": {"cache_read": 1024}})
    meter.add({"usage": {"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 1500,
                         "cache_creation_input_tokens": 300}})
    meter.add("a response without usage")
    assert (meter.requests, meter.skipped) == (3, 1)
    assert meter.input_tokens == 1000 + 2000 + 1810
    assert meter.cache_read == 1024 + 1500
    assert meter.cache_write == 300
    assert meter.cached_share == pytest.approx(2524 / 4810)
    data = meter.to_dict()
    assert data["cache_read"] == 2524 and data["requests"] == 3
    meter.reset()
    assert meter.requests == 0 and meter.cached_share == 0.0
