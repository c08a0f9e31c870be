"""Token accounting: what the fence, the tool schemas, the snapshot and the recall cost.

:class:`TokenCounter` counts with tiktoken. :class:`TokenReport` measures a live
:class:`~ironmem.core.manager.Session` and answers "what if N external providers were allowed" (the schema growth that rule 1 prevents).

How tool schemas are counted: each tool is converted with :meth:`ToolSchema.to_openai` or
:meth:`ToolSchema.to_anthropic` and serialized the way the official ``openai`` and ``anthropic`` Python SDKs put it
on the wire: ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))`` (compact JSON, UTF-8, no spaces; both
SDKs and httpx >= 0.28 use these settings). The providers then render tools into their own internal prompt format,
so the billed count differs from the JSON count by a few tokens per tool; the JSON count is the stable, reproducible
measure, and it is what grows when more tools are added.

Offline use: tiktoken downloads its encoding files on first use and caches each one under ``TIKTOKEN_CACHE_DIR``
with a file name equal to the SHA-1 of the download URL (:func:`tiktoken_cache_filename` gives it). Without network
access and without that file, :class:`TokenCounter` counts with ironmem's offline estimate
(:mod:`ironmem.core.token_estimate`) and says so (``exact`` False, ``method``, a label in every report); point
``TIKTOKEN_CACHE_DIR`` at a folder holding the file for exact figures.

Example:
    >>> counter = TokenCounter()
    >>> counter.count("hello world")
    2
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.errors import ArgumentTypeError, EncodingUnavailableError, InvalidArgumentError
from ..core.fence import fence_overhead_text
from ..core.provider import ToolSchema
from ..core.token_estimate import decode_ids, estimate_ids

__all__ = [
    "TokenCounter",
    "TokenReport",
    "ToolTokens",
    "WhatIfRow",
    "serialize_json",
    "tiktoken_cache_filename",
    "ENCODING_URLS",
]

ToolFormat = Literal["openai", "anthropic"]

_BLOB = "https://openaipublic.blob.core.windows.net/encodings"
#: Where tiktoken 0.7-0.14 downloads each encoding from (see ``tiktoken_ext/openai_public.py``).
#: ``o200k_harmony`` is built from the o200k_base file.
ENCODING_URLS: dict[str, str] = {
    "o200k_base": f"{_BLOB}/o200k_base.tiktoken",
    "o200k_harmony": f"{_BLOB}/o200k_base.tiktoken",
    "cl100k_base": f"{_BLOB}/cl100k_base.tiktoken",
    "p50k_base": f"{_BLOB}/p50k_base.tiktoken",
    "p50k_edit": f"{_BLOB}/p50k_base.tiktoken",
    "r50k_base": f"{_BLOB}/r50k_base.tiktoken",
}

_ESTIMATE_RULE = "figures are ironmem's offline estimate (about 15-25% above o200k_base on English)"

#: Per-message framing of OpenAI's chat format (from OpenAI's token-counting cookbook): every message costs
#: 3 tokens of framing, a ``name`` field 1 more, and the reply is primed with 3 tokens.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3


def tiktoken_cache_filename(encoding: str) -> str:
    """The file name tiktoken looks for in ``TIKTOKEN_CACHE_DIR`` for ``encoding`` (SHA-1 of the blob URL).

    Example:
        >>> tiktoken_cache_filename("o200k_base")
        'fb374d419588a4632f3f557e76b4b70aebbca790'
    """
    try:
        url = ENCODING_URLS[encoding]
    except KeyError:
        known = ", ".join(sorted(ENCODING_URLS))
        raise InvalidArgumentError(f"unknown tiktoken encoding {encoding!r}; known encodings: {known}") from None
    return hashlib.sha1(url.encode()).hexdigest()


def serialize_json(obj: Any) -> str:
    """Compact JSON as the ``openai``/``anthropic`` SDKs send it (no spaces, non-ASCII kept as is)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


_ENCODINGS: dict[tuple[str, str], Any] = {}  # (encoding, cache dir) -> tiktoken Encoding or the error it raised
_ENCODINGS_LOCK = threading.Lock()


