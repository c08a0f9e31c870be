"""Prefix-cache simulator: replay token sequences under a provider's caching rules, prices and TTLs.

A :class:`PrefixCacheSimulator` keeps the cache state between requests; each :meth:`~PrefixCacheSimulator.request`
returns a :class:`CacheOutcome` (cached, uncached and cache-write tokens, cost, estimated time to first token).

Policies (one class per provider, facts and prices as data in :data:`PRICES`, overridable):

- :class:`OpenAIPolicy` - automatic; prompts of >= 1,024 tokens; the cached prefix grows in 128-token steps
  (1,024, 1,152, 1,280, ...); cached input at a per-model discount; entries expire after a period of inactivity.
- :class:`AnthropicPolicy` - explicit ``cache_control`` breakpoints (at most 4, more raises); per-model minimum
  cacheable length; writes cost 1.25x (5-minute TTL) or 2x (1-hour TTL), reads 0.1x; a read happens only at a
  prefix that an earlier request wrote (at one of its breakpoints) within the TTL.
- :class:`GeminiPolicy` - implicit caching, token-level prefix match above a per-model minimum.
- :class:`DeepSeekPolicy` - context caching on disk in fixed 64-token prefix units.
- :class:`VLLMPolicy` - automatic prefix caching in full blocks (16 tokens by default), each block hashed together
  with its parent block's hash, LRU eviction when the pool holds ``capacity_blocks`` blocks.
- :class:`LlamaCppPolicy` - a local llama.cpp engine (llama-cpp-python's ``Llama``, or one slot of ``llama-server``):
  one KV cache holding the previous prompt AND the reply generated after it; a request re-uses the longest common
  token prefix with that cache (at most all but its last token) and evaluates the rest. Pass the generated tokens
  with ``request(..., output_tokens=...)``; the engine keeps every sampled token but the last one.

What is NOT modelled: OpenAI's routing (requests are routed by a hash of about the first 256 tokens plus
``prompt_cache_key``; above ~15 requests per minute per prefix some overflow to machines without the cache); cache
eviction under provider load (entries may vanish before the TTL); Anthropic's 20-block lookback limit (see
:class:`AnthropicPolicy`); mixed TTLs within one Anthropic request. Hosted caches are best-effort: treat the
simulator's numbers as the upper bound a well-routed session reaches.

Example:
    >>> sim = PrefixCacheSimulator(OpenAIPolicy(model="gpt-4o"))
    >>> first = sim.request(list(range(1500)), at=0)
    >>> second = sim.request(list(range(1300)) + [-1] * 200, at=30)
    >>> first.cached_tokens, second.cached_tokens
    (0, 1280)
"""

from __future__ import annotations

import dataclasses
import hashlib
from abc import ABC, abstractmethod
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import ArgumentTypeError, InvalidArgumentError

__all__ = [
    "ModelPrice",
    "PriceTable",
    "PRICES",
    "TTFTModel",
    "CacheOutcome",
    "SimulationSummary",
    "CachePolicy",
    "OpenAIPolicy",
    "AnthropicPolicy",
    "GeminiPolicy",
    "DeepSeekPolicy",
    "VLLMPolicy",
    "LlamaCppPolicy",
    "PrefixCacheSimulator",
    "theoretical_max_cached",
    "ANTHROPIC_MAX_BREAKPOINTS",
]

ANTHROPIC_MAX_BREAKPOINTS = 4


# ------------------------------------------------------------------------------------------------
# Prices and facts, as data
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelPrice:
    """One model's caching facts and input price.

    ``cached_multiplier`` is the price of a cached (read) input token relative to ``input_per_mtok``.
    ``write_multiplier_5m`` / ``write_multiplier_1h`` price cache writes (Anthropic; 1.0 elsewhere).
    ``as_of`` and ``source`` say where each figure comes from and when it was checked.

    Example:
        >>> ModelPrice("openai", "my-model", 1.0, 0.5, 1024).cached_per_mtok
        0.5
    """

    provider: str
    model: str
    input_per_mtok: float
    cached_multiplier: float
    min_cacheable_tokens: int
    write_multiplier_5m: float = 1.0
    write_multiplier_1h: float = 1.0
    as_of: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if self.input_per_mtok < 0:
            raise InvalidArgumentError(f"input_per_mtok must be >= 0 for {self.model!r}, got {self.input_per_mtok!r}")
        if not 0 <= self.cached_multiplier <= 1:
            raise InvalidArgumentError(
                f"cached_multiplier is the cached price relative to the input price (0..1) for {self.model!r}, "
                f"got {self.cached_multiplier!r}"
            )
        if self.min_cacheable_tokens < 0:
            raise InvalidArgumentError(f"min_cacheable_tokens must be >= 0 for {self.model!r}")

    @property
    def cached_per_mtok(self) -> float:
        return self.input_per_mtok * self.cached_multiplier

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: The data file: every price and caching fact with its source and the date it was checked.
PRICES_FILE = Path(__file__).with_name("prices.yaml")


