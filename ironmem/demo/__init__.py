"""The logic behind ``ironmem demo`` and ``ironmem simulate`` (the CLI only parses options and prints).

``run_demo`` runs a scripted two-session conversation through a real agent loop - LangChain's ``create_agent``
with :class:`~ironmem.adapters.langchain.IronMemoryMiddleware`, or LlamaIndex's ``FunctionAgent`` with
:class:`~ironmem.adapters.llama_index.IronMemory` - on the built-in memory in a temporary home. The model is
scripted (no API key, no server) unless ``model="provider:name"`` names a real one. It records every request the
model received and reports:

- the system prompt hash of each request (constant within a session: rule 3),
- the fenced recall of each turn (rule 2), including the write made earlier in the same session (live delta),
- the memory write (the tool call and its result),
- the next session's frozen snapshot, which now holds the write,
- the token report (fence overhead, tool schemas, snapshot) and a prefix-cache simulation over the demo's real
  recorded requests (OpenAI, Anthropic and vLLM policies); with a real model, the cached tokens the provider
  reported.

``framework="plain"`` runs the same script on the core API alone (``Session``; no framework installed), building
each request the way the adapters do.

The package: :mod:`~ironmem.demo.script` (the conversation), :mod:`~ironmem.demo.records` (what was observed),
one runner per framework (:mod:`~ironmem.demo.langchain`, :mod:`~ironmem.demo.llama_index`,
:mod:`~ironmem.demo.plain`), :mod:`~ironmem.demo.models` (the model choice), :mod:`~ironmem.demo.run`
(``run_demo``), :mod:`~ironmem.demo.cache` (cache simulation, ``run_simulation``) and
:mod:`~ironmem.demo.render` (printing).

``run_simulation`` replays a longer scripted session (:mod:`ironmem.analysis.replay`) under the four memory strategies
and each provider policy.

Example:
    >>> result = run_demo(console=None)  # doctest: +SKIP
    >>> len({r.system_hash for r in result.requests if r.session == 1})  # doctest: +SKIP
    1
"""

from __future__ import annotations

from .cache import parse_policy, run_simulation, simulate_requests
from .models import MODEL_KEYS
from .records import DemoRequest, DemoResult, DemoTurn
from .render import print_demo, print_token_report
from .run import run_demo
from .script import SCRIPT, DemoError

__all__ = [
    "MODEL_KEYS",
    "SCRIPT",
    "DemoError",
    "DemoRequest",
    "DemoResult",
    "DemoTurn",
    "parse_policy",
    "print_demo",
    "print_token_report",
    "run_demo",
    "run_simulation",
    "simulate_requests",
]