def _cache_dir_hint() -> str:
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return os.environ["TIKTOKEN_CACHE_DIR"]
    if os.environ.get("DATA_GYM_CACHE_DIR"):
        return os.environ["DATA_GYM_CACHE_DIR"]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _load_encoding(name: str) -> Any:
    """The tiktoken encoding ``name``, loaded once per process and cache folder (a failure is remembered too, so
    an offline process tries the network once). Threads asking at the same time wait for the one load."""
    key = (name, _cache_dir_hint())
    with _ENCODINGS_LOCK:
        if key not in _ENCODINGS:
            _ENCODINGS[key] = _try_load(name)
        found = _ENCODINGS[key]
    if isinstance(found, Exception):
        raise found
    return found


def _try_load(name: str) -> Any:
    try:
        import tiktoken
    except ImportError:  # pragma: no cover - tiktoken is a hard dependency
        return EncodingUnavailableError(
            "tiktoken is not installed; install it with `pip install tiktoken` (ironmem depends on it)"
        )
    try:
        return tiktoken.get_encoding(name)
    except ValueError as exc:
        if "Unknown encoding" in str(exc):
            return InvalidArgumentError(
                f"unknown tiktoken encoding {name!r}; use 'o200k_base' (GPT-4o and later) or 'cl100k_base'"
            )
        return _unavailable(name, exc)
    except Exception as exc:  # network errors (requests.ConnectionError is an OSError), hash mismatch...
        return _unavailable(name, exc)


def _unavailable(name: str, exc: BaseException) -> EncodingUnavailableError:
    where = _cache_dir_hint()
    if name in ENCODING_URLS:
        file_hint = (
            f"tiktoken looks for the file {os.path.join(where, tiktoken_cache_filename(name))} "
            f"(the SHA-1 of {ENCODING_URLS[name]}, which is the file to put there)"
        )
    else:
        file_hint = f"tiktoken looks for it under {where}, named by the SHA-1 of its download URL"
    return EncodingUnavailableError(
        f"cannot load the tiktoken encoding {name!r} ({type(exc).__name__}: {exc}). Without network access, set "
        f"TIKTOKEN_CACHE_DIR to a folder that holds the encoding file; {file_hint}."
    )


class _EstimateEncoding:
    """The offline estimate (:mod:`ironmem.core.token_estimate`) behind tiktoken's ``encode``/``decode``."""

    def encode(self, text: str, disallowed_special: Any = ()) -> list[int]:
        return estimate_ids(text)

    def decode(self, tokens: list[int]) -> str:
        return decode_ids(tokens)


