"""Prefix-cache figures: the simulation over the demo's recorded requests, and ``ironmem simulate``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal

from .records import DemoRequest
from .script import DemoError

#: Seconds between two requests of the demo, and between its two sessions, for the cache simulation.
REQUEST_GAP_S = 20.0
SESSION_GAP_S = 120.0


#: The policies the demo reports, as ``--policy`` specs.
DEMO_POLICIES = ("openai:gpt-4.1", "anthropic:claude-sonnet-4-5", "vllm")


def parse_policy(spec: str) -> Any:
    """A cache policy from a spec: ``openai[:MODEL]``, ``anthropic[:MODEL[:1h]]``, ``gemini[:MODEL]``,
    ``deepseek[:MODEL]``, ``vllm[:BLOCK_SIZE]``.

    Example:
        >>> parse_policy("vllm:32").block_size
        32
    """
    from ..analysis.cache import AnthropicPolicy, DeepSeekPolicy, GeminiPolicy, OpenAIPolicy, VLLMPolicy

    parts = [p.strip() for p in spec.split(":")]
    kind = parts[0].lower()
    rest = [p for p in parts[1:] if p]
    try:
        if kind == "openai":
            return OpenAIPolicy(model=rest[0]) if rest else OpenAIPolicy(model="gpt-4.1")
        if kind == "anthropic":
            ttl = "1h" if rest[1:] and rest[1] == "1h" else "5m"
            return AnthropicPolicy(model=rest[0] if rest else "claude-sonnet-4-5", ttl=ttl)
        if kind == "gemini":
            return GeminiPolicy(model=rest[0]) if rest else GeminiPolicy()
        if kind == "deepseek":
            return DeepSeekPolicy(model=rest[0]) if rest else DeepSeekPolicy()
        if kind == "vllm":
            return VLLMPolicy(block_size=int(rest[0])) if rest else VLLMPolicy()
    except KeyError as exc:
        raise DemoError(str(exc.args[0]) if exc.args else str(exc)) from None
    except ValueError as exc:
        raise DemoError(f"bad policy {spec!r}: {exc}") from None
    raise DemoError(
        f"unknown cache policy {spec!r}; use openai, anthropic, gemini, deepseek or vllm (optionally :MODEL)"
    )


def simulate_requests(
    requests: Sequence[DemoRequest], policies: Sequence[str] = DEMO_POLICIES, counter: Any = None
) -> list[dict[str, Any]]:
    """Replay recorded requests (in each provider's prefix order) through the simulator, one row per policy."""
    from ..analysis.cache import PrefixCacheSimulator
    from ..analysis.replay import request_tokens
    from ..analysis.tokens import TokenCounter

    counter = counter or TokenCounter()
    rows = []
    for spec in policies:
        policy = parse_policy(spec)
        provider: Literal["openai", "anthropic"] = "anthropic" if policy.provider == "anthropic" else "openai"
        sim = PrefixCacheSimulator(policy)
        per_request = []
        for request in requests:
            tokens = request_tokens(request.to_chat_request(), counter, provider)
            outcome = sim.request(tokens.tokens, at=request.at, breakpoints=tokens.breakpoints or None)
            per_request.append(
                {
                    "number": request.number,
                    "session": request.session,
                    "tokens": len(tokens),
                    "cached": outcome.cached_tokens,
                    "written": outcome.cache_write_tokens,
                }
            )
        s = sim.summary()
        rows.append(
            {
                "policy": spec,
                "describe": policy.describe(),
                "requests": s.requests,
                "input_tokens": s.input_tokens,
                "cached_tokens": s.cached_tokens,
                "cache_write_tokens": s.cache_write_tokens,
                "cached_share": s.cached_share,
                "cost_usd": s.cost_usd,
                "cost_without_cache_usd": s.cost_without_cache_usd,
                "savings": s.savings,
                "exact_tokens": counter.exact,
                "per_request": per_request,
            }
        )
    return rows


def assign_times(requests: Sequence[DemoRequest]) -> None:
    now = 0.0
    previous: DemoRequest | None = None
    for request in requests:
        if previous is not None:
            now += SESSION_GAP_S if request.session != previous.session else REQUEST_GAP_S
        request.at = now
        previous = request



def run_simulation(
    turns: int = 30,
    write_every: int = 5,
    policies: Sequence[str] | None = None,
    strategies: Sequence[str] | None = None,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """Replay a scripted ``turns``-turn session (a memory write every ``write_every`` turns, 0 = never) under
    each strategy and policy. ``progress`` is a rich Console to show a progress bar on, or None.

    Returns one row per (policy, strategy): requests, input tokens, cached share, cost, savings and the share of
    the theoretical maximum of cached tokens reached.
    """
    from ..analysis.replay import STRATEGIES, record_session, replay
    from ..analysis.tokens import TokenCounter

    specs = list(policies or DEMO_POLICIES)
    chosen = list(strategies or STRATEGIES)
    for s in chosen:
        if s not in STRATEGIES:
            raise DemoError(f"unknown strategy {s!r}; use {', '.join(STRATEGIES)}")
    parsed = [(spec, parse_policy(spec)) for spec in specs]  # fail on a bad policy before any work
    counter = TokenCounter()  # offline without the encoding file: the estimate, labelled in every row
    if progress is not None and not counter.exact:
        from rich.text import Text

        progress.print(Text(f"token figures are ESTIMATES: {counter.method}", style="yellow"))
    script = record_session(turns=turns, write_every=write_every if write_every else turns + 1)
    rows: list[dict[str, Any]] = []

    def work(advance: Callable[[], None]) -> None:
        for spec, _ in parsed:
            for strategy in chosen:
                result = replay(script, functools.partial(parse_policy, spec), counter, strategies=[strategy])[
                    strategy
                ]
                rows.append(
                    {
                        "policy": spec,
                        "describe": result.policy,
                        "strategy": strategy,
                        "requests": result.requests,
                        "input_tokens": result.input_tokens,
                        "cached_tokens": result.cached_tokens,
                        "cache_write_tokens": result.cache_write_tokens,
                        "cached_share": result.cached_share,
                        "cost_usd": result.cost_usd,
                        "cost_without_cache_usd": result.cost_without_cache_usd,
                        "savings": 1 - result.cost_usd / result.cost_without_cache_usd
                        if result.cost_without_cache_usd
                        else 0.0,
                        "theoretical_cached_tokens": result.theoretical_cached_tokens,
                        "of_theoretical_max": result.achieved_ratio
                        if result.theoretical_cached_tokens
                        else None,
                        "exact_tokens": counter.exact,
                    }
                )
                advance()

    if progress is None:
        work(lambda: None)
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(
            TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), console=progress, transient=True
        ) as bar:
            task = bar.add_task("replay", total=len(parsed) * len(chosen))
            work(lambda: bar.advance(task))
    return rows