def load_prices(path: str | Path = PRICES_FILE) -> tuple[ModelPrice, ...]:
    """Read the model facts from ``path`` (YAML: ``checked``, ``sources``, ``models``).

    OpenAI rows give ``cached_per_mtok``, the others ``cached_multiplier``; each row's ``sources`` are keys of
    the ``sources`` mapping and become its :attr:`ModelPrice.source` text.
    """
    import yaml

    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    sources: dict[str, str] = data.get("sources") or {}
    checked = str(data.get("checked", ""))
    rows = []
    for raw in data["models"]:
        raw = dict(raw)
        keys = raw.pop("sources", [])
        missing = [k for k in keys if k not in sources]
        if missing:
            raise InvalidArgumentError(f"{path}: model {raw.get('model')!r} cites unknown sources {missing}")
        price = float(raw.pop("input_per_mtok"))
        cached = raw.pop("cached_per_mtok", None)
        multiplier = float(cached) / price if cached is not None and price else float(raw.pop("cached_multiplier", 0.0))
        rows.append(ModelPrice(
            raw.pop("provider"), raw.pop("model"), price, multiplier, int(raw.pop("min_cacheable_tokens")),
            as_of=str(raw.pop("as_of", checked)), source="; ".join(sources[k] for k in keys), **raw,
        ))
    return tuple(rows)


DEFAULT_PRICES: tuple[ModelPrice, ...] = load_prices()


class PriceTable:
    """Model facts and prices, looked up by provider and model name; copy-on-override.

    A dated snapshot name (``gpt-4o-2024-08-06``, ``claude-sonnet-4-5-20250929``) finds its base row. A row with
    model ``"*"`` matches any model of that provider.

    Example:
        >>> table = PRICES.override("openai", "gpt-4o", input_per_mtok=2.0)
        >>> table.get("openai", "gpt-4o-2024-08-06").input_per_mtok
        2.0
        >>> PRICES.get("openai", "gpt-4o").input_per_mtok  # the default table is unchanged
        2.5
    """

    def __init__(self, rows: Iterable[ModelPrice] = DEFAULT_PRICES) -> None:
        self._rows: dict[tuple[str, str], ModelPrice] = {}
        for row in rows:
            if not isinstance(row, ModelPrice):
                raise ArgumentTypeError(f"PriceTable rows must be ModelPrice, got {type(row).__name__}")
            self._rows[(row.provider, row.model)] = row

    def get(self, provider: str, model: str) -> ModelPrice:
        """The row for ``model`` (exact name, else the longest base name it starts with, else ``"*"``)."""
        if (provider, model) in self._rows:
            return self._rows[(provider, model)]
        best: ModelPrice | None = None
        for (p, name), row in self._rows.items():
            if p == provider and model.startswith(name + "-") and (best is None or len(name) > len(best.model)):
                best = row
        if best is None:
            best = self._rows.get((provider, "*"))
        if best is None:
            known = ", ".join(name for p, name in self._rows if p == provider) or "none"
            raise KeyError(
                f"no price for {provider} model {model!r} (known: {known}). Pass price=ModelPrice(...) to the "
                "policy, or add a row with PRICES.with_rows(ModelPrice(...))"
            )
        return best

    def with_rows(self, *rows: ModelPrice) -> PriceTable:
        """A new table with ``rows`` added or replacing rows of the same provider and model."""
        return PriceTable([*self._rows.values(), *rows])

    def override(self, provider: str, model: str, **changes: Any) -> PriceTable:
        """A new table where one row has some fields changed (``input_per_mtok=...``, ``source=...``)."""
        row = self.get(provider, model)
        return self.with_rows(dataclasses.replace(row, **changes))

    def rows(self, provider: str | None = None) -> list[ModelPrice]:
        return [row for row in self._rows.values() if provider is None or row.provider == provider]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._rows.values())

    def __len__(self) -> int:
        return len(self._rows)


#: The default price table. Override per policy (``price=``/``prices=``) or build a new table.
PRICES = PriceTable()