class TokenCounter:
    """Counts tokens with a tiktoken encoding (``o200k_base`` by default; ``cl100k_base`` for older models).

    Offline, when tiktoken can neither find the encoding file in ``TIKTOKEN_CACHE_DIR`` nor download it, the
    counter falls back to ironmem's offline estimate (:mod:`ironmem.core.token_estimate`): ``exact`` is then
    False and ``method`` says why and which file to add. Every report built on the counter carries the label.
    ``require_exact=True`` raises :class:`~ironmem.core.errors.EncodingUnavailableError` instead.

    Example:
        >>> counter = TokenCounter("o200k_base")
        >>> counter.count("The user prefers metric units.") in (6, 8)  # exact: 6; the offline estimate: 8
        True
        >>> counter.count_tool(ToolSchema("echo", "Echo text back.")) > 0
        True
    """

    def __init__(self, encoding: str = "o200k_base", *, require_exact: bool = False) -> None:
        if not isinstance(encoding, str) or not encoding:
            raise InvalidArgumentError(f"encoding must be a tiktoken encoding name such as 'o200k_base', got {encoding!r}")
        self.encoding_name = encoding
        try:
            self._encoding = _load_encoding(encoding)
        except EncodingUnavailableError as exc:
            if require_exact or encoding not in ENCODING_URLS:
                raise
            self._encoding = _EstimateEncoding()
            self.exact = False
            self.method = f"estimate: {encoding} is not available offline, {_ESTIMATE_RULE} ({exc})"
        else:
            self.exact = True
            self.method = f"tiktoken {encoding}"

    @property
    def label(self) -> str:
        """The encoding's name, marked as an estimate when it is one (for report titles)."""
        return self.encoding_name if self.exact else f"{self.encoding_name} unavailable offline: ESTIMATES"

    @classmethod
    def for_model(cls, model: str) -> TokenCounter:
        """The counter for an OpenAI model name (``gpt-4o`` -> o200k_base, ``gpt-4`` -> cl100k_base).

        Unknown models (including non-OpenAI ones, whose tokenizers are not public) fall back to o200k_base, which
        is then an approximation.
        """
        try:
            import tiktoken

            name = tiktoken.encoding_name_for_model(model)
        except Exception:
            name = "o200k_base"
        return cls(name)

    # -- text -----------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``. Special-token strings such as ``<|endoftext|>`` are encoded as plain text."""
        if not isinstance(text, str):
            raise ArgumentTypeError(f"encode() takes a str, got {type(text).__name__}")
        return self._encoding.encode(text, disallowed_special=())

    def count(self, text: str) -> int:
        """Number of tokens in ``text`` ("" -> 0)."""
        return len(self.encode(text)) if text else 0

    def decode(self, tokens: Sequence[int]) -> str:
        return self._encoding.decode(list(tokens))

    # -- JSON and tools -------------------------------------------------------------------------
    def count_json(self, obj: Any) -> int:
        """Tokens of ``obj`` serialized as compact JSON (see :func:`serialize_json`)."""
        return self.count(serialize_json(obj))

    def count_tool(self, schema: ToolSchema, format: ToolFormat = "openai") -> int:
        """Tokens of one tool as sent: ``format="openai"`` (function tool) or ``"anthropic"`` (Messages API)."""
        return self.count_json(_tool_payload(schema, format))

    def count_tools(self, schemas: Iterable[ToolSchema], format: ToolFormat = "openai") -> int:
        """Tokens of the ``tools`` array as sent (``[tool,tool,...]``, brackets and commas included)."""
        payload = [_tool_payload(schema, format) for schema in schemas]
        return self.count_json(payload) if payload else 0

    # -- messages -------------------------------------------------------------------------------
    def count_messages(self, messages: Iterable[Mapping[str, Any]], *, reply_priming: bool = True) -> int:
        """Estimate of the prompt tokens of chat ``messages`` in OpenAI's chat format.

        Each message is ``{"role": ..., "content": str | list of {"type": "text", "text": ...}}`` with an optional
        ``name``. Content tokens plus :data:`TOKENS_PER_MESSAGE` per message, :data:`TOKENS_PER_NAME` per name and
        :data:`REPLY_PRIMING_TOKENS` once (the method from OpenAI's cookbook; exact for gpt-4o-era models, an
        estimate for others).
        """
        total = 0
        for message in messages:
            if not isinstance(message, Mapping):
                raise ArgumentTypeError(
                    f"each message must be a dict with 'role' and 'content', got {type(message).__name__}"
                )
            total += TOKENS_PER_MESSAGE + self.count(str(message.get("role", "")))
            total += self.count(_content_text(message.get("content")))
            if message.get("name"):
                total += TOKENS_PER_NAME + self.count(str(message["name"]))
        return total + (REPLY_PRIMING_TOKENS if reply_priming else 0)

    def __repr__(self) -> str:
        return f"TokenCounter({self.encoding_name!r})" if self.exact else f"TokenCounter({self.encoding_name!r}, estimate)"


def _tool_payload(schema: ToolSchema, format: ToolFormat) -> dict[str, Any]:
    if format == "openai":
        return schema.to_openai()
    if format == "anthropic":
        return schema.to_anthropic()
    raise InvalidArgumentError(f"format must be 'openai' or 'anthropic', got {format!r}")


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "".join(parts)
    return str(content)


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolTokens:
    """One tool's size as sent, in both formats."""

    name: str
    provider: str
    openai: int
    anthropic: int


@dataclass(frozen=True)
class WhatIfRow:
    """The tool payload if ``external_providers`` external providers were active beside the built-in one."""

    external_providers: int
    tools: int
    openai: int
    anthropic: int
    allowed: bool  # rule 1 allows at most one external provider

    def to_dict(self) -> dict[str, Any]:
        return {
            "external_providers": self.external_providers,
            "tools": self.tools,
            "openai_tokens": self.openai,
            "anthropic_tokens": self.anthropic,
            "allowed": self.allowed,
        }


