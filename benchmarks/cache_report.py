"""Prefix-cache report: a scripted 30-turn agent session replayed under four memory strategies.

    python benchmarks/cache_report.py [--json PATH] [--turns 30] [--write-every 5]
                                      [--openai-model gpt-5] [--anthropic-model claude-sonnet-4-5]

The session runs through a real ironmem MemoryManager (seeded memory, frozen snapshot, per-turn recall, a memory
write through the `memory` tool every 5 turns); every model request it makes is rebuilt under each strategy,
tokenized in the provider's prefix order and sent through the prefix-cache simulator with OpenAI's and Anthropic's
rules and prices. Printed per strategy: cached share, input cost, the theoretical maximum of cached tokens, the
ratio achieved / theoretical and the ratio against rewrite_every_turn.

Theoretical maximum (per strategy, over its own requests): for each request, the longest prefix it shares with ANY
earlier request of the session, rounded down to the policy's granularity (OpenAI 128 tokens, Anthropic 1 token),
counted only when the prompt and that prefix reach the policy's minimum (1,024 tokens for both models used here).
Breakpoint placement and TTLs are ignored, so no cache can beat it. Exit status 1 if frozen_replay (ironmem's
default) reaches less than 90% of it under either provider.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_SHARED_CACHE = Path(__file__).resolve().parents[1].parent / "shared" / "tiktoken-cache"
if "TIKTOKEN_CACHE_DIR" not in os.environ and _SHARED_CACHE.is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(_SHARED_CACHE)  # offline encodings shipped next to the repo

from ironmem import MemoryManager
from ironmem.analysis.cache import AnthropicPolicy, CachePolicy, OpenAIPolicy
from ironmem.analysis.replay import STRATEGIES, SessionScript, StrategyResult, record_session, replay
from ironmem.analysis.tokens import TokenCounter
from ironmem.core.fence import fence_overhead_text

TARGET = 0.90


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _table(title: str, results: dict[str, StrategyResult], extra: dict[str, StrategyResult] | None = None) -> str:
    head = (f"{'strategy':<34} {'req':>4} {'input tok':>10} {'cached':>10} {'share':>6} {'max':>10} "
            f"{'of max':>7} {'cost $':>9} {'no-cache $':>10} {'TTFT s':>7}")
    lines = [title, head, "-" * len(head)]
    rows = list(results.items()) + list((extra or {}).items())
    for name, r in rows:
        lines.append(
            f"{name:<34} {r.requests:>4} {r.input_tokens:>10,} {r.cached_tokens:>10,} {_pct(r.cached_share):>6} "
            f"{r.theoretical_cached_tokens:>10,} {_pct(r.achieved_ratio):>7} {r.cost_usd:>9.4f} "
            f"{r.cost_without_cache_usd:>10.4f} {r.mean_ttft_s:>7.2f}"
        )
    base = results["rewrite_every_turn"]
    lines.append("")
    lines.append("against rewrite_every_turn (what mem0 / Zep / LangMem integrations do):")
    for name, r in rows:
        if name.startswith("frozen"):
            cached = r.cached_tokens / base.cached_tokens if base.cached_tokens else float("inf")
            lines.append(
                f"  {name:<32} {cached:5.1f}x the cached tokens, {r.cost_usd / base.cost_usd:6.1%} of the input cost"
            )
    return "\n".join(lines)


def _facts(counter: TokenCounter, script: SessionScript) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ironmem-cache-report-") as home, MemoryManager(home=home) as m:
        tools = m.tool_schemas()
    return {
        "encoding": counter.encoding_name,
        "fence_overhead_tokens": counter.count(fence_overhead_text()),
        "builtin_tools": {
            s.name: {"openai": counter.count_tool(s, "openai"), "anthropic": counter.count_tool(s, "anthropic")}
            for s in tools
        },
        "builtin_tools_array": {"openai": counter.count_tools(tools, "openai"),
                                "anthropic": counter.count_tools(tools, "anthropic")},
        "snapshot_tokens": counter.count(script.snapshot),
        "base_system_tokens": counter.count(script.base_system),
        "turns": len(script.turns),
        "memory_writes": script.memory_writes,
        "turns_with_recall": sum(1 for t in script.turns if t.recall_fenced),
        "mean_recall_tokens": (
            sum(counter.count(t.recall_fenced) for t in script.turns if t.recall_fenced)
            / max(1, sum(1 for t in script.turns if t.recall_fenced))
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--write-every", type=int, default=5)
    parser.add_argument("--openai-model", default="gpt-5")
    parser.add_argument("--anthropic-model", default="claude-sonnet-4-5")
    parser.add_argument("--anthropic-ttl", default="5m", choices=["5m", "1h"])
    parser.add_argument("--encoding", default="o200k_base")
    parser.add_argument("--json", dest="json_path", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    counter = TokenCounter(args.encoding)
    script = record_session(turns=args.turns, write_every=args.write_every)
    facts = _facts(counter, script)
    policies: dict[str, CachePolicy] = {
        "openai": OpenAIPolicy(model=args.openai_model),
        "anthropic": AnthropicPolicy(model=args.anthropic_model, ttl=args.anthropic_ttl),
    }
    results = {name: replay(script, policy, counter) for name, policy in policies.items()}
    aware = replay(script, policies["anthropic"], counter, strategies=["frozen_ephemeral"],
                   anthropic_breakpoints="fence_aware")["frozen_ephemeral"]
    elapsed = time.perf_counter() - started

    print(f"ironmem prefix-cache report: {facts['turns']} turns, a memory write every {args.write_every} turns "
          f"({facts['memory_writes']} writes), recall on {facts['turns_with_recall']} turns "
          f"(mean {facts['mean_recall_tokens']:.0f} tokens fenced)")
    tools = ", ".join(f"{n} {v['openai']}/{v['anthropic']}" for n, v in facts["builtin_tools"].items())
    print(f"tokens ({facts['encoding']}): fence overhead {facts['fence_overhead_tokens']}; built-in tools "
          f"(OpenAI/Anthropic) {tools}; tools array {facts['builtin_tools_array']['openai']}/"
          f"{facts['builtin_tools_array']['anthropic']}; frozen snapshot {facts['snapshot_tokens']}; base system "
          f"prompt {facts['base_system_tokens']}")
    print("max = theoretical maximum of cached tokens: per request, the longest prefix shared with any earlier "
          "request, rounded down to the policy's granularity, if >= its minimum.")
    print()
    print(_table(policies["openai"].describe(), results["openai"]))
    print()
    print(_table(f"{policies['anthropic'].describe()}\nbreakpoints where LangChain's "
                 "AnthropicPromptCachingMiddleware puts them: last tool, system, last message",
                 results["anthropic"], {"frozen_ephemeral (fence-aware bp)": aware}))
    print()
    ok = True
    for provider in ("openai", "anthropic"):
        ratio = results[provider]["frozen_replay"].achieved_ratio
        passed = ratio >= TARGET
        ok &= passed
        print(f"frozen_replay under {provider}: {_pct(ratio)} of the theoretical maximum "
              f"({'PASS' if passed else 'FAIL'}, target >= {TARGET:.0%})")
    print(f"({elapsed:.1f} s)")

    if args.json_path:
        payload = {
            "settings": vars(args) | {"json_path": None},
            "facts": facts,
            "target_of_theoretical_max": TARGET,
            "results": {p: {s: r.to_dict() for s, r in per.items()} for p, per in results.items()},
            "anthropic_frozen_ephemeral_fence_aware": aware.to_dict(),
            "strategies": list(STRATEGIES),
            "passed": ok,
        }
        Path(args.json_path).write_text(json.dumps(payload, indent=2), encoding="utf-8")
        print(f"wrote {args.json_path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
