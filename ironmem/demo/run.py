"""``run_demo``: the two-session demo on one framework, its token report and cache simulation."""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from ..core.manager import MemoryManager
from .cache import assign_times, simulate_requests
from .langchain import run_langchain
from .llama_index import run_llama_index
from .models import MODEL_KEYS, check_local, is_local, parse_model
from .plain import run_plain
from .records import DemoResult
from .render import print_demo
from .script import SCRIPT, DemoError

#: ``plain`` drives the core API directly (no framework needed); the others run a real agent loop.
FRAMEWORKS = ("langchain", "llama-index", "plain")

def _check_framework(framework: str) -> None:
    """Fail with the install command when the framework's extra is missing."""
    import importlib.util

    needed = {"langchain": ("langchain", "langgraph"), "llama-index": ("llama_index.core",), "plain": ()}[framework]
    for module in needed:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            extra = "langchain" if framework == "langchain" else "llama-index"
            other = "llama-index" if framework == "langchain" else "langchain"
            raise DemoError(
                f'the {framework} demo needs {module.split(".")[0]}: pip install "ironmem[{extra}]" '
                f"(or run --framework {other} if that one is installed, or --framework plain without a framework)"
            )


def run_demo(
    framework: str = "langchain",
    model: str | None = None,
    home: str | Path | None = None,
    console: Any = None,
    as_json: bool = False,
    chat_model: Any = None,
) -> DemoResult:
    """Run the two-session demo and print it to ``console`` (a rich Console), or as JSON with ``as_json``.

    ``home`` defaults to a temporary folder (removed afterwards). ``chat_model`` runs the LangChain demo with a
    chat model object you built (a real one, or any model reporting usage) instead of ``model="provider:name"``;
    the usage it reports is then collected as for a real model. Raises :class:`DemoError` for bad input.
    """
    from ..analysis.tokens import TokenCounter, TokenReport

    if framework not in FRAMEWORKS:
        raise DemoError(f"unknown framework {framework!r}; use langchain, llama-index or plain")
    if (model is not None or chat_model is not None) and framework != "langchain":
        raise DemoError(f"--model runs with the LangChain demo only; drop --framework {framework}")
    if is_local(model):
        check_local()
    elif model is not None:
        if framework != "langchain":
            raise DemoError(f"--model runs with the LangChain demo only; drop --framework {framework}")
        parse_model(model)
        key = MODEL_KEYS[parse_model(model)[0]]
        if not os.environ.get(key):
            raise DemoError(
                f"--model {model} needs an API key: set {key} (or run the demo without --model, offline)"
            )
    # Offline without TIKTOKEN_CACHE_DIR the counter estimates; the report says so.
    counter = TokenCounter()
    started = time.perf_counter()
    tmp = None
    if home is None:
        tmp = tempfile.TemporaryDirectory(prefix="ironmem-demo-")
        home = tmp.name
    # Fixed session ids in a fresh temporary home (reproducible output); unique ones in a home that may hold
    # earlier demo runs, so their turns stay apart.
    tag = uuid.uuid4().hex[:6] if tmp is None else "run"
    try:
        with MemoryManager(home=home) as manager:
            meter = None
            _check_framework(framework)
            if framework == "langchain":
                requests, turns, meter = run_langchain(manager, model, tag, chat_model)
            elif framework == "llama-index":
                requests, turns = run_llama_index(manager, tag)
            else:
                requests, turns = run_plain(manager, tag)
            assign_times(requests)
            snapshots: dict[int, str] = {}
            for request in requests:
                snapshots.setdefault(
                    request.session, request.system_blocks[-1] if request.system_blocks else ""
                )
            report_session = manager.start_session(f"demo-{tag}-report", user_id="ada")
            report_session.prefetch(SCRIPT[-1].user)
            report = TokenReport.for_session(report_session, counter)
            report_session.end()
        result = DemoResult(
            framework=framework,
            model=model or (type(chat_model).__name__ if chat_model is not None else "scripted (offline)"),
            home=str(home) if tmp is None else "(temporary folder, removed)",
            turns=turns,
            requests=requests,
            snapshots=snapshots,
            token_report=report,
            cache=simulate_requests(requests, counter=counter),
            usage=meter.to_dict() if meter is not None else None,
            tokens_estimated=None if counter.exact else counter.method,
        )
    finally:
        if tmp is not None:
            tmp.cleanup()
    result.seconds = time.perf_counter() - started
    if as_json:
        import sys

        sys.stdout.write(json.dumps(result.to_dict(), ensure_ascii=False, indent=2) + "\n")
    elif console is not None:
        print_demo(result, console)
    return result


