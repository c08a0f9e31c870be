# %% [markdown]
# # Cache behaviour of four memory strategies
#
# A 50-turn coding-assistant session is run through a real ironmem `Session` (snapshot, per-turn recall, a memory
# write through the `memory` tool every 5 turns), then every model request of that session is rebuilt under four
# memory strategies and replayed through the prefix-cache simulator:
#
# | strategy | system prompt | recall |
# |---|---|---|
# | `frozen_replay` (ironmem's default) | frozen snapshot | fenced, in the user message; earlier fences re-sent byte for byte |
# | `frozen_ephemeral` | frozen snapshot | fenced, only the current turn's |
# | `rewrite_every_turn` (what mem0, Zep and LangMem integrations do) | memory + recall re-rendered every turn | in the system prompt |
# | `no_memory` | no memory block | none (and no memory tools) |
#
# Policies: OpenAI `gpt-4.1` (automatic, >= 1,024 tokens, 128-token steps, cached input at 25%), Anthropic
# `claude-sonnet-4-5` (explicit breakpoints as LangChain's `AnthropicPromptCachingMiddleware` places them, writes
# 1.25x, reads 0.1x, 5-minute TTL) and vLLM automatic prefix caching (16-token blocks). Everything is simulated
# offline from real token counts (tiktoken `o200k_base`); see `ironmem.analysis.cache` for the sources of each
# figure and what is not modelled.

# %%
import matplotlib.pyplot as plt

from ironmem.analysis.cache import (
    AnthropicPolicy,
    OpenAIPolicy,
    PrefixCacheSimulator,
    VLLMPolicy,
    theoretical_max_cached,
)
from ironmem.analysis.replay import STRATEGIES, build_requests, record_session, replay, request_tokens
from ironmem.analysis.tokens import TokenCounter