# ------------------------------------------------------------------------------------------------
# Time to first token
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TTFTModel:
    """A simple time-to-first-token estimate: ``overhead_s + uncached / prefill_tps + cached / cached_tps``.

    The defaults are illustrative round numbers, not measurements: 0.35 s of network and queueing overhead, prefill
    of uncached tokens at 4,000 tokens/s, cached tokens loaded at 40,000 tokens/s (10x faster, in line with the
    providers' "up to 80% lower latency" claims for long cached prompts). Supply measured values for your stack.
    """

    overhead_s: float = 0.35
    prefill_tokens_per_s: float = 4_000.0
    cached_tokens_per_s: float = 40_000.0

    def estimate(self, uncached_tokens: int, cached_tokens: int) -> float:
        return (
            self.overhead_s
            + uncached_tokens / self.prefill_tokens_per_s
            + cached_tokens / self.cached_tokens_per_s
        )


# ------------------------------------------------------------------------------------------------
# Outcomes
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CacheOutcome:
    """One request's result. ``cached_tokens + uncached_tokens == total_tokens``.

    ``cache_write_tokens`` is the part of ``uncached_tokens`` written to the cache at a premium (Anthropic); it is 0
    for providers without a write price.
    """

    at: float
    total_tokens: int
    cached_tokens: int
    uncached_tokens: int
    cache_write_tokens: int
    cost_usd: float
    cost_without_cache_usd: float
    ttft_s: float
    ttft_without_cache_s: float

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.total_tokens if self.total_tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "hit_rate": self.hit_rate}


@dataclass(frozen=True)
class SimulationSummary:
    """Totals over every request a simulator has seen."""

    policy: str
    requests: int
    input_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    cost_usd: float
    cost_without_cache_usd: float
    mean_ttft_s: float
    mean_ttft_without_cache_s: float

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def savings(self) -> float:
        """Fraction of the no-cache input cost saved (negative when write premiums outweigh the reads)."""
        return 1 - self.cost_usd / self.cost_without_cache_usd if self.cost_without_cache_usd else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "cached_share": self.cached_share, "savings": self.savings}


# ------------------------------------------------------------------------------------------------
# Hashing helpers
# ------------------------------------------------------------------------------------------------
def _block_hashes(tokens: Sequence[int], unit: int) -> list[int]:
    """Hash of every full ``unit``-token prefix, each chained on its parent's hash (vLLM style)."""
    out: list[int] = []
    parent = 0
    for start in range(0, len(tokens) - unit + 1, unit):
        parent = hash((parent, tuple(tokens[start : start + unit])))
        out.append(parent)
    return out


def _digest(tokens: Sequence[int]) -> bytes:
    return hashlib.blake2b(array("q", tokens).tobytes(), digest_size=16).digest()


def _check_tokens(tokens: Sequence[int]) -> list[int]:
    if isinstance(tokens, (str, bytes)):
        raise ArgumentTypeError("request() takes a sequence of token ids (ints), not text; encode it with TokenCounter first")
    out = list(tokens)
    try:
        array("q", out)  # C-speed check that every item is an int
    except (TypeError, OverflowError):
        raise ArgumentTypeError("request() takes a sequence of token ids (ints)") from None
    return out