@dataclass(frozen=True)
class TokenReport:
    """What memory costs in a session's requests, in tokens.

    Build it with :meth:`for_session`. All counts use one encoding (``encoding``).

    Example:
        >>> import tempfile
        >>> from ironmem import MemoryManager
        >>> session = MemoryManager(home=tempfile.mkdtemp()).start_session("s1")
        >>> report = TokenReport.for_session(session, TokenCounter())
        >>> report.fence_overhead > 0, report.tools_openai > 0
        (True, True)
        >>> print(report.to_table())  # doctest: +ELLIPSIS
        ironmem token report (encoding o200k_base)...
    """

    encoding: str
    fence_overhead: int
    tools: tuple[ToolTokens, ...]
    tools_openai: int  # the whole tools array as sent, per format
    tools_anthropic: int
    snapshot: int
    snapshot_chars: int
    last_recall: int | None  # None when the session has not recalled yet
    last_recall_items: int
    what_if: tuple[WhatIfRow, ...] = ()
    what_if_source: str = ""
    providers: dict[str, dict[str, int]] = field(default_factory=dict)
    exact: bool = True  # False: the encoding was not available offline and the figures are estimates
    method: str = ""  # how the figures were counted (the counter's ``method``)

    # -- building -------------------------------------------------------------------------------
    @classmethod
    def for_session(
        cls,
        session: Any,
        counter: TokenCounter | None = None,
        *,
        what_if: Sequence[Sequence[ToolSchema]] | None = None,
        max_external: int = 4,
    ) -> TokenReport:
        """Measure ``session`` (a :class:`~ironmem.core.manager.Session`).

        ``what_if`` is a list of external providers' tool lists, one list per provider. Row *k* of the what-if
        table adds the first *k* lists to the session's built-in tools (cycling when *k* exceeds their number).
        Without ``what_if`` it uses the session's external provider if one is active, else the providers
        registered under the ``ironmem.providers`` entry point that can be built without arguments; ``max_external``
        sets the number of rows then.
        """
        counter = counter or TokenCounter()
        if max_external < 1:
            raise InvalidArgumentError(f"max_external must be >= 1, got {max_external!r}")
        schemas = list(session.tool_schemas())
        tools = tuple(
            ToolTokens(s.name, s.provider or "", counter.count_tool(s, "openai"), counter.count_tool(s, "anthropic"))
            for s in schemas
        )
        providers: dict[str, dict[str, int]] = {}
        for tool in tools:
            row = providers.setdefault(tool.provider or "(unnamed)", {"tools": 0, "openai": 0, "anthropic": 0})
            row["tools"] += 1
            row["openai"] += tool.openai
            row["anthropic"] += tool.anthropic
        snapshot = session.system_prompt_block()
        recall = getattr(session, "last_recall", None)
        last_recall = counter.count(recall.fenced()) if recall is not None else None
        items = len(getattr(recall, "items", ()) or ()) if recall is not None else 0

        external = getattr(getattr(session, "manager", None), "external", None)
        builtin = [s for s in schemas if external is None or s.provider != external.name]
        sets, source = _what_if_sets(schemas, external, what_if)
        rows = _what_if_rows(counter, builtin, sets, len(sets) if what_if is not None else max_external)
        return cls(
            encoding=counter.encoding_name,
            fence_overhead=counter.count(fence_overhead_text()),
            tools=tools,
            tools_openai=counter.count_tools(schemas, "openai"),
            tools_anthropic=counter.count_tools(schemas, "anthropic"),
            snapshot=counter.count(snapshot),
            snapshot_chars=len(snapshot),
            last_recall=last_recall,
            last_recall_items=items,
            what_if=rows,
            what_if_source=source,
            providers=providers,
            exact=counter.exact,
            method=counter.method,
        )

    # -- output ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return {
            "encoding": self.encoding,
            "exact": self.exact,
            "counting": self.method,
            "fence_overhead_tokens": self.fence_overhead,
            "tools": [
                {"name": t.name, "provider": t.provider, "openai_tokens": t.openai, "anthropic_tokens": t.anthropic}
                for t in self.tools
            ],
            "tools_by_provider": {
                name: {"tools": row["tools"], "openai_tokens": row["openai"], "anthropic_tokens": row["anthropic"]}
                for name, row in self.providers.items()
            },
            "tools_total": {"openai_tokens": self.tools_openai, "anthropic_tokens": self.tools_anthropic},
            "snapshot_tokens": self.snapshot,
            "snapshot_chars": self.snapshot_chars,
            "last_recall_tokens": self.last_recall,
            "last_recall_items": self.last_recall_items,
            "what_if": [row.to_dict() for row in self.what_if],
            "what_if_source": self.what_if_source,
            "tool_serialization": "compact JSON as sent by the openai/anthropic SDKs",
        }

    def to_table(self) -> str:
        """A plain-text table (fixed-width columns)."""
        lines = [f"ironmem token report (encoding {self.encoding})"]
        if not self.exact:
            lines.append(f"ESTIMATES: {self.method}")
        lines.append("")
        w = max([len(t.name) for t in self.tools] + [len(p) for p in self.providers] + [24])
        lines.append(f"{'item':<{w}}  {'openai':>8}  {'anthropic':>9}")
        lines.append("-" * (w + 21))
        lines.append(f"{'fence overhead':<{w}}  {self.fence_overhead:>8,}  {self.fence_overhead:>9,}")
        lines.append(f"{'frozen snapshot':<{w}}  {self.snapshot:>8,}  {self.snapshot:>9,}")
        recall = "-" if self.last_recall is None else f"{self.last_recall:,}"
        lines.append(f"{'last recall (fenced)':<{w}}  {recall:>8}  {recall:>9}")
        lines.append("")
        lines.append(f"{'tool (provider)':<{w}}  {'openai':>8}  {'anthropic':>9}")
        lines.append("-" * (w + 21))
        for t in self.tools:
            label = f"{t.name} ({t.provider})" if t.provider else t.name
            lines.append(f"{label:<{w}}  {t.openai:>8,}  {t.anthropic:>9,}")
        for name, row in self.providers.items():
            label = f"= {name}: {row['tools']} tools"
            lines.append(f"{label:<{w}}  {row['openai']:>8,}  {row['anthropic']:>9,}")
        lines.append(f"{'= tools array as sent':<{w}}  {self.tools_openai:>8,}  {self.tools_anthropic:>9,}")
        if self.what_if:
            lines.append("")
            lines.append(f"what if N external providers were allowed ({self.what_if_source})")
            lines.append(f"{'N':>3}  {'tools':>5}  {'openai':>8}  {'anthropic':>9}  rule 1")
            for what in self.what_if:
                verdict = "allowed" if what.allowed else "refused"
                lines.append(
                    f"{what.external_providers:>3}  {what.tools:>5}  {what.openai:>8,}  {what.anthropic:>9,}  {verdict}"
                )
        elif self.what_if_source:
            lines.append("")
            lines.append(f"what-if: {self.what_if_source}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_table()


def _what_if_sets(
    schemas: list[ToolSchema], external: Any, explicit: Sequence[Sequence[ToolSchema]] | None
) -> tuple[list[list[ToolSchema]], str]:
    if explicit is not None:
        sets = [list(s) for s in explicit]
        for i, group in enumerate(sets):
            for schema in group:
                if not isinstance(schema, ToolSchema):
                    raise ArgumentTypeError(
                        f"what_if[{i}] must be a list of ToolSchema (one list per provider), "
                        f"got an item of type {type(schema).__name__}"
                    )
        return sets, "explicit schemas" if sets else "none given"
    if external is not None:
        own = [s for s in schemas if s.provider == external.name]
        return [own], f"copies of the active external provider {external.name!r}"
    found = _registered_provider_schemas()
    if found:
        names = ", ".join(name for name, _ in found)
        return [group for _, group in found], f"registered providers: {names}, in turn"
    return [], "no external provider schemas available: pass what_if=[[ToolSchema, ...], ...]"


def _what_if_rows(
    counter: TokenCounter, builtin: list[ToolSchema], sets: list[list[ToolSchema]], n: int
) -> tuple[WhatIfRow, ...]:
    if not sets:
        return ()
    rows = []
    for k in range(0, n + 1):
        tools = list(builtin)
        for i in range(k):
            tools.extend(sets[i % len(sets)])
        rows.append(
            WhatIfRow(k, len(tools), counter.count_tools(tools, "openai"), counter.count_tools(tools, "anthropic"),
                      allowed=k <= 1)
        )
    return tuple(rows)


def _registered_provider_schemas() -> list[tuple[str, list[ToolSchema]]]:
    """Tool schemas of providers registered under the ``ironmem.providers`` entry point group.

    Only providers that can be constructed without arguments are used; any failure skips the provider.
    """
    from importlib.metadata import entry_points

    out: list[tuple[str, list[ToolSchema]]] = []
    try:
        eps = entry_points(group="ironmem.providers")
    except Exception:  # pragma: no cover - broken metadata
        return out
    for ep in eps:
        try:
            provider = ep.load()()
            group = [s for s in provider.tool_schemas() if isinstance(s, ToolSchema)]
        except Exception:
            continue
        try:
            provider.shutdown()
        except Exception:
            pass
        if group:
            out.append((getattr(provider, "name", ep.name) or ep.name, group))
    return out
