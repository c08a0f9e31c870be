"""Printing the demo's record and token reports with rich."""

from __future__ import annotations

import json
from typing import Any

from .cache import REQUEST_GAP_S, SESSION_GAP_S
from .records import DemoResult


def print_demo(result: DemoResult, console: Any) -> None:
    """Print a :class:`DemoResult` with rich."""
    from rich.panel import Panel
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    loop = {
        "langchain": "LangChain create_agent + IronMemoryMiddleware",
        "llama-index": "LlamaIndex FunctionAgent + IronMemory",
    }.get(result.framework, "the core API (Session), no agent framework")
    console.print(Text(f"ironmem demo: {loop}, model: {result.model}", style="bold"))
    console.print(Text(f"memory home: {result.home}", style="dim"))
    by_number = {r.number: r for r in result.requests}
    first_hash: dict[int, str] = {}
    for turn in result.turns:
        if turn.turn == 1:
            console.print(Rule(f"session {turn.session}"))
            snapshot = result.snapshots.get(turn.session, "")
            title = f"session {turn.session}: frozen memory block of the system prompt"
            console.print(Panel(Text(snapshot), title=title, title_align="left", border_style="cyan"))
        console.print(Text(f"[session {turn.session}, turn {turn.turn}] user: {turn.user}", style="bold"))
        if turn.recall_fenced:
            console.print(
                Panel(
                    Text(turn.recall_fenced),
                    title="fenced recall sent before the user's text",
                    title_align="left",
                    border_style="magenta",
                )
            )
        else:
            console.print(Text("  fenced recall: (nothing to recall)", style="dim"))
        for number in turn.requests:
            request = by_number[number]
            first = first_hash.setdefault(request.session, request.system_hash)
            same = "same as the session's first request" if request.system_hash == first else "CHANGED"
            console.print(
                Text(
                    f"  request {number}: system prompt sha256 {request.system_hash[:12]} ({same}), "
                    f"{len(request.messages)} messages, {len(request.tools)} tools"
                )
            )
        for call in turn.tool_calls:
            label = "memory write" if call["name"] == "memory" else "tool call"
            console.print(
                Text(
                    f"  {label}: {call['name']}({json.dumps(call['args'], ensure_ascii=False)})",
                    style="yellow",
                )
            )
            console.print(Text(f"    -> {_clip(call['result'], 240)}", style="yellow"))
        console.print(Text(f"  assistant: {turn.answer}", style="green"))

    console.print(Rule("what stayed constant"))
    table = Table(title="system prompt per request", title_justify="left")
    for column in (
        "request",
        "session",
        "turn",
        "system prompt sha256",
        "messages",
        "fence in last user msg",
    ):
        table.add_column(column)
    for request in result.requests:
        table.add_row(
            str(request.number),
            str(request.session),
            str(request.turn),
            request.system_hash[:16],
            str(len(request.messages)),
            "yes" if request.recall_fenced else "-",
        )
    console.print(table)
    for session in sorted(result.snapshots):
        hashes = set(result.hashes(session))
        verdict = "constant" if len(hashes) == 1 else f"{len(hashes)} different hashes"
        console.print(
            Text(f"session {session}: {len(result.hashes(session))} requests, system prompt {verdict}")
        )

    console.print(Rule("tokens"))
    if result.tokens_estimated:
        console.print(Text(f"token and cache figures are ESTIMATES: {result.tokens_estimated}", style="yellow"))
    if result.token_report is not None:
        print_token_report(result.token_report, console)
    if result.cache:
        _print_cache(result, console)
    if result.usage is not None:
        console.print(Rule(f"cached tokens reported by {result.model}"))
        u = result.usage
        console.print(
            Text(
                f"{u['requests']} responses with usage: {u['input_tokens']:,} input tokens, {u['cache_read']:,} read "
                f"from cache ({u['cached_share']:.1%}), {u['cache_write']:,} written to cache"
            )
        )
    console.print(Text(f"done in {result.seconds:.1f}s", style="dim"))


def _print_cache(result: DemoResult, console: Any) -> None:
    from rich.rule import Rule
    from rich.table import Table

    console.print(Rule("prefix cache over the demo's recorded requests (simulated)"))
    cache = Table(
        title=f"requests {REQUEST_GAP_S:g}s apart, sessions {SESSION_GAP_S:g}s apart", title_justify="left"
    )
    for column in ("policy", "input tokens", "cached", "cached share", "input cost", "without cache"):
        cache.add_column(column, justify="left" if column == "policy" else "right")
    for row in result.cache:
        cache.add_row(
            row["policy"],
            f"{row['input_tokens']:,}",
            f"{row['cached_tokens']:,}",
            f"{row['cached_share']:.1%}",
            f"${row['cost_usd']:.5f}",
            f"${row['cost_without_cache_usd']:.5f}",
        )
    console.print(cache)
    per = Table(title="cached tokens per request", title_justify="left")
    per.add_column("request")
    per.add_column("session")
    per.add_column("tokens", justify="right")
    for row in result.cache:
        per.add_column(row["policy"], justify="right")
    for i, request in enumerate(result.requests):
        tokens = result.cache[0]["per_request"][i]["tokens"] if result.cache else 0
        per.add_row(
            str(request.number),
            str(request.session),
            f"{tokens:,}",
            *[f"{row['per_request'][i]['cached']:,}" for row in result.cache],
        )
    console.print(per)


def _clip(text: str, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def print_token_report(report: Any, console: Any) -> None:
    """Render a :class:`~ironmem.analysis.tokens.TokenReport` as rich tables."""
    from rich.table import Table
    from rich.text import Text

    label = report.encoding if report.exact else f"{report.encoding} unavailable offline: ESTIMATES"
    summary = Table(title=f"memory cost in tokens ({label})", title_justify="left")
    summary.add_column("item")
    summary.add_column("tokens", justify="right")
    summary.add_row("fence overhead (tags + system note)", f"{report.fence_overhead:,}")
    summary.add_row(f"frozen snapshot ({report.snapshot_chars:,} chars)", f"{report.snapshot:,}")
    recall = "-" if report.last_recall is None else f"{report.last_recall:,}"
    summary.add_row("last recall (fenced)", recall)
    console.print(summary)
    tools = Table(title="memory tool schemas as sent", title_justify="left")
    tools.add_column("tool")
    tools.add_column("provider")
    tools.add_column("OpenAI", justify="right")
    tools.add_column("Anthropic", justify="right")
    for t in report.tools:
        tools.add_row(t.name, t.provider, f"{t.openai:,}", f"{t.anthropic:,}")
    tools.add_row(
        Text("tools array", style="bold"), "", f"{report.tools_openai:,}", f"{report.tools_anthropic:,}"
    )
    console.print(tools)
    if report.what_if:
        what_if = Table(
            title=f"if N external providers were allowed ({report.what_if_source})", title_justify="left"
        )
        for column in ("N", "tools", "OpenAI", "Anthropic", "rule 1"):
            what_if.add_column(column, justify="right" if column != "rule 1" else "left")
        for row in report.what_if:
            verdict = Text("allowed", style="green") if row.allowed else Text("refused", style="red")
            what_if.add_row(
                str(row.external_providers), str(row.tools), f"{row.openai:,}", f"{row.anthropic:,}", verdict
            )
        console.print(what_if)
    elif report.what_if_source:
        console.print(Text(f"what-if table: {report.what_if_source}", style="dim"))