class CachedCounter(TokenCounter):
    """A TokenCounter that remembers the tokens of each text it has seen (the replay re-encodes a lot)."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        super().__init__(encoding)
        self._memo: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
        ids = self._memo.get(text)
        if ids is None:
            ids = self._memo[text] = super().encode(text)
        return list(ids)


counter = CachedCounter()
print("token counts:", counter.method)  # offline without the encoding file: labelled estimates
TURNS, WRITE_EVERY = 50, 5
script = record_session(turns=TURNS, write_every=WRITE_EVERY)
print(
    f"{len(script.turns)} turns, {script.memory_writes} memory writes, "
    f"snapshot {counter.count(script.snapshot)} tokens, "
    f"{sum(1 for t in script.turns if t.recall_fenced)} turns with a fenced recall"
)

POLICIES = {
    "OpenAI gpt-4.1": lambda: OpenAIPolicy(model="gpt-4.1"),
    "Anthropic claude-sonnet-4-5": lambda: AnthropicPolicy(model="claude-sonnet-4-5"),
    "vLLM (16-token blocks)": lambda: VLLMPolicy(block_size=16),
}
COLORS = {
    "frozen_replay": "tab:green",
    "frozen_ephemeral": "tab:olive",
    "rewrite_every_turn": "tab:red",
    "no_memory": "tab:gray",
}

# %% [markdown]
# ## Replay every request
#
# Each request becomes the token sequence in the provider's prefix order (Anthropic: tools, system, messages;
# OpenAI and vLLM: system, tools, messages) and goes through a fresh simulator per strategy.

# %%
runs = {}  # (policy, strategy) -> per-request rows
for label, make in POLICIES.items():
    for strategy in STRATEGIES:
        policy = make()
        provider = "anthropic" if policy.provider == "anthropic" else "openai"
        sim = PrefixCacheSimulator(policy)
        rows, seqs = [], []
        for at, request in build_requests(script, strategy):
            tok = request_tokens(request, counter, provider)
            outcome = sim.request(tok.tokens, at=at, breakpoints=tok.breakpoints or None)
            is_write = bool(request.messages[-1].get("role") == "tool")
            turn = sum(1 for m in request.messages if m["role"] == "user")
            rows.append(
                {
                    "turn": turn,
                    "at": at,
                    "total": outcome.total_tokens,
                    "cached": outcome.cached_tokens,
                    "uncached": outcome.uncached_tokens,
                    "cost": outcome.cost_usd,
                    "tool_result": is_write,
                }
            )
            seqs.append(tok.tokens)
        ceiling = theoretical_max_cached(seqs, policy)
        for row, c in zip(rows, ceiling):
            row["ceiling"] = c
        runs[(label, strategy)] = rows

# The same numbers through the library's one-call API, as a cross-check:
check = replay(script, POLICIES["OpenAI gpt-4.1"], counter, strategies=["frozen_replay"])["frozen_replay"]
mine = runs[("OpenAI gpt-4.1", "frozen_replay")]
assert check.cached_tokens == sum(r["cached"] for r in mine) and check.input_tokens == sum(
    r["total"] for r in mine
)
print("replay() agrees:", check.cached_tokens, "cached of", check.input_tokens, "input tokens")

# %% [markdown]
# ## Summary

# %%
header = f"{'policy':<28} {'strategy':<19} {'requests':>8} {'input tok':>10} {'cached':>7} {'of max':>7} {'input cost':>11} {'saved':>6}"
print(header)
print("-" * len(header))
summary = {}
for (label, strategy), rows in runs.items():
    total = sum(r["total"] for r in rows)
    cached = sum(r["cached"] for r in rows)
    ceiling = sum(r["ceiling"] for r in rows)
    cost = sum(r["cost"] for r in rows)
    policy = POLICIES[label]()
    no_cache = policy.cost(total, 0, 0)
    summary[(label, strategy)] = (cached / total, cost)
    saved = f"{1 - cost / no_cache:>6.0%}" if no_cache else f"{'-':>6}"
    of_max = cached / ceiling if ceiling else 1.0
    print(
        f"{label:<28} {strategy:<19} {len(rows):>8} {total:>10,} {cached / total:>7.1%} {of_max:>7.0%} "
        f"{'$' + format(cost, '.4f'):>11} {saved}"
    )
print()
for label in POLICIES:
    frozen, rewrite = summary[(label, "frozen_replay")], summary[(label, "rewrite_every_turn")]
    line = (
        f"{label}: frozen_replay caches {frozen[0]:.1%} of input vs {rewrite[0]:.1%} for rewrite_every_turn"
    )
    if rewrite[1]:
        line += f"; input cost ${frozen[1]:.3f} vs ${rewrite[1]:.3f} ({frozen[1] / rewrite[1]:.2f}x)"
    print(line)

# %% [markdown]
# ## Cached tokens per turn
#
# Each point adds up the requests of one user turn (a turn with a memory write makes two requests: the tool call
# and the follow-up with its result). Dashed lines mark the write turns. With a frozen snapshot the cached prefix
# keeps growing through the writes; when the system prompt is rewritten every turn, each turn's cache stops at the
# first changed byte - right after the tools for Anthropic, at the start for OpenAI and vLLM (system prompt first)
# - so only the follow-up request of a write turn (same system prompt as its first request) gets a hit.


# %%
def per_turn(rows, key):
    out = [0.0] * TURNS
    for r in rows:
        out[r["turn"] - 1] += r[key]
    return out


write_turns = [i + 1 for i, t in enumerate(script.turns) if t.tool_call is not None]
turns_axis = range(1, TURNS + 1)
fig, axes = plt.subplots(len(POLICIES), 2, figsize=(13, 9), sharex=True)
for (ax, ax_share), label in zip(axes, POLICIES):
    for strategy in STRATEGIES:
        rows = runs[(label, strategy)]
        cached, total = per_turn(rows, "cached"), per_turn(rows, "total")
        ax.plot(turns_axis, cached, label=strategy, color=COLORS[strategy], linewidth=1.3)
        ax_share.plot(
            turns_axis,
            [c / t if t else 0 for c, t in zip(cached, total)],
            color=COLORS[strategy],
            linewidth=1.3,
        )
    for w in write_turns:
        ax.axvline(w, color="black", alpha=0.15, linestyle="--")
        ax_share.axvline(w, color="black", alpha=0.15, linestyle="--")
    ax.set_title(f"{label}: cached tokens per turn", fontsize=10)
    ax_share.set_title(f"{label}: cached share of the turn's input", fontsize=10)
    ax_share.set_ylim(0, 1.02)
axes[0][0].legend(loc="upper left", fontsize=8)
axes[-1][0].set_xlabel("turn (dashed: a memory write, whose turn makes two requests)")
axes[-1][1].set_xlabel("turn")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Cumulative input cost
#
# vLLM has no per-token price; its panel shows the cumulative *uncached* tokens instead (the prefill work the GPU
# does).

# %%
fig, axes = plt.subplots(1, len(POLICIES), figsize=(13, 3.8))
for ax, label in zip(axes, POLICIES):
    priced = POLICIES[label]().price.input_per_mtok > 0
    for strategy in STRATEGIES:
        values, running = [], 0.0
        for value in per_turn(runs[(label, strategy)], "cost" if priced else "uncached"):
            running += value
            values.append(running)
        ax.plot(turns_axis, values, label=strategy, color=COLORS[strategy])
    ax.set_title(label, fontsize=10)
    ax.set_xlabel("turn")
    ax.set_ylabel("cumulative input cost (USD)" if priced else "cumulative uncached tokens")
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## The effect of one memory write
#
# Zoom on the write of turn 20 under Anthropic's policy. The write happens in a tool call; the follow-up request
# carries the tool result. With `frozen_replay` the system prompt does not change, so the follow-up and the next
# turn still read everything up to their previous breakpoint from cache. With `rewrite_every_turn` every turn's
# system prompt holds the current memory and that turn's recall, so a new turn can read at most the tools from
# cache - and the tools alone (about 630 tokens here) are below Sonnet's 1,024-token minimum, so it reads nothing.
# Only the write's follow-up request, which repeats its turn's system prompt, gets a hit.

# %%
label = "Anthropic claude-sonnet-4-5"
frozen_rows = runs[(label, "frozen_replay")]
rewrite_rows = runs[(label, "rewrite_every_turn")]
# index of the follow-up request that carries turn 20's write (frozen strategies: one extra request per write)
write_idx = [i for i, r in enumerate(frozen_rows) if r["tool_result"]][3]
window = range(write_idx - 3, write_idx + 4)
print(f"{'request':>7} {'frozen_replay cached/total':>28} {'rewrite_every_turn cached/total':>33}")
for i in window:
    f, w = frozen_rows[i], rewrite_rows[i]
    mark = "  <- tool result of the write" if f["tool_result"] else ""
    print(f"{i + 1:>7} {f['cached']:>12,} / {f['total']:>10,} {w['cached']:>15,} / {w['total']:>12,}{mark}")

fig, ax = plt.subplots(figsize=(8, 3))
xs = [i + 1 for i in window]
ax.bar(
    [x - 0.2 for x in xs],
    [frozen_rows[i]["cached"] / frozen_rows[i]["total"] for i in window],
    width=0.4,
    color=COLORS["frozen_replay"],
    label="frozen_replay",
)
ax.bar(
    [x + 0.2 for x in xs],
    [rewrite_rows[i]["cached"] / rewrite_rows[i]["total"] for i in window],
    width=0.4,
    color=COLORS["rewrite_every_turn"],
    label="rewrite_every_turn",
)
ax.axvline(write_idx + 1, color="black", linestyle="--", alpha=0.4)
ax.set_ylabel("cached share of the request")
ax.set_xlabel("request")
ax.set_title("Around the memory write of turn 20 (Anthropic)")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## And in the next session?
#
# The write shows in the next session's snapshot, so the next session's first request shares only the part of the
# prompt that comes before the memory block with the previous session: tools + base system prompt for Anthropic,
# the base system prompt for OpenAI (system first). Everything after is written to the cache once and then reused
# for the rest of that session.

# %%
from ironmem.analysis.replay import ChatRequest

new_snapshot = script.turns[-1].snapshot_now  # what a session starting after turn 50 would freeze
first_old = ChatRequest(
    tuple(script.memory_tools) + tuple(script.app_tools),
    (script.base_system, script.snapshot),
    ({"role": "user", "content": "hello"},),
)
first_new = ChatRequest(
    first_old.tools, (script.base_system, new_snapshot), ({"role": "user", "content": "hello"},)
)
for provider in ("openai", "anthropic"):
    a = request_tokens(first_old, counter, provider).tokens
    b = request_tokens(first_new, counter, provider).tokens
    shared = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    print(
        f"{provider:>9}: next session's first request {len(b):,} tokens, {shared:,} shared with the previous "
        f"session's first request ({shared / len(b):.0%})"
    )