def _shared_prefix(a: bytes, b: bytes, width: int = 8) -> int:
    """Number of leading ``width``-byte items ``a`` and ``b`` share (binary search over C-speed compares)."""
    lo, hi = 0, min(len(a), len(b)) // width
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[: mid * width] == b[: mid * width]:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ------------------------------------------------------------------------------------------------
# Policies
# ------------------------------------------------------------------------------------------------
class CachePolicy(ABC):
    """How one provider caches prefixes and prices input. Subclasses implement :meth:`lookup`.

    A policy is stateless; the simulator holds the state it creates with :meth:`new_state`.
    """

    provider: str = ""
    #: Whether the provider needs explicit breakpoints (Anthropic) or caches automatically.
    explicit: bool = False

    def __init__(self, price: ModelPrice, ttft: TTFTModel | None = None) -> None:
        self.price = price
        self.ttft = ttft or TTFTModel()

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.price.model}"

    @property
    def min_tokens(self) -> int:
        return self.price.min_cacheable_tokens

    @abstractmethod
    def new_state(self) -> Any:
        """Fresh, empty cache state."""

    @abstractmethod
    def lookup(self, state: Any, tokens: list[int], at: float, breakpoints: list[int] | None) -> tuple[int, int]:
        """Serve one request: return ``(cached_tokens, cache_write_tokens)`` and update ``state``."""

    @abstractmethod
    def max_cached(self, total_tokens: int, shared_tokens: int) -> int:
        """The most this policy can serve from cache for a prompt of ``total_tokens`` whose first
        ``shared_tokens`` were seen before (granularity and minimum applied; breakpoints and expiry ignored)."""

    def after_output(self, state: Any, output_tokens: list[int]) -> None:
        """Record the tokens the engine generated after the last prompt (only engines that cache them care)."""

    def write_multiplier(self) -> float:
        return 1.0

    def cost(self, total: int, cached: int, written: int) -> float:
        """Input cost in USD."""
        p = self.price
        plain = total - cached - written
        return (plain + cached * p.cached_multiplier + written * self.write_multiplier()) * p.input_per_mtok / 1e6

    def describe(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


class _ImplicitPrefixPolicy(CachePolicy):
    """Automatic caching of prefixes in ``unit``-token steps above ``min_tokens``, with an inactivity TTL."""

    unit: int = 1
    idle_ttl_s: float = 300.0

    def new_state(self) -> dict[int, float]:
        return {}  # prefix hash -> last use

    def lookup(self, state: dict[int, float], tokens: list[int], at: float,
               breakpoints: list[int] | None) -> tuple[int, int]:
        if len(tokens) < self.min_tokens:
            return 0, 0  # too short to be cached at all: nothing read, nothing stored
        hashes = _block_hashes(tokens, self.unit)
        cached = 0
        for i, h in enumerate(hashes):
            seen = state.get(h)
            if seen is None or at - seen > self.idle_ttl_s:
                break
            end = (i + 1) * self.unit
            if end >= self.min_tokens:
                cached = end
        for h in hashes:
            state[h] = at
        if len(state) > 200_000:  # drop expired entries now and then
            for h in [h for h, seen in state.items() if at - seen > self.idle_ttl_s]:
                del state[h]
        return cached, 0

    def max_cached(self, total_tokens: int, shared_tokens: int) -> int:
        if total_tokens < self.min_tokens:
            return 0
        cached = (min(shared_tokens, total_tokens) // self.unit) * self.unit
        return cached if cached >= self.min_tokens else 0


class OpenAIPolicy(_ImplicitPrefixPolicy):
    """OpenAI automatic prompt caching.

    Prompts of at least 1,024 tokens are cached; a hit covers the longest cached prefix in 128-token steps
    (1,024, 1,152, 1,280, ...). Cached input costs ``cached_multiplier`` of the input price (50% for gpt-4o, 25%
    for gpt-4.1, 10% for the gpt-5 family). ``retention="in_memory"`` expires a prefix after ``idle_ttl_s`` of
    inactivity (OpenAI: "typically 5 to 10 minutes", at most an hour; default 300 s, the pessimistic end);
    ``retention="24h"`` keeps it for 24 hours.

    Example:
        >>> policy = OpenAIPolicy(model="gpt-4.1")
        >>> policy.price.cached_multiplier
        0.25
    """

    provider = "openai"
    unit = 128

    def __init__(
        self,
        model: str = "gpt-4o",
        *,
        retention: str = "in_memory",
        idle_ttl_s: float | None = None,
        price: ModelPrice | None = None,
        prices: PriceTable | None = None,
        ttft: TTFTModel | None = None,
    ) -> None:
        if retention not in ("in_memory", "24h"):
            raise InvalidArgumentError(
                f"retention must be 'in_memory' or '24h' (OpenAI's prompt_cache_retention), got {retention!r}"
            )
        super().__init__(price or (prices or PRICES).get("openai", model), ttft)
        self.model = model
        self.retention = retention
        default_ttl = 300.0 if retention == "in_memory" else 86_400.0
        self.idle_ttl_s = float(idle_ttl_s) if idle_ttl_s is not None else default_ttl

    def describe(self) -> str:
        return (
            f"OpenAI {self.model} (>= {self.min_tokens:,} tokens, {self.unit}-token steps, "
            f"cached x{self.price.cached_multiplier:g}, idle TTL {self.idle_ttl_s:g}s)"
        )


class GeminiPolicy(_ImplicitPrefixPolicy):
    """Gemini implicit caching: automatic, token-level prefix match once a prompt reaches the model's minimum.

    Google does not publish the match granularity or the lifetime; this policy matches at token level and expires
    a prefix after ``idle_ttl_s`` (default 300 s, an assumption: Google says only "send requests with a similar
    prefix in a short amount of time").
    """

    provider = "gemini"
    unit = 1

    def __init__(
        self,
        model: str = "gemini-2.5-flash",
        *,
        idle_ttl_s: float = 300.0,
        price: ModelPrice | None = None,
        prices: PriceTable | None = None,
        ttft: TTFTModel | None = None,
    ) -> None:
        super().__init__(price or (prices or PRICES).get("gemini", model), ttft)
        self.model = model
        self.idle_ttl_s = float(idle_ttl_s)

    def describe(self) -> str:
        return (
            f"Gemini {self.model} (implicit, >= {self.min_tokens:,} tokens, "
            f"cached x{self.price.cached_multiplier:g})"
        )


class DeepSeekPolicy(_ImplicitPrefixPolicy):
    """DeepSeek context caching on disk: prefixes stored in fixed units (64 tokens); shorter content is not cached.

    Entries are cleared "within a few hours to a few days" of last use; ``idle_ttl_s`` defaults to 4 hours.
    """

    provider = "deepseek"

    def __init__(
        self,
        model: str = "deepseek-chat",
        *,
        unit: int = 64,
        idle_ttl_s: float = 4 * 3600.0,
        price: ModelPrice | None = None,
        prices: PriceTable | None = None,
        ttft: TTFTModel | None = None,
    ) -> None:
        if unit < 1:
            raise InvalidArgumentError(f"unit must be >= 1 token, got {unit!r}")
        super().__init__(price or (prices or PRICES).get("deepseek", model), ttft)
        self.model = model
        self.unit = unit
        self.idle_ttl_s = float(idle_ttl_s)

    def describe(self) -> str:
        return f"DeepSeek {self.model} ({self.unit}-token units, cached x{self.price.cached_multiplier:.3g})"


class AnthropicPolicy(CachePolicy):
    """Anthropic prompt caching with explicit ``cache_control`` breakpoints.

    ``breakpoints`` are prefix lengths in tokens (a breakpoint at 1,500 caches the first 1,500 tokens); a request
    may carry at most 4 (more raises ``ValueError``, as the API rejects the request). A breakpoint whose prefix is
    shorter than the model's minimum caches nothing. A request without breakpoints reads and writes nothing.

    Per breakpoint: if an earlier request wrote a prefix that this request starts with, that ends at or before the
    breakpoint, and whose TTL has not run out, the longest such prefix is read (0.1x) and its TTL refreshed;
    everything from there up to the last eligible breakpoint is written (1.25x for ``ttl="5m"``, 2x for
    ``ttl="1h"``). The rest is plain input.

    Lookback: the API checks for hits at earlier content-block boundaries, up to about 20 blocks before each
    breakpoint. A token sequence has no blocks, so with ``lookback=True`` (default) any earlier-written prefix that
    ends at or before a breakpoint counts, however far back; with ``lookback=False`` only a prefix ending exactly at
    one of this request's breakpoints is read. In a chat whose breakpoint is on the last message, the previous
    turn's breakpoint is two blocks back, well inside the real window.

    Example:
        >>> sim = PrefixCacheSimulator(AnthropicPolicy(model="claude-sonnet-4-5"))
        >>> sim.request(list(range(2000)), at=0, breakpoints=[2000]).cache_write_tokens
        2000
        >>> sim.request(list(range(2500)), at=60, breakpoints=[2500]).cached_tokens
        2000
    """

    provider = "anthropic"
    explicit = True

    def __init__(
        self,
        model: str = "claude-sonnet-4-5",
        *,
        ttl: str = "5m",
        lookback: bool = True,
        price: ModelPrice | None = None,
        prices: PriceTable | None = None,
        ttft: TTFTModel | None = None,
    ) -> None:
        if ttl not in ("5m", "1h"):
            raise InvalidArgumentError(f"ttl must be '5m' or '1h' (Anthropic's cache_control ttl), got {ttl!r}")
        super().__init__(price or (prices or PRICES).get("anthropic", model), ttft)
        self.model = model
        self.ttl = ttl
        self.ttl_s = 300.0 if ttl == "5m" else 3600.0
        self.lookback = lookback

    def new_state(self) -> dict[tuple[int, bytes], float]:
        return {}  # (prefix length, digest) -> expires at

    def write_multiplier(self) -> float:
        return self.price.write_multiplier_5m if self.ttl == "5m" else self.price.write_multiplier_1h

    def lookup(self, state: dict[tuple[int, bytes], float], tokens: list[int], at: float,
               breakpoints: list[int] | None) -> tuple[int, int]:
        points = self._check_breakpoints(breakpoints, len(tokens))
        eligible = [b for b in points if b >= self.min_tokens]
        if not eligible:
            return 0, 0
        cached = 0
        hit_key: tuple[int, bytes] | None = None
        written_lengths = sorted({length for length, _ in state}, reverse=True)
        for b in eligible:
            candidates = [n for n in written_lengths if n <= b] if self.lookback else [b]
            for n in candidates:
                if n <= cached:
                    break
                key = (n, _digest(tokens[:n]))
                expires = state.get(key)
                if expires is not None and at <= expires:
                    cached, hit_key = n, key
                    break
        if hit_key is not None:
            state[hit_key] = at + self.ttl_s  # a hit refreshes the entry
        write_end = 0
        for b in eligible:
            key = (b, _digest(tokens[:b]))
            if b > cached:
                write_end = b
            state[key] = at + self.ttl_s  # written now, or refreshed when it was the hit
        for key in [k for k, expires in state.items() if at > expires]:
            del state[key]
        return cached, max(0, write_end - cached)

    def _check_breakpoints(self, breakpoints: list[int] | None, length: int) -> list[int]:
        if not breakpoints:
            return []
        points = sorted(set(int(b) for b in breakpoints))
        if len(breakpoints) > ANTHROPIC_MAX_BREAKPOINTS:
            raise InvalidArgumentError(
                f"Anthropic allows at most {ANTHROPIC_MAX_BREAKPOINTS} cache_control breakpoints per request, got "
                f"{len(breakpoints)}; keep the ones at the end of tools/system and on the latest message"
            )
        for b in points:
            if not 0 < b <= length:
                raise InvalidArgumentError(
                    f"breakpoint {b} is outside the prompt (1..{length}); a breakpoint is the length of the "
                    "prefix to cache, in tokens"
                )
        return points

    def max_cached(self, total_tokens: int, shared_tokens: int) -> int:
        shared = min(shared_tokens, total_tokens)
        return shared if shared >= self.min_tokens else 0

    def describe(self) -> str:
        return (
            f"Anthropic {self.model} (breakpoints, >= {self.min_tokens:,} tokens, TTL {self.ttl}, "
            f"write x{self.write_multiplier():g}, read x{self.price.cached_multiplier:g})"
        )


class VLLMPolicy(CachePolicy):
    """vLLM automatic prefix caching.

    The prompt is split into ``block_size``-token blocks; only full blocks are cached, each identified by its
    tokens and its parent block's hash, so a block hits only if every block before it hits too. When every block
    of a prompt hits, the last one is recomputed (vLLM needs at least one token to compute), so a hit is at most
    ``len - 1`` tokens rounded down to whole blocks. With ``capacity_blocks`` set, the pool holds at most that many
    cached blocks and evicts the least recently used first (within one request, its tail blocks before its head,
    as vLLM frees blocks in reverse order). There is no per-token price: ``compute_cost_per_mtok`` is an optional
    proxy charged per uncached token (default 0).

    Example:
        >>> sim = PrefixCacheSimulator(VLLMPolicy(block_size=16))
        >>> _ = sim.request(list(range(40)))
        >>> sim.request(list(range(40)) + [7, 7]).cached_tokens  # two full blocks of the shared 40 tokens
        32
    """

    provider = "vllm"

    def __init__(
        self,
        block_size: int = 16,
        capacity_blocks: int | None = None,
        *,
        compute_cost_per_mtok: float = 0.0,
        ttft: TTFTModel | None = None,
    ) -> None:
        if block_size < 1:
            raise InvalidArgumentError(f"block_size must be >= 1, got {block_size!r}")
        if capacity_blocks is not None and capacity_blocks < 1:
            raise InvalidArgumentError(f"capacity_blocks must be >= 1 or None (unbounded), got {capacity_blocks!r}")
        base = PRICES.get("vllm", "*")
        price = dataclasses.replace(
            base, input_per_mtok=float(compute_cost_per_mtok), min_cacheable_tokens=block_size
        )
        super().__init__(price, ttft or TTFTModel(overhead_s=0.02))
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks

    @property
    def name(self) -> str:
        return f"vllm:block{self.block_size}"

    def new_state(self) -> OrderedDict[int, None]:
        return OrderedDict()  # block hash, least recently used first

    def lookup(self, state: OrderedDict[int, None], tokens: list[int], at: float,
               breakpoints: list[int] | None) -> tuple[int, int]:
        hashes = _block_hashes(tokens, self.block_size)
        hits = 0
        for h in hashes:
            if h not in state:
                break
            hits += 1
        max_blocks = (len(tokens) - 1) // self.block_size if tokens else 0
        cached = min(hits, max_blocks) * self.block_size
        for h in reversed(hashes):  # head ends most recent, tail least recent
            state[h] = None
            state.move_to_end(h)
        if self.capacity_blocks is not None:
            while len(state) > self.capacity_blocks:
                state.popitem(last=False)
        return cached, 0

    def max_cached(self, total_tokens: int, shared_tokens: int) -> int:
        max_blocks = (total_tokens - 1) // self.block_size if total_tokens else 0
        return min(min(shared_tokens, total_tokens) // self.block_size, max_blocks) * self.block_size

    def describe(self) -> str:
        cap = "unbounded" if self.capacity_blocks is None else f"{self.capacity_blocks:,} blocks"
        return f"vLLM (block {self.block_size}, {cap})"


class LlamaCppPolicy(CachePolicy):
    """A local llama.cpp engine with one KV cache (llama-cpp-python's ``Llama``; one slot of ``llama-server``).

    The cache holds the tokens of the previous request: its prompt and then the reply generated after it, minus
    the last sampled token (the engine samples it but never evaluates it: the stop token, or the last token when
    ``max_tokens`` ran out). A new prompt re-uses the longest common token prefix with that cache, at most
    ``len(prompt) - 1`` tokens (the engine evaluates at least one token to get logits), and evaluates the rest;
    whatever follows the shared prefix is dropped from the cache. One exception (llama-cpp-python 0.3.36): when the
    cache holds exactly the new prompt, nothing is evaluated (the logits of its last token are still live). Only the LATEST sequence is kept: a prompt that
    shares a prefix with an older request but not with the latest one is evaluated in full (no block pool, no
    radix tree; those are :class:`VLLMPolicy` and SGLang).

    ``cached_tokens`` of an outcome is the re-used prefix; ``uncached_tokens`` is what the engine evaluates (its
    ``llama_perf_context(ctx).n_p_eval`` for that prompt). ``keep_output=False`` models an engine that drops the
    generated tokens between requests. No price: ``compute_cost_per_mtok`` is an optional proxy per evaluated token.

    Example:
        >>> sim = PrefixCacheSimulator(LlamaCppPolicy())
        >>> sim.request([1, 2, 3, 4], output_tokens=[9, 8, 2]).uncached_tokens  # cold: every token evaluated
        4
        >>> sim.request([1, 2, 3, 4, 9, 8, 7, 5]).uncached_tokens  # prompt + reply re-used, 7 and 5 evaluated
        2
        >>> sim.request([1, 2, 3, 4, 9, 8, 7]).uncached_tokens  # a prefix of the cache: its last token again
        1
        >>> sim.request([1, 2, 3, 4, 9, 8, 7]).uncached_tokens  # exactly the cache: nothing to evaluate
        0
    """

    provider = "llama.cpp"

    def __init__(
        self,
        *,
        keep_output: bool = True,
        n_ctx: int | None = None,
        compute_cost_per_mtok: float = 0.0,
        ttft: TTFTModel | None = None,
    ) -> None:
        if n_ctx is not None and n_ctx < 1:
            raise ValueError(f"n_ctx must be >= 1 or None (unbounded), got {n_ctx!r}")
        base = PRICES.get("llama.cpp", "*")
        price = dataclasses.replace(base, input_per_mtok=float(compute_cost_per_mtok))
        super().__init__(price, ttft or TTFTModel(overhead_s=0.0, prefill_tokens_per_s=400.0,
                                                  cached_tokens_per_s=float("inf")))
        self.keep_output = keep_output
        self.n_ctx = n_ctx

    @property
    def name(self) -> str:
        return "llama.cpp"

    def new_state(self) -> dict[str, Any]:
        return {"tokens": b""}  # the cached sequence, packed as int64 for C-speed prefix compares

    def lookup(self, state: dict[str, Any], tokens: list[int], at: float,
               breakpoints: list[int] | None) -> tuple[int, int]:
        if self.n_ctx is not None and len(tokens) > self.n_ctx:
            raise ValueError(
                f"prompt of {len(tokens):,} tokens does not fit the context window (n_ctx={self.n_ctx:,}); "
                "the engine refuses it: shorten the prompt or raise n_ctx"
            )
        raw = array("q", tokens).tobytes()
        if tokens and raw == state["tokens"]:
            cached = len(tokens)  # the cache ends exactly here with live logits: sample at once
        else:
            cached = _shared_prefix(state["tokens"], raw[:-8]) if tokens else 0
        state["tokens"] = raw
        return cached, 0

    def after_output(self, state: dict[str, Any], output_tokens: list[int]) -> None:
        if self.keep_output and len(output_tokens) > 1:
            state["tokens"] += array("q", output_tokens[:-1]).tobytes()

    def max_cached(self, total_tokens: int, shared_tokens: int) -> int:
        return max(0, min(shared_tokens, total_tokens - 1))

    def describe(self) -> str:
        keep = "prompt + reply" if self.keep_output else "prompt only"
        return f"llama.cpp (one KV cache: longest common prefix with the last {keep})"


# ------------------------------------------------------------------------------------------------
# Simulator
# ------------------------------------------------------------------------------------------------
@dataclass
class PrefixCacheSimulator:
    """Replays requests through one policy, keeping the cache state between them.

    ``at`` is the request time in seconds (any origin; must not go backwards). Without ``at``, a request happens at
    the time of the previous one.

    Example:
        >>> sim = PrefixCacheSimulator(OpenAIPolicy(model="gpt-5"))
        >>> sim.request(list(range(1000)), at=0).cached_tokens  # below 1,024 tokens: never cached
        0
        >>> sim.summary().requests
        1
    """

    policy: CachePolicy
    outcomes: list[CacheOutcome] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.policy, CachePolicy):
            raise ArgumentTypeError(f"PrefixCacheSimulator takes a CachePolicy, got {type(self.policy).__name__}")
        self._state = self.policy.new_state()
        self._now = 0.0

    def request(
        self,
        tokens: Sequence[int],
        *,
        at: float | None = None,
        breakpoints: Sequence[int] | None = None,
        output_tokens: Sequence[int] | None = None,
    ) -> CacheOutcome:
        """Send one prompt (token ids). ``breakpoints`` are prefix lengths (Anthropic only; ignored elsewhere).

        ``output_tokens`` are the tokens the model generated for this prompt, in order, the stop token included;
        policies of engines that keep them in the cache (:class:`LlamaCppPolicy`) use them, the others ignore them.
        """
        seq = _check_tokens(tokens)
        output = _check_tokens(output_tokens) if output_tokens is not None else None
        if at is None:
            at = self._now
        if at < self._now:
            raise InvalidArgumentError(f"requests must be in time order: at={at} is before the previous request ({self._now})")
        self._now = float(at)
        points = list(breakpoints) if breakpoints is not None else None
        if points is not None and not self.policy.explicit:
            points = None
        cached, written = self.policy.lookup(self._state, seq, self._now, points)
        if output:
            self.policy.after_output(self._state, output)
        total = len(seq)
        uncached = total - cached
        outcome = CacheOutcome(
            at=self._now,
            total_tokens=total,
            cached_tokens=cached,
            uncached_tokens=uncached,
            cache_write_tokens=written,
            cost_usd=self.policy.cost(total, cached, written),
            cost_without_cache_usd=self.policy.cost(total, 0, 0),
            ttft_s=self.policy.ttft.estimate(uncached, cached),
            ttft_without_cache_s=self.policy.ttft.estimate(total, 0),
        )
        self.outcomes.append(outcome)
        return outcome

    def summary(self) -> SimulationSummary:
        n = len(self.outcomes)
        return SimulationSummary(
            policy=self.policy.describe(),
            requests=n,
            input_tokens=sum(o.total_tokens for o in self.outcomes),
            cached_tokens=sum(o.cached_tokens for o in self.outcomes),
            cache_write_tokens=sum(o.cache_write_tokens for o in self.outcomes),
            cost_usd=sum(o.cost_usd for o in self.outcomes),
            cost_without_cache_usd=sum(o.cost_without_cache_usd for o in self.outcomes),
            mean_ttft_s=sum(o.ttft_s for o in self.outcomes) / n if n else 0.0,
            mean_ttft_without_cache_s=sum(o.ttft_without_cache_s for o in self.outcomes) / n if n else 0.0,
        )

    def reset(self) -> None:
        """Empty the cache and forget every outcome."""
        self._state = self.policy.new_state()
        self._now = 0.0
        self.outcomes.clear()


def theoretical_max_cached(requests: Sequence[Sequence[int]], policy: CachePolicy) -> list[int]:
    """Per request, the most any cache could serve: the longest prefix it shares with ANY earlier request,
    rounded down to the policy's granularity, and 0 when the prompt or that prefix is below the policy's minimum
    (``policy.max_cached``). Breakpoint placement, TTLs and capacity are ignored: this is the ceiling.

    Example:
        >>> theoretical_max_cached([list(range(1500)), list(range(1300)) + [-1]], OpenAIPolicy())
        [0, 1280]
    """
    earlier: list[bytes] = []
    out: list[int] = []
    for tokens in requests:
        seq = _check_tokens(tokens)
        raw = array("q", seq).tobytes()
        shared = 0
        for other in reversed(earlier):  # the latest request usually shares the most
            probe = (shared + 1) * 8
            if len(other) < probe or len(raw) < probe or raw[:probe] != other[:probe]:
                continue  # cannot beat the best so far
            shared = _shared_prefix(raw, other)
        out.append(policy.max_cached(len(seq), shared))
        earlier.append(raw)
    return out
