"""Which chat model the LangChain demo runs: the scripted one, a real one (``provider:name``) or ``local``."""

from __future__ import annotations

import os
from typing import Any

from .script import SCRIPT, DemoError, ToolStep

#: Environment variable holding the API key of each supported ``--model`` provider.
MODEL_KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
#: The LangChain integration package of each provider.
MODEL_PACKAGES = {"openai": "langchain-openai", "anthropic": "langchain-anthropic"}


def parse_model(model: str) -> tuple[str, str]:
    provider, sep, name = model.partition(":")
    provider = provider.strip().lower()
    if not sep or not name.strip():
        raise DemoError(
            f"--model must be provider:name, such as openai:gpt-4.1-mini or anthropic:claude-sonnet-4-5 (got {model!r})"
        )
    if provider not in MODEL_KEYS:
        raise DemoError(
            f"unknown model provider {provider!r} in --model {model!r}; the demo supports "
            f"{', '.join(sorted(MODEL_KEYS))}"
        )
    return provider, name.strip()


#: ``--model local``: SmolLM2-135M-Instruct on llama.cpp in this process (extra ``ironmem[local]``).
LOCAL_MODEL = "local"


def is_local(model: str | None) -> bool:
    return model is not None and model.strip().lower() == LOCAL_MODEL


def check_local() -> None:
    from ..local import LOCAL_EXTRA_HINT, LocalModelUnavailableError, find_model_path, llama_cpp_available

    if not llama_cpp_available():
        raise DemoError(f"--model local needs llama-cpp-python: {LOCAL_EXTRA_HINT}")
    try:
        find_model_path()
    except LocalModelUnavailableError as exc:
        raise DemoError(f"--model local: {exc}") from None


def local_chat_model() -> Any:
    """The local model for the LangChain demo: the script's tool calls are scripted, the model writes the rest."""
    from ..local import LocalModel
    from ..testing.local_model import LocalChatModel

    calls = {t.user: [{"name": s.name, "args": s.args} for s in t.steps if isinstance(s, ToolStep)] for t in SCRIPT}

    def script(messages: list[dict[str, Any]]) -> Any:
        # Script the tool call when a turn that has one starts (the last message is the user's); else the model.
        last = messages[-1] if messages else {}
        if last.get("role") != "user":
            return None
        return next((c for user, c in calls.items() if c and str(last.get("content", "")).endswith(user)), None)

    return LocalChatModel(model=LocalModel(n_ctx=8192), max_tokens=64, script=script)


def real_model(model: str) -> Any:
    if is_local(model):
        return local_chat_model()
    provider, name = parse_model(model)
    key = MODEL_KEYS[provider]
    if not os.environ.get(key):
        raise DemoError(
            f"--model {model} needs an API key: set {key} (or run the demo without --model, offline)"
        )
    try:
        from langchain.chat_models import init_chat_model

        return init_chat_model(f"{provider}:{name}")
    except ImportError as exc:
        raise DemoError(
            f"--model {model} needs the {MODEL_PACKAGES[provider]} package: pip install {MODEL_PACKAGES[provider]}"
        ) from exc


