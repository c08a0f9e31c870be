"""The token figures the docs quote, measured now: the same numbers ``ironmem tokens`` prints.

A page marks each generated region with HTML comments (invisible on the rendered page)::

    <!-- figures: NAME -->
    ...generated text...
    <!-- /figures -->

Usage (from the repository root)::

    python tools/doc_figures.py            # rewrite the regions in docs/*.md with fresh figures
    python tools/doc_figures.py --check    # exit 1, naming each stale region (the tests run this)

The docs build runs it too (``mkdocs.yml`` hooks: :func:`on_page_markdown`), so a built site never shows a stale
figure, and tests/test_docs.py fails when a committed page disagrees with the code. The figures need tiktoken's
``o200k_base`` file (``TIKTOKEN_CACHE_DIR``); without it nothing is rewritten (estimates never land in the docs).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

REGION = re.compile(r"(<!-- figures: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /figures -->)", re.S)


def _report(external: int = 4) -> Any:
    """``ironmem tokens`` on an empty memory home: the report whose figures the docs quote."""
    from ironmem import MemoryManager
    from ironmem.analysis import TokenCounter, TokenReport

    counter = TokenCounter("o200k_base", require_exact=True)
    with tempfile.TemporaryDirectory(prefix="ironmem-figures-") as home, MemoryManager(home=home) as manager:
        session = manager.start_session("figures")
        report = TokenReport.for_session(session, counter, max_external=external)
        session.end()
    return report


def _builtin_table(report: Any) -> str:
    tools = {t.name: t for t in report.tools}
    rows = [
        ("fence overhead: `<memory-context>` tags + system note, per recall", report.fence_overhead,
         report.fence_overhead),
        *[(f"`{name}` tool", t.openai, t.anthropic) for name, t in tools.items()],
        ("built-in tools array, as sent", report.tools_openai, report.tools_anthropic),
        ("frozen snapshot of an empty memory", report.snapshot, report.snapshot),
    ]
    lines = ["| item | OpenAI format | Anthropic format |", "|---|---:|---:|"]
    lines += [f"| {label} | {a:,} | {b:,} |" for label, a, b in rows]
    return "\n".join(lines) + "\n"


def _what_if(report: Any) -> str:
    rows = report.what_if
    if len(rows) < 3:
        return "(no registered providers to add: install the provider extras, `pip install -e '.[all]'`)\n"
    refused = [f"{r.openai:,}" for r in rows[2:]]
    words = {2: "two", 3: "three", 4: "four", 5: "five"}
    counts = [words.get(r.external_providers, str(r.external_providers)) for r in rows[2:]]
    then = ", ".join(refused[:-1]) + f" and {refused[-1]}" if len(refused) > 1 else refused[0]
    with_n = ", ".join(counts[:-1]) + f" and {counts[-1]}" if len(counts) > 1 else counts[0]
    return (f"Rule 1 in numbers (`ironmem tokens`, the what-if table; {report.what_if_source}): the tool schemas\n"
            f"sent with every request grow from {rows[0].openai:,} tokens (built-in only) to {rows[1].openai:,} with "
            f"one external provider\n(allowed), then {then} with {with_n} (refused).\n")


def _provider_table(report: Any) -> str:
    """The tools array with the two providers that need no server, alone and together (what rule 1 refuses)."""
    from ironmem.analysis import TokenCounter
    from ironmem.providers.local_vector import LocalVectorProvider
    from ironmem.providers.mem0 import Mem0Provider

    counter = TokenCounter(report.encoding, require_exact=True)
    builtin = _builtin_schemas()
    vector, mem0 = LocalVectorProvider().tool_schemas(), Mem0Provider().tool_schemas()

    def size(tools: list[Any]) -> str:
        return f"{counter.count_tools(tools):,} ({counter.count_tools(tools, 'anthropic'):,})"

    base, both = counter.count_tools(builtin), counter.count_tools([*builtin, *vector, *mem0])
    second = (both - base) / 2
    rows = [("built-in only (`memory`, `session_search`)", builtin),
            (f"built-in + `local_vector` ({len(vector)} tools)", [*builtin, *vector]),
            (f"built-in + `mem0` ({len(mem0)} tools)", [*builtin, *mem0]),
            ("built-in + both (what rule 1 refuses)", [*builtin, *vector, *mem0])]
    lines = ["| tools sent | tokens per request |", "| --- | --- |", *[f"| {label} | {size(t)} |" for label, t in rows]]
    return ("\n".join(lines) + "\n\n"
            f"A second provider adds about {round(second, -1):,.0f} tokens to every request, "
            f"{second / report.fence_overhead:.0f} times the whole fence overhead\n({report.fence_overhead} tokens): "
            f"over a 50-turn session that is about {round(50 * second, -2):,.0f} extra input tokens before any "
            "caching.\n")


def _builtin_schemas() -> list[Any]:
    from ironmem import MemoryManager

    with tempfile.TemporaryDirectory(prefix="ironmem-figures-") as home, MemoryManager(home=home) as manager:
        return list(manager.tool_schemas())


#: Region name -> what produces its text from the report.
FIGURES: dict[str, Callable[[Any], str]] = {"builtin-tokens": _builtin_table, "what-if": _what_if,
                                            "provider-tools": _provider_table}


def render(markdown: str, report: Any) -> str:
    """``markdown`` with every figures region regenerated; an unknown region name is an error."""

    def fill(m: re.Match[str]) -> str:
        name = m["name"]
        if name not in FIGURES:
            raise KeyError(f"unknown figures region {name!r}; known: {', '.join(FIGURES)}")
        return m.group(1) + "\n" + FIGURES[name](report) + "\n" + m.group(4)  # blank lines: Markdown blocks

    return REGION.sub(fill, markdown)


def pages() -> list[Path]:
    return [p for p in sorted((REPO / "docs").rglob("*.md")) if "<!-- figures: " in p.read_text(encoding="utf-8")]


def stale(report: Any | None = None) -> list[str]:
    """The regions whose committed text differs from the figures measured now (``page: region``)."""
    report = report or _report()
    out = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        fresh = render(text, report)
        old = {m["name"]: m["body"] for m in REGION.finditer(text)}
        new = {m["name"]: m["body"] for m in REGION.finditer(fresh)}
        out += [f"{page.relative_to(REPO)}: {name}" for name in old if old[name] != new[name]]
    return out


# -- mkdocs hook -------------------------------------------------------------------------------------
_HOOK_REPORT: list[Any] = []


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs hook: the page as built carries the figures measured now (unchanged when the encoding is missing)."""
    if "<!-- figures: " not in markdown:
        return markdown
    if not _HOOK_REPORT:
        from ironmem.core.errors import EncodingUnavailableError

        try:
            _HOOK_REPORT.append(_report())
        except EncodingUnavailableError:
            _HOOK_REPORT.append(None)  # offline: the committed figures stay (tests check them where exact)
    report = _HOOK_REPORT[0]
    return markdown if report is None else render(markdown, report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a region is stale; change nothing")
    args = parser.parse_args(argv)
    report = _report()
    if args.check:
        bad = stale(report)
        for region in bad:
            print(f"stale figures: {region} (run python tools/doc_figures.py)", file=sys.stderr)
        return 1 if bad else 0
    for page in pages():
        text = page.read_text(encoding="utf-8")
        fresh = render(text, report)
        if fresh != text:
            page.write_text(fresh, encoding="utf-8")
            print(f"updated {page.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
