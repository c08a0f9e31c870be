"""The llama.cpp prefix-reuse policy and the usage meter's "cached tokens not reported" flag (no engine needed;
tests/test_real_model.py checks the policy against the live engine)."""

from __future__ import annotations

import pytest

from ironmem.analysis.cache import LlamaCppPolicy, PrefixCacheSimulator, VLLMPolicy, theoretical_max_cached
from ironmem.analysis.usage import UsageMeter, parse_usage


def test_prompt_and_reply_are_reused_but_not_the_last_sampled_token() -> None:
    sim = PrefixCacheSimulator(LlamaCppPolicy())
    prompt = list(range(100))
    first = sim.request(prompt, output_tokens=[500, 501, 502, 2])  # 2 = the stop token, sampled not evaluated
    assert (first.cached_tokens, first.uncached_tokens) == (0, 100)
    follow = prompt + [500, 501, 502, 2, 7, 8, 9]
    second = sim.request(follow)
    assert second.cached_tokens == 103  # prompt + the three evaluated reply tokens; the stop token is new
    assert second.uncached_tokens == 4


def test_only_the_latest_sequence_is_cached() -> None:
    sim = PrefixCacheSimulator(LlamaCppPolicy())
    a, b = list(range(50)), list(range(1000, 1050))
    sim.request(a)
    sim.request(b)
    assert sim.request(a + [1]).cached_tokens == 0  # a vLLM-style pool would still hold a
    pool = PrefixCacheSimulator(VLLMPolicy(block_size=1))
    pool.request(a)
    pool.request(b)
    assert pool.request(a + [1]).cached_tokens == 50


def test_a_changed_token_ends_the_reuse_and_the_tail_is_dropped() -> None:
    sim = PrefixCacheSimulator(LlamaCppPolicy())
    sim.request(list(range(40)))
    changed = list(range(40))
    changed[10] = -5
    assert sim.request(changed).cached_tokens == 10
    assert sim.request(list(range(40))).cached_tokens == 10  # the old tail is gone from the cache


def test_identical_prompt_and_prefix_prompt() -> None:
    sim = PrefixCacheSimulator(LlamaCppPolicy())
    sim.request([1, 2, 3, 4, 5], output_tokens=[9])  # one sampled token: nothing of the reply is evaluated
    assert sim.request([1, 2, 3, 4, 5]).uncached_tokens == 0  # exactly the cache: the logits are live
    assert sim.request([1, 2, 3]).uncached_tokens == 1  # a prefix of the cache: its last token again


def test_keep_output_false_and_context_limit() -> None:
    sim = PrefixCacheSimulator(LlamaCppPolicy(keep_output=False))
    sim.request([1, 2, 3], output_tokens=[4, 5, 6])
    assert sim.request([1, 2, 3, 4, 5, 7]).cached_tokens == 3
    with pytest.raises(ValueError, match="n_ctx"):
        PrefixCacheSimulator(LlamaCppPolicy(n_ctx=4)).request([1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="n_ctx"):
        LlamaCppPolicy(n_ctx=0)
    with pytest.raises(TypeError, match="token ids"):
        PrefixCacheSimulator(LlamaCppPolicy()).request([1, 2], output_tokens="text")  # type: ignore[arg-type]


def test_output_tokens_are_ignored_by_policies_that_do_not_keep_them() -> None:
    with_out = PrefixCacheSimulator(VLLMPolicy(block_size=4))
    without = PrefixCacheSimulator(VLLMPolicy(block_size=4))
    for sim, out in ((with_out, [7] * 8), (without, None)):
        sim.request(list(range(20)), output_tokens=out)
    assert with_out.request(list(range(24))).cached_tokens == without.request(list(range(24))).cached_tokens


def test_theoretical_ceiling_and_describe() -> None:
    policy = LlamaCppPolicy()
    assert theoretical_max_cached([list(range(10)), list(range(10))], policy) == [0, 9]
    assert "llama.cpp" in policy.describe() and policy.cost(100, 50, 0) == 0.0


def test_usage_without_cache_fields_is_marked_unreported() -> None:
    meter = UsageMeter()
    local = meter.add({"usage": {"prompt_tokens": 120, "completion_tokens": 8, "total_tokens": 128}})
    openai = meter.add({"prompt_tokens": 2000, "completion_tokens": 5,
                        "prompt_tokens_details": {"cached_tokens": 0}})
    langchain = meter.add({"input_tokens": 10, "output_tokens": 1, "total_tokens": 11})
    anthropic = meter.add({"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 0})
    assert local is not None and local.cache_reported is False
    assert openai is not None and openai.cache_reported is True  # a reported 0 is a real miss
    assert langchain is not None and langchain.cache_reported is False
    assert anthropic is not None and anthropic.cache_reported is True
    assert meter.cache_unreported == 2 and meter.to_dict()["cache_unreported"] == 2
    measured = parse_usage({"prompt_tokens": 300, "completion_tokens": 4, "total_tokens": 304,
                            "prompt_tokens_details": {"cached_tokens": 280}})
    assert measured is not None and measured.cache_read == 280 and measured.cache_reported


def test_reply_reevaluated_counts_the_reply_tokens_a_prompt_does_not_reuse() -> None:
    from ironmem.local import _reply_reevaluated

    before, reply = [1, 2, 3], [7, 8, 9]  # the previous prompt and the reply tokens the engine evaluated
    assert _reply_reevaluated(None, [1, 2]) is None  # no previous request
    assert _reply_reevaluated((before, reply), [1, 2, 3, 7, 8, 9, 4, 5]) == 0  # re-tokenised the same: all re-used
    assert _reply_reevaluated((before, reply), [1, 2, 3, 7, 6, 9, 4]) == 2  # split differently after one token
    assert _reply_reevaluated((before, reply), [1, 2, 5, 7, 8, 9]) is None  # the prefix broke before the reply
