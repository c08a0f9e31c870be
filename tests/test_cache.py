"""Prefix-cache simulator: hand-computed expectations for every policy."""

from __future__ import annotations

import dataclasses

import pytest

from ironmem.analysis.cache import (
    PRICES,
    AnthropicPolicy,
    DeepSeekPolicy,
    GeminiPolicy,
    ModelPrice,
    OpenAIPolicy,
    PrefixCacheSimulator,
    PriceTable,
    TTFTModel,
    VLLMPolicy,
    theoretical_max_cached,
)


def seq(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def shared(prefix: int, total: int, tail: int = 10_000_000) -> list[int]:
    """``total`` tokens whose first ``prefix`` equal ``seq(prefix)`` and the rest differ."""
    return seq(prefix) + seq(total - prefix, tail)


# -- OpenAI ------------------------------------------------------------------------------------------
def test_openai_caches_in_128_token_steps_from_1024() -> None:
    sim = PrefixCacheSimulator(OpenAIPolicy(model="gpt-4o"))
    assert sim.request(seq(1500), at=0).cached_tokens == 0  # cold
    out = sim.request(shared(1300, 1500), at=10)
    assert out.cached_tokens == 1280  # 1,024 + 2 x 128 <= 1,300
    assert out.uncached_tokens == 220
    assert sim.request(shared(1100, 1200), at=20).cached_tokens == 1024
    assert sim.request(shared(1000, 1200), at=30).cached_tokens == 0  # shared part below 1,024


def test_openai_never_caches_short_prompts() -> None:
    sim = PrefixCacheSimulator(OpenAIPolicy(model="gpt-5"))
    sim.request(seq(1000), at=0)
    assert sim.request(seq(1000), at=1).cached_tokens == 0
    sim.request(seq(1024), at=2)
    assert sim.request(seq(1024), at=3).cached_tokens == 1024


def test_openai_expires_after_inactivity_and_use_refreshes() -> None:
    sim = PrefixCacheSimulator(OpenAIPolicy(model="gpt-4o"))  # 300 s idle TTL
    sim.request(seq(2048), at=0)
    assert sim.request(seq(2048), at=250).cached_tokens == 2048
    assert sim.request(seq(2048), at=500).cached_tokens == 2048  # 250 s after the last use
    assert sim.request(seq(2048), at=801).cached_tokens == 0  # 301 s idle
    long = PrefixCacheSimulator(OpenAIPolicy(model="gpt-4o", retention="24h"))
    long.request(seq(2048), at=0)
    assert long.request(seq(2048), at=3 * 3600).cached_tokens == 2048


@pytest.mark.parametrize(("model", "multiplier", "input_price"), [
    ("gpt-4o", 0.5, 2.50), ("gpt-4.1", 0.25, 2.00), ("gpt-5", 0.1, 1.25), ("gpt-4o-2024-08-06", 0.5, 2.50),
])
def test_openai_cached_discount_per_model(model: str, multiplier: float, input_price: float) -> None:
    sim = PrefixCacheSimulator(OpenAIPolicy(model=model))
    sim.request(seq(2000), at=0)
    out = sim.request(seq(2000), at=1)
    assert out.cached_tokens == 1920
    assert out.cost_usd == pytest.approx((80 + 1920 * multiplier) * input_price / 1e6)
    assert out.cost_without_cache_usd == pytest.approx(2000 * input_price / 1e6)


# -- Anthropic ---------------------------------------------------------------------------------------
def test_anthropic_reads_only_a_prefix_written_at_a_breakpoint() -> None:
    sim = PrefixCacheSimulator(AnthropicPolicy(model="claude-sonnet-4-5"))
    first = sim.request(seq(2000), at=0, breakpoints=[2000])
    assert (first.cached_tokens, first.cache_write_tokens) == (0, 2000)
    # no breakpoint: Anthropic caches nothing, even for an identical prompt
    assert sim.request(seq(2000), at=10).cached_tokens == 0
    # a breakpoint shorter than the written prefix: that shorter prefix was never written -> no read
    shorter = sim.request(seq(2000), at=20, breakpoints=[1500])
    assert (shorter.cached_tokens, shorter.cache_write_tokens) == (0, 1500)
    # the conversation grows: the 2,000-token prefix written earlier is read, the new tail written
    grown = sim.request(seq(2600), at=30, breakpoints=[2600])
    assert (grown.cached_tokens, grown.cache_write_tokens, grown.uncached_tokens) == (2000, 600, 600)
    # a prompt that diverges inside the written prefix reads the longest written prefix it still starts with
    fork = sim.request(shared(1800, 2600), at=40, breakpoints=[2600])
    assert fork.cached_tokens == 1500


def test_anthropic_without_lookback_reads_only_at_exact_breakpoints() -> None:
    sim = PrefixCacheSimulator(AnthropicPolicy(model="claude-sonnet-4-5", lookback=False))
    sim.request(seq(2000), at=0, breakpoints=[2000])
    assert sim.request(seq(2600), at=1, breakpoints=[2600]).cached_tokens == 0
    exact = PrefixCacheSimulator(AnthropicPolicy(model="claude-sonnet-4-5", lookback=False))
    exact.request(seq(2000), at=0, breakpoints=[2000])
    out = exact.request(seq(2600), at=1, breakpoints=[2000, 2600])
    assert (out.cached_tokens, out.cache_write_tokens) == (2000, 600)


def test_anthropic_ttl_expiry_and_refresh() -> None:
    sim = PrefixCacheSimulator(AnthropicPolicy(model="claude-sonnet-4-5", ttl="5m"))
    sim.request(seq(2000), at=0, breakpoints=[2000])
    assert sim.request(seq(2000), at=250, breakpoints=[2000]).cached_tokens == 2000
    assert sim.request(seq(2000), at=500, breakpoints=[2000]).cached_tokens == 2000  # refreshed at 250
    expired = sim.request(seq(2000), at=801, breakpoints=[2000])
    assert (expired.cached_tokens, expired.cache_write_tokens) == (0, 2000)
    hour = PrefixCacheSimulator(AnthropicPolicy(model="claude-sonnet-4-5", ttl="1h"))
    hour.request(seq(2000), at=0, breakpoints=[2000])
    assert hour.request(seq(2000), at=3000, breakpoints=[2000]).cached_tokens == 2000
    assert hour.request(seq(2000), at=6601, breakpoints=[2000]).cached_tokens == 0


def test_anthropic_prices_writes_and_reads() -> None:
    five = PrefixCacheSimulator(AnthropicPolicy(model="claude-sonnet-4-5"))  # $3/MTok
    w = five.request(seq(3000), at=0, breakpoints=[2000])
    assert w.cost_usd == pytest.approx((2000 * 1.25 + 1000) * 3 / 1e6)
    r = five.request(seq(3000), at=1, breakpoints=[2000])
    assert r.cost_usd == pytest.approx((2000 * 0.1 + 1000) * 3 / 1e6)
    hour = PrefixCacheSimulator(AnthropicPolicy(model="claude-sonnet-4-5", ttl="1h"))
    assert hour.request(seq(3000), at=0, breakpoints=[2000]).cost_usd == pytest.approx((2000 * 2 + 1000) * 3 / 1e6)


def test_anthropic_minimum_length_per_model() -> None:
    sonnet = PrefixCacheSimulator(AnthropicPolicy(model="claude-sonnet-4-5"))  # 1,024
    assert sonnet.request(seq(1500), at=0, breakpoints=[1000]).cache_write_tokens == 0
    opus = PrefixCacheSimulator(AnthropicPolicy(model="claude-opus-4-5"))  # 4,096
    assert opus.request(seq(5000), at=0, breakpoints=[3000]).cache_write_tokens == 0
    assert opus.request(seq(5000), at=1, breakpoints=[3000, 4500]).cache_write_tokens == 4500
    assert opus.request(seq(5000), at=2, breakpoints=[4500]).cached_tokens == 4500


def test_anthropic_rejects_more_than_four_breakpoints() -> None:
    sim = PrefixCacheSimulator(AnthropicPolicy())
    sim.request(seq(3000), at=0, breakpoints=[1100, 1500, 2000, 3000])  # four is fine
    with pytest.raises(ValueError, match="at most 4"):
        sim.request(seq(3000), at=1, breakpoints=[1100, 1500, 2000, 2500, 3000])
    with pytest.raises(ValueError, match="outside the prompt"):
        sim.request(seq(3000), at=2, breakpoints=[4000])
    with pytest.raises(ValueError, match="'5m' or '1h'"):
        AnthropicPolicy(ttl="10m")


# -- vLLM --------------------------------------------------------------------------------------------
def test_vllm_caches_only_whole_blocks() -> None:
    sim = PrefixCacheSimulator(VLLMPolicy(block_size=16))
    assert sim.request(seq(40)).cached_tokens == 0
    assert sim.request(seq(40) + [-5, -6]).cached_tokens == 32  # blocks [0,16) and [16,32); 8 shared tokens left over
    assert sim.request(seq(48)).cached_tokens == 32  # all 3 blocks cached, the last is recomputed
    assert sim.request(shared(20, 64)).cached_tokens == 16  # the block hash chains on the parent


def test_vllm_lru_eviction_at_capacity() -> None:
    sim = PrefixCacheSimulator(VLLMPolicy(block_size=16, capacity_blocks=6))
    a, b = seq(65), seq(65, start=1000)  # 4 full blocks each
    sim.request(a)
    sim.request(b)  # 8 blocks > 6: A's two tail blocks (least recently used) are evicted
    assert sim.request(a).cached_tokens == 32  # A's head blocks survive
    tiny = PrefixCacheSimulator(VLLMPolicy(block_size=16, capacity_blocks=4))
    tiny.request(a)
    tiny.request(b)  # evicts all of A
    assert tiny.request(a).cached_tokens == 0
    assert tiny.request(a).cached_tokens == 64


def test_vllm_cost_is_zero_or_a_compute_proxy() -> None:
    free = PrefixCacheSimulator(VLLMPolicy())
    assert free.request(seq(100)).cost_usd == 0
    proxy = PrefixCacheSimulator(VLLMPolicy(compute_cost_per_mtok=1.0))
    proxy.request(seq(100))
    assert proxy.request(seq(100)).cost_usd == pytest.approx(4 / 1e6)  # 96 cached cost 0, 4 recomputed


# -- DeepSeek and Gemini -----------------------------------------------------------------------------
def test_deepseek_caches_in_64_token_units() -> None:
    sim = PrefixCacheSimulator(DeepSeekPolicy())
    sim.request(seq(200), at=0)
    assert sim.request(shared(150, 300), at=1).cached_tokens == 128
    assert sim.request(seq(200), at=2).cached_tokens == 192
    small = PrefixCacheSimulator(DeepSeekPolicy())
    small.request(seq(50), at=0)
    assert small.request(seq(50), at=1).cached_tokens == 0  # under one 64-token unit
    out = sim.request(seq(200), at=3)
    assert out.cost_usd == pytest.approx((8 * 0.27 + 192 * 0.07) / 1e6)


def test_gemini_minimum_then_token_level() -> None:
    sim = PrefixCacheSimulator(GeminiPolicy(model="gemini-2.5-flash"))  # 2,048
    sim.request(seq(2000), at=0)
    assert sim.request(seq(2000), at=1).cached_tokens == 0
    sim.request(seq(3000), at=2)
    assert sim.request(shared(2500, 3000), at=3).cached_tokens == 2500
    assert sim.request(shared(2000, 3000), at=4).cached_tokens == 0


# -- prices, simulator, ceiling ----------------------------------------------------------------------
def test_price_table_is_data_and_overridable() -> None:
    for row in PRICES:
        assert row.as_of and row.source, row.model  # every figure says where it comes from
    cheaper = PRICES.override("openai", "gpt-4o", input_per_mtok=1.0)
    assert cheaper.get("openai", "gpt-4o").input_per_mtok == 1.0
    assert PRICES.get("openai", "gpt-4o").input_per_mtok == 2.50
    assert PRICES.get("openai", "gpt-4o-mini-2024-07-18").model == "gpt-4o-mini"
    with pytest.raises(KeyError, match="price=ModelPrice"):
        PRICES.get("openai", "gpt-9")
    custom = ModelPrice("openai", "gpt-9", 10.0, 0.2, 1024, source="my contract")
    policy = OpenAIPolicy(model="gpt-9", prices=PRICES.with_rows(custom))
    assert policy.price.cached_multiplier == 0.2
    assert OpenAIPolicy(model="anything", price=custom).price is custom
    with pytest.raises(ValueError, match="0..1"):
        ModelPrice("x", "y", 1.0, 1.5, 0)
    assert len(PriceTable([custom])) == 1
    assert dataclasses.asdict(custom) == custom.to_dict()


def test_ttft_estimate_uses_the_documented_constants() -> None:
    ttft = TTFTModel(overhead_s=0.5, prefill_tokens_per_s=1000, cached_tokens_per_s=10_000)
    sim = PrefixCacheSimulator(OpenAIPolicy(model="gpt-4o", ttft=ttft))
    cold = sim.request(seq(2048), at=0)
    warm = sim.request(seq(2048), at=1)
    assert cold.ttft_s == pytest.approx(0.5 + 2.048)
    assert warm.ttft_s == pytest.approx(0.5 + 2048 / 10_000)
    assert warm.ttft_s < cold.ttft_s == cold.ttft_without_cache_s


def test_simulator_checks_its_input_and_sums() -> None:
    sim = PrefixCacheSimulator(OpenAIPolicy())
    sim.request(seq(1500), at=10, breakpoints=[100])  # breakpoints are ignored by automatic caching
    with pytest.raises(ValueError, match="time order"):
        sim.request(seq(10), at=5)
    with pytest.raises(TypeError, match="token ids"):
        sim.request("some text", at=20)  # type: ignore[arg-type]
    sim.request(seq(1500), at=20)
    summary = sim.summary()
    assert (summary.requests, summary.input_tokens, summary.cached_tokens) == (2, 3000, 1408)
    assert summary.cached_share == pytest.approx(1408 / 3000)
    assert 0 < summary.savings < 1
    sim.reset()
    assert sim.request(seq(1500), at=0).cached_tokens == 0
    with pytest.raises(TypeError, match="CachePolicy"):
        PrefixCacheSimulator("openai")  # type: ignore[arg-type]


def test_theoretical_ceiling() -> None:
    requests = [seq(1500), shared(1300, 1500), seq(900), seq(1500, start=5000), seq(1600)]
    assert theoretical_max_cached(requests, OpenAIPolicy()) == [0, 1280, 0, 0, 1408]
    assert theoretical_max_cached(requests, AnthropicPolicy()) == [0, 1300, 0, 0, 1500]
    assert theoretical_max_cached(requests, VLLMPolicy()) == [0, 1296, 896, 0, 1488]
